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


def test_lines_seen_before_are_not_parsed_again_and_the_answer_is_unchanged(capture_timezone):
    reuse: dict = {}
    first = slurm.parse_snapshot(TEXT, reuse)
    assert len(reuse) == 96
    lines = TEXT.splitlines()
    changed = [line.replace("|PENDING|Dependency|", "|RUNNING|None|") if line.startswith("88|")
               else line for line in lines if not line.startswith("90|")]
    second = slurm.parse_snapshot("\n".join(changed) + "\n", reuse)
    assert second == slurm.parse_snapshot("\n".join(changed) + "\n")
    by_id = {r.job_id: r for r in first}
    again = {r.job_id: r for r in second}
    assert again["88"].state is JobState.RUNNING and "90" not in again
    assert all(again[j] is by_id[j] for j in again if j != "88")     # reused, not re-made
    assert len(reuse) == 95 and set(reuse.values()) == set(second)


def test_scheduler_snapshot_keeps_the_order_of_an_unchanged_queue(use_runner):
    raised = TEXT.replace("|4294901679\n", "|4294901999\n")               # job 90's priority
    outputs = [TEXT, TEXT, raised]
    runner = use_runner(ScriptedRunner([(("squeue",), lambda argv: CommandResult(
        tuple(argv), 0, outputs.pop(0), "", 0.1))]))
    scheduler = Scheduler(slurm)
    one, two, three = (scheduler.snapshot() for _ in range(3))
    assert len(runner.ran("squeue")) == 3
    assert all(a is b for a, b in zip(one.jobs, two.jobs)) and len(one.jobs) == len(two.jobs)
    assert [j.job_id for j in three.jobs] == [j.job_id for j in slurm.order_by_priority(
        slurm.parse_snapshot(raised))]
    assert [j.job_id for j in three.pending()][0] == "90"


@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"])
def test_squeue_local_times_read_as_the_calendar_says(monkeypatch, zone):
    import datetime

    monkeypatch.setenv("TZ", zone)
    time.tzset()
    try:
        seen: dict = {}
        start = datetime.datetime(2026, 3, 1)
        for step in range(0, 300 * 24 * 3600, 3 * 3600 + 7 * 60 + 13):   # across both DST changes
            text = (start + datetime.timedelta(seconds=step)).isoformat()
            expected = datetime.datetime.fromisoformat(text).timestamp()
            assert slurm._squeue_time(text, seen) == expected, text
        for bad in ("2026-13-01T00:00:00", "2026-01-01T00:61:00", "2026-01-01", "Unknown"):
            assert slurm._squeue_time(bad, seen) is None, bad
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_record_from_its_fields_is_the_dataclass_record():
    from dataclasses import astuple

    record = slurm.parse_query((DATA / "squeue.json").read_text())[0]
    made = type(record).from_fields(*astuple(record))
    assert made == record and hash(made) == hash(record) and made.outcome() == record.outcome()
    with pytest.raises(AttributeError):
        made.state = JobState.FAILED


def test_real_odd_job_names_agree_with_json(capture_timezone):
    """capture-snapshot: held jobs named with '|', newlines, spaces and commas, among the jobs
    other tests had left in the queue; squeue prints the names raw."""
    import json

    ids = json.loads((DATA / "squeue-snapshot-names.ids.json").read_text())
    text = {r.job_id: r for r in slurm.parse_snapshot(
        (DATA / "squeue-snapshot-names.txt").read_text())}
    document = {r.job_id: r for r in slurm.parse_query(
        (DATA / "squeue-snapshot-names.json").read_text())}
    assert set(text) == set(document) and len(text) > 50
    for job_id, record in document.items():
        for name in SNAPSHOT_FIELDS:
            assert getattr(text[job_id], name) == getattr(record, name), (job_id, name)
    for name, job_id in ids.items():
        assert text[job_id].name == name and text[job_id].state is JobState.HELD
