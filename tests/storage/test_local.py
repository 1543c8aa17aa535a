"""The local striped store beyond the shared contract: import, OST failure, crash safety."""

from __future__ import annotations

import errno
import fcntl
import mmap
import multiprocessing
import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest

from scratchkeeper.errors import InputError, PermissionDenied, StorageError, TargetUnavailable
from scratchkeeper.storage import LayoutRequest
from scratchkeeper.storage.local import LocalStripedStore
from scratchkeeper.storage.sources import NoSpace


def payload(size: int, seed: int = 5) -> bytes:
    return random.Random(seed).randbytes(size)


def objects_on_disk(store: LocalStripedStore) -> set[str]:
    found = set()
    for ost_dir in Path(store.store_root).glob("ost*"):
        found |= {p.name for p in ost_dir.iterdir() if not p.name.startswith(".")}
    return found


def store_files(store: LocalStripedStore) -> list[str]:
    """Every file of the namespace: the regular files of the MDT."""
    mdt = Path(store.store_root) / "mdt"
    return sorted(str(Path(store.scratch_root) / p.relative_to(mdt)) for p in mdt.rglob("*")
                  if p.is_file() and not p.is_symlink())


def objects_in_layouts(store: LocalStripedStore) -> set[str]:
    found = set()
    for path in store_files(store):
        found |= {o.object_id for c in store.layout(path).components for o in c.objects}
    return found


def reopen(store: LocalStripedStore) -> LocalStripedStore:
    return LocalStripedStore(store.scratch_root, str(store.store_root), ost_count=store.ost_count,
                             default_stripe_count=store.default_stripe_count,
                             default_stripe_size=store.default_stripe_size)


def write_posix(store: LocalStripedStore, relative: str, data: bytes) -> Path:
    path = Path(store.scratch_root) / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_import_moves_the_bytes_and_keeps_owner_mode_mtime(local_store):
    data = payload(1_234_567)
    path = write_posix(local_store, "u1/input.dat", data)
    os.chown(path, 1234, 5678)
    os.chmod(path, 0o640)
    os.utime(path, (1_700_000_000, 1_700_000_000))
    layout = local_store.import_file(str(path), stripe_count=3, stripe_size=131072)
    assert not path.exists()
    assert (layout.stripe_count, layout.stripe_size) == (3, 131072)
    info = local_store.stat(str(path))
    assert (info.size, info.uid, info.gid, info.mode, info.mtime) == \
        (len(data), 1234, 5678, 0o640, 1_700_000_000)
    assert local_store.read(str(path), 0, len(data)) == data


def test_objects_hold_their_stripes_back_to_back_as_lustre_does(local_store):
    data = payload(5 * 65536 + 100)
    path = write_posix(local_store, "obj", data)
    layout = local_store.import_file(str(path), stripe_count=4, stripe_size=65536)
    unit = 65536
    for position, obj in enumerate(layout.first.objects):
        expected = b"".join(data[s * unit:(s + 1) * unit] for s in range(position, 6, 4))
        on_disk = (Path(local_store.store_root) / f"ost{obj.ost_index:04d}" / obj.object_id)
        assert on_disk.read_bytes() == expected


def test_import_refuses_symlinks(local_store, tmp_path):
    outside = tmp_path / "secret"
    outside.write_bytes(b"x")
    link = Path(local_store.scratch_root) / "link"
    link.symlink_to(outside)
    with pytest.raises(InputError, match="symbolic link"):
        local_store.import_file(str(link))
    (Path(local_store.scratch_root) / "dirlink").symlink_to(tmp_path)
    with pytest.raises(InputError, match="outside the scratch root"):
        local_store.import_file(str(Path(local_store.scratch_root) / "dirlink" / "secret"))
    assert outside.read_bytes() == b"x"


