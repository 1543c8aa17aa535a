"""Slurm's own staging life cycle: slurm-plugins/burst_buffer.lua in the real slurmctld.

The module switches the local cluster to burst-buffer mode (`local-cluster burst-buffer on`:
BurstBufferType=burst_buffer/lua, job_submit.lua's staging = "burst-buffer", a slurmctld
restart) and back afterwards. A plain user's `sbatch job.sh` with #STAGEIN/#STAGEOUT lines
then stages in while pending, is checked (and recovered) before it starts, stages out while it
still holds its node, and is torn down, with Slurm's own states and reasons throughout.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from scratchkeeper.burst_buffer import records as bb_records
from scratchkeeper.config import load_config
from scratchkeeper.planner import records
from scratchkeeper.planner.spool import spool_dir
from scratchkeeper.state import StateStore
from scratchkeeper.storage import open_backend
from user_runtime import LOCAL_CLUSTER_SCRIPT, plain_user

from .conftest import sacct

BURST_BUFFER_LUA = Path("/etc/slurm/burst_buffer.lua")
#: each daemon log's size before the module switched the cluster to burst-buffer mode
LOGS_BEFORE: dict[Path, int] = {}


def _local_cluster(*args: str) -> None:
    result = subprocess.run([sys.executable, str(LOCAL_CLUSTER_SCRIPT), *args],
                            capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        pytest.fail(f"local-cluster {' '.join(args)}: {result.stderr.strip()}", pytrace=False)


@pytest.fixture(scope="module")
def burst_buffer(local_cluster):
    """The cluster in burst-buffer mode for this module."""
    if not BURST_BUFFER_LUA.exists():
        message = "burst_buffer.lua not installed: run `make -C slurm-plugins install LOCAL=1`"
        if os.environ.get("SCRATCHKEEPER_REQUIRE_CLUSTER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    LOGS_BEFORE.update({log: log.stat().st_size for log in Path(local_cluster.log_dir).glob("*.log")})
    _local_cluster("burst-buffer", "on")
    try:
        yield local_cluster
    finally:
        _local_cluster("burst-buffer", "off")


class Workspace:
    """A plain user's folder in the cluster's scratch, a source folder, and job helpers."""

    def __init__(self, cluster, uid: int, gid: int):
        self.cluster = cluster
        self.uid, self.gid = uid, gid
        tag = uuid.uuid4().hex[:8]
        self.scratch = Path(cluster.scratch_root) / f"skplain-bb-{tag}"
        self.scratch.mkdir()
        os.chown(self.scratch, uid, gid)
        self.source = Path(cluster.source_dir) / f"bb-{tag}"
        self.source.mkdir()
        os.chmod(self.source, 0o755)
        self.jobs: list[str] = []

    def source_file(self, name: str, size: int) -> tuple[str, bytes]:
        data = os.urandom(size)
        path = self.source / name
        path.write_bytes(data)
        os.chmod(path, 0o644)
        return f"{self.cluster.gridftp_url}{path}", data

    def script(self, name: str, text: str) -> Path:
        path = self.scratch / name
        path.write_text(text)
        os.chown(path, self.uid, self.gid)
        return path

    def sbatch(self, *args: str, check: bool = True, umask: int = 0o022
               ) -> subprocess.CompletedProcess:
        def as_user():
            os.setgroups([])
            os.setgid(self.gid)
            os.setuid(self.uid)
            os.umask(umask)

        done = subprocess.run(["sbatch", "--parsable", *args], cwd=self.scratch,
                              capture_output=True, text=True, timeout=60, preexec_fn=as_user)
        if check:
            assert done.returncode == 0, done.stderr
        if done.returncode == 0:
            self.jobs.append(done.stdout.strip().split(";")[0])
        return done

    def close(self) -> None:
        if self.jobs:
            subprocess.run(["scancel", *self.jobs], capture_output=True, timeout=30)
        shutil.rmtree(self.scratch, ignore_errors=True)
        shutil.rmtree(self.source, ignore_errors=True)


@pytest.fixture
def work(burst_buffer):
    uid, gid = plain_user()
    space = Workspace(burst_buffer, uid, gid)
    yield space
    space.close()


def squeue_state(job_id: str) -> str:
    return subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T|%r"], capture_output=True,
                          text=True, timeout=30).stdout.strip()


def bb_state(job_id: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True,
                         timeout=30).stdout
    found = re.search(r"BurstBufferState=(\S+)", out)
    return found.group(1) if found else ""


def watch(job_id: str, until, timeout: float = 180.0) -> list[str]:
    """Poll the job's squeue state|reason and burst-buffer state until ``until(seen)``; every
    distinct observation in order."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        here = f"{squeue_state(job_id)}|{bb_state(job_id)}"
        if not seen or seen[-1] != here:
            seen.append(here)
        if until(seen):
            return seen
        time.sleep(0.2)
    pytest.fail(f"job {job_id}: not reached in {timeout:g} s; seen {seen}", pytrace=False)


