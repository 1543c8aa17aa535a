"""slurm-plugins/scratchkeeper-healthcheck, Slurm's HealthCheckProgram for the scratch mount,
against a private scratch mount (killed with -9 for a real ENOTCONN, stopped with SIGSTOP for a
hung one) and a stand-in ``scontrol`` that keeps a node's state in a file and records every call.
The real cluster is never asked: PATH puts the stand-in first."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEALTHCHECK = REPO / "slurm-plugins" / "scratchkeeper-healthcheck"
REASON = "scratchkeeper: scratch mount"

# the scratch mount fixtures of tests/mount (a folder without __init__.py: loaded by path)
_spec = importlib.util.spec_from_file_location("sk_mount_fixtures",
                                               REPO / "tests" / "mount" / "conftest.py")
assert _spec and _spec.loader
mount_fixtures = sys.modules.setdefault(_spec.name, importlib.util.module_from_spec(_spec))
if not hasattr(mount_fixtures, "make_mount"):
    _spec.loader.exec_module(mount_fixtures)  # dataclasses look their module up in sys.modules
make_mount = mount_fixtures.make_mount

# scontrol as the health check uses it: `show node NAME` prints the node's State= and Reason=
# lines from node.json; `update NodeName=N State=DRAIN Reason=R` and `State=RESUME` change it.
STANDIN = """#!{python}
import json, sys
from pathlib import Path
here = Path(__file__).resolve().parent
with open(here / "calls.jsonl", "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
node = json.loads((here / "node.json").read_text())
args = sys.argv[1:]
if args[:2] == ["show", "node"]:
    if args[2] != node["name"]:
        print(f"Node {{args[2]}} not found", file=sys.stderr)
        sys.exit(1)
    print(f"NodeName={{node['name']}} Arch=x86_64 CoresPerSocket=1")
    print(f"   State={{node['state']}} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A")
    if node.get("reason"):
        print(f"   Reason={{node['reason']}} [root@2026-11-28T09:00:00]")
    sys.exit(0)
if args[0] == "update":
    fields = dict(a.split("=", 1) for a in args[1:])
    if fields["State"] == "DRAIN":
        node["state"] = "IDLE+DRAIN"
        node["reason"] = fields["Reason"]
    elif fields["State"] == "RESUME":
        node["state"] = "IDLE"
        node["reason"] = ""
    (here / "node.json").write_text(json.dumps(node))
    sys.exit(0)
sys.exit(2)
"""


class Scontrol:
    """The stand-in's folder: the node's state and the calls made."""

    def __init__(self, folder: Path, name: str):
        self.folder = folder
        folder.mkdir()
        program = folder / "scontrol"
        program.write_text(STANDIN.format(python=sys.executable))
        program.chmod(0o755)
        self.set(name, "IDLE")

    def set(self, name: str, state: str, reason: str = "") -> None:
        (self.folder / "node.json").write_text(json.dumps(
            {"name": name, "state": state, "reason": reason}))

    @property
    def node(self) -> dict:
        return json.loads((self.folder / "node.json").read_text())

    def updates(self) -> list[list[str]]:
        path = self.folder / "calls.jsonl"
        calls = [json.loads(line) for line in path.read_text().splitlines()] \
            if path.exists() else []
        return [call for call in calls if call[:1] == ["update"]]


@pytest.fixture
def scontrol(tmp_path) -> Scontrol:
    return Scontrol(tmp_path / "bin", "node7")


def _healthcheck_env(scontrol: Scontrol, tmpdir: Path | None = None) -> dict[str, str]:
    """The environment slurmd gives it (SLURMD_NODENAME), with the stand-in first on PATH."""
    env = {"SLURMD_NODENAME": "node7", "PATH": f"{scontrol.folder}:/usr/bin:/bin"}
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    return env


def healthcheck(scontrol: Scontrol, scratch: Path, *extra: str, timeout: float = 60,
                tmpdir: Path | None = None) -> subprocess.CompletedProcess:
    """Run it as slurmd does."""
    return subprocess.run([str(HEALTHCHECK), "--scratch", str(scratch), *extra],
                          env=_healthcheck_env(scontrol, tmpdir), capture_output=True, text=True,
                          timeout=timeout)


def healthcheck_of_a_hung_mount(scontrol: Scontrol, mount) -> tuple[subprocess.CompletedProcess,
                                                                     float]:
    """Run it on a stopped mount with ``--timeout 2``, waiting until its statfs is queued at
    the mount's connection (the check kills the statfs when it gives up: the request is gone
    afterwards); its result and how long it took."""
    before = requests_waiting(mount.root)
    started = time.monotonic()
    check = subprocess.Popen([str(HEALTHCHECK), "--scratch", str(mount.root), "--timeout", "2"],
                             env=_healthcheck_env(scontrol), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        while requests_waiting(mount.root) <= before:
            assert check.poll() is None, "the check ended before its statfs reached the mount"
            time.sleep(0.01)
        out, err = check.communicate(timeout=30)
    finally:
        if check.poll() is None:
            check.kill()
            check.wait()
    took = time.monotonic() - started
    return subprocess.CompletedProcess(check.args, check.returncode, out, err), took


def hang(pid: int) -> None:
    """SIGSTOP the mount's server and wait until none of its threads can answer a request: each
    is stopped (T, t) or inside the kernel (D), where it stops on its way out, before it runs
    any of the server's code again. kill() returns before the threads are stopped, and one
    still running in user space could answer the next request. A thread held in the kernel
    stays there as long as what holds it (a write waiting on another hung file system): its
    stop is nothing the test needs."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while True:
        states = []
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
            except (OSError, IndexError):
                continue
        if states and all(state in ("T", "t", "D") for state in states):
            return
        assert time.monotonic() < deadline, f"the mount's threads did not stop: {states}"
        time.sleep(0.02)


