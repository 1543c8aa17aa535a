"""The queue snapshot's text form (``squeue -a -t all -o FORMAT``), on output captured from the
real Slurm 22.05.8: tests/data/slurm/capture-snapshot took squeue-snapshot.txt and
squeue-snapshot.json of the same queue a moment apart (running, pending, held, array, finished
jobs, and held jobs with odd names), so the two parsers must agree job for job; the same script
took tests/data/slurm/24.11/ on the local cluster under ``make cluster SLURM=24.11``.
"""

import json
import time
from pathlib import Path

import pytest

from scratchkeeper.errors import SchedulerError
from scratchkeeper.runner import CommandResult
from scratchkeeper.schedulers import JobState, Scheduler, pbs, slurm
from scripted_runner import ScriptedRunner

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
TEXT = (DATA / "squeue-snapshot.txt").read_text()
IDS = json.loads((DATA / "squeue-snapshot.ids.json").read_text())
NAMES = {"name0": "pipe|in|name", "name1": "two\nlines", "name2": " lead space, comma",
         "name3": "|", "name4": "x|\n|y"}
SNAPSHOT_FIELDS = ("state", "native_state", "reason", "name", "queue", "user", "nodes",
                   "priority", "submit_time", "start_time")


@pytest.fixture
def capture_timezone(monkeypatch):
    """squeue prints local time; the capture host ran in UTC."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_the_argv_is_the_captured_command():
    assert slurm.build_snapshot() == ["squeue", "-a", "-t", "all", "-o", IDS["format"]]
    header = TEXT.splitlines()[0]
    assert "|".join(field.strip() for field in header.split("|")) == slurm.SNAPSHOT_HEADER
    assert header.split("|")[4] == "REASON".ljust(slurm.REASON_WIDTH)


@pytest.mark.parametrize("folder", [DATA, DATA / "24.11"], ids=["22.05", "24.11"])
def test_text_snapshot_agrees_with_json_on_every_field_it_carries(capture_timezone, folder):
    ids = json.loads((folder / "squeue-snapshot.ids.json").read_text())
    assert ids["format"] == json.loads((DATA / "squeue-snapshot.ids.json").read_text())["format"]
    text = {r.job_id: r for r in slurm.parse_snapshot((folder / "squeue-snapshot.txt").read_text())}
    document = {r.job_id: r for r in
                slurm.parse_query((folder / "squeue-snapshot.json").read_text())}
    assert set(text) == set(document)
    for job_id, record in document.items():
        for name in SNAPSHOT_FIELDS:
            assert getattr(text[job_id], name) == getattr(record, name), (job_id, name)
    assert text[ids["running"]].state is JobState.RUNNING
    assert text[ids["running"]].nodes == ids.get("running_nodes", 2)
    assert text[ids["running"]].start_time is not None
    dependent = text[ids["dependent"]]
    assert dependent.state is JobState.PENDING and dependent.reason == "Dependency"
    assert dependent.start_time is None and dependent.priority
    assert text[ids["held"]].state is JobState.HELD and text[ids["held"]].priority == 0
    assert text[ids["failed"]].state is JobState.FAILED
    assert text[ids["cancelled"]].state is JobState.CANCELLED
    assert text[ids["completed"]].state is JobState.COMPLETED
    for key, name in NAMES.items():
        assert text[ids[key]].name == name and text[ids[key]].state is JobState.HELD
    assert [r.job_id for r in slurm.order_by_priority(list(text.values()))] == \
        [r.job_id for r in slurm.order_by_priority(list(document.values()))]


def test_a_name_continues_over_lines_and_keeps_its_separators():
    line = next(line for line in TEXT.splitlines() if line.startswith(IDS["held"] + "|"))
    head = line.rsplit("|", 1)[0]
    for name in ("a|b|c|d|e|f|g|h|i|j|k", "\n", "two\n\nblank", "x\n1|p|u|s|r|1|t|t|0|n"):
        records = slurm.parse_snapshot(slurm.SNAPSHOT_HEADER + "\n" + head + "|" + name + "\n")
        assert [r.name for r in records] == [name]
    with pytest.raises(SchedulerError, match="squeue line 2: expected a job's 10 fields"):
        slurm.parse_snapshot(slurm.SNAPSHOT_HEADER + "\nbatch|root\n")


def test_a_plugins_reason_with_separators_is_cut_where_squeue_cuts_it():
    """A job held after a failed data_in: Slurm's reason is ``burst_buffer/lua:
    slurm_bb_data_in: `` and the failure's text (a user's file names: ``|``, newlines), which
    once split the line and failed the teardown's lookup. squeue cuts it at the width asked."""
    reason = "burst_buffer/lua: slurm_bb_data_in: stage-in failed: /s/a|b\nc.sh:4: no"
    cut = reason[:slurm.REASON_WIDTH]
    assert "|" not in cut and "\n" not in cut
    header = TEXT.splitlines()[0]
    line = f"5|batch|alice|PENDING|{cut.ljust(slurm.REASON_WIDTH)}|1|2026-12-06T03:03:32|N/A|0|j"
    (record,) = slurm.parse_query(header + "\n" + line + "\n")
    assert record.reason == cut.strip() and record.state is JobState.PENDING
    assert record.name == "j" and record.priority == 0
    assert f"%{slurm.REASON_WIDTH}r" in slurm.SNAPSHOT_FORMAT


