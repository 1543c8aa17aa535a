"""The planner's tables in the state store: chains, their jobs, staged files (recovery metadata)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from typing import Iterable

from ..state import StateStore
from .plan import Plan

COMPONENT = "planner"

MIGRATIONS = [
    """
    CREATE TABLE chains (
        chain_id    TEXT PRIMARY KEY,
        script_path TEXT NOT NULL,
        workdir     TEXT NOT NULL,
        scheduler   TEXT NOT NULL,
        owner_uid   INTEGER NOT NULL,
        state       TEXT NOT NULL,
        reason      TEXT NOT NULL DEFAULT '',
        created     REAL NOT NULL,
        updated     REAL NOT NULL,
        plan_json   TEXT NOT NULL
    );
    CREATE TABLE chain_jobs (
        chain_id    TEXT NOT NULL REFERENCES chains(chain_id) ON DELETE CASCADE,
        job_key     TEXT NOT NULL,
        role        TEXT NOT NULL,
        queue       TEXT NOT NULL,
        position    INTEGER NOT NULL,
        job_id      TEXT,
        state       TEXT NOT NULL,
        reason      TEXT NOT NULL DEFAULT '',
        failed_line INTEGER,
        log_path    TEXT,
        updated     REAL NOT NULL,
        PRIMARY KEY (chain_id, job_key)
    );
    CREATE INDEX chain_jobs_by_job_id ON chain_jobs(job_id);
    CREATE TABLE staged_files (
        chain_id    TEXT NOT NULL REFERENCES chains(chain_id) ON DELETE CASCADE,
        path        TEXT NOT NULL,
        job_key     TEXT NOT NULL,
        source      TEXT NOT NULL,
        line        INTEGER NOT NULL,
        recursive   INTEGER NOT NULL DEFAULT 0,
        state       TEXT NOT NULL,
        size        INTEGER,
        checksum    TEXT,
        owner_uid   INTEGER,
        owner_gid   INTEGER,
        staged_at   REAL,
        PRIMARY KEY (chain_id, path)
    );
    CREATE INDEX staged_files_by_path ON staged_files(path);
    CREATE TABLE job_inputs (
        chain_id    TEXT NOT NULL REFERENCES chains(chain_id) ON DELETE CASCADE,
        path        TEXT NOT NULL,
        PRIMARY KEY (chain_id, path)
    );
    """,
]

# chain states
PLANNED, SUBMITTING, SUBMITTED, SUBMIT_FAILED = "planned", "submitting", "submitted", "submit-failed"
STAGE_IN_FAILED, STAGE_OUT_FAILED = "stage-in-failed", "stage-out-failed"
# chain job states
JOB_PLANNED, JOB_SUBMITTED, JOB_CANCELLED = "planned", "submitted", "cancelled"
JOB_DONE, JOB_FAILED = "done", "failed"


def open_records(store: StateStore) -> StateStore:
    store.ensure_schema(COMPONENT, MIGRATIONS)
    return store


def record_plan(store: StateStore, plan: Plan, owner_uid: int, log_paths: dict[str, str]) -> None:
    """Write the chain, its jobs and its staged files as planned, in one transaction."""
    now = time.time()
    with store.transaction() as conn:
        conn.execute("INSERT INTO chains VALUES (?,?,?,?,?,?,?,?,?,?)",
                     (plan.chain_id, plan.script_path, plan.workdir, plan.scheduler, owner_uid,
                      SUBMITTING, "", now, now, json.dumps(_plan_summary(plan))))
        for position, job in enumerate(plan.jobs):
            conn.execute("INSERT INTO chain_jobs(chain_id, job_key, role, queue, position, state,"
                         " log_path, updated) VALUES (?,?,?,?,?,?,?,?)",
                         (plan.chain_id, job.key, job.role, job.queue, position, JOB_PLANNED,
                          log_paths.get(job.key), now))
        for staged in plan.staged_files:
            conn.execute("INSERT OR REPLACE INTO staged_files(chain_id, path, job_key, source, line,"
                         " recursive, state) VALUES (?,?,?,?,?,?,?)",
                         (plan.chain_id, staged.path, staged.job_key, staged.source, staged.line,
                          int(staged.recursive), "planned"))
        for path in plan.inputs:
            conn.execute("INSERT OR IGNORE INTO job_inputs VALUES (?, ?)", (plan.chain_id, path))


def _plan_summary(plan: Plan) -> dict:
    return {"offloaded_files": [asdict(f) for f in plan.offloaded_files],
            "jobs": [{"key": j.key, "role": j.role, "name": j.name, "start": j.start,
                      "depends_on": [asdict(d) for d in j.depends_on]} for j in plan.jobs]}


def set_job_submitted(store: StateStore, chain_id: str, key: str, job_id: str) -> None:
    with store.transaction() as conn:
        conn.execute("UPDATE chain_jobs SET job_id=?, state=?, updated=? WHERE chain_id=? AND job_key=?",
                     (job_id, JOB_SUBMITTED, time.time(), chain_id, key))


def set_chain_state(store: StateStore, chain_id: str, state: str, reason: str = "") -> None:
    with store.transaction() as conn:
        conn.execute("UPDATE chains SET state=?, reason=?, updated=? WHERE chain_id=?",
                     (state, reason, time.time(), chain_id))


def set_jobs_state(store: StateStore, chain_id: str, keys: Iterable[str], state: str,
                   reason: str = "", failed_line: int | None = None) -> None:
    with store.transaction() as conn:
        for key in keys:
            conn.execute("UPDATE chain_jobs SET state=?, reason=?, failed_line=?, updated=? "
                         "WHERE chain_id=? AND job_key=?",
                         (state, reason, failed_line, time.time(), chain_id, key))


def chain(store: StateStore, chain_id: str):
    rows = store.query("SELECT * FROM chains WHERE chain_id=?", (chain_id,))
    return rows[0] if rows else None


def chain_of_job(store: StateStore, job_id: str):
    rows = store.query("SELECT chain_id FROM chain_jobs WHERE job_id=?", (job_id,))
    return rows[0]["chain_id"] if rows else None


def chain_jobs(store: StateStore, chain_id: str):
    return store.query("SELECT * FROM chain_jobs WHERE chain_id=? ORDER BY position", (chain_id,))


def staged_files(store: StateStore, chain_id: str, job_key: str | None = None):
    if job_key is None:
        return store.query("SELECT * FROM staged_files WHERE chain_id=? ORDER BY line, path",
                           (chain_id,))
    return store.query("SELECT * FROM staged_files WHERE chain_id=? AND job_key=? ORDER BY line, path",
                       (chain_id, job_key))


def recent_chains(store: StateStore, owner_uid: int | None, limit: int = 20):
    if owner_uid is None:
        return store.query("SELECT * FROM chains ORDER BY created DESC LIMIT ?", (limit,))
    return store.query("SELECT * FROM chains WHERE owner_uid=? ORDER BY created DESC LIMIT ?",
                       (owner_uid, limit))
