"""The mount's CLOSE records (store_root/closes.log), which offload at close reads."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from test_mount_users import NOBODY, OTHER, as_user

from conftest import Mount, _usable, unmount, write_config
from scratchkeeper.chain_service.offload import mtime_text, parse_close
from waiting import wait_released


def records(mnt, count: int | None = None):
    """The records so far; with ``count``, once there are that many (the kernel sends a
    RELEASE after close(2) returns: the record follows the close by a moment)."""
    log = mnt.store / "closes.log"
    deadline = time.monotonic() + 5
    while True:
        found = [parse_close(line) for line in log.read_bytes().splitlines()] \
            if log.exists() else []
        if count is None or len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def test_a_close_after_writing_is_recorded_with_size_mtime_and_owner(mnt):
    name = mnt.root / "out dir" / "result\nwith newline.dat"
    name.parent.mkdir()
    with open(name, "wb") as stream:
        stream.write(b"x" * 5000)
    with open(name, "rb") as stream:     # a read-only open and close: no record
        stream.read()
    wait_released(mnt.root)
    found = records(mnt, 1)
    assert len(found) == 1
    info = os.stat(name)
    record = found[0]
    assert (record.path, record.size, record.uid, record.ino) == (str(name), 5000, os.getuid(),
                                                                  info.st_ino)
    assert record.mtime == mtime_text(info)
    # an append and a truncating open are writes, but the log holds the file's record still:
    # its reader takes the file as it is when it reads (docs/mount.rst "Bounded logs")
    with open(name, "ab") as stream:
        stream.write(b"y")
    open(name, "wb").close()
    wait_released(mnt.root)
    assert len(records(mnt)) == 1
    # once the reader moved the log aside (as it does before reading), the next close is
    # recorded again, in a new log
    os.replace(mnt.store / "closes.log", mnt.store / "closes.log.old")
    with open(name, "ab") as stream:
        stream.write(b"z")
    assert [r.size for r in records(mnt, 1)] == [1]
    # a file renamed after its record gets one under its new name
    moved = name.parent / "moved.dat"
    os.rename(name, moved)
    with open(moved, "ab") as stream:
        stream.write(b"w")
    assert [(r.path, r.size) for r in records(mnt, 2)] == [(str(name), 1), (str(moved), 2)]


def test_a_file_opened_for_writing_but_not_written_leaves_no_record(mnt):
    name = mnt.root / "untouched.dat"
    name.write_bytes(b"abc")
    assert len(records(mnt, 1)) == 1
    with open(name, "r+b") as stream:    # writable, never written, not truncated
        stream.read()
    wait_released(mnt.root)
    assert len(records(mnt)) == 1


def logs_counters(path) -> dict:
    return json.loads(os.getxattr(path, "user.scratchkeeper.logs"))


def test_a_write_and_close_loop_adds_one_record(mnt):
    """Issue 30: every small write-and-close appended ~100 bytes to closes.log (40 KB of user
    writes made 1.87 MB of log). 20,000 of them by a plain user now add one record while
    the log is not read."""
    shared = mnt.root / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    target = shared / "loop.dat"

    def loop():
        for index in range(20_000):
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.write(fd, b"%d" % index)
            os.close(fd)

    assert as_user(OTHER, OTHER, loop) == (0, "")
    wait_released(mnt.root)  # the last RELEASE
    found = records(mnt)
    assert len(found) <= 3, f"{len(found)} records for one file"
    assert {r.path for r in found} == {str(target)}
    counters = logs_counters(mnt.root)["closes.log"]
    assert counters["written"] == len(found) and counters["coalesced"] >= 19_990
    assert (mnt.store / "closes.log").stat().st_size < 1000


def test_a_user_over_their_share_does_not_stop_another_users_records(make_mount):
    """A user's CLOSE records take at most 1/16 of mount.log_max_bytes (here 1 KiB of 16): the
    rest are dropped and counted, another user's records still go in, and the log never passes
    its cap. A dropped record costs timeliness only: the stage-out at the end sends a result
    not listed as offloaded (offload.unchanged)."""
    from scratchkeeper.chain_service.offload import unchanged

    mnt = make_mount(mount_extra="log_max_bytes = 16384")
    shared = mnt.root / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)

    def flood():
        for index in range(60):
            (shared / f"flood-{index:03d}").write_bytes(b"x")
        mine = logs_counters(mnt.root)["closes.log"]["users"]
        assert list(mine) == [str(NOBODY)], mine  # a user sees their own counters only
        assert mine[str(NOBODY)]["dropped"] > 0, mine

    assert as_user(NOBODY, NOBODY, flood) == (0, "")
    assert as_user(OTHER, OTHER, lambda: (shared / "other.dat").write_bytes(b"o")) == (0, "")
    found = records(mnt)
    deadline = time.monotonic() + 5
    while str(shared / "other.dat") not in {r.path for r in found}:
        assert time.monotonic() < deadline, "the other user's record was not written"
        time.sleep(0.05)
        found = records(mnt)
    flooded = [r for r in found if r.uid == NOBODY]
    share = 16384 // 16
    assert 0 < sum(len(line) for line in (mnt.store / "closes.log").read_bytes().splitlines(True)
                   if b" %d " % NOBODY in line) <= share
    assert len(flooded) < 60
    counters = logs_counters(mnt.root)["closes.log"]
    assert counters["dropped"]["share"] == 60 - len(flooded)
    assert counters["users"][str(NOBODY)]["dropped"] == 60 - len(flooded)
    assert (mnt.store / "closes.log").stat().st_size <= 16384
    assert "record(s) dropped" in mnt.log.read_text()
    recorded = {r.path for r in flooded}
    dropped = next(shared / f"flood-{i:03d}" for i in range(60)
                   if str(shared / f"flood-{i:03d}") not in recorded)
    listing = mnt.root.parent / "offloaded.list"
    listing.write_text("")  # nothing offloaded at close for it: the stage-out must send it
    same, why = unchanged(str(listing), str(dropped), wait=0)
    assert not same and "not offloaded" in why


def test_the_read_log_is_bounded_per_user_too(make_mount):
    """reads.log takes the same bounds: a user reading many files fills their share only, and
    another user's reads are still recorded, each record counted against the last reader."""
    mnt = make_mount(mount_extra="log_max_bytes = 16384\nread_log_interval = 0.2")
    shared = mnt.root / "shared"
    shared.mkdir()
    for index in range(60):
        (shared / f"f{index:03d}").write_bytes(b"r")
        os.chmod(shared / f"f{index:03d}", 0o644)
    (shared / "later").write_bytes(b"l")
    os.chmod(shared / "later", 0o644)

    def read_all():
        for index in range(60):
            (shared / f"f{index:03d}").read_bytes()

    assert as_user(NOBODY, NOBODY, read_all) == (0, "")
    # a pace, not a condition: reads.log takes a record per file and read_log_interval
    # (0.2 s); three intervals on, the next read is another interval's, counted for OTHER
    time.sleep(0.6)
    assert as_user(OTHER, OTHER, (shared / "later").read_bytes) == (0, "")
    log = mnt.store / "reads.log"
    deadline = time.monotonic() + 5
    while b"/later\n" not in (log.read_bytes() if log.exists() else b""):
        assert time.monotonic() < deadline, "the other user's reads were not recorded"
        time.sleep(0.1)
    counters = logs_counters(mnt.root)["reads.log"]
    assert counters["users"][str(NOBODY)]["bytes"] <= 16384 // 16
    assert counters["users"][str(NOBODY)]["dropped"] > 0
    assert log.stat().st_size <= 16384


