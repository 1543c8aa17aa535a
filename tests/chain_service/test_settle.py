"""The chain service's sweep that ends chains whose stage-in ended any way but success, and
what `status` says of them, on the scheduler output captured in tests/data/slurm/ and
tests/data/pbs/ (capture-chain-ends: a stage-in cancelled, one out of walltime, one killed
before its `stage fail` could run, each with a compute job waiting on afterok of it)."""

import json
from pathlib import Path

import pytest

from scratchkeeper.chain_service import settle
from scratchkeeper.config import SiteConfig
from scratchkeeper.planner import records
from scratchkeeper.planner.status import chain_status
from scratchkeeper.schedulers import slurm
from scratchkeeper.state import StateStore
from scripted_runner import ScriptedRunner, result

DATA = Path(__file__).resolve().parents[1] / "data"
IDS = json.loads((DATA / "slurm" / "chain-ends.json").read_text())
SQUEUE = (DATA / "slurm" / "squeue-chain-ends.json").read_text()
SACCT = (DATA / "slurm" / "sacct-chain-ends.txt").read_text()
#: when the captured chains were made: just before their jobs were submitted (a record submitted
#: before its chain was made is an earlier job that had the same id)
CAPTURED = min(j["submit_time"] for j in json.loads(SQUEUE)["jobs"]
               if str(j["job_id"]) in IDS.values()) - 30


@pytest.fixture
def store(tmp_path):
    return records.open_chain_ends(StateStore(tmp_path / "state.db"))


def add_chain(store, chain_id, stage_in, compute, stage_out=None, *, scheduler="slurm",
              state=records.SUBMITTED, reason="", stage_in_state=records.JOB_SUBMITTED,
              now=None):
    now = CAPTURED if now is None else now
    jobs = [("stage-in", stage_in, stage_in_state), ("compute", compute, records.JOB_SUBMITTED)]
    if stage_out:
        jobs.append(("stage-out", stage_out, records.JOB_SUBMITTED))
    with store.transaction() as conn:
        conn.execute("INSERT INTO chains VALUES (?,?,?,?,?,?,?,?,?,?)",
                     (chain_id, f"/home/a/{chain_id}.sh", "/home/a", scheduler, 1000, state,
                      reason, now, now, "{}"))
        for position, (role, job_id, job_state) in enumerate(jobs):
            conn.execute("INSERT INTO chain_jobs(chain_id, job_key, role, queue, position, job_id,"
                         " state, updated) VALUES (?,?,?,?,?,?,?,?)",
                         (chain_id, role, role, "batch", position, job_id, job_state, now))


def slurm_answers(squeue=SQUEUE, scancel=None):
    return [(("squeue",), lambda argv: result(argv, squeue)),
            (("sacct",), lambda argv: result(argv, SACCT)),
            (("scancel",), scancel or (lambda argv: result(argv))),
            (("scontrol", "update"), lambda argv: result(argv))]  # the cancel reasons


def jobs_asked(argv) -> list[str]:
    """The job ids of a squeue argv's ``--jobs=`` word."""
    (word,) = [w for w in argv if w.startswith("--jobs=")]
    return word.removeprefix("--jobs=").split(",")


def with_states(document: str, states: dict[str, str]) -> str:
    """The captured squeue --json with some jobs moved on (as the next cycle would see them)."""
    parsed = json.loads(document)
    for job in parsed["jobs"]:
        if str(job["job_id"]) in states:
            job["job_state"] = states[str(job["job_id"])]
    return json.dumps(parsed)