def test_import_interrupted_mid_copy_leaves_the_posix_file_and_no_object(local_store,
                                                                           monkeypatch):
    data = payload(300_000)
    path = write_posix(local_store, "half", data)

    def broken_copy(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(local_store, "_copy_in", broken_copy)
    with pytest.raises(NoSpace, match="half: the store's file system is full"):
        local_store.import_file(str(path))
    assert path.read_bytes() == data
    assert not local_store.exists(str(path))
    assert objects_on_disk(local_store) == set()


def test_import_finishes_after_a_crash_between_commit_and_unlink(local_store):
    data = payload(100_000)
    path = write_posix(local_store, "twice", data)
    stamp = os.stat(path).st_mtime
    local_store.import_file(str(path))
    # what a crash before the unlink leaves: the committed store file and the POSIX file
    path.write_bytes(data)
    os.utime(path, (stamp, stamp))
    layout = local_store.import_file(str(path))
    assert not path.exists() and local_store.read(layout.path, 0, len(data)) == data


def _import_child(scratch: str, store: str, relative: str) -> None:
    backend = LocalStripedStore(scratch, store, ost_count=8, default_stripe_count=4,
                                default_stripe_size=65536)
    backend.import_file(relative)


def test_kill_9_during_import_leaves_one_whole_copy_and_no_leaked_object(local_store):
    data = payload(24 << 20, seed=11)
    rng = random.Random(3)
    context = multiprocessing.get_context("fork")
    local_store.list_osts()  # create the store before the children race for it
    leaked: set[str] = set()
    for trial in range(6):
        relative = f"kill/{trial}.dat"
        path = write_posix(local_store, relative, data)
        child = context.Process(target=_import_child,
                                args=(local_store.scratch_root, str(local_store.store_root),
                                      relative))
        child.start()
        time.sleep(rng.uniform(0.0, 0.25))
        os.kill(child.pid, signal.SIGKILL)
        child.join()
        store = reopen(local_store)  # the next user collects what the dead one left
        store.list_osts()
        if store.exists(relative):
            assert store.read(relative, 0, len(data)) == data
        else:
            assert path.read_bytes() == data
        if path.exists() and store.exists(relative):
            store.import_file(relative)  # finishes the interrupted import
            assert not path.exists()
        # no half file in the namespace, nothing staged, no intent left; every committed
        # file's objects there; at most the objects of the commit in flight leaked (killed
        # between marking its intents committing and linking its inode: docs/mount.rst)
        assert store_files(store) == sorted(str(Path(store.scratch_root) / f"kill/{n}.dat")
                                            for n in range(trial + 1) if store.exists(
                                                f"kill/{n}.dat"))
        assert list((Path(store.store_root) / "mdt.staging").iterdir()) == []
        assert store.db.query("SELECT * FROM object_intents") == []
        assert objects_in_layouts(store) <= objects_on_disk(store)
        leaked |= objects_on_disk(store) - objects_in_layouts(store)
        assert len(leaked) <= 4 * (trial + 1)
    for trial in range(6):
        relative = f"kill/{trial}.dat"
        if reopen(local_store).exists(relative):
            assert reopen(local_store).read(relative, 0, len(data)) == data


def test_failed_ost_makes_its_stripes_unreadable_until_restored(local_store):
    data = payload(600_000)
    path = write_posix(local_store, "f", data)
    layout = local_store.import_file(str(path), stripe_count=4, stripe_size=65536)
    dead = layout.ost_list[1]
    local_store.fail_ost(dead)
    assert local_store.read(str(path), 0, 65536) == data[:65536]  # stripe 0 is elsewhere
    with pytest.raises(TargetUnavailable) as caught:
        local_store.read(str(path), 0, len(data))
    assert caught.value.ost_index == dead and caught.value.path == layout.path
    with pytest.raises(TargetUnavailable):
        local_store.write(str(path), 65536 - 1, b"xy")  # spans stripes 0 and 1: nothing written
    local_store.write(str(path), 0, b"y")  # stripe 0 alone is on a healthy OST
    assert local_store.files_on_ost(dead) == [layout.path]
    local_store.restore_ost(dead)
    assert local_store.read(str(path), 0, len(data)) == b"y" + data[1:]


def test_a_mirror_serves_the_stripes_of_a_failed_ost(local_store):
    data = payload(500_000)
    path = write_posix(local_store, "m", data)
    layout = local_store.import_file(str(path), stripe_count=2, stripe_size=65536)
    local_store.add_mirror(str(path))
    local_store.fail_ost(layout.ost_list[0])
    assert local_store.read(str(path), 0, len(data)) == data


def test_rebuild_survives_a_restart_and_old_objects_go_once_the_ost_is_back(local_store):
    data = payload(400_000)
    path = write_posix(local_store, "rb", data)
    layout = local_store.import_file(str(path), stripe_count=4, stripe_size=65536)
    dead = layout.ost_list[3]
    local_store.fail_ost(dead)
    rebuild = local_store.begin_rebuild(str(path), {dead: 6})
    half = rebuild.lost[: len(rebuild.lost) // 2]
    for extent in half:
        local_store.write_rebuild(rebuild, extent.offset, data[extent.offset:extent.end])
    restarted = reopen(local_store)
    (pending,) = restarted.open_rebuilds()
    assert pending.patched == half and pending.missing == rebuild.lost[len(half):]
    for extent in pending.missing:
        restarted.write_rebuild(pending, extent.offset, data[extent.offset:extent.end])
    restarted.commit_rebuild(pending)
    assert restarted.read(str(path), 0, len(data)) == data
    stale = layout.first.objects[3].object_id
    restarted.restore_ost(dead)
    assert stale not in objects_on_disk(restarted)
    assert objects_on_disk(restarted) == objects_in_layouts(restarted)


def _spy_opens(monkeypatch, refuse_direct: bool = False) -> list[tuple[str, int]]:
    """Record the flags objects are opened with; optionally refuse O_DIRECT as tmpfs once did."""
    opened, real_open = [], os.open

    def spy(path, flags, *args, **kwargs):
        if "/ost" in str(path):
            opened.append((os.path.basename(path), flags))
            if refuse_direct and flags & os.O_DIRECT:
                raise OSError(errno.EINVAL, "Invalid argument", str(path))
        return real_open(path, flags, *args, **kwargs)
    monkeypatch.setattr(os, "open", spy)
    return opened


def _rebuild_tail_holder(store, size):
    """A file whose last, short stripe sits on the OST that fails; its rebuild begun."""
    data = payload(size, seed=11)
    store.create("tail.bin", LayoutRequest(stripe_count=4, stripe_size=64 * 1024))
    store.write("tail.bin", 0, data)
    layout = store.layout("tail.bin")
    last = (size - 1) // (64 * 1024) % 4  # the stripe position of the file's last byte
    failed = layout.ost_list[last]
    store.fail_ost(failed)
    rebuild = store.begin_rebuild("tail.bin", {failed: store.pick_substitute(layout)})
    return data, rebuild


def test_rebuild_writes_aligned_stripes_direct_and_the_short_tail_through_the_cache(
        local_store, monkeypatch):
    data, rebuild = _rebuild_tail_holder(local_store, 3 * 4 * 64 * 1024 + 4 * 64 * 1024 - 1000)
    assert rebuild.lost[-1].length % 4096  # the tail is not block-aligned
    opened = _spy_opens(monkeypatch)
    local_store.write_rebuild_batch(rebuild, [(e.offset, data[e.offset:e.end])
                                              for e in rebuild.lost])
    direct = [name for name, flags in opened if flags & os.O_DIRECT]
    buffered = [name for name, flags in opened if not flags & os.O_DIRECT]
    assert len(direct) == 1 and buffered == direct  # one object: aligned stripes, then the tail
    local_store.commit_rebuild(rebuild)
    assert local_store.read("tail.bin", 0, len(data)) == data


def test_page_aligned_buffers_are_written_direct_without_a_staging_copy(local_store,
                                                                         monkeypatch):
    from scratchkeeper.storage.local import objects as local
    data, rebuild = _rebuild_tail_holder(local_store, 4 * 4 * 64 * 1024)
    monkeypatch.setattr(local, "_direct_buffers", threading.local())
    pieces = _aligned_pieces(rebuild, data)
    opened = _spy_opens(monkeypatch)
    local_store.write_rebuild_batch(rebuild, pieces)
    assert any(flags & os.O_DIRECT for _, flags in opened)
    assert not hasattr(local._direct_buffers, "buffer")  # no copy through the staging buffer
    local_store.write_rebuild_batch(rebuild, [(e.offset, data[e.offset:e.end])
                                              for e in rebuild.lost[:1]])
    assert hasattr(local._direct_buffers, "buffer")  # bytes of unknown alignment: copied
    local_store.commit_rebuild(rebuild)
    assert local_store.read("tail.bin", 0, len(data)) == data


def _aligned_pieces(rebuild, data):
    """The lost ranges in page-aligned buffers, as the receive-buffer pool hands them out."""
    pieces = []
    for extent in rebuild.lost:
        buffer = mmap.mmap(-1, extent.length)
        buffer[:] = data[extent.offset:extent.end]
        pieces.append((extent.offset, buffer))
    return pieces


def test_aligned_pieces_side_by_side_in_the_object_go_in_one_pwritev(local_store, monkeypatch):
    """A lost stripe's chunks are apart in the file and contiguous in the substitute object:
    one vectored write for all of them, and the bytes land where they belong."""
    data, rebuild = _rebuild_tail_holder(local_store, 4 * 4 * 64 * 1024)
    calls, real_pwritev = [], os.pwritev

    def pwritev(handle, buffers, offset):
        calls.append((len(buffers), offset))
        return real_pwritev(handle, buffers, offset)
    monkeypatch.setattr(os, "pwritev", pwritev)
    pieces = _aligned_pieces(rebuild, data)
    assert len(pieces) == 4
    local_store.write_rebuild_batch(rebuild, pieces)
    assert calls == [(4, 0)]
    local_store.commit_rebuild(rebuild)
    assert local_store.read("tail.bin", 0, len(data)) == data


def test_a_short_pwritev_is_continued_where_it_stopped(tmp_path, monkeypatch):
    from scratchkeeper.storage.base import pwritev_all
    buffers = [bytes([n]) * 5000 for n in range(1, 5)]
    real_pwritev = os.pwritev

    def short(handle, views, offset):  # at most 3000 bytes per call, as a signal may cut it
        taken, left = [], 3000
        for view in views:
            if left <= 0:
                break
            taken.append(view[:left])
            left -= len(taken[-1])
        return real_pwritev(handle, taken, offset)
    monkeypatch.setattr(os, "pwritev", short)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        pwritev_all(fd, buffers, 100)
        assert os.pread(fd, 30000, 0) == bytes(100) + b"".join(buffers)
    finally:
        os.close(fd)


@pytest.mark.parametrize("refusal", ["open", "write", "writev"])
def test_rebuild_falls_back_to_the_page_cache_where_o_direct_is_refused(local_store, monkeypatch,
                                                                        refusal):
    data, rebuild = _rebuild_tail_holder(local_store, 4 * 4 * 64 * 1024)
    pieces = [(e.offset, data[e.offset:e.end]) for e in rebuild.lost]
    if refusal == "open":
        opened = _spy_opens(monkeypatch, refuse_direct=True)
    else:  # a device with larger logical blocks than DIRECT_ALIGN refuses the write itself
        name = "pwrite" if refusal == "write" else "pwritev"
        opened, real_write = _spy_opens(monkeypatch), getattr(os, name)

        def write(handle, buffer, offset):
            if os.get_blocking(handle) and fcntl.fcntl(handle, fcntl.F_GETFL) & os.O_DIRECT:
                raise OSError(errno.EINVAL, "Invalid argument")
            return real_write(handle, buffer, offset)
        monkeypatch.setattr(os, name, write)
        if refusal == "writev":
            pieces = _aligned_pieces(rebuild, data)
    local_store.write_rebuild_batch(rebuild, pieces)
    assert any(flags & os.O_DIRECT for _, flags in opened)
    assert any(not flags & os.O_DIRECT for _, flags in opened)
    local_store.commit_rebuild(rebuild)
    assert local_store.read("tail.bin", 0, len(data)) == data


def test_short_writes_are_completed_not_dropped(local_store, monkeypatch):
    """pwrite may write fewer bytes than asked (a signal, a full quota): the rest follows."""
    real_pwrite = os.pwrite
    monkeypatch.setattr(os, "pwrite",
                        lambda handle, data, offset: real_pwrite(handle, data[:1000], offset))
    data = payload(300_001, seed=3)
    local_store.create("short.bin", LayoutRequest(stripe_count=3, stripe_size=64 * 1024))
    local_store.write("short.bin", 0, data)
    monkeypatch.undo()
    assert local_store.read("short.bin", 0, len(data)) == data


def test_remove_frees_every_object(local_store):
    path = write_posix(local_store, "gone", payload(300_000))
    local_store.import_file(str(path))
    local_store.remove(str(path))
    assert objects_on_disk(local_store) == set()


def test_pools_and_unknown_pool(local_store):
    layout = local_store.create("p", LayoutRequest(stripe_count=2, pool="flash"))
    assert set(layout.ost_list) <= {4, 5, 6, 7}
    with pytest.raises(InputError, match="no such pool"):
        local_store.create("q", LayoutRequest(pool="slow"))


def test_fewer_osts_than_the_store_has_is_refused(local_store):
    local_store.list_osts()
    smaller = LocalStripedStore(local_store.scratch_root, str(local_store.store_root), ost_count=4)
    with pytest.raises(StorageError, match="ost_count"):
        smaller.list_osts()


def test_explicit_ost_on_a_failed_ost_is_refused(local_store):
    local_store.fail_ost(2)
    with pytest.raises(TargetUnavailable):
        local_store.create("x", LayoutRequest(ost_list=(1, 2)))
    assert not local_store.exists("x")
    with pytest.raises(InputError, match="no such OST"):
        local_store.fail_ost(99)


def _busy_writer(scratch: str, store: str, worker: int) -> None:
    backend = LocalStripedStore(scratch, store, ost_count=8, default_stripe_count=4,
                                default_stripe_size=65536)
    for number in range(8):
        data = payload(150_000, seed=worker * 100 + number)
        layout = backend.create(f"w{worker}/{number}", LayoutRequest(stripe_count=3))
        backend.write(layout.path, 0, data)
        backend.set_xattr(layout.path, "user.scratchkeeper.source", b"file:///x")
        if backend.read(layout.path, 0, len(data)) != data:
            raise SystemExit(3)


def test_several_processes_use_the_store_at_once(local_store):
    local_store.list_osts()
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_busy_writer, args=(local_store.scratch_root,
                                                          str(local_store.store_root), w))
               for w in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert [w.exitcode for w in workers] == [0, 0, 0, 0]
    assert len(store_files(local_store)) == 32
    assert objects_on_disk(local_store) == objects_in_layouts(local_store)


def test_import_with_replace_supersedes_a_different_file(local_store):
    path = write_posix(local_store, "u1/restaged.dat", payload(300_000, seed=1))
    local_store.import_file(str(path))
    local_store.set_xattr(str(path), "user.scratchkeeper.source", b"http://h/old")
    before = objects_on_disk(local_store)
    newer = payload(70_000, seed=2)
    path = write_posix(local_store, "u1/restaged.dat", newer)
    with pytest.raises(InputError, match="different file already exists"):
        local_store.import_file(str(path))
    local_store.import_file(str(path), replace=True)
    assert local_store.read(str(path), 0, len(newer) + 10) == newer
    assert local_store.get_xattr(str(path), "user.scratchkeeper.source") is None
    assert not path.exists()
    # the superseded file's objects are collected; only the new file's remain
    assert objects_on_disk(local_store) == objects_in_layouts(local_store)
    assert not (before & objects_on_disk(local_store))


# -- import_file against files and directories a user changes while root imports ---------------
def test_import_refuses_a_symlinked_directory_even_inside_the_scratch_root(local_store):
    data = payload(10_000)
    path = write_posix(local_store, "real/f.dat", data)
    (Path(local_store.scratch_root) / "alias").symlink_to("real")
    with pytest.raises(InputError, match=f"{local_store.scratch_root}/alias is a symbolic link"):
        local_store.import_file("alias/f.dat")
    assert path.read_bytes() == data and not local_store.exists("alias/f.dat")
    write_posix(local_store, "plain", b"x")
    with pytest.raises(InputError, match="plain is not a directory"):
        local_store.import_file("plain/f.dat")
    with pytest.raises(InputError, match="no such file to import"):
        local_store.import_file("nowhere/f.dat")
    assert objects_on_disk(local_store) == set()


def test_a_directory_swapped_for_a_link_during_the_import_leads_nowhere(local_store, tmp_path,
                                                                        monkeypatch):
    data = payload(200_000, seed=8)
    path = write_posix(local_store, "u1/data.bin", data)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "data.bin").write_bytes(b"not yours")
    real_copy_in = local_store._copy_in

    def copy_then_swap(*args, **kwargs):
        real_copy_in(*args, **kwargs)
        # the user renames the directory and puts a link to another one at its name
        path.parent.rename(path.parent.with_name("u1.moved"))
        path.parent.symlink_to(elsewhere)

    monkeypatch.setattr(local_store, "_copy_in", copy_then_swap)
    layout = local_store.import_file(str(path))
    assert (elsewhere / "data.bin").read_bytes() == b"not yours"  # not unlinked through the link
    assert not (Path(local_store.scratch_root) / "u1.moved" / "data.bin").exists()
    assert local_store.read(layout.path, 0, len(data)) == data