def controller_log(cluster, needle: str, timeout: float = 30.0) -> bool:
    """Whether slurmctld's log has a line holding ``needle`` (waiting up to ``timeout``)."""
    path = Path(cluster.log_dir) / "slurmctld.log"
    deadline = time.monotonic() + timeout
    while True:
        if needle in path.read_text(errors="replace"):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)


def chain_of(job_id: str, cluster):
    store = records.open_records(StateStore(str(cluster.state_db)))
    chain_id = records.chain_of_job(store, job_id)
    return store, chain_id


def test_a_plain_users_sbatch_stages_in_runs_and_stages_out_in_slurms_own_states(work):
    uri, data = work.source_file("in.bin", 3_000_000)
    staged = work.scratch / "in.bin"
    result = work.scratch / "result.txt"
    sink = f"{work.cluster.http_sink_url}bb-{work.scratch.name}.txt"
    script = work.script("job.sh", f"""#!/bin/bash
#SBATCH --output={work.scratch}/job.out
#STAGEIN {uri} {staged}
#STAGEOUT {result} {sink}
echo "chain=$SCRATCHKEEPER_CHAIN count=$SCRATCHKEEPER_STAGED_COUNT first=$SCRATCHKEEPER_STAGED_1"
sha256sum {staged} | cut -d' ' -f1 > {result}
""")
    job_id = work.sbatch(str(script)).stdout.strip()
    seen = watch(job_id, lambda s: s[-1].startswith("|"))  # gone from the queue
    assert any(s.startswith("PENDING|BurstBufferStageIn") for s in seen), seen
    assert work.cluster.wait_for_job(job_id, timeout=60) == "COMPLETED"

    # the job ran with its input, and the variables slurm_bb_paths handed it
    assert result.read_text().strip() == hashlib.sha256(data).hexdigest()
    output = (work.scratch / "job.out").read_text()
    store, chain_id = chain_of(job_id, work.cluster)
    assert f"chain={chain_id} count=1 first={staged}" in output
    # stage-out: the result reached the sink (nginx writes it as nobody)
    sink_file = Path(work.cluster.sink_dir) / f"bb-{work.scratch.name}.txt"
    assert sink_file.read_text() == result.read_text()
    sink_file.unlink()
    # the data jobs ran as the user on the data queue, and stage commit recorded the file with
    # its source, as on the other paths (what recovery and replication read)
    rows = {r["role"]: r for r in records.chain_jobs(store, chain_id)}
    assert rows["compute"]["job_id"] == job_id
    for role in ("stage-in", "stage-out"):
        # accounting completes a short job's record a moment after it ends
        assert work.cluster.wait_for_job(rows[role]["job_id"]) == "COMPLETED"
        assert sacct(rows[role]["job_id"], "User,Partition") == ["skplain", "dataxfer"], role
    (row,) = records.staged_files(store, chain_id)
    assert row["state"] == "staged" and row["source"] == uri and row["size"] == len(data)
    # job_submit.lua left the job to the burst buffer: never held, never chained twice
    assert not any(sacct(job_id, "Comment"))
    assert controller_log(work.cluster, f"scratchkeeper: bb teardown: job {job_id}: torn down")


