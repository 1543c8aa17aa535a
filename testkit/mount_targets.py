"""The file systems the mount is measured against, each mounted and always unmounted (the
mount benchmark and the pjdfstest conformance run, ``benchmarks/mount``; its fast subset in
``tests/mount/test_conformance.py``).

* ``plain``: a directory of the local disk, no FUSE (the ceiling).
* ``bindfs``: ``bindfs`` over a plain directory on the same disk, run as root (the peer: a
  passthrough FUSE file system on the high-level libfuse3 API).
* ``mount``: ``scratchkeeper mount`` over a local store on the same disk.

Every target yields a ``Target`` whose ``path`` is where the workload runs. A FUSE target is
waited for in /proc/self/mountinfo (bounded) and unmounted on the way out, on errors too
(``fusermount3 -u``, then ``-u -z`` if the first did not return or failed).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRATCHKEEPER = Path(sys.executable).parent / "scratchkeeper"
MOUNT_WAIT = 30.0  # seconds a FUSE file system may take to appear in mountinfo

#: bindfs's options in the benchmark. Run as root, bindfs adds allow_other and
#: default_permissions itself (the kernel checks permissions, as it does for the scratch mount,
#: which mounts with both). Debian's bindfs 1.14.7 is built on libfuse 2.9, where the kernel
#: sends writes of one page (4 KiB) unless big_writes is given: with it, 128 KiB, libfuse 2's
#: largest (max_write=1048576 is capped there). --multithreaded because the scratch mount serves
#: requests on many threads (mount.threads): single-threaded bindfs would serialise the 4-job
#: runs. The conformance run uses bindfs's defaults (no options): its --multithreaded mode may
#: briefly show a new file with the wrong owner (bindfs(1), BUGS).
BINDFS_OPTIONS = ("--multithreaded", "-o", "big_writes")
#: The benchmark's bindfs gets the kernel read-ahead window the scratch mount sets on its own
#: FUSE device (read_ahead_kb = mount.max_request, 1 MiB; the kernel's default is 128 KiB): a
#: cold 1 GiB dd read through bindfs measured 0.7-1.8 GB/s with 128 KiB, 2.1-2.5 GB/s with 1 MiB.
BINDFS_READ_AHEAD_KB = 1024


@dataclass
class Target:
    name: str
    path: Path                # where workloads run (inside the mount point for FUSE targets)
    description: str          # how it was mounted, for the reports
    mount_options: str = ""   # the options the kernel shows in mountinfo
    log: Path | None = None   # the FUSE daemon's standard error
    extra: dict = field(default_factory=dict)


def mount_version() -> str:
    """The commit the mount was built from, and whether its sources differ from it."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                          text=True, timeout=30, check=False).stdout.strip() or "unknown"
    changed = subprocess.run(["git", "status", "--porcelain", "--", "scratchkeeper/mount",
                              "setup.py"], cwd=REPO, capture_output=True, text=True, timeout=30,
                             check=False).stdout.strip()
    return f"{head}" + (" with uncommitted changes to the mount" if changed else "")


def mount_available() -> bool:
    """Whether scratchkeeper has its mount (the package scratchkeeper.mount) yet."""
    return importlib.util.find_spec("scratchkeeper.mount") is not None


