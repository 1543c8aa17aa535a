"""The SQLite state store: WAL, versioned migrations per component, transactions."""

import sqlite3
import subprocess
import sys

import pytest

from scratchkeeper.errors import StateError
from scratchkeeper.state import StateStore

V1 = "CREATE TABLE items (name TEXT PRIMARY KEY);"
V2 = "ALTER TABLE items ADD COLUMN size INTEGER NOT NULL DEFAULT 0;\nCREATE INDEX items_size ON items(size);"


def test_wal_and_migrations(tmp_path):
    store = StateStore(tmp_path / "s.db")
    store.ensure_schema("demo", [V1])
    assert store.query("PRAGMA journal_mode")[0][0] == "wal"
    with store.transaction() as conn:
        conn.execute("INSERT INTO items(name) VALUES ('a')")
    store.ensure_schema("demo", [V1, V2])
    assert store.schema_version("demo") == 2
    assert store.query("SELECT name, size FROM items")[0]["size"] == 0
    store.ensure_schema("other", [V1.replace("items", "others")])
    assert store.schema_version("demo") == 2 and store.schema_version("other") == 1


def test_newer_schema_is_refused(tmp_path):
    store = StateStore(tmp_path / "s.db")
    store.ensure_schema("demo", [V1, V2])
    with pytest.raises(StateError, match="newer than this scratchkeeper knows"):
        StateStore(tmp_path / "s.db").ensure_schema("demo", [V1])


def test_failed_migration_leaves_the_old_version(tmp_path):
    store = StateStore(tmp_path / "s.db")
    store.ensure_schema("demo", [V1])
    with pytest.raises(sqlite3.OperationalError):
        store.ensure_schema("demo", [V1, "ALTER TABLE items ADD COLUMN x INT;\nSELECT nonsense FROM nowhere;"])
    assert store.schema_version("demo") == 1
    assert [r[1] for r in store.query("PRAGMA table_info(items)")] == ["name"]


def test_transaction_rolls_back_on_error(tmp_path):
    store = StateStore(tmp_path / "s.db")
    store.ensure_schema("demo", [V1])
    with pytest.raises(RuntimeError):
        with store.transaction() as conn:
            conn.execute("INSERT INTO items(name) VALUES ('a')")
            raise RuntimeError("boom")
    assert store.query("SELECT count(*) FROM items")[0][0] == 0


def test_kill_9_inside_a_transaction_loses_only_that_transaction(tmp_path):
    path = tmp_path / "s.db"
    StateStore(path).ensure_schema("demo", [V1])
    code = f"""
import os, signal
from scratchkeeper.state import StateStore
store = StateStore({str(path)!r})
with store.transaction() as conn:
    conn.execute("INSERT INTO items(name) VALUES ('committed')")
with store.transaction() as conn:
    conn.execute("INSERT INTO items(name) VALUES ('lost')")
    os.kill(os.getpid(), signal.SIGKILL)
"""
    result = subprocess.run([sys.executable, "-c", code])
    assert result.returncode == -9
    rows = [r["name"] for r in StateStore(path).query("SELECT name FROM items")]
    assert rows == ["committed"]


def test_corrupt_database_is_reported(tmp_path):
    path = tmp_path / "s.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StateError, match="cannot open state database"):
        StateStore(path).query("SELECT 1")
