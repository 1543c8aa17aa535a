"""What the benchmarks that run ``scratchkeeper mount`` on a rig of their own share (dispatch,
tiering, qos_mount): commands, caches, mount detection, the mount process, a memory cgroup,
a file's digest and the rig's teardown."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def sh(argv: list[str], timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, timeout=timeout, **kwargs)


def drop_caches() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def mounted(path: Path) -> bool:
    with open("/proc/self/mountinfo", encoding="utf-8") as info:
        return any(line.split(" ")[4] == str(path) for line in info)


def start_mount(scratch: Path, config: Path, log: Path, preexec_fn=None) -> subprocess.Popen:
    """``scratchkeeper mount`` of ``config`` at ``scratch``, once it answers."""
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "scratchkeeper", "mount", str(scratch), "-c", str(config)],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=preexec_fn)
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
             mounts: list[Path]) -> str:
    """An OST of its own device: a ``size``-byte ext4 image on a loop device mounted at
    ``mountpoint`` (empty). The device and the mount are appended to ``devices`` and
    ``mounts`` as soon as they exist, for :func:`tear_down`; returns the device's
    ``major:minor`` (the blkio throttle's key)."""
    sh(["truncate", "-s", str(size), str(image)])
    sh(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", str(image)],
       capture_output=True)
    device = sh(["losetup", "-f", "--show", str(image)], capture_output=True,
                text=True).stdout.strip()
    devices.append(device)
    sh(["mount", "-o", "noatime", device, str(mountpoint)])
    mounts.append(mountpoint)
    (mountpoint / "lost+found").rmdir()
    st = os.stat(device)
    return f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"


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
