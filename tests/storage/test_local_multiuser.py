"""The local store shared by several users (issue 30): the MDT and OST directories are root's
0700 and every object 0600 with its file's owner, so no other user reaches an object or an MDT
inode; a process that may not write the namespace opens it read-only, and another user's
process reads through the scratch mount only (tests/mount/test_mount_privacy.py), else nothing.

The plain-user tests run a child process as the unprivileged user ``skplain`` (created when
missing; they need root) with the system Python and a world-readable copy of the package: the
venv lives under /root, which other users cannot enter.
"""

from __future__ import annotations

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
from scratchkeeper.storage.local import (
    LocalStripedStore,
    namespace as local_namespace,
    objects as local_objects,
)
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


# -- closed directories, objects 0600 -----------------------------------------------------------
@pytest.mark.parametrize("umask", [0o077, 0o000])
def test_objects_are_0600_with_their_files_owner_in_directories_only_root_enters(tmp_path, umask, skplain):
    """Users never reach an object (issue 30): the MDT, staging and OST directories are root's
    0700 and every object 0600, whatever the file's mode and the umask; the objects keep
    their file's owner (the backing file system charges the owner)."""
    uid, gid = skplain
    previous = os.umask(umask)
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
        with open(source.parent / "put", "wb") as handle:
            handle.write(data(100_000, 2))
        with open(source.parent / "put", "rb") as handle:
            store.put_file("u/put", handle.fileno(), 100_000, owner=(uid, gid), mode=0o666)
    finally:
        os.umask(previous)
    for path, owner in (("u/created", (uid, gid)), ("u/imported", (uid, gid)),
                        ("root/private", (0, 0)), ("root/public", (0, 0)),
                        ("u/write-only", (uid, gid)), ("u/put", (uid, gid))):
        assert owner_and_mode(object_files(store, path)) == {(*owner, 0o600)}, path
    for ost in range(8):
        assert owner_and_mode([store._ost_dir(ost)]) == {(0, 0, 0o700)}
    for name in ("mdt", "mdt.staging"):
        assert owner_and_mode([store.store_root / name]) == {(0, 0, 0o700)}
    # the store's own entry names (which OSTs exist, which failed) are for everyone
    assert stat.S_IMODE(store.store_root.stat().st_mode) == 0o755
    # the namespace names files (intents, rebuilds): the owner's alone, journal included
    for name in ("namespace.db", "namespace.db-journal"):
        assert stat.S_IMODE((store.store_root / name).stat().st_mode) == 0o600, name
    # the MDT inodes carry the files' owners and modes (the mount checks them), and the
    # directories made for a file are its owner's
    for path, expected in (("u/created", (uid, gid, 0o640)), ("root/private", (0, 0, 0o600)),
                           ("u", (uid, gid, 0o755)), ("root", (0, 0, 0o755))):
        assert owner_and_mode([store.store_root / "mdt" / path]) == {expected}

    # a mirror and the substitute objects of a rebuild are 0600 and the file's too
    store.add_mirror("u/imported")
    assert owner_and_mode(object_files(store, "u/imported")) == {(uid, gid, 0o600)}
    layout = store.layout("u/created")
    failed = layout.ost_list[0]
    store.fail_ost(failed)
    assert owner_and_mode([store._failed_dir(failed)]) == {(0, 0, 0o700)}
    substitute = store.pick_substitute(layout)
    rebuild = store.begin_rebuild("u/created", {failed: substitute})
    store.commit_rebuild(rebuild)  # an empty file: nothing was lost
    store.restore_ost(failed)
    new = [f for f in object_files(store, "u/created") if f.parent.name == f"ost{substitute:04d}"]
    assert len(new) == 1 and owner_and_mode(new) == {(uid, gid, 0o600)}


def _open_store_of_before(store: LocalStripedStore, uid: int, gid: int) -> dict:
    """Make ``store`` look as a store of namespace version 3 left it: directories 0755,
    the namespace 0644, objects with their file's read bits. What each object's mode was."""
    with store.db.transaction() as conn:
        conn.execute("UPDATE schema_version SET version = 3 WHERE component = 'storage-local'")
    store.db.close()
    for directory in [store.store_root / "mdt"] + [store._ost_dir(i) for i in range(8)]:
        directory.chmod(0o755)
    for name in ("namespace.db", "namespace.db-journal"):
        if (store.store_root / name).exists():
            (store.store_root / name).chmod(0o644)
    modes = {}
    for path, mode in (("u/open", 0o644), ("u/group", 0o640), ("root/world", 0o666)):
        for obj in object_files(store, path):
            obj.chmod(mode)
            modes[obj] = mode
    return modes


