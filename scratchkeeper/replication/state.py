"""The replication daemon's tables in the state store (component ``replication``).

``replicas``: one row per file with a replica made (or being made) by the daemon. The row is
written *before* the storage operation (state ``creating`` / ``removing``, with the mirror id
the storage is expected to give), so a daemon killed at any line finds on restart what it was
doing and finishes or undoes it (:mod:`.replicas` ``reconcile``).
``claims``: which job wants which file replicated, why (window/shortcut) and whether the claim is
still active. ``events``: job ends and file closes sent by scheduler hooks or other readers
(``scratchkeeper replicas job-ended``), consumed by the daemon. ``daemon_status``: the last
cycle's figures for ``scratchkeeper replicas``.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from ..state import StateStore
from .decisions import Claim, ClaimChange, ReplicaStatus

COMPONENT = "replication"

MIGRATIONS = [
    """
    CREATE TABLE replicas (
        path               TEXT PRIMARY KEY,
        state              TEXT NOT NULL,
        job_id             TEXT NOT NULL,
        reason             TEXT NOT NULL,
        mirror_id          INTEGER,
        expected_mirror_id INTEGER NOT NULL,
        primary_mirrors    TEXT NOT NULL,
        primary_osts       TEXT NOT NULL,
        osts               TEXT NOT NULL DEFAULT '[]',
        size               INTEGER NOT NULL,
        checksum           TEXT,
        token              TEXT NOT NULL,
        data_job_id        TEXT,
        attempts           INTEGER NOT NULL DEFAULT 0,
        error              TEXT NOT NULL DEFAULT '',
        retry_after        REAL,
        created            REAL NOT NULL,
        ready_at           REAL,
        updated            REAL NOT NULL
    );
    CREATE TABLE claims (
        job_id        TEXT NOT NULL,
        path          TEXT NOT NULL,
        active        INTEGER NOT NULL,
        reason        TEXT NOT NULL,
        position      INTEGER NOT NULL DEFAULT 0,
        released_why  TEXT NOT NULL DEFAULT '',
        missing_since REAL,
        created       REAL NOT NULL,
        updated       REAL NOT NULL,
        PRIMARY KEY (job_id, path)
    );
    CREATE INDEX claims_by_path ON claims(path);
    CREATE TABLE events (
        event_id  INTEGER PRIMARY KEY AUTOINCREMENT,
        kind      TEXT NOT NULL,
        job_id    TEXT NOT NULL DEFAULT '',
        path      TEXT NOT NULL DEFAULT '',
        received  REAL NOT NULL,
        source    TEXT NOT NULL DEFAULT ''
    );
    CREATE TABLE daemon_status (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    """,
]

JOB_ENDED, FILE_CLOSED = "job-ended", "file-closed"

# every write of a row sets ``updated``; a delete lowers the count, an insert raises the rowid
_CLAIMS_SIGNATURE = ("SELECT COUNT(*), MAX(updated), TOTAL(active), MAX(rowid), "
                     "TOTAL(LENGTH(released_why)) FROM claims")
_REPLICAS_SIGNATURE = ("SELECT COUNT(*), MAX(updated), TOTAL(LENGTH(state)), MAX(rowid) "
                       "FROM replicas")


@dataclass(frozen=True)
class ReplicaRow:
    """One row of ``replicas``."""

    path: str
    state: str
    job_id: str
    reason: str
    mirror_id: int | None
    expected_mirror_id: int
    primary_mirrors: tuple[int, ...]
    primary_osts: tuple[int, ...]
    osts: tuple[int, ...]
    size: int
    checksum: str | None
    token: str
    data_job_id: str | None
    attempts: int
    error: str
    retry_after: float | None
    created: float
    ready_at: float | None

    @classmethod
    def from_row(cls, row) -> ReplicaRow:
        return cls(row["path"], row["state"], row["job_id"], row["reason"], row["mirror_id"],
                   row["expected_mirror_id"], _ints(row["primary_mirrors"]),
                   _ints(row["primary_osts"]), _ints(row["osts"]),
                   row["size"], row["checksum"], row["token"], row["data_job_id"],
                   row["attempts"], row["error"], row["retry_after"], row["created"],
                   row["ready_at"])

    def status(self) -> ReplicaStatus:
        return ReplicaStatus(self.path, self.state, self.size)

    def to_dict(self) -> dict:
        return {"path": self.path, "state": self.state, "job_id": self.job_id,
                "reason": self.reason, "mirror_id": self.mirror_id,
                "primary_mirrors": list(self.primary_mirrors),
                "primary_osts": list(self.primary_osts), "osts": list(self.osts),
                "bytes": self.size, "data_job_id": self.data_job_id, "attempts": self.attempts,
                "error": self.error, "created": self.created, "ready_at": self.ready_at}


class ReplicationState:
    """Typed access to the replication tables; every change is one transaction."""

    def __init__(self, store: StateStore):
        self.store = store
        store.ensure_schema(COMPONENT, MIGRATIONS)
        # what the last read gave, with the table's signature then: a read whose signature is
        # unchanged returns it (the daemon reads 13,000 claims and replicas every cycle)
        self._mirror_lock = threading.Lock()
        self._claims: dict[tuple[str, str], Claim] | None = None
        self._claims_seen: tuple | None = None
        self._statuses: dict[str, ReplicaStatus] | None = None
        self._statuses_seen: tuple | None = None
        self._status_written: dict[str, object] = {}

    def forget_kept(self) -> None:
        """Read the tables whole at the next call and write every status key again."""
        with self._mirror_lock:
            self._claims = self._claims_seen = self._statuses = self._statuses_seen = None
            self._status_written = {}

    # -- replicas ------------------------------------------------------------------------------
    def replicas(self) -> dict[str, ReplicaRow]:
        return {row["path"]: ReplicaRow.from_row(row)
                for row in self.store.query("SELECT * FROM replicas ORDER BY path")}

    def statuses(self) -> dict[str, ReplicaStatus]:
        """State and size of every replica: what a decision cycle needs, cheaply.

        Read again only when the table's signature (rows, last update, states) changed since
        the previous read, by any connection or process.
        """
        signature = tuple(self.store.query(_REPLICAS_SIGNATURE)[0])
        with self._mirror_lock:
            if self._statuses is None or signature != self._statuses_seen:
                self._statuses = {row[0]: ReplicaStatus(row[0], row[1], row[2])
                                  for row in self.store.query("SELECT path, state, size "
                                                              "FROM replicas ORDER BY rowid")}
                self._statuses_seen = signature
            return dict(self._statuses)

    def replicas_in(self, *states: str) -> dict[str, ReplicaRow]:
        marks = ",".join("?" * len(states))
        return {row["path"]: ReplicaRow.from_row(row) for row in self.store.query(
            f"SELECT * FROM replicas WHERE state IN ({marks}) ORDER BY path", states)}

    def replica(self, path: str) -> ReplicaRow | None:
        rows = self.store.query("SELECT * FROM replicas WHERE path = ?", (path,))
        return ReplicaRow.from_row(rows[0]) if rows else None

    def begin_create(self, path: str, *, job_id: str, reason: str, expected_mirror_id: int,
                     primary_mirrors: Iterable[int], primary_osts: Iterable[int], size: int,
                     checksum: str | None, token: str) -> int | None:
        """Record the intent to make a replica; returns the attempt number.

        None when a row other than a failed one already exists for the file (no double replica);
        a failed row is taken over by the new attempt.
        """
        now = time.time()
        with self.store.transaction() as conn:
            row = conn.execute("SELECT state, attempts FROM replicas WHERE path = ?",
                               (path,)).fetchone()
            if row is not None and row["state"] != "failed":
                return None
            attempts = (row["attempts"] if row is not None else 0) + 1
            conn.execute("DELETE FROM replicas WHERE path = ?", (path,))
            conn.execute(
                "INSERT INTO replicas(path, state, job_id, reason, expected_mirror_id,"
                " primary_mirrors, primary_osts, size, checksum, token, attempts, created, updated)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (path, "creating", job_id, reason, expected_mirror_id,
                 json.dumps(sorted(primary_mirrors)), json.dumps(sorted(primary_osts)), size,
                 checksum, token, attempts, now, now))
        return attempts

    def record_refusal(self, path: str, *, job_id: str, reason: str, error: str,
                       attempts: int) -> None:
        """A replica that cannot be made (not the job owner's file, no such file...): failed."""
        now = time.time()
        with self.store.transaction() as conn:
            row = conn.execute("SELECT state FROM replicas WHERE path = ?", (path,)).fetchone()
            if row is not None and row["state"] != "failed":
                return
            conn.execute("DELETE FROM replicas WHERE path = ?", (path,))
            conn.execute(
                "INSERT INTO replicas(path, state, job_id, reason, expected_mirror_id,"
                " primary_mirrors, primary_osts, size, token, attempts, error, created, updated)"
                " VALUES (?, 'failed', ?, ?, 0, '[]', '[]', 0, ?, ?, ?, ?, ?)",
                (path, job_id, reason, uuid.uuid4().hex, attempts, error[:500], now, now))

    def set_data_job(self, path: str, token: str, data_job_id: str) -> None:
        with self.store.transaction() as conn:
            conn.execute("UPDATE replicas SET data_job_id = ?, updated = ? WHERE path = ? AND "
                         "token = ?", (data_job_id, time.time(), path, token))

    def mark_ready(self, path: str, token: str, mirror_id: int, osts: Iterable[int]) -> None:
        now = time.time()
        with self.store.transaction() as conn:
            conn.execute("UPDATE replicas SET state = 'ready', mirror_id = ?, osts = ?, error = '',"
                         " ready_at = ?, updated = ? WHERE path = ? AND token = ?",
                         (mirror_id, json.dumps(sorted(osts)), now, now, path, token))

    def mark_failed(self, path: str, token: str, error: str, retry_after: float) -> None:
        with self.store.transaction() as conn:
            conn.execute("UPDATE replicas SET state = 'failed', mirror_id = NULL, error = ?,"
                         " retry_after = ?, updated = ? WHERE path = ? AND token = ?",
                         (error[:500], retry_after, time.time(), path, token))

    def begin_remove(self, path: str, token: str) -> None:
        with self.store.transaction() as conn:
            conn.execute("UPDATE replicas SET state = 'removing', updated = ? WHERE path = ? "
                         "AND token = ?", (time.time(), path, token))

    def cancel_remove(self, path: str, token: str) -> None:
        """A removal that must wait (the primary is degraded): the replica is ready again."""
        with self.store.transaction() as conn:
            conn.execute("UPDATE replicas SET state = 'ready', updated = ? WHERE path = ? AND "
                         "token = ? AND state = 'removing'", (time.time(), path, token))

    def forget_replica(self, path: str, token: str) -> None:
        """The replica is gone from the store (or never got there): drop its row."""
        with self.store.transaction() as conn:
            conn.execute("DELETE FROM replicas WHERE path = ? AND token = ?", (path, token))

    # -- claims --------------------------------------------------------------------------------
    def claims(self) -> list[Claim]:
        """Every claim, oldest first (row order).

        Claims change only through :meth:`apply_claims`, which keeps the list it returns up to
        date; the table is read again when its signature differs from the one this object saw
        last (another writer).
        """
        signature = tuple(self.store.query(_CLAIMS_SIGNATURE)[0])
        with self._mirror_lock:
            if self._claims is None or signature != self._claims_seen:
                self._claims = {(row[0], row[1]): Claim(row[0], row[1], bool(row[2]), row[3],
                                                        row[4])
                                for row in self.store.query(
                                    "SELECT job_id, path, active, reason, released_why "
                                    "FROM claims ORDER BY rowid")}
                self._claims_seen = signature
            return list(self._claims.values())

    def claimed_paths(self) -> set[str]:
        """Files at least one active claim wants replicated."""
        return {row["path"] for row in self.store.query("SELECT DISTINCT path FROM claims "
                                                        "WHERE active = 1")}

    def claim_rows(self):
        return self.store.query("SELECT * FROM claims ORDER BY job_id, path")

    def apply_claims(self, claim: Iterable[ClaimChange], release: Iterable[ClaimChange],
                     forget: Iterable[ClaimChange]) -> None:
        """New and renewed claims, releases and forgotten claims of one cycle: one transaction."""
        claim, release, forget = list(claim), list(release), list(forget)
        if not (claim or release or forget):
            return
        now = time.time()
        with self.store.transaction() as conn:
            conn.executemany(
                "INSERT INTO claims(job_id, path, active, reason, position, created, updated)"
                " VALUES (?, ?, 1, ?, ?, ?, ?) ON CONFLICT(job_id, path) DO UPDATE SET active = 1,"
                " reason = excluded.reason, position = excluded.position, released_why = '',"
                " updated = excluded.updated",
                [(c.job_id, c.path, c.reason, c.position, now, now) for c in claim])
            conn.executemany("UPDATE claims SET active = 0, released_why = ?, updated = ? "
                             "WHERE job_id = ? AND path = ?",
                             [(c.why, now, c.job_id, c.path) for c in release])
            conn.executemany("DELETE FROM claims WHERE job_id = ? AND path = ?",
                             [(c.job_id, c.path) for c in forget])
            signature = tuple(conn.execute(_CLAIMS_SIGNATURE).fetchone())
            with self._mirror_lock:
                known = self._claims if self._claims_seen is not None else None
                mirror = dict(known) if known is not None else None
        if mirror is None:
            return
        # the same changes in memory, in the same order (an upsert keeps its row's place)
        for change in claim:
            mirror[(change.job_id, change.path)] = Claim(change.job_id, change.path, True,
                                                         change.reason, "")
        for change in release:
            key = (change.job_id, change.path)
            if key in mirror:
                mirror[key] = Claim(change.job_id, change.path, False, mirror[key].reason,
                                    change.why)
        for change in forget:
            mirror.pop((change.job_id, change.path), None)
        with self._mirror_lock:
            if self._claims is known:
                self._claims, self._claims_seen = mirror, signature

    def mark_missing(self, job_ids: Iterable[str], now: float) -> dict[str, float]:
        """Note when each job was first found unknown to queue and accounting; return the times."""
        ids = list(job_ids)
        with self.store.transaction() as conn:
            conn.executemany("UPDATE claims SET missing_since = ? WHERE job_id = ? AND "
                             "missing_since IS NULL", [(now, j) for j in ids])
        found: dict[str, float] = {}
        for job_id in ids:
            rows = self.store.query("SELECT MIN(missing_since) AS since FROM claims "
                                    "WHERE job_id = ?", (job_id,))
            if rows and rows[0]["since"] is not None:
                found[job_id] = rows[0]["since"]
        return found

    def clear_missing(self, job_ids: Iterable[str]) -> None:
        with self.store.transaction() as conn:
            conn.executemany("UPDATE claims SET missing_since = NULL WHERE job_id = ?",
                             [(j,) for j in job_ids])

    # -- events --------------------------------------------------------------------------------
    def add_event(self, kind: str, *, job_id: str = "", path: str = "", source: str = "") -> int:
        with self.store.transaction() as conn:
            cursor = conn.execute("INSERT INTO events(kind, job_id, path, received, source) "
                                  "VALUES (?, ?, ?, ?, ?)",
                                  (kind, job_id, path, time.time(), source))
            return int(cursor.lastrowid)

    def pending_events(self) -> list:
        return self.store.query("SELECT * FROM events ORDER BY event_id")

    def has_events(self) -> bool:
        return bool(self.store.query("SELECT 1 FROM events LIMIT 1"))

    def drop_events(self, up_to: int) -> None:
        with self.store.transaction() as conn:
            conn.execute("DELETE FROM events WHERE event_id <= ?", (up_to,))

    # -- daemon status -------------------------------------------------------------------------
    def set_status(self, values: dict) -> None:
        """Write the keys whose value differs from what this object wrote last."""
        changed = {k: v for k, v in values.items()
                   if k not in self._status_written or self._status_written[k] != v}
        if not changed:
            return
        with self.store.transaction() as conn:
            conn.executemany("INSERT INTO daemon_status(key, value) VALUES (?, ?) ON CONFLICT(key)"
                             " DO UPDATE SET value = excluded.value",
                             [(k, json.dumps(v)) for k, v in changed.items()])
        self._status_written.update(changed)

    def status(self) -> dict:
        return daemon_status(self.store)


def _ints(text: str) -> tuple[int, ...]:
    """A JSON list of integers as written by this module (``[1, 2]``), parsed cheaply."""
    inner = text.strip()[1:-1]
    return tuple(int(part) for part in inner.split(",")) if inner.strip() else ()


# -- what the metrics read (plain values, without making the tables: see ReplicationState) ------
def replica_counts(store: StateStore) -> list[tuple[str, int, float]]:
    """(state, replicas, bytes of the replicated files) per replica state."""
    return [(row[0], row[1], row[2]) for row in store.query(
        "SELECT state, COUNT(*), TOTAL(size) FROM replicas GROUP BY state")]


def active_claim_count(store: StateStore) -> int:
    """How many (job, input) pairs hold a replica now."""
    return int(store.query("SELECT COUNT(*) FROM claims WHERE active = 1")[0][0])


def daemon_status(store: StateStore) -> dict:
    """What replicad's last cycle wrote (``ReplicationState.set_status``), key by key."""
    return {row["key"]: json.loads(row["value"])
            for row in store.query("SELECT key, value FROM daemon_status")}
