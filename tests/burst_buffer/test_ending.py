"""A job whose stage-in failed is cancelled only once Slurm has torn its buffer down
(burst_buffer/ending.py): a cancel from inside data_in raced Slurm's teardown, which slurmctld
then killed, keeping the job's share of the pool (issue 40, seen on 22.05 and 24.11). And a job
id Slurm hands out again is another job: it never takes the earlier job's record."""

from __future__ import annotations

import fcntl
import os

import pytest

from scratchkeeper.burst_buffer import ending, lifecycle, records
from scratchkeeper.errors import SchedulerError
from scratchkeeper.planner import records as chains
from scratchkeeper.schedulers import slurm
from scripted_runner import ScriptedRunner, result

from .conftest import Queue, job_script

PENDING = {"job_state": "PENDING"}


def job(bb_state: str, state: object = "PENDING") -> dict:
    return {"job_id": 7, "job_state": state, "burst_buffer_state": bb_state}


@pytest.mark.parametrize(("record", "marked_for", "decision"), [
    (None, 0, ending.GONE),                                   # not in the queue
    (job("complete", "CANCELLED"), 0, ending.GONE),           # the user cancelled it
    (job("complete", ["CANCELLED"]), 0, ending.GONE),         # 23.02+: a list
    (job("teardown"), 5, ending.WAIT),                        # Slurm tears it down
    (job("teardown"), ending.TEARDOWN_LIMIT + 1, ending.CANCEL),
    (job("staging-in"), 1, ending.WAIT),                      # Slurm has not taken the failure
    (job("staging-in"), ending.GRACE + 1, ending.CANCEL),     # no Flags=TeardownFailure
    (job("complete"), 0, ending.CANCEL),                      # the buffer is gone: cancel now
    (job("complete", ["PENDING"]), 0, ending.CANCEL),
    (job(""), 0, ending.CANCEL),
])
def test_what_the_ender_does_with_a_marked_job(record, marked_for, decision):
    assert ending.decide(record, marked_for) == decision


def failed_job(site, job_id: str = "79") -> Queue:
    config, store, tmp_path = site
    queue = Queue(store, lambda spec: ("failed", "script:2: 550 no such file"))
    lifecycle.setup(config, store, job_id, 1000, 1000, "scratch", 1 << 20)
    with pytest.raises(lifecycle.StageFailed):
        lifecycle.data_in(config, store, job_id, job_script(tmp_path), scheduler=queue)
    return queue


def test_a_failed_job_is_cancelled_once_its_teardown_is_done_and_not_before(site):
    config, store, _ = site
    queue = failed_job(site)
    states = iter(["staging-in", "teardown", "teardown", "complete"])
    asked: list[str] = []

    def queued(job_id):
        asked.append(next(states))
        if asked[-1] == "teardown" and len(asked) == 2:  # Slurm runs bb teardown meanwhile
            lifecycle.teardown(config, store, job_id, True, scheduler=queue)
        return job(asked[-1])
    sleeps: list[float] = []
    assert ending.run_ender(config, store, queue, queued, sleep=sleeps.append) == ["79"]
    assert asked == ["staging-in", "teardown", "teardown", "complete"] and len(sleeps) == 3
    ((ids, reason),) = queue.cancelled
    assert ids == ["79"] and reason.startswith("stage-in failed: ") and "550" in reason
    assert records.to_end(store) == []
    row = records.job(store, "79")
    assert row["stage"] == records.TORN_DOWN and row["end_after_teardown"] is None
    # the teardown of a held job whose stage-in failed ends its chain: nothing stages it again
    assert chains.chain(store, row["chain_id"])["state"] != records.CHAIN_STATE


def test_a_failed_job_the_user_cancelled_first_is_left_alone(site):
    config, store, _ = site
    queue = failed_job(site)
    assert ending.run_ender(config, store, queue, lambda job_id: None) == []
    assert queue.cancelled == [] and records.to_end(store) == []


def test_a_queue_that_does_not_answer_is_asked_again(site):
    config, store, _ = site
    queue = failed_job(site)
    answers = iter([SchedulerError("squeue: timed out"), job("complete")])

    def queued(job_id):
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer
    assert ending.run_ender(config, store, queue, queued, sleep=lambda s: None) == ["79"]


def test_a_cancel_that_fails_is_recorded_and_ends_the_wait(site):
    config, store, _ = site
    queue = failed_job(site)

    def refused(job_ids, reason=None):
        raise SchedulerError("scancel: Access/permission denied")
    queue.cancel = refused
    assert ending.run_ender(config, store, queue, lambda job_id: job("complete")) == []
    row = records.job(store, "79")
    assert row["end_after_teardown"] is None and "not cancelled: scancel" in row["reason"]