def test_a_bad_directive_is_refused_by_sbatch_with_its_line(work):
    script = work.script("bad.sh", "#!/bin/bash\n#SBATCH --output=/dev/null\n"
                                   f"#STAGEIN gopher://h/a {work.scratch}/a\ntrue\n")
    done = work.sbatch(str(script), check=False)
    assert done.returncode != 0 and not done.stdout.strip()
    assert "burst_buffer/lua: scratchkeeper: script:3:" in done.stderr, done.stderr
    assert "gopher" in done.stderr


def cancelled_before_it_ran(work, script, ran: Path, timeout: float = 120) -> tuple[str, str]:
    """Submit ``script``, whose stage-in fails: the job ends CANCELLED, its compute (which
    touches ``ran``) never run, with the reason in its comment; its id and the comment."""
    job_id = work.sbatch(str(script)).stdout.strip()
    assert work.cluster.wait_for_job(job_id, timeout=timeout) == "CANCELLED"
    _, comment = sacct(job_id, "State,Comment")
    assert comment.startswith("scratchkeeper: stage-in failed:"), comment
    assert not ran.exists()
    return job_id, comment


def wait_out_of_the_pool(job_id: str) -> None:
    """Until ``scontrol show burst`` no longer lists the job: its share given back."""
    deadline = time.monotonic() + 120
    while re.search(rf"JobID={job_id}\b", pool_jobs()):
        assert time.monotonic() < deadline, f"job {job_id} still holds pool space:\n{pool_jobs()}"
        time.sleep(1)


def test_a_failed_stage_in_ends_the_job_with_its_reason_and_the_compute_never_runs(work):
    missing = f"{work.cluster.gridftp_url}{work.source}/missing.bin"
    ran = work.scratch / "ran"
    script = work.script("fails.sh", f"""#!/bin/bash
#SBATCH --output=/dev/null
#STAGEIN {missing} {work.scratch}/missing.bin
touch {ran}
""")
    _, comment = cancelled_before_it_ran(work, script, ran)
    assert f"{script}:3" in comment  # the script as the user named it


def test_an_input_lost_while_the_job_waits_is_recovered_before_it_starts(work):
    uri, data = work.source_file("lost.bin", 2_000_000)
    staged = work.scratch / "lost.bin"
    result = work.scratch / "sha.txt"
    node = work.cluster.nodes[-1]
    # a blocker holds the node: the job stages in while pending (Resources), then waits
    blocker = subprocess.run(["sbatch", "--parsable", "-w", node, "--exclusive",
                              "-o", "/dev/null", "--wrap", "sleep 300"], capture_output=True,
                             text=True, timeout=60, check=True).stdout.strip()
    work.jobs.append(blocker)
    script = work.script("reader.sh", f"""#!/bin/bash
#SBATCH --output=/dev/null -w {node}
#STAGEIN {uri} {staged}
sha256sum {staged} | cut -d' ' -f1 > {result}
""")
    job_id = work.sbatch(str(script)).stdout.strip()
    watch(job_id, lambda s: s[-1].endswith("|staged-in"), timeout=120)
    assert squeue_state(job_id).startswith("PENDING|")

    config = load_config(work.cluster.site_config)
    backend = open_backend(config)
    failed = backend.layout(str(staged)).ost_list[0]
    backend.fail_ost(failed)
    try:
        subprocess.run(["scancel", blocker], timeout=30, check=True)
        assert work.cluster.wait_for_job(job_id, timeout=180) == "COMPLETED"
        assert controller_log(work.cluster, f"scratchkeeper: bb pre-run: job {job_id}: 1 staged "
                                          "input(s) whole")
        assert result.read_text().strip() == hashlib.sha256(data).hexdigest()
    finally:
        backend.restore_ost(failed)


