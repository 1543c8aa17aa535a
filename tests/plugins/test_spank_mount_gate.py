"""The SPANK plugin's scratch-mount gate and its lines on the job's output, on a private scratch
mount (killed with -9: ENOTCONN; SIGSTOPped: hung), without a cluster: tests/plugins/
spank_harness.c is compiled with the plugin's source and plays slurmstepd (the job prolog in the
job script context, a task's init in the remote context). The cluster test
(test_dead_mount_cluster.py) shows Slurm acting on the same hooks."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from . import test_healthcheck as healthcheck
from .test_healthcheck import HEALTHCHECK, REASON, Scontrol, restart

make_mount = healthcheck.make_mount  # the fixture of tests/mount, for this module too

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "slurm-plugins" / "spank_scratchkeeper.c"
HARNESS = Path(__file__).resolve().parent / "spank_harness.c"


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Path:
    if not Path("/usr/include/slurm/spank.h").exists():
        pytest.skip("no <slurm/spank.h> (libslurm-dev)")
    binary = tmp_path_factory.mktemp("harness") / "spank_harness"
    subprocess.run(["cc", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-o", str(binary),
                    str(HARNESS), str(PLUGIN), "-lmunge"], check=True, capture_output=True,
                   timeout=120)
    return binary


@pytest.fixture
def scontrol(tmp_path) -> Scontrol:
    return Scontrol(tmp_path / "bin", "node5")


def run(harness: Path, mode: str, *args: str, env: dict | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([str(harness), mode, *args], capture_output=True, text=True,
                          timeout=timeout, env={"PATH": "/usr/bin:/bin", **(env or {})})


def test_the_prolog_refuses_a_job_on_a_killed_mount_and_drains_the_node(
        harness, make_mount, scontrol, tmp_path):
    mount = make_mount()
    mount.kill()
    env = {"SLURMD_NODENAME": "node5", "PATH": f"{scontrol.folder}:/usr/bin:/bin"}
    result = run(harness, "prolog", f"scratch={mount.root}", f"healthcheck={HEALTHCHECK}",
                 f"socket={tmp_path}/none.sock", env=env)
    assert result.returncode == 1  # "required": the prolog fails, Slurm requeues the job
    assert (f"error: scratchkeeper: job 42: scratch mount {mount.root} on node5 is down "
            f"(Transport endpoint is not connected): job refused, Slurm requeues it; the node "
            f"is drained until the mount is back") in result.stdout
    # the health check ran first, on this node, and drained it with its own reason (which it
    # alone lifts; Slurm leaves a node drained already as it is)
    assert scontrol.node == {"name": "node5", "state": "IDLE+DRAIN",
                             "reason": f"{REASON} {mount.root} is down (Transport endpoint is "
                                       f"not connected)"}
    assert "recovery service" not in result.stdout  # refused before asking recoveryd


def test_the_prolog_passes_a_live_mount(harness, make_mount, tmp_path):
    mount = make_mount()
    result = run(harness, "prolog", f"scratch={mount.root}/", f"socket={tmp_path}/none.sock")
    assert result.returncode == 0, result.stdout
    assert "scratch mount" not in result.stdout
    assert "recovery service unreachable" in result.stdout


def test_the_prolog_gives_up_on_a_hung_mount(harness, make_mount, tmp_path):
    mount = make_mount()
    assert mount.process is not None
    healthcheck.hang(mount.process.pid)
    try:
        started = time.monotonic()
        result = run(harness, "prolog", f"scratch={mount.root}", "mount_timeout=1",
                     f"socket={tmp_path}/none.sock", timeout=30)
        took = time.monotonic() - started
    finally:
        os.kill(mount.process.pid, signal.SIGCONT)
    assert result.returncode == 1
    assert "is down (statfs did not answer within 1s): job refused" in result.stdout
    assert took < 10, f"{took:.1f}s with mount_timeout=1"


def test_a_plain_directory_is_refused_as_not_mounted(harness, tmp_path):
    (tmp_path / "scratch").mkdir()
    result = run(harness, "prolog", f"scratch={tmp_path}/scratch", f"socket={tmp_path}/s")
    assert result.returncode == 1
    assert "is down (not mounted): job refused, Slurm requeues it\n" in result.stdout


def serve_once(path: Path, reply: dict) -> threading.Thread:
    """A recoveryd stand-in answering one check-job request."""
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(1)

    def answer():
        connection, _ = server.accept()
        with connection:
            connection.recv(4096)
            connection.sendall(json.dumps(reply).encode() + b"\n")
        server.close()

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("argument,code", [(None, 1), ("lost_input=refuse", 1),
                                           ("lost_input=run", 0)])
def test_a_lost_input_refuses_the_job_unless_lost_input_run(harness, make_mount, tmp_path,
                                                             argument, code):
    mount = make_mount()
    sock = tmp_path / "r.sock"
    thread = serve_once(sock, {"ok": True, "whole": False, "reason": "OST 3 lost, no source"})
    args = [f"scratch={mount.root}", f"socket={sock}"] + ([argument] if argument else [])
    result = run(harness, "prolog", *args)
    thread.join(10)
    assert result.returncode == code
    assert "staged input not whole: OST 3 lost, no source" in result.stdout


def test_a_reply_longer_than_64_kib_is_read_whole(harness, make_mount, tmp_path):
    """A check-job reply of a job with many inputs (the service puts "ok" last): read to its
    end, not cut at a buffer's size into a reply without "ok" (a refusal)."""
    mount = make_mount()
    sock = tmp_path / "r.sock"
    files = [{"path": f"/scratch/u/{i:06d}.dat", "whole": True} for i in range(2000)]
    reply = {"job_id": "7", "whole": True, "files": files, "reason": "", "ok": True}
    assert len(json.dumps(reply)) > 64 << 10
    thread = serve_once(sock, reply)
    result = run(harness, "prolog", f"scratch={mount.root}", f"socket={sock}")
    thread.join(10)
    assert result.returncode == 0, result.stdout
    assert "staged inputs whole" in result.stdout and "refused" not in result.stdout