def test_stage_ins_ended_without_staging_end_their_chains(store, use_runner):
    add_chain(store, "cancelled", IDS["stage-in cancelled"], IDS["compute after cancelled"])
    add_chain(store, "timeout", IDS["stage-in timeout"], IDS["compute after timeout"])
    add_chain(store, "killed", IDS["stage-in killed"], IDS["compute after killed"], "777777")
    runner = use_runner(ScriptedRunner(slurm_answers()))

    ends = {e.chain_id: e for e in settle.settle_chains(SiteConfig(), store)}

    # one queue look at the stage-ins of every chain, one more at the dependents of those ended
    stage_ins, dependents = runner.ran("squeue")
    assert sorted(jobs_asked(stage_ins)) == sorted(
        IDS[f"stage-in {how}"] for how in ("cancelled", "timeout", "killed"))
    assert "777777" in jobs_asked(dependents)
    # the two compute jobs still pending are cancelled; the one Slurm cancelled is left alone
    # and the stage-out nobody knows is not cancelled blindly
    (scancel,) = runner.ran("scancel")
    assert sorted(scancel[1:]) == sorted([IDS["compute after cancelled"],
                                          IDS["compute after killed"]])
    # each chain's reason written on its own jobs first, where squeue and sacct show it
    comments = {argv[2]: argv[3] for argv in runner.ran("scontrol")}
    assert comments[f"JobId={IDS['compute after killed']}"] == (
        f"Comment=scratchkeeper: chain killed: stage-in job {IDS['stage-in killed']} ended "
        "FAILED, exit code 0:9 (killed by signal 9) before its files were staged")
    assert comments[f"JobId={IDS['compute after cancelled']}"].startswith(
        "Comment=scratchkeeper: chain cancelled: stage-in job")
    assert ends["timeout"].cancelled == []
    chain = records.chain(store, "killed")
    assert chain["state"] == records.STAGE_IN_FAILED
    assert chain["reason"] == (f"stage-in job {IDS['stage-in killed']} ended FAILED, exit code "
                               "0:9 (killed by signal 9) before its files were staged")
    assert "(its walltime ran out)" in records.chain(store, "timeout")["reason"]
    assert "CANCELLED, exit code 0:15 (cancelled)" in records.chain(store, "cancelled")["reason"]
    rows = {r["role"]: r for r in records.chain_jobs(store, "killed")}
    assert rows["stage-in"]["state"] == records.JOB_FAILED
    assert rows["compute"]["state"] == rows["stage-out"]["state"] == records.JOB_CANCELLED
    assert rows["compute"]["reason"] == "cancelled: " + chain["reason"]


def test_a_stage_in_whose_node_failed_ends_its_chain(store, use_runner):
    ids = json.loads((DATA / "slurm" / "node-fail.json").read_text())
    squeue = (DATA / "slurm" / "squeue-node-fail.json").read_text()
    made = min(j["submit_time"] for j in json.loads(squeue)["jobs"]
               if str(j["job_id"]) in ids.values()) - 30
    add_chain(store, "node", ids["stage-in node failed"], ids["compute after node failed"],
              now=made)
    runner = use_runner(ScriptedRunner(slurm_answers(squeue)))
    (end,) = settle.settle_chains(SiteConfig(), store)
    assert runner.ran("scancel") == [("scancel", ids["compute after node failed"])]
    assert end.reason == (f"stage-in job {ids['stage-in node failed']} ended NODE_FAIL, exit code "
                          "0:0 (its node failed) before its files were staged")


def test_a_chain_is_watched_until_its_dependents_are_confirmed_ended(store, use_runner):
    add_chain(store, "cancelled", IDS["stage-in cancelled"], IDS["compute after cancelled"])
    use_runner(ScriptedRunner(slurm_answers()))
    settle.settle_chains(SiteConfig(), store)
    # the next cycle still sees the compute job pending (the cancel did not take): again
    runner = use_runner(ScriptedRunner(slurm_answers()))
    (end,) = settle.settle_chains(SiteConfig(), store)
    assert end.cancelled == [IDS["compute after cancelled"]] and not end.settled
    # once the scheduler says it ended, the chain is settled and never looked at again
    moved = with_states(SQUEUE, {IDS["compute after cancelled"]: "CANCELLED"})
    runner = use_runner(ScriptedRunner(slurm_answers(moved)))
    (end,) = settle.settle_chains(SiteConfig(), store)
    assert end.settled and not runner.ran("scancel")
    runner = use_runner(ScriptedRunner([]))
    assert settle.settle_chains(SiteConfig(), store) == [] and runner.recorded == []


