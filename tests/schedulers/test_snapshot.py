"""The queue snapshot's text form (``squeue -a -t all -o FORMAT``), on output captured from the
real Slurm 22.05.8: tests/data/slurm/squeue.txt and squeue.json were taken seconds apart by
tests/data/slurm/capture from the same queue, so the two parsers must agree job for job.
"""

import time
from pathlib import Path

import pytest

from scratchkeeper.errors import SchedulerError
from scratchkeeper.runner import CommandResult
from scratchkeeper.schedulers import JobState, Scheduler, pbs, slurm

from scripted_runner import ScriptedRunner

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
TEXT = (DATA / "squeue.txt").read_text()
SNAPSHOT_FIELDS = ("state", "native_state", "reason", "name", "queue", "user", "nodes",
                   "priority", "dependency", "submit_time", "start_time")


@pytest.fixture
def capture_timezone(monkeypatch):
    """squeue prints local time; the capture host ran in UTC."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_the_argv_is_the_captured_command():
    captured = next(line.split("\t")[2] for line in (DATA / "commands.txt").read_text().splitlines()
                    if line.startswith("squeue.txt\t"))
    assert " ".join(slurm.build_snapshot()) == captured
    assert TEXT.splitlines()[0] == slurm.SNAPSHOT_HEADER


def test_text_snapshot_agrees_with_json_on_every_field_it_carries(capture_timezone):
    text = {r.job_id: r for r in slurm.parse_snapshot(TEXT)}
    document = {r.job_id: r for r in slurm.parse_query((DATA / "squeue.json").read_text())}
    assert set(text) == set(document) and len(text) == 96
    for job_id, record in document.items():
        for name in SNAPSHOT_FIELDS:
            assert getattr(text[job_id], name) == getattr(record, name), (job_id, name)
    # the array's pending meta-record is job 93 (%A), its running tasks 94 and 95
    assert text["93"].state is JobState.PENDING and text["93"].reason == "JobArrayTaskLimit"
    assert text["97"].state is JobState.HELD and text["97"].priority == 0
    assert text["86"].nodes == 2 and text["88"].start_time is None
    assert [r.job_id for r in slurm.order_by_priority(list(text.values()))] == \
        [r.job_id for r in slurm.order_by_priority(list(document.values()))]


def _with_name(job_id: str, name: str) -> str:
    lines = TEXT.splitlines()
    for index, line in enumerate(lines):
        parts = line.split("|")
        if parts[1] == job_id:
            parts[3] = name
            lines[index] = "|".join(parts)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("name", ["a|b", "|lead|", "two\nlines", "x|\n|y\n"])
def test_a_job_name_with_the_separator_or_a_newline_is_read_whole(name):
    records = {r.job_id: r for r in slurm.parse_snapshot(_with_name("88", name))}
    assert len(records) == 96
    assert records["88"].name == name
    assert records["88"].dependency == "afterok:86(unfulfilled)" and records["88"].priority
    assert records["89"].name == "afterany"


def test_other_columns_or_a_cut_line_are_refused_with_the_line():
    with pytest.raises(SchedulerError, match="squeue line 1: expected the header"):
        slurm.parse_snapshot(TEXT.replace("PRIORITY", "PRIO", 1))
    with pytest.raises(SchedulerError, match="squeue line 98: expected 16 fields, got 3"):
        slurm.parse_snapshot(TEXT + "99|99|batch")
    assert slurm.parse_snapshot(slurm.SNAPSHOT_HEADER + "\n") == []


def test_scheduler_snapshot_runs_the_text_query(use_runner):
    runner = use_runner(ScriptedRunner([(("squeue",), CommandResult(("squeue",), 0, TEXT, "",
                                                                      0.1))]))
    snapshot = Scheduler(slurm).snapshot()
    assert [tuple(argv) for argv in runner.ran("squeue")] == [tuple(slurm.build_snapshot())]
    assert len(snapshot.pending()) == 7 and len(snapshot.running()) == 6
    assert not any(j.state.is_queued for j in snapshot.jobs[:-7])   # queued jobs come last


def test_pbs_snapshot_is_its_query():
    assert pbs.build_snapshot() == pbs.build_query(None)
    text = (Path(__file__).parent / "data" / "qstat-f.txt").read_text()
    assert pbs.parse_snapshot(text) == pbs.parse_query(text)
