"""The local store shared by several users: objects carry their file's owner and mode, a process
that may not write the namespace opens it read-only, and the kernel enforces permissions.

The plain-user tests run a child process as the unprivileged user ``skplain`` (created when
missing; they need root) with the system Python and a world-readable copy of the package: the
venv lives under /root, which other users cannot enter.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import sqlite3
import stat
import subprocess
from collections.abc import Iterable
from pathlib import Path

import pytest

from scratchkeeper.errors import PermissionDenied, StorageError
from scratchkeeper.storage import LayoutRequest
from scratchkeeper.storage import local_namespace
from scratchkeeper.storage.local import LocalStripedStore
from user_runtime import DEPENDENCIES, PLAIN_USER, plain_python, plain_user, world_readable_copy

def run_as(user: tuple[int, int], code: str, library: Path, cwd: Path) -> str:
    """Run Python ``code`` as ``user`` with ``library`` on its path; its stdout."""
    uid, gid = user
    prologue = f"import sys\nsys.path.insert(0, {str(library)!r})\n"
    result = subprocess.run([plain_python(), "-I", "-c", prologue + code], user=uid, group=gid,
                            extra_groups=[], cwd=cwd, env={"PATH": "/usr/bin:/bin"},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def new_store(root: Path, **kwargs) -> LocalStripedStore:
    (root / "scratch").mkdir(exist_ok=True)
    return LocalStripedStore(str(root / "scratch"), str(root / "store"), ost_count=8,
                             default_stripe_count=4, default_stripe_size=65536, **kwargs)


def object_files(store: LocalStripedStore, path: str) -> list[Path]:
    return [store._object_path(o) for c in store.layout(path).components for o in c.objects]


def owner_and_mode(files: Iterable[Path]) -> set[tuple[int, int, int]]:
    return {(f.stat().st_uid, f.stat().st_gid, stat.S_IMODE(f.stat().st_mode)) for f in files}


def data(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


# -- objects carry their file's owner and mode --------------------------------------------------
def test_objects_carry_the_owner_and_mode_of_their_file(tmp_path):
    uid, gid = plain_user()
    previous = os.umask(0o077)  # a daemon's strict umask must not close the store to users
    try:
        store = new_store(tmp_path)
        store.create("u/created", owner=(uid, gid), mode=0o640)
        source = tmp_path / "scratch" / "u" / "imported"
        source.parent.mkdir()
        source.write_bytes(data(300_000, 1))
        os.chown(source, uid, gid)
        source.chmod(0o755)
        store.import_file(str(source), stripe_count=3)
        store.create("root/private", mode=0o600)
        store.create("root/public")  # mode 0644 by default
        store.create("u/write-only", owner=(uid, gid), mode=0o200)
    finally:
        os.umask(previous)
    assert owner_and_mode(object_files(store, "u/created")) == {(uid, gid, 0o640)}
    # never exec bits
    assert owner_and_mode(object_files(store, "u/imported")) == {(uid, gid, 0o644)}
    assert owner_and_mode(object_files(store, "root/private")) == {(0, 0, 0o600)}
    assert owner_and_mode(object_files(store, "root/public")) == {(0, 0, 0o644)}
    # the owner keeps read and write on its objects
    assert owner_and_mode(object_files(store, "u/write-only")) == {(uid, gid, 0o600)}
    for ost in range(8):
        info = store._ost_dir(ost).stat()
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o755)
    assert stat.S_IMODE(store.store_root.stat().st_mode) == 0o755
    assert stat.S_IMODE((store.store_root / "namespace.db").stat().st_mode) == 0o644
    mdt = (store.store_root / "mdt").stat()
    assert (mdt.st_uid, stat.S_IMODE(mdt.st_mode)) == (0, 0o755)
    assert stat.S_IMODE((store.store_root / "mdt.staging").stat().st_mode) == 0o700
    # the MDT inodes carry them too, and the directories made for a file are its owner's
    for path, expected in (("u/created", (uid, gid, 0o640)), ("root/private", (0, 0, 0o600)),
                           ("u", (uid, gid, 0o755)), ("root", (0, 0, 0o755))):
        assert owner_and_mode([store.store_root / "mdt" / path]) == {expected}

    # a mirror and the substitute objects of a rebuild are the file's too
    store.add_mirror("u/imported")
    assert owner_and_mode(object_files(store, "u/imported")) == {(uid, gid, 0o644)}
    layout = store.layout("u/created")
    failed = layout.ost_list[0]
    store.fail_ost(failed)
    substitute = store.pick_substitute(layout)
    rebuild = store.begin_rebuild("u/created", {failed: substitute})
    store.commit_rebuild(rebuild)  # an empty file: nothing was lost
    store.restore_ost(failed)
    new = [f for f in object_files(store, "u/created") if f.parent.name == f"ost{substitute:04d}"]
    assert len(new) == 1 and owner_and_mode(new) == {(uid, gid, 0o640)}


# -- opening read-only -------------------------------------------------------------------------
def test_a_process_that_cannot_write_the_namespace_opens_it_read_only(tmp_path, monkeypatch):
    store = new_store(tmp_path)
    store.create("a", LayoutRequest(stripe_count=2))
    store.write("a", 0, b"hello")
    store.set_xattr("a", "user.scratchkeeper.source", b"file:///a")
    # leftovers only a writer may clean up: a doomed object and a missing OST directory
    doomed = store._ost_dir(3) / "deadbeef"
    doomed.write_bytes(b"old")
    with store.db.transaction() as conn:
        conn.execute("INSERT INTO object_intents(ost_index, object_id, owner) VALUES (3, "
                     "'deadbeef', 'doomed')")
    store._ost_dir(7).rmdir()
    store.db.close()
    before = sorted(p.name for p in store.store_root.iterdir())

    monkeypatch.setattr(local_namespace, "may_write", lambda path: False)
    reader = new_store(tmp_path)
    assert reader.read_only
    assert reader.read("a", 0, 100) == b"hello"
    assert reader.stat("a").size == 5 and reader.list_dir("") == ["a"]
    assert reader.get_xattr("a", "user.scratchkeeper.source") == b"file:///a"
    assert reader.list_xattrs("a") == {"user.scratchkeeper.source": b"file:///a"}
    assert reader.files_on_ost(reader.layout("a").ost_list[0]) == [reader.layout("a").path]
    assert [o.ost_index for o in reader.list_osts()] == list(range(8))
    assert {o.ost_index: o.state for o in reader.check_osts(5)}[0] == "active"
    # the store is this process's own here (a plain user's refusal is tested below)
    refusal = f"^the store at {reader.store_root} cannot be written by this process"
    changes = [lambda: reader.create("b"), lambda: reader.write("a", 0, b"x"),
               lambda: reader.set_xattr("a", "user.x", b"1"),
               lambda: reader.remove_xattr("a", "user.scratchkeeper.source"),
               lambda: reader.remove("a"), lambda: reader.add_mirror("a"),
               lambda: reader.remove_mirror("a", 1), lambda: reader.fail_ost(1),
               lambda: reader.restore_ost(1), lambda: reader.import_file("a"),
               lambda: reader.begin_rebuild("a", {0: 5}),
               # refused before the rebuild is even looked at
               lambda: reader.write_rebuild(None, 0, b"x"), lambda: reader.commit_rebuild(None),
               lambda: reader.abort_rebuild(None)]
    for change in changes:
        with pytest.raises(PermissionDenied, match=refusal):
            change()
    assert doomed.exists() and not store._ost_dir(7).exists()  # no collection, no fixup
    assert sorted(p.name for p in store.store_root.iterdir()) == before
    assert reader.read("a", 0, 100) == b"hello"

    monkeypatch.undo()
    writer = new_store(tmp_path)
    assert not writer.read_only
    assert not doomed.exists() and store._ost_dir(7).is_dir()


def test_read_only_open_of_an_older_namespace_asks_for_its_owner(tmp_path, monkeypatch):
    store = new_store(tmp_path)
    store.list_osts()
    with store.db.transaction() as conn:
        conn.execute("UPDATE schema_version SET version = 0 WHERE component = 'storage-local'")
    store.db.close()
    monkeypatch.setattr(local_namespace, "may_write", lambda path: False)
    with pytest.raises(StorageError, match=f"{store.store_root}: .*version 0.*needs opening by "
                                           f"its owner \\(uid {os.geteuid()}\\) first"):
        new_store(tmp_path).list_osts()
    # a store nobody created yet cannot be created by who may not write there
    (tmp_path / "empty" / "store").mkdir(parents=True)
    with pytest.raises(StorageError, match="the store's owner must open it first"):
        new_store(tmp_path / "empty").list_osts()
    assert not (tmp_path / "empty" / "store" / "namespace.db").exists()


def test_a_wal_namespace_of_an_older_version_switches_to_the_rollback_journal(tmp_path):
    store = new_store(tmp_path)
    store.create("a")
    store.db.close()
    namespace = store.store_root / "namespace.db"
    conn = sqlite3.connect(namespace)
    assert conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    conn.close()
    reopened = new_store(tmp_path)
    assert reopened.exists("a")
    assert reopened.db.query("PRAGMA journal_mode")[0][0] == "persist"
    assert not (store.store_root / "namespace.db-wal").exists()


# -- a plain user's job reads through the store -------------------------------------------------
PLAIN_SCRIPT = """
import hashlib, json
from scratchkeeper.storage.local import LocalStripedStore
store = LocalStripedStore({scratch!r}, {store!r}, ost_count=8, default_stripe_count=4,
                          default_stripe_size=65536)
