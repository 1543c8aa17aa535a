"""The burst-buffer stages when slurmctld does not answer (issue 46, item 2): a submission that
timed out is looked for in the queue before it is made again, a copy the controller queued late
is cancelled, a read is asked again; and a data_in that fails for any reason (a script the
planner refuses now that sbatch checks in Lua only) ends its job with the reason instead of
leaving it pending for ever."""

from __future__ import annotations

import dataclasses

import pytest

from scratchkeeper.burst_buffer import guarded, lifecycle, records
from scratchkeeper.burst_buffer.confirm import ConfirmingScheduler
from scratchkeeper.errors import CommandError, CommandTimeout, SchedulerError
from scratchkeeper.planner import records as chains
from scratchkeeper.schedulers import slurm
from scratchkeeper.schedulers.base import SubmitSpec
from scripted_runner import ScriptedRunner, result

from .conftest import Queue, job_script, slurm_script

SCRIPT = "/spool/sk1/stage-in.sh"
SPEC = SubmitSpec(script_path=SCRIPT, queue="dataxfer", job_name="run.stage-in", workdir="/w",
                  output_path="/spool/sk1/stage-in.out", extra_args=("--uid=1000", "--gid=1000"))
TIMED_OUT = CommandTimeout("sbatch: timed out after 30s", argv=["sbatch"], returncode=None)
SOCKET = CommandError("sbatch failed (exit 1)", argv=["sbatch"], returncode=1,
                      stderr="sbatch: error: Batch job submission failed: Socket timed out on "
                             "send/recv operation")


def scheduler(patience: float = 5.0) -> ConfirmingScheduler:
    confirming = ConfirmingScheduler(slurm, timeout=0.01, retries=0, patience=patience, pause=0)
    confirming.retry_delay = 0
    return confirming


def queue_of(*jobs: tuple[str, str]):
    """squeue --format=%i|%o answering ``jobs`` (id, script)."""
    return lambda argv: result(argv, "".join(f"{j}|{s}\n" for j, s in jobs))


# -- submissions -------------------------------------------------------------------------------
def test_a_timed_out_sbatch_whose_job_is_queued_keeps_that_job_and_submits_nothing_again(
        use_runner):
    runner = use_runner(ScriptedRunner([
        (("sbatch",), TIMED_OUT),
        (("squeue",), queue_of(("40", "/other/job.sh"), ("41", SCRIPT))),
        (("scontrol", "release"), lambda argv: result(argv)),
    ]))
    confirming = scheduler()
    assert confirming.submit(SPEC) == "41"
    (sbatch,) = runner.ran("sbatch")
    assert "--hold" in sbatch  # held until confirmed: a copy queued late never runs
    assert runner.ran("scontrol") == [("scontrol", "release", "41")]
    assert confirming.cancel_copies() == []


def test_a_timed_out_sbatch_whose_job_never_shows_is_made_again_and_a_late_copy_cancelled(
        use_runner):
    queued: list[tuple[str, str]] = []
    answers = iter([SOCKET, result(["sbatch"], "52\n")])
    runner = use_runner(ScriptedRunner([
        (("sbatch",), lambda argv: next(answers)),
        (("squeue",), lambda argv: queue_of(*queued)(argv)),
        (("scontrol",), lambda argv: result(argv)),
        (("scancel",), lambda argv: result(argv)),
    ]))
    confirming = scheduler()
    assert confirming.submit(SPEC) == "52"
    assert len(runner.ran("sbatch")) == 2 and len(runner.ran("squeue")) >= 1
    # the controller queued the first one after all, held
    queued += [("51", SCRIPT), ("52", SCRIPT)]
    assert confirming.cancel_copies() == ["51"]
    assert runner.ran("scancel") == [("scancel", "51")]
    (comment,) = [argv for argv in runner.ran("scontrol") if argv[1] == "update"]
    assert comment[2] == "JobId=51" and "queued late" in comment[3]


