"""``scratchkeeper mount``'s command line: bad input is one line and exit 2; SIGTERM unmounts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from conftest import OP_TIMEOUT, mounted, write_config


def _mount(config, mountpoint) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scratchkeeper", "mount", str(mountpoint),
                           "-c", str(config)], capture_output=True, text=True,
                          timeout=OP_TIMEOUT)


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="the mount runs as root (checked first)")
def test_a_bad_mount_point_is_one_line_and_exit_2(tmp_path):
    config, _ = write_config(tmp_path)
    result = _mount(config, tmp_path / "missing")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "missing" in result.stderr and "No such file" in result.stderr
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    result = _mount(config, tmp_path / "full")
    assert result.returncode == 2 and "not an empty directory" in result.stderr
    result = _mount(config, tmp_path / "full" / "x")
    assert result.returncode == 2 and "not a directory" in result.stderr


def test_sigterm_unmounts_and_exits_0(mnt):
    (mnt.root / "f").write_bytes(b"kept")
    mnt.process.send_signal(signal.SIGTERM)
    assert mnt.process.wait(timeout=OP_TIMEOUT) == 0
    mnt.process = None
    assert not mounted(mnt.root)
    assert (mnt.mdt / "f").stat().st_size == 4
