"""The recovery service's tables in the state store: requests and the state of each file.

A request is written (one transaction) before it is acknowledged, so none is lost; there is at
most one active (``queued`` or ``running``) request per path, so two reports of the same loss
become one rebuild. A ``running`` request names its worker (``host:pid:start-time``); a restart
finds requests whose worker is gone and queues them again, with the rebuild they had begun.

What ``recovery list`` shows is recorded here too: when a request was queued (``created``),
first started and finished, and a running one's progress (``bytes_done`` of ``bytes_total``,
the bytes its rebuild must patch), which the patching worker writes at most once every
:data:`PROGRESS_INTERVAL` seconds (:class:`ProgressRecorder`). A resumed rebuild counts the bytes
patched before the restart as done, so its progress goes on from where the journal left it.

What one user's requests cost here is bounded (issue 39): a user has at most a number of
requests queued or running (:func:`enqueue_many`'s ``pending_limit``), workers take users in
turn (:func:`claim_next`), and finished requests are removed after a retention and beyond a
number per user (:func:`prune`).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass

from ..errors import StateError
from ..state import StateStore
from .client import ServiceBusy

log = logging.getLogger(__name__)

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
    # times and progress for `recovery list`; the requests closed before have no start time
    """
    ALTER TABLE recovery_requests ADD COLUMN started REAL;
    ALTER TABLE recovery_requests ADD COLUMN finished REAL;
    ALTER TABLE recovery_requests ADD COLUMN bytes_done INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE recovery_requests ADD COLUMN bytes_total INTEGER;
    ALTER TABLE recovery_requests ADD COLUMN progress_at REAL;
    UPDATE recovery_requests SET finished = updated WHERE state IN ('done', 'failed');
    """,
    # each user's requests by state: the workers' turn between users, a user's pending count
    # and the pruning of a user's oldest finished ones
    """
    CREATE INDEX recovery_requests_by_uid ON recovery_requests(state, requested_by, request_id);
    """,
]

#: the most often a patching worker writes its progress (seconds): a patch of many small
#: writes costs one transaction a second, not one per write
PROGRESS_INTERVAL = 1.0

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
                 origin: str, pending_limit: int | None = None) -> list[tuple[int, bool]]:
    """:func:`enqueue` for each (path, reported OSTs), in one transaction: the files of one OST
    failure are queued together, so that the workers waiting for them find them all at once
    (and recover them together) rather than the first ones alone.

    ``pending_limit``: the most active requests ``requested_by`` may have; a new one beyond is
    refused (:class:`~.client.ServiceBusy`, nothing recorded), a request joined costs nothing.
    """
    now = time.time()
    out = []
    with store.transaction() as conn:
        pending = None if pending_limit is None else conn.execute(
            "SELECT COUNT(*) FROM recovery_requests WHERE state IN (?, ?) AND requested_by = ?",
            (*ACTIVE, requested_by)).fetchone()[0]
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
            if pending is not None:
                if pending >= pending_limit:
                    raise ServiceBusy(f"uid {requested_by} has {pending} recovery requests "
                                      f"queued or running (at most {pending_limit}); try again "
                                      "once some have ended")
                pending += 1
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


#: the queued request a free worker takes: that of the user (``requested_by``) with the fewest
#: requests running, the oldest of theirs; among users with as many running, the one whose
#: oldest request waited longest. So one user's thousand queued requests take turns with
#: another's one instead of coming first (first come, first served was issue 39's finding)
_NEXT_BY_TURN = """
    WITH waiting AS (SELECT requested_by, MIN(request_id) AS first FROM recovery_requests
                     WHERE state = :queued GROUP BY requested_by),
         busy AS (SELECT requested_by, COUNT(*) AS running FROM recovery_requests
                  WHERE state = :running GROUP BY requested_by)
    SELECT waiting.first FROM waiting LEFT JOIN busy USING (requested_by)
    WHERE :cap IS NULL OR waiting.requested_by = 0 OR COALESCE(busy.running, 0) < :cap
    ORDER BY COALESCE(busy.running, 0), waiting.first LIMIT 1