def test_a_refused_sbatch_fails_at_once_without_a_look_at_the_queue(use_runner):
    runner = use_runner(ScriptedRunner([
        (("sbatch",), CommandError("sbatch failed (exit 1)", argv=["sbatch"], returncode=1,
                                   stderr="sbatch: error: invalid partition specified: x")),
    ]))
    with pytest.raises(SchedulerError, match="invalid partition"):
        scheduler().submit(SPEC)
    assert runner.ran("squeue") == [] and len(runner.ran("sbatch")) == 1


def test_a_submission_never_confirmed_fails_after_the_patience_having_submitted_once(
        use_runner):
    runner = use_runner(ScriptedRunner([
        (("sbatch",), TIMED_OUT),
        (("squeue",), CommandTimeout("squeue: timed out", argv=["squeue"], returncode=None)),
    ]))
    with pytest.raises(SchedulerError, match="timed out"):
        scheduler(patience=0.05).submit(SPEC)
    assert len(runner.ran("sbatch")) == 1  # never blindly again: it may be queued


def test_a_read_without_an_answer_is_asked_again(use_runner):
    answers = iter([CommandTimeout("squeue: timed out", argv=["squeue"], returncode=None),
                    CommandError("squeue failed (exit 1)", argv=["squeue"], returncode=1,
                                 stderr="squeue: error: Unable to contact slurm controller"),
                    result(["squeue"], f"7|{SCRIPT}\n")])
    runner = use_runner(ScriptedRunner([(("squeue",), lambda argv: next(answers))]))
    assert scheduler().queued_with_script(SCRIPT) == ["7"]
    assert len(runner.ran("squeue")) == 3


def test_a_cancel_reason_slurm_holds_for_a_missing_db_index_is_not_asked_again(use_runner):
    """22.05 holds each such update 5 s and refuses it until the job ends: the cancel goes on."""
    no_index = CommandError("scontrol failed (exit 1)", argv=["scontrol"], returncode=1,
                            stderr="Job update not available right now, the DB index is being "
                                   "set, try again in a bit for job 7")
    runner = use_runner(ScriptedRunner([(("scontrol",), lambda argv: no_index),
                                        (("scancel",), lambda argv: result(argv))]))
    scheduler().cancel(["7"], reason="torn down")
    assert [argv[0] for argv in runner.recorded] == ["scontrol", "scancel"]


# -- data_in -------------------------------------------------------------------------------------
class StandIn(Queue):
    """The stand-in scheduler with what :mod:`guarded` asks of a confirming one."""

    pause = 0.0

    def cancel_copies(self) -> list[str]:
        return []


def test_a_script_the_planner_refuses_at_data_in_ends_the_job_with_the_reason(site):
    """A relative destination that leads out of scratch from the job's directory: the Lua check
    at sbatch cannot judge it (Slurm 22.05 does not tell it the directory), the planner can."""
    config, store, tmp_path = site
    script = slurm_script(tmp_path / "script", "#!/bin/bash\n#STAGEIN ftp://h/a in.dat\ntrue\n")
    queue = StandIn(store, lambda spec: ("done", None))
    lifecycle.setup(config, store, "95", 1000, 1000, "scratch", 1 << 20)
    with pytest.raises(lifecycle.StageFailed) as failed:
        guarded.data_in(config, store, "95", script, scheduler=queue, patience=0)
    reason = (f"stage-in failed: script:2: #STAGEIN: the destination {tmp_path}/in.dat is outside "
              f"the scratch root {tmp_path}/scratch")
    assert str(failed.value) == reason
    # not cancelled from here (that races Slurm's teardown): marked, for the ender
    assert queue.annotated == [(["95"], reason)] and queue.cancelled == []
    assert queue.submitted == []
    row = records.job(store, "95")
    assert row["stage"] == records.STAGE_IN_FAILED and row["reason"] == reason
    assert row["end_after_teardown"] is not None
    assert (lifecycle.state_dir(config) / "held-bytes").read_text() == "0\n"


