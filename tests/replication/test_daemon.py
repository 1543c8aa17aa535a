"""The daemon's cycle against a scheduler that can be taken down (in process, no cluster):
no action on stale data, backoff with jitter, confirmation of vanished jobs, events."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from scratchkeeper.config import parse_config
from scratchkeeper.errors import SchedulerError, UnknownJobError
from scratchkeeper.replication.daemon import ReplicationDaemon, window_params
from scratchkeeper.replication.state import FILE_CLOSED, JOB_ENDED
from scratchkeeper.schedulers.base import JobRecord, JobState, QueueSnapshot
from scratchkeeper.state import StateStore
from scratchkeeper.storage import open_backend

from .helpers import stage_input, write_site


class QueueDouble:
    """The Scheduler surface the daemon uses, over a list of jobs the test edits."""

    name = "double"

    def __init__(self):
        self.jobs: list[JobRecord] = []
        self.accounting: dict[str, JobRecord] = {}
        self.down = False
        self.accounting_down = False
        self.snapshots = 0

    def snapshot(self) -> QueueSnapshot:
        if self.down:
            raise SchedulerError("squeue: Unable to contact slurm controller (connect failure)")
        self.snapshots += 1
        return QueueSnapshot(tuple(self.jobs))

    def system_nodes(self, queue: str | None = None) -> int:
        if self.down:
            raise SchedulerError("sinfo: Unable to contact slurm controller")
        return 8

    def lookup(self, job_ids):
        if self.down or self.accounting_down:
            raise SchedulerError("sacct: Connection refused")
        unknown = [j for j in job_ids if j not in self.accounting]
        if unknown:
            raise UnknownJobError("unknown job ids: " + ", ".join(unknown))
        return {j: self.accounting[j] for j in job_ids}

    def history(self, job_ids):
        if self.down or self.accounting_down:
            raise SchedulerError("sacct: Connection refused")
        return [self.accounting[j] for j in job_ids if j in self.accounting]

    def end(self, job_id: str, state=JobState.COMPLETED) -> None:
        job = next(j for j in self.jobs if j.job_id == job_id)
        self.jobs.remove(job)
        self.accounting[job_id] = replace(job, state=state)


def pending(job_id: str, nodes: int = 4) -> JobRecord:
    return JobRecord(job_id, JobState.PENDING, "PENDING", queue="batch", nodes=nodes,
                     priority=1000 - int(job_id))


@pytest.fixture
def rig(tmp_path):
    text = write_site(tmp_path / "site.toml", tmp_path, interval=0.5).read_text()
    config = parse_config(text.replace('close_quiet = 1.0', 'close_quiet = 1.0\n'
                                       'unknown_grace = 0.5'), str(tmp_path / "site.toml"))
    queue = QueueDouble()
    daemon = ReplicationDaemon(config, scheduler=queue, backend=open_backend(config),
                               store=StateStore(config.state.database))
    yield config, queue, daemon
    daemon.shutdown()


def replicas(daemon) -> dict[str, str]:
    return {p: r.state for p, r in daemon.state.replicas().items()}


def run_cycle(daemon):
    report = daemon.cycle()
    assert daemon.wait_idle(30)
    return report


def test_scheduler_down_means_no_action_and_a_growing_jittered_pause(rig):
    config, queue, daemon = rig
    queue.jobs = [pending("1")]
    path, _ = stage_input(config, "1", "a.dat", 100_000)
    run_cycle(daemon)
    assert replicas(daemon) == {path: "ready"}
    queue.end("1", JobState.CANCELLED)
    queue.down = True
    pauses = []
    for _ in range(6):
        report = run_cycle(daemon)
        assert not report.ok and report.decisions is None
        pauses.append(daemon._pause(report))
    assert replicas(daemon) == {path: "ready"}          # stale view: nothing removed
    assert daemon.failures == 6
    assert daemon.state.status()["consecutive_failures"] == 6
    interval, ceiling = config.replication.interval, config.replication.backoff_max
    for failures, pause in enumerate(pauses, 1):
        nominal = min(ceiling, interval * 2 ** (failures - 1))
        assert 0.5 * nominal <= pause <= 1.5 * nominal
    assert len({round(p, 6) for p in pauses}) == len(pauses)   # jitter
    queue.down = False
    run_cycle(daemon)
    assert replicas(daemon) == {} and daemon.failures == 0


def test_a_vanished_job_is_confirmed_before_its_replica_goes(rig):
    config, queue, daemon = rig
    queue.jobs = [pending("1"), pending("2")]
    a, _ = stage_input(config, "1", "a.dat", 100_000)
    b, _ = stage_input(config, "2", "b.dat", 100_000)
    # window of 4 nodes: job 1 only; job 2 (4 nodes > T*S) waits
    run_cycle(daemon)
    assert replicas(daemon) == {a: "ready"}
    queue.end("1")
    queue.accounting_down = True              # queue answers, accounting does not
    report = run_cycle(daemon)
    assert replicas(daemon).get(a) == "ready"
    assert report.decisions.unconfirmed == ["1"]
    queue.accounting_down = False
    report = run_cycle(daemon)
    assert report.confirmed_ended == ["1"]
    assert a not in replicas(daemon) and replicas(daemon).get(b) == "ready"


def test_a_job_neither_queue_nor_accounting_knows_is_dropped_after_the_grace(rig):
    config, queue, daemon = rig
    queue.jobs = [pending("1")]
    a, _ = stage_input(config, "1", "a.dat", 100_000)
    run_cycle(daemon)
    queue.jobs = []                           # gone, and accounting never heard of it
    run_cycle(daemon)
    assert replicas(daemon) == {a: "ready"}
    time.sleep(0.6)
    run_cycle(daemon)
    assert replicas(daemon) == {}


def test_one_unknown_job_does_not_hold_back_the_confirmed_end_of_another(rig):
    config, queue, daemon = rig
    queue.jobs = [pending("1", nodes=1), pending("2", nodes=1)]   # 2 nodes < 4: both in window
    a, _ = stage_input(config, "1", "a.dat", 100_000)
    b, _ = stage_input(config, "2", "b.dat", 100_000)
    run_cycle(daemon)
    assert set(replicas(daemon)) == {a, b}
    queue.end("1", JobState.TIMEOUT)
    queue.jobs = []                           # 2 vanished too, unknown to accounting
    report = run_cycle(daemon)
    assert report.confirmed_ended == ["1"]
    assert replicas(daemon) == {b: "ready"}


def test_job_end_event_is_confirmed_and_a_requeue_keeps_the_replica(rig):
    config, queue, daemon = rig
    queue.jobs = [pending("1")]
    a, _ = stage_input(config, "1", "a.dat", 100_000)
    run_cycle(daemon)
    # the epilog fires on a requeue too: the job is still (again) in the queue
    daemon.state.add_event(JOB_ENDED, job_id="1", source="test")
    run_cycle(daemon)
    assert replicas(daemon) == {a: "ready"} and daemon.state.pending_events() == []


def test_close_event_releases_the_replica_of_the_running_job_only(rig):
    config, queue, daemon = rig
    queue.jobs = [pending("1"), JobRecord("9", JobState.RUNNING, "RUNNING", nodes=1)]
    a, _ = stage_input(config, "1", "a.dat", 100_000)
    run_cycle(daemon)
    daemon.state.add_event(FILE_CLOSED, path=a, source="test")
    run_cycle(daemon)
    assert replicas(daemon) == {a: "ready"}       # still queued: a close is not its own
    queue.jobs = [replace(queue.jobs[0], state=JobState.RUNNING, start_time=time.time())]
    daemon.state.add_event(FILE_CLOSED, path=a, source="test")
    run_cycle(daemon)
    assert replicas(daemon) == {}
    claims = daemon.state.claims()
    assert [(c.active, c.released_why) for c in claims] == [(False, "closed")]


def test_restart_reconciles_and_a_second_daemon_is_refused(rig, tmp_path):
    config, queue, daemon = rig
    daemon.acquire_lock()
    other = ReplicationDaemon(config, scheduler=queue)
    with pytest.raises(Exception, match="another replicad holds the lock"):
        other.acquire_lock()
    other.shutdown()


def test_per_partition_overrides_inherit_unset_keys(tmp_path):
    text = write_site(tmp_path / "site.toml", tmp_path, alpha=0.5, threshold=0.1).read_text()
    text += "\n[replication.partitions.big]\nalpha = 1.0\n"
    base, per = window_params(parse_config(text, "site.toml"))
    assert (base.alpha, base.threshold) == (0.5, 0.1)
    assert (per["big"].alpha, per["big"].threshold) == (1.0, 0.1)


def test_a_removal_that_failed_half_way_is_finished_by_the_next_cycle(rig):
    config, queue, daemon = rig
    queue.jobs = [pending("1")]
    a, _ = stage_input(config, "1", "a.dat", 100_000)
    run_cycle(daemon)
    row = daemon.state.replica(a)
    daemon.state.begin_remove(a, row.token)      # as if remove_mirror had raised after this
    queue.end("1")
    run_cycle(daemon)
    assert replicas(daemon) == {}
    assert daemon.backend.layout(a).mirror_ids == [1]


def test_a_declared_input_that_appears_later_is_replicated_without_a_planner_change(rig):
    """The planner's answer is kept between cycles; a declared input not in the store yet is
    looked for again each cycle, not remembered as absent."""
    import os
    import uuid

    from scratchkeeper.planner import records

    config, queue, daemon = rig
    queue.jobs = [pending("1")]
    path = f"{config.storage.scratch_root}/late.dat"
    store = records.open_records(StateStore(config.state.database))
    chain_id, now = uuid.uuid4().hex, time.time()
    with store.transaction() as conn:
        conn.execute("INSERT INTO chains VALUES (?,?,?,?,?,?,?,?,?,?)",
                     (chain_id, "/dev/null", "/tmp", "slurm", 0, "submitted", "", now, now, "{}"))
        conn.execute("INSERT INTO chain_jobs(chain_id, job_key, role, queue, position, job_id, "
                     "state, updated) VALUES (?, 'compute', 'compute', 'batch', 1, '1', "
                     "'submitted', ?)", (chain_id, now))
        conn.execute("INSERT INTO job_inputs VALUES (?, ?)", (chain_id, path))
    run_cycle(daemon)
    # later than the planner's change by more than the clock margin: nothing is read again
    daemon._known_inputs.clock = lambda: time.time() + 1000
    run_cycle(daemon)
    run_cycle(daemon)
    assert replicas(daemon) == {} and daemon._known_inputs.last_read == 0
    backend = open_backend(config)
    backend.create(path, owner=(0, 0))
    backend.write(path, 0, os.urandom(50_000))
    run_cycle(daemon)
    assert replicas(daemon) == {path: "ready"}
