"""Kernel FUSE passthrough (docs/mount.rst "Passthrough"): a read-only open of a file whose bytes
are one object is read by the kernel from that object, without the mount; everything else is
served by the mount as before.

Whether an open was passed through is seen two ways: the mount's counters
(``user.scratchkeeper.passthrough`` on its root), and a read that succeeds while the mount's
process is stopped (SIGSTOP): only the kernel can have answered it.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_mount_recovery import (
    fail_ost,
    failed_osts,
    file_source,
    finish,
    layout_of,
    pattern,
    recoveryd,
    stage,
    start_reader,
)

from waiting import wait_for

MiB = 1 << 20
STATS = "user.scratchkeeper.passthrough"
READER = 4242           # a uid with no name
STOPPED_READ = 5        # seconds a read of a passed-through file may take with the mount stopped


def stats(mnt) -> dict:
    return json.loads(os.getxattr(mnt.root, STATS))


def needs_passthrough(mnt) -> None:
    """Skip where libfuse or the kernel has no passthrough (the mount said so at start)."""
    if not stats(mnt)["on"]:
        pytest.skip("passthrough is off on this machine: " + next(
            (line for line in mnt.log.read_text().splitlines() if "passthrough:" in line), ""))


def write_settled(mnt, path: Path, data: bytes) -> None:
    """Write ``path`` through the mount, then wait for the kernel's RELEASE of the writer's
    handle: it comes after close(2) returned, and until the mount has it an open of the same
    file is served by the mount, not passed through (a busy machine showed it)."""
    path.write_bytes(data)
    settled(mnt)


def settled(mnt) -> None:
    """Wait until the mount serves no handle itself (every RELEASE of a closed one arrived)."""
    wait_for(lambda: stats(mnt)["served_open"] == 0, "the release of the closed handles",
             timeout=10)


def one_stripe_dir(mnt, name: str = "one") -> Path:
    folder = mnt.root / name
    folder.mkdir()
    os.setxattr(folder, "user.scratchkeeper.stripe", b"stripe_count=1 stripe_size=65536")
    return folder


def read_while_stopped(mnt, fd: int, size: int, timeout: float) -> str | None:
    """The SHA-256 of ``size`` bytes read from ``fd`` by another process while the mount's
    process is stopped (SIGSTOP): only the kernel can answer then. None if no answer came
    within ``timeout`` (the reader then finishes once the mount goes on)."""
    code = (f"import hashlib, os, sys; print(hashlib.sha256(os.pread({fd}, {size}, 0))"
            ".hexdigest(), flush=True); sys.stdout.close()")
    os.kill(mnt.process.pid, signal.SIGSTOP)
    try:
        reader = subprocess.Popen([sys.executable, "-c", code], pass_fds=[fd],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ready, _, _ = select.select([reader.stdout], [], [], timeout)
        line = reader.stdout.readline().strip() if ready else None
    finally:
        os.kill(mnt.process.pid, signal.SIGCONT)
    _, err = reader.communicate(timeout=60)
    assert reader.returncode == 0, err
    return line or None


def test_the_mount_says_at_start_whether_it_passes_files_through(mnt):
    lines = [line for line in mnt.log.read_text().splitlines() if "passthrough:" in line]
    assert len(lines) == 1, lines
    assert (" on " in lines[0]) == stats(mnt)["on"]


def test_a_one_stripe_file_is_read_by_the_kernel_with_the_mount_stopped(mnt):
    needs_passthrough(mnt)
    data = pattern(3 * MiB, 1)
    path = one_stripe_dir(mnt) / "f"
    write_settled(mnt, path, data)
    before = stats(mnt)["opens"]
    fd = os.open(path, os.O_RDONLY)
    try:
        assert stats(mnt)["opens"] == before + 1
        digest = read_while_stopped(mnt, fd, len(data), STOPPED_READ)
    finally:
        os.close(fd)
    assert digest == hashlib.sha256(data).hexdigest()


def test_a_striped_file_is_served_by_the_mount(mnt):
    needs_passthrough(mnt)
    data = pattern(1 * MiB, 2)
    path = mnt.root / "striped"           # the mount's default: 2 stripes
    write_settled(mnt, path, data)
    before = stats(mnt)["opens"]
    fd = os.open(path, os.O_RDONLY)
    try:
        assert stats(mnt)["opens"] == before
        assert read_while_stopped(mnt, fd, len(data), 1.0) is None  # waits on the mount
    finally:
        os.close(fd)
    assert path.read_bytes() == data


def test_a_writer_beside_passed_through_readers_is_passed_through_and_recorded(mnt):
    """The kernel takes no other open of an inode open for passthrough: a writer joins it. Its
    bytes, sizes past the old end and truncates are seen by the reader, getattr, the MDT inode
    and closes.log (offload at close)."""
    needs_passthrough(mnt)
    path = one_stripe_dir(mnt) / "f"
    write_settled(mnt, path, b"a" * 100_000)
    before = stats(mnt)
    with open(path, "rb", buffering=0) as reader:
        assert stats(mnt)["opens"] == before["opens"] + 1
        with open(path, "r+b", buffering=0) as writer:
            assert stats(mnt)["writers"] == before["writers"] + 1
            writer.seek(50_000)
            writer.write(b"b" * 100_000)            # past the old end
            assert os.stat(path).st_size == 150_000
            with open(path, "r+b", buffering=0) as second:  # the sizes differ meanwhile
                assert second.read(1) == b"a"
            writer.truncate(300_000)                # larger, through the mount: zeros
            assert os.pread(reader.fileno(), 400_000, 0) == (
                b"a" * 50_000 + b"b" * 100_000 + bytes(150_000))
        assert os.stat(mnt.mdt / "one" / "f").st_size == 300_000
    assert path.read_bytes() == b"a" * 50_000 + b"b" * 100_000 + bytes(150_000)
    assert os.stat(mnt.mdt / "one" / "f").st_size == 300_000
    closes = (mnt.store / "closes.log").read_text()
    assert closes.count("/one/f") >= 1, closes


def test_a_reader_beside_a_passed_through_writer_without_writes_records_no_close(mnt):
    needs_passthrough(mnt)
    path = one_stripe_dir(mnt) / "g"
    write_settled(mnt, path, b"c" * 1000)
    log = mnt.store / "closes.log"

    def recorded() -> int:
        return log.read_text().count("/one/g") if log.exists() else 0

    wait_for(lambda: recorded() == 1, "the CLOSE record of the write", timeout=10)  # async
    with open(path, "rb") as reader, open(path, "r+b") as writer:
        assert reader.read() == writer.read() == b"c" * 1000
        assert stats(mnt)["writers"] >= 1
    with open(path, "rb") as reader:             # its release comes after the writer's
        reader.read()
    assert recorded() == 1


def test_a_file_open_with_the_page_cache_is_not_passed_through_then(mnt):
    needs_passthrough(mnt)
    path = one_stripe_dir(mnt) / "f"
    write_settled(mnt, path, b"x" * 10_000)
    before = stats(mnt)["opens"]
    with open(path, "r+b", buffering=0) as writer:  # cached: the kernel takes no passthrough
        with open(path, "rb", buffering=0) as reader:
            assert stats(mnt)["opens"] == before
            writer.write(b"y" * 10)
            assert reader.read() == b"y" * 10 + b"x" * 9_990
    settled(mnt)
    with open(path, "rb") as reader:                # alone again: passed through
        assert reader.read(10) == b"y" * 10
        assert stats(mnt)["opens"] == before + 1


def test_permissions_and_acls_hold_for_passed_through_files(mnt):
    needs_passthrough(mnt)
    folder = one_stripe_dir(mnt)
    os.chmod(folder, 0o755)
    path = folder / "private"
    write_settled(mnt, path, b"secret" * 1000)
    os.chmod(path, 0o600)

    def cat(user: int) -> subprocess.CompletedProcess:
        return mnt.run(["cat", str(path)], user=user, group=user, extra_groups=[])

    before = stats(mnt)["opens"]
    denied = cat(READER)
    assert denied.returncode != 0 and b"Permission denied" in denied.stderr
    assert stats(mnt)["opens"] == before              # stopped at the open, by the kernel
    assert mnt.run(["setfacl", "-m", f"u:{READER}:r", str(path)]).returncode == 0
    allowed = cat(READER)
    assert allowed.returncode == 0 and allowed.stdout == b"secret" * 1000
    assert stats(mnt)["opens"] == before + 1
    assert mnt.run(["setfacl", "-x", f"u:{READER}", str(path)]).returncode == 0
    assert cat(READER).returncode != 0


def test_read_records_count_opens_of_passed_through_files(make_mount):
    mnt = make_mount(mount_extra="read_log_interval = 0.2")
    needs_passthrough(mnt)
    path = one_stripe_dir(mnt) / "hot"
    write_settled(mnt, path, b"z" * 200_000)
    before = stats(mnt)["opens"]
    for _ in range(3):
        assert path.read_bytes() == b"z" * 200_000
    assert stats(mnt)["opens"] == before + 3
    log = mnt.store / "reads.log"
    deadline = time.monotonic() + 10
    while True:
        reads = sum(int(line.split()[4]) for line in
                    (log.read_text().splitlines() if log.exists() else [])
                    if line.startswith("READS ") and line.endswith("/one/hot"))
        if reads >= 3 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert reads == 3


def test_a_file_on_a_failed_ost_is_not_passed_through(make_mount):
    mnt = make_mount(ost_count=4, recovery_timeout=1.0)
    needs_passthrough(mnt)
    data = pattern(1 * MiB, 3)
    path = one_stripe_dir(mnt) / "f"
    write_settled(mnt, path, data)
    ost = layout_of(mnt, "one/f").components[0].objects[0].ost_index
    before = stats(mnt)["opens"]
    with failed_osts(mnt):
        fail_ost(mnt, ost)
        with open(path, "rb", buffering=0) as reader:
            assert stats(mnt)["opens"] == before
            with pytest.raises(OSError):                   # no recoveryd: EIO after the wait
                reader.read()


def test_a_stale_or_lost_file_is_not_passed_through(make_mount):
    mnt = make_mount()
    needs_passthrough(mnt)
    folder = one_stripe_dir(mnt)
    for name in ("lost", "stale"):
        write_settled(mnt, folder / name, b"q" * 70_000)
    os.setxattr(mnt.mdt / "one" / "lost", "user.scratchkeeper.lost", b"1")
    lov = os.getxattr(mnt.mdt / "one" / "stale", "security.scratchkeeper.lov")
    assert b"init" in lov
    os.setxattr(mnt.mdt / "one" / "stale", "security.scratchkeeper.lov",
                lov.replace(b"init", b"init,stale", 1))
    before = stats(mnt)["opens"]
    for name in ("lost", "stale"):
        try:
            with open(folder / name, "rb") as reader:
                reader.read(1)
        except OSError:
            pass                                            # the mount's answer, not ours
    assert stats(mnt)["opens"] == before


def test_a_mirrored_file_is_not_passed_through(make_mount):
    mnt = make_mount(ost_count=4)
    needs_passthrough(mnt)
    path = one_stripe_dir(mnt) / "m"
    write_settled(mnt, path, b"m" * 200_000)
    mnt.add_mirror("one/m")
    before = stats(mnt)["opens"]
    assert path.read_bytes() == b"m" * 200_000
    assert stats(mnt)["opens"] == before


def test_an_ost_failing_under_a_passed_through_reader_gives_the_right_bytes(make_mount):
    """The recovery story with a one-stripe file: sha256sum started before its OST fails reads
    on, from the object the kernel holds, and prints the right checksum."""
    mnt = make_mount(ost_count=4, recovery_timeout=60.0, threads=4)
    needs_passthrough(mnt)
    data = pattern(128 * MiB, 4)
    layout = stage(mnt, "staged", data, file_source(mnt, "staged", data), stripe_count=1)
    path = mnt.root / "staged"
    before = stats(mnt)["opens"]
    with failed_osts(mnt), recoveryd(mnt):
        reader = start_reader(["sha256sum", str(path)], path)
        assert stats(mnt)["opens"] == before + 1
        fail_ost(mnt, layout.components[0].objects[0].ost_index)
        status, out, err, _ = finish(reader)
    assert status == 0, err
    assert out.split()[0] == hashlib.sha256(data).hexdigest()
    # and once the OST is gone, an open is the mount's (it waits for recoveryd's patch)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == hashlib.sha256(data).hexdigest()
