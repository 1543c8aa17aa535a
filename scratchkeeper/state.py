"""The SQLite state store shared by the planner and the daemons.

WAL mode with ``synchronous=NORMAL``, an integrity check on open, and a versioned schema per
component (``planner``, ``recovery``, ``replication``...): each component owns an ordered list
of migrations and :meth:`StateStore.ensure_schema` applies the missing ones in one transaction.
Every state change goes through :meth:`StateStore.transaction`, so a kill -9 at any line leaves
either the old state or the new one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from .errors import StateError

log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 30_000


class StateStore:
    """One connection per thread to the state database at ``path``."""

    def __init__(self, path: str | os.PathLike):
        self.path = str(path)
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
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                                   check_same_thread=False)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            with self._lock:
                if not self._checked:
                    verdict = conn.execute("PRAGMA quick_check").fetchone()[0]
                    if verdict != "ok":
                        raise StateError(f"{self.path}: integrity check failed: {verdict}")
                    conn.execute("CREATE TABLE IF NOT EXISTS schema_version ("
                                 " component TEXT PRIMARY KEY, version INTEGER NOT NULL)")
                    self._checked = True
        except sqlite3.DatabaseError as err:
            raise StateError(f"{self.path}: cannot open state database: {err}") from err
        return conn

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # -- transactions ------------------------------------------------------------------------
    @contextlib.contextmanager
    def transaction(self, *, immediate: bool = True) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``): committed on exit, rolled back on error."""
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