def test_a_stage_in_waits_visibly_while_scratch_is_held_by_another_job(work):
    """The pool "scratch" is free space + what staged jobs hold: a job holding 60 % of it makes
    a second job asking as much wait with Slurm's reason, until the first is torn down."""
    free = shutil.disk_usage(work.cluster.scratch_root).free
    ask = f"{int(free * 0.6) // (1 << 20)}M"
    node = work.cluster.nodes[-1]
    blocker = subprocess.run(["sbatch", "--parsable", "-w", node, "--exclusive",
                              "-o", "/dev/null", "--wrap", "sleep 300"], capture_output=True,
                             text=True, timeout=60, check=True).stdout.strip()
    work.jobs.append(blocker)
    uri, _ = work.source_file("small.bin", 10_000)
    holder = work.script("holder.sh", f"""#!/bin/bash
#SBATCH --output=/dev/null -w {node}
#STAGEIN {uri} {work.scratch}/small.bin
#STAGE pool=scratch capacity={ask}
true
""")
    holder_id = work.sbatch(str(holder)).stdout.strip()
    watch(holder_id, lambda s: s[-1].endswith("|staged-in"), timeout=120)
    waiter = work.script("waiter.sh", f"""#!/bin/bash
#SBATCH --output=/dev/null
#STAGEIN {uri} {work.scratch}/small-2.bin
#STAGE pool=scratch capacity={ask}
true
""")
    waiter_id = work.sbatch(str(waiter)).stdout.strip()
    time.sleep(8)  # a few scheduling passes
    assert squeue_state(waiter_id) == "PENDING|BurstBufferResources"
    store = bb_records.open_records(StateStore(str(work.cluster.state_db)))
    assert bb_records.job(store, waiter_id) is None  # Slurm has not even set it up
    # the holder runs and is torn down (not cancelled while pending: Slurm 22.05 may then kill
    # its teardown and keep its share of the pool, docs/slurm-plugins.rst, Limits)
    subprocess.run(["scancel", blocker], timeout=30, check=True)
    assert work.cluster.wait_for_job(holder_id, timeout=120) == "COMPLETED"
    assert work.cluster.wait_for_job(waiter_id, timeout=120) == "COMPLETED"


def test_a_failed_stage_out_is_in_accounting_and_holds_nothing(work):
    result = work.scratch / "out.txt"
    script = work.script("out.sh", f"""#!/bin/bash
#SBATCH --output=/dev/null
#STAGEIN -input {work.scratch}/nothing-staged
#STAGEOUT {result} {work.cluster.http_sink_url.removesuffix('/sink/')}/no-such-place/out.txt
echo result > {result}
""")
    job_id = work.sbatch(str(script)).stdout.strip()
    assert work.cluster.wait_for_job(job_id, timeout=180) == "COMPLETED"
    watch(job_id, lambda s: s[-1].startswith("|"), timeout=120)  # not kept in STAGE_OUT
    store, chain_id = chain_of(job_id, work.cluster)
    stage_out = {r["role"]: r for r in records.chain_jobs(store, chain_id)}["stage-out"]
    state, comment = sacct(stage_out["job_id"], "State,Comment")
    assert state == "FAILED"
    assert comment.startswith("scratchkeeper: stage-out failed: line 4: "), comment
    assert records.chain(store, chain_id)["state"] == records.STAGE_OUT_FAILED
    assert result.exists()  # the results stay on scratch
    assert controller_log(work.cluster, f"scratchkeeper: bb data-out: job {job_id}: stage-out "
                                        "FAILED, results left on scratch")