def test_a_store_made_before_is_closed_at_its_next_open_by_root(tmp_path, skplain):
    uid, gid = skplain
    store = new_store(tmp_path)
    for path, mode, owner in (("u/open", 0o644, (uid, gid)), ("u/group", 0o640, (uid, gid)),
                              ("root/world", 0o666, (0, 0))):
        store.write(store.create(path, owner=owner, mode=mode).path, 0, data(70_000, 3))
    modes = _open_store_of_before(store, uid, gid)
    (store.store_root / "mdt").chmod(0o1777)  # what users saw at the scratch root
    assert {stat.S_IMODE(o.stat().st_mode) for o in modes} == {0o644, 0o640, 0o666}
    owners = {o: (o.stat().st_uid, o.stat().st_gid) for o in modes}
    assert set(owners.values()) == {(uid, gid), (0, 0)}

    reopened = new_store(tmp_path)
    assert reopened.read("u/open", 0, 10) == data(70_000, 3)[:10]  # any open closes it
    assert owner_and_mode(modes) == {(*owner, 0o600) for owner in owners.values()}
    assert {o: (o.stat().st_uid, o.stat().st_gid) for o in modes} == owners
    for directory in [reopened.store_root / "mdt", reopened.store_root / "mdt.staging"] + \
            [reopened._ost_dir(i) for i in range(8)]:
        assert owner_and_mode([directory]) == {(0, 0, 0o700)}, directory
    for name in ("namespace.db", "namespace.db-journal"):
        assert stat.S_IMODE((reopened.store_root / name).stat().st_mode) == 0o600
    assert reopened.db.schema_version("storage-local") == len(local_namespace.MIGRATIONS) == 4
    # the mount's root shows what users saw before, though the MDT directory is closed now
    assert os.getxattr(reopened.store_root / "mdt", "trusted.scratchkeeper.root") == \
        b"mode=1777 uid=0 gid=0"


def test_the_objects_walk_runs_once_and_an_interrupted_one_is_run_again(tmp_path, monkeypatch, skplain):
    uid, gid = skplain
    store = new_store(tmp_path)
    for path, mode, owner in (("u/open", 0o644, (uid, gid)), ("u/group", 0o640, (uid, gid)),
                              ("root/world", 0o666, (0, 0))):
        store.create(path, owner=owner, mode=mode)
    modes = _open_store_of_before(store, uid, gid)

    # killed in the middle of the walk: some objects fixed, the version not recorded
    real = local_objects._close_objects_in
    calls = []

    def dies_on_the_third_directory(dir_fd, directory):
        calls.append(directory)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(dir_fd, directory)
    monkeypatch.setattr(local_objects, "_close_objects_in", dies_on_the_third_directory)
    with pytest.raises(KeyboardInterrupt):
        new_store(tmp_path).list_osts()
    monkeypatch.undo()
    left_open = [o for o in modes if stat.S_IMODE(o.stat().st_mode) != 0o600]
    assert left_open and len(left_open) < len(modes)
    check = sqlite3.connect(store.store_root / "namespace.db")
    assert check.execute("SELECT version FROM schema_version WHERE component = "
                         "'storage-local'").fetchone()[0] == 3
    check.close()

    again = new_store(tmp_path)
    again.list_osts()
    assert {stat.S_IMODE(o.stat().st_mode) for o in modes} == {0o600}
    assert again.db.schema_version("storage-local") == 4
    again.db.close()

    # once recorded, the walk is not run again (an open costs what it did): bounded work
    walked = []
    monkeypatch.setattr(LocalStripedStore, "_close_objects",
                        lambda self: walked.append(True) or 0)
    new_store(tmp_path).list_osts()
    assert walked == []


