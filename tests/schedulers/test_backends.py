"""Scheduler backends: argv builders, and parsers on output captured from the real cluster.

The files under data/ come from tests/schedulers/capture.py on the local cluster (Slurm 22.05.8
and its Torque wrappers), those under data/24.11/ from the same script on a private Slurm 24.11.5
(scripts/bootstrap's; one node, no accounting: no sacct, no Torque wrappers); each manifest.json
says which job was left in which state. The Slurm parsers run over both releases' output.
"""

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from scratchkeeper.errors import CommandError, SchedulerError, UnknownJobError
from scratchkeeper.runner import CommandResult
from scratchkeeper.schedulers import JobState, Scheduler, SubmitSpec, pbs, slurm
from scratchkeeper.schedulers.base import COMMENT_MAX, cancel_comment
from scripted_runner import ScriptedRunner

DATA = Path(__file__).parent / "data"
KNOWN = json.loads((DATA / "manifest.json").read_text())


@dataclass(frozen=True)
class Captured:
    """One Slurm release's captured output."""
    release: str
    folder: Path
    nodes: int  # the cluster's nodes (sinfo)

    @property
    def known(self) -> dict[str, str]:
        return json.loads((self.folder / "manifest.json").read_text())

    def text(self, name: str) -> str:
        return (self.folder / name).read_text()


CAPTURED = [Captured("22.05", DATA, 8), Captured("24.11", DATA / "24.11", 1)]


@pytest.fixture(params=CAPTURED, ids=[c.release for c in CAPTURED])
def captured(request):
    return request.param


def by_id(records):
    return {r.job_id: r for r in records}


def test_slurm_submit_argv():
    spec = SubmitSpec(script_path="/s/x.sh", queue="dataxfer", job_name="j.stage-in", workdir="/w",
                      output_path="/s/%j.out", dependencies=(("afterok", ("1", "2")), ("afterany", ("3",))),
                      hold=True)
    assert slurm.build_submit(spec) == [
        "sbatch", "--parsable", "--partition=dataxfer", "--job-name=j.stage-in", "--chdir=/w",
        "--output=/s/%j.out", "--dependency=afterok:1:2,afterany:3", "--kill-on-invalid-dep=yes",
        "--hold", "/s/x.sh"]


def test_slurm_parse_submit(captured):
    assert slurm.parse_submit(captured.text("sbatch-parsable.txt")).isdigit()
    assert slurm.parse_submit("42;cluster\n") == "42"
    with pytest.raises(SchedulerError):
        slurm.parse_submit("Submitted batch job 42")


def test_slurm_squeue_json_states(captured):
    records = by_id(slurm.parse_query(captured.text("squeue.json")))
    known = captured.known
    assert records[known["completed"]].state is JobState.COMPLETED
    failed = records[known["failed"]]
    assert failed.state is JobState.FAILED and failed.exit_code == 3
    assert failed.reason == "NonZeroExitCode"
    assert records[known["cancelled"]].state is JobState.CANCELLED
    assert records[known["running"]].state is JobState.RUNNING
    held = records[known["held"]]
    assert held.state is JobState.HELD and held.reason == "JobHeldUser"
    dependent = records[known["dependent"]]
    assert dependent.state is JobState.PENDING and dependent.queue == "dataxfer"
    assert dependent.dependency.startswith(f"afterok:{known['running']}")
    assert all(r.nodes >= 1 for r in records.values())


def test_slurm_sacct_states():
    records = by_id(slurm.parse_history((DATA / "sacct.txt").read_text()))
    assert records[KNOWN["completed"]].state is JobState.COMPLETED
    assert records[KNOWN["failed"]].exit_code == 3
    assert records[KNOWN["failed"]].state is JobState.FAILED
    assert records[KNOWN["cancelled"]].state is JobState.CANCELLED  # "CANCELLED by 0"
    assert records[KNOWN["held"]].state is JobState.PENDING
    assert records[KNOWN["completed"]].end_time is not None
    with pytest.raises(SchedulerError, match="sacct line 1"):
        slurm.parse_history("1|2|3\n")


def test_slurm_squeue_json_of_some_jobs(captured):
    """``squeue --json --states=all --jobs=RUNNING,HELD``: those two and no other."""
    records = by_id(slurm.parse_query(captured.text("squeue-some.json")))
    assert set(records) >= {captured.known["running"], captured.known["held"]}
    assert records[captured.known["running"]].state is JobState.RUNNING
    assert records[captured.known["held"]].state is JobState.HELD