FUSECTL = Path("/sys/fs/fuse/connections")


def fuse_connection(mountpoint: Path) -> Path:
    """/sys/fs/fuse/connections/N of the FUSE mount at ``mountpoint`` (N: its device number,
    /proc/self/mountinfo's third field; the last one listed there, the one on top). The
    fusectl file system is mounted there when it is not (systemd mounts it at boot; a
    container's init may not)."""
    with open("/proc/self/mountinfo", encoding="utf-8") as info:
        lines = info.read().splitlines()
    if not any(line.split(" ")[4] == str(FUSECTL) for line in lines):
        subprocess.run(["mount", "-t", "fusectl", "fusectl", str(FUSECTL)], check=True,
                       capture_output=True, timeout=30)
    found = None
    for line in lines:
        fields = line.split(" ")
        if fields[4] == str(mountpoint):
            major, minor = (int(n) for n in fields[2].split(":"))
            found = FUSECTL / str(major << 20 | minor)
    assert found is not None and found.is_dir(), f"{mountpoint}: no FUSE connection"
    return found


def requests_waiting(mountpoint: Path) -> int:
    """The requests sent to the mount and not answered yet (its connection's count)."""
    return int((fuse_connection(mountpoint) / "waiting").read_text())


def end_stopped(mount) -> None:
    """End a stopped mount at once, whatever its threads wait on: its FUSE connection aborted
    (every request on it fails, no process waits on it any more), the server killed and
    continued, its dead mount left to the fixture's unmount. A stopped server continued
    instead would first answer what waited, and a thread of it held in the kernel could keep
    it from exiting at all."""
    assert mount.process is not None
    (fuse_connection(mount.root) / "abort").write_text("1")
    for signum in (signal.SIGKILL, signal.SIGCONT):
        try:
            os.killpg(mount.process.pid, signum)  # its own session (Mount.start)
        except ProcessLookupError:
            pass
    mount.process.wait(timeout=10)
    mount.process = None


def restart(mount) -> None:
    """Start the server again, as the supervised unit does: it detaches the dead mount and
    mounts anew. Mount.start may return while the dead mount still answers a cached stat, and
    the plain directory answers statfs between the detach and the new mount: wait until a
    scratch mount is listed there and answers statfs."""
    mount.start()
    deadline = time.monotonic() + 20
    while True:
        try:
            if mount_fixtures.mounted(mount.root) and os.statvfs(mount.root):
                return
        except OSError:
            pass
        assert time.monotonic() < deadline, "the restarted mount does not answer"
        time.sleep(0.05)


def test_a_live_mount_leaves_the_node_alone(make_mount, scontrol):
    mount = make_mount()
    result = healthcheck(scontrol, mount.root)
    assert result.returncode == 0, result.stderr
    assert scontrol.updates() == [] and scontrol.node["state"] == "IDLE"


