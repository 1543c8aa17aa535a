"""The bounded writer of the store's shared logs on the Python side (storage/mount_logs.py
``BoundedLog``): the mount's rules (mount/native/logs.c) — a cap, a share per user and
generation, a free-space floor — and its counters."""

from __future__ import annotations

import logging
import os
from collections import namedtuple

import pytest

from scratchkeeper.errors import ScratchkeeperError
from scratchkeeper.storage import mount_logs
from scratchkeeper.storage.mount_logs import LOG_SHARES, READ_LOG, BoundedLog, reads_record
from scratchkeeper.tiering.reads import parse_reads

CAP = 16 * 1024  # a user's share: 1 KiB


def record(uid: int, n: int = 0, path: str = "/scratch/u/f") -> bytes:
    return reads_record(time=1700000000.0 + n, object_id=1000 + n, uid=uid, reads=1, nbytes=10,
                        path=path)


def test_records_are_the_mounts_and_tierd_reads_them(tmp_path):
    log = BoundedLog(tmp_path, READ_LOG, CAP)
    assert log.append(1000, record(1000, path="/scratch/u/a b\nc")) is None
    (parsed,) = [parse_reads(line) for line in (tmp_path / READ_LOG).read_bytes().splitlines()]
    assert (parsed.uid, parsed.object_id, parsed.path) == (1000, 1000, "/scratch/u/a b\nc")
    assert os.stat(tmp_path / READ_LOG).st_mode & 0o777 == 0o600


def test_one_user_takes_at_most_a_share_and_another_still_writes(tmp_path):
    log = BoundedLog(tmp_path, READ_LOG, CAP)
    outcomes = [log.append(1000, record(1000, n)) for n in range(1000)]
    size = (tmp_path / READ_LOG).stat().st_size
    assert size <= CAP // LOG_SHARES
    assert outcomes.count(None) == size // len(record(1000))
    assert set(outcomes[outcomes.count(None):]) == {"share"}
    assert log.append(2000, record(2000)) is None  # another user's share is whole
    stats = log.stats(0)
    assert stats["written"] == outcomes.count(None) + 1
    assert stats["dropped"] == {"cap": 0, "share": 1000 - outcomes.count(None), "space": 0}
    assert stats["users"]["1000"]["dropped"] == 1000 - outcomes.count(None)
    assert stats["cap"] == CAP and stats["share"] == CAP // LOG_SHARES
    # a user sees their own line only
    assert list(log.stats(2000)["users"]) == ["2000"]
    assert list(log.stats(3000)["users"]) == []


def test_the_cap_holds_for_all_users_together(tmp_path):
    log = BoundedLog(tmp_path, READ_LOG, CAP)
    for uid in range(1000, 1000 + 2 * LOG_SHARES):
        while log.append(uid, record(uid)) is None:
            pass
    assert (tmp_path / READ_LOG).stat().st_size <= CAP
    assert log.stats(0)["dropped"]["cap"] > 0


def test_a_log_moved_aside_by_its_reader_starts_a_new_generation(tmp_path):
    log = BoundedLog(tmp_path, READ_LOG, CAP)
    while log.append(1000, record(1000)) is None:
        pass
    os.replace(tmp_path / READ_LOG, tmp_path / (READ_LOG + ".old"))  # as MountLog rotates it
    assert log.append(1000, record(1000)) is None
    stats = log.stats(1000)
    assert stats["generation"] == 2 and stats["users"]["1000"]["records"] == 1


def test_no_record_leaves_less_than_the_cap_free_for_users(tmp_path, monkeypatch):
    Vfs = namedtuple("Vfs", "f_bavail f_frsize")
    monkeypatch.setattr(mount_logs.os, "fstatvfs", lambda fd: Vfs(CAP // 4096, 4096))
    log = BoundedLog(tmp_path, READ_LOG, CAP)
    assert log.append(1000, record(1000)) == "space"
    assert (tmp_path / READ_LOG).stat().st_size == 0
    assert log.stats(0)["dropped"]["space"] == 1


def test_drops_are_said_once_a_minute(tmp_path, caplog):
    now = [0.0]
    log = BoundedLog(tmp_path, READ_LOG, CAP, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="scratchkeeper.storage.mount_logs"):
        for _ in range(500):
            log.append(1000, record(1000))
        now[0] = 61.0
        log.append(1000, record(1000))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and "record(s) dropped" in lines[0] and "uid 1000" in lines[0]


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory"])
def test_never_through_a_link_nor_to_anything_but_a_regular_file(tmp_path, kind):
    target = tmp_path / "elsewhere"
    target.write_bytes(b"")
    path = tmp_path / READ_LOG
    if kind == "symlink":
        path.symlink_to(target)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    log = BoundedLog(tmp_path, READ_LOG, CAP)
    with pytest.raises(ScratchkeeperError, match=READ_LOG):
        log.append(1000, record(1000))
    assert target.read_bytes() == b""
