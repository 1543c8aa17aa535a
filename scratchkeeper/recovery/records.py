"""The recovery service's tables in the state store: requests and the state of each file.

A request is written (one transaction) before it is acknowledged, so none is lost; there is at
most one active (``queued`` or ``running``) request per path, so two reports of the same loss
become one rebuild. A ``running`` request names its worker (``host:pid:start-time``); a restart
finds requests whose worker is gone and queues them again, with the rebuild they had begun.
"""

from __future__ import annotations

import json
import os
import socket
import time

from ..state import StateStore

COMPONENT = "recovery"

MIGRATIONS = [
    """
    CREATE TABLE recovery_requests (
        request_id   INTEGER PRIMARY KEY AUTOINCREMENT,
        path         TEXT NOT NULL,
        reported_osts TEXT NOT NULL DEFAULT '[]',
        requested_by INTEGER NOT NULL,
        origin       TEXT NOT NULL,
        state        TEXT NOT NULL,
        worker       TEXT,
        rebuild_id   TEXT,
        reason       TEXT NOT NULL DEFAULT '',
        outcome      TEXT,
        created      REAL NOT NULL,
        updated      REAL NOT NULL
    );
    CREATE INDEX recovery_requests_by_path ON recovery_requests(path, state);
    CREATE INDEX recovery_requests_by_state ON recovery_requests(state, request_id);
    CREATE TABLE recovery_files (
        path          TEXT PRIMARY KEY,
        state         TEXT NOT NULL,
        reason        TEXT NOT NULL DEFAULT '',
        patched_bytes INTEGER NOT NULL DEFAULT 0,
        seconds       REAL NOT NULL DEFAULT 0,
        updated       REAL NOT NULL
    );
    """,
]

# request states
QUEUED, RUNNING, DONE, FAILED = "queued", "running", "done", "failed"
ACTIVE = (QUEUED, RUNNING)
# file states
WHOLE, RECOVERING, LOST = "whole", "recovering", "lost"


def open_records(store: StateStore) -> StateStore:
    store.ensure_schema(COMPONENT, MIGRATIONS)
    return store


def worker_id() -> str:
    """``host:pid:start-time``: names this process even after its pid is reused."""
    return f"{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid())}"


def worker_alive(worker: str | None) -> bool:
    """Whether the process a worker id names still runs (on this host; others are trusted)."""
    if not worker:
        return False
    host, pid, started = worker.rsplit(":", 2)
    if host != socket.gethostname():
        return True
    return started != "?" and _start_time(int(pid)) == started


def _start_time(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "?"


def enqueue(store: StateStore, path: str, *, reported_osts: list[int], requested_by: int,
            origin: str) -> tuple[int, bool]:
    """Record a request for ``path`` or join the active one; returns (request id, created)."""
    return enqueue_many(store, [(path, reported_osts)], requested_by=requested_by,
                        origin=origin)[0]


def enqueue_many(store: StateStore, files: list[tuple[str, list[int]]], *, requested_by: int,
                 origin: str) -> list[tuple[int, bool]]:
    """:func:`enqueue` for each (path, reported OSTs), in one transaction: the files of one OST
    failure are queued together, so that the workers waiting for them find them all at once
    (and recover them together) rather than the first ones alone."""
    now = time.time()
    out = []
    with store.transaction() as conn:
        for path, reported_osts in files:
            row = conn.execute("SELECT request_id, reported_osts FROM recovery_requests "
                               "WHERE path = ? AND state IN (?, ?) ORDER BY request_id LIMIT 1",
                               (path, *ACTIVE)).fetchone()
            if row is not None:
                merged = sorted(set(json.loads(row["reported_osts"])) | set(reported_osts))
                conn.execute("UPDATE recovery_requests SET reported_osts = ?, updated = ? "
                             "WHERE request_id = ?", (json.dumps(merged), now, row["request_id"]))
                out.append((row["request_id"], False))
                continue
            cursor = conn.execute(
                "INSERT INTO recovery_requests(path, reported_osts, requested_by, origin, state, "
                "created, updated) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (path, json.dumps(sorted(set(reported_osts))), requested_by, origin, QUEUED, now,
                 now))
            conn.execute("INSERT INTO recovery_files(path, state, updated) VALUES (?, ?, ?) "
                         "ON CONFLICT(path) DO UPDATE SET state = excluded.state, reason = '', "
                         "updated = excluded.updated", (path, RECOVERING, now))
            out.append((cursor.lastrowid, True))
    return out