def test_bbstat_shows_the_pool_and_the_jobs_stages(work):
    uid, gid = plain_user()

    def as_user():
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)

    done = subprocess.run(["scontrol", "show", "bbstat"], capture_output=True, text=True,
                          timeout=60, preexec_fn=as_user)
    assert done.returncode == 0, done.stderr
    assert "scratchkeeper burst buffer: scratch " in done.stdout
    assert "jobs by stage:" in done.stdout
    assert "scratchkeeper status" in done.stdout
    json.dumps(done.stdout)  # printable


def test_switching_on_restarted_every_daemon_that_reads_slurm_conf(burst_buffer):
    """`local-cluster burst-buffer on` restarts the slurmds with slurmctld: none of them runs
    on the old slurm.conf (slurmctld: "appears to have a different slurm.conf")."""
    assert LOGS_BEFORE, "the burst_buffer fixture did not run"
    for log, size in LOGS_BEFORE.items():
        with open(log, "rb") as stream:
            stream.seek(size)
            assert b"different slurm.conf" not in stream.read(), log


def test_staged_files_take_the_owners_umask_and_the_spool_is_the_owners_alone(work):
    uri, _ = work.source_file("umask.bin", 10_000)
    staged = work.scratch / "umask.bin"
    script = work.script("umask.sh", f"""#!/bin/bash
#SBATCH --output=/dev/null
#STAGEIN {uri} {staged}
#STAGEOUT {staged} {work.cluster.http_sink_url}bb-umask-{work.scratch.name}.bin
true
""")
    job_id = work.sbatch(str(script), umask=0o027).stdout.strip()
    assert work.cluster.wait_for_job(job_id, timeout=180) == "COMPLETED"
    watch(job_id, lambda s: s[-1].startswith("|"), timeout=120)  # torn down
    assert stat.S_IMODE(staged.stat().st_mode) == 0o640  # 0666 & ~027
    store, chain_id = chain_of(job_id, work.cluster)
    config = load_config(work.cluster.site_config)
    spool = spool_dir(config, chain_id)
    assert stat.S_IMODE(spool.stat().st_mode) == 0o700 and spool.stat().st_uid == work.uid
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in spool.iterdir()}
    assert {n: m for n, m in modes.items() if n.endswith(".sh")} == {"stage-in.sh": 0o700,
                                                                      "stage-out.sh": 0o700}
    logs = {n: m for n, m in modes.items() if n.endswith(".out")}
    assert len(logs) == 2 and set(logs.values()) == {0o600}, modes
    (Path(work.cluster.sink_dir) / f"bb-umask-{work.scratch.name}.bin").unlink(missing_ok=True)


def test_a_capacity_larger_than_the_pool_is_refused_by_sbatch_with_the_pools_size(work):
    script = work.script("huge.sh", f"""#!/bin/bash
#SBATCH --output=/dev/null
#STAGE pool=scratch capacity=900P
#STAGEIN -input {work.scratch}/nothing
true
""")
    done = work.sbatch(str(script), check=False)
    assert done.returncode != 0 and not done.stdout.strip()
    assert re.search(r"scratchkeeper: #STAGE capacity=900P asks \S+ GiB of the pool scratch, "
                     r"which holds \S+ GiB", done.stderr), done.stderr


