"""Read dispatch through the scratch mount (docs/mount.rst, "Read dispatch"): reads of at least
``mount.dispatch_min_bytes`` over several mirrors have their pieces' OSTs chosen by the
replica-selection solver (or, for the benchmark, ``SK_MOUNT_DISPATCH=primary|round-robin``) and
read in parallel; the counters are the mount root's ``user.scratchkeeper.dispatch``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from scratchkeeper.storage.layout import FileLayout

LOV = "security.scratchkeeper.lov"
STATS = "user.scratchkeeper.dispatch"
MIB = 1 << 20
BLKIO = Path("/sys/fs/cgroup/blkio/blkio.throttle.read_bps_device")


def configure(mnt, min_bytes: int, policy: str, monkeypatch) -> None:
    """Restart the mount with ``mount.dispatch_min_bytes`` and ``SK_MOUNT_DISPATCH``."""
    mnt.stop()
    text = re.sub(r"\ndispatch_min_bytes = \d+", "", mnt.config.read_text())
    mnt.config.write_text(text.replace("[mount]\n", f"[mount]\ndispatch_min_bytes = {min_bytes}\n"))
    monkeypatch.setenv("SK_MOUNT_DISPATCH", policy)
    mnt.start()


def stats(mnt) -> dict:
    return json.loads(os.getxattr(mnt.root, STATS))


def pieces(mnt) -> dict[int, int]:
    return {o["ost"]: o["pieces"] for o in stats(mnt)["osts"]}


def read_whole(path: Path, block: int = MIB) -> bytes:
    """The file read with ``block``-byte reads, its page cache dropped first."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        chunks = []
        while chunk := os.read(fd, block):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def mirrored_file(mnt, name: str, size: int) -> tuple[bytes, FileLayout]:
    data = os.urandom(size)
    (mnt.root / name).write_bytes(data)
    layout = mnt.add_mirror(name)
    assert len(layout.mirror_ids) == 2
    assert not set(layout.components[0].ost_list) & set(layout.components[1].ost_list)
    return data, layout


@pytest.mark.parametrize("policy", ["solver", "primary", "round-robin"])
def test_a_mirrored_file_reads_right_under_each_policy(make_mount, monkeypatch, policy):
    mnt = make_mount()
    data, layout = mirrored_file(mnt, "f", 3 * MIB + 12345)
    configure(mnt, MIB, policy, monkeypatch)
    assert read_whole(mnt.root / "f") == data
    assert read_whole(mnt.root / "f", 4 * MIB) == data
    got = stats(mnt)
    assert got["policy"] == policy and got["threads"] > 0
    assert got["requests"] > 0, got
    used = {o["ost"] for o in got["osts"] if o["pieces"]}
    first, second = set(layout.components[0].ost_list), set(layout.components[1].ost_list)
    if policy == "primary":
        assert used <= first
    elif policy == "round-robin":
        assert used & first and used & second
    # the figures are measured: every OST that served a piece has a fit
    for o in got["osts"]:
        if o["pieces"]:
            assert o["reads"] > 0 and o["seconds_per_byte"] > 0 and o["inflight"] == 0


def test_the_threshold_is_honoured(make_mount, monkeypatch):
    mnt = make_mount()
    data, _ = mirrored_file(mnt, "t", 2 * MIB)
    # larger than any request the kernel sends (max_read is 1 MiB): never dispatched
    configure(mnt, 2 * MIB, "round-robin", monkeypatch)
    assert read_whole(mnt.root / "t") == data
    got = stats(mnt)
    assert got["requests"] == 0 and all(o["pieces"] == 0 for o in got["osts"])
    assert sum(o["reads"] for o in got["osts"]) > 0  # the per-piece path read and measured
    # 0: never, and no read pool at all
    configure(mnt, 0, "round-robin", monkeypatch)
    assert read_whole(mnt.root / "t") == data
    got = stats(mnt)
    assert got["threads"] == 0 and got["requests"] == 0
    # an unmirrored file is never dispatched by the solver, whatever its reads; its requests
    # over several objects are read in parallel from its one mirror ("striped")
    configure(mnt, 64 * 1024, "round-robin", monkeypatch)
    plain = os.urandom(2 * MIB)
    (mnt.root / "plain").write_bytes(plain)
    assert read_whole(mnt.root / "plain") == plain
    assert stats(mnt)["requests"] == 0 and stats(mnt)["striped"] > 0
    assert read_whole(mnt.root / "t") == data
    assert stats(mnt)["requests"] > 0


