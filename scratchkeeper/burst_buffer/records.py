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

from ..planner import records as chains
from ..state import StateStore

COMPONENT = "burst-buffer"
#: the state of a chain this path made while its job lives (not the chain service's
#: ``submitted``, so its sweep never acts on a job Slurm's burst buffer runs), and once the job
#: is torn down: ``scratchkeeper_chains{state="burst-buffer"}`` counts live jobs' chains only
CHAIN_STATE, CHAIN_ENDED = chains.BURST_BUFFER, "burst-buffer-ended"

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
    # the owner's umask (from the job's environment Slurm saved), which the data jobs take;
    # chains of jobs torn down before teardown ended them
    f"""
    ALTER TABLE bb_jobs ADD COLUMN umask INTEGER;
    UPDATE chains SET state = '{CHAIN_ENDED}' WHERE state = '{CHAIN_STATE}' AND chain_id IN
        (SELECT chain_id FROM bb_jobs WHERE stage = 'torn-down' AND chain_id IS NOT NULL);
    """,
    # which submission the record is of (a job id Slurm hands out again is another job), and
    # when a job whose stage-in failed was left to be cancelled once Slurm tore it down
    """
    ALTER TABLE bb_jobs ADD COLUMN submission TEXT;
    ALTER TABLE bb_jobs ADD COLUMN end_after_teardown REAL;
    CREATE INDEX bb_jobs_to_end ON bb_jobs(end_after_teardown) WHERE end_after_teardown
        IS NOT NULL;
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
#: stages whose timestamp is that of the last time they were entered: a job Slurm stages again
#: after a teardown (slurmctld restarted during its stage-in) can be torn down again, and a
#: data_in tells by it that a teardown came while it waited
_LATEST = frozenset({TORN_DOWN})


def open_records(store: StateStore) -> StateStore:
    """The table, after the planner's (a migration of this one updates the chains)."""
    chains.open_records(store)
    store.ensure_schema(COMPONENT, MIGRATIONS)
    return store


def set_up(store: StateStore, job_id: str, uid: int, gid: int, pool: str,
           requested_bytes: int, submission: str | None = None) -> str | None:
    """Record the job at ``slurm_bb_setup`` (again: the same values, nothing else changes).

    ``submission`` tells this job from an earlier one Slurm gave the same id (its state reset,
    or ids wrapped at ``MaxJobId``): a record of another submission is an ended job's, and is
    replaced, its chain ended if it was still open. The replaced record's chain id, or None."""
    now = time.time()
    replaced = None
    with store.transaction() as conn:
        old = conn.execute("SELECT submission, chain_id FROM bb_jobs WHERE job_id = ?",
                           (job_id,)).fetchone()
        if old is not None and submission and old["submission"] \
                and old["submission"] != submission:
            conn.execute("DELETE FROM bb_jobs WHERE job_id = ?", (job_id,))
            replaced = old["chain_id"] or ""
        conn.execute(
            "INSERT INTO bb_jobs (job_id, uid, gid, pool, requested_bytes, stage, setup_at, "
            "updated, submission) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(job_id) DO UPDATE SET "
            "uid = excluded.uid, gid = excluded.gid, pool = excluded.pool, "
            "requested_bytes = excluded.requested_bytes, updated = excluded.updated, "
            "submission = COALESCE(bb_jobs.submission, excluded.submission)",
            (job_id, uid, gid, pool, requested_bytes, SET_UP, now, now, submission))
    if replaced:
        chain = chains.chain(store, replaced)
        if chain is not None and chain["state"] == CHAIN_STATE:
            chains.set_chain_state(store, replaced, CHAIN_ENDED)
    return replaced


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
    after a restart keeps when it began; a teardown's each time, :data:`_LATEST`)."""
    now = time.time()
    stamp = _STAMPS.get(stage)
    sets = ["stage = ?", "reason = ?", "updated = ?"]
    values: list[object] = [stage, reason, now]
    if stamp is not None:
        sets.append(f"{stamp} = ?" if stage in _LATEST else f"{stamp} = COALESCE({stamp}, ?)")
        values.append(now)
    if staged_bytes is not None:
        sets.append("staged_bytes = ?")
        values.append(staged_bytes)
    with store.transaction() as conn:
        conn.execute(f"UPDATE bb_jobs SET {', '.join(sets)} WHERE job_id = ?",
                     (*values, job_id))


