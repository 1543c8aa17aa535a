"""The rig of the layout benchmarks: a store of n OSTs on throttled loop devices, its mount, and
parallel O_DIRECT readers (``python -m benchmarks.layout``; docs/benchmarks/layout/report.md).

:class:`LayoutRig` is meant to be shared by the experiments on layouts (the layout paper): the Table 4
verification in ``__main__`` and others reading files of chosen layouts through the mount::

    rig = LayoutRig(work, osts=4, read_bps=8 << 20, read_iops=80, readers=16)
    try:
        rig.build(ost_bytes)                      # loop devices, ext4, throttles set
        path = rig.make_file("a.dat", size, stripe_count=4, stripe_size=1 << 20,
                             ost_list=(0, 1, 2, 3))
        rig.start()                               # scratchkeeper mount; reader processes
        result = rig.read_case([ReadJob(path, offsets, request_size), ...])
    finally:
        rig.close()                               # everything undone, whatever happened

* Each OST is an ext4 file system on its own loop device, the loop device's image a file in a
  tmpfs of the rig's own (so no real disk is under it: only the throttle makes the device
  slow), its reads throttled on their own by the cgroup-v1 blkio controller of the root cgroup
  (``blkio.throttle.read_bps_device`` and ``read_iops_device``).
* Files are made through the store's own API (``open_backend(...).create`` with a
  ``LayoutRequest`` of stripe count, size and OST list, then ``write``), as
  ``scratchkeeper store put -c -S -o`` does, and read through the mount.
* The mount reads the OSTs' objects through their page cache: :meth:`LayoutRig.drop` drops the
  objects' pages (``POSIX_FADV_DONTNEED`` on every object file) so that the next reads reach
  the devices, and :meth:`LayoutRig.read_case` does so before it reads; the readers open the
  mount's files with ``O_DIRECT`` (no page cache on the mount's side).
* :meth:`LayoutRig.read_case` runs one :class:`ReadJob` per reader process, all started
  together, and gives the wall time from the first start to the last end and the reads each
  OST's device served (``blkio.throttle.io_serviced``/``io_service_bytes``) meanwhile.
"""

from __future__ import annotations

import mmap
import multiprocessing
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.mount_rig import (
    MountRig,
    device_reads,
    loop_ost,
    mounted,
    say,
    sh,
    throttle_reads,
)

MiB = 1 << 20


@dataclass(frozen=True)
class ReadJob:
    """One reader process: ``pread`` of ``request_size`` bytes at each of ``offsets`` of
    ``path`` (a file on the mount), in that order, ``O_DIRECT``."""

    path: str
    offsets: tuple[int, ...]
    request_size: int


def _reader(conn) -> None:
    """A reader process: per job, open, say ready, wait for go, read, send the times."""
    buffers: dict[int, mmap.mmap] = {}
    while True:
        job = conn.recv()
        if job is None:
            return
        try:
            path, offsets, size = job
            if size not in buffers:
                buffers[size] = mmap.mmap(-1, size)
            buf = buffers[size]
            fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        except OSError as err:
            conn.send(("error", f"{job[0]}: open: {err}"))
            continue
        try:
            conn.send(("ready",))
            conn.recv()
            got = 0
            start = time.monotonic()
            for offset in offsets:
                n = os.preadv(fd, [buf], offset)
                if n != size:
                    raise OSError(f"short read: {n} of {size} bytes at {offset}")
                got += n
            end = time.monotonic()
            conn.send(("done", start, end, got))
        except OSError as err:
            conn.send(("error", f"{path}: {err}"))
        finally:
            os.close(fd)


