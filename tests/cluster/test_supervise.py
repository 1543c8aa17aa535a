"""scripts/localcluster/supervise.py and the local cluster's supervised daemons (the scratch
mount), on private commands: the running cluster is never touched."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from user_runtime import local_cluster_script

REPO = Path(__file__).resolve().parents[2]
SUPERVISOR = REPO / "scripts" / "localcluster" / "supervise.py"

# A stand-in daemon: records its pid and each SIGTERM it gets, and ends on SIGTERM with 0.
DAEMON = """
import os, signal, sys, time
record = sys.argv[1]
def term(signum, frame):
    with open(record, "a") as f:
        f.write(f"TERM {os.getpid()}\\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
with open(record, "a") as f:
    f.write(f"START {os.getpid()}\\n")
while True:
    time.sleep(1)
"""


@pytest.fixture(scope="module")
def script():
    return local_cluster_script()


def wait_for(predicate, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def events(record: Path) -> list[tuple[str, int]]:
    if not record.exists():
        return []
    return [(word, int(pid)) for word, pid in
            (line.split() for line in record.read_text().splitlines())]


@pytest.fixture
def supervised(script, tmp_path):
    """A Daemon with respawn started by Daemon.start, as `up` starts the mount; stopped (and,
    whatever happened, killed) afterwards."""
    layout = script.Layout(tmp_path / "local")
    for directory in (layout.root, layout.log, layout.run):
        directory.mkdir(parents=True)
    record = tmp_path / "record"
    pid_file = layout.run / "standin.pid"
    daemon = script.Daemon("standin", [script.RUNTIME_PYTHON, "-c", DAEMON, str(record)],
                           script.RUNTIME_PYTHON, ready=lambda: bool(events(record)),
                           respawn=0.5)
    status: dict = {}
    daemon.start(layout, status)
    yield daemon, layout, status, record, pid_file
    supervisor = status["pids"]["standin"]
    if alive(supervisor):
        os.kill(supervisor, signal.SIGKILL)
    for _, pid in events(record):
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_killed_command_is_started_again_and_its_pid_recorded(supervised):
    daemon, layout, status, record, pid_file = supervised
    supervisor = status["pids"]["standin"]
    first = read_pid(pid_file)
    assert first and first != supervisor and events(record) == [("START", first)]
    os.kill(first, signal.SIGKILL)
    assert wait_for(lambda: len(events(record)) == 2, 15), events(record)
    second = events(record)[1][1]
    assert second != first and alive(second) and read_pid(pid_file) == second
    assert alive(supervisor)
    log = (layout.log / "standin.out").read_text()
    assert "killed by signal 9" in log and "starting again in" in log


def test_stop_passes_sigterm_waits_and_does_not_restart(script, supervised):
    daemon, layout, status, record, pid_file = supervised
    supervisor = status["pids"]["standin"]
    command = read_pid(pid_file)
    script.stop_pid("standin", supervisor, script.RUNTIME_PYTHON)  # what `down` and `stop` do
    assert not alive(supervisor) and not alive(command)
    assert events(record) == [("START", command), ("TERM", command)]
    assert not pid_file.exists()
    time.sleep(1.5)  # three pauses: nothing started again
    assert len(events(record)) == 2


def test_a_killed_supervisor_takes_its_command_down(supervised):
    daemon, layout, status, record, pid_file = supervised
    command = read_pid(pid_file)
    os.kill(status["pids"]["standin"], signal.SIGKILL)
    assert wait_for(lambda: not alive(command), 10)
    assert ("TERM", command) in events(record)  # PR_SET_PDEATHSIG: a clean stop, no orphan


def test_a_command_that_keeps_dying_is_started_less_often(script, tmp_path):
    supervisor = SUPERVISOR
    pid_file = tmp_path / "failing.pid"
    process = subprocess.Popen([script.RUNTIME_PYTHON, str(supervisor), "--name", "failing",
                                "--pid-file", str(pid_file), "--pause", "0.2", "--",
                                "/bin/false"], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(3)  # it fails at once: three pauses (0.4 + 0.8 s, then 1.6 s) begin in 3 s
    finally:
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=30)
    pauses = [float(line.rsplit(" ", 1)[1].rstrip("s")) for line in out.splitlines()
              if "starting again in" in line]
    assert pauses[:3] == [0.4, 0.8, 1.6], out
    assert "exited with 1" in out and "SIGTERM: stopped" in out
    assert not pid_file.exists()


def test_bad_usage_is_one_line_and_exit_2(script, tmp_path):
    result = subprocess.run([script.RUNTIME_PYTHON, str(SUPERVISOR), "--name", "x",
                             "--pid-file", str(tmp_path / "x.pid"), "--pause", "0"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "no command given" in result.stderr or "--pause" in result.stderr


def test_the_mount_is_supervised_and_status_says_when_it_is_down(script, tmp_path):
    nodes = ["node1"]
    status = {"nodes": nodes, "pids": {}, "state": "up",
              "ports": {"slurmctld": 7001, "slurmdbd": 7002, "mariadb": 7003, "gridftp": 7004,
                        "http": 7005, "slurmd": {"node1": 7100}}}
    cluster = script.Cluster(script.Layout(tmp_path / "local"), status)
    cluster.layout.run.mkdir(parents=True)
    daemons = {d.name: d for d in cluster.daemons()}
    assert daemons["mount"].respawn > 0
    assert daemons["mount"].command(cluster.layout)[:2] == [script.RUNTIME_PYTHON,
                                                            str(SUPERVISOR)]
    assert daemons["mount"].command(cluster.layout)[-len(daemons["mount"].argv):] == \
        daemons["mount"].argv
    assert all(not daemons[name].respawn for name in ("recoveryd", "slurmctld", "nginx"))
    # a supervisor that runs while its command is dead (between a kill -9 and the restart)
    supervisor = subprocess.Popen([script.RUNTIME_PYTHON, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen(["true"])
    dead.wait()
    try:
        status["pids"]["mount"] = supervisor.pid
        (cluster.layout.run / "mount.pid").write_text(f"{dead.pid}\n")
        rows = {name: state for name, _, state in cluster.report()[0]}
        assert rows["mount"] == "DOWN (its supervisor starts it again)"
        (cluster.layout.run / "mount.pid").write_text(f"{supervisor.pid}\n")
        rows = {name: state for name, _, state in cluster.report()[0]}
        assert rows["mount"] == "running"
    finally:
        supervisor.kill()
        supervisor.wait()


def test_supervision_changes_the_digest_so_up_restarts_an_unsupervised_mount(script):
    plain = script.Daemon("mount", ["x"], script.RUNTIME_PYTHON, ready=lambda: True)
    supervised = script.Daemon("mount", ["x"], script.RUNTIME_PYTHON, ready=lambda: True,
                               respawn=2.0)
    assert plain.digest() != supervised.digest()