def test_no_temporary_file_neither_drains_a_live_mount_nor_hides_a_dead_one(make_mount,
                                                                             scontrol, tmp_path):
    """A /tmp the check cannot write loses only stat's words, never the answer; and the check
    leaves no file of its own behind."""
    mount = make_mount()
    missing = tmp_path / "no-such-tmp"
    assert healthcheck(scontrol, mount.root, tmpdir=missing).returncode == 0
    assert scontrol.updates() == []
    mount.kill()
    assert healthcheck(scontrol, mount.root, tmpdir=missing).returncode == 0
    (update,) = scontrol.updates()
    assert update[:3] == ["update", "NodeName=node7", "State=DRAIN"]
    assert update[3].startswith(f"Reason={REASON} {mount.root} is down (statfs failed")
    own = tmp_path / "tmp"
    own.mkdir()
    healthcheck(scontrol, mount.root, tmpdir=own)
    assert list(own.iterdir()) == []


def test_a_killed_mount_drains_the_node_and_its_return_resumes_it(make_mount, scontrol):
    mount = make_mount()
    mount.kill()  # the mount stays listed and answers ENOTCONN
    result = healthcheck(scontrol, mount.root)
    assert result.returncode == 0, result.stderr  # Slurm must not see a failing check
    reason = f"{REASON} {mount.root} is down (Transport endpoint is not connected)"
    assert scontrol.updates() == [["update", "NodeName=node7", "State=DRAIN",
                                   f"Reason={reason}"]]
    assert scontrol.node == {"name": "node7", "state": "IDLE+DRAIN", "reason": reason}
    assert "node7: " in result.stdout and "node drained" in result.stdout

    healthcheck(scontrol, mount.root)  # still down, drained already: nothing more
    assert len(scontrol.updates()) == 1

    restart(mount)
    result = healthcheck(scontrol, mount.root)
    assert result.returncode == 0, result.stderr
    assert scontrol.updates()[-1] == ["update", "NodeName=node7", "State=RESUME"]
    assert scontrol.node["state"] == "IDLE" and "node resumed" in result.stdout


def test_an_admins_drain_is_never_lifted_nor_its_reason_replaced(make_mount, scontrol):
    mount = make_mount()
    scontrol.set("node7", "MIXED+DRAIN", "memory errors, ticket 4711")
    assert healthcheck(scontrol, mount.root).returncode == 0  # mount up: no resume
    mount.kill()
    result = healthcheck(scontrol, mount.root)  # mount down: no new drain reason
    assert result.returncode == 0
    assert scontrol.updates() == []
    assert scontrol.node["reason"] == "memory errors, ticket 4711"
    assert "left as it is" in result.stdout


def test_a_hung_mount_is_down_within_the_timeout(make_mount, scontrol):
    mount = make_mount()
    assert mount.process is not None
    hang(mount.process.pid)  # requests queue up, none is answered
    try:
        result, took = healthcheck_of_a_hung_mount(scontrol, mount)
    finally:
        end_stopped(mount)
    assert result.returncode == 0, result.stderr
    assert took < 15, f"the check took {took:.1f}s with --timeout 2"
    assert scontrol.node["reason"] == f"{REASON} {mount.root} is down (statfs did not " \
                                      f"answer within 2s)"


@pytest.fixture
def other_mount():
    """A second scratch mount beside make_mount's, in a directory of its own; ended at teardown
    as make_mount ends its own."""
    if (reason := mount_fixtures._usable()) is not None:
        pytest.skip(reason)
    folder = Path(tempfile.mkdtemp(prefix="skmount-other-"))
    os.chmod(folder, 0o755)
    (folder / "scratch").mkdir()
    config, values = mount_fixtures.write_config(folder)
    mount = mount_fixtures.Mount(folder / "scratch", folder / "store", config,
                                 folder / "mount.log", values)
    try:
        mount.start()
        yield mount
    finally:
        try:
            mount.stop()
        finally:
            mount_fixtures.unmount(mount.root)
        if not mount_fixtures.mounted(mount.root):  # never delete through a mount
            shutil.rmtree(folder, ignore_errors=True)


