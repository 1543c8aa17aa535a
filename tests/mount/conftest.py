"""Fixtures of the scratch mount's tests: a store in a temporary directory, ``scratchkeeper mount``
started on its scratch root as a subprocess, and unmounted at teardown whatever happened.

Everything that touches the mount runs under a timeout: a FUSE server that stopped answering
must fail a test, not hang the run.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

START_TIMEOUT = 20.0
OP_TIMEOUT = 60  # seconds any command run against the mount may take


def mount_ids(mountpoint: Path) -> set[str]:
    """The ids of the scratch mounts /proc/self/mountinfo lists at ``mountpoint``."""
    target = str(mountpoint)
    ids = set()
    with open("/proc/self/mountinfo", encoding="utf-8") as info:
        for line in info:
            fields = line.split(" ")
            separator = fields.index("-")
            if fields[4] == target and fields[separator + 1] == "fuse.scratchkeeper":
                ids.add(fields[0])
    return ids


def mounted(mountpoint: Path) -> bool:
    """Whether /proc/self/mountinfo lists the scratch mount at ``mountpoint``."""
    return bool(mount_ids(mountpoint))


def unmount(mountpoint: Path) -> None:
    """``fusermount3 -u``, lazily (``-z``) if the mount is busy or its server is gone."""
    if not mounted(mountpoint):
        return
    result = subprocess.run(["fusermount3", "-u", str(mountpoint)], capture_output=True,
                            timeout=OP_TIMEOUT)
    if result.returncode != 0 and mounted(mountpoint):
        subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], capture_output=True,
                       timeout=OP_TIMEOUT)


@dataclass
class Mount:
    """A running ``scratchkeeper mount`` and its store."""

    root: Path          # the mount point (storage.scratch_root)
    store: Path         # storage.store_root
    config: Path
    log: Path
    settings: dict
    process: subprocess.Popen | None = None
    history: list[str] = field(default_factory=list)

    @property
    def mdt(self) -> Path:
        return self.store / "mdt"

    def ost(self, index: int) -> Path:
        return self.store / f"ost{index:04d}"

    def start(self, *extra: str) -> None:
        """Start the server and wait until its mount answers (a dead mount of a killed
        server is listed too until the new server detaches it, and answers ENOTCONN)."""
        log = open(self.log, "ab")
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "scratchkeeper", "mount", str(self.root), "-c",
                 str(self.config), *extra], stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        finally:
            log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while not self.answers():
            if self.process.poll() is not None:
                raise AssertionError(f"scratchkeeper mount exited {self.process.returncode}:\n"
                                     f"{self.log.read_text()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"not mounted after {START_TIMEOUT}s:\n{self.log.read_text()}")
            time.sleep(0.05)

    def answers(self) -> bool:
        """Whether a live scratch mount is at the mount point."""
        if not mounted(self.root):
            return False
        try:
            os.stat(self.root)
        except OSError:
            return False
        return True

    def describe(self) -> str:
        """The server's state (running, or how it ended) and the end of its log: what a failed
        test shows of its mount (a server that died leaves its clients ENOTCONN or, for what
        was in flight, ECONNABORTED, which say nothing of why)."""
        if self.process is None:
            state = "no server (stopped or killed by the test)"
        elif (code := self.process.poll()) is None:
            state = f"server {self.process.pid} running"
        elif code < 0:
            state = f"server {self.process.pid} killed by {signal.Signals(-code).name}"
        else:
            state = f"server {self.process.pid} exited {code}"
        try:
            lines = self.log.read_text(errors="replace").splitlines()[-40:]
        except OSError as err:
            lines = [f"(its log {self.log}: {err.strerror})"]
        return "\n".join([f"{self.root}: {state}; the end of {self.log}:", *lines])

    def stop(self) -> int | None:
        """Unmount and wait for the server; its exit status."""
        unmount(self.root)
        if self.process is None:
            return None
        try:
            return self.process.wait(timeout=OP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=OP_TIMEOUT)
            raise AssertionError(f"the mount did not exit after its unmount:\n"
                                 f"{self.log.read_text()}") from None
        finally:
            self.process = None

    def kill(self) -> None:
        """kill -9 the server (its mount stays behind, dead: ENOTCONN)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=OP_TIMEOUT)
        self.process = None

    def add_mirror(self, name: str):
        """Give the file ``name`` (relative to the mount) a second mirror on OSTs its first one
        does not use, with the store's own ``add_mirror`` (as replicad makes one)."""
        from scratchkeeper.config import load_config
        from scratchkeeper.storage import open_backend

        return open_backend(load_config(self.config)).add_mirror(str(self.root / name))

    def run(self, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("timeout", OP_TIMEOUT)
        return subprocess.run(argv, **kwargs)


def write_config(tmp_path: Path, **settings) -> tuple[Path, dict]:
    values = {"ost_count": 4, "stripe_count": 2, "stripe_size": 65536, "recovery_timeout": 2.0,
              "threads": 4, "attr_timeout": 1.0}
    values.update(settings)
    config = tmp_path / "site.toml"
    config.write_text(f"""
[storage]
scratch_root = "{tmp_path / 'scratch'}"
store_root = "{tmp_path / 'store'}"
ost_count = {values['ost_count']}
stripe_count = {values['stripe_count']}
stripe_size = {values['stripe_size']}
{values.get('storage_extra', '')}
{_pools(values.get('pools'))}
[state]
database = "{tmp_path / 'state.db'}"
[recovery]
socket = "{tmp_path / 'recovery.sock'}"
[mount]
recovery_timeout = {values['recovery_timeout']}
threads = {values['threads']}
attr_timeout = {values['attr_timeout']}
{values.get('mount_extra', '')}
[logging]
level = "INFO"
{values.get('extra', '')}
""")
    return config, values


def _pools(pools: dict[str, str] | None) -> str:
    """storage.pools as TOML (name = "0-1,3")."""
    if not pools:
        return ""
    return "[storage.pools]\n" + "".join(f'{name} = "{osts}"\n' for name, osts in pools.items())


def _usable() -> str | None:
    if os.geteuid() != 0:
        return "the scratch mount runs as root"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    try:
        import scratchkeeper.mount._fuse  # noqa: F401
    except ImportError as err:
        return f"the mount's extension is not built: {err}"
    return None


@pytest.fixture
def make_mount(request):
    """``make_mount(**settings)`` -> a started :class:`Mount` (unmounted at teardown).

    The store and mount point are in a directory of their own under /tmp, 0755, so that other
    users reach the mount (pytest's tmp_path is under a directory only root may enter). A test
    that fails shows each of its mounts' state and log (tests/conftest.py's report hook).
    """
    reason = _usable()
    if reason:
        pytest.skip(reason)
    mounts: list[Mount] = []
    request.node.sk_mounts = mounts
    tmp_path = Path(tempfile.mkdtemp(prefix="skmount-"))

    def make(**settings) -> Mount:
        os.chmod(tmp_path, 0o755)  # other users reach the mount point
        (tmp_path / "scratch").mkdir()
        config, values = write_config(tmp_path, **settings)
        mount = Mount(tmp_path / "scratch", tmp_path / "store", config, tmp_path / "mount.log",
                      values)
        mounts.append(mount)
        mount.start()
        return mount

    try:
        yield make
    finally:
        for mount in mounts:
            try:
                mount.stop()
            finally:
                unmount(mount.root)
        if not any(mounted(m.root) for m in mounts):  # never delete through a mount
            shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.fixture
def mnt(make_mount) -> Mount:
    """The mount with the default test settings (4 OSTs, 2 stripes of 64 KiB)."""
    return make_mount()
