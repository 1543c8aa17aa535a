"""Running scratchkeeper as a plain user in tests (users' jobs, data jobs made with --uid).

The test interpreter and the checkout may live where other users cannot enter (/root): the
package, its templates and the dependencies a test needs are copied into a world-readable
folder and run with the system interpreter of the same Python version.
"""

from __future__ import annotations

import importlib.metadata
import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

import scratchkeeper

REPO = Path(__file__).resolve().parents[1]
PLAIN_USER = "skplain"
#: what the command line imports beyond the standard library
DEPENDENCIES = ("jinja2", "markupsafe", "crc32c")


def plain_python() -> str:
    """The system interpreter of this Python version (every user may run it)."""
    python = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if not os.path.exists(python):
        pytest.skip(f"{python} is not installed")
    return python


def plain_user() -> tuple[int, int]:
    """uid and gid of the unprivileged test user ``skplain``, created when missing."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run a process as another user")
    try:
        entry = pwd.getpwnam(PLAIN_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/bin/sh",
                        PLAIN_USER], check=True, capture_output=True, timeout=30)
        entry = pwd.getpwnam(PLAIN_USER)
    return entry.pw_uid, entry.pw_gid


def world_readable_copy(destination: Path, distributions: Iterable[str] = ()) -> Path:
    """Copy the package (templates included) and the named distributions, each with its
    metadata, into ``destination``, readable by every user; the folder to put on sys.path."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(Path(scratchkeeper.__file__).resolve().parent,
                    destination / "scratchkeeper", ignore=ignore)
    templates = destination / "scratchkeeper" / "job_templates"
    if not templates.exists():  # an editable install maps it to job-templates/
        shutil.copytree(REPO / "job-templates", templates, ignore=ignore)
    for name in distributions:
        dist = importlib.metadata.distribution(name)
        for entry in dist.files or ():
            if entry.parts[0] == ".." or "__pycache__" in entry.parts:
                continue  # scripts outside site-packages, caches
            target = destination / entry
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(dist.locate_file(entry), target)
    for root, dirs, files in os.walk(destination):
        os.chmod(root, 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    return destination


def user_runtime(folder: Path) -> list[str]:
    """The command line (argv) of a scratchkeeper under ``folder`` that any user can run."""
    library = world_readable_copy(folder / "pylib", DEPENDENCIES)
    os.chmod(folder, 0o755)
    return ["env", f"PYTHONPATH={library}", plain_python(), "-m", "scratchkeeper"]
