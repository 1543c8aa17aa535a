"""Fixtures of the recovery tests: a private store and state per test, sources on the real servers.

Sources live in their own folder under the cluster's source directory (served by GridFTP and
nginx) and are removed afterwards; the shared store is never touched.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from scratchkeeper import digests
from scratchkeeper.config import SiteConfig, load_config
from scratchkeeper.errors import SchedulerError
from scratchkeeper.planner import records as planner_records
from scratchkeeper.recovery.client import RecoveryClient, ServiceUnavailable
from scratchkeeper.storage import LayoutRequest, open_backend
from scratchkeeper.storage.base import XATTR_PREFIX
from waiting import wait_for

#: where the tests' sources are: the local cluster's GridFTP and nginx (on the head's address on
#: the hosts' bridge, docs/local-cluster.rst), the tests' own servers on loopback, local files
TEST_SOURCES = ('["file://", "ftp://127.0.0.1:*", "gsiftp://127.0.0.1:*", "http://127.0.0.1:*", '
                '"ftp://198.18.77.1:*", "gsiftp://198.18.77.1:*", "http://198.18.77.1:*"]')


@dataclass
class Site:
    """A private scratch/store/state with the cluster's scheduler settings."""

    root: Path
    config: SiteConfig
    config_path: Path

    @property
    def backend(self):
        return open_backend(self.config)


def write_site(root: Path, *, ost_count: int = 40, extra: str = "",
               cluster_config: Path | None = None) -> Site:
    """A site.toml of our own under ``root`` (the cluster's [scheduler] section reused)."""
    (root / "scratch").mkdir(parents=True, exist_ok=True)
    scheduler = ""
    if cluster_config is not None:
        text = cluster_config.read_text()
        start = text.find("[scheduler]")
        end = text.find("\n[", start + 1)
        scheduler = text[start:end if end != -1 else None] if start != -1 else ""
    sections = {
        "storage": {"backend": '"local"', "scratch_root": f'"{root}/scratch"',
                    "store_root": f'"{root}/store"', "ost_count": str(ost_count)},
        "state": {"database": f'"{root}/state.db"'},
        # journal after every chunk, so progress callbacks (and kills) land between chunks
        "recovery": {"socket": f'"{root}/recoveryd.sock"', "probe_timeout": "2.0",
                     "check_interval": "0.5", "sync_bytes": "1", "journal_interval": "0",
                     # the cluster's loopback servers and local files (the tests of the
                     # allow-list set their own)
                     "allowed_sources": TEST_SOURCES},
        "retry": {"attempts": "3", "delay": "0.2", "backoff": "2.0"},
    }
    section = None
    for line in extra.strip().splitlines():
        line = line.strip()
        if line.startswith("["):
            section = sections.setdefault(line.strip("[] "), {})
        elif line:
            key, _, value = line.partition("=")
            section[key.strip()] = value.strip()
    text = scheduler + "\n" + "".join(
        f"[{name}]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items()) + "\n"
        for name, keys in sections.items())
    path = root / "site.toml"
    path.write_text(text)
    return Site(root, load_config(path), path)


def start_recoveryd(site: Site) -> subprocess.Popen:
    """recoveryd of ``site`` as its own process, once it answers on its socket; its log is
    ``recoveryd.log`` under the site."""
    process = subprocess.Popen([sys.executable, "-m", "scratchkeeper", "-c",
                                str(site.config_path), "recoveryd"], stdout=subprocess.DEVNULL,
                               stderr=open(site.root / "recoveryd.log", "ab"))
    client = RecoveryClient(site.config.recovery.socket)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            client.call({"op": "list"})
            return process
        except ServiceUnavailable:
            if process.poll() is not None:
                raise AssertionError(f"recoveryd exited with {process.returncode}: "
                                     f"{recoveryd_log(site)}") from None
            time.sleep(0.05)
    process.kill()
    raise AssertionError(f"recoveryd did not answer within 30 s: {recoveryd_log(site)}")


