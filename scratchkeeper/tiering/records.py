"""tierd's tables: how far it read the mount's read records, its counters, the files it
knows and the moves it made (docs/tiering.rst, "State")."""

from __future__ import annotations

from ..state import StateStore

COMPONENT = "tiering"

MIGRATIONS = [
    """
    CREATE TABLE tier_read_log (
        name        TEXT PRIMARY KEY,
        offset      INTEGER NOT NULL
    );
    CREATE TABLE tier_counters (
        id          INTEGER PRIMARY KEY CHECK (id = 0),
        width       INTEGER NOT NULL,
        hashes      INTEGER NOT NULL,
        counts      BLOB NOT NULL,
        decayed_at  REAL NOT NULL
    );
    CREATE TABLE tier_files (
        path        TEXT PRIMARY KEY,
        object_id   INTEGER NOT NULL,
        uid         INTEGER NOT NULL,
        reads       INTEGER NOT NULL,
        bytes       INTEGER NOT NULL,
        last_read   REAL NOT NULL
    );
    CREATE TABLE tier_moves (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        path        TEXT NOT NULL,
        direction   TEXT NOT NULL,
        source      TEXT NOT NULL,
        target      TEXT NOT NULL,
        size        INTEGER NOT NULL,
        hotness     REAL NOT NULL,
        state       TEXT NOT NULL,
        mirror      INTEGER,
        reason      TEXT NOT NULL DEFAULT '',
        started     REAL NOT NULL,
        ended       REAL
    );
    CREATE INDEX tier_moves_by_state ON tier_moves(state);
    """,
]

STARTED, DONE, FAILED = "started", "done", "failed"


def open_tiering(store: StateStore) -> StateStore:
    store.ensure_schema(COMPONENT, MIGRATIONS)
    return store


def move_counts(store: StateStore) -> list[tuple[str, str, str, int, float]]:
    """(direction, target, state, moves, bytes) of the moves recorded, per group."""
    return [(row[0], row[1], row[2], row[3], row[4]) for row in store.query(
        "SELECT direction, target, state, COUNT(*), TOTAL(size) FROM tier_moves "
        "GROUP BY direction, target, state")]


def file_count(store: StateStore) -> int:
    """How many files tierd counts reads of."""
    return int(store.query("SELECT COUNT(*) FROM tier_files")[0][0])