class ReaderPool:
    """``size`` reader processes forked once and reused for every case (a process per reader,
    so that they run in parallel, not under one interpreter lock)."""

    def __init__(self, size: int):
        context = multiprocessing.get_context("fork")
        self.conns, self.processes = [], []
        for _ in range(size):
            parent, child = context.Pipe()
            process = context.Process(target=_reader, args=(child,), daemon=True)
            process.start()
            child.close()
            self.conns.append(parent)
            self.processes.append(process)

    def run(self, jobs: list[ReadJob]) -> list[tuple[float, float, int]]:
        """Each job on its own reader, started together: ``(start, end, bytes)`` each."""
        if len(jobs) > len(self.conns):
            raise ValueError(f"{len(jobs)} jobs: the pool has {len(self.conns)} readers")
        conns = self.conns[:len(jobs)]
        for conn, job in zip(conns, jobs):
            conn.send((job.path, job.offsets, job.request_size))
        errors = [answer[1] for answer in (conn.recv() for conn in conns)
                  if answer[0] == "error"]
        if errors:
            raise RuntimeError(f"reader: {errors[0]}")
        for conn in conns:
            conn.send("go")
        answers = [conn.recv() for conn in conns]
        errors = [a[1] for a in answers if a[0] == "error"]
        if errors:
            raise RuntimeError(f"reader: {errors[0]}")
        return [(a[1], a[2], a[3]) for a in answers]

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(None)
            except OSError:
                pass
        for process in self.processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join(timeout=5)