def test_bbstat_lists_the_job_its_words_name(work):
    script = work.script("named.sh", f"""#!/bin/bash
#SBATCH --output=/dev/null
#STAGEIN -input {work.scratch}/nothing-staged
true
""")
    job_id = work.sbatch(str(script)).stdout.strip()
    assert work.cluster.wait_for_job(job_id, timeout=180) == "COMPLETED"
    done = subprocess.run(["scontrol", "show", "bbstat", job_id], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    (line,) = [row for row in done.stdout.splitlines() if row.split()[:1] == [job_id]]
    assert line.split()[1] in ("staged-out", "torn-down"), done.stdout


def test_a_slurmctld_restart_during_the_stage_in_stages_again_and_the_job_runs_with_its_data(
        work):
    """slurmctld restarted while the job's stage-in data job waits for its source (issue 46,
    item 5). Slurm 22.05 tears the pending job's staging down at start (it does not know how
    the staging went), defers the job 60 s, then runs setup and data_in again: the job must not
    be cancelled, it must stage again and run with the right bytes. Unrun here (the lead runs
    the cluster tests)."""
    late = work.source / "late.bin"
    uri, data = f"{work.cluster.gridftp_url}{late}", os.urandom(1_500_000)
    staged = work.scratch / "late.bin"
    result = work.scratch / "late-sha.txt"
    script = work.script("restart.sh", f"""#!/bin/bash
#SBATCH --output={work.scratch}/restart.out
#STAGEIN -wait-for-source 10m
#STAGEIN {uri} {staged}
sha256sum {staged} | cut -d' ' -f1 > {result}
""")
    job_id = work.sbatch(str(script)).stdout.strip()
    deadline = time.monotonic() + 120
    while True:  # the stage-in data job runs, waiting for its source
        store, chain_id = chain_of(job_id, work.cluster)
        rows = {r["role"]: r for r in records.chain_jobs(store, chain_id)} if chain_id else {}
        first = rows.get("stage-in", {"job_id": None})["job_id"]
        # and known to accounting: Slurm 22.05 refuses any update (the cancel's comment) of a
        # job started just before a restart, whose DB index slurmctld did not hear back
        if first and squeue_state(first).startswith("RUNNING|") and \
                bb_state(job_id) == "staging-in" and sacct(first, "DBIndex") not in ([], ["0"]):
            break
        assert time.monotonic() < deadline, f"job {job_id}: stage-in not running: {rows}"
        time.sleep(0.5)
    work.jobs.append(first)

    _local_cluster("stop", "slurmctld")
    _local_cluster("start", "slurmctld")
    bb_store = bb_records.open_records(StateStore(str(work.cluster.state_db)))
    deadline = time.monotonic() + 120
    while bb_records.job(bb_store, job_id)["teardown_at"] is None:  # the restart's teardown
        assert time.monotonic() < deadline, f"job {job_id}: not torn down after the restart"
        time.sleep(0.5)
    # the teardown records itself before it cancels: the source appears only once the first
    # data job is gone (written earlier, that job could find it and end well first)
    assert work.cluster.wait_for_job(first, timeout=60) == "CANCELLED"
    late.write_bytes(data)
    os.chmod(late, 0o644)

    assert work.cluster.wait_for_job(job_id, timeout=400) == "COMPLETED"
    assert result.read_text().strip() == hashlib.sha256(data).hexdigest()
    assert not any(sacct(job_id, "Comment"))  # never cancelled, no stage-in failure
    assert "still pending but Slurm tore its staging down" in sacct(first, "Comment")[0]
    rows = {r["role"]: r for r in records.chain_jobs(store, chain_id)}
    assert rows["stage-in"]["job_id"] != first and rows["stage-in"]["state"] == records.JOB_DONE
    assert work.cluster.wait_for_job(rows["stage-in"]["job_id"]) == "COMPLETED"
    assert records.chain_of_job(store, job_id) == chain_id  # the same chain, reopened


# -- issue 46, item 2: job_process off slurmctld's hot path ----------------------------------------
def children_cpu_ticks(pid: int) -> int:
    """CPU time, in clock ticks, of the children process ``pid`` has waited for (``cutime`` +
    ``cstime`` of /proc/PID/stat): every command slurmctld's in-process Lua runs with
    io.popen, and what that command started, adds to it once it ends."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[13]) + int(fields[14])  # fields 16 and 17; fields[0] is field 3


def test_job_process_starts_no_process_inside_slurmctld(work):
    """Ten burst-buffer sbatch: slurmctld's waited-for children used no CPU for them. The
    planner's Python, which job_process ran before, took about 0.2 s of CPU per sbatch (20
    ticks); slurm_bb_pools' df every 30 s takes less than one tick. Held jobs: no stage-in
    (slurmscriptd's children would not count here anyway)."""
    pid = int((Path(work.cluster.local_dir) / "run" / "slurmctld.pid").read_text())
    uri, _ = work.source_file("held.bin", 1000)
    script = work.script("held.sh", f"""#!/bin/bash
#SBATCH --output=/dev/null
#STAGEIN {uri} {work.scratch}/held.bin
#STAGEIN -retry 2
true
""")
    log = Path(work.cluster.log_dir) / "slurmctld.log"
    offset = log.stat().st_size
    before = children_cpu_ticks(pid)
    jobs = [work.sbatch("--hold", str(script)).stdout.strip() for _ in range(10)]
    used = children_cpu_ticks(pid) - before
    assert used < 10, f"slurmctld's children used {used} ticks of CPU for 10 sbatch"
    for job_id in jobs:  # the burst buffer took each one (job_process passed it)
        shown = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True,
                               text=True, timeout=30).stdout
        assert "BurstBuffer=#STAGEIN" in shown, shown
    with open(log, "rb") as stream:
        stream.seek(offset)
        assert b"bb job-process" not in stream.read()  # the planner was never run