def test_a_file_replaced_during_the_import_is_left_in_place(local_store, monkeypatch):
    data = payload(100_000, seed=9)
    path = write_posix(local_store, "u1/swap.bin", data)
    real_copy_in = local_store._copy_in

    def copy_then_replace(*args, **kwargs):
        real_copy_in(*args, **kwargs)
        newer = path.with_name("newer")
        newer.write_bytes(b"written later")
        newer.rename(path)

    monkeypatch.setattr(local_store, "_copy_in", copy_then_replace)
    layout = local_store.import_file(str(path))
    assert path.read_bytes() == b"written later"
    assert local_store.read(layout.path, 0, len(data)) == data


def test_import_refuses_a_file_of_another_owner_when_told_whose_it_must_be(local_store):
    data = payload(50_000, seed=10)
    path = write_posix(local_store, "u1/owned.dat", data)
    os.chown(path, 1234, 1234)
    with pytest.raises(PermissionDenied, match=f"^{path}: owned by uid 1234, not uid 999$"):
        local_store.import_file(str(path), expect_uid=999)
    assert path.read_bytes() == data and not local_store.exists(str(path))
    assert objects_on_disk(local_store) == set()
    stamp = os.stat(path).st_mtime
    local_store.import_file(str(path), expect_uid=1234)
    assert not path.exists() and local_store.stat(str(path)).uid == 1234
    # what a crash between commit and unlink leaves, now owned by someone else: not unlinked
    path.write_bytes(data)
    os.utime(path, (stamp, stamp))
    os.chown(path, 4321, 4321)
    with pytest.raises(PermissionDenied, match="owned by uid 4321, not uid 1234"):
        local_store.import_file(str(path), expect_uid=1234)
    assert path.read_bytes() == data


