"""How the backends read a stage-in that ended any way but success, on captured output.

tests/data/slurm/capture-chain-ends made these on the local cluster (Slurm 22.05.8 and its
Torque wrappers): a stage-in cancelled, one out of walltime, one whose batch shell was killed
(SIGKILL, so its `stage fail` never ran), and a compute job waiting on afterok of each.
"""

import json
from pathlib import Path

import pytest

from scratchkeeper.errors import CommandError, UnknownJobError
from scratchkeeper.schedulers import JobState, Scheduler, pbs, slurm
from scripted_runner import ScriptedRunner, result

DATA = Path(__file__).resolve().parents[1] / "data"
IDS = json.loads((DATA / "slurm" / "chain-ends.json").read_text())


def by_id(records):
    return {r.job_id: r for r in records}


def test_sacct_gives_state_exit_code_and_signal():
    records = by_id(slurm.parse_history((DATA / "slurm" / "sacct-chain-ends.txt").read_text()))
    cancelled = records[IDS["stage-in cancelled"]]
    assert cancelled.state is JobState.CANCELLED and cancelled.native_state == "CANCELLED"
    assert records[IDS["stage-in timeout"]].state is JobState.TIMEOUT
    killed = records[IDS["stage-in killed"]]
    assert killed.state is JobState.FAILED and (killed.exit_code, killed.exit_signal) == (0, 9)
    assert killed.outcome() == "FAILED, exit code 0:9"
    assert records[IDS["stage-in timeout"]].outcome() == "TIMEOUT, exit code 0:0"
    # sacct lags behind for pending jobs, and keeps a cancelled job's last pending reason
    after_timeout = records[IDS["compute after timeout"]]
    assert after_timeout.state is JobState.CANCELLED and after_timeout.reason == "Dependency"


def test_squeue_json_exit_status_is_split_like_sacct():
    records = by_id(slurm.parse_query((DATA / "slurm" / "squeue-chain-ends.json").read_text()))
    # 22.05 gives the raw wait status: 15 is SIGTERM (scancel, the time limit), 9 SIGKILL
    assert records[IDS["stage-in cancelled"]].outcome() == "CANCELLED, exit code 0:15"
    assert records[IDS["stage-in timeout"]].outcome() == "TIMEOUT, exit code 0:15"
    assert records[IDS["stage-in killed"]].outcome() == "FAILED, exit code 0:9"
    for name in ("compute after cancelled", "compute after killed"):
        waiting = records[IDS[name]]
        assert waiting.state is JobState.PENDING
        assert waiting.reason == "DependencyNeverSatisfied"
    killed_by_slurm = records[IDS["compute after timeout"]]  # --kill-on-invalid-dep=yes
    assert killed_by_slurm.state is JobState.CANCELLED
    assert killed_by_slurm.reason == "DependencyNeverSatisfied"  # stale: it never waits again


def test_torque_wrappers_show_an_ended_stage_in_as_c_without_an_exit_status():
    records = by_id(pbs.parse_query((DATA / "pbs" / "qstat-f-chain-ends.txt").read_text()))
    for name in ("stage-in cancelled", "stage-in timeout", "stage-in killed"):
        assert records[IDS[name]].state is JobState.ENDED
        assert records[IDS[name]].exit_code is None
        assert records[IDS[name]].outcome() == "C, exit code unknown"
    assert records[IDS["compute after cancelled"]].state is JobState.PENDING


def test_qstat_of_only_forgotten_ids_means_unknown_not_an_error(use_runner):
    """The wrappers' qstat -f of ids Slurm forgot prints nothing and exits 153
    (tests/data/pbs/qstat-f-unknown-job.txt): the job is unknown, the scheduler answered."""
    qstat = (DATA / "pbs" / "qstat-f-chain-ends.txt").read_text()

    def answer(argv):
        if "999999" in argv and len(argv) == 3:
            return CommandError("qstat failed (exit 153): qstat -f 999999", argv=list(argv),
                                returncode=153)
        return result(argv, qstat)
    use_runner(ScriptedRunner([(("qstat",), answer)]))
    scheduler = Scheduler(pbs, retries=0)
    found = scheduler.lookup([IDS["stage-in killed"], "999999"], missing_ok=True)
    assert list(found) == [IDS["stage-in killed"]]
    with pytest.raises(UnknownJobError, match="999999"):
        scheduler.lookup(["999999"])


def test_a_stage_in_on_a_failed_node():
    """capture-node-fail: a --no-requeue job on a node set DOWN while it ran."""
    ids = json.loads((DATA / "slurm" / "node-fail.json").read_text())
    queue = by_id(slurm.parse_query((DATA / "slurm" / "squeue-node-fail.json").read_text()))
    failed = queue[ids["stage-in node failed"]]
    assert failed.state is JobState.NODE_FAIL and failed.outcome() == "NODE_FAIL, exit code 0:0"
    assert queue[ids["compute after node failed"]].reason == "DependencyNeverSatisfied"
    # accounting, a moment later, already has the end (not yet the job's name and partition)
    history = by_id(slurm.parse_history((DATA / "slurm" / "sacct-node-fail.txt").read_text()))
    assert history[ids["stage-in node failed"]].state is JobState.NODE_FAIL


#: accounting's record of an earlier job 17, ended a day before the captured one was submitted
#: (an id handed out again: slurmctld's state reset, MaxJobId wrapped)
EARLIER_17 = ("17|earlier|batch|root|CANCELLED by 0|0:0|1|2026-11-23T05:00:00|"
              "2026-11-23T05:00:01|2026-11-23T05:00:02|None\n")


def test_an_earlier_job_with_the_same_id_is_not_taken_for_the_queued_one(use_runner):
    """squeue holds job 17 pending; sacct, asked because a pending job may have just ended,
    knows only the earlier 17 (the new one not yet in slurmdbd): 17 stays pending. A chain
    service that took the earlier record's CANCELLED cancelled a chain that was fine."""
    squeue = (DATA / "slurm" / "squeue-chain-ends.json").read_text()
    use_runner(ScriptedRunner([(("squeue",), result(("squeue",), squeue)),
                               (("sacct",), result(("sacct",), EARLIER_17))]))
    found = Scheduler(slurm).lookup([IDS["compute after cancelled"]])
    assert found[IDS["compute after cancelled"]].state is JobState.PENDING


def test_of_an_ids_lines_in_accounting_the_latest_submitted_wins():
    current = [line for line in (DATA / "slurm" / "sacct-chain-ends.txt").read_text().splitlines()
               if line.startswith(IDS["stage-in cancelled"] + "|")]
    earlier = EARLIER_17.replace("17|", IDS["stage-in cancelled"] + "|", 1).replace(
        "CANCELLED by 0", "COMPLETED")
    for text in (current[0] + "\n" + earlier, earlier + current[0] + "\n"):
        (record,) = slurm.parse_history(text)
        assert record.state is JobState.CANCELLED and record.name == "si-cancelled"


def test_a_record_submitted_before_the_chain_was_made_is_not_the_chains_job():
    from scratchkeeper.planner.status import records_of_chain

    (earlier,) = slurm.parse_history(EARLIER_17)
    chain = {"created": earlier.submit_time + 86400, "updated": earlier.submit_time + 86500}
    assert records_of_chain({"17": earlier}, chain) == {}
    chain = {"created": earlier.submit_time - 10, "updated": earlier.submit_time + 10}
    assert records_of_chain({"17": earlier}, chain) == {"17": earlier}
