"""No write of the local store is half done (issue 46): an object that cannot be reached, or a
full file system met midway, changes no byte; the bytes read back once the OSTs are up are the
old ones or the new ones, never a mix (docs/storage.rst, "All or nothing")."""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
import tempfile
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from scratchkeeper.errors import TargetUnavailable
from scratchkeeper.storage.layout import FileLayout, StripeObject
from scratchkeeper.storage.local import LocalStripedStore
from scratchkeeper.storage.sources import NoSpace

STRIPE = 65536


def make_store(root: Path, *, ost_count: int = 4) -> LocalStripedStore:
    (root / "scratch").mkdir()
    return LocalStripedStore(str(root / "scratch"), str(root / "store"), ost_count=ost_count,
                             default_stripe_count=2, default_stripe_size=STRIPE)


def stored(store: LocalStripedStore, name: str, data: bytes) -> FileLayout:
    layout = store.create(name)
    store.write(name, 0, data)
    return layout


def test_a_write_with_a_mirror_on_a_lost_ost_writes_no_mirror(tmp_path):
    """An OST gone without ``fail-ost`` (a dead server: its directory is gone, the store still
    counts it active): the write is refused before any mirror is written."""
    store = make_store(tmp_path)
    data = os.urandom(3 * STRIPE)
    stored(store, "m", data)
    layout = store.add_mirror("m")
    lost = layout.components[1].ost_list[1]
    os.rename(store._ost_dir(lost), store._failed_dir(lost))
    with pytest.raises(TargetUnavailable) as caught:
        store.write("m", STRIPE - 10, os.urandom(STRIPE + 20))
    assert caught.value.ost_index == lost
    os.rename(store._failed_dir(lost), store._ost_dir(lost))
    assert store.read("m", 0, 4 * STRIPE) == data
    for comp in layout.components:  # each mirror as it was, read alone
        single = FileLayout((comp,), layout.layout_gen, layout.path)
        assert store._read_layout(single, 0, len(data)) == data


def test_a_stale_mirror_is_never_read(tmp_path):
    """The scratch mount marks a mirror it could not write stale; the store reads the other."""
    store = make_store(tmp_path)
    stored(store, "s", b"old" * 1000)
    layout = store.add_mirror("s")
    first, second = layout.components
    stale = FileLayout((first, replace(second, flags="init,stale")), layout.layout_gen + 1,
                       layout.path)
    with store._opened("s") as node:
        store._set_layout(node, stale)
    # the stale mirror's objects hold other bytes, as a mirror that missed a write would
    store._write_range(second, 0, b"new" * 1000, layout.path)
    store.fail_ost(first.ost_list[0])
    with pytest.raises(TargetUnavailable):
        store.read("s", 0, 3000)  # the other mirror is stale: nothing to serve stripe 0
    store.restore_ost(first.ost_list[0])
    assert store.read("s", 0, 3000) == b"old" * 1000


def test_bytes_an_object_holds_past_the_end_never_come_back(tmp_path):
    """A write past the end first cuts the objects it grows over to the file's end."""
    store = make_store(tmp_path)
    data = os.urandom(STRIPE + 100)  # object 1 holds 100 bytes
    layout = stored(store, "g", data)
    with open(store._object_path(layout.first.objects[1]), "r+b") as obj:
        obj.seek(100)
        obj.write(os.urandom(STRIPE - 100))  # left by a truncate of the mount cut short
    store.write("g", 3 * STRIPE - 1, b"z")
    assert store.read("g", 0, 4 * STRIPE) == data + bytes(3 * STRIPE - len(data) - 1) + b"z"


def test_restore_ost_deletes_the_objects_the_mount_doomed_meanwhile(tmp_path):
    """The scratch mount names in ``doomed/`` the objects of files removed while their OST was
    failed; ``restore-ost`` deletes that OST's, and leaves the others' for their return."""
    store = make_store(tmp_path)
    store.create("kept")  # the store opened, its OSTs made
    objects = [StripeObject(index, uuid.uuid4().hex) for index in (1, 2)]
    for obj in objects:  # a removed file's objects, which no layout names any more
        store._object_path(obj).write_bytes(b"x")
        store.fail_ost(obj.ost_index)
    doomed = Path(store.store_root) / "doomed"
    doomed.mkdir(mode=0o700)
    for obj in objects:  # as the mount names them: NNNN.OBJECT_ID
        (doomed / f"{obj.ost_index:04d}.{obj.object_id}").touch()
    store.restore_ost(1)
    assert not store._object_path(objects[0]).exists()
    assert os.listdir(doomed) == [f"0002.{objects[1].object_id}"]
    store.restore_ost(2)
    assert not store._object_path(objects[1]).exists() and os.listdir(doomed) == []