def test_with_hold_the_refused_job_keeps_the_reason_and_is_not_cancelled(site):
    config, store, tmp_path = site
    config = dataclasses.replace(config, burst_buffer=dataclasses.replace(
        config.burst_buffer, stage_in_failure="hold"))
    script = slurm_script(tmp_path / "script", "#!/bin/bash\n#STAGEIN ftp://h/a in.dat\ntrue\n")
    queue = StandIn(store, lambda spec: ("done", None))
    lifecycle.setup(config, store, "96", 1000, 1000, "", 0)
    with pytest.raises(lifecycle.StageFailed):
        guarded.data_in(config, store, "96", script, scheduler=queue, patience=0)
    assert queue.cancelled == []
    ((ids, reason),) = queue.annotated
    assert ids == ["96"] and reason.startswith("stage-in failed: script:2: ")
    assert records.job(store, "96")["end_after_teardown"] is None


def test_a_data_in_that_fails_for_any_other_reason_ends_the_job_too(site, monkeypatch):
    config, store, tmp_path = site
    queue = StandIn(store, lambda spec: ("done", None))
    lifecycle.setup(config, store, "97", 1000, 1000, "", 0)
    monkeypatch.setattr(lifecycle, "spool_data_jobs", lambda *a: (_ for _ in ()).throw(
        RuntimeError("a bug")))
    with pytest.raises(lifecycle.StageFailed, match=r"internal error: RuntimeError\('a bug'\)"):
        guarded.data_in(config, store, "97", job_script(tmp_path), scheduler=queue, patience=0)
    ((ids, reason),) = queue.annotated
    assert ids == ["97"] and reason == "stage-in failed: internal error: RuntimeError('a bug')"
    assert queue.cancelled == [] and records.to_end(store)[0]["job_id"] == "97"


def test_a_data_in_whose_squeue_got_no_answer_runs_again_and_stages(site, monkeypatch):
    config, store, tmp_path = site
    queue = StandIn(store, lambda spec: ("done", None))
    lifecycle.setup(config, store, "98", 1000, 1000, "", 0)
    facts = lifecycle.job_facts
    asked = []

    def silent_once(job_id, config):
        asked.append(job_id)
        if len(asked) == 1:
            raise SchedulerError("squeue: timed out") from CommandTimeout(
                "squeue: timed out after 30s", argv=["squeue"], returncode=None)
        return facts(job_id, config)
    monkeypatch.setattr(lifecycle, "job_facts", silent_once)
    chain_id = guarded.data_in(config, store, "98", job_script(tmp_path), scheduler=queue)
    assert len(asked) == 2 and len(queue.submitted) == 1 and queue.cancelled == []
    assert records.job(store, "98")["stage"] == records.STAGED_IN
    assert chains.chain_of_job(store, "98") == chain_id


def test_a_stage_in_data_in_ended_itself_is_not_ended_twice(site):
    config, store, tmp_path = site
    queue = StandIn(store, lambda spec: ("failed", "no such file"))
    lifecycle.setup(config, store, "99", 1000, 1000, "", 0)
    with pytest.raises(lifecycle.StageFailed, match="no such file"):
        guarded.data_in(config, store, "99", job_script(tmp_path), scheduler=queue)
    assert len(queue.annotated) == 1 and queue.annotated[0][0] == ["99"]
    assert [row["job_id"] for row in records.to_end(store)] == ["99"]


def test_a_teardown_while_data_in_ran_has_the_last_word(site):
    """slurmctld restarted (or the job was cancelled) while data_in waited: the teardown left
    the job as Slurm wants it (staged again, or gone); data_in's failure ends nothing."""
    config, store, tmp_path = site

    def torn_down(spec):
        records.set_stage(store, "94", records.TORN_DOWN)
        return "done", None
    queue = StandIn(store, torn_down)
    lifecycle.setup(config, store, "94", 1000, 1000, "", 0)
    with pytest.raises(lifecycle.StageFailed, match="torn down while its stage-in waited"):
        guarded.data_in(config, store, "94", job_script(tmp_path), scheduler=queue, patience=0)
    assert queue.cancelled == [] and queue.annotated == []
    assert records.job(store, "94")["stage"] == records.TORN_DOWN