"""


def claim_next(store: StateStore, worker: str, *, running_per_uid: int | None = None):
    """Take the next queued request for this worker, users served in turn (None when there
    is none). ``running_per_uid``: a user (not root) with that many requests running gets no
    other until one ends, whatever they have queued."""
    # every change wakes every idle worker: a read (no lock) first, so that those with nothing
    # to take do not each queue for the write lock
    if not store.query("SELECT 1 FROM recovery_requests WHERE state = ? LIMIT 1", (QUEUED,)):
        return None
    with store.transaction() as conn:
        row = conn.execute(_NEXT_BY_TURN, {"queued": QUEUED, "running": RUNNING,
                                           "cap": running_per_uid}).fetchone()
        if row is None:
            return None
        request_id = row[0]
        now = time.time()
        conn.execute("UPDATE recovery_requests SET state = ?, worker = ?, updated = ?, "
                     "started = COALESCE(started, ?) WHERE request_id = ?",
                     (RUNNING, worker, now, now, request_id))
    return request(store, request_id)


#: the most requests one claim takes (:func:`claim_batch`): the files of one OST failure are
#: recovered together, a larger failure's by several workers at once
BATCH_REQUESTS = 32


def claim_batch(store: StateStore, worker: str, *, running_per_uid: int | None = None,
                limit: int = BATCH_REQUESTS) -> list:
    """Take the next queued request (:func:`claim_next`: users served in turn) and, in the same
    transaction, that user's other queued requests, oldest first: at most ``limit`` in all, and
    for a user other than root no more than ``running_per_uid`` running at once. The files of
    an OST failure, which the periodic check queues together, are so claimed in one
    transaction and recovered as one batch. The rows claimed ([] when none is queued)."""
    if not store.query("SELECT 1 FROM recovery_requests WHERE state = ? LIMIT 1", (QUEUED,)):
        return []  # as claim_next: no write lock for a worker with nothing to take
    with store.transaction() as conn:
        first = claim_next(store, worker, running_per_uid=running_per_uid)  # joins this one
        if first is None:
            return []
        uid = first["requested_by"]
        take = limit - 1
        if running_per_uid is not None and uid != 0:
            running = conn.execute("SELECT COUNT(*) FROM recovery_requests WHERE state = ? AND "
                                   "requested_by = ?", (RUNNING, uid)).fetchone()[0]
            take = min(take, running_per_uid - running)
        ids = [r[0] for r in conn.execute(
            "SELECT request_id FROM recovery_requests WHERE state = ? AND requested_by = ? "
            "ORDER BY request_id LIMIT ?", (QUEUED, uid, max(0, take))).fetchall()]
        now = time.time()
        conn.executemany("UPDATE recovery_requests SET state = ?, worker = ?, updated = ?, "
                         "started = COALESCE(started, ?) WHERE request_id = ?",
                         [(RUNNING, worker, now, now, request_id) for request_id in ids])
        more = {r["request_id"]: r for r in conn.execute(
            f"SELECT * FROM recovery_requests WHERE request_id IN ({','.join('?' * len(ids))})",
            ids).fetchall()} if ids else {}
    return [first] + [more[request_id] for request_id in ids]


def claim(store: StateStore, request_id: int, worker: str) -> bool:
    """Take one given request if it is queued (inline recovery by the CLI or the hook)."""
    with store.transaction() as conn:
        now = time.time()
        cursor = conn.execute("UPDATE recovery_requests SET state = ?, worker = ?, updated = ?, "
                              "started = COALESCE(started, ?) WHERE request_id = ? AND state = ?",
                              (RUNNING, worker, now, now, request_id, QUEUED))
        return cursor.rowcount == 1


def set_rebuild(store: StateStore, request_id: int, rebuild_id: str | None) -> None:
    with store.transaction() as conn:
        conn.execute("UPDATE recovery_requests SET rebuild_id = ?, updated = ? "
                     "WHERE request_id = ?", (rebuild_id, time.time(), request_id))


def set_rebuilds(store: StateStore, rebuilds: list[tuple[int, str | None, int, int]]) -> None:
    """Name the rebuild of each request with the bytes it must patch and those its journal
    holds already (``(request_id, rebuild_id, total, done)``; a None rebuild is forgotten): the
    rebuilds of a batch, begun together, recorded in one transaction. The figure done never
    goes back for the same total (as :func:`record_progress`)."""
    now = time.time()
    with store.transaction() as conn:
        conn.executemany("UPDATE recovery_requests SET rebuild_id = ?, updated = ?, "
                         "bytes_done = CASE WHEN bytes_total = ? THEN "
                         "MAX(COALESCE(bytes_done, 0), ?) ELSE ? END, bytes_total = ?, "
                         "progress_at = ? WHERE request_id = ?",
                         [(rebuild_id, now, total, done, done, total, now, request_id)
                          for request_id, rebuild_id, total, done in rebuilds if rebuild_id])
        conn.executemany("UPDATE recovery_requests SET rebuild_id = NULL, updated = ? "
                         "WHERE request_id = ?",
                         [(now, request_id) for request_id, rebuild_id, _, _ in rebuilds
                          if not rebuild_id])


def finish(store: StateStore, request_id: int, *, ok: bool, path: str, file_state: str,
           reason: str = "", outcome: dict | None = None, patched_bytes: int = 0,
           seconds: float = 0.0) -> None:
    """Close a request and set its file's state, in one transaction."""
    finish_many(store, [Closing(request_id, ok=ok, path=path, file_state=file_state,
                                reason=reason, outcome=outcome, patched_bytes=patched_bytes,
                                seconds=seconds)])


