"""scripts/bootstrap builds the checkout's virtualenv on an interpreter every user may run.

A virtualenv links to the interpreter it was made from. Built from the first ``python3`` on
PATH, it linked to pyenv's under ``/root`` (mode 0700) on this machine, and plain users could not
run ``.venv/bin/scratchkeeper`` at all.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _runs_as(user: tuple[int, int], program: str) -> bool:
    uid, gid = user
    try:
        result = subprocess.run([program, "-c", "pass"], user=uid, group=gid, extra_groups=[],
                                env={"PATH": "/usr/bin:/bin"}, cwd="/", capture_output=True,
                                timeout=60)
    except PermissionError:  # the exec itself refused: a directory on the way is closed
        return False
    return result.returncode == 0


def test_the_virtualenvs_interpreter_is_one_every_user_may_run(skplain):
    venv_python = REPO / ".venv" / "bin" / "python"
    if not venv_python.exists():
        pytest.skip("no .venv: scripts/bootstrap has not run in this checkout")
    user = skplain
    interpreter = os.path.realpath(venv_python)
    assert _runs_as(user, interpreter), (
        f"{interpreter} (the interpreter of .venv) cannot be run by a plain user")


def test_bootstrap_says_when_the_interpreter_it_is_given_is_private(tmp_path, skplain):
    """Given an interpreter other users cannot run, bootstrap says so (and how to mend it)."""
    user = skplain
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    os.chmod(tmp_path, 0o700)
    (private / "python3").symlink_to(sys.executable)
    # the real interpreter must be private for the check to mean anything: copy a wrapper
    wrapper = private / "python3w"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o700)
    assert not _runs_as(user, str(wrapper))
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    script = (REPO / "scripts" / "bootstrap").read_text()
    # only the interpreter part: stop before pip runs (no network use, nothing installed)
    head = script.split(".venv/bin/python -m pip", 1)[0]
    (checkout / "scripts" / "bootstrap").write_text(head + "exit 0\n")
    venv = checkout / ".venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(wrapper)
    # SCRATCHKEEPER_SLURM2411=0: a Slurm 24.11 prefix older than the script is not rebuilt here
    result = subprocess.run(["bash", str(checkout / "scripts" / "bootstrap")],
                            env={"PATH": "/usr/bin:/bin", "PYTHON": str(wrapper),
                                 "SCRATCHKEEPER_SLURM2411": "0"},
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "not executable by other users" in result.stderr
    assert "PYTHON=/usr/bin/python3" in result.stderr