def pool_jobs() -> str:
    """What ``scontrol show burst`` lists: the pools and the jobs holding space in them."""
    return subprocess.run(["scontrol", "show", "burst"], capture_output=True, text=True,
                          timeout=30).stdout


def test_a_script_the_planner_refuses_at_data_in_ends_with_its_reason_and_frees_its_space(work):
    """A relative destination that leads out of scratch from the job's directory: the Lua check
    cannot judge it at sbatch (Slurm 22.05 does not tell job_process the directory), so sbatch
    takes the job; data_in's planner refuses it, and the job ends cancelled with the planner's
    words in its comment, never run, its reserved share of the pool given back."""
    uri, _ = work.source_file("escape.bin", 1000)
    ran = work.scratch / "ran"
    script = work.script("escape.sh", f"""#!/bin/bash
#SBATCH --output=/dev/null
#STAGE pool=scratch capacity=8M
#STAGEIN {uri} ../../../../../../../../tmp/bb-escape-{work.scratch.name}.bin
touch {ran}
""")
    job_id, comment = cancelled_before_it_ran(work, script, ran, timeout=180)
    assert comment.startswith(f"scratchkeeper: stage-in failed: {script}:4: #STAGEIN: the "
                              f"destination /tmp/bb-escape-{work.scratch.name}.bin is outside "
                              "the scratch root"), comment
    wait_out_of_the_pool(job_id)
    store = bb_records.open_records(StateStore(str(work.cluster.state_db)))
    assert bb_records.job(store, job_id)["reason"].startswith("stage-in failed: ")


def test_a_stage_in_whose_data_job_fails_ends_the_job_and_gives_its_space_back(work):
    """Issue 46 item 4: the data job fails (its source is missing) while data_in waits for it,
    with 64 MiB reserved. The job ends cancelled with the reason, and its reservation leaves
    the pool: Slurm's own teardown runs to its end (none is killed by a cancel that races it),
    so ``scontrol show burst`` stops listing the job and its used space goes back."""
    missing = f"{work.cluster.gridftp_url}{work.source}/missing.bin"
    ran = work.scratch / "ran"
    script = work.script("fails-reserved.sh", f"""#!/bin/bash
#SBATCH --output=/dev/null
#STAGE pool=scratch capacity=64M
#STAGEIN {missing} {work.scratch}/missing.bin
touch {ran}
""")
    job_id, _ = cancelled_before_it_ran(work, script, ran, timeout=180)
    wait_out_of_the_pool(job_id)
    # the teardown ran to its end: slurmctld did not cut it short
    text = (Path(work.cluster.log_dir) / "slurmctld.log").read_text(errors="replace")
    assert f"teardown for JobId={job_id} terminated by slurmctld" not in text
