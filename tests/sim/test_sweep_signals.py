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
                               text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        deadline = time.monotonic() + 30
        while len(_children(process.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        workers = _children(process.pid)
        assert len(workers) >= 2, "the pool's workers did not start"
        time.sleep(0.5)
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