def test_a_hung_mount_whose_thread_waits_in_the_kernel_is_down_and_ended_at_once(
        make_mount, other_mount, scontrol):
    """One of the server's threads is held in the kernel (D) when the server is stopped, as
    a thread whose write waits on another hung file system is: the mount is still down, and
    its end does not wait for that thread."""
    mount = make_mount()
    mount.stop()
    mount.log = other_mount.root / "mount.log"  # its log on the other file system
    mount.start()
    assert mount.process is not None and other_mount.process is not None
    hang(other_mount.process.pid)
    try:
        before = requests_waiting(other_mount.root)
        # an OST gone: the mount's OST watcher logs it, and its write waits on the hung mount
        mount.ost(3).rename(mount.store / "ost0003.gone")
        deadline = time.monotonic() + 30
        while requests_waiting(other_mount.root) <= before:
            assert time.monotonic() < deadline, "the mount's log line never reached its file"
            time.sleep(0.02)
        hang(mount.process.pid)
        held = [task.name for task in Path(f"/proc/{mount.process.pid}/task").iterdir()
                if (task / "stat").read_text().rsplit(")", 1)[1].split()[0] == "D"]
        result, _ = healthcheck_of_a_hung_mount(scontrol, mount)
    finally:
        # the other file system first: nothing can end a thread held in the kernel but what
        # holds it (the mount, stopped, does not run on once its write is answered)
        os.kill(other_mount.process.pid, signal.SIGCONT)
        if mount.process is not None:
            end_stopped(mount)
    assert held, "no thread of the mount was held in the kernel: the test tests nothing"
    assert result.returncode == 0, result.stderr
    assert scontrol.node["reason"] == f"{REASON} {mount.root} is down (statfs did not " \
                                      f"answer within 2s)"


def test_a_plain_directory_is_not_mounted(tmp_path, scontrol):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    result = healthcheck(scontrol, scratch)
    assert result.returncode == 0
    assert scontrol.node["reason"] == f"{REASON} {scratch} is down (not mounted)"
    check = healthcheck(scontrol, scratch, "--check")
    assert check.returncode == 1 and "is down (not mounted)" in check.stdout
    assert len(scontrol.updates()) == 1  # --check never calls scontrol


def test_check_mode_says_up_for_a_live_mount(make_mount, scontrol):
    mount = make_mount()
    check = healthcheck(scontrol, mount.root, "--check")
    assert check.returncode == 0 and f"{mount.root} is up" in check.stdout


def test_scontrol_failing_is_reported_and_nothing_done(tmp_path, scontrol):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    scontrol.set("node3", "IDLE")  # the stand-in knows another node only: `show node` fails
    result = healthcheck(scontrol, scratch)
    assert result.returncode == 0
    assert "cannot read the node's state" in result.stdout
    assert scontrol.updates() == []


@pytest.mark.parametrize("args,message", [
    (["--scratch", "relative"], "not an absolute path"),
    (["--timeout", "0"], "expected whole seconds"),
    (["--timeout", "x"], "expected whole seconds"),
    (["--node", "a;b"], "letters, digits"),
    (["--bogus"], "unknown argument '--bogus'"),
])
def test_bad_usage_is_one_line_and_exit_2(scontrol, args, message):
    result = subprocess.run([str(HEALTHCHECK), *args], capture_output=True, text=True,
                            env={"PATH": f"{scontrol.folder}:/usr/bin:/bin"}, timeout=30)
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1 and message in result.stderr
    assert scontrol.updates() == []


def test_install_writes_the_sites_scratch_root_into_the_program(tmp_path):
    """`make install` rewrites the default (Slurm passes no arguments) and the plugstack line
    names the same root and the installed program."""
    build = tmp_path / "build"
    build.mkdir()
    for name in ("Makefile", "scratchkeeper-healthcheck"):
        shutil.copy2(REPO / "slurm-plugins" / name, build / name)
    subprocess.run(["make", "-s", "-C", str(build), "scratchkeeper-healthcheck.installed",
                    "plugstack-scratchkeeper.conf", "LOCAL=1", "SK_LOCAL_DIR=/srv/sk"],
                   check=True, capture_output=True, timeout=60)
    installed = (build / "scratchkeeper-healthcheck.installed").read_text()
    assert "\nSCRATCH=/srv/sk/scratch " in installed
    line = [w for w in (build / "plugstack-scratchkeeper.conf").read_text().splitlines()
            if not w.startswith("#")][0].split()
    assert line[0] == "required"
    assert {"scratch=/srv/sk/scratch", "healthcheck=/usr/local/sbin/scratchkeeper-healthcheck",
            "lost_input=run"} <= set(line)
    site = subprocess.run(["make", "-s", "-C", str(build), "plugstack-scratchkeeper.conf",
                           "scratchkeeper-healthcheck.installed", "SCRATCH=/lustre/scratch"],
                          check=True, capture_output=True, timeout=60)
    assert site.returncode == 0
    assert "\nSCRATCH=/lustre/scratch " in (build / "scratchkeeper-healthcheck.installed").read_text()
    words = (build / "plugstack-scratchkeeper.conf").read_text().split()
    assert "optional" in words and "lost_input=refuse" in words
