"""What the benchmarks that run ``scratchkeeper mount`` on a rig of their own share (dispatch,
tiering, qos_mount, layout, mount_recovery): commands, caches, mount detection, the mount
process, OSTs on loop devices and their blkio throttles and counters, a memory cgroup, a file's
digest, the rig's teardown, and :class:`MountRig`, the part of a rig every one of them has."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Hashable, Iterable, Mapping
from pathlib import Path


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def sh(argv: list[str], timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, timeout=timeout, **kwargs)


BLKIO = Path("/sys/fs/cgroup/blkio")
MEMCG = Path("/sys/fs/cgroup/memory")
#: mkfs.ext4 and mount options of an OST on a loop device: inode tables and journal written at
#: once (no lazy init writing in the background under a measurement), no atime writes
EAGER_EXT4 = ("-E", "lazy_itable_init=0,lazy_journal_init=0")
NOATIME = ("-o", "noatime")


def drop_caches(sync_timeout: float | None = None) -> None:
    """Cold caches: dirty pages written back, then page cache, dentries and inodes dropped.
    ``sync_timeout``: sync in a child bounded so (a sync through a hung FUSE mount would not
    return)."""
    if sync_timeout is None:
        os.sync()
    else:
        subprocess.run(["timeout", "-k", "10", str(int(sync_timeout)), "sync"], check=False)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def mounted(path: Path) -> bool:
    with open("/proc/self/mountinfo", encoding="utf-8") as info:
        return any(line.split(" ")[4] == str(path) for line in info)


def start_mount(scratch: Path, config: Path, log: Path, preexec_fn=None,
                env: dict | None = None) -> subprocess.Popen:
    """``scratchkeeper mount`` of ``config`` at ``scratch``, once it answers."""
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "scratchkeeper", "mount", str(scratch), "-c", str(config)],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=preexec_fn,
            env=env)
    deadline = time.monotonic() + 30
    while not mounted(scratch):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the mount did not start:\n{log.read_text()[-2000:]}")
        time.sleep(0.05)
    os.stat(scratch)
    return process


def stop_mount(scratch: Path, process: subprocess.Popen | None) -> None:
    """Unmount (again after a second, lazily at last) and wait for the server."""
    if mounted(scratch):
        if subprocess.run(["fusermount3", "-u", str(scratch)], timeout=60).returncode:
            time.sleep(1)
            if subprocess.run(["fusermount3", "-u", str(scratch)], timeout=60).returncode:
                subprocess.run(["fusermount3", "-u", "-z", str(scratch)], timeout=60)
    if process is not None:
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=60)


def loop_ost(image: Path, size: int, mountpoint: Path, devices: list[str],
             mounts: list[Path], ext4_options: tuple[str, ...] = EAGER_EXT4,
             mount_options: tuple[str, ...] = NOATIME) -> str:
    """An OST of its own device: a ``size``-byte ext4 image on a loop device mounted at
    ``mountpoint`` (empty). The device and the mount are appended to ``devices`` and
    ``mounts`` as soon as they exist, for :func:`tear_down`; returns the device's
    ``major:minor`` (the blkio throttle's key)."""
    sh(["truncate", "-s", str(size), str(image)])
    sh(["mkfs.ext4", "-q", "-F", *ext4_options, str(image)], capture_output=True)
    device = sh(["losetup", "-f", "--show", str(image)], capture_output=True,
                text=True).stdout.strip()
    devices.append(device)
    sh(["mount", *mount_options, device, str(mountpoint)])
    mounts.append(mountpoint)
    (mountpoint / "lost+found").rmdir()
    st = os.stat(device)
    return f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"


def throttle_reads(rules: Iterable[str], bps: int | None = None,
                   iops: int | None = None) -> None:
    """Set each device's read throttles (cgroup-v1 blkio of the root cgroup; 0: off, None: that
    limit left as it is). ``rules``: the devices' ``major:minor``."""
    for rule in rules:
        if bps is not None:
            (BLKIO / "blkio.throttle.read_bps_device").write_text(f"{rule} {bps}\n")
        if iops is not None:
            (BLKIO / "blkio.throttle.read_iops_device").write_text(f"{rule} {iops}\n")


def device_reads(rules: Mapping[str, Hashable], counter: str = "io_serviced") -> dict:
    """What each device served so far (``blkio.throttle.io_serviced``: reads,
    ``io_service_bytes``: bytes read), summed per value of ``rules`` (``major:minor`` -> key)."""
    out = dict.fromkeys(rules.values(), 0)
    for line in (BLKIO / f"blkio.throttle.{counter}").read_text().splitlines():
        words = line.split()
        if len(words) == 3 and words[0] in rules and words[1] == "Read":
            out[rules[words[0]]] += int(words[2])
    return out


def sha256(path: Path) -> str:
    """The SHA-256 of a file read through the mount (or anywhere), 4 MiB at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(4 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def tear_down(name: str, stop, unthrottle, mounts: list[Path], devices: list[str],
              cgroup: Path | None) -> None:
    """Undo a rig, each step whatever the one before did: ``stop()`` the mount, ``unthrottle()``
    the devices (None: none were throttled), unmount the OST file systems (last mounted first,
    lazily at last), detach the loop devices, remove the memory cgroup once it is empty."""
    try:
        stop()
    except Exception as err:
        print(f"benchmarks.{name}: stopping the mount: {err}", file=sys.stderr)
    if unthrottle is not None:
        try:
            unthrottle()
        except OSError as err:
            print(f"benchmarks.{name}: throttle off: {err}", file=sys.stderr)
    for path in reversed(mounts):
        if mounted(path) and subprocess.run(["umount", str(path)], timeout=60).returncode:
            subprocess.run(["umount", "-l", str(path)], timeout=60)
    for device in devices:
        subprocess.run(["losetup", "-d", device], timeout=60)
    if cgroup is not None and cgroup.exists():
        for _ in range(50):
            try:
                cgroup.rmdir()
                break
            except OSError:
                time.sleep(0.2)
        else:
            print(f"benchmarks.{name}: {cgroup} could not be removed", file=sys.stderr)


class MemoryCgroup:
    """A cgroup-v1 memory cgroup bounding the page cache of the processes put in it."""

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def create(cls, name: str, limit: int) -> MemoryCgroup:
        """A new cgroup ``name`` (made unique by this process's id) limited to ``limit`` bytes."""
        path = MEMCG / f"{name}-{os.getpid()}"
        path.mkdir()
        (path / "memory.limit_in_bytes").write_text(f"{limit}\n")
        return cls(path)

    def join(self) -> None:
        """preexec_fn: the child into the cgroup."""
        with open(self.path / "cgroup.procs", "w") as procs:
            procs.write(str(os.getpid()))

    def reset_peak(self) -> None:
        (self.path / "memory.max_usage_in_bytes").write_text("0\n")
        (self.path / "memory.failcnt").write_text("0\n")

    def peak(self) -> dict:
        read = lambda name: int((self.path / name).read_text())  # noqa: E731
        stat = dict(line.split() for line in (self.path / "memory.stat").read_text().splitlines())
        return {"max_usage": read("memory.max_usage_in_bytes"), "failcnt": read("memory.failcnt"),
                "rss": int(stat.get("total_rss", 0)), "cache": int(stat.get("total_cache", 0))}


class MountRig:
    """What every rig has: a work folder holding ``scratch`` (the mount point), ``store`` (its
    OSTs ``ost0000``..), ``site.toml`` and ``mount.log``; the loop devices, mounts and memory
    cgroup it made (for :func:`tear_down`); the mount process. A rig writes its own site
    configuration and builds its own OSTs."""

    name = "mount_rig"          # benchmarks.NAME in messages

    def __init__(self, work: Path):
        self.work = Path(work)
        self.scratch, self.store = self.work / "scratch", self.work / "store"
        self.config = self.work / "site.toml"
        self.log = self.work / "mount.log"
        self.process: subprocess.Popen | None = None
        self.devices: list[str] = []
        self.mounts: list[Path] = []
        self.cgroup: MemoryCgroup | None = None

    def ost(self, index: int) -> Path:
        return self.store / f"ost{index:04d}"

    def join_cgroup(self) -> None:
        """preexec_fn: the child (the mount, a reader) into the memory cgroup, if there is one."""
        if self.cgroup is not None:
            self.cgroup.join()

    def start(self, env: dict | None = None) -> None:
        self.process = start_mount(self.scratch, self.config, self.log,
                                   self.join_cgroup if self.cgroup is not None else None, env)

    def stop(self) -> None:
        stop_mount(self.scratch, self.process)
        self.process = None

    def cli(self, *args: str, timeout: float = 300,
            check: bool = False) -> subprocess.CompletedProcess:
        """``scratchkeeper -c site.toml ARGS``, its output captured."""
        return subprocess.run([sys.executable, "-m", "scratchkeeper", "-c", str(self.config),
                               *args], capture_output=True, text=True, timeout=timeout,
                              check=check)

    def xattr(self, name: str) -> dict:
        """A counter the mount shows as an extended attribute of its root (JSON)."""
        return json.loads(os.getxattr(self.scratch, name))

    def unthrottle(self) -> None:
        """The rig's throttles off (a rig that throttles its devices says how)."""

    def throttled(self) -> bool:
        return False

    def close(self) -> None:
        """Undo everything, each step whatever the one before did."""
        tear_down(self.name, self.stop, self.unthrottle if self.throttled() else None,
                  self.mounts, self.devices, self.cgroup.path if self.cgroup else None)