def test_a_plain_user_who_knows_object_ids_opens_no_object_by_any_name(shared_dir):
    """The layout attribute names every object (ids are no secret); no name under the closed
    directories resolves for another user, so knowing one opens nothing, and ``grep -r`` over
    ``store_root`` finds no byte of any file."""
    user = plain_user()
    store = new_store(shared_dir)
    secret = b"the-secret-" + data(200_000, 7).hex().encode()[:1000]
    store.write(store.create("pub/open.dat", LayoutRequest(ost_list=(1, 2)), owner=user,
                             mode=0o644).path, 0, secret)  # even the user's own, world-readable
    store.fail_ost(2)  # one in ostNNNN.failed
    ids = [(o.ost_index, o.object_id) for c in store.layout("pub/open.dat").components
           for o in c.objects]
    store.db.close()
    names = []
    for index, oid in ids:
        for directory in (f"ost{index:04d}", f"ost{index:04d}.failed"):
            names += [f"{store.store_root}/{directory}/{oid}",
                      f"{store.store_root}/./{directory}//{oid}",
                      f"{store.store_root}/mdt/../{directory}/{oid}"]
    names += [f"{store.store_root}/mdt/pub/open.dat", f"{store.store_root}/namespace.db",
              f"{store.store_root}/namespace.db-journal"]
    script = f"""
import json, os, subprocess
refused = {{}}
for name in {names!r}:
    try:
        os.close(os.open(name, os.O_RDONLY))
        refused[name] = "opened"
    except OSError as err:
        refused[name] = type(err).__name__
listed = {{}}
for entry in sorted(os.listdir({str(store.store_root)!r})):
    try:
        listed[entry] = sorted(os.listdir(os.path.join({str(store.store_root)!r}, entry)))
    except OSError as err:
        listed[entry] = type(err).__name__
grep = subprocess.run(["grep", "-r", "-l", "the-secret-", {str(store.store_root)!r}],
                      capture_output=True, text=True)
print(json.dumps({{"refused": refused, "listed": listed, "grep": grep.stdout}}))
"""
    results = json.loads(run_as(user, script, shared_dir, shared_dir))
    assert set(results["refused"].values()) <= {"PermissionError", "FileNotFoundError"}
    assert "opened" not in results["refused"].values()
    assert {name: results["refused"][name] for name in names
            if "ost0001/" in name or "ost0002.failed/" in name} == \
        dict.fromkeys([n for n in names if "ost0001/" in n or "ost0002.failed/" in n],
                      "PermissionError")
    # the names of store_root are for everyone (OST states), what is below them for root
    assert results["listed"] == {
        "mdt": "PermissionError", "mdt.staging": "PermissionError",
        "namespace.db": "NotADirectoryError", "namespace.db-journal": "NotADirectoryError",
        **{f"ost{i:04d}" + (".failed" if i == 2 else ""): "PermissionError" for i in range(8)}}
    assert results["grep"] == ""
    assert store.read("pub/open.dat", 0, len(secret)) == secret  # root still reads it


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


# -- a plain user's store: through the scratch mount, or not at all ----------------------------
PLAIN_SCRIPT = """
import json
from scratchkeeper.storage.local import LocalStripedStore
store = LocalStripedStore({scratch!r}, {store!r}, ost_count=8, default_stripe_count=4,
                          default_stripe_size=65536)
results = {{}}
def attempt(name, action):
    try:
        results[name] = {{"ok": action()}}
    except Exception as err:
        results[name] = {{"error": type(err).__name__, "message": str(err)}}
attempt("read_only", lambda: store.read_only)
attempt("through_mount", lambda: store.through_mount)
attempt("mine", lambda: store.read("me/mine.dat", 0, 100).hex())
attempt("mine_streamed", lambda: b"".join(store.open_reader("me/mine.dat")).hex())
attempt("secret", lambda: store.read("other/secret.dat", 0, 100).hex())
attempt("stat", lambda: store.stat("me/mine.dat").size)
attempt("exists", lambda: store.exists("me/mine.dat"))
attempt("layout", lambda: store.layout("me/mine.dat").ost_list)
attempt("xattr", lambda: store.get_xattr("me/mine.dat", "user.scratchkeeper.source").decode())
attempt("list_dir", lambda: store.list_dir("me"))
attempt("list_root", lambda: store.list_dir(""))
attempt("files_on_ost", lambda: store.files_on_ost(2))
attempt("drop_cache", lambda: store.drop_cache("me/mine.dat"))
attempt("placement", lambda: store.placement_report())
attempt("namespace", lambda: store.db)
attempt("osts", lambda: [(o.state, o.used_bytes) for o in store.list_osts()])
attempt("probe", lambda: [o.state for o in store.check_osts(10)])
attempt("write", lambda: store.write("me/mine.dat", 0, b"x"))
attempt("create", lambda: store.create("me/new.dat"))
attempt("set_xattr", lambda: store.set_xattr("me/mine.dat", "user.x", b"1"))
attempt("remove", lambda: store.remove("me/mine.dat"))
attempt("gc", lambda: store.collect_garbage())
print(json.dumps(results))
"""


def _users_store(shared_dir: Path, user: tuple[int, int]) -> tuple[LocalStripedStore, bytes]:
    """A root store with the user's 0600 file ``me/mine.dat``, another user's and a failed OST."""
    store = new_store(shared_dir)
    (shared_dir / "scratch").chmod(0o755)
    mine = data(300_000, 1)
    source = shared_dir / "scratch" / "me" / "mine.dat"
    source.parent.mkdir()
    source.write_bytes(mine)
    os.chown(source, *user)
    source.chmod(0o600)
    store.import_file(str(source), stripe_count=4, expect_uid=user[0])
    store.set_xattr(str(source), "user.scratchkeeper.source", b"gsiftp://h/mine")
    store.write(store.create("other/secret.dat", LayoutRequest(ost_list=(2, 3)),
                             owner=(4242, 4242), mode=0o600).path, 0, data(100_000, 3))
    store.fail_ost(7)
    store.db.close()
    return store, mine