def stop_recoveryd(site: Site, daemon: subprocess.Popen, *, timeout: float = 30) -> int:
    """SIGTERM, then its exit code; a daemon still running after ``timeout`` fails the test with
    its threads' stacks (``kill -USR1``)."""
    daemon.send_signal(signal.SIGTERM)
    try:
        return daemon.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        masks = signal_masks(daemon.pid)  # a SIGTERM still pending, or blocked everywhere?
        log = site.root / "recoveryd.log"
        size = log.stat().st_size
        daemon.send_signal(signal.SIGUSR1)  # its threads' stacks, into its log
        try:
            wait_for(lambda: log.stat().st_size > size, "recoveryd's stacks", timeout=5)
        except AssertionError:
            pass  # the failure below says what the log holds, stacks or not
        daemon.kill()
        daemon.wait(timeout=10)
        raise AssertionError(f"recoveryd did not stop within {timeout:g} s of SIGTERM; its "
                             f"signal masks: {masks}; its threads then: "
                             f"{recoveryd_log(site, 80)}") from None


def signal_masks(pid: int) -> str:
    """The process's pending and caught signals and each thread's blocked and pending ones
    (/proc), for a failure message."""
    parts = []
    for status in [f"/proc/{pid}/status", *sorted(glob.glob(f"/proc/{pid}/task/*/status"))]:
        try:
            lines = open(status).read().splitlines()
        except OSError:
            continue
        parts.append(status.split("/")[-2] + " " + " ".join(
            line.replace("\t", "") for line in lines
            if line.startswith(("SigPnd", "ShdPnd", "SigBlk", "SigCgt"))))
    return "; ".join(parts)


def recoveryd_log(site: Site, lines: int = 15) -> str:
    """The end of the daemon's log, for a failure message (the site is removed afterwards)."""
    return "\n".join((site.root / "recoveryd.log").read_text(errors="replace")
                     .splitlines()[-lines:])


@pytest.fixture
def site_dir():
    """A folder every user can traverse (tmp_path is root-only), removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="sk-recovery-"))
    os.chmod(root, 0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def site(site_dir, local_cluster) -> Site:
    return write_site(site_dir, cluster_config=local_cluster.site_config)


class Sources:
    """Files in a private folder of the cluster's source directory, with their URIs."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.folder = cluster.source_dir / f"recovery-tests-{uuid.uuid4().hex[:10]}"
        self.folder.mkdir()
        os.chmod(self.folder, 0o755)

    def make(self, name: str, size: int, *, seed: int | None = None, mode: int = 0o644):
        data = os.urandom(size) if seed is None else _pattern(size, seed)
        path = self.folder / name
        path.write_bytes(data)
        os.chmod(path, mode)
        return path, data

    def ftp(self, path: Path) -> str:
        return f"{self.cluster.gridftp_url}{path}"

    def http(self, path: Path) -> str:
        return self.cluster.http_source_url + str(path.relative_to(self.cluster.source_dir))

    def file(self, path: Path) -> str:
        return f"file://{path}"

    def cleanup(self):
        shutil.rmtree(self.folder, ignore_errors=True)


