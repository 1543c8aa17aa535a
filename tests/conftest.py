"""Fixtures shared by every test folder: only the real local cluster (scripts/local-cluster).

Fixtures of one area live in that area's test folder, not here. Also here: the test layers'
markers, applied by the fixtures a test asks for (:data:`FIXTURE_MARKS`), and the Hypothesis
profiles (:data:`HYPOTHESIS_PROFILES`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings

from scratchkeeper.runner import CommandRunner, set_runner

# The layers (README.rst, "Which command answers what"): `make check` runs what is marked none of
# cluster, mount and root, in parallel; `make test` runs everything. A test is marked by the
# fixtures it asks for, directly or through another fixture, so a new test is in the right layer
# without a decorator; a test that needs root without such a fixture says so with
# @pytest.mark.root (or a module's pytestmark).
FIXTURE_MARKS = {
    "local_cluster": ("cluster",),       # the running local Slurm cluster
    "make_mount": ("mount", "root"),     # a scratch mount (FUSE, served as root); mnt uses it
    "subset_run": ("mount", "root"),     # tests/mount/test_conformance: pjdfstest on two mounts
    "shared_dir": ("root",),             # a folder for something run as a plain user
    "site_dir": ("root",),               # tests/recovery: the same, for a private site
    "small_store": ("root",),            # tests/storage: a store on a tmpfs of its own
    "small_fs": ("root",),               # tests/storage: the same, for the all-or-nothing writes
    "munge_site": ("root",),             # a private munged (run as the munge user)
    "skplain": ("root",),                # the plain user's ids: something runs or owns as them
}


#: `make test` runs the tests on several pytest-xdist workers (`--dist loadgroup`). A test
#: that asks for one of these fixtures runs in the fixture's group, one after another on one
#: worker: the cluster's tests share its queue, nodes and services (a test's timing assumes no
#: other test's jobs on the nodes; even a private site's recoveryd asks the cluster's queue,
#: whose answers slow down under another test's load); pjdfstest's module runs its subset once
#: per target for all its tests.
XDIST_GROUPS = {"local_cluster": "local-cluster", "subset_run": "pjdfstest"}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's scratch mounts (tests/mount/conftest.py's make_mount): each one's state
    and the end of its log in the report, read before the fixture's teardown removes them."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and report.when in ("setup", "call"):
        for mount in getattr(item, "sk_mounts", ()):
            report.sections.append((f"scratch mount {mount.root}", mount.describe()))


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the group marks
def pytest_collection_modifyitems(config, items):
    for item in items:
        for fixture, marks in FIXTURE_MARKS.items():
            if fixture in item.fixturenames:
                for mark in marks:
                    item.add_marker(mark)
        for fixture, group in XDIST_GROUPS.items():
            if fixture in item.fixturenames:
                item.add_marker(pytest.mark.xdist_group(group))
                break


# Property tests: a quick look while developing, the thorough run in CI (`make test` selects it
# with HYPOTHESIS_PROFILE=ci; `--hypothesis-profile NAME` overrides the variable). A test keeps
# its own max_examples only where the number bounds a slow test below the profile's.
HYPOTHESIS_PROFILES = {"dev": 25, "ci": 300}
for _name, _examples in HYPOTHESIS_PROFILES.items():
    # no deadline: the machine's cores are shared with the cluster and the other xdist worker
    settings.register_profile(_name, max_examples=_examples, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# The local cluster's hosts each have a /tmp of their own (docs/local-cluster.rst, "Hosts"): a
# job on a compute host would not see a test's folder in the head's /tmp. While the cluster has
# hosts, the tests' temporary folders (tmp_path, tempfile's) are in /var/tmp, which every host
# shares, as a site's tests would use its shared file system.
SHARED_TEMP = "/var/tmp"


def _cluster_has_hosts() -> bool:
    status = Path(os.environ.get("SK_LOCAL_DIR", "/var/lib/scratchkeeper-local")) / "cluster.json"
    try:
        return len(json.loads(status.read_text()).get("hosts") or {}) > 1
    except (OSError, ValueError, AttributeError):
        return False


if _cluster_has_hosts():
    tempfile.tempdir = SHARED_TEMP

NOT_RUNNING = "local cluster not running: scripts/local-cluster up"
REQUIRE_ENV = "SCRATCHKEEPER_REQUIRE_CLUSTER"
# States after which a Slurm job never changes again (sacct's words).
FINISHED_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                             "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE"})


@dataclass(frozen=True)
class LocalCluster:
    """What `scripts/local-cluster up` recorded in cluster.json, plus job helpers for tests."""

    status_path: Path
    local_dir: Path
    cluster_name: str
    site_config: Path
    site_config_pbs: Path
    source_dir: Path
    sink_dir: Path
    scratch_root: Path
    store_root: Path
    state_db: Path
    log_dir: Path
    gridftp_port: int
    gridftp_url: str
    http_port: int
    http_source_url: str
    http_sink_url: str
    nodes: tuple[str, ...]
    partitions: tuple[str, ...]
    #: the runtime every user runs (templates.command), the users' default site config
    runtime_command: str
    users_site_config: Path
    recovery_socket: Path
    #: scratchkeeper's services `up` started (recoveryd, replicad, spank-chain) -> their log
    service_logs: dict
    #: the Slurm release it runs: "22.05" (Debian's) or "24.11" (scripts/bootstrap's)
    slurm_release: str = "22.05"

    def skip_without_torque(self) -> None:
        """Skip a test of the PBS path on a cluster whose Torque wrappers cannot reach its
        slurmctld: Debian 12's (slurm-wlm-torque: qsub, qstat, qdel in Perl on the 22.05 API)
        are 22.05 clients, which 24.11 refuses ("protocol_version 9728 not supported")."""
        if self.slurm_release != "22.05":
            pytest.skip(f"the Torque wrappers here are Slurm 22.05 clients; this cluster runs "
                        f"{self.slurm_release}, and bootstrap builds no wrappers for it")

    def command(self, argv: list[str], timeout: float = 30.0, check: bool = True):
        """Run a command against the real cluster.

        A private runner, not the process-wide one: a test that swaps in a fake runner with
        ``set_runner`` must not turn the cluster's own checks into fakes.
        """
        return CommandRunner().run(argv, timeout=timeout, check=check, mutating=False)

    def wait_for_the_mount_gate(self, timeout: float = 90.0) -> None:
        """Until no node is drained by the scratch-mount health check (a test that killed the
        mount leaves the cluster as it found it: the check resumes the nodes within its
        interval once the mount is back)."""
        deadline = time.monotonic() + timeout
        while True:
            out = self.command(["sinfo", "-h", "-N", "-o", "%N|%E"], check=False).stdout
            held = [line for line in out.splitlines()
                    if "|scratchkeeper: scratch mount" in line]
            if not held:
                return
            if time.monotonic() > deadline:
                pytest.fail(f"nodes still drained for the scratch mount after {timeout:g} s: "
                            f"{held}", pytrace=False)
            time.sleep(1)

    def job_state(self, job_id: str) -> str | None:
        """The job's state as accounting records it ("CANCELLED by 0" gives CANCELLED).

        None until the record is complete: for about a second after a short job ends, sacct
        already says COMPLETED but the Partition field is still empty.
        """
        result = self.command(["sacct", "-n", "-X", "-P", "-o", "State,Partition",
                               "-j", str(job_id)], check=False)
        fields = result.stdout.strip().split("|")
        if not result.ok or len(fields) != 2 or not fields[1]:
            return None
        return fields[0].split()[0]

    def wait_for_job(self, job_id: str, timeout: float = 60.0) -> str:
        """Wait until the job has finished and accounting holds its full record; return its state."""
        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            state = self.job_state(job_id)
            if state in FINISHED_STATES:
                return state
            time.sleep(0.5)
        pytest.fail(f"job {job_id} not finished after {timeout:g}s (last state {state})")


def _cluster_problem(status_path: Path) -> str | None:
    """Why the local cluster cannot be used, or None when it is up."""
    try:
        status = json.loads(status_path.read_text())
    except FileNotFoundError:
        return f"no {status_path}"
    except (OSError, json.JSONDecodeError) as err:
        return f"{status_path}: {err}"
    if status.get("state") != "up":
        return f"{status_path} says state {status.get('state')!r}"
    for name, pid in status.get("pids", {}).items():
        if not pid or not Path(f"/proc/{pid}").exists():
            return f"{name} (pid {pid}) is not running"
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return f"{name} (pid {pid}) has exited"
    return None


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory) -> LocalCluster:
    """The running local cluster; skipped when it is not up, failed if SCRATCHKEEPER_REQUIRE_CLUSTER=1."""
    local_dir = Path(os.environ.get("SK_LOCAL_DIR", "/var/lib/scratchkeeper-local"))
    status_path = local_dir / "cluster.json"
    problem = _cluster_problem(status_path)
    deadline = time.monotonic() + 300
    while problem and "state 'starting'" in problem and time.monotonic() < deadline:
        time.sleep(1)  # an `up` is running (another session's, or its services' restart)
        problem = _cluster_problem(status_path)
    if problem is not None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{NOT_RUNNING} ({problem}; {REQUIRE_ENV}=1)", pytrace=False)
        pytest.skip(NOT_RUNNING)
    refresh_runtime()
    cancel_leftover_test_jobs(local_dir, tmp_path_factory.getbasetemp())
    status = json.loads(status_path.read_text())
    return LocalCluster(
        status_path=status_path,
        local_dir=local_dir,
        cluster_name=status["cluster_name"],
        site_config=Path(status["site_config"]),
        site_config_pbs=Path(status["site_config_pbs"]),
        source_dir=Path(status["source_dir"]),
        sink_dir=Path(status["sink_dir"]),
        scratch_root=Path(status["scratch_root"]),
        store_root=Path(status["store_root"]),
        state_db=Path(status["state_db"]),
        log_dir=Path(status["log_dir"]),
        gridftp_port=status["ports"]["gridftp"],
        gridftp_url=status["gridftp_url"],
        http_port=status["ports"]["http"],
        http_source_url=status["http_source_url"],
        http_sink_url=status["http_sink_url"],
        nodes=tuple(status["nodes"]),
        partitions=tuple(status["partitions"]),
        runtime_command=status.get("runtime", {}).get("command", ""),
        users_site_config=Path(status.get("users_site_config", "/etc/scratchkeeper/site.toml")),
        recovery_socket=Path(status.get("recovery_socket", local_dir / "run" / "recoveryd.sock")),
        service_logs=status.get("service_logs", {}),
        slurm_release=status.get("slurm", "22.05"),
    )


# Jobs the tests submit under names of their own (the others run from a pytest tmp_path).
TEST_JOB_NAMES = frozenset({"skreptest", "skcapture"})
_SESSION_LOCK = []


def cancel_leftover_test_jobs(local_dir: Path, basetemp: Path) -> list[str]:
    """Cancel the jobs an earlier, interrupted test session left in the queue (a killed run's
    held jobs would fill the replication window of every later run: slurmctld keeps them over
    a restart). Only when no other test session is running: each session holds a shared lock
    on run/test-sessions.lock for its life, the cleanup needs it exclusively. A leftover is a
    job named as the tests name theirs, or one whose working directory is in a pytest
    directory of another session."""
    import fcntl

    try:
        (local_dir / "run").mkdir(parents=True, exist_ok=True)
        handle = open(local_dir / "run" / "test-sessions.lock", "a")
    except OSError:
        return []
    _SESSION_LOCK.append(handle)
    cancelled: list[str] = []
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fcntl.flock(handle, fcntl.LOCK_SH)       # another session runs: its jobs are not ours
        return cancelled
    try:
        out = subprocess.run(["squeue", "-h", "-a", "-o", "%A|%Z|%j"], capture_output=True,
                             text=True, timeout=60)
        temp_root = basetemp.parent
        if not temp_root.name.startswith("pytest-of-"):     # a --basetemp of the caller's
            temp_root = basetemp
        for line in out.stdout.splitlines():
            job_id, _, rest = line.partition("|")
            workdir, _, name = rest.partition("|")
            in_pytest = Path(workdir).is_relative_to(temp_root) and not \
                Path(workdir).is_relative_to(basetemp)
            if job_id.strip().isdigit() and (name in TEST_JOB_NAMES or in_pytest):
                cancelled.append(job_id.strip())
        if cancelled:
            subprocess.run(["scancel", *cancelled], capture_output=True, timeout=60)
            print(f"\ncancelled {len(cancelled)} job(s) left by an earlier test session: "
                  f"{' '.join(cancelled)}", file=sys.stderr)
    finally:
        fcntl.flock(handle, fcntl.LOCK_SH)
    return cancelled


def refresh_runtime() -> None:
    """Data jobs run the installed runtime (templates.command): reinstall it when the checkout
    changed since `local-cluster up` (`make test` runs `up` first; this covers a test session
    started by hand after an edit). Only the runtime: the services restart on the next `up`."""
    from user_runtime import LOCAL_CLUSTER_SCRIPT, installed_runtime

    if os.geteuid() != 0 or installed_runtime() is not None:
        return
    result = subprocess.run([sys.executable, str(LOCAL_CLUSTER_SCRIPT), "runtime"],
                            capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        pytest.fail(f"the local cluster's runtime is older than the checkout and reinstalling "
                    f"it failed: {result.stderr.strip()}", pytrace=False)


@pytest.fixture(scope="module")
def own_services(local_cluster):
    """For a module whose tests play scratchkeeper's services themselves on private sites (their
    own chain sweeps, a recovery service on the plugin's socket): the cluster's chain service
    and recoveryd are stopped for the module and started again afterwards."""
    from user_runtime import LOCAL_CLUSTER_SCRIPT

    def local_cluster_script(*args: str) -> None:
        result = subprocess.run([sys.executable, str(LOCAL_CLUSTER_SCRIPT), *args],
                                capture_output=True, text=True, timeout=900)
        if result.returncode != 0:
            pytest.fail(f"local-cluster {' '.join(args)}: {result.stderr.strip()}",
                        pytrace=False)

    services = ("spank-chain", "recoveryd")
    local_cluster_script("stop", *services)
    yield
    local_cluster_script("start", *services)


@pytest.fixture
def alarm():
    """Fail, instead of hanging, a test whose code blocks on a file it should have refused (a
    FIFO, an endless device): a TimeoutError after 30 s."""
    def expired(*_):
        raise TimeoutError("blocked: the code under test waited on a FIFO or an endless stream")
    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="module")
def munge_site(tmp_path_factory):
    """A private munged with a key of its own (tests/munge_daemon.py); a module's tests share it."""
    from munge_daemon import start_munged

    root = Path(tempfile.mkdtemp(prefix="sk-munge-"))
    daemon = start_munged(root)
    yield daemon
    daemon.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def skplain() -> tuple[int, int]:
    """uid and gid of the plain test user ``skplain`` (created when missing), for a test that
    runs a program as them or gives them files: it needs root, and is marked so."""
    from user_runtime import plain_user

    return plain_user()


@pytest.fixture
def shared_dir():
    """A folder every user can traverse (pytest's tmp_path lies under a 0700 folder), for tests
    that run something as a plain user; removed afterwards."""
    directory = Path(tempfile.mkdtemp(prefix="sk-shared-"))
    directory.chmod(0o755)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def use_runner():
    """``use_runner(runner)`` installs a command runner for this test (returned); the one
    before comes back afterwards."""
    previous = []

    def install(runner):
        previous.append(set_runner(runner))
        return runner
    yield install
    if previous:
        set_runner(previous[0])