results = {{}}
def attempt(name, action):
    try:
        results[name] = {{"ok": action()}}
    except Exception as err:
        results[name] = {{"error": type(err).__name__, "message": str(err)}}
digest = lambda b: hashlib.sha256(b).hexdigest()
attempt("read_only", lambda: store.read_only)
attempt("mine", lambda: digest(store.read("me/mine.dat", 0, 1 << 30)))
attempt("mine_streamed", lambda: digest(b"".join(store.open_reader("me/mine.dat"))))
attempt("shared", lambda: digest(store.read("pub/shared.dat", 0, 1 << 30)))
attempt("secret", lambda: store.read("other/secret.dat", 0, 100))
attempt("root_private", lambda: store.read("root/private.dat", 0, 100))
attempt("striped_on_failed_ost", lambda: store.read("me/striped.dat", 0, 1 << 30))
attempt("stat", lambda: (lambda s: [s.size, s.uid, s.gid, s.mode])(store.stat("me/mine.dat")))
attempt("xattr", lambda: store.get_xattr("me/mine.dat", "user.scratchkeeper.source").decode())
attempt("list_dir", lambda: store.list_dir("me"))
attempt("secret_layout", lambda: store.layout("other/secret.dat").ost_list)
attempt("secret_stat", lambda: store.stat("other/secret.dat").size)
attempt("secret_xattrs", lambda: store.list_xattrs("other/secret.dat"))
attempt("files_on_ost", lambda: store.files_on_ost(2))
attempt("osts", lambda: [o.state for o in store.list_osts()])
attempt("probe", lambda: [o.state for o in store.check_osts(10)])
attempt("write", lambda: store.write("me/mine.dat", 0, b"x"))
attempt("create", lambda: store.create("me/new.dat"))
attempt("set_xattr", lambda: store.set_xattr("me/mine.dat", "user.x", b"1"))
attempt("remove", lambda: store.remove("me/mine.dat"))
print(json.dumps(results))
"""


def test_a_plain_user_reads_its_own_files_and_not_others(shared_dir):
    user = plain_user()
    uid, gid = user
    library = world_readable_copy(shared_dir / "lib")
    store = new_store(shared_dir)
    (shared_dir / "scratch").chmod(0o755)
    mine = data(700_000, 1)
    source = shared_dir / "scratch" / "me" / "mine.dat"
    source.parent.mkdir()
    source.write_bytes(mine)
    os.chown(source, uid, gid)
    source.chmod(0o600)
    assert store.import_file(str(source), stripe_count=4).ost_list == (0, 1, 2, 3)
    store.set_xattr(str(source), "user.scratchkeeper.source", b"gsiftp://h/mine")
    shared = data(200_000, 2)
    on_live_osts = LayoutRequest(ost_list=(2, 3))
    store.write(store.create("pub/shared.dat", on_live_osts, mode=0o644).path, 0, shared)
    store.write(store.create("other/secret.dat", on_live_osts, owner=(4242, 4242),
                             mode=0o600).path, 0, data(100_000, 3))
    store.set_xattr("other/secret.dat", "user.scratchkeeper.source", b"file:///secret")
    store.write(store.create("root/private.dat", on_live_osts, mode=0o600).path, 0,
                data(100_000, 4))
    striped = store.create("me/striped.dat", LayoutRequest(ost_list=(6, 7)), owner=(uid, gid),
                           mode=0o600)
    store.write(striped.path, 0, data(200_000, 5))
    store.fail_ost(7)  # none of mine.dat's OSTs
    store.db.close()
    before = {p.name: p.stat().st_mtime_ns for p in store.store_root.iterdir()}

    out = run_as(user, PLAIN_SCRIPT.format(scratch=store.scratch_root,
                                           store=str(store.store_root)), library, shared_dir)
    results = json.loads(out)
    assert results["read_only"] == {"ok": True}
    assert results["mine"] == {"ok": hashlib.sha256(mine).hexdigest()}
    assert results["mine_streamed"] == {"ok": hashlib.sha256(mine).hexdigest()}
    assert results["shared"] == {"ok": hashlib.sha256(shared).hexdigest()}
    # another user's file and root's private one: refused by the kernel, named, not an OST
    for name, path in (("secret", "other/secret.dat"), ("root_private", "root/private.dat")):
        assert results[name] == {"error": "PermissionDenied", "message": (
            f"{store.scratch_root}/{path}: permission denied (uid {uid} may not read it)")}
    # a failed OST is still reported as such, not as a permission problem
    assert results["striped_on_failed_ost"]["error"] == "TargetUnavailable"
    assert results["stat"] == {"ok": [len(mine), uid, gid, 0o600]}
    assert results["xattr"] == {"ok": "gsiftp://h/mine"}
    assert results["list_dir"] == {"ok": ["mine.dat", "striped.dat"]}
    # layouts (security.scratchkeeper.lov) and names are readable by all, as lfs getstripe;
    # the kernel keeps another user's user.* attributes of a 0600 file to itself
    assert results["secret_layout"] == {"ok": [2, 3]}
    assert results["secret_stat"] == {"ok": 100_000}
    assert results["secret_xattrs"] == {"error": "PermissionDenied", "message": (
        f"{store.scratch_root}/other/secret.dat: permission denied (uid {uid} may not read "
        "its attribute user.scratchkeeper.source)")}
    assert results["files_on_ost"] == {"ok": sorted(
        f"{store.scratch_root}/{p}" for p in ("me/mine.dat", "other/secret.dat",
                                              "pub/shared.dat", "root/private.dat"))}
    expected_osts = ["failed" if i == 7 else "active" for i in range(8)]
    assert results["osts"] == {"ok": expected_osts}
    assert results["probe"] == {"ok": expected_osts}
    for name in ("write", "create", "set_xattr", "remove"):
        assert results[name] == {"error": "PermissionDenied", "message": (
            f"the store at {store.store_root} is owned by uid 0; only its owner can change it "
            f"(this process runs as uid {uid})")}
    # the reader wrote nothing next to the namespace, and the store is whole
    assert {p.name: p.stat().st_mtime_ns for p in store.store_root.iterdir()} == before
    assert store.read(str(source), 0, len(mine)) == mine


def test_store_cat_as_a_plain_user(shared_dir):
    """What a user's batch job runs: ``runuser -u skplain -- scratchkeeper store cat FILE``."""
    user = plain_user()
    if shutil.which("runuser") is None:
        pytest.skip("runuser is not installed")
    # the command line imports jinja2 (and markupsafe) and crc32c, which need their dist-info
    library = world_readable_copy(shared_dir / "lib", DEPENDENCIES)
    store = new_store(shared_dir)
    (shared_dir / "scratch").chmod(0o755)
    source = shared_dir / "scratch" / "me" / "in.dat"
    source.parent.mkdir()
    content = data(150_000, 6)
    source.write_bytes(content)
    os.chown(source, *user)
    source.chmod(0o600)
    store.import_file(str(source), expect_uid=user[0])
    store.write(store.create("other/x.dat", owner=(4242, 4242), mode=0o600).path, 0, b"secret")
    store.db.close()
    config = shared_dir / "site.toml"
    config.write_text(f'[storage]\nbackend = "local"\nscratch_root = "{store.scratch_root}"\n'
                      f'store_root = "{store.store_root}"\nost_count = 8\n')
    config.chmod(0o644)
    main = (f"import sys; sys.path.insert(0, {str(library)!r}); "
            "from scratchkeeper.cli import main; sys.exit(main())")

    def cat(path: str) -> subprocess.CompletedProcess:
        return subprocess.run(["runuser", "-u", PLAIN_USER, "--", plain_python(), "-I", "-c", main,
                               "-c", str(config), "store", "cat", path], cwd=shared_dir,
                              capture_output=True, timeout=120)

    mine = cat(str(source))
    assert (mine.returncode, mine.stderr) == (0, b"")
    assert mine.stdout == content
    other = cat(f"{store.scratch_root}/other/x.dat")
    assert (other.returncode, other.stdout) == (2, b"")
    assert other.stderr.decode() == (f"scratchkeeper: {store.scratch_root}/other/x.dat: "
                                     f"permission denied (uid {user[0]} may not read it)\n")
