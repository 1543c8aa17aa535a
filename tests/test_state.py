"""The SQLite state store: WAL or rollback journal, read-only opening, versioned migrations per
component, transactions."""

import contextlib
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import scratchkeeper.state
from scratchkeeper.errors import StateError
from scratchkeeper.state import DatabaseBusy, StateStore
from user_runtime import plain_python, plain_user

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
        store.ensure_schema("demo", [V1, "ALTER TABLE items ADD COLUMN x INT;\n"
                                         "SELECT nonsense FROM nowhere;"])
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
from scratchkeeper.state import DatabaseBusy, StateStore
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


def test_the_integrity_check_runs_once_per_interval_not_at_every_open(tmp_path, monkeypatch):
    import sqlite3

    from scratchkeeper import state

    statements = []
    real = sqlite3.connect

    def traced(*args, **kwargs):
        conn = real(*args, **kwargs)
        conn.set_trace_callback(statements.append)
        return conn
    monkeypatch.setattr(state.sqlite3, "connect", traced)
    path = tmp_path / "s.db"
    checks = lambda: sum("quick_check" in s for s in statements)  # noqa: E731
    StateStore(path).query("SELECT 1")
    StateStore(path).query("SELECT 1")
    assert checks() == 1
    conn = real(path)
    conn.execute("UPDATE integrity_checks SET checked = checked - ?",
                 (state.INTEGRITY_INTERVAL + 1,))
    conn.commit()
    conn.close()
    StateStore(path).query("SELECT 1")  # the last check on record is too old: checked again
    assert checks() == 2
    StateStore(path, read_only=True).query("SELECT 1")  # a reader cannot record: it checks
    assert checks() == 3


# -- journal modes and read-only opening --------------------------------------------------------

@pytest.mark.parametrize("mode", ["delete", "persist", "truncate"])
def test_rollback_journal_modes(tmp_path, mode):
    path = tmp_path / "s.db"
    store = StateStore(path, journal=mode)
    store.ensure_schema("demo", [V1])
    with store.transaction() as conn:
        conn.execute("INSERT INTO items(name) VALUES ('a')")
    assert store.query("PRAGMA journal_mode")[0][0] == mode
    assert not (tmp_path / "s.db-wal").exists() and not (tmp_path / "s.db-shm").exists()
    store.close()
    assert [r["name"] for r in StateStore(path, journal=mode).query("SELECT name FROM items")] \
        == ["a"]


def test_unknown_journal_mode_is_refused(tmp_path):
    with pytest.raises(ValueError, match="journal 'memory'"):
        StateStore(tmp_path / "s.db", journal="memory")


def test_leaving_wal_while_another_connection_holds_the_database_keeps_working(tmp_path):
    path = tmp_path / "s.db"
    holder = StateStore(path)
    holder.ensure_schema("demo", [V1])
    with holder.transaction() as conn:
        conn.execute("INSERT INTO items(name) VALUES ('a')")
    started = time.monotonic()
    other = StateStore(path, journal="delete")
    assert [r["name"] for r in other.query("SELECT name FROM items")] == ["a"]
    with other.transaction() as conn:
        conn.execute("INSERT INTO items(name) VALUES ('b')")
    assert time.monotonic() - started < 10  # not the 30 s busy timeout
    assert other.query("PRAGMA journal_mode")[0][0] == "wal"  # could not switch: kept WAL
    holder.close()
    other.close()
    alone = StateStore(path, journal="delete")
    assert alone.query("PRAGMA journal_mode")[0][0] == "delete"
    assert not (tmp_path / "s.db-wal").exists()
    assert [r["name"] for r in alone.query("SELECT name FROM items ORDER BY name")] == ["a", "b"]


def _files(directory: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in directory.iterdir()}


def _written(path: Path, journal: str, name: str) -> None:
    """A closed database at ``path`` in ``journal`` mode holding one item ``name``."""
    writer = StateStore(path, journal=journal)
    writer.ensure_schema("demo", [V1])
    with writer.transaction() as conn:
        conn.execute("INSERT INTO items(name) VALUES (?)", (name,))
    writer.close()


