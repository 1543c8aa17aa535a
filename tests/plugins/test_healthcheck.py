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


def healthcheck(scontrol: Scontrol, scratch: Path, *extra: str, timeout: float = 60,
                tmpdir: Path | None = None) -> subprocess.CompletedProcess:
    """Run it as slurmd does (SLURMD_NODENAME), with the stand-in first on PATH."""
    env = {"SLURMD_NODENAME": "node7", "PATH": f"{scontrol.folder}:/usr/bin:/bin"}
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    return subprocess.run([str(HEALTHCHECK), "--scratch", str(scratch), *extra], env=env,
                          capture_output=True, text=True, timeout=timeout)


def hang(pid: int) -> None:
    """SIGSTOP the mount's server and wait until every one of its threads is stopped: kill()
    returns before they are, and a thread still running could answer the next request."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while True:
        states = []
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
            except (OSError, IndexError):
                continue
        if states and all(state in ("T", "t") for state in states):
            return
        assert time.monotonic() < deadline, f"the mount's threads did not stop: {states}"
        time.sleep(0.02)


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
        started = time.monotonic()
        result = healthcheck(scontrol, mount.root, "--timeout", "1", timeout=30)
        took = time.monotonic() - started
    finally:
        os.kill(mount.process.pid, signal.SIGCONT)
    assert result.returncode == 0, result.stderr
    assert took < 15, f"the check took {took:.1f}s with --timeout 1"
    assert scontrol.node["reason"] == f"{REASON} {mount.root} is down (statfs did not " \
                                      f"answer within 1s)"


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
