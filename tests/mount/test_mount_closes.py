"""The mount's CLOSE records (store_root/closes.log), which offload at close reads."""

from __future__ import annotations

import os
import time

from scratchkeeper.staging.offload import mtime_text, parse_close


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
    time.sleep(0.3)
    found = records(mnt, 1)
    assert len(found) == 1
    info = os.stat(name)
    record = found[0]
    assert (record.path, record.size, record.uid, record.ino) == (str(name), 5000, os.getuid(),
                                                                  info.st_ino)
    assert record.mtime == mtime_text(info)
    # an append is a write: one more record; a truncating open too
    with open(name, "ab") as stream:
        stream.write(b"y")
    # a record says what the file is when the kernel's RELEASE comes, a moment after close(2)
    records(mnt, 2)
    open(name, "wb").close()
    assert [r.size for r in records(mnt, 3)] == [5000, 5001, 0]


def test_a_file_opened_for_writing_but_not_written_leaves_no_record(mnt):
    name = mnt.root / "untouched.dat"
    name.write_bytes(b"abc")
    assert len(records(mnt, 1)) == 1
    with open(name, "r+b") as stream:    # writable, never written, not truncated
        stream.read()
    time.sleep(0.3)
    assert len(records(mnt)) == 1