def test_import_refuses_a_fifo_without_waiting_for_a_writer(local_store):
    fifo = Path(local_store.scratch_root) / "pipe"
    os.mkfifo(fifo)

    def hung(signum, frame):
        raise TimeoutError("import_file blocked opening a FIFO")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    try:
        with pytest.raises(InputError, match="not a regular file"):
            local_store.import_file(str(fifo))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert fifo.exists()


def test_rebuilds_committed_together_switch_in_one_transaction(local_store, monkeypatch):
    """The files of one OST failure that finish together cost one namespace transaction (its
    journal syncs) and one sync of each substitute directory, not one of each per file."""
    from scratchkeeper.storage.local import rebuild as local_rebuild
    datas = [os.urandom(3 * 64 * 1024) for _ in range(3)]
    rebuilds = []
    for number, data in enumerate(datas):
        local_store.create(f"f{number}", LayoutRequest(stripe_count=3, stripe_size=64 * 1024,
                                                        ost_list=(0, 1, 2)))
        local_store.write(f"f{number}", 0, data)
    local_store.fail_ost(1)
    for number, data in enumerate(datas):
        rebuild = local_store.begin_rebuild(f"f{number}", {1: 5})
        local_store.write_rebuild_batch(rebuild, [(e.offset, data[e.offset:e.end])
                                                  for e in rebuild.lost], record=False)
        rebuilds.append(rebuild)
    transactions, synced_dirs = [], []
    real_transaction, real_fsync_dir = local_store.db.transaction, local_rebuild.fsync_dir
    monkeypatch.setattr(local_store.db, "transaction",
                        lambda *a, **k: transactions.append(1) or real_transaction(*a, **k))
    monkeypatch.setattr(local_rebuild, "fsync_dir",
                        lambda path: synced_dirs.append(path) or real_fsync_dir(path))
    results = local_store.commit_rebuilds([(r, r.lost) for r in rebuilds])
    assert [layout.ost_list for layout in results] == [(0, 5, 2)] * 3
    assert len(transactions) == 1 and len(synced_dirs) == 1
    assert [local_store.read(f"f{n}", 0, len(d)) for n, d in enumerate(datas)] == datas


