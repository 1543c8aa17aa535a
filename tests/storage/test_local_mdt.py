"""The local store's namespace as an MDT directory tree (docs/mount.rst): the inodes, the layout
attribute, directory defaults, the migration from the SQLite namespace, and the commit
protocol killed at each of its steps."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import sqlite3
import stat
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from scratchkeeper.errors import InputError, StorageError
from scratchkeeper.storage import XATTR_TRUSTED_NAMES, FileLayout, LayoutRequest
from scratchkeeper.storage.layout import DIRLOV_XATTR, LOV_XATTR, DirDefault
from scratchkeeper.storage.local import LocalStripedStore
from scratchkeeper.storage.local.namespace import MIGRATIONS

from .test_local import objects_in_layouts, objects_on_disk, reopen, store_files, write_posix


def payload(size: int, seed: int = 5) -> bytes:
    return random.Random(seed).randbytes(size)


def mdt(store: LocalStripedStore, relative: str) -> Path:
    return Path(store.store_root) / "mdt" / relative


def test_a_store_file_is_a_sparse_mdt_inode_with_its_layout_attribute(local_store):
    data = payload(300_000)
    path = write_posix(local_store, "u1/in.dat", data)
    os.chown(path, 1234, 5678)
    os.chmod(path, 0o640)
    os.utime(path, ns=(1_700_000_000_123_456_789, 1_700_000_000_123_456_789))
    layout = local_store.import_file(str(path), stripe_count=3)
    inode = mdt(local_store, "u1/in.dat")
    info = os.lstat(inode)
    assert stat.S_ISREG(info.st_mode) and info.st_size == len(data)
    assert info.st_blocks * 512 <= 4096  # sparse (an xattr block at most): bytes are elsewhere
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (1234, 5678, 0o640)
    assert info.st_mtime_ns == 1_700_000_000_123_456_789
    lov = os.getxattr(inode, LOV_XATTR)
    assert lov.startswith(b"lov 1 gen=0\ncomp id=1 mirror=0 start=0 end=eof stripe_size=65536 ")
    assert FileLayout.from_lov(lov, layout.path) == layout == local_store.layout(str(path))
    # the directory made for it: the file's owner, 0755
    directory = os.lstat(mdt(local_store, "u1"))
    assert (directory.st_uid, directory.st_gid, stat.S_IMODE(directory.st_mode)) == \
        (1234, 5678, 0o755)
    # the MDT itself is the store owner's alone (users go through the scratch mount)
    root = os.lstat(mdt(local_store, ""))
    assert (root.st_uid, stat.S_IMODE(root.st_mode)) == (0, 0o700)
    # a write past the end grows the inode and moves its mtime
    local_store.write(str(path), len(data) + 10, b"tail")
    assert os.lstat(inode).st_size == len(data) + 14 and \
        os.lstat(inode).st_mtime_ns > 1_700_000_000_123_456_789
    assert local_store.read(str(path), len(data), 20) == bytes(10) + b"tail"


def test_xattrs_are_the_inodes_and_the_layout_attribute_is_never_exposed(local_store):
    local_store.create("x")
    local_store.set_xattrs("x", {"user.scratchkeeper.source": b"http://h/x",
                                 "user.note": b"n"})
    assert os.getxattr(mdt(local_store, "x"), "user.scratchkeeper.source") == b"http://h/x"
    assert local_store.list_xattrs("x") == {"user.note": b"n",
                                            "user.scratchkeeper.source": b"http://h/x"}
    # security.* and trusted.* names are the store's own (none is listed for callers): a name
    # that came from a user never becomes a change only root may make (issue 30)
    refused = ("expected a 'user.' name.* \\(security.\\* and trusted.\\* attributes are the "
               "store's own\\)")
    for name in (LOV_XATTR, "security.selinux", "trusted.scratchkeeper.note", "trusted.x",
                 "user.", "system.posix_acl_access", "lov"):
        for action in (lambda: local_store.set_xattr("x", name, b"lov 1 gen=9\n"),
                       lambda: local_store.set_xattrs("x", {"user.ok": b"1", name: b"v"}),
                       lambda: local_store.get_xattr("x", name),
                       lambda: local_store.remove_xattr("x", name)):
            with pytest.raises(InputError, match=f"^xattr name .*: {refused}$"):
                action()
    assert local_store.get_xattr("x", "user.ok") is None  # nothing of a refused set was set
    # one the admin set on the MDT directly is not a caller's to see either
    os.setxattr(mdt(local_store, "x"), "trusted.site.note", b"t")
    assert set(local_store.list_xattrs("x")) == {"user.note", "user.scratchkeeper.source"}
    # the trusted names the docs list are the store's callers' (root's records)
    for name in sorted(XATTR_TRUSTED_NAMES):
        local_store.set_xattr("x", name, b"recorded")
        assert local_store.list_xattrs("x")[name] == b"recorded"
    assert FileLayout.from_lov(os.getxattr(mdt(local_store, "x"), LOV_XATTR), "x") == \
        local_store.layout("x")
    # a value the file system cannot hold: an error, and the attributes set first put back
    with pytest.raises(StorageError, match="x: cannot set xattr user.big"):
        local_store.set_xattrs("x", {"user.scratchkeeper.source": b"new",
                                     "user.big": b"v" * 65536})
    assert local_store.get_xattr("x", "user.scratchkeeper.source") == b"http://h/x"
    assert local_store.get_xattr("x", "user.big") is None


def test_a_corrupt_layout_attribute_is_an_error_naming_the_file(local_store):
    local_store.create("bad")
    local_store.create("good", LayoutRequest(ost_list=(2,)))
    os.setxattr(mdt(local_store, "bad"), LOV_XATTR, b"lov 2 gen=0\n")
    with pytest.raises(StorageError, match=f"^{local_store.scratch_root}/bad: corrupt layout "
                                           "attribute .*unknown version"):
        local_store.read("bad", 0, 10)
    # the walk of files_on_ost passes over it and still finds the others
    assert local_store.files_on_ost(2) == [f"{local_store.scratch_root}/good"]


def test_list_dir_and_files_on_ost_walk_the_mdt(local_store):
    local_store.create("a/b/one", LayoutRequest(ost_list=(1, 2)))
    local_store.create("a/two", LayoutRequest(ost_list=(3,)))
    os.mkdir(mdt(local_store, "a/empty"))
    os.symlink("/etc", mdt(local_store, "a/link"))  # what a user may make through the mount
    assert local_store.list_dir("") == ["a/"]
    assert local_store.list_dir("a") == ["b/", "empty/", "link", "two"]
    assert local_store.list_dir("a/two") == ["two"]
    assert local_store.list_dir("nowhere") == []
    root = local_store.scratch_root
    assert local_store.files_on_ost(2) == [f"{root}/a/b/one"]
    assert local_store.files_on_ost(3) == [f"{root}/a/two"]
    # no symbolic link of the MDT is followed by the store
    with pytest.raises(InputError, match="a/link is not a directory in the store"):
        local_store.create("a/link/passwd.new")
    assert not os.path.exists("/etc/passwd.new")
    with pytest.raises(InputError, match="no such file in the store"):
        local_store.stat("a/link")
    with pytest.raises(InputError, match="is a directory, not a file"):
        local_store.read("a/b", 0, 1)


def test_remove_unlinks_and_dooms_the_objects_only_with_the_last_name(local_store):
    local_store.create("f", LayoutRequest(stripe_count=2))
    local_store.write("f", 0, b"hello")
    os.link(mdt(local_store, "f"), mdt(local_store, "g"))  # a hard link made through the mount
    before = objects_on_disk(local_store)
    local_store.remove("f")
    assert not local_store.exists("f") and objects_on_disk(local_store) == before
    assert local_store.read("g", 0, 10) == b"hello"
    local_store.remove("g")
    assert objects_on_disk(local_store) == set()


def test_directory_defaults_like_lfs_setstripe(local_store):
    local_store.set_default_layout("proj", DirDefault(2, 131072, "flash"))
    info = os.lstat(mdt(local_store, "proj"))
    assert stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o755
    assert os.getxattr(mdt(local_store, "proj"), DIRLOV_XATTR) == \
        b"stripe_count=2 stripe_size=131072 pool=flash"
    layout = local_store.create("proj/deep/er/file", owner=(77, 88))
    assert (layout.stripe_count, layout.stripe_size, layout.first.pool) == (2, 131072, "flash")
    assert set(layout.ost_list) <= {4, 5, 6, 7}
    # the directories made on the way inherit the default and carry the file's owner
    for made in ("proj/deep", "proj/deep/er"):
        assert os.getxattr(mdt(local_store, made), DIRLOV_XATTR) == \
            b"stripe_count=2 stripe_size=131072 pool=flash"
        assert (os.lstat(mdt(local_store, made)).st_uid,
                os.lstat(mdt(local_store, made)).st_gid) == (77, 88)
    # what a request says wins over the default; an explicit OST list ignores it
    assert local_store.create("proj/c1", LayoutRequest(stripe_count=1)).stripe_count == 1
    assert local_store.create("proj/o", LayoutRequest(ost_list=(0, 1))).ost_list == (0, 1)
    assert local_store.default_layout("proj") == DirDefault(2, 131072, "flash")
    assert local_store.default_layout("") is None
    assert local_store.create("plain").stripe_count == 4  # the site's default elsewhere
    with pytest.raises(InputError, match="no such pool"):
        local_store.set_default_layout("proj", DirDefault(2, 65536, "slow"))
    with pytest.raises(InputError, match="plain: is not a directory"):
        local_store.set_default_layout("plain", DirDefault(2, 65536))


# -- the migration from the SQLite namespace ----------------------------------------------------
def _version_1_store(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """A store as the SQLite namespace kept it: rows, xattrs and object files."""
    store_root = tmp_path / "store"
    store_root.mkdir()
    conn = sqlite3.connect(store_root / "namespace.db")
    conn.execute("CREATE TABLE schema_version (component TEXT PRIMARY KEY, version INTEGER)")
    conn.executescript(MIGRATIONS[0])
    conn.execute("INSERT INTO schema_version VALUES ('storage-local', 1)")
    for index in range(8):
        conn.execute("INSERT INTO osts(ost_index, state) VALUES (?, 'active')", (index,))
        (store_root / f"ost{index:04d}").mkdir()
    contents = {}
    for number, (name, osts) in enumerate([("u/a.dat", (0, 1)), ("b.dat", (2,)),
                                           ("u/v/c.dat", (3, 4, 5))]):
        data = payload(200_000 + number, seed=number)
        contents[name] = data
        objects = [(i, uuid.uuid4().hex) for i in osts]
        for position, (ost, oid) in enumerate(objects):
            stripes = [data[s * 65536:(s + 1) * 65536]
                       for s in range(position, -(-len(data) // 65536), len(osts))]
            (store_root / f"ost{ost:04d}" / oid).write_bytes(b"".join(stripes))
        layout = {"components": [{"stripe_size": 65536, "comp_id": 1, "mirror_id": 0,
                                  "objects": [{"ost_index": o, "object_id": i}
                                              for o, i in objects]}]}
        full = str(tmp_path / "scratch" / name)
        conn.execute("INSERT INTO files VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                     (full, len(data), 1000 + number, 2000, 0o640, 1_600_000_000.5, number,
                      json.dumps(layout)))
        conn.executemany("INSERT INTO file_osts VALUES (?, ?)", [(full, o) for o in osts])
        conn.execute("INSERT INTO xattrs VALUES (?, 'user.scratchkeeper.source', ?)",
                     (full, f"file:///{name}".encode()))
    conn.commit()
    conn.close()
    (tmp_path / "scratch").mkdir()
    return store_root, contents


@pytest.mark.parametrize("interrupted", [False, True])
def test_an_existing_store_keeps_its_files_when_the_namespace_moves_to_the_mdt(tmp_path,
                                                                               interrupted):
    store_root, contents = _version_1_store(tmp_path)
    store = LocalStripedStore(str(tmp_path / "scratch"), str(store_root), ost_count=8)
    if interrupted:  # a first migration died after moving one file
        store._migrating = True
        row = sqlite3.connect(store_root / "namespace.db").execute(
            "SELECT layout, layout_gen FROM files WHERE path LIKE '%/b.dat'").fetchone()
        layout = FileLayout.from_dict(json.loads(row[0]))
        layout = replace(layout, layout_gen=row[1], path=store.paths.resolve("b.dat"))
        (store_root / "mdt.staging").mkdir()
        (store_root / "mdt").mkdir()
        staged = store._stage_inode(layout, size=len(contents["b.dat"]), uid=1001, gid=2000,
                                    mode=0o640, mtime_ns=1_600_000_000_500_000_000,
                                    xattrs={"user.scratchkeeper.source": b"file:///b.dat"})
        store._link_staged(staged, layout.path, (1001, 2000))
        store._migrating = False
    for number, (name, data) in enumerate(contents.items()):
        assert store.read(name, 0, len(data) + 1) == data
        info = store.stat(name)
        assert (info.size, info.uid, info.gid, info.mode, info.mtime) == \
            (len(data), 1000 + number, 2000, 0o640, 1_600_000_000.5)
        assert store.layout(name).layout_gen == number
        assert store.get_xattr(name, "user.scratchkeeper.source") == f"file:///{name}".encode()
    tables = {row[0] for row in store.db.query(
        "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert not tables & {"files", "file_osts", "xattrs"}
    assert store.db.schema_version("storage-local") == len(MIGRATIONS) == 4
    assert objects_on_disk(store) == objects_in_layouts(store)
    assert len(store_files(reopen(store))) == 3


# -- the commit protocol killed at each step ------------------------------------------------------
def _dying_store(step: str, scratch: str, store_root: str) -> LocalStripedStore:
    """The store of a child that dies (no clean-up at all, exit 9) right after ``step``."""
    backend = LocalStripedStore(scratch, store_root, ost_count=8, default_stripe_count=4,
                                default_stripe_size=65536)
    real = getattr(backend, step)

    def then_die(*args, **kwargs):
        real(*args, **kwargs)
        os._exit(9)
    setattr(backend, step, then_die)
    return backend


def _die_after(step: str, scratch: str, store_root: str, relative: str) -> None:
    """Import ``relative`` in a child that dies right after ``step``."""
    _dying_store(step, scratch, store_root).import_file(relative)
    os._exit(0)


@pytest.mark.parametrize("step, committed", [
    ("_copy_in", False),           # objects filled and synced, no inode yet
    ("_stage_inode", False),       # the inode prepared in mdt.staging, intents not committing
    ("_mark_committing", False),   # intents committing (naming the staged inode), not linked
    ("_link_staged", True),        # linked, the intents not released
])
def test_a_commit_killed_after_each_step_loses_no_committed_file_and_leaves_no_half_one(
        local_store, step, committed):
    data = payload(1_000_000, seed=4)
    path = write_posix(local_store, "k/f.dat", data)
    local_store.list_osts()
    child = multiprocessing.get_context("fork").Process(
        target=_die_after, args=(step, local_store.scratch_root, str(local_store.store_root),
                                 "k/f.dat"))
    child.start()
    child.join(60)
    assert child.exitcode == 9
    staging = Path(local_store.store_root) / "mdt.staging"
    assert bool(list(staging.iterdir())) == (step in ("_stage_inode", "_mark_committing"))
    database = sqlite3.connect(Path(local_store.store_root) / "namespace.db")
    intents = database.execute("SELECT owner, committing FROM object_intents").fetchall()
    database.close()
    assert len(intents) == 4 and {owner.startswith("pid:") for owner, _ in intents} == {True}
    marked = step in ("_mark_committing", "_link_staged")
    assert {bool(flag) for _, flag in intents} == {marked}
    store = reopen(local_store)
    store.list_osts()  # the open collects what the dead process left
    assert list(staging.iterdir()) == []  # a dead process's staging inode goes
    assert store.exists("k/f.dat") == committed
    assert path.read_bytes() == data  # the POSIX file is unlinked only after the commit
    if committed:
        assert store.read("k/f.dat", 0, len(data)) == data
        assert objects_on_disk(store) == objects_in_layouts(store) and \
            len(objects_on_disk(store)) == 4  # released, nothing deleted
        store.import_file("k/f.dat")  # finishes: the POSIX file goes
        assert not path.exists()
    else:  # committing or not, never linked (the staged inode was still there): deleted
        assert objects_on_disk(store) == set() and store_files(store) == []
    assert store.db.query("SELECT * FROM object_intents") == []


def _change_and_die(operation: str, step: str, scratch: str, store_root: str) -> None:
    """Run ``operation`` on k/f.dat in a child that dies right after ``step``."""
    backend = _dying_store(step, scratch, store_root)
    if operation == "add_mirror":
        backend.add_mirror("k/f.dat")
    elif operation == "remove_mirror":
        backend.remove_mirror("k/f.dat", 2)
    elif operation == "replace":
        backend.import_file("k/f.dat", replace=True)
    else:
        backend.remove("k/f.dat")
    os._exit(0)


@pytest.mark.parametrize("operation, step, mirrors", [
    ("add_mirror", "_mark_committing", 1),   # the mirror's objects synced, not switched in
    ("add_mirror", "_set_layout", 2),        # switched in, the journal not committed
    ("remove_mirror", "_claim_dropped", 2),  # intents naming the inode, not switched out
    ("remove_mirror", "_set_layout", 1),     # switched out, the doom not committed
    ("remove", "_move_to_staging", 0),       # the name gone, the objects not doomed
    ("replace", "_link_staged", 1),          # the new file renamed over, the old not doomed
])
def test_a_layout_change_killed_at_each_step_leaves_no_object_that_no_file_holds(
        local_store, operation, step, mirrors):
    """A crash between the layout switch (an xattr) and the namespace's commit (SQLite) is
    settled by the next open from the inode itself: the objects its layout holds are kept,
    the others deleted; none leaks, none is lost."""
    data = payload(700_000, seed=5)
    write_posix(local_store, "k/f.dat", data)
    local_store.import_file("k/f.dat")
    if operation == "remove_mirror":
        local_store.add_mirror("k/f.dat")
    if operation == "replace":
        data = payload(300_000, seed=6)
        write_posix(local_store, "k/f.dat", data)
    child = multiprocessing.get_context("fork").Process(
        target=_change_and_die, args=(operation, step, local_store.scratch_root,
                                      str(local_store.store_root)))
    child.start()
    child.join(60)
    assert child.exitcode == 9
    store = reopen(local_store)
    store.list_osts()
    assert objects_on_disk(store) == objects_in_layouts(store)
    assert store.db.query("SELECT * FROM object_intents") == []
    assert list((Path(local_store.store_root) / "mdt.staging").iterdir()) == []
    if mirrors:
        layout = store.layout("k/f.dat")
        assert len(layout.mirror_ids) == mirrors
        assert len(objects_on_disk(store)) == 4 * mirrors
        assert store.read("k/f.dat", 0, len(data)) == data
    else:
        assert not store.exists("k/f.dat") and objects_on_disk(store) == set()


def _commit_rebuild_and_die(scratch: str, store_root: str, data: bytes) -> None:
    backend = LocalStripedStore(scratch, store_root, ost_count=8, default_stripe_count=4,
                                default_stripe_size=65536)
    (rebuild,) = backend.open_rebuilds()
    for extent in rebuild.lost:
        backend.write_rebuild(rebuild, extent.offset, data[extent.offset:extent.end])

    def die(*args, **kwargs):  # after the setxattr, before the journal's commit
        os._exit(9)
    backend._finish = die
    backend.commit_rebuild(rebuild)
    os._exit(0)


@pytest.mark.parametrize("then", ["open_rebuilds", "abort_rebuild", "commit_rebuild"])
def test_a_rebuild_switched_before_a_crash_is_finished_never_deleted(local_store, then):
    data = payload(500_000, seed=6)
    local_store.create("r", LayoutRequest(stripe_count=4, stripe_size=65536))
    local_store.write("r", 0, data)
    layout = local_store.layout("r")
    dead = layout.ost_list[2]
    local_store.fail_ost(dead)
    rebuild = local_store.begin_rebuild("r", {dead: local_store.pick_substitute(layout)})
    child = multiprocessing.get_context("fork").Process(
        target=_commit_rebuild_and_die,
        args=(local_store.scratch_root, str(local_store.store_root), data))
    child.start()
    child.join(60)
    assert child.exitcode == 9
    store = reopen(local_store)
    assert store.layout("r").layout_gen == layout.layout_gen + 1  # the switch happened
    if then == "open_rebuilds":
        assert store.open_rebuilds() == []
    elif then == "abort_rebuild":
        store.abort_rebuild(rebuild)
    else:
        store.commit_rebuild(rebuild)
    assert store.open_rebuilds() == []
    assert store.read("r", 0, len(data)) == data
    store.restore_ost(dead)  # the replaced object, doomed, goes now
    assert objects_on_disk(store) == objects_in_layouts(store)
    assert store.db.query("SELECT * FROM object_intents") == []


def test_collect_garbage_says_what_it_did(local_store):
    local_store.list_osts()
    dead = "pid:999999999:1"  # no such process
    kept, gone = (1, uuid.uuid4().hex), (2, uuid.uuid4().hex)
    for ost, oid in (kept, gone):
        (local_store._ost_dir(ost) / oid).write_bytes(b"x")
    with local_store.db.transaction() as conn:
        conn.execute("INSERT INTO object_intents(ost_index, object_id, owner, committing) "
                     "VALUES (?, ?, ?, 1)", (*kept, dead))
        conn.execute("INSERT INTO object_intents(ost_index, object_id, owner, committing) "
                     "VALUES (?, ?, ?, 0)", (*gone, dead))
    staged = Path(local_store.store_root) / "mdt.staging" / f"{dead}.{uuid.uuid4().hex}"
    staged.write_bytes(b"")
    mine = local_store._stage_inode(local_store.create("s"), size=0, uid=0, gid=0, mode=0o644,
                                    mtime_ns=0)  # a live process's: kept
    report = local_store.collect_garbage()
    assert [o.object_id for o in report.released] == [kept[1]]
    assert [o.object_id for o in report.deleted] == [gone[1]]
    assert report.staging == [staged.name]
    assert (local_store._ost_dir(1) / kept[1]).exists()
    assert not (local_store._ost_dir(2) / gone[1]).exists()
    assert os.listdir(Path(local_store.store_root) / "mdt.staging") == [mine]
    assert report.summary() == ("1 object(s) deleted, 1 committing intent(s) released, "
                                "1 staging entry removed")


def test_what_fails_after_the_link_never_undoes_it(local_store, monkeypatch):
    """A commit whose inode is linked keeps its objects whatever fails next: a directory sync
    is an error (the name may not be durable), a locked namespace leaves the intents to the
    collector."""
    from scratchkeeper.state import DatabaseBusy
    from scratchkeeper.storage.local import mdt as local_mdt

    def broken_sync(dir_fd):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(local_mdt, "fsync_fd_dir", broken_sync)
    with pytest.raises(OSError, match="Input/output error"):
        local_store.create("synced")
    monkeypatch.undo()
    assert local_store.exists("synced")
    assert objects_in_layouts(local_store) == objects_on_disk(local_store) != set()

    def busy(*args):
        raise DatabaseBusy("namespace.db: locked")
    monkeypatch.setattr(local_store, "_release_claim", busy)
    layout = local_store.create("released-later")
    monkeypatch.undo()
    assert local_store.read(layout.path, 0, 1) == b""
    # both commits' intents stay committing: the collector releases them once this process
    # is gone, without deleting anything
    committing = local_store.db.query("SELECT committing FROM object_intents")
    assert [row["committing"] for row in committing] == [1] * (2 * layout.stripe_count)


def test_another_hosts_processes_are_never_judged_gone_from_here(local_store):
    """The store's backing is shared by every host: a pid of another host means nothing here,
    so this host's collection leaves that process's intents and staging entries alone, and
    collects its own dead ones, named with its host or (older stores) without one."""
    from scratchkeeper.storage.local.processes import host_name, process_alive, process_owner

    local_store.list_osts()
    assert process_owner().endswith(f"@{host_name()}") and process_alive(process_owner())
    elsewhere = "pid:999999999:1@another-host"   # no such pid here: but it is another host's
    dead_here = f"pid:999999999:1@{host_name()}"
    assert process_alive(elsewhere) and not process_alive(dead_here)
    assert not process_alive("pid:999999999:1")  # an older store's name: this host's
    theirs, ours = (1, uuid.uuid4().hex), (2, uuid.uuid4().hex)
    for (ost, oid), owner in ((theirs, elsewhere), (ours, dead_here)):
        (local_store._ost_dir(ost) / oid).write_bytes(b"x")
        with local_store.db.transaction() as conn:
            conn.execute("INSERT INTO object_intents(ost_index, object_id, owner, committing) "
                         "VALUES (?, ?, ?, 0)", (ost, oid, owner))
    staging = Path(local_store.store_root) / "mdt.staging"
    their_entry = staging / f"{elsewhere}.{uuid.uuid4().hex}"
    our_entry = staging / f"{dead_here}.{uuid.uuid4().hex}"
    for entry in (their_entry, our_entry):
        entry.write_bytes(b"")
    report = local_store.collect_garbage()
    assert [o.object_id for o in report.deleted] == [ours[1]]
    assert report.staging == [our_entry.name]
    assert (local_store._ost_dir(1) / theirs[1]).exists() and their_entry.exists()