def test_a_kill_between_the_cancel_and_the_record_is_finished_by_the_next_start(
        store, use_runner, monkeypatch, tmp_path):
    add_chain(store, "killed", IDS["stage-in killed"], IDS["compute after killed"])
    use_runner(ScriptedRunner(slurm_answers()))

    def killed(*args):
        raise KeyboardInterrupt  # the process dies after the scancel, before the transaction
    monkeypatch.setattr(settle, "_record", killed)
    with pytest.raises(KeyboardInterrupt):
        settle.settle_chains(SiteConfig(), store)
    assert records.chain(store, "killed")["state"] == records.SUBMITTED
    monkeypatch.undo()
    # a new process on the same database: the compute job is cancelled now (Slurm says so)
    restarted = records.open_chain_ends(StateStore(tmp_path / "state.db"))
    moved = with_states(SQUEUE, {IDS["compute after killed"]: "CANCELLED"})
    runner = use_runner(ScriptedRunner(slurm_answers(moved)))
    (end,) = settle.settle_chains(SiteConfig(), restarted)
    assert end.cancelled == [] and not runner.ran("scancel")
    assert records.chain(restarted, "killed")["state"] == records.STAGE_IN_FAILED


def test_what_stage_fail_recorded_is_kept(store, use_runner):
    add_chain(store, "reported", IDS["stage-in killed"], IDS["compute after killed"],
              state=records.STAGE_IN_FAILED, reason="stage-in failed: job.sh:3: HTTP 404",
              stage_in_state=records.JOB_FAILED)
    runner = use_runner(ScriptedRunner(slurm_answers()))
    (end,) = settle.settle_chains(SiteConfig(), store)
    # its own cancel failed (the compute job still pends): the sweep cancels it
    assert runner.ran("scancel") == [("scancel", IDS["compute after killed"])]
    assert records.chain(store, "reported")["reason"] == "stage-in failed: job.sh:3: HTTP 404"


def test_chains_that_staged_or_still_stage_are_left_alone(store, use_runner):
    add_chain(store, "staged", IDS["stage-in killed"], IDS["compute after killed"],
              stage_in_state=records.JOB_DONE)
    runner = use_runner(ScriptedRunner([]))
    assert settle.settle_chains(SiteConfig(), store) == [] and runner.recorded == []
    # a stage-in still pending (here: a job the capture left pending)
    add_chain(store, "staging", IDS["compute after cancelled"], "888888")
    runner = use_runner(ScriptedRunner(slurm_answers()))
    assert settle.settle_chains(SiteConfig(), store) == []
    assert not runner.ran("scancel")
    assert records.chain(store, "staging")["state"] == records.SUBMITTED
    # while a chain stages, only its stage-in is looked at (not its compute nor stage-out job)
    (asked,) = runner.ran("squeue")
    assert jobs_asked(asked) == [IDS['compute after cancelled']]


def test_the_pbs_path_ends_a_chain_whose_stage_in_ended_without_recording(store, use_runner):
    """The Torque wrappers show only "C": a stage-in that ended without `stage commit` having
    recorded its files ended without staging them."""
    qstat = (DATA / "pbs" / "qstat-f-chain-ends.txt").read_text()
    add_chain(store, "pbs", IDS["stage-in timeout"], IDS["compute after killed"], scheduler="pbs")
    runner = use_runner(ScriptedRunner([(("qstat",), lambda argv: result(argv, qstat)),
                                        (("qdel",), lambda argv: result(argv))]))
    (end,) = settle.settle_chains(SiteConfig(), store)
    assert runner.ran("qdel") == [("qdel", IDS["compute after killed"])]
    assert records.chain(store, "pbs")["reason"] == (
        f"stage-in job {IDS['stage-in timeout']} ended (state C, exit status not reported) "
        "without recording its staged files")


