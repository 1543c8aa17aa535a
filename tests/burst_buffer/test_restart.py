"""slurmctld restarted during a stage-in (issue 46, item 5), against a stand-in scheduler that
plays what Slurm 22.05's burst_buffer/lua does then.

At start, slurmctld finds the job pending with its burst-buffer state ``staging-in`` (or
``staged-in``) and does not know how its staging went: ``_recover_job_bb`` queues a teardown
with ``hurry`` and defers the job 60 s; once the teardown is done the job's state is
``complete``, which ``_identify_bb_candidate`` turns back to pending ("Job requeued or
slurmctld restarted during stage-in"), and Slurm runs ``setup`` and ``data_in`` again. The job
must then stage and run; only a job that really ended is torn down for good.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from scratchkeeper.burst_buffer import lifecycle, records
from scratchkeeper.planner import records as chains
from scratchkeeper.schedulers import JobRecord, JobState

from .conftest import job_script

JOB = "70"


class RestartQueue:
    """The scheduler calls lifecycle makes, answered in memory: a data job runs until
    :meth:`finish` plays its ``stage commit`` (at once when ``auto``), a cancel ends it
    ``CANCELLED``; the compute job's own state is ``state[JOB]``."""

    def __init__(self, store, job_state: JobState = JobState.PENDING):
        self.store = store
        self.auto = False
        self.submitted: list[tuple[str, str, str]] = []  # job id, chain id, job key
        self.state: dict[str, JobState] = {JOB: job_state}
        self.cancelled: list[tuple[list[str], str | None]] = []
        self.annotated: list[tuple[list[str], str]] = []
        #: the job's recorded teardown time when each cancel came
        self.torn_down_at_cancel: list[float | None] = []

    def submit(self, spec) -> str:
        job_id = str(1000 + len(self.submitted))
        self.submitted.append((job_id, Path(spec.script_path).parent.name,
                               Path(spec.script_path).stem))
        self.state[job_id] = JobState.RUNNING
        if self.auto:
            threading.Thread(target=self.finish, args=(job_id,), daemon=True).start()
        return job_id

    def finish(self, job_id: str) -> None:
        _, chain_id, key = next(s for s in self.submitted if s[0] == job_id)
        deadline = time.monotonic() + 10
        while not any(r["job_key"] == key and r["job_id"] == job_id
                      for r in chains.chain_jobs(self.store, chain_id)):
            assert time.monotonic() < deadline, f"{job_id} never recorded"
            time.sleep(0.01)  # data_in records the id once sbatch answered
        for row in chains.staged_files(self.store, chain_id, key):
            chains.record_staged(self.store, chain_id, row["path"], job_key=key,
                                 line=row["line"], source=row["source"], size=1000,
                                 checksum="sha256:x", owner_uid=1000, owner_gid=1000)
        chains.set_jobs_state(self.store, chain_id, [key], chains.JOB_DONE)
        self.state[job_id] = JobState.COMPLETED

    def lookup(self, job_ids, *, missing_ok=False):
        return {j: JobRecord(job_id=j, state=self.state[j], native_state=self.state[j].name)
                for j in job_ids if j in self.state}

    def cancel(self, job_ids, reason=None):
        self.cancelled.append((list(job_ids), reason))
        row = records.job(self.store, JOB)
        self.torn_down_at_cancel.append(row["teardown_at"] if row is not None else None)
        for job_id in job_ids:
            self.state[job_id] = JobState.CANCELLED

    def annotate(self, job_ids, reason):
        self.annotated.append((list(job_ids), reason))
        return True

    def queued_from(self, folder):
        return []


def killed(*args, **kwargs):
    raise KeyboardInterrupt  # slurmctld stopped: its script daemon kills the waiting data_in


def settled(store, chain_id: str) -> bool:
    return chains.made(store, "chain_ends") and bool(
        store.query("SELECT 1 FROM chain_ends WHERE chain_id = ?", (chain_id,)))


def staged_again(config, store, queue, script) -> str:
    """What the restarted slurmctld runs once the teardown is done: setup, then data_in."""
    queue.auto = True
    lifecycle.setup(config, store, JOB, 1000, 1000, "", 0)
    return lifecycle.data_in(config, store, JOB, script, scheduler=queue)