def _unescape(field_: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo
    return field_.encode().decode("unicode_escape")


def mountinfo(mount_point: Path) -> dict | None:
    """The mountinfo entry of mount_point (fs type, source, options), or None."""
    wanted = os.path.realpath(mount_point)
    found = None
    with open("/proc/self/mountinfo") as lines:
        for line in lines:
            left, _, right = line.rstrip("\n").partition(" - ")
            fields = left.split()
            if _unescape(fields[4]) == wanted:
                fstype, source, super_options = (right.split(" ", 2) + ["", ""])[:3]
                found = {"fstype": fstype, "source": _unescape(source),
                         "options": fields[5] + "," + super_options}
    return found  # the last one listed is the one on top


def _bdi(mount_point: Path) -> Path | None:
    """/sys/class/bdi/MAJOR:MINOR of the file system mounted at mount_point."""
    wanted = os.path.realpath(mount_point)
    found = None
    with open("/proc/self/mountinfo") as lines:
        for line in lines:
            fields = line.split()
            if _unescape(fields[4]) == wanted:
                found = Path("/sys/class/bdi") / fields[2]
    return found


def read_ahead_kb(mount_point: Path) -> int | None:
    bdi = _bdi(mount_point)
    try:
        return int((bdi / "read_ahead_kb").read_text()) if bdi else None
    except OSError:
        return None


def wait_mounted(mount_point: Path, process: subprocess.Popen | None, log: Path | None,
                 timeout: float = MOUNT_WAIT) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        entry = mountinfo(mount_point)
        if entry and entry["fstype"].startswith("fuse"):
            return entry
        if process is not None and process.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
            raise RuntimeError(f"{mount_point}: the file system exited with {process.returncode} "
                               f"before it was mounted:\n{tail}")
        time.sleep(0.05)
    raise RuntimeError(f"{mount_point}: not mounted after {timeout:.0f} s")


def unmount(mount_point: Path, process: subprocess.Popen | None = None) -> None:
    """fusermount3 -u (bounded), lazily if that fails; then wait for the daemon to exit."""
    if mountinfo(mount_point):
        done = subprocess.run(["timeout", "-k", "5", "30", "fusermount3", "-u", str(mount_point)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
        if done.returncode != 0 and mountinfo(mount_point):
            subprocess.run(["timeout", "-k", "5", "30", "fusermount3", "-u", "-z",
                            str(mount_point)], check=False)
    if process is not None:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def remove_tree(path: Path, timeout: float = 600) -> None:
    """rm -rf under timeout (the tree may be inside a FUSE mount)."""
    if path.exists() or path.is_symlink():
        subprocess.run(["timeout", "-k", "10", str(int(timeout)), "rm", "-rf", str(path)],
                       check=False)


def run_group(argv: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run in a session of its own, text output captured; on a timeout or any
    exception (SIGTERM included, see exit_on_sigterm) the whole group is killed first, so that
    nothing is left working inside a mount that is about to be unmounted."""
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               errors="replace", start_new_session=True, **kwargs)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        raise
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


@contextlib.contextmanager
def exit_on_sigterm():
    """SIGTERM (timeout, kill) raises KeyboardInterrupt, as ^C does, so that finally blocks
    unmount what was mounted and remove what was written (the default action would end the
    process at once); pytest stops its session on it and still runs the fixtures' teardown."""
    def _exit(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, _exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def plain(base: Path):
    directory = base
    directory.mkdir(parents=True, exist_ok=True)
    try:
        yield Target("plain", directory, f"the directory {directory} (no FUSE)")
    finally:
        remove_tree(directory)


@contextlib.contextmanager
def bindfs(base: Path, options: tuple[str, ...] = BINDFS_OPTIONS,
           read_ahead: int | None = BINDFS_READ_AHEAD_KB):
    source, mount_point = base / "bindfs.src", base / "bindfs.mnt"
    source.mkdir(parents=True, exist_ok=True)
    mount_point.mkdir(parents=True, exist_ok=True)
    log = base / "bindfs.log"
    argv = ["bindfs", *options, str(source), str(mount_point)]
    try:
        # bindfs daemonizes once mounted: its exit status says whether the mount worked
        with open(log, "w") as err:
            done = subprocess.run(["timeout", "-k", "5", "60", *argv], stdout=err, stderr=err,
                                  check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed with exit {done.returncode}: "
                               + log.read_text(errors="replace")[-2000:])
        entry = wait_mounted(mount_point, None, log)
        if read_ahead is not None and (bdi := _bdi(mount_point)):
            (bdi / "read_ahead_kb").write_text(f"{read_ahead}\n")
        yield Target("bindfs", mount_point, "bindfs " + (" ".join(options) or "(its defaults)")
                     + f" over {source} (bindfs {_bindfs_version()}); read_ahead_kb "
                     f"{read_ahead_kb(mount_point)}", entry["options"], log)
    finally:
        unmount(mount_point)
        remove_tree(source)


def _bindfs_version() -> str:
    done = subprocess.run(["bindfs", "--version"], capture_output=True, text=True, timeout=10,
                          check=False)
    return (done.stdout or done.stderr).split()[-1] if (done.stdout or done.stderr) else "?"


def site_config(base: Path, *, ost_count: int = 8, stripe_count: int = 4,
                stripe_size: int = 1 << 20) -> Path:
    """A site configuration whose scratch root is base/scratch, the store base/store."""
    path = base / "site.toml"
    path.write_text(
        "# written by testkit/mount_targets.py\n"
        "[storage]\n"
        'backend = "local"\n'
        f'scratch_root = "{base / "scratch"}"\n'
        f'store_root = "{base / "store"}"\n'
        f"ost_count = {ost_count}\n"
        f"stripe_count = {stripe_count}\n"
        f"stripe_size = {stripe_size}\n"
        "[state]\n"
        f'database = "{base / "state.db"}"\n'
        "[recovery]\n"  # never the local cluster's recoveryd
        f'socket = "{base / "recovery.sock"}"\n')
    return path


@contextlib.contextmanager
def scratch_mount(base: Path, env: dict | None = None, **layout):
    """scratchkeeper mount base/scratch -c base/site.toml, in the foreground as a child (with
    ``env`` added to its environment: SK_MOUNT_PASSTHROUGH=0, SK_MOUNT_DISPATCH=...)."""
    if not mount_available():
        raise RuntimeError("scratchkeeper has no mount yet (no package scratchkeeper.mount)")
    mount_point = base / "scratch"
    mount_point.mkdir(parents=True, exist_ok=True)
    config = site_config(base, **layout)
    log = base / "mount.log"
    argv = [str(SCRATCHKEEPER), "mount", str(mount_point), "-c", str(config)]
    process = None
    try:
        with open(log, "w") as err:
            # its own session: a ^C to the benchmark must not kill it before its unmount
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                       cwd=REPO, start_new_session=True,
                                       env=dict(os.environ, **(env or {})))
        entry = wait_mounted(mount_point, process, log)
        shown = ", ".join(f"{k} = {v}" for k, v in _layout(layout).items())
        yield Target("mount", mount_point, f"scratchkeeper mount {mount_point} -c {config} "
                     f"({shown}; repository at {mount_version()}); read_ahead_kb "
                     f"{read_ahead_kb(mount_point)}", entry["options"], log,
                     {"config": str(config)})
    finally:
        if process is not None:
            unmount(mount_point, process)
        remove_tree(base / "store")


def _layout(layout: dict) -> dict:
    return {"ost_count": layout.get("ost_count", 8), "stripe_count": layout.get("stripe_count", 4),
            "stripe_size": layout.get("stripe_size", 1 << 20)}


def clean_base(base: Path) -> None:
    """Remove what a run left in base (nothing mounted there any more)."""
    for sub in ("bindfs.mnt", "scratch"):
        if mountinfo(base / sub):
            unmount(base / sub)
    shutil.rmtree(base, ignore_errors=True)


NO_MOUNT = "scratchkeeper has no mount yet (no package scratchkeeper.mount)"