@pytest.fixture
def small_fs(tmp_path):
    """``tmp_path/store`` on a 2 MiB tmpfs of its own."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    mount = tmp_path / "store"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0755", "tmpfs", str(mount)],
                   check=True, capture_output=True, timeout=30)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True, capture_output=True,
                       timeout=30)


def fill(directory: Path, leave: int) -> None:
    """Fill the file system of ``directory`` but ``leave`` bytes."""
    filler = directory / "filler"
    chunk = bytes(STRIPE)
    with open(filler, "wb", buffering=0) as out:
        while True:
            try:
                out.write(chunk)
            except OSError as err:
                assert err.errno == errno.ENOSPC
                break
    os.truncate(filler, max(0, filler.stat().st_size - leave))


def test_a_write_that_fills_the_file_system_midway_changes_nothing(tmp_path, small_fs):
    store = make_store(tmp_path, ost_count=2)
    data = os.urandom(STRIPE)  # object 0 full, object 1 empty
    stored(store, "f", data)
    fill(small_fs, 40 * 1024)
    # [32K, 64K) overwrites object 0 in place; [64K, 128K) is new to object 1: it does not fit
    with pytest.raises(NoSpace):
        store.write("f", STRIPE // 2, os.urandom(2 * STRIPE))
    assert store.read("f", 0, 4 * STRIPE) == data
    (small_fs / "filler").unlink()
    new = os.urandom(2 * STRIPE)
    store.write("f", STRIPE // 2, new)  # with room, whole
    assert store.read("f", 0, 4 * STRIPE) == data[:STRIPE // 2] + new


# -- random writes against a model, OSTs failing and coming back -----------------------------

STEPS = st.one_of(
    st.tuples(st.just("write"), st.integers(0, 1), st.integers(0, 5 * STRIPE),
              st.integers(1, 2 * STRIPE + 50)),
    st.tuples(st.just("fail"), st.integers(0, 3)),     # store.fail_ost (scratchkeeper store)
    st.tuples(st.just("lose"), st.integers(0, 3)),     # the directory gone, the store not told
    st.tuples(st.just("restore"), st.integers(0, 3)),  # store.restore_ost
)


def apply_step(store: LocalStripedStore, step, names, model, number: int) -> None:
    kind = step[0]
    if kind == "fail":
        store.fail_ost(step[1])
    elif kind == "lose":
        if store._ost_dir(step[1]).is_dir():
            os.rename(store._ost_dir(step[1]), store._failed_dir(step[1]))
    elif kind == "restore":
        store.restore_ost(step[1])
    else:
        which, offset, length = step[1:]
        data = hashlib.shake_256(f"{number}".encode()).digest(length)
        try:
            store.write(names[which], offset, data)
        except TargetUnavailable:
            return  # refused: the model keeps the file as it was
        old = model[which] + bytes(max(0, offset - len(model[which])))
        model[which] = old[:offset] + data + old[offset + length:]


@given(steps=st.lists(STEPS, min_size=1, max_size=16))
def test_random_writes_with_osts_failing_match_a_model(steps):
    """A plain file and a mirrored one; after each step every file whose OSTs are all up reads
    back as the model, which took the writes that succeeded."""
    with tempfile.TemporaryDirectory() as root:
        store = make_store(Path(root))
        names = ["plain", "mirrored"]
        model = [os.urandom(2 * STRIPE + 7), os.urandom(3 * STRIPE + 11)]
        for name, data in zip(names, model):
            stored(store, name, data)
        store.add_mirror("mirrored")
        layouts = [store.layout(name) for name in names]
        for number, step in enumerate(steps):
            apply_step(store, step, names, model, number)
            up = {i for i in range(4) if store._ost_dir(i).is_dir()}
            for name, layout, want in zip(names, layouts, model):
                if layout.osts() <= up:
                    assert store.read(name, 0, 8 * STRIPE) == want, (step, name)
        for index in range(4):
            store.restore_ost(index)
        for name, want in zip(names, model):
            assert store.read(name, 0, 8 * STRIPE) == want, name
