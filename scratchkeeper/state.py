"""The SQLite state store shared by the planner and the daemons.

WAL mode (or a rollback journal, see ``journal``) with ``synchronous=NORMAL``, an integrity
check on open, and a versioned schema per component (``planner``, ``recovery``,
``replication``...): each component owns an ordered list of migrations and
:meth:`StateStore.ensure_schema` applies the missing ones in one transaction. Every state change
goes through :meth:`StateStore.transaction`, so a kill -9 at any line leaves either the old
state or the new one.

A database in a rollback journal mode can be read by a process that may not write it nor its
directory (WAL readers must create ``-shm``/``-wal`` files): such a process opens it with
``read_only=True``, which changes nothing on disk.

Locks: many processes (every data job's commit, the daemons) open and write one database at
once. Whatever waits for a lock (opening with its journal mode switch and integrity check,
``BEGIN IMMEDIATE``, ``COMMIT``, a read) waits at most ``busy_timeout`` in SQLite's own busy
handler, then tries again after a pause that doubles (with jitter, so waiters do not retry in
step) until ``lock_wait`` seconds have passed; only then :class:`DatabaseBusy` is raised. A
``COMMIT`` that cannot get its lock is retried; one that never does is rolled back, never left
open on the connection.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO, TypeVar

from .errors import StateError

log = logging.getLogger(__name__)

#: one wait in SQLite's busy handler before this module's own retry takes over
BUSY_TIMEOUT_MS = 2_000
#: how long an open, a transaction or a read waits for a lock in all before DatabaseBusy
LOCK_WAIT = 120.0
#: the first pause between retries (doubled each time, jittered) and the longest one
RETRY_PAUSE = 0.02
RETRY_PAUSE_MAX = 1.0
# how long opening waits to leave WAL before it keeps WAL (another connection holds it open)
JOURNAL_SWITCH_TIMEOUT_MS = 1_000
JOURNAL_MODES = ("wal", "delete", "persist", "truncate")
#: ``PRAGMA quick_check`` reads the whole database: a process that may write runs it when the
#: last check on record (table ``integrity_checks``) is older than this, not at every open
#: (a ``scratchkeeper submit`` would pay for the size of every chain ever recorded).
INTEGRITY_INTERVAL = 3600.0

T = TypeVar("T")


class DatabaseBusy(StateError):
    """A lock of the state database was still held by others after ``lock_wait`` seconds."""


def is_busy(err: BaseException) -> bool:
    """Whether a SQLite error means "another connection holds the lock" (worth waiting for)."""
    if not isinstance(err, sqlite3.OperationalError):
        return False
    code = getattr(err, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    text = str(err)
    return "database is locked" in text or "database table is locked" in text


def _is_full(err: BaseException) -> bool:
    return isinstance(err, sqlite3.OperationalError) and \
        getattr(err, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_FULL


def retry_busy(action: Callable[[], T], what: str, *, wait: float,
               busy: Callable[[BaseException], bool] = is_busy) -> T:
    """``action()``, again after a growing, jittered pause while it fails with an error
    ``busy(err)`` calls a lock held by others, for at most ``wait`` seconds in all; then the
    last error is raised as :class:`DatabaseBusy` (``what`` names the operation)."""
    deadline = time.monotonic() + wait
    pause, tries = RETRY_PAUSE, 0
    while True:
        tries += 1
        try:
            return action()
        except Exception as err:
            if not busy(err):
                raise
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DatabaseBusy(f"{what}: still locked by another process after {tries} "
                                   f"tries in {wait:g}s: {err}") from err
            log.debug("%s: locked (%s), try %d again in %.2fs", what, err, tries + 1, pause)
            time.sleep(min(remaining, pause * random.uniform(0.5, 1.5)))
            pause = min(pause * 2, RETRY_PAUSE_MAX)


def may_write(path: str | os.PathLike[str]) -> bool:
    """Whether this process (its effective ids) can write the SQLite database ``path`` and the
    journal beside it; for a database not made yet, whether it could create it."""
    def allowed(target: str | os.PathLike[str]) -> bool:
        if os.access in os.supports_effective_ids:
            return os.access(target, os.W_OK, effective_ids=True)
        return os.access(target, os.W_OK)

    folder = os.path.dirname(os.path.abspath(path))
    if os.path.exists(path):
        return allowed(path) and allowed(folder)
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    return allowed(folder)


class StateStore:
    """One connection per thread to the state database at ``path``.

    ``journal``: ``"wal"`` (the default) or a rollback journal mode (``"delete"``,
    ``"persist"``, ``"truncate"``), set on every connection. A rollback journal lets processes
    that cannot write the database or its directory read it (with ``read_only=True``).

    ``read_only``: open ``file:<path>?mode=ro``; nothing is created or changed on disk (no
    directory, no ``schema_version`` table, no journal mode switch) and :meth:`transaction`
    raises :class:`StateError`.

    ``lock_wait``, ``busy_timeout_ms``: how long a lock is waited for in all, and in one go in
    SQLite's busy handler (the module's docstring); :data:`LOCK_WAIT` and
    :data:`BUSY_TIMEOUT_MS` by default.
    """

    def __init__(self, path: str | os.PathLike[str], *, journal: str = "wal", read_only: bool = False,
                 lock_wait: float | None = None, busy_timeout_ms: int | None = None):
        if journal not in JOURNAL_MODES:
            raise ValueError(f"journal {journal!r}: expected one of {', '.join(JOURNAL_MODES)}")
        self.path = str(path)
        self.journal = journal
        self.read_only = read_only
        self.lock_wait = LOCK_WAIT if lock_wait is None else lock_wait
        self.busy_timeout_ms = BUSY_TIMEOUT_MS if busy_timeout_ms is None else busy_timeout_ms
        if read_only and self.path == ":memory:":
            raise ValueError("an in-memory database cannot be opened read-only")
        self._local = threading.local()
        self._lock = threading.Lock()
        # this process's writers queue here, handed the database in turn, instead of polling
        # for SQLite's lock in its busy handler (sleeps of up to 100 ms each)
        self._writer = threading.Lock()
        self._checked = False

    def _retry(self, action: Callable[[], T], what: str) -> T:
        return retry_busy(action, f"{self.path}: {what}", wait=self.lock_wait)

    # -- connections -------------------------------------------------------------------------
    def connection(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._open()
            self._local.conn = conn
        return conn

    def _open(self) -> sqlite3.Connection:
        if self.path != ":memory:" and not self.read_only:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        how = " read-only" if self.read_only else ""
        try:
            # every step of opening reads or writes the file: all of it is retried while locked
            return self._retry(self._open_once, f"cannot open state database{how}")
        except DatabaseBusy:
            raise
        except sqlite3.DatabaseError as err:
            raise StateError(f"{self.path}: cannot open state database{how}: {err}") from err

    def _open_once(self) -> sqlite3.Connection:
        if self.read_only:
            uri = "file:" + urllib.parse.quote(os.path.abspath(self.path)) + "?mode=ro"
            conn = sqlite3.connect(uri, uri=True, timeout=self.busy_timeout_ms / 1000,
                                   isolation_level=None, check_same_thread=False)
        else:
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout_ms / 1000,
                                   isolation_level=None, check_same_thread=False)
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout={self.busy_timeout_ms}")
            if not self.read_only:
                self._set_journal(conn)
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            with self._lock:
                if not self._checked:
                    if self.read_only or self._integrity_due(conn):
                        verdict = conn.execute("PRAGMA quick_check").fetchone()[0]
                        if verdict != "ok":
                            raise StateError(f"{self.path}: integrity check failed: {verdict}")
                        if not self.read_only:
                            conn.execute("INSERT OR REPLACE INTO integrity_checks(id, checked) "
                                         "VALUES (1, ?)", (time.time(),))
                    if not self.read_only:
                        conn.execute("CREATE TABLE IF NOT EXISTS schema_version ("
                                     " component TEXT PRIMARY KEY, version INTEGER NOT NULL)")
                    self._checked = True
        except BaseException:
            conn.close()
            raise
        return conn

    @staticmethod
    def _integrity_due(conn: sqlite3.Connection) -> bool:
        """Whether no integrity check is on record within ``INTEGRITY_INTERVAL`` (one is
        recorded by whoever runs it; a clock set back makes it due)."""
        conn.execute("CREATE TABLE IF NOT EXISTS integrity_checks ("
                     " id INTEGER PRIMARY KEY CHECK (id = 1), checked REAL NOT NULL)")
        row = conn.execute("SELECT checked FROM integrity_checks WHERE id = 1").fetchone()
        return row is None or not 0 <= time.time() - row[0] < INTEGRITY_INTERVAL

    def _set_journal(self, conn: sqlite3.Connection) -> None:
        """Switch to the requested journal mode.

        Leaving WAL needs the database to itself: while another connection holds it open, the
        switch fails at once, WAL stays and a later open switches it. Any other switch (and
        setting a rollback mode, which is per connection) only waits for a writer's lock: a
        lock error there is raised, for the open to be retried, never taken as "keep the
        default mode" (a rollback journal the default ``delete`` mode removes is one a reader
        without write access cannot use).
        """
        current = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
        if current == "wal" and self.journal != "wal":
            conn.execute(f"PRAGMA busy_timeout={JOURNAL_SWITCH_TIMEOUT_MS}")
            try:
                mode = conn.execute(f"PRAGMA journal_mode={self.journal.upper()}").fetchone()[0]
            except sqlite3.OperationalError as err:
                if not is_busy(err):
                    raise
                mode = "wal"
            finally:
                conn.execute(f"PRAGMA busy_timeout={self.busy_timeout_ms}")
            if str(mode).lower() != self.journal:
                log.debug("state %s: journal mode stays %s, not %s (another connection holds "
                          "the database)", self.path, mode, self.journal)
            return
        mode = conn.execute(f"PRAGMA journal_mode={self.journal.upper()}").fetchone()[0]
        if str(mode).lower() != self.journal:
            raise StateError(f"{self.path}: journal mode is {mode}, cannot switch to "
                             f"{self.journal}")

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # -- transactions ------------------------------------------------------------------------
    @contextlib.contextmanager
    def transaction(self, *, immediate: bool = True) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``): committed on exit, rolled back on error.

        Waiting for the write lock and for ``COMMIT``'s lock is retried up to ``lock_wait``;
        a statement of the block that finds the database locked rolls the whole transaction
        back and raises :class:`DatabaseBusy` (the caller may run the block again).
        """
        if self.read_only:
            raise StateError(f"{self.path}: opened read-only")
        conn = self.connection()
        if conn.in_transaction:
            # nested use joins the outer transaction: the outer block commits or rolls back
            yield conn
            return
        begin = "BEGIN IMMEDIATE" if immediate else "BEGIN"
        # past lock_wait the database's own lock decides (a DatabaseBusy, as without this one)
        queued = self._writer.acquire(timeout=self.lock_wait)
        try:
            yield from self._transaction(conn, begin)
        finally:
            if queued:
                self._writer.release()

    def _transaction(self, conn: sqlite3.Connection, begin: str) -> Iterator[sqlite3.Connection]:
        try:
            self._retry(lambda: conn.execute(begin), "cannot start a transaction")
        except DatabaseBusy:
            raise
        except sqlite3.OperationalError as err:
            raise StateError(f"{self.path}: cannot start a transaction: {err}") from err
        try:
            yield conn
        except BaseException as err:
            self._rollback(conn)
            if is_busy(err):
                raise DatabaseBusy(f"{self.path}: locked inside a transaction, rolled back: "
                                   f"{err}") from err
            if _is_full(err):
                raise StateError(f"{self.path}: the file system is full, transaction rolled "
                                 f"back: {err}") from err
            raise
        try:
            self._retry(lambda: conn.execute("COMMIT"), "cannot commit")
        except BaseException as err:
            self._rollback(conn)
            if isinstance(err, sqlite3.DatabaseError):
                raise StateError(f"{self.path}: cannot commit, rolled back: {err}") from err
            raise

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            conn.execute("ROLLBACK")

    def query(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[sqlite3.Row]:
        """Run a read-only statement and return all rows (retried while the database is locked)."""
        conn = self.connection()
        try:
            if conn.in_transaction:
                return conn.execute(sql, params).fetchall()  # inside a transaction: no retry
            return self._retry(lambda: conn.execute(sql, params).fetchall(), "cannot read")
        except DatabaseBusy:
            raise
        except sqlite3.DatabaseError as err:
            raise StateError(f"{self.path}: {err}") from err

    # -- schema ------------------------------------------------------------------------------
    def schema_version(self, component: str) -> int:
        """The component's schema version; 0 when it has none (or the database no versions)."""
        if self.read_only and not self.query(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"):
            return 0  # a read-only open creates no table
        rows = self.query("SELECT version FROM schema_version WHERE component = ?", (component,))
        return rows[0]["version"] if rows else 0

    def ensure_schema(self, component: str, migrations: Sequence[str]) -> None:
        """Apply ``migrations[current:]`` of ``component`` (each one SQL script) in one transaction.

        A database whose version is newer than the code knows is refused rather than guessed at.
        """
        if self.schema_version(component) == len(migrations):
            return  # the usual case: a read, no write lock for every process that opens it
        with self.transaction() as conn:
            row = conn.execute("SELECT version FROM schema_version WHERE component = ?",
                               (component,)).fetchone()
            current = row["version"] if row else 0
            if current > len(migrations):
                raise StateError(f"{self.path}: {component} schema version {current} is newer than "
                                 f"this scratchkeeper knows ({len(migrations)})")
            for number in range(current, len(migrations)):
                log.info("state %s: migrating %s schema to version %d", self.path, component,
                         number + 1)
                for statement in _split_sql(migrations[number]):
                    conn.execute(statement)
            if current != len(migrations):
                conn.execute("INSERT INTO schema_version(component, version) VALUES (?, ?) "
                             "ON CONFLICT(component) DO UPDATE SET version = excluded.version",
                             (component, len(migrations)))


def daemon_lock(database: str, daemon: str) -> TextIO:
    """The open file holding the one lock ``daemon`` takes per state database
    (``DATABASE.DAEMON.lock``, with its pid in it); StateError when another holds it. Closing
    the file releases it (a killed process's lock goes with it)."""
    import fcntl

    path = f"{database}.{daemon}.lock"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    handle = open(path, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise StateError(f"{path}: another {daemon} holds the lock") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def _split_sql(script: str) -> list[str]:
    """Split a migration script into statements (``executescript`` would commit on its own)."""
    statements, buffer = [], ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            if buffer.strip():
                statements.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        statements.append(buffer.strip())
    return statements
