"""recoveryd stops on a SIGTERM the kernel hands to one of its worker threads.

The signal goes to one thread (``tgkill``), as the kernel may deliver a process's SIGTERM to any
thread that does not block it. Python runs the handler in the main thread only: before
``scratchkeeper.stopping``, a main thread asleep for the check interval (an hour here) saw it an
hour late, and CI's crash test met it as a daemon that would not stop.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from pathlib import Path

from waiting import wait_for

from .conftest import start_recoveryd, stop_recoveryd, write_site


def _asleep_in_select(pid: int) -> bool:
    """Whether the main thread sleeps in a select(2) (a slice of ``stopping.sleep``): where the
    kernel says where a task waits (wchan), in the function select and poll sleep in; where it
    does not, asleep at all."""
    task = Path(f"/proc/{pid}/task/{pid}")
    state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
    wchan = (task / "wchan").read_text().strip()
    return state == "S" and (wchan in ("", "0") or wchan.startswith("poll_schedule_timeout"))


def _tgkill(pid: int, tid: int, signum: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.tgkill(pid, tid, signum) != 0:
        raise OSError(ctypes.get_errno(), f"tgkill {pid} {tid}")


def test_a_sigterm_taken_by_a_worker_thread_stops_recoveryd_at_once(site_dir):
    site = write_site(site_dir, ost_count=4, extra="[recovery]\ncheck_interval = 3600.0")
    daemon = start_recoveryd(site)
    try:
        workers = [int(tid) for tid in os.listdir(f"/proc/{daemon.pid}/task")
                   if int(tid) != daemon.pid]
        assert workers, "recoveryd runs its file workers and socket in threads"
        wait_for(lambda: _asleep_in_select(daemon.pid),
                 "recoveryd's main thread asleep in its hour-long wait")
        began = time.monotonic()
        _tgkill(daemon.pid, workers[0], signal.SIGTERM)
        assert daemon.wait(timeout=20) == 0
        assert time.monotonic() - began < 10
    finally:
        if daemon.poll() is None:
            stop_recoveryd(site, daemon, timeout=5)