def test_an_ost_failing_during_dispatched_reads_still_gives_the_right_bytes(make_mount,
                                                                              monkeypatch):
    mnt = make_mount()
    data, layout = mirrored_file(mnt, "d", 4 * MIB)
    configure(mnt, MIB, "round-robin", monkeypatch)
    errors: list[str] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                if read_whole(mnt.root / "d") != data:
                    errors.append("wrong bytes")
            except OSError as err:
                errors.append(str(err))

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        victim = layout.components[1].ost_list[0]
        for _ in range(3):
            os.rename(mnt.ost(victim), mnt.store / f"ost{victim:04d}.failed")
            assert read_whole(mnt.root / "d") == data
            os.rename(mnt.store / f"ost{victim:04d}.failed", mnt.ost(victim))
            assert read_whole(mnt.root / "d") == data
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    assert not errors, errors[:3]
    assert stats(mnt)["requests"] > 0


def test_no_descriptor_or_thread_leak(make_mount, monkeypatch):
    mnt = make_mount()
    data, _ = mirrored_file(mnt, "l", 3 * MIB)
    configure(mnt, MIB, "solver", monkeypatch)
    pid = mnt.process.pid

    def counts() -> tuple[int, int]:
        return len(os.listdir(f"/proc/{pid}/fd")), len(os.listdir(f"/proc/{pid}/task"))

    def fd_targets() -> list[str]:
        return sorted(os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd"))

    def settled() -> tuple[int, int]:
        """The counts once the kernel's asynchronous releases are in (stable for 0.3 s)."""
        last, deadline = counts(), time.monotonic() + 10
        while time.monotonic() < deadline:
            time.sleep(0.3)
            now = counts()
            if now == last:
                return now
            last = now
        return last

    assert read_whole(mnt.root / "l") == data
    fds, tasks = settled()
    for _ in range(10):
        assert read_whole(mnt.root / "l") == data
    assert stats(mnt)["requests"] >= 10
    deadline = time.monotonic() + 10  # a leak stays; a late release goes
    while (after := settled())[0] > fds and time.monotonic() < deadline:
        pass
    after_fds, after_tasks = after
    assert after_fds <= fds, fd_targets()
    # libfuse may start request threads up to mount.threads; the pool is fixed
    assert after_tasks <= tasks + mnt.settings["threads"]


# -- a slow OST: a real throttled device -----------------------------------------------------------


class SlowOst:
    """An ext4 file system on a loop device, mounted on an OST's directory, its reads throttled
    by the blkio controller (``blkio.throttle.read_bps_device``)."""

    def __init__(self, directory: Path, work: Path, bytes_per_second: int):
        self.directory, self.image = directory, work / "slow-ost.img"
        self.device = self.rule = None
        subprocess.run(["truncate", "-s", "128M", str(self.image)], check=True, timeout=30)
        subprocess.run(["mkfs.ext4", "-q", "-F", str(self.image)], check=True, timeout=60,
                       capture_output=True)
        self.device = subprocess.run(["losetup", "-f", "--show", str(self.image)], check=True,
                                     capture_output=True, text=True, timeout=30).stdout.strip()
        mode = directory.stat().st_mode & 0o7777
        subprocess.run(["mount", self.device, str(directory)], check=True, timeout=30)
        (directory / "lost+found").rmdir()
        os.chmod(directory, mode)
        st = os.stat(self.device)
        self.rule = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
        BLKIO.write_text(f"{self.rule} {bytes_per_second}\n")

    def close(self) -> None:
        if self.rule:
            BLKIO.write_text(f"{self.rule} 0\n")
        if self.device:
            subprocess.run(["umount", str(self.directory)], timeout=60)
            subprocess.run(["losetup", "-d", self.device], timeout=30)
        self.image.unlink(missing_ok=True)


def slow_ost_usable() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    if not BLKIO.exists():
        return "no blkio throttle (cgroup v1) here"
    for tool in ("losetup", "mkfs.ext4"):
        if not shutil.which(tool):
            return f"no {tool}"
    if not os.path.exists("/dev/loop-control"):
        return "no loop devices"
    return None


def drop_caches() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def test_the_solver_sends_fewer_pieces_to_a_slow_ost_than_round_robin(make_mount, monkeypatch):
    reason = slow_ost_usable()
    if reason:
        pytest.skip(reason)
    mnt = make_mount(ost_count=2, stripe_count=1)
    mnt.stop()
    slow = None
    try:
        slow = SlowOst(mnt.ost(1), mnt.store.parent, 4 * MIB)
        configure(mnt, MIB, "round-robin", monkeypatch)
        data, layout = mirrored_file(mnt, "s", 4 * MIB)
        assert {c.ost_list[0] for c in layout.components} == {0, 1}
        counted = {}
        for policy in ("round-robin", "solver"):
            configure(mnt, MIB, policy, monkeypatch)
            drop_caches()
            assert read_whole(mnt.root / "s") == data
            counted[policy] = pieces(mnt)
            assert stats(mnt)["requests"] > 0
        rr, solver = counted["round-robin"], counted["solver"]
        assert rr.get(1, 0) > 0
        print("pieces per OST:", counted)
        assert solver.get(1, 0) < rr.get(1, 0), counted
        assert sum(solver.values()) == sum(rr.values())
    finally:
        mnt.stop()
        if slow:
            slow.close()


def direct_read(path: Path, offset: int, length: int) -> bytes:
    """One O_DIRECT read (the mount gets it as one request of up to 1 MiB)."""
    import mmap

    buf = mmap.mmap(-1, length)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        got = os.preadv(fd, [buf], offset)
        return bytes(buf[:got])
    finally:
        os.close(fd)
        buf.close()


def test_an_unmirrored_request_over_several_objects_reads_each_object_once(make_mount):
    mnt = make_mount(ost_count=4, stripe_count=4)
    data = os.urandom(4 * MIB)
    (mnt.root / "wide").write_bytes(data)
    reads = lambda: {o["ost"]: o["reads"] for o in stats(mnt)["osts"]}  # noqa: E731
    before, start = reads(), stats(mnt)
    for offset in range(0, 4 * MIB, MIB):  # 16 stripes of 64 KiB, 4 on each OST
        assert direct_read(mnt.root / "wide", offset, MIB) == data[offset:offset + MIB]
    after, got = reads(), stats(mnt)
    assert got["striped"] - start["striped"] == 4 and got["striped_fallbacks"] == 0
    # each OST's four stripes of a request are adjacent in its object: one preadv each
    assert {ost: after[ost] - before.get(ost, 0) for ost in after} == {0: 4, 1: 4, 2: 4, 3: 4}
    # a request not on stripe edges; a read within one stripe is not "striped"
    offset = 3 * 4096
    assert direct_read(mnt.root / "wide", offset, MIB - 4096) == data[offset:offset + MIB - 4096]
    assert stats(mnt)["striped"] - got["striped"] == 1
    assert direct_read(mnt.root / "wide", 4096, 8192) == data[4096:4096 + 8192]
    assert stats(mnt)["striped"] - got["striped"] == 1
    # a sparse file: objects 1 and 2 are empty, object 3 ends early; zeros where nothing is
    with open(mnt.root / "sparse", "wb") as out:
        out.write(data[:65536])
        out.seek(3 * MIB - 65536)
        out.write(data[:4096])
        out.truncate(4 * MIB)
    want = data[:65536] + bytes(3 * MIB - 2 * 65536) + data[:4096] + bytes(MIB + 65536 - 4096)
    assert len(want) == 4 * MIB
    for offset in range(0, 4 * MIB, MIB):
        assert direct_read(mnt.root / "sparse", offset, MIB) == want[offset:offset + MIB]