def _pattern(size: int, seed: int) -> bytes:
    block = hashlib.sha256(str(seed).encode()).digest() * 2048
    return (block * (size // len(block) + 1))[:size]


@pytest.fixture
def sources(local_cluster):
    found = Sources(local_cluster)
    yield found
    found.cleanup()


def stage(backend, path: str, data: bytes, uri: str, *, stripe_count: int = 4,
          stripe_size: int = 1 << 20, owner: tuple[int, int] | None = None,
          extra_sources: list[str] | None = None, record_checksum: bool = True,
          digest_store=None, digest_block: int = 1 << 20,
          osts: tuple[int, ...] | None = None, trusted: bool = True) -> str:
    """Put ``data`` in the store as a staged input: layout, bytes and the stage-in xattrs.

    The record recovery trusts (``trusted.scratchkeeper.*``, as ``stage commit`` writes it)
    and the users' copies (``user.scratchkeeper.*``); ``trusted=False``: the users' copies
    only (a file committed before the trusted record existed). With ``digest_store`` (a
    StateStore), also the block digests ``stage commit`` records; with ``osts``, on those
    OSTs (``lfs setstripe -o``).
    """
    backend.create(path, LayoutRequest(stripe_count=stripe_count, stripe_size=stripe_size,
                                       ost_list=osts), owner=owner)
    for offset in range(0, len(data), 8 << 20):
        backend.write(path, offset, data[offset:offset + (8 << 20)])
    sha256 = hashlib.sha256(data).hexdigest() if record_checksum else None
    backend.set_xattr(path, XATTR_PREFIX + "source", uri.encode())
    if sha256:
        backend.set_xattr(path, XATTR_PREFIX + "sha256", sha256.encode())
    backend.set_xattr(path, XATTR_PREFIX + "size", str(len(data)).encode())
    if extra_sources:
        backend.set_xattr(path, XATTR_PREFIX + "sources", "\n".join(extra_sources).encode())
    if trusted:
        if digest_store is not None:
            planner_records.open_records(digest_store)
        planner_records.write_recovery_record(backend, digest_store, path, source=uri,
                                              sha256=sha256, size=len(data),
                                              sources=extra_sources or ())
    if digest_store is not None:
        digests.record(digest_store, backend.paths.resolve(path), hashlib.sha256(data).hexdigest(),
                       digests.digest_bytes(data, digest_block))
    return backend.paths.resolve(path)


def read_all(backend, path: str) -> bytes:
    size = backend.stat(path).size
    return b"".join(backend.read(path, offset, min(8 << 20, size - offset))
                    for offset in range(0, size, 8 << 20))


def corrupt_first_data_block(monkeypatch) -> list[int]:
    """Flip one byte of the first MODE E data block as it comes off the data connection.

    Returns the list the length of the corrupted receive is appended to (empty: not yet).
    """
    from scratchkeeper.transfer import gridftp
    flipped: list[int] = []
    real_recv = gridftp._recv_exactly

    def flip_once(conn, view, uri, offset=None):
        real_recv(conn, view, uri, offset)
        if not flipped and len(view) > gridftp._HEADER.size:  # headers are 17 bytes
            flipped.append(len(view))
            view[len(view) // 2] ^= 0xFF

    monkeypatch.setattr(gridftp, "_recv_exactly", flip_once)
    return flipped


NOBODY = 65534
OTHER_USER = "skother"
SHARED_GROUP = "skshare"  # skother's supplementary group


def other_user() -> tuple[int, int, int]:
    """uid and gid of a second unprivileged test user ``skother`` (beside ``skplain``), and
    the gid of ``skshare``, a supplementary group of skother's only; created when missing."""
    import grp

    from user_runtime import ensure_system_user
    if os.geteuid() != 0:
        pytest.skip("needs root to act as other users")
    entry = ensure_system_user(OTHER_USER, SHARED_GROUP)
    shared = grp.getgrnam(SHARED_GROUP)
    return entry.pw_uid, entry.pw_gid, shared.gr_gid


def run_as(uid: int, call) -> dict:
    """``call()`` in a forked child running as ``uid`` (gid the same, no groups); its result.

    A fork, not a new interpreter: the interpreter lives under /root, which other users cannot
    enter. Returns ``{"ok": True, "value": result}`` or ``{"ok": False, "kind": class name,
    "error": message}``; the result must be JSON-serialisable.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to uid, call, report through the pipe, exit at once
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            try:
                answer = {"ok": True, "value": call()}
            except BaseException as err:  # report any failure (SystemExit included) to the parent
                answer = {"ok": False, "kind": type(err).__name__, "error": str(err)}
            os.write(write_end, json.dumps(answer).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 65536):
        chunks.append(chunk)
    os.close(read_end)
    os.waitpid(pid, 0)
    return json.loads(b"".join(chunks))


class NoQueue:
    """A scheduler whose queue query fails: recoveryd's check must still work, without job
    order."""

    def snapshot(self):
        raise SchedulerError("no scheduler in this test")