def test_a_job_id_the_scheduler_handed_out_again_is_never_taken_for_the_chains(store, use_runner):
    """A chain recorded an hour before the captured jobs were submitted (slurmctld's state was
    reset since and its ids start at 1 again): those jobs are others', never cancelled."""
    submitted = min(r.submit_time for r in slurm.parse_query(SQUEUE)
                    if r.job_id in IDS.values())
    add_chain(store, "old", IDS["stage-in cancelled"], IDS["compute after cancelled"],
              now=submitted - 3600)
    runner = use_runner(ScriptedRunner(slurm_answers()))
    (end,) = settle.settle_chains(SiteConfig(), store)
    assert end.cancelled == [] and not runner.ran("scancel")
    assert records.chain(store, "old")["reason"] == (
        f"stage-in job {IDS['stage-in cancelled']} is known neither to the queue nor to "
        "accounting and never recorded its files")


# -- status ------------------------------------------------------------------------------------

def test_status_names_the_stage_in_that_ended_before_the_sweep_ran(store, use_runner):
    add_chain(store, "cancelled", IDS["stage-in cancelled"], IDS["compute after cancelled"])
    use_runner(ScriptedRunner(slurm_answers()))
    status = chain_status(store, SiteConfig(), "cancelled")
    assert status.state == records.STAGE_IN_FAILED  # not "submitted"
    assert status.reason.startswith(f"stage-in job {IDS['stage-in cancelled']} ended CANCELLED")
    stage_in, compute = status.jobs
    assert (stage_in.state, stage_in.native_state, stage_in.exit_signal) == ("cancelled",
                                                                              "CANCELLED", 15)
    assert compute.state == "pending"
    assert compute.reason.startswith("DependencyNeverSatisfied: will not run, stage-in job")


def test_status_of_a_finished_job_never_shows_its_stale_pending_reason(store, use_runner):
    # Slurm cancelled this compute job itself (kill-on-invalid-dep); squeue and sacct still
    # carry the pending reason it had, which used to read "waiting for the jobs before it"
    add_chain(store, "timeout", IDS["stage-in timeout"], IDS["compute after timeout"])
    use_runner(ScriptedRunner(slurm_answers()))
    compute = chain_status(store, SiteConfig(), "timeout").jobs[1]
    assert compute.state == "cancelled"
    assert compute.reason == (f"CANCELLED: never ran, stage-in job {IDS['stage-in timeout']} "
                              "ended TIMEOUT, exit code 0:15 (its walltime ran out) before its "
                              "files were staged")
    # and after the sweep, what it recorded
    settle.settle_chains(SiteConfig(), store)
    status = chain_status(store, SiteConfig(), "timeout")
    assert status.state == records.STAGE_IN_FAILED
    assert status.jobs[1].reason.startswith("cancelled: stage-in job")


def test_status_of_a_job_cancelled_while_waiting_shows_how_it_ended(store, use_runner):
    # sacct's record of a job cancelled while pending keeps Reason=Dependency
    add_chain(store, "plain", IDS["stage-in timeout"], IDS["compute after timeout"],
              stage_in_state=records.JOB_DONE)
    sacct_only = json.dumps({"jobs": []})
    use_runner(ScriptedRunner(slurm_answers(sacct_only)))
    compute = chain_status(store, SiteConfig(), "plain").jobs[1]
    assert compute.state == "cancelled"
    assert "waiting" not in compute.reason and compute.reason == "ended CANCELLED, exit code 0:0"


def test_status_shows_the_failure_recorded_while_the_scheduler_was_asked(store, use_runner):
    # The data job's `stage fail` records the cause and the job exits while `status` waits for
    # squeue: the scheduler then shows the stage-in ended, and the recorded cause must be shown.
    add_chain(store, "racing", IDS["stage-in killed"], IDS["compute after killed"])

    def squeue_while_stage_fail_records(argv):
        with store.transaction() as conn:
            conn.execute("UPDATE chains SET state = ?, reason = ? WHERE chain_id = 'racing'",
                         (records.STAGE_IN_FAILED, "stage-in failed: job.sh:3: HTTP 404"))
        return result(argv, SQUEUE)

    use_runner(ScriptedRunner([(("squeue",), squeue_while_stage_fail_records),
                               *slurm_answers()[1:]]))
    status = chain_status(store, SiteConfig(), "racing")
    assert status.state == records.STAGE_IN_FAILED
    assert status.reason == "stage-in failed: job.sh:3: HTTP 404"