def test_slurm_nodes_and_priority_order(captured):
    assert slurm.parse_nodes(captured.text("sinfo-nodes.txt")) == captured.nodes
    records = slurm.order_by_priority(slurm.parse_query(captured.text("squeue.json")))
    queued = [r for r in records if r.state.is_queued]
    assert records[: len(records) - len(queued)] == [r for r in records if not r.state.is_queued]
    assert [r.priority for r in queued] == sorted((r.priority for r in queued), reverse=True)


def test_slurm_bad_json_and_errors():
    with pytest.raises(SchedulerError, match="invalid JSON"):
        slurm.parse_query("{")
    with pytest.raises(SchedulerError, match="boom"):
        slurm.parse_query('{"errors": [{"error": "boom"}], "jobs": []}')


def test_pbs_qstat_f():
    records = by_id(pbs.parse_query((DATA / "qstat-f.txt").read_text()))
    # Slurm's wrappers print "C" and no exit_status for every finished job
    assert records[KNOWN["completed"]].state is JobState.ENDED
    assert records[KNOWN["failed"]].state is JobState.ENDED
    assert records[KNOWN["running"]].state is JobState.RUNNING
    assert records[KNOWN["running"]].end_time is None
    assert records[KNOWN["held"]].state is JobState.PENDING
    assert records[KNOWN["dependent"]].queue == "dataxfer"
    assert records[KNOWN["running"]].nodes == 1


TORQUE_QSTAT = """Job Id: 1234.head.example.org
    Job_Name = sim
    Job_Owner = alice@login.example.org
    job_state = C
    queue = batch
    server = head.example.org
    depend = afterok:1233.head.example.org@head.example.org,afterany:1232.head
\t.example.org@head.example.org
    exit_status = 3
    Resource_List.nodect = 4
    comp_time = Sun Nov 22 02:00:00 2026
    qtime = Sun Nov 22 01:00:00 2026

Job Id: 1235.head.example.org
    Job_Name = held
    job_state = H
    queue = dataxfer
    Resource_List.nodes = 2:ppn=8
"""


def test_pbs_documented_torque_layout():
    records = by_id(pbs.parse_query(TORQUE_QSTAT))
    done = records["1234.head.example.org"]
    assert done.state is JobState.FAILED and done.exit_code == 3 and done.nodes == 4
    assert done.dependency.endswith("1232.head.example.org@head.example.org")
    assert done.end_time is not None and done.user == "alice"
    assert records["1235.head.example.org"].state is JobState.HELD
    assert records["1235.head.example.org"].nodes == 2


def test_pbs_submit_and_refusals():
    spec = SubmitSpec(script_path="/s/x.sh", queue="dataxfer", job_name="j", workdir="/w",
                      dependencies=(("afterok", ("7",)),), hold=True)
    assert pbs.build_submit(spec) == ["qsub", "-q", "dataxfer", "-N", "j", "-wd", "/w", "-W",
                                      "depend=afterok:7", "-h", "/s/x.sh"]
    with pytest.raises(SchedulerError, match="cannot pass on safely"):
        pbs.build_submit(SubmitSpec(script_path="/s/x.sh", queue="q", job_name="j",
                                    workdir="/home/a b"))
    assert pbs.parse_submit("123\n") == "123"
    assert pbs.parse_submit("456.head.example.org\n") == "456.head.example.org"
    with pytest.raises(SchedulerError, match="There was an error running the Slurm sbatch command"):
        pbs.parse_submit((DATA / "qsub-bad-queue.txt").read_text())
    assert pbs.parse_nodes((DATA / "pbsnodes-a.txt").read_text()) == 8


@pytest.fixture
def scripted(use_runner):
    return lambda answers: use_runner(ScriptedRunner(answers))


def test_lookup_falls_back_to_accounting_and_names_unknown_ids(scripted):
    squeue = (DATA / "squeue.json").read_text()
    sacct = (DATA / "sacct.txt").read_text()
    scripted([(("squeue",), CommandResult(("squeue",), 0, squeue, "", 0.1)),
              (("sacct",), CommandResult(("sacct",), 0, sacct, "", 0.1))])
    scheduler = Scheduler(slurm)
    found = scheduler.lookup([KNOWN["failed"], KNOWN["running"]])
    assert found[KNOWN["failed"]].state is JobState.FAILED
    with pytest.raises(UnknownJobError, match="999999"):
        scheduler.lookup(["999999"])


