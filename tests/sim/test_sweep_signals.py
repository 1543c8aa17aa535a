"""A local sweep stopped by SIGTERM or Ctrl-C stops its workers too (none left running)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from scratchkeeper.sim import DATA_DIR
from waiting import wait_for

REPO = Path(__file__).resolve().parents[2]

# The real sweep and pool; only the task itself is a long sleep, so the signal surely arrives
# while every worker is busy.
_DRIVER = textwrap.dedent("""
    import sys, time
    from scratchkeeper.sim import sweep
    def slow_task(plan, index, output):
        time.sleep(120)
        return 1
    sweep.run_task = slow_task
    plan = sweep.load_sweep(sys.argv[1])
    try:
        sweep.run_local(plan, sys.argv[2], 2)
    except sweep.SweepStopped as err:
        print(err, flush=True)
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
""")


def _as_from_a_terminal() -> None:
    """In the child before its exec: SIGINT as an interactive shell leaves it to a foreground
    job (Python then raises KeyboardInterrupt on it). A suite started in the background by a
    non-interactive shell inherits SIGINT ignored, and an ignored signal stays ignored across
    exec: the sweep would never see the Ctrl-C this test sends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def _in_the_task(pid: int) -> bool:
    """Whether the worker runs the task (asleep in its time.sleep): where the kernel says where
    a task waits (wchan), in a nanosleep, not in the read of the pool's queue; where it does
    not, asleep at all."""
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    wchan = Path(f"/proc/{pid}/wchan").read_text().strip()
    return state == "S" and (wchan in ("", "0") or "nanosleep" in wchan)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stopped_sweep_leaves_no_worker_running(tmp_path, signum, code):
    sweep_file = tmp_path / "sweep.toml"
    sweep_file.write_text(f"""
[replay]
trace = "{os.path.join(DATA_DIR, 'RICC-2010-2-first5000.swf.gz')}"
limit = 100

[[grid]]
stripe_count = [2, 4, 8, 16]
""")
    process = subprocess.Popen([sys.executable, "-c", _DRIVER, str(sweep_file),
                                str(tmp_path / "out")], cwd=REPO, stdout=subprocess.PIPE,
                               text=True, env=dict(os.environ, PYTHONPATH=str(REPO)),
                               preexec_fn=_as_from_a_terminal)
    try:
        deadline = time.monotonic() + 30
        while len(_children(process.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        workers = _children(process.pid)
        assert len(workers) >= 2, "the pool's workers did not start"
        wait_for(lambda: all(_in_the_task(w) for w in workers), "every worker in its task")
        process.send_signal(signum)
        assert process.wait(timeout=30) == code
        deadline = time.monotonic() + 10
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [w for w in workers if _alive(w)], "workers left running after the sweep"
    finally:
        if process.poll() is None:
            process.kill()
        for worker in _children(process.pid):
            os.kill(worker, signal.SIGKILL)