def test_other_columns_are_refused_with_the_line():
    with pytest.raises(SchedulerError, match="squeue line 1: expected the header"):
        slurm.parse_snapshot(TEXT.replace("PRIORITY", "PRIO", 1))
    assert slurm.parse_snapshot(slurm.SNAPSHOT_HEADER + "\n") == []


def test_scheduler_snapshot_runs_the_text_query(use_runner):
    runner = use_runner(ScriptedRunner([(("squeue",), CommandResult(("squeue",), 0, TEXT, "",
                                                                      0.1))]))
    snapshot = Scheduler(slurm).snapshot()
    assert [tuple(argv) for argv in runner.ran("squeue")] == [tuple(slurm.build_snapshot())]
    pending = snapshot.pending()
    assert pending and snapshot.running()
    assert not any(j.state.is_queued for j in snapshot.jobs[:-len(pending)])   # queued last


def test_pbs_snapshot_is_its_query():
    assert pbs.build_snapshot() == pbs.build_query(None)
    text = (Path(__file__).parent / "data" / "qstat-f.txt").read_text()
    assert pbs.parse_snapshot(text) == pbs.parse_query(text)


def test_jobs_seen_before_are_not_parsed_again_and_the_answer_is_unchanged(capture_timezone):
    reuse: dict = {}
    first = slurm.parse_snapshot(TEXT, reuse)
    assert len(reuse) == len(first)
    dependent, held = IDS["dependent"], IDS["held"]
    lines = TEXT.splitlines()
    width = slurm.REASON_WIDTH
    changed = [line.replace(f"|PENDING|{'Dependency':{width}}|", f"|RUNNING|{'None':{width}}|")
               if line.startswith(dependent + "|") else line
               for line in lines if not line.startswith(held + "|")]
    second = slurm.parse_snapshot("\n".join(changed) + "\n", reuse)
    assert second == slurm.parse_snapshot("\n".join(changed) + "\n")
    by_id = {r.job_id: r for r in first}
    again = {r.job_id: r for r in second}
    assert again[dependent].state is JobState.RUNNING and held not in again
    assert all(again[j] is by_id[j] for j in again if j != dependent)   # reused, not re-made
    assert len(reuse) == len(first) - 1 and set(reuse.values()) == set(second)


def test_scheduler_snapshot_keeps_the_order_of_an_unchanged_queue(use_runner):
    queued = [r for r in slurm.order_by_priority(slurm.parse_snapshot(TEXT)) if r.state.is_queued]
    last = queued[-1].job_id                         # its priority raised above every other
    raised = "\n".join(_with_priority(line, 4294967000) if line.startswith(last + "|")
                       else line for line in TEXT.splitlines()) + "\n"
    outputs = [TEXT, TEXT, raised]
    runner = use_runner(ScriptedRunner([(("squeue",), lambda argv: CommandResult(
        tuple(argv), 0, outputs.pop(0), "", 0.1))]))
    scheduler = Scheduler(slurm)
    one, two, three = (scheduler.snapshot() for _ in range(3))
    assert len(runner.ran("squeue")) == 3
    assert all(a is b for a, b in zip(one.jobs, two.jobs)) and len(one.jobs) == len(two.jobs)
    assert [j.job_id for j in three.jobs] == [j.job_id for j in slurm.order_by_priority(
        slurm.parse_snapshot(raised))]
    assert three.pending()[0].job_id == last != one.pending()[0].job_id


def _with_priority(line: str, priority: int) -> str:
    parts = line.split("|", 9)
    parts[8] = str(priority)
    return "|".join(parts)


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