@dataclass(frozen=True)
class Closing:
    """How a request ends (:func:`finish_many`)."""

    request_id: int
    ok: bool
    path: str
    file_state: str
    reason: str = ""
    outcome: dict | None = None
    patched_bytes: int = 0
    seconds: float = 0.0


def finish_many(store: StateStore, closings: list[Closing]) -> None:
    """Close requests and set their files' states, all in one transaction (a batch's)."""
    now = time.time()
    with store.transaction() as conn:
        for end in closings:
            # a patched request did all it had to (a file found whole had nothing to patch)
            conn.execute("UPDATE recovery_requests SET state = ?, reason = ?, outcome = ?, "
                         "rebuild_id = NULL, updated = ?, finished = ?, "
                         "bytes_done = CASE WHEN ? THEN COALESCE(bytes_total, bytes_done) "
                         "ELSE bytes_done END WHERE request_id = ?",
                         (DONE if end.ok else FAILED, end.reason, json.dumps(end.outcome or {}),
                          now, now, end.ok, end.request_id))
            conn.execute("INSERT INTO recovery_files(path, state, reason, patched_bytes, "
                         "seconds, updated) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(path) DO "
                         "UPDATE SET state = excluded.state, reason = excluded.reason, "
                         "patched_bytes = excluded.patched_bytes, seconds = excluded.seconds, "
                         "updated = excluded.updated",
                         (end.path, end.file_state, end.reason, end.patched_bytes,
                          end.seconds, now))


def record_progress(store: StateStore, rebuild_id: str, done: int, total: int) -> None:
    """The running request patching ``rebuild_id`` has ``done`` of its ``total`` bytes in place.

    The figure never goes back for the same rebuild: bytes written but not yet in the rebuild's
    journal when recoveryd was killed are fetched again by the resumed rebuild, whose count
    starts from what the journal holds; until it passes the old figure, that one stays."""
    with store.transaction() as conn:
        conn.execute("UPDATE recovery_requests SET bytes_done = CASE WHEN bytes_total = ? "
                     "THEN MAX(COALESCE(bytes_done, 0), ?) ELSE ? END, bytes_total = ?, "
                     "progress_at = ? WHERE rebuild_id = ? AND state = ?",
                     (total, done, done, total, time.time(), rebuild_id, RUNNING))