def test_a_plain_users_store_without_the_scratch_mount_reads_nothing(shared_dir):
    """Without the scratch mount at the scratch root, a user's process reads no file and no
    name: one line says why; the OSTs' states (``store_root``'s entry names) it still sees, and
    every change is refused as before."""
    user = plain_user()
    uid = user[0]
    library = world_readable_copy(shared_dir / "lib")
    store, mine = _users_store(shared_dir, user)
    before = {p.name: p.stat().st_mtime_ns for p in store.store_root.iterdir()}

    out = run_as(user, PLAIN_SCRIPT.format(scratch=store.scratch_root,
                                           store=str(store.store_root)), library, shared_dir)
    results = json.loads(out)
    assert results["read_only"] == {"ok": True}
    assert results["through_mount"] == {"ok": True}
    refusal = {"error": "PermissionDenied", "message": (
        f"the store at {store.store_root} keeps its data for root: users read it through the "
        f"scratch mount at {store.scratch_root}, which is not mounted")}
    for name in ("mine", "mine_streamed", "secret", "stat", "exists", "layout", "xattr",
                 "list_dir", "list_root", "files_on_ost", "drop_cache"):
        assert results[name] == refusal, name
    assert results["placement"] == {"error": "PermissionDenied", "message": (
        f"counting the objects on each OST needs the store's owner (uid 0): the OST "
        f"directories of {store.store_root} are closed to uid {uid}")}
    assert results["namespace"] == {"error": "PermissionDenied", "message": (
        f"the store at {store.store_root} keeps its namespace for its owner (uid 0); uid {uid} "
        "reads the store through the scratch mount only")}
    states = ["failed" if i == 7 else "active" for i in range(8)]
    assert results["osts"] == {"ok": [[state, None] for state in states]}
    assert results["probe"] == {"ok": states}
    for name in ("write", "create", "set_xattr", "remove", "gc"):
        assert results[name] == {"error": "PermissionDenied", "message": (
            f"the store at {store.store_root} is owned by uid 0; only its owner can change it "
            f"(this process runs as uid {uid})")}, name
    # the reader wrote nothing next to the namespace, and the store is whole
    assert {p.name: p.stat().st_mtime_ns for p in store.store_root.iterdir()} == before
    assert store.read("me/mine.dat", 0, len(mine)) == mine


def test_store_cat_as_a_plain_user_without_the_scratch_mount(shared_dir):
    """What a user's batch job runs: ``runuser -u skplain -- scratchkeeper store cat FILE``;
    with no scratch mount, one line and exit 2, even for the user's own file (the mount's
    permission check is the only way in). ``store df`` needs no mount."""
    user = plain_user()
    if shutil.which("runuser") is None:
        pytest.skip("runuser is not installed")
    # the command line imports jinja2 (and markupsafe) and crc32c, which need their dist-info
    library = world_readable_copy(shared_dir / "lib", DEPENDENCIES)
    store, _ = _users_store(shared_dir, user)
    config = shared_dir / "site.toml"
    config.write_text(f'[storage]\nbackend = "local"\nscratch_root = "{store.scratch_root}"\n'
                      f'store_root = "{store.store_root}"\nost_count = 8\n')
    config.chmod(0o644)
    main = (f"import sys; sys.path.insert(0, {str(library)!r}); "
            "from scratchkeeper.cli import main; sys.exit(main())")

    def store_command(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(["runuser", "-u", PLAIN_USER, "--", plain_python(), "-I", "-c", main,
                               "-c", str(config), "store", *argv], cwd=shared_dir,
                              capture_output=True, timeout=120)

    out = shared_dir / "out"
    out.mkdir()
    os.chown(out, *user)
    for argv in (("cat", "me/mine.dat"), ("get", "me/mine.dat", str(out / "copy")),
                 ("layout", "me/mine.dat"), ("ls", "me"), ("cat", "other/secret.dat")):
        refused = store_command(*argv)
        assert (refused.returncode, refused.stdout) == (2, b""), argv
        assert refused.stderr.decode() == (
            f"scratchkeeper: the store at {store.store_root} keeps its data for root: users "
            f"read it through the scratch mount at {store.scratch_root}, which is not "
            "mounted\n"), argv
    assert os.listdir(out) == []
    df = store_command("df")
    assert (df.returncode, df.stderr) == (0, b"")
    assert [line.split()[2] for line in df.stdout.decode().splitlines()[1:]] == \
        ["failed" if i == 7 else "active" for i in range(8)]
