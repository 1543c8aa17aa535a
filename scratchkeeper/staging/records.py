"""The staging tables: recorded transfers (what predictions learn from) and JIT decisions."""

from __future__ import annotations

import time

from ..state import StateStore

COMPONENT = "staging"

MIGRATIONS = [
    """
    CREATE TABLE transfers (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        chain_id    TEXT NOT NULL,
        job_key     TEXT NOT NULL,
        host        TEXT NOT NULL,
        bytes       INTEGER NOT NULL,
        seconds     REAL NOT NULL,
        started     REAL NOT NULL,
        owner_uid   INTEGER,
        UNIQUE (chain_id, job_key, host)
    );
    CREATE INDEX transfers_by_host ON transfers(host, started);
    CREATE TABLE jit_schedule (
        chain_id        TEXT NOT NULL,
        job_key         TEXT NOT NULL,
        job_id          TEXT NOT NULL,
        compute_id      TEXT NOT NULL,
        scheduler       TEXT NOT NULL,
        bytes           INTEGER,
        predicted       REAL,
        pessimistic     REAL,
        expected_start  REAL,
        estimate_source TEXT NOT NULL DEFAULT '',
        release_at      REAL,
        state           TEXT NOT NULL,
        reason          TEXT NOT NULL DEFAULT '',
        decided         REAL NOT NULL,
        released        REAL,
        PRIMARY KEY (chain_id, job_key)
    );
    CREATE INDEX jit_schedule_by_state ON jit_schedule(state);
    """,
    """
    CREATE TABLE close_log (
        name        TEXT PRIMARY KEY,
        offset      INTEGER NOT NULL
    );
    CREATE TABLE offloads (
        chain_id    TEXT NOT NULL,
        path        TEXT NOT NULL,
        size        INTEGER NOT NULL,
        mtime       TEXT NOT NULL,
        destination TEXT NOT NULL,
        job_name    TEXT NOT NULL,
        job_id      TEXT,
        state       TEXT NOT NULL,
        digest      TEXT,
        reason      TEXT NOT NULL DEFAULT '',
        closed      REAL NOT NULL,
        submitted   REAL,
        ended       REAL,
        PRIMARY KEY (chain_id, path, size, mtime)
    );
    CREATE INDEX offloads_by_state ON offloads(state);
    """,
]

#: a held-back stage-in (its begin time in the future) / one the scheduler may start now
WAITING, RELEASED = "waiting", "released"


def open_staging(store: StateStore) -> StateStore:
    store.ensure_schema(COMPONENT, MIGRATIONS)
    return store


def made(store: StateStore, table: str = "jit_schedule") -> bool:
    """Whether a staging table exists (a reader that may not create them asks first)."""
    return bool(store.query("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?",
                            (table,)))


def record_transfer(store: StateStore, chain_id: str, job_key: str, host: str, size: int,
                    seconds: float, started: float, owner_uid: int | None) -> None:
    with store.transaction() as conn:
        conn.execute("INSERT OR REPLACE INTO transfers(chain_id, job_key, host, bytes, seconds,"
                     " started, owner_uid) VALUES (?,?,?,?,?,?,?)",
                     (chain_id, job_key, host, size, seconds, started, owner_uid))


def recent_transfers(store: StateStore, host: str, limit: int):
    return store.query("SELECT bytes, seconds FROM transfers WHERE host=? AND bytes > 0 AND "
                       "seconds > 0 ORDER BY started DESC LIMIT ?", (host, limit))


def transfers_of(store: StateStore, chain_id: str):
    return store.query("SELECT * FROM transfers WHERE chain_id=? ORDER BY started", (chain_id,))


def save_decision(store: StateStore, row: dict) -> None:
    columns = ", ".join(row)
    marks = ", ".join("?" for _ in row)
    with store.transaction() as conn:
        conn.execute(f"INSERT OR REPLACE INTO jit_schedule({columns}) VALUES ({marks})",
                     tuple(row.values()))


def decisions(store: StateStore, *, state: str | None = None, chain_id: str | None = None):
    if chain_id is not None:
        return store.query("SELECT * FROM jit_schedule WHERE chain_id=?", (chain_id,))
    return store.query("SELECT * FROM jit_schedule WHERE state=? ORDER BY release_at", (state,))


def set_decision_state(store: StateStore, chain_id: str, job_key: str, state: str, *,
                       release_at: float | None = None, expected_start: float | None = None,
                       estimate_source: str | None = None, reason: str | None = None) -> None:
    now = time.time()
    with store.transaction() as conn:
        conn.execute(
            "UPDATE jit_schedule SET state=?, release_at=COALESCE(?, release_at),"
            " expected_start=COALESCE(?, expected_start),"
            " estimate_source=COALESCE(?, estimate_source), reason=COALESCE(?, reason),"
            " decided=?, released=CASE WHEN ?='released' THEN ? ELSE released END"
            " WHERE chain_id=? AND job_key=?",
            (state, release_at, expected_start, estimate_source, reason, now, state, now,
             chain_id, job_key))