def test_a_failed_epilog_is_logged_and_never_fails(harness):
    """Under "required" a failing epilog would drain the node: telling replicad is not worth it."""
    result = run(harness, "epilog", "scratchkeeper=/bin/false")
    assert result.returncode == 0
    assert "could not tell the replication daemon the job ended: /bin/false exited 1" in \
        result.stdout


def test_a_task_on_a_dead_mount_says_so_on_the_jobs_stderr(harness, make_mount):
    mount = make_mount()
    mount.kill()
    result = run(harness, "task", "0", f"scratch={mount.root}", "watch=0",
                 env={"SLURMD_NODENAME": "node2", "HARNESS_STEP": "3"})
    assert result.returncode == 0  # the task runs: it may not use the scratch file system
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("scratchkeeper: 20") and lines[0].endswith(
        f": the scratch mount {mount.root} on node2 is down (Transport endpoint is not "
        f"connected): files under it cannot be read or written until it is mounted again")


def test_a_task_on_a_live_mount_says_nothing(harness, make_mount):
    mount = make_mount()
    quiet = run(harness, "task", "0", f"scratch={mount.root}", "watch=0")
    assert quiet.returncode == 0 and quiet.stderr == ""


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                status = (entry / "status").read_text()
            except OSError:
                continue
            if f"\nPPid:\t{pid}\n" in status:
                found.append(int(entry.name))
    return found


def wait_for_text(path: Path, text: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        content = path.read_text()
        if text in content:
            return content
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not in {path} after {timeout}s: {path.read_text()!r}")


def test_the_batch_scripts_watcher_reports_the_outage_and_the_return(harness, make_mount,
                                                                      tmp_path):
    mount = make_mount()
    output = tmp_path / "slurm-42.out"
    with open(output, "w") as stderr:
        task = subprocess.Popen([str(harness), "task", "120", f"scratch={mount.root}",
                                 "watch=1"], stderr=stderr, stdout=subprocess.DEVNULL,
                                env={"PATH": "/usr/bin:/bin", "SLURMD_NODENAME": "node4"})
    try:
        deadline = time.monotonic() + 10
        while not children(task.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        watchers = children(task.pid)
        assert len(watchers) == 1, watchers
        assert output.read_text() == ""  # the mount is up: nothing said
        mount.kill()
        text = wait_for_text(output, "went down")
        assert f"the scratch mount {mount.root} on node4 went down (Transport endpoint is " \
               f"not connected): files under it cannot be read or written until it is " \
               f"mounted again" in text
        restart(mount)
        text = wait_for_text(output, "is back")
        assert f"the scratch mount {mount.root} on node4 is back: files opened before it " \
               f"went down stay unusable, open them again" in text
        assert len(text.splitlines()) == 2
    finally:
        task.kill()
        task.wait(timeout=30)
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() and "Z" not in
              Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[:1]
              for pid in watchers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(Path(f"/proc/{pid}/status").exists() and
                   "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
                   for pid in watchers), "the watcher outlived its task"


def test_only_the_batch_script_gets_a_watcher(harness, make_mount):
    mount = make_mount()
    task = subprocess.Popen([str(harness), "task", "5", f"scratch={mount.root}", "watch=1"],
                            env={"PATH": "/usr/bin:/bin", "HARNESS_STEP": "0"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1)
        assert children(task.pid) == []
    finally:
        task.kill()
        task.wait(timeout=30)


@pytest.mark.parametrize("argument,message", [
    ("scratch=relative", "scratch=relative: expected an absolute path"),
    ("mount_timeout=0", "mount_timeout=0: expected 1 to 60 seconds"),
    ("watch=-1", "watch=-1: expected 0 to 3600 seconds"),
    ("lost_input=maybe", "unknown plugstack argument 'lost_input=maybe'"),
])
def test_bad_plugstack_arguments_fail_with_one_line(harness, argument, message):
    result = run(harness, "task", "0", argument)
    assert result.returncode == 1
    assert result.stdout == f"error: scratchkeeper: {message}\n"
