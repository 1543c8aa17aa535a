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
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Iterator, Sequence
from pathlib import Path

from .errors import StateError

log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 30_000
# how long opening waits to switch the journal mode before it gives up and keeps the old one
JOURNAL_SWITCH_TIMEOUT_MS = 1_000
JOURNAL_MODES = ("wal", "delete", "persist", "truncate")



def may_write(path: str | os.PathLike) -> bool:
    """Whether this process (its effective ids) can write the SQLite database ``path`` and the
    journal beside it; for a database not made yet, whether it could create it."""
    def allowed(target) -> bool:
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
    """

    def __init__(self, path: str | os.PathLike, *, journal: str = "wal", read_only: bool = False):
        if journal not in JOURNAL_MODES:
            raise ValueError(f"journal {journal!r}: expected one of {', '.join(JOURNAL_MODES)}")
        self.path = str(path)
        self.journal = journal
        self.read_only = read_only
        if read_only and self.path == ":memory:":
            raise ValueError("an in-memory database cannot be opened read-only")
        self._local = threading.local()
        self._lock = threading.Lock()
        self._checked = False

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
        conn = None
        try:
            if self.read_only:
                uri = "file:" + urllib.parse.quote(os.path.abspath(self.path)) + "?mode=ro"
                conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000,
                                       isolation_level=None, check_same_thread=False)
            else:
                conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000,
                                       isolation_level=None, check_same_thread=False)
            conn.row_factory = sqlite3.Row
            if not self.read_only:
                self._set_journal(conn)
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            with self._lock:
                if not self._checked:
                    verdict = conn.execute("PRAGMA quick_check").fetchone()[0]
                    if verdict != "ok":
                        raise StateError(f"{self.path}: integrity check failed: {verdict}")
                    if not self.read_only:
                        conn.execute("CREATE TABLE IF NOT EXISTS schema_version ("
                                     " component TEXT PRIMARY KEY, version INTEGER NOT NULL)")
                    self._checked = True
        except (sqlite3.DatabaseError, StateError) as err:
            if conn is not None:
                conn.close()
            if isinstance(err, StateError):
                raise
            how = " read-only" if self.read_only else ""
            raise StateError(f"{self.path}: cannot open state database{how}: {err}") from err
        return conn

    def _set_journal(self, conn: sqlite3.Connection) -> None:
        """Switch to the requested journal mode; keep the current one if it cannot be switched.

        Leaving WAL needs the database to itself: while another connection holds it, the switch
        fails, the old mode stays and a later open switches it.
        """
        conn.execute(f"PRAGMA busy_timeout={JOURNAL_SWITCH_TIMEOUT_MS}")
        try:
            mode = conn.execute(f"PRAGMA journal_mode={self.journal.upper()}").fetchone()[0]
        except sqlite3.OperationalError as err:
            log.debug("state %s: journal mode stays as it is, not %s: %s", self.path,
                      self.journal, err)
            return
        if str(mode).lower() != self.journal:
            log.debug("state %s: journal mode stays %s, not %s (another connection holds the "
                      "database)", self.path, mode, self.journal)

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # -- transactions ------------------------------------------------------------------------
    @contextlib.contextmanager
    def transaction(self, *, immediate: bool = True) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``): committed on exit, rolled back on error."""
        if self.read_only:
            raise StateError(f"{self.path}: opened read-only")
        conn = self.connection()
        if conn.in_transaction:
            # nested use joins the outer transaction: the outer block commits or rolls back
            yield conn
            return
        try:
            conn.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
        except sqlite3.OperationalError as err:
            raise StateError(f"{self.path}: cannot start a transaction: {err}") from err
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        else:
            conn.execute("COMMIT")

    def query(self, sql: str, params: Sequence | dict = ()) -> list[sqlite3.Row]:
        """Run a read-only statement and return all rows."""
        try:
            return self.connection().execute(sql, params).fetchall()
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