def mark_to_end(store: StateStore, job_id: str) -> None:
    """The job's stage-in failed and it is to be cancelled once Slurm has torn it down."""
    with store.transaction() as conn:
        conn.execute("UPDATE bb_jobs SET end_after_teardown = COALESCE(end_after_teardown, ?), "
                     "updated = ? WHERE job_id = ?", (time.time(), time.time(), job_id))


def ended(store: StateStore, job_id: str, reason: str | None = None) -> None:
    """The job marked by :func:`mark_to_end` is dealt with (``reason``: why it was not
    cancelled, added to its record's reason)."""
    with store.transaction() as conn:
        conn.execute("UPDATE bb_jobs SET end_after_teardown = NULL, updated = ?, "
                     "reason = CASE WHEN ? IS NULL THEN reason ELSE reason || ' (' || ? || ')' "
                     "END WHERE job_id = ?", (time.time(), reason, reason, job_id))


def to_end(store: StateStore, limit: int = 100) -> list[sqlite3.Row]:
    """The jobs marked to be cancelled after their teardown, oldest first (at most ``limit``)."""
    return store.query("SELECT * FROM bb_jobs WHERE end_after_teardown IS NOT NULL "
                       "ORDER BY end_after_teardown LIMIT ?", (limit,))


def set_umask(store: StateStore, job_id: str, umask: int) -> None:
    with store.transaction() as conn:
        conn.execute("UPDATE bb_jobs SET umask = ?, updated = ? WHERE job_id = ?",
                     (umask, time.time(), job_id))


def held_bytes(store: StateStore) -> int:
    """The bytes on scratch of the jobs Slurm accounts in the pool, not torn down. The pool
    ``slurm_bb_pools`` reports is free space + these: Slurm subtracts each such job's share (its
    staged bytes, at least what it reserved) itself, so what it hands out is free space minus
    what is reserved but unwritten.

    Slurm accounts a job only when it named a pool and asked a size (``#STAGE pool=scratch
    capacity=``: the size ``slurm_bb_setup`` gets; Slurm 22.05 calls ``slurm_bb_real_size`` for
    no other job). Another job's staged bytes are already out of the free space, and counting
    them here would hand them out twice."""
    rows = store.query(
        "SELECT COALESCE(SUM(staged_bytes), 0) AS n FROM bb_jobs WHERE stage != ? AND pool != '' "
        "AND requested_bytes > 0", (TORN_DOWN,))
    return int(rows[0]["n"])


def staged_bytes(store: StateStore) -> int:
    """The bytes every job not torn down staged, whether Slurm accounts it in the pool or not."""
    rows = store.query("SELECT COALESCE(SUM(staged_bytes), 0) AS n FROM bb_jobs WHERE stage != ?",
                       (TORN_DOWN,))
    return int(rows[0]["n"])


def stage_counts(store: StateStore) -> list[tuple[str, int]]:
    rows = store.query("SELECT stage, COUNT(*) AS n FROM bb_jobs GROUP BY stage ORDER BY stage")
    return [(row["stage"], int(row["n"])) for row in rows]


def active_jobs(store: StateStore, limit: int = 200, *, uid: int | None = None
                ) -> list[sqlite3.Row]:
    """Jobs not torn down, oldest first (at most ``limit``); of owner ``uid`` only when given."""
    if uid is None:
        return store.query("SELECT * FROM bb_jobs WHERE stage != ? ORDER BY setup_at LIMIT ?",
                           (TORN_DOWN, limit))
    return store.query("SELECT * FROM bb_jobs WHERE stage != ? AND uid = ? ORDER BY setup_at "
                       "LIMIT ?", (TORN_DOWN, uid, limit))


def jobs(store: StateStore, job_ids: list[str]) -> list[sqlite3.Row]:
    """The records of ``job_ids`` (whatever their stage), oldest first."""
    if not job_ids:
        return []
    marks = ", ".join("?" * len(job_ids))
    return store.query(f"SELECT * FROM bb_jobs WHERE job_id IN ({marks}) ORDER BY setup_at",
                       tuple(job_ids))