def test_one_ender_at_a_time_the_second_leaves_the_marks_to_the_first(site):
    config, store, _ = site
    queue = failed_job(site)
    lock = lifecycle.state_dir(config) / ending.ENDER_LOCK
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert ending.run_ender(config, store, queue, lambda job_id: job("complete")) == []
        assert [row["job_id"] for row in records.to_end(store)] == ["79"]
    finally:
        os.close(fd)
    assert ending.run_ender(config, store, queue, lambda job_id: job("complete")) == ["79"]


def test_the_queue_is_asked_for_one_job_with_squeue_json(site, use_runner):
    config, _, _ = site
    runner = use_runner(ScriptedRunner([
        (("squeue",), lambda argv: result(argv, '{"jobs": [{"job_id": 7, "job_state": '
                                                '["PENDING"], "burst_buffer_state": '
                                                '"complete"}]}')),
    ]))
    record = ending.queued_job(config)("7")
    assert slurm.state_name(record) == "PENDING" and ending.decide(record, 0) == ending.CANCEL
    assert runner.ran("squeue") == [tuple(slurm.build_queued_job("7"))]


def test_a_job_the_queue_no_longer_knows_is_none(site, use_runner):
    config, _, _ = site
    use_runner(ScriptedRunner([
        (("squeue",), lambda argv: result(argv, "", returncode=1,
                                          stderr="slurm_load_jobs error: Invalid job id "
                                                 "specified")),
    ]))
    assert ending.queued_job(config)("7") is None


# -- a job id handed out again ---------------------------------------------------------------
def saved_script(tmp_path, name: str, mtime_ns: int):
    path = tmp_path / name
    path.write_text("#!/bin/bash\n")
    os.utime(path, ns=(mtime_ns, mtime_ns))
    return str(path)


def test_a_job_id_handed_out_again_is_a_new_record_and_the_old_chain_ends(site):
    config, store, tmp_path = site
    first = saved_script(tmp_path, "first", 1_000_000_000_000)
    lifecycle.setup(config, store, "37", 1000, 1000, "", 0, first)
    chain_id = lifecycle.data_in(config, store, "37", job_script(tmp_path),
                                 scheduler=Queue(store, lambda spec: ("done", None)))
    # slurmctld restarted: the same job set up again keeps its record and chain
    lifecycle.setup(config, store, "37", 1000, 1000, "", 0, first)
    assert records.job(store, "37")["chain_id"] == chain_id
    # its state reset: another job gets id 37, with a script of its own
    second = saved_script(tmp_path, "second", 2_000_000_000_000)
    lifecycle.setup(config, store, "37", 2000, 2000, "", 0, second)
    row = records.job(store, "37")
    assert row["chain_id"] is None and row["uid"] == 2000 and row["stage"] == records.SET_UP
    assert row["submission"] == lifecycle.submission_of(second) != lifecycle.submission_of(first)
    assert chains.chain(store, chain_id)["state"] == records.CHAIN_ENDED


def test_a_record_without_a_submission_is_kept_as_before(site):
    """Records from before the column, and a stage Slurm gives no script: the id alone."""
    config, store, tmp_path = site
    lifecycle.setup(config, store, "38", 1000, 1000, "", 0)
    records.set_chain(store, "38", "sk-38")
    lifecycle.setup(config, store, "38", 1000, 1000, "", 0, saved_script(tmp_path, "s", 10**12))
    row = records.job(store, "38")
    assert row["chain_id"] == "sk-38" and row["submission"] is not None
    assert lifecycle.submission_of(str(tmp_path / "missing")) is None
    assert lifecycle.submission_of("") is None


def test_a_data_jobs_own_words_give_the_reason_once(site):
    """``stage fail`` records ``stage-in failed: script:3: ...``: the job's reason (and the
    comment the ender's cancel writes) says "stage-in failed" once, with the script's line."""
    config, store, tmp_path = site
    queue = Queue(store, lambda spec: ("failed", "stage-in failed: job.sh:3: exit 1: 550 gone"))
    lifecycle.setup(config, store, "80", 1000, 1000, "", 0)
    with pytest.raises(lifecycle.StageFailed) as failed:
        lifecycle.data_in(config, store, "80", job_script(tmp_path), scheduler=queue)
    assert str(failed.value) == "stage-in failed: job.sh:3: exit 1: 550 gone"
    assert queue.annotated == [(["80"], "stage-in failed: job.sh:3: exit 1: 550 gone")]