def test_garbage_collection_forgets_every_deleted_object_in_one_transaction(local_store,
                                                                            monkeypatch):
    """Objects doomed while their OST was down are deleted once it is back: many objects,
    one namespace transaction (a crash in between leaves intents of deleted objects, which
    the next collection forgets)."""
    for number in range(4):
        local_store.create(f"g{number}", LayoutRequest(stripe_count=2, stripe_size=64 * 1024,
                                                        ost_list=(0, 1)))
        local_store.write(f"g{number}", 0, os.urandom(128 * 1024))
    local_store.fail_ost(1)
    for number in range(4):
        local_store.remove(f"g{number}")  # OST 1's objects wait for it to come back
    doomed = local_store.db.query("SELECT object_id FROM object_intents WHERE ost_index = 1")
    assert len(doomed) == 4
    transactions = []
    real_transaction = local_store.db.transaction
    monkeypatch.setattr(local_store.db, "transaction",
                        lambda *a, **k: transactions.append(1) or real_transaction(*a, **k))
    local_store.restore_ost(1)  # its own state change, then the collection
    assert len(transactions) == 2
    assert local_store.db.query("SELECT object_id FROM object_intents") == []
    assert not [name for name in os.listdir(local_store._ost_dir(1)) if name in
                {row["object_id"] for row in doomed}]


