"""The store and the mount are one file system: what a job writes through the mount is a store
file the store's commands see (layout, stat, xattrs, mirrors), and a data job's commit of such
a file (``import_file``) keeps it where it is instead of copying it and unlinking the original."""

from __future__ import annotations

import hashlib
import os
import time

from scratchkeeper.config import load_config
from scratchkeeper.storage import open_backend
from scratchkeeper.storage.layout import LayoutRequest


def _store(mnt):
    return open_backend(load_config(mnt.config))


def test_a_file_written_through_the_mount_is_a_store_file(mnt):
    data = os.urandom(300_000)
    (mnt.root / "run").mkdir()
    (mnt.root / "run" / "out.dat").write_bytes(data)
    store = _store(mnt)
    layout = store.layout(str(mnt.root / "run" / "out.dat"))
    assert layout.stripe_count == 2 and layout.stripe_size == 65536
    assert store.stat(str(mnt.root / "run" / "out.dat")).size == len(data)
    assert store.read(str(mnt.root / "run" / "out.dat"), 0, len(data)) == data
    assert store.list_dir(str(mnt.root / "run")) == ["out.dat"]
    # the CLI shows it as users would ask for it
    shown = mnt.run([os.sys.executable, "-m", "scratchkeeper", "-c", str(mnt.config), "store",
                     "layout", str(mnt.root / "run" / "out.dat")], text=True)
    assert shown.returncode == 0, shown.stderr
    for obj in layout.first.objects:
        assert obj.object_id in shown.stdout


def test_import_of_a_file_written_through_the_mount_keeps_it(mnt):
    data = os.urandom(200_000)
    target = mnt.root / "staged.dat"
    target.write_bytes(data)
    store = _store(mnt)
    before = store.layout(str(target))
    after = store.import_file(str(target), stripe_count=1, expect_uid=0)
    assert after == before  # no copy into new objects
    assert target.read_bytes() == data  # not unlinked through the mount
    assert hashlib.sha256(store.read(str(target), 0, len(data))).digest() == \
        hashlib.sha256(data).digest()
    # a second commit (a retried data job) is the same no-op
    assert store.import_file(str(target)) == before and target.exists()


def test_the_stores_changes_are_seen_through_the_mount(mnt):
    """A mirror the store adds (replicad) and a file the store puts are read through the mount."""
    data = os.urandom(400_000)
    (mnt.root / "mirrored").write_bytes(data)
    store = _store(mnt)
    mirrored = store.add_mirror(str(mnt.root / "mirrored"), LayoutRequest(stripe_count=2))
    assert len(mirrored.mirror_ids) == 2
    primary = {c.mirror_id: c for c in mirrored.components}[1]
    store.fail_ost(primary.objects[0].ost_index)
    try:
        assert (mnt.root / "mirrored").read_bytes() == data
    finally:
        store.restore_ost(primary.objects[0].ost_index)
    source = mnt.store.parent / "source.bin"
    source.write_bytes(data[:1000])
    with open(source, "rb") as handle:
        store.put_file(str(mnt.root / "put.bin"), handle.fileno(), 1000)
    assert (mnt.root / "put.bin").read_bytes() == data[:1000]


def test_store_rm_of_a_file_the_mount_serves_goes_through_the_mount(mnt):
    """The name is gone at once (not after the kernel's entry timeout), a job that still has
    the file open reads it whole, and the objects go when it closes."""
    data = os.urandom(300_000)
    target = mnt.root / "doomed.dat"
    target.write_bytes(data)
    store = _store(mnt)
    objects = [mnt.ost(o.ost_index) / o.object_id for o in store.layout(str(target)).first.objects]
    with open(target, "rb") as reader:
        os.stat(target)  # the kernel has the name cached
        store.remove(str(target))
        assert not target.exists() and not store.exists(str(target))
        assert reader.read() == data
        assert all(obj.exists() for obj in objects)
    deadline = time.monotonic() + 10
    while any(obj.exists() for obj in objects) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(obj.exists() for obj in objects)


def test_layout_calibrate_on_the_mount_drops_the_objects_cache_before_each_read_job(mnt,
                                                                                     tmp_path):
    import json
    import shutil
    import subprocess
    import sys

    import pytest

    if shutil.which("fio") is None:
        pytest.skip("fio is not installed")
    (mnt.root / "calib").mkdir()
    done = subprocess.run([sys.executable, "-m", "scratchkeeper", "-c", str(mnt.config),
                           "layout", "calibrate", str(mnt.root / "calib"), "--size", "8M",
                           "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert "store cache dropped before each read job" in result["calibrated"]
    assert os.listdir(mnt.root / "calib") == []  # the test file is gone
    # a directory outside the scratch root: fio's own --invalidate only, no drop
    elsewhere = tmp_path / "plain"
    elsewhere.mkdir()
    done = subprocess.run([sys.executable, "-m", "scratchkeeper", "-c", str(mnt.config),
                           "layout", "calibrate", str(elsewhere), "--size", "4M", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "dropped" not in json.loads(done.stdout)["calibrated"]