def test_a_restart_during_the_stage_in_stages_again_and_the_job_keeps_its_data(site,
                                                                               monkeypatch):
    config, store, tmp_path = site
    queue = RestartQueue(store)
    script = job_script(tmp_path)
    lifecycle.setup(config, store, JOB, 1000, 1000, "", 0)
    wait = lifecycle._wait
    monkeypatch.setattr(lifecycle, "_wait", killed)
    with pytest.raises(KeyboardInterrupt):
        lifecycle.data_in(config, store, JOB, script, scheduler=queue)
    monkeypatch.setattr(lifecycle, "_wait", wait)
    ((first, chain_id, _),) = queue.submitted

    # the restarted slurmctld tears the pending job's staging down...
    assert lifecycle.teardown(config, store, JOB, True, scheduler=queue) == [first]
    assert chains.chain(store, chain_id)["state"] == records.CHAIN_ENDED
    # ... and stages it again: the cancelled data job is submitted again and waited for
    assert staged_again(config, store, queue, script) == chain_id
    (ids, reason), = queue.cancelled  # the teardown's, and nothing else: not the job
    assert ids == [first] and "still pending" in reason and "staged again" in reason
    assert not settled(store, chain_id)  # it came back: no data job of it is an orphan
    second = queue.submitted[-1][0]
    assert second != first
    rows = {r["role"]: r for r in chains.chain_jobs(store, chain_id)}
    assert (rows["stage-in"]["job_id"], rows["stage-in"]["state"]) == (second, chains.JOB_DONE)
    assert records.job(store, JOB)["stage"] == records.STAGED_IN
    assert chains.chain(store, chain_id)["state"] == records.CHAIN_STATE
    assert (lifecycle.state_dir(config) / f"{JOB}.env").read_text().startswith(
        f"SCRATCHKEEPER_CHAIN={chain_id}\n")
    assert not queue.annotated


def test_a_restart_after_the_stage_in_reopens_the_chain_without_staging_twice(site):
    config, store, tmp_path = site
    queue = RestartQueue(store)
    queue.auto = True
    script = job_script(tmp_path)
    lifecycle.setup(config, store, JOB, 1000, 1000, "", 0)
    chain_id = lifecycle.data_in(config, store, JOB, script, scheduler=queue)
    assert lifecycle.teardown(config, store, JOB, True, scheduler=queue) == []
    assert staged_again(config, store, queue, script) == chain_id
    assert len(queue.submitted) == 1 and queue.cancelled == []
    assert chains.chain(store, chain_id)["state"] == records.CHAIN_STATE
    assert records.job(store, JOB)["stage"] == records.STAGED_IN


def test_a_data_in_that_outlived_the_restart_leaves_the_job_to_the_teardown(site):
    """Should the first data_in outlive slurmctld, the teardown cancels the data job it waits
    for: it must not take that for a failed stage-in and cancel the job Slurm stages again."""
    config, store, tmp_path = site
    queue = RestartQueue(store)
    script = job_script(tmp_path)
    lifecycle.setup(config, store, JOB, 1000, 1000, "", 0)
    outcome: list[BaseException | str] = []

    def first_data_in():
        try:
            outcome.append(lifecycle.data_in(config, store, JOB, script, scheduler=queue))
        except BaseException as err:  # what the thread ended with, for the test to judge
            outcome.append(err)

    thread = threading.Thread(target=first_data_in, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not any(r["job_id"] for r in chains.chain_jobs(store, records.job(store, JOB)[
            "chain_id"] or "none") if r["role"] == "stage-in"):
        assert time.monotonic() < deadline, "the stage-in was never submitted"
        time.sleep(0.01)
    lifecycle.teardown(config, store, JOB, True, scheduler=queue)
    thread.join(30)
    (err,) = outcome
    assert isinstance(err, lifecycle.StageFailed) and "torn down while" in str(err)
    assert records.job(store, JOB)["stage"] == records.TORN_DOWN  # no stage-in failure recorded
    assert [ids for ids, _ in queue.cancelled] == [["1000"]] and not queue.annotated
    # the teardown was on record before its cancel: however the waiting data_in's look at the
    # queue falls, it finds the teardown once it sees its data job ended
    assert queue.torn_down_at_cancel[0] is not None
    staged_again(config, store, queue, script)
    assert records.job(store, JOB)["stage"] == records.STAGED_IN


@pytest.mark.parametrize("state", [JobState.CANCELLED, JobState.COMPLETING])
def test_a_job_no_longer_pending_is_torn_down_for_good(site, monkeypatch, state):
    """Cancelled during its stage-in, or ending (Slurm shows a job whose nodes still clean up
    as COMPLETING): its chain is settled, nothing will stage it again."""
    config, store, tmp_path = site
    queue = RestartQueue(store)
    script = job_script(tmp_path)
    lifecycle.setup(config, store, JOB, 1000, 1000, "", 0)
    wait = lifecycle._wait
    monkeypatch.setattr(lifecycle, "_wait", killed)
    with pytest.raises(KeyboardInterrupt):
        lifecycle.data_in(config, store, JOB, script, scheduler=queue)
    monkeypatch.setattr(lifecycle, "_wait", wait)
    ((first, chain_id, _),) = queue.submitted
    queue.state[JOB] = state
    assert lifecycle.teardown(config, store, JOB, True, scheduler=queue) == [first]
    assert queue.cancelled[-1][1] == f"job {JOB} was torn down (cancelled)"
    assert settled(store, chain_id)
    assert chains.chain(store, chain_id)["state"] == records.CHAIN_ENDED
    row = {r["role"]: r for r in chains.chain_jobs(store, chain_id)}["stage-in"]
    assert row["state"] == chains.JOB_CANCELLED and "torn down" in row["reason"]
    assert (lifecycle.state_dir(config) / "held-bytes").read_text() == "0\n"