def test_no_record_takes_the_space_users_need():
    """The logs never take the last mount.log_max_bytes of the store's file system users may
    fill: on a store with 16 MiB free and a 64 MiB cap every record is dropped (counted as
    ``space``); with a 16 KiB cap the same close is recorded."""
    reason = _usable()
    if reason:
        pytest.skip(reason)
    base = Path(tempfile.mkdtemp(prefix="skmount-space-"))
    os.chmod(base, 0o755)
    (base / "store").mkdir()
    (base / "scratch").mkdir()
    mounted_store = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs",
                                    str(base / "store")], capture_output=True, timeout=30)
    if mounted_store.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted_store.stderr!r}")
    try:
        for cap, recorded in ((64 << 20, False), (16384, True)):
            config, values = write_config(base, mount_extra=f"log_max_bytes = {cap}")
            mnt = Mount(base / "scratch", base / "store", config, base / "mount.log", values)
            mnt.start()
            try:
                (mnt.root / f"cap-{cap}").write_bytes(b"x")
                wait_released(mnt.root)  # its record written, or dropped and counted
                counters = logs_counters(mnt.root)["closes.log"]
                found = [r.path for r in records(mnt)]
            finally:
                mnt.stop()
            assert (str(mnt.root / f"cap-{cap}") in found) is recorded, (cap, found)
            assert counters["dropped"]["space"] == (0 if recorded else 1), counters
    finally:
        unmount(base / "scratch")
        subprocess.run(["umount", str(base / "store")], capture_output=True, timeout=30)
        shutil.rmtree(base, ignore_errors=True)