class ProgressRecorder:
    """The progress of rebuilds (one, or a batch's), written for their requests at most once
    every ``interval`` seconds: every rebuild's figure in one transaction.

    Called by the threads that write the patches, after each group of writes: a write to the
    state database that fails (a lock held too long) is logged and skipped, never allowed to
    fail the patch; the next one, or the request's end, records the figure.
    """

    def __init__(self, store: StateStore, rebuild_id: str | None = None, total: int = 0, *,
                 interval: float = PROGRESS_INTERVAL):
        self.store = store
        self.interval = interval
        self._lock = threading.Lock()
        self._figures: dict[str, tuple[int, int]] = {}  # rebuild: (done, total)
        self._last = float("-inf")  # monotonic time of the last write
        if rebuild_id is not None:
            self.track(rebuild_id, total)

    def track(self, rebuild_id: str, total: int, done: int = 0) -> None:
        """Count ``rebuild_id`` too (``done``: what its journal holds already); its figure is
        written with the next write."""
        with self._lock:
            self._figures[rebuild_id] = (done, total)

    def update(self, done: int, *, force: bool = False, rebuild_id: str | None = None) -> None:
        """``rebuild_id`` (the only one, if not given) has ``done`` bytes in place."""
        now = time.monotonic()
        with self._lock:
            key = rebuild_id if rebuild_id is not None else next(iter(self._figures))
            self._figures[key] = (done, self._figures[key][1])
            if not force and now - self._last < self.interval:
                return
            self._last = now
            figures = sorted(self._figures.items())
        try:
            with self.store.transaction():  # the writes below join it: one for all
                for each, (figure, total) in figures:
                    record_progress(self.store, each, figure, total)
        except StateError as err:
            log.warning("rebuild %s: progress not recorded: %s",
                        ", ".join(each for each, _ in figures), err)


def request_view(row, now: float | None = None) -> dict:
    """What ``recovery list`` shows of a request: its record with the times it waited and ran
    (until now for an unfinished one) and its progress as a fraction (None: not known yet)."""
    view = {key: row[key] for key in row.keys() if key not in ("outcome", "worker")}
    now = time.time() if now is None else now
    started, finished = view.get("started"), view.get("finished")
    if started is None and finished is None and view["state"] not in ACTIVE:
        # an ended request whose times the answer does not carry (recoveryd's "list")
        view["wait_seconds"] = None
    else:
        view["wait_seconds"] = (started if started is not None else (finished or now)) \
            - view["created"]
    view["run_seconds"] = None if started is None else (finished or now) - started
    total = view.get("bytes_total")
    view["progress"] = (min(1.0, (view.get("bytes_done") or 0) / total) if total else
                        (1.0 if total == 0 else None))
    return view


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


def prune(store: StateStore, *, before: float, kept_per_uid: int, limit: int) -> int:
    """Remove finished requests that ended before ``before`` and each user's oldest beyond
    their newest ``kept_per_uid`` finished ones, at most ``limit`` rows in all (the rest go at
    the next call), and the ``whole`` file states no request names any more; the requests
    removed. Active requests and ``lost`` file states (the periodic check's reason to leave a
    file alone) stay."""
    removed = 0
    with store.transaction() as conn:
        removed += conn.execute(
            "DELETE FROM recovery_requests WHERE request_id IN (SELECT request_id FROM "
            "recovery_requests WHERE state IN (?, ?) AND COALESCE(finished, updated) < ? "
            "ORDER BY request_id LIMIT ?)", (DONE, FAILED, before, limit)).rowcount
        crowded = conn.execute(
            "SELECT requested_by FROM recovery_requests WHERE state IN (?, ?) "
            "GROUP BY requested_by HAVING COUNT(*) > ?", (DONE, FAILED, kept_per_uid)).fetchall()
        for (uid,) in crowded:
            if removed >= limit:
                break
            removed += conn.execute(
                "DELETE FROM recovery_requests WHERE request_id IN (SELECT request_id FROM "
                "recovery_requests WHERE state IN (?, ?) AND requested_by = ? AND request_id "
                "<= (SELECT request_id FROM recovery_requests WHERE state IN (?, ?) AND "
                "requested_by = ? ORDER BY request_id DESC LIMIT 1 OFFSET ?) "
                "ORDER BY request_id LIMIT ?)",
                (DONE, FAILED, uid, DONE, FAILED, uid, kept_per_uid, limit - removed)).rowcount
        conn.execute("DELETE FROM recovery_files WHERE rowid IN (SELECT f.rowid FROM "
                     "recovery_files f WHERE f.state = ? AND NOT EXISTS (SELECT 1 FROM "
                     "recovery_requests r WHERE r.path = f.path) LIMIT ?)", (WHOLE, limit))
    return removed


def request_counts(store: StateStore) -> list[tuple[str, int]]:
    """(state, requests) of every state a request is in: the metrics' backlog and history."""
    return [(row[0], row[1]) for row in store.query(
        "SELECT state, COUNT(*) FROM recovery_requests GROUP BY state")]
