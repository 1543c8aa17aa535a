"""The burst-buffer path's table in the state store, and the only module that reads or writes it.

Component ``burst-buffer``: one row per Slurm job that ``burst_buffer.lua`` handed to
scratchkeeper (``bb_jobs``): its owner (Slurm passes the uid and gid to ``slurm_bb_setup``
only), the pool size Slurm accounts for it, the chain the planner made of its script (the chain
tables are the planner's, :mod:`scratchkeeper.planner.records`), where it is in Slurm's
burst-buffer life cycle and when each stage began and ended (what ``scontrol show bbstat`` and
``scratchkeeper status`` show).
"""

from __future__ import annotations

import sqlite3
import time

from ..state import StateStore

COMPONENT = "burst-buffer"

MIGRATIONS = [
    """
    CREATE TABLE bb_jobs (
        job_id          TEXT PRIMARY KEY,
        uid             INTEGER NOT NULL,
        gid             INTEGER NOT NULL,
        pool            TEXT NOT NULL DEFAULT '',
        requested_bytes INTEGER NOT NULL DEFAULT 0,
        staged_bytes    INTEGER NOT NULL DEFAULT 0,
        chain_id        TEXT,
        stage           TEXT NOT NULL,
        reason          TEXT NOT NULL DEFAULT '',
        setup_at        REAL NOT NULL,
        data_in_started REAL,
        data_in_ended   REAL,
        pre_run_at      REAL,
        data_out_started REAL,
        data_out_ended  REAL,
        teardown_at     REAL,
        updated         REAL NOT NULL
    );
    CREATE INDEX bb_jobs_by_stage ON bb_jobs(stage);
    """,
]

# stages: where a job is in Slurm's burst-buffer life cycle
SET_UP, STAGING_IN, STAGED_IN, STAGE_IN_FAILED = "set-up", "staging-in", "staged-in", "stage-in-failed"
RUNNING, STAGING_OUT, STAGED_OUT = "running", "staging-out", "staged-out"
STAGE_OUT_FAILED, TORN_DOWN = "stage-out-failed", "torn-down"

#: the timestamp column each stage sets when it is entered
_STAMPS = {STAGING_IN: "data_in_started", STAGED_IN: "data_in_ended",
           STAGE_IN_FAILED: "data_in_ended", RUNNING: "pre_run_at",
           STAGING_OUT: "data_out_started", STAGED_OUT: "data_out_ended",
           STAGE_OUT_FAILED: "data_out_ended", TORN_DOWN: "teardown_at"}


def open_records(store: StateStore) -> StateStore:
    store.ensure_schema(COMPONENT, MIGRATIONS)
    return store


def set_up(store: StateStore, job_id: str, uid: int, gid: int, pool: str,
           requested_bytes: int) -> None:
    """Record the job at ``slurm_bb_setup`` (again: the same values, nothing else changes)."""
    now = time.time()
    with store.transaction() as conn:
        conn.execute(
            "INSERT INTO bb_jobs (job_id, uid, gid, pool, requested_bytes, stage, setup_at, "
            "updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(job_id) DO UPDATE SET "
            "uid = excluded.uid, gid = excluded.gid, pool = excluded.pool, "
            "requested_bytes = excluded.requested_bytes, updated = excluded.updated",
            (job_id, uid, gid, pool, requested_bytes, SET_UP, now, now))


def job(store: StateStore, job_id: str) -> sqlite3.Row | None:
    rows = store.query("SELECT * FROM bb_jobs WHERE job_id = ?", (job_id,))
    return rows[0] if rows else None


def set_chain(store: StateStore, job_id: str, chain_id: str) -> None:
    with store.transaction() as conn:
        conn.execute("UPDATE bb_jobs SET chain_id = ?, updated = ? WHERE job_id = ?",
                     (chain_id, time.time(), job_id))


def set_stage(store: StateStore, job_id: str, stage: str, reason: str = "", *,
              staged_bytes: int | None = None) -> None:
    """Enter ``stage`` (its timestamp column set the first time only, so a stage run again
    after a restart keeps when it began)."""
    now = time.time()
    stamp = _STAMPS.get(stage)
    sets = ["stage = ?", "reason = ?", "updated = ?"]
    values: list[object] = [stage, reason, now]
    if stamp is not None:
        sets.append(f"{stamp} = COALESCE({stamp}, ?)")
        values.append(now)
    if staged_bytes is not None:
        sets.append("staged_bytes = ?")
        values.append(staged_bytes)
    with store.transaction() as conn:
        conn.execute(f"UPDATE bb_jobs SET {', '.join(sets)} WHERE job_id = ?",
                     (*values, job_id))


def held_bytes(store: StateStore) -> int:
    """The bytes staged jobs not torn down hold on scratch. The pool ``slurm_bb_pools`` reports
    is free space + these: Slurm subtracts each job's share (its staged bytes, at least what it
    reserved) itself, so what it hands out is free space minus what is reserved but unwritten."""
    rows = store.query(
        "SELECT COALESCE(SUM(staged_bytes), 0) AS n FROM bb_jobs WHERE stage != ? AND pool != ''",
        (TORN_DOWN,))
    return int(rows[0]["n"])


def stage_counts(store: StateStore) -> list[tuple[str, int]]:
    rows = store.query("SELECT stage, COUNT(*) AS n FROM bb_jobs GROUP BY stage ORDER BY stage")
    return [(row["stage"], int(row["n"])) for row in rows]


def active_jobs(store: StateStore, limit: int = 200) -> list[sqlite3.Row]:
    """Jobs not torn down, oldest first (at most ``limit``)."""
    return store.query("SELECT * FROM bb_jobs WHERE stage != ? ORDER BY setup_at LIMIT ?",
                       (TORN_DOWN, limit))
