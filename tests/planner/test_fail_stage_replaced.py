"""A data job of an abandoned chaining that fails afterwards (the chain service was killed
mid-chain and chained the compute job again): its ``stage fail`` records the failure and
cancels nothing, for the compute job is the new chain's now (planner/commit.py)."""

from __future__ import annotations

import time

from scratchkeeper.config import SiteConfig
from scratchkeeper.planner import commit, records
from scratchkeeper.state import StateStore


class Cancels:
    def __init__(self):
        self.cancelled: list[list[str]] = []

    def cancel(self, ids, reason=""):
        self.cancelled.append(list(ids))


def _chain(store, chain_id: str, state: str, created: float, compute_id: str) -> None:
    with store.transaction() as conn:
        conn.execute("INSERT INTO chains VALUES (?,?,?,?,?,?,?,?,?,?)",
                     (chain_id, "/home/u/job.sh", "/home/u", "slurm", 1000, state, "", created,
                      created, "{}"))
        conn.execute("INSERT INTO chain_jobs(chain_id, job_key, role, queue, position, "
                     "job_id, state, updated) VALUES (?,?,?,?,?,?,?,?)",
                     (chain_id, "stage-in", "stage-in", "dataxfer", 0, f"{compute_id}{state[:2]}",
                      "submitted", created))
        conn.execute("INSERT INTO chain_jobs(chain_id, job_key, role, queue, position, job_id, "
                     "state, updated) VALUES (?,?,?,?,?,?,?,?)",
                     (chain_id, "compute", "compute", "batch", 1, compute_id, "submitted",
                      created))


def _store(tmp_path):
    store = records.open_records(StateStore(str(tmp_path / "state.db")))
    now = time.time()
    _chain(store, "sk-old-a", records.SUBMIT_FAILED, now - 60, "100")  # the abandoned chaining
    _chain(store, "sk-new-b", records.SUBMITTED, now, "100")             # chained again
    return store


def test_a_stage_in_of_an_abandoned_chaining_cancels_nothing(tmp_path, monkeypatch):
    store = _store(tmp_path)
    scheduler = Cancels()
    monkeypatch.setattr(commit, "get_scheduler", lambda config, kind: scheduler)
    cancelled = commit.fail_stage(store, SiteConfig(), "sk-old-a", "stage-in", "no source", 3)
    assert cancelled == [] and scheduler.cancelled == []
    assert records.chain(store, "sk-old-a")["state"] == records.SUBMIT_FAILED
    (row,) = [r for r in records.chain_jobs(store, "sk-old-a") if r["job_key"] == "stage-in"]
    assert row["state"] == records.JOB_FAILED


def test_a_stage_in_of_a_live_chain_still_cancels_its_compute_job(tmp_path, monkeypatch):
    store = _store(tmp_path)
    scheduler = Cancels()
    monkeypatch.setattr(commit, "get_scheduler", lambda config, kind: scheduler)
    cancelled = commit.fail_stage(store, SiteConfig(), "sk-new-b", "stage-in", "no source", 3)
    assert cancelled == ["100"] and scheduler.cancelled == [["100"]]
    assert records.chain(store, "sk-new-b")["state"] == records.STAGE_IN_FAILED


def test_a_stage_in_of_a_burst_buffer_chain_leaves_its_job_to_data_in(tmp_path, monkeypatch):
    """The compute job is Slurm's burst-buffer job, whose data_in waits for this data job: a
    cancel from here raced Slurm's teardown (which slurmctld then killed, keeping the job's
    pool share); data_in ends the job after that teardown (burst_buffer/ending.py)."""
    store = records.open_records(StateStore(str(tmp_path / "state.db")))
    _chain(store, "sk-bb-c", records.BURST_BUFFER, time.time(), "200")
    scheduler = Cancels()
    monkeypatch.setattr(commit, "get_scheduler", lambda config, kind: scheduler)
    cancelled = commit.fail_stage(store, SiteConfig(), "sk-bb-c", "stage-in", "no source", 3)
    assert cancelled == [] and scheduler.cancelled == []
    assert records.chain(store, "sk-bb-c")["state"] == records.STAGE_IN_FAILED