def test_read_only_reads_and_changes_nothing(tmp_path):
    path = tmp_path / "s.db"
    _written(path, "persist", "a")
    before = _files(tmp_path)
    reader = StateStore(path, journal="persist", read_only=True)
    assert [r["name"] for r in reader.query("SELECT name FROM items")] == ["a"]
    assert reader.schema_version("demo") == 1
    with pytest.raises(StateError, match=f"^{path}: opened read-only$"):
        with reader.transaction() as conn:
            conn.execute("INSERT INTO items(name) VALUES ('b')")
    with pytest.raises(StateError, match="opened read-only"):
        reader.ensure_schema("demo", [V1, V2])
    with pytest.raises(StateError, match=str(path)):
        reader.query("INSERT INTO items(name) VALUES ('c')")  # refused by SQLite itself
    reader.close()
    assert _files(tmp_path) == before
    assert [r["name"] for r in StateStore(path).query("SELECT name FROM items")] == ["a"]


def test_read_only_keeps_the_journal_mode_and_creates_no_table(tmp_path):
    path = tmp_path / "s.db"
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE items (name TEXT)")
    conn.close()
    reader = StateStore(path, journal="delete", read_only=True)
    assert reader.query("PRAGMA journal_mode")[0][0] == "wal"
    assert reader.schema_version("demo") == 0
    reader.close()
    with sqlite3.connect(path) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    conn.close()
    assert tables == ["items"]


def test_read_only_creates_no_directory_and_names_the_path(tmp_path):
    path = tmp_path / "missing" / "s.db"
    with pytest.raises(StateError, match=f"^{path}: cannot open state database read-only"):
        StateStore(path, read_only=True).query("SELECT 1")
    assert not (tmp_path / "missing").exists()


def test_read_only_path_is_quoted_in_the_uri(tmp_path):
    directory = tmp_path / "odd ?name#with%20chars"
    directory.mkdir()
    path = directory / "s.db"
    _written(path, "delete", "odd")
    reader = StateStore(path, read_only=True)
    assert [r["name"] for r in reader.query("SELECT name FROM items")] == ["odd"]
    assert sorted(p.name for p in directory.iterdir()) == ["s.db"]