def test_a_lookup_asks_the_queue_for_its_jobs_alone_and_accounting_for_exit_codes(scripted):
    """``squeue --json`` of 22.05 packs the whole queue whatever ``--jobs`` says: a lookup asks
    for its jobs in the snapshot's fields (one job: one job's RPC), which carry no exit status,
    so an ended job's comes from sacct. data/squeue-jobs.txt: a job running (a ``|`` in its
    name) and one that failed with exit 3, captured with this argv."""
    argv = slurm.build_query(["9038", "9039"])
    assert argv == ["squeue", "-a", "-t", "all", "--jobs=9038,9039", "-o", slurm.SNAPSHOT_FORMAT]
    squeue = (DATA / "squeue-jobs.txt").read_text()
    records = by_id(slurm.parse_query(squeue))
    assert records["9038"].state is JobState.RUNNING and records["9038"].name == "run|ning"
    assert records["9039"].state is JobState.FAILED and records["9039"].exit_code is None
    sacct = "9039|failed|batch|root|FAILED|3:0|1|2026-12-06T00:17:01|2026-12-06T00:17:02|" \
            "2026-12-06T00:17:02|NonZeroExitCode\n"
    runner = scripted([(("squeue",), CommandResult(("squeue",), 0, squeue, "", 0.1)),
                       (("sacct",), CommandResult(("sacct",), 0, sacct, "", 0.1))])
    found = Scheduler(slurm).lookup(["9038", "9039"])
    assert found["9039"].state is JobState.FAILED and found["9039"].exit_code == 3
    assert found["9038"].state is JobState.RUNNING
    assert [argv[0] for argv in runner.recorded] == ["squeue", "sacct"]


def test_an_id_squeue_24_11_does_not_know_is_looked_up_in_accounting(scripted):
    """24.11's ``squeue --jobs=ID`` for a forgotten id alone exits 1 with no output (22.05's --json
    printed the queue): the lookup asks accounting, and an id neither knows is named."""
    unknown = DATA / "24.11"
    failed = CommandError("squeue failed", argv=["squeue"], returncode=1,
                          stderr=(unknown / "squeue-unknown.stderr").read_text())
    assert (unknown / "squeue-unknown.json").read_text() == ""
    runner = scripted([(("squeue",), failed),
                       (("sacct",), CommandResult(("sacct",), 0, "", "", 0.1))])
    with pytest.raises(UnknownJobError, match="999999"):
        Scheduler(slurm).lookup(["999999"])
    assert [argv[0] for argv in runner.recorded] == ["squeue", "sacct"]


def test_transient_errors_are_retried_and_permanent_ones_are_not(scripted, captured):
    timeout = CommandError("squeue failed", argv=["squeue"], returncode=1,
                           stderr="squeue: error: Socket timed out on send/recv operation")
    runner = scripted([(("squeue",), timeout)])
    scheduler = Scheduler(slurm, retries=2, retry_delay=0.01)
    with pytest.raises(SchedulerError, match="Socket timed out"):
        scheduler.query(None)
    assert len(runner.recorded) == 3
    bad = CommandError("sbatch failed", argv=["sbatch"], returncode=1,
                       stderr=captured.text("sbatch-bad-partition.stderr"))
    runner = scripted([(("sbatch",), bad)])
    with pytest.raises(SchedulerError, match="Invalid partition name specified"):
        scheduler.submit(SubmitSpec(script_path="/x", queue="nosuch", job_name="j", workdir="/"))
    assert len(runner.recorded) == 1


def test_a_cancel_with_a_reason_writes_it_to_the_jobs_comment_first(scripted):
    runner = scripted([(("scontrol",), CommandResult(("scontrol",), 0, "", "", 0.1)),
                       (("scancel",), CommandResult(("scancel",), 0, "", "", 0.1))])
    Scheduler(slurm).cancel(["11", "12"], reason="stage-in failed: job.sh:3: 404\nNot Found\x1b")
    assert runner.recorded == [
        ("scontrol", "update", "JobId=11,12",
         "Comment=scratchkeeper: stage-in failed: job.sh:3: 404 Not Found"),
        ("scancel", "11", "12")]


def test_a_reason_that_cannot_be_written_does_not_stop_the_cancel(scripted):
    refused = CommandError("scontrol failed", argv=["scontrol"], returncode=1,
                           stderr="slurm_update error: Job/step already completing or completed")
    runner = scripted([(("scontrol",), refused),
                       (("scancel",), CommandResult(("scancel",), 0, "", "", 0.1))])
    Scheduler(slurm).cancel(["11"], reason="x")
    assert [argv[0] for argv in runner.recorded] == ["scontrol", "scancel"]


