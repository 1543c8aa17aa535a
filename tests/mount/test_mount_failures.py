"""Failures under the scratch mount: a failed OST (``ostNNNN.failed``) with and without a mirror,
and a mount process killed with -9 and started again."""

from __future__ import annotations

import errno
import os
import time

import pytest

from scratchkeeper.storage.layout import FileLayout

LOV = "security.scratchkeeper.lov"


def drop_cache(path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)




def _renamed(mnt, index: int, src, dst, state: str) -> None:
    """Rename an OST's directory and wait until the mount saw it (its log says so)."""
    line = f"OST {index} is {state}"
    before = mnt.log.read_text().count(line)
    os.rename(src, dst)
    deadline = time.monotonic() + 10
    while mnt.log.read_text().count(line) <= before:
        assert time.monotonic() < deadline, f"the mount did not see: {line}"
        time.sleep(0.01)


def fail_ost(mnt, index: int) -> None:
    _renamed(mnt, index, mnt.ost(index), mnt.store / f"ost{index:04d}.failed", "failed")


def restore_ost(mnt, index: int) -> None:
    _renamed(mnt, index, mnt.store / f"ost{index:04d}.failed", mnt.ost(index), "back")


def test_a_failed_ost_is_read_from_the_mirror_without_a_stall(mnt):
    data = os.urandom(600_000)
    (mnt.root / "m").write_bytes(data)
    layout = mnt.add_mirror("m")
    assert len(layout.mirror_ids) == 2
    drop_cache(mnt.root / "m")
    fail_ost(mnt, layout.first.ost_list[0])
    try:
        started = time.monotonic()
        assert (mnt.root / "m").read_bytes() == data
        assert time.monotonic() - started < 1.0  # no wait for recovery
        # the other mirror's OSTs down instead: the first mirror serves
        restore_ost(mnt, layout.first.ost_list[0])
        fail_ost(mnt, layout.components[1].ost_list[1])
        drop_cache(mnt.root / "m")
        assert (mnt.root / "m").read_bytes() == data
    finally:
        for index in range(4):
            if (mnt.store / f"ost{index:04d}.failed").exists():
                restore_ost(mnt, index)


def test_a_write_with_a_failed_mirror_marks_it_stale(mnt):
    data = os.urandom(300_000)
    (mnt.root / "w").write_bytes(data)
    layout = mnt.add_mirror("w")
    fail_ost(mnt, layout.components[1].ost_list[0])
    try:
        with open(mnt.root / "w", "r+b") as f:
            f.write(b"N" * 1000)
        after = FileLayout.from_lov(os.getxattr(mnt.mdt / "w", LOV), "w")
        assert after.layout_gen == layout.layout_gen + 1
        assert "stale" in after.components[1].flags.split(",")
        assert "stale" not in after.components[0].flags.split(",")
    finally:
        restore_ost(mnt, layout.components[1].ost_list[0])
    drop_cache(mnt.root / "w")
    # the stale mirror (back with old bytes) is never read
    assert (mnt.root / "w").read_bytes() == b"N" * 1000 + data[1000:]


def test_without_a_mirror_or_recoveryd_a_read_fails_with_eio_after_the_timeout(make_mount):
    mnt = make_mount(recovery_timeout=1.5)
    data = os.urandom(300_000)
    (mnt.root / "lost").write_bytes(data)
    layout = FileLayout.from_lov(os.getxattr(mnt.mdt / "lost", LOV), "lost")
    drop_cache(mnt.root / "lost")
    fail_ost(mnt, layout.ost_list[1])
    try:
        fd = os.open(mnt.root / "lost", os.O_RDONLY)
        try:
            assert os.pread(fd, 65536, 0) == data[:65536]  # stripe 0 is on a healthy OST
            started = time.monotonic()
            with pytest.raises(OSError) as err:
                os.pread(fd, 65536, 65536)
            waited = time.monotonic() - started
        finally:
            os.close(fd)
        assert err.value.errno == errno.EIO
        assert 1.4 <= waited < 10, waited
        log = mnt.log.read_text()
        assert "no mirror holds it" in log and "recovery service not running" in log
    finally:
        restore_ost(mnt, layout.ost_list[1])
    drop_cache(mnt.root / "lost")
    assert (mnt.root / "lost").read_bytes() == data  # the OST back: whole again


def test_a_read_waiting_for_the_ost_goes_on_when_it_comes_back(make_mount):
    mnt = make_mount(recovery_timeout=20)
    data = os.urandom(200_000)
    (mnt.root / "back").write_bytes(data)
    layout = FileLayout.from_lov(os.getxattr(mnt.mdt / "back", LOV), "back")
    drop_cache(mnt.root / "back")
    fail_ost(mnt, layout.ost_list[0])
    import threading
    timer = threading.Timer(1.0, restore_ost, (mnt, layout.ost_list[0]))
    timer.start()
    try:
        started = time.monotonic()
        assert (mnt.root / "back").read_bytes() == data
        assert 0.9 <= time.monotonic() - started < 10
    finally:
        timer.join()


def test_an_ost_failure_inotify_cannot_report_is_seen_by_the_rescan(make_mount, monkeypatch):
    """On a site of many hosts the store's backing is shared and inotify does not cross
    machines (nor NFS): the mount scans the OSTs every 2 s whatever inotify says. With its
    inotify watch off, a failure and a return are still seen, and a read of a lost stripe then
    waits and fails as it would have."""
    monkeypatch.setenv("SK_MOUNT_INOTIFY", "0")
    mnt = make_mount(recovery_timeout=1.0)
    data = os.urandom(512 * 1024)
    (mnt.root / "f.bin").write_bytes(data)
    layout = FileLayout.from_lov(os.getxattr(mnt.mdt / "f.bin", LOV), "f.bin")
    failed = layout.ost_list[0]
    fail_ost(mnt, failed)  # seen within its 10 s
    drop_cache(mnt.root / "f.bin")
    with pytest.raises(OSError) as err:
        (mnt.root / "f.bin").read_bytes()
    assert err.value.errno == errno.EIO
    restore_ost(mnt, failed)
    drop_cache(mnt.root / "f.bin")
    assert (mnt.root / "f.bin").read_bytes() == data


def test_kill_9_then_remount(mnt):
    closed = os.urandom(1 << 20)
    (mnt.root / "closed").write_bytes(closed)
    synced = os.urandom(300_000)
    fd = os.open(mnt.root / "synced", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, synced)
    os.fsync(fd)
    mnt.kill()
    with pytest.raises(OSError):
        os.close(fd)  # its mount is dead: the close cannot reach a server (ENOTCONN)
    with pytest.raises(OSError) as err:
        os.stat(mnt.root)
    assert err.value.errno == errno.ENOTCONN
    mnt.start()  # detaches the stale mount first
    assert (mnt.root / "closed").read_bytes() == closed
    assert (mnt.root / "synced").read_bytes() == synced
    assert "stale mount" in mnt.log.read_text()