def claim_next(store: StateStore, worker: str):
    """Take the oldest queued request for this worker (None when there is none)."""
    with store.transaction() as conn:
        row = conn.execute("SELECT * FROM recovery_requests WHERE state = ? "
                           "ORDER BY request_id LIMIT 1", (QUEUED,)).fetchone()
        if row is None:
            return None
        conn.execute("UPDATE recovery_requests SET state = ?, worker = ?, updated = ? "
                     "WHERE request_id = ?", (RUNNING, worker, time.time(), row["request_id"]))
    return request(store, row["request_id"])


def claim(store: StateStore, request_id: int, worker: str) -> bool:
    """Take one given request if it is queued (inline recovery by the CLI or the hook)."""
    with store.transaction() as conn:
        cursor = conn.execute("UPDATE recovery_requests SET state = ?, worker = ?, updated = ? "
                              "WHERE request_id = ? AND state = ?",
                              (RUNNING, worker, time.time(), request_id, QUEUED))
        return cursor.rowcount == 1


def set_rebuild(store: StateStore, request_id: int, rebuild_id: str | None) -> None:
    with store.transaction() as conn:
        conn.execute("UPDATE recovery_requests SET rebuild_id = ?, updated = ? "
                     "WHERE request_id = ?", (rebuild_id, time.time(), request_id))


def finish(store: StateStore, request_id: int, *, ok: bool, path: str, file_state: str,
           reason: str = "", outcome: dict | None = None, patched_bytes: int = 0,
           seconds: float = 0.0) -> None:
    """Close a request and set its file's state, in one transaction."""
    now = time.time()
    with store.transaction() as conn:
        conn.execute("UPDATE recovery_requests SET state = ?, reason = ?, outcome = ?, "
                     "rebuild_id = NULL, updated = ? WHERE request_id = ?",
                     (DONE if ok else FAILED, reason, json.dumps(outcome or {}), now, request_id))
        conn.execute("INSERT INTO recovery_files(path, state, reason, patched_bytes, seconds, "
                     "updated) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(path) DO UPDATE SET "
                     "state = excluded.state, reason = excluded.reason, "
                     "patched_bytes = excluded.patched_bytes, seconds = excluded.seconds, "
                     "updated = excluded.updated",
                     (path, file_state, reason, patched_bytes, seconds, now))


def requeue_orphans(store: StateStore) -> list[int]:
    """Queue again the running requests whose worker died (after a kill -9, say)."""
    requeued = []
    with store.transaction() as conn:
        for row in conn.execute("SELECT request_id, worker FROM recovery_requests WHERE state = ?",
                                (RUNNING,)).fetchall():
            if not worker_alive(row["worker"]):
                conn.execute("UPDATE recovery_requests SET state = ?, worker = NULL, updated = ? "
                             "WHERE request_id = ?", (QUEUED, time.time(), row["request_id"]))
                requeued.append(row["request_id"])
    return requeued


def request(store: StateStore, request_id: int):
    rows = store.query("SELECT * FROM recovery_requests WHERE request_id = ?", (request_id,))
    return rows[0] if rows else None


def active_request(store: StateStore, path: str):
    rows = store.query("SELECT * FROM recovery_requests WHERE path = ? AND state IN (?, ?) "
                       "ORDER BY request_id LIMIT 1", (path, *ACTIVE))
    return rows[0] if rows else None


def last_request(store: StateStore, path: str):
    rows = store.query("SELECT * FROM recovery_requests WHERE path = ? "
                       "ORDER BY request_id DESC LIMIT 1", (path,))
    return rows[0] if rows else None


def file_state(store: StateStore, path: str):
    rows = store.query("SELECT * FROM recovery_files WHERE path = ?", (path,))
    return rows[0] if rows else None


def rebuild_ids_in_use(store: StateStore) -> set[str]:
    return {row["rebuild_id"] for row in store.query(
        "SELECT rebuild_id FROM recovery_requests WHERE rebuild_id IS NOT NULL AND state IN (?, ?)",
        ACTIVE)}


def recent_requests(store: StateStore, requested_by: int | None, limit: int = 50):
    if requested_by is None:
        return store.query("SELECT * FROM recovery_requests ORDER BY request_id DESC LIMIT ?",
                           (limit,))
    return store.query("SELECT * FROM recovery_requests WHERE requested_by = ? "
                       "ORDER BY request_id DESC LIMIT ?", (requested_by, limit))