def test_a_reason_slurm_cannot_take_before_the_jobs_db_index_is_not_retried(scripted):
    """Slurm 22.05 holds the update 5 s, then refuses it, for as long as a job started just
    before slurmctld restarted has no DB index: the cancel goes on at once. A socket timeout
    of the same update is retried."""
    no_index = CommandError("scontrol failed", argv=["scontrol"], returncode=1, stderr=(
        "Job update not available right now, the DB index is being set, try again in a bit "
        "for job 11"))
    runner = scripted([(("scontrol",), no_index),
                       (("scancel",), CommandResult(("scancel",), 0, "", "", 0.1))])
    Scheduler(slurm, retries=2, retry_delay=0.01).cancel(["11"], reason="x")
    assert [argv[0] for argv in runner.recorded] == ["scontrol", "scancel"]
    timeout = CommandError("scontrol failed", argv=["scontrol"], returncode=1,
                           stderr="slurm_update error: Socket timed out on send/recv operation")
    runner = scripted([(("scontrol",), timeout),
                       (("scancel",), CommandResult(("scancel",), 0, "", "", 0.1))])
    Scheduler(slurm, retries=2, retry_delay=0.01).cancel(["11"], reason="x")
    assert [argv[0] for argv in runner.recorded] == ["scontrol"] * 3 + ["scancel"]


def test_pbs_has_no_comment_to_write_and_a_long_reason_is_cut(scripted):
    runner = scripted([(("qdel",), CommandResult(("qdel",), 0, "", "", 0.1))])
    Scheduler(pbs).cancel(["7"], reason="anything")
    assert runner.recorded == [("qdel", "7")]
    (argv,) = slurm.build_annotate(["1"], cancel_comment("r" * 1000))[3:]
    assert len(argv) == len("Comment=") + COMMENT_MAX and argv.endswith("...")


def test_one_queued_job_is_its_record_none_when_unknown_and_an_error_otherwise():
    record = {"job_id": 41, "name": "j", "admin_comment": "scratchkeeper:pending"}
    known = ScriptedRunner([(("squeue", "--json", "-j", "41"),
                             CommandResult(("squeue",), 0, json.dumps({"jobs": [record]}), "", 0.01))])
    assert slurm.queued_job("41", known, 5.0) == record
    gone = ScriptedRunner([(("squeue",), CommandResult(
        ("squeue",), 1, "", "slurm_load_jobs error: Invalid job id specified\n", 0.01))])
    assert slurm.queued_job("41", gone, 5.0) is None
    down = ScriptedRunner([(("squeue",), CommandResult(
        ("squeue",), 1, "", "slurm_load_jobs error: Unable to contact slurm controller\n", 0.01))])
    with pytest.raises(SchedulerError, match="Unable to contact slurm controller"):
        slurm.queued_job("41", down, 5.0)


def test_a_lookup_of_a_job_squeue_shows_live_does_not_ask_accounting(scripted):
    """A stage-in's wait looks its data job up every few seconds: for a live job squeue's word
    is the last, and sacct (slurmdbd) is not asked each time."""
    squeue = (DATA / "squeue-jobs.txt").read_text()
    runner = scripted([(("squeue",), CommandResult(("squeue",), 0, squeue, "", 0.1))])
    found = Scheduler(slurm).lookup(["9038"])
    assert found["9038"].state is JobState.RUNNING
    assert [argv[0] for argv in runner.recorded] == ["squeue"]


def test_a_lookup_of_a_completing_job_takes_how_it_ended_from_accounting(scripted):
    """A job whose script ended shows COMPLETING in squeue while its epilog runs; sacct already
    has it COMPLETED (a chain's status read then said the job was still on its way)."""
    squeue = (DATA / "squeue-jobs.txt").read_text().replace("|RUNNING|", "|COMPLETING|")
    sacct = "9038|running|batch|root|COMPLETED|0:0|1|2026-12-06T00:17:01|" \
        "2026-12-06T00:17:02|2026-12-06T00:17:09|None\n"
    runner = scripted([(("squeue",), CommandResult(("squeue",), 0, squeue, "", 0.1)),
                       (("sacct",), CommandResult(("sacct",), 0, sacct, "", 0.1))])
    found = Scheduler(slurm).lookup(["9038"])
    assert found["9038"].state is JobState.COMPLETED and found["9038"].exit_code == 0
    assert [argv[0] for argv in runner.recorded] == ["squeue", "sacct"]
