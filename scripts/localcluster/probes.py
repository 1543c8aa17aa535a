"""Whether the cluster's daemons answer, and the small file-system steps around them
(scripts/local-cluster's probes).

Plain Python 3 standard library only, like the script.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
from pathlib import Path

from .base import run, say
from .hosts import HEAD_ADDRESS


def munge_log(log_file: Path) -> None:
    log_file.touch()
    shutil.chown(log_file, "munge", "munge")
    os.chmod(log_file, 0o640)


def mariadb_answers(socket_path: str) -> bool:
    result = run(["mariadb-admin", "--no-defaults", f"--socket={socket_path}", "-u", "root",
                  "ping"], check=False, timeout=10)
    return result.returncode == 0 and "alive" in result.stdout


def slurmctld_answers() -> bool:
    result = run(["scontrol", "ping"], check=False, timeout=15)
    return result.returncode == 0 and " is UP" in result.stdout


def scratch_mounted(scratch: Path) -> bool:
    """The scratch mount serves ``scratch``: mountinfo lists a fuse.scratchkeeper mount there
    and it answers (a killed instance's mount is listed too, but answers ENOTCONN)."""
    target = os.path.realpath(scratch)
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as info:
            listed = any(len(f) > 8 and f[4].replace("\\040", " ") == target and
                         f[f.index("-") + 1] == "fuse.scratchkeeper"
                         for f in (line.split() for line in info) if "-" in f)
        return listed and os.path.isdir(scratch) and bool(os.statvfs(scratch))
    except OSError:
        return False


def detach_stale_mount(scratch: Path) -> None:
    """A scratch mount whose process was killed (kill -9, a machine's jobs killed at the end of
    a CI run) stays listed and answers ENOTCONN to everything, the stat of `up` first: detach it
    lazily so that `up` mounts again, as `scratchkeeper mount` does for its own mount point.
    statfs, not stat: the kernel may still answer a stat from attributes it cached."""
    try:
        os.statvfs(scratch)
    except OSError as err:
        if err.errno != errno.ENOTCONN:
            return
        say(f"mount: {scratch} is the dead mount of a killed instance; detaching it")
        run(["fusermount3", "-u", "-z", str(scratch)], timeout=30)


def socket_answers(path: Path) -> bool:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(2)
            sock.connect(str(path))
            return True
    except OSError:
        return False


def ftp_banner(port: int) -> bool:
    try:
        with socket.create_connection((HEAD_ADDRESS, port), timeout=2) as sock:
            sock.settimeout(2)
            return sock.recv(64).startswith(b"220")
    except OSError:
        return False