def cached_bytes(paths) -> int:
    """Bytes of ``paths`` in the page cache (util-linux fincore)."""
    import subprocess

    done = subprocess.run(["fincore", "--bytes", "--noheadings", "--raw", "--output", "RES",
                           *map(str, paths)], capture_output=True, text=True, check=True)
    return sum(int(line) for line in done.stdout.split())


@pytest.mark.skipif(not os.path.exists("/usr/bin/fincore"), reason="no fincore (util-linux)")
def test_drop_cache_empties_the_page_cache_of_the_files_objects_only(local_store):
    data = payload(1 << 20)
    layout = local_store.create("hot", LayoutRequest(stripe_count=4))
    local_store.write(layout.path, 0, data)
    other = local_store.create("other", LayoutRequest(stripe_count=2))
    local_store.write(other.path, 0, data)
    local_store.add_mirror(layout.path)  # the mirror's objects are dropped too
    objects = [local_store._object_path(o) for c in local_store.layout(layout.path).components
               for o in c.objects]
    others = [local_store._object_path(o) for c in local_store.layout(other.path).components
              for o in c.objects]
    assert len(objects) == 8
    for path in objects + others:  # into the cache
        path.read_bytes()
    assert cached_bytes(objects) >= 2 << 20 and cached_bytes(others) >= 1 << 20
    local_store.drop_cache("hot")
    assert cached_bytes(objects) == 0
    assert cached_bytes(others) >= 1 << 20  # another file's pages stay
    assert local_store.read(layout.path, 0, len(data)) == data
    local_store.fail_ost(objects[0].parent.name and int(objects[0].parent.name[3:]))
    local_store.drop_cache("hot")  # an object on a failed OST is skipped
    with pytest.raises(InputError):
        local_store.drop_cache("absent")