def test_a_plain_user_reads_a_rollback_journal_database_read_only(shared_dir):
    uid, gid = plain_user()
    # state.py imports only the standard library and errors.py: a copy any user can import
    package = shared_dir / "lib" / "scratchkeeper"
    package.mkdir(parents=True)
    source = Path(scratchkeeper.state.__file__).parent
    (package / "__init__.py").write_text("")
    for name in ("state.py", "errors.py"):
        shutil.copy(source / name, package / name)
    for item in [shared_dir / "lib", package, *package.iterdir()]:
        item.chmod(0o755 if item.is_dir() else 0o644)
    data = shared_dir / "data"  # root's, 0755: the user can read in it, not create files
    data.mkdir(mode=0o755)
    path = data / "s.db"
    writer = StateStore(path, journal="persist")
    writer.ensure_schema("demo", [V1])
    with writer.transaction() as conn:
        conn.execute("INSERT INTO items(name) VALUES ('from root')")
    writer.close()
    path.chmod(0o644)
    before = _files(data)
    code = f"""
import sys
sys.path.insert(0, {str(shared_dir / 'lib')!r})
from scratchkeeper.errors import StateError
from scratchkeeper.state import DatabaseBusy, StateStore
print([r["name"] for r in StateStore({str(path)!r}, journal="persist", read_only=True)
       .query("SELECT name FROM items")])
try:
    with StateStore({str(path)!r}, journal="persist", read_only=True).transaction():
        pass
except StateError as err:
    print(err)
try:
    StateStore({str(path)!r}, journal="persist").ensure_schema("demo", [{V1!r}, {V2!r}])
except Exception as err:
    print("read-write:", err)
"""
    result = subprocess.run([plain_python(), "-I", "-c", code], user=uid, group=gid,
                            extra_groups=[], cwd=shared_dir, env={"PATH": "/usr/bin:/bin"},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "['from root']"
    assert lines[1] == f"{path}: opened read-only"
    assert lines[2].startswith("read-write: ") and "readonly database" in lines[2]
    assert _files(data) == before


# -- lock contention: many processes open and write one database at once ----------------------

@contextlib.contextmanager
def lock_held(path: Path, seconds: float, begin: str = "BEGIN EXCLUSIVE"):
    """Another process holds ``begin``'s lock on the database at ``path`` for ``seconds``."""
    code = (f"import sqlite3, time\n"
            f"conn = sqlite3.connect({str(path)!r}, isolation_level=None)\n"
            f"conn.execute({begin!r})\n"
            f"conn.execute('SELECT COUNT(*) FROM sqlite_master').fetchall()\n"
            f"print('held', flush=True)\n"
            f"time.sleep({seconds})\n"
            f"conn.execute('COMMIT')\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder
    finally:
        holder.wait(timeout=60)
        holder.stdout.close()
    assert holder.returncode == 0


def _persist_db(path: Path) -> None:
    writer = StateStore(path, journal="persist")
    writer.ensure_schema("demo", [V1])
    writer.close()


def test_opening_waits_for_another_processes_exclusive_lock(tmp_path):
    """An EXCLUSIVE lock held longer than the old journal-switch wait (1 s) failed the open with
    "cannot open state database: database is locked" (the stage-in jobs of issue 14)."""
    path = tmp_path / "namespace.db"
    _persist_db(path)
    with lock_held(path, 2.5):
        started = time.monotonic()
        store = StateStore(path, journal="persist")
        store.ensure_schema("demo", [V1])
        with store.transaction() as conn:
            conn.execute("INSERT INTO items(name) VALUES ('after the lock')")
        waited = time.monotonic() - started
    assert waited > 1.5  # it did wait for the holder
    # and the connection got the rollback journal it asked for, not SQLite's default
    assert store.query("PRAGMA journal_mode")[0][0] == "persist"
    assert [r["name"] for r in store.query("SELECT name FROM items")] == ["after the lock"]


@pytest.mark.parametrize("journal", ["wal", "persist"])
def test_a_write_lock_held_past_the_busy_timeout_is_waited_for_again(tmp_path, journal):
    path = tmp_path / "s.db"
    StateStore(path, journal=journal).ensure_schema("demo", [V1])
    store = StateStore(path, journal=journal, busy_timeout_ms=100)
    store.query("SELECT 1")  # opened before the lock is taken
    with lock_held(path, 1.5, "BEGIN IMMEDIATE"):
        with store.transaction() as conn:  # BEGIN IMMEDIATE times out ~10 times, then gets it
            conn.execute("INSERT INTO items(name) VALUES ('x')")
    assert store.query("SELECT COUNT(*) FROM items")[0][0] == 1


def test_a_commit_that_cannot_get_its_lock_is_retried(tmp_path):
    """In a rollback journal COMMIT needs readers gone; a reader holding on past the busy
    timeout made COMMIT fail and left the transaction open on the thread's connection."""
    path = tmp_path / "s.db"
    _persist_db(path)
    store = StateStore(path, journal="persist", busy_timeout_ms=100)
    store.query("SELECT 1")
    with lock_held(path, 1.5, "BEGIN"):  # BEGIN + SELECT: a SHARED lock
        with store.transaction() as conn:
            conn.execute("INSERT INTO items(name) VALUES ('x')")
    assert not store.connection().in_transaction
    assert StateStore(path, journal="persist").query("SELECT name FROM items")[0][0] == "x"


def test_a_lock_never_released_is_a_bounded_wait_then_one_error(tmp_path):
    path = tmp_path / "s.db"
    _persist_db(path)
    store = StateStore(path, journal="persist", busy_timeout_ms=100, lock_wait=0.8)
    store.query("SELECT 1")
    with lock_held(path, 2.5, "BEGIN"):
        started = time.monotonic()
        with pytest.raises(DatabaseBusy, match=f"{path}: cannot commit: still locked .* 0.8s"):
            with store.transaction() as conn:
                conn.execute("INSERT INTO items(name) VALUES ('x')")
        assert time.monotonic() - started < 3
        assert not store.connection().in_transaction  # rolled back, not left open
    with store.transaction() as conn:  # the connection is usable once the lock is gone
        conn.execute("INSERT INTO items(name) VALUES ('y')")
    assert [r["name"] for r in store.query("SELECT name FROM items")] == ["y"]
    with lock_held(path, 2):
        with pytest.raises(DatabaseBusy, match="cannot open state database: still locked"):
            StateStore(path, journal="persist", busy_timeout_ms=100, lock_wait=0.5).query("SELECT 1")


WRITER = """
import sys, time
sys.path.insert(0, {root!r})
from scratchkeeper.state import DatabaseBusy, StateStore
for index in range(15):
    store = StateStore({path!r}, journal="persist")  # a fresh open each time, as a job does
    store.ensure_schema("demo", [{v1!r}])
    with store.transaction() as conn:
        conn.execute("INSERT INTO items(name) VALUES (?)", (f"{{sys.argv[1]}}-{{index}}",))
    store.close()
"""


def test_many_processes_opening_and_writing_at_once_all_succeed(tmp_path):
    path = tmp_path / "namespace.db"
    _persist_db(path)
    root = str(Path(scratchkeeper.state.__file__).parents[1])
    code = WRITER.format(root=root, path=str(path), v1=V1)
    # a process that keeps taking EXCLUSIVE locks for 1.2 s while 12 writers open and write
    holder = f"""
import sqlite3, time
conn = sqlite3.connect({str(path)!r}, isolation_level=None, timeout=60)
for _ in range(3):
    conn.execute("BEGIN EXCLUSIVE"); time.sleep(1.2); conn.execute("COMMIT"); time.sleep(0.2)
"""
    procs = [subprocess.Popen([sys.executable, "-c", holder], stderr=subprocess.PIPE, text=True)]
    time.sleep(0.3)
    procs += [subprocess.Popen([sys.executable, "-c", code, str(n)], stderr=subprocess.PIPE,
                               text=True) for n in range(12)]
    errors = [(p.wait(timeout=240), p.stderr.read()) for p in procs]
    assert [e for e in errors if e[0] != 0] == []
    count = StateStore(path, journal="persist").query("SELECT COUNT(*) FROM items")[0][0]
    assert count == 12 * 15


def test_writers_of_one_process_are_handed_the_database_in_turn(tmp_path):
    """A thread whose transaction meets another thread's of the same store waits for it in the
    process, and starts once: it does not poll SQLite's lock in the busy handler."""
    import threading
    store = StateStore(tmp_path / "s.db", busy_timeout_ms=1, lock_wait=10)
    with store.transaction() as conn:
        conn.execute("CREATE TABLE t (n INTEGER)")
    inside, release = threading.Event(), threading.Event()
    begins = []

    def holder():
        with store.transaction() as conn:
            conn.execute("INSERT INTO t VALUES (1)")
            inside.set()
            release.wait(10)

    def second():
        conn = store.connection()
        conn.set_trace_callback(lambda sql: sql.startswith("BEGIN") and begins.append(sql))
        with store.transaction() as conn:
            conn.execute("INSERT INTO t VALUES (2)")

    first = threading.Thread(target=holder)
    first.start()
    assert inside.wait(10)
    other = threading.Thread(target=second)
    other.start()
    time.sleep(0.3)
    release.set()
    first.join(10)
    other.join(10)
    assert begins == ["BEGIN IMMEDIATE"]
    assert [row["n"] for row in store.query("SELECT n FROM t ORDER BY n")] == [1, 2]