class LayoutRig(MountRig):
    """``osts`` OSTs (ext4 on loop devices on a tmpfs), each read-throttled on its own to
    ``read_bps`` bytes/s and ``read_iops`` requests/s (0: that limit off), the store on them and
    ``scratchkeeper mount`` of it with ``threads`` request threads; ``readers`` reader
    processes for :meth:`read_case`, which waits ``settle`` seconds before each run.

    The blkio throttle grants each device its budget in 100 ms slices, a whole slice's worth
    at once (measured: at 200 reads/s, 20 reads at once, then none for 100 ms); a device idle
    for more than a slice starts a new one. The pause before each run makes every run start
    on fresh slices, so that one run does not inherit the debt of the one before."""

    def __init__(self, work: Path, *, osts: int = 4, read_bps: int = 0, read_iops: int = 0,
                 threads: int = 64, readers: int = 16, settle: float = 0.2,
                 name: str = "layout"):
        super().__init__(work)
        self.osts, self.name = osts, name
        self.read_bps, self.read_iops = read_bps, read_iops
        self.threads, self.readers, self.settle = threads, readers, settle
        self.images = self.work / "images"
        self.pool: ReaderPool | None = None
        self.rules: dict[str, int] = {}      # "major:minor" -> OST index
        self.tmpfs = False
        self.backend = None

    # ------------------------------------------------------------------ building

    def build(self, ost_bytes: int) -> None:
        """The OST file systems (``ost_bytes`` of data each, at most), the site config and the
        throttles."""
        os.chmod(self.work, 0o755)
        self.scratch.mkdir()
        self.images.mkdir()
        image_bytes = ost_bytes + ost_bytes // 8 + 64 * MiB
        sh(["mount", "-t", "tmpfs", "-o", f"size={self.osts * image_bytes + 64 * MiB},mode=0700",
            "tmpfs", str(self.images)])
        self.tmpfs = True
        for index in range(self.osts):
            self.ost(index).mkdir(parents=True)
            rule = loop_ost(self.images / f"ost{index}.img", image_bytes, self.ost(index),
                            self.devices, self.mounts)
            self.rules[rule] = index
        self.write_config()
        self.throttle(True)

    def write_config(self) -> None:
        self.config.write_text(f"""
[storage]
scratch_root = "{self.scratch}"
store_root = "{self.store}"
ost_count = {self.osts}
stripe_count = 1
stripe_size = {MiB}
[state]
database = "{self.work / 'state.db'}"
[recovery]
socket = "{self.work / 'recovery.sock'}"
[mount]
threads = {self.threads}
read_log_interval = 0
[logging]
level = "WARNING"
""")

    def throttle(self, on: bool) -> None:
        """Set (or remove: 0) every device's read throttles."""
        throttle_reads(self.rules, bps=self.read_bps if on else 0,
                       iops=self.read_iops if on else 0)

    def throttled(self) -> bool:
        return bool(self.rules)

    def unthrottle(self) -> None:
        self.throttle(False)

    def make_file(self, path: str, size: int, stripe_count: int, stripe_size: int,
                  ost_list: tuple[int, ...] | None = None) -> str:
        """A file of ``size`` bytes at ``path`` (below the scratch mount) with this layout,
        made through the store (``store put -c -S -o``); its path on the mount. The data: a
        random 4 MiB block repeated, each 4 KiB stamped with its offset."""
        from scratchkeeper.storage.layout import LayoutRequest

        if self.backend is None:
            from scratchkeeper.config import load_config
            from scratchkeeper.storage import open_backend
            self.backend = open_backend(load_config(self.config))
        full = str(self.scratch / path)
        if ost_list is not None and len(ost_list) != stripe_count:
            raise ValueError(f"{path}: OST list {ost_list} for stripe count {stripe_count}")
        if "/" in path:
            raise ValueError(f"{path}: a name in the mount's root directory")
        self.backend.create(full, LayoutRequest(stripe_count=stripe_count,
                                                stripe_size=stripe_size,
                                                ost_list=tuple(ost_list) if ost_list else None))
        block = bytearray(os.urandom(4 * MiB))
        for offset in range(0, size, len(block)):
            for stamp in range(0, len(block), 4096):
                block[stamp:stamp + 8] = (offset + stamp).to_bytes(8, "little")
            self.backend.write(full, offset, bytes(block[:min(len(block), size - offset)]))
        return full

    def start(self, env: dict | None = None) -> None:
        """The mount (files made before or after are seen) and the reader processes."""
        super().start(env)
        if self.pool is None:
            self.pool = ReaderPool(self.readers)

    def cli(self, *args: str, timeout: float = 900,
            check: bool = False) -> subprocess.CompletedProcess:
        return super().cli(*args, timeout=timeout, check=check)

    # ------------------------------------------------------------------ reading

    def drop(self) -> None:
        """Drop the OSTs' object pages from the page cache, so reads reach the devices."""
        for index in range(self.osts):
            for folder, _, names in os.walk(self.ost(index)):
                for name in names:
                    fd = os.open(os.path.join(folder, name), os.O_RDONLY)
                    try:
                        os.fdatasync(fd)    # DONTNEED leaves dirty pages in the cache
                        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    finally:
                        os.close(fd)

    def counters(self) -> dict[int, tuple[int, int]]:
        """Per OST: (reads, bytes read) its device served so far (blkio, root cgroup)."""
        reads = device_reads(self.rules)
        served = device_reads(self.rules, "io_service_bytes")
        return {ost: (reads[ost], served[ost]) for ost in reads}

    def read_case(self, jobs: list[ReadJob], *, drop: bool = True) -> dict:
        """Run ``jobs`` in parallel, one per reader process (page cache of the objects dropped
        first unless ``drop`` is false; then ``settle`` seconds idle): ``wall`` seconds from
        the first start to the last end, ``bytes`` read, per-reader ``seconds``, and
        ``device_reads``/``device_bytes`` per OST."""
        if self.pool is None:
            raise RuntimeError("the rig is not started")
        if drop:
            self.drop()
        time.sleep(self.settle)
        before = self.counters()
        times = self.pool.run(jobs)
        after = self.counters()
        return {"wall": max(t[1] for t in times) - min(t[0] for t in times),
                "bytes": sum(t[2] for t in times),
                "seconds": [t[1] - t[0] for t in times],
                "device_reads": [after[o][0] - before[o][0] for o in range(self.osts)],
                "device_bytes": [after[o][1] - before[o][1] for o in range(self.osts)]}

    # ------------------------------------------------------------------ teardown

    def close(self) -> None:
        """Undo everything, each step whatever the one before did."""
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        self.backend = None
        super().close()
        self.devices, self.mounts = [], []
        if self.tmpfs and mounted(self.images):
            if subprocess.run(["umount", str(self.images)], timeout=60).returncode:
                subprocess.run(["umount", "-l", str(self.images)], timeout=60)
        self.tmpfs = False

    def leftovers(self) -> list[str]:
        """What of the rig is still there (mounts, loop devices of its images)."""
        left = [str(p) for p in [self.scratch, self.images] + [self.ost(i)
                                                               for i in range(self.osts)]
                if mounted(p)]
        loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
        left += [line.split(":")[0] for line in loops.splitlines() if str(self.images) in line]
        return left


__all__ = ["LayoutRig", "ReadJob", "ReaderPool", "say"]
