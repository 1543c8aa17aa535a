"""Running scratchkeeper as a plain user in tests (users' jobs, data jobs made with --uid).

The test interpreter and the checkout may live where other users cannot enter (/root). Where
scripts/local-cluster installed the runtime every user runs (/usr/local/bin/scratchkeeper) from
the checkout's current sources, tests run that, as a site's users do; elsewhere the package,
its templates and the dependencies a test needs are copied into a world-readable folder and run
with the system interpreter of the same Python version.
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import importlib.util
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
LOCAL_CLUSTER_SCRIPT = REPO / "scripts" / "local-cluster"
PLAIN_USER = "skplain"
#: what the command line imports beyond the standard library
DEPENDENCIES = ("jinja2", "markupsafe", "crc32c")


def plain_python() -> str:
    """The system interpreter of this Python version (every user may run it)."""
    python = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if not os.path.exists(python):
        pytest.skip(f"{python} is not installed")
    return python


def ensure_system_user(name: str, group: str | None = None) -> pwd.struct_passwd:
    """The test user ``name`` (a system user, no home), created when missing, a member of the
    system group ``group`` (also created) when one is named. Test workers run side by side
    (pytest-xdist): a lock file makes the check and the creation one step."""
    import fcntl
    import grp

    def run(*argv: str) -> None:
        subprocess.run(argv, check=True, capture_output=True, timeout=30)

    with open("/run/scratchkeeper-test-users.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if group is not None:
            try:
                grp.getgrnam(group)
            except KeyError:
                run("groupadd", "--system", group)
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            run("useradd", "--system", "--no-create-home", "--shell", "/bin/sh",
                *(("-G", group) if group else ()), name)
            entry = pwd.getpwnam(name)
        if group is not None and name not in grp.getgrnam(group).gr_mem:
            run("usermod", "-aG", group, name)
    return entry


def plain_user() -> tuple[int, int]:
    """uid and gid of the unprivileged test user ``skplain``, created when missing."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run a process as another user")
    entry = ensure_system_user(PLAIN_USER)
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
    for root, _dirs, files in os.walk(destination):
        os.chmod(root, 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    return destination


def local_cluster_script():
    """scripts/local-cluster loaded as a module (it has no .py suffix), loaded once."""
    name = "local_cluster_script"
    if name not in sys.modules:
        loader = importlib.machinery.SourceFileLoader(name, str(LOCAL_CLUSTER_SCRIPT))
        module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
        sys.modules[name] = module  # dataclasses look their module up there
        loader.exec_module(module)
    return sys.modules[name]


def installed_runtime() -> str | None:
    """The runtime scripts/local-cluster installed, when it holds the checkout's current
    sources (else None: it would test other code than this checkout's)."""
    script = local_cluster_script()
    runtime = script.Runtime()
    if not os.access(runtime.link, os.X_OK):
        return None
    if runtime.installed_digest() != script.source_digest():
        return None
    return str(runtime.link)


def user_runtime(folder: Path) -> list[str]:
    """The command line (argv) of a scratchkeeper that any user can run: the installed runtime
    when current, else a copy under ``folder``."""
    installed = installed_runtime()
    if installed:
        return [installed]
    library = world_readable_copy(folder / "pylib", DEPENDENCIES)
    os.chmod(folder, 0o755)
    return ["env", f"PYTHONPATH={library}", plain_python(), "-m", "scratchkeeper"]


def as_user(uid: int, gid: int, action, *, umask: int = 0o022) -> tuple[int, str]:
    """Run ``action()`` in a child process with ``uid``/``gid``; (exit status, error name)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns to pytest
        status, message = 0, b""
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            os.umask(umask)
            action()
        except OSError as err:
            status, message = 1, type(err).__name__.encode()
        except BaseException as err:  # noqa: BLE001 - reported to the parent
            status, message = 2, repr(err).encode()
        finally:
            os.write(write_end, message)
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        message = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), message
