"""Transparent recovery through the scratch mount (issue 15): an unmodified ``sha256sum`` (or
``dd``) reads a staged file through the mount while one of its OSTs fails.

* with a mirror on other OSTs the read goes on at once;
* without one, and recoveryd running, the read stalls until recoveryd's patch commits and then
  finishes with the right checksum (the reader started before the OST failed);
* without recoveryd the read fails with EIO after ``mount.recovery_timeout``, never with wrong
  bytes or a short count;
* with two users, the owner (not root) reads through the mount and the mount asks recoveryd as
  root; another user who may not read the file is stopped at ``open`` by the kernel
  (``default_permissions``) and triggers nothing.

Files are staged as ``stage commit`` leaves them (the source URI, its SHA-256 and size as
``user.scratchkeeper.*``), with a ``file://`` source (fast) or the local cluster's GridFTP
server (the real case). recoveryd runs in this process on the mount's own site configuration:
its socket workers only, without the periodic check, so that only the mount's report can start
a patch.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest

from scratchkeeper.config import load_config
from scratchkeeper.errors import SchedulerError
from scratchkeeper.planner import records as planner_records
from scratchkeeper.recovery import records
from scratchkeeper.recovery.service import RecoveryService
from scratchkeeper.state import StateStore
from scratchkeeper.storage import LayoutRequest, open_backend
from scratchkeeper.storage.base import XATTR_PREFIX
from scratchkeeper.storage.layout import FileLayout
from waiting import wait_for

MiB = 1 << 20
LOV = "security.scratchkeeper.lov"
SIZE = 256 * MiB        # the stalled read of (b)
SMALL = 32 * MiB        # the other cases
OWNER = 4242            # a uid with no name: the kernel and recoveryd go by numbers
OTHER = 4343
READ_TIMEOUT = 120      # the longest any reader of these tests may take
STRIPES = dict(stripe_count=4, stripe_size=1 * MiB)
SETTINGS = dict(ost_count=8, recovery_timeout=60.0, threads=4)


class NoQueue:
    """No scheduler: recoveryd's job ordering is not what these tests are about."""

    def snapshot(self):
        raise SchedulerError("no scheduler in this test")


def pattern(size: int, seed: int) -> bytes:
    """Bytes that differ in every 32-byte block (a stripe read from the wrong place shows)."""
    out = bytearray()
    block = 0
    while len(out) < size:
        out += hashlib.sha256(f"{seed}:{block}".encode()).digest() * 1024
        block += 1
    return bytes(out[:size])


def stage(mnt, name: str, data: bytes, uri: str, *, owner=(0, 0), mode=0o644,
          stripe_count=4, stripe_size=1 * MiB) -> FileLayout:
    """Put ``data`` in the mount's store as ``stage commit`` leaves a staged input."""
    backend = open_backend(load_config(mnt.config))
    backend.create(name, LayoutRequest(stripe_count=stripe_count, stripe_size=stripe_size),
                   owner=owner, mode=mode)
    for offset in range(0, len(data), 16 * MiB):
        backend.write(name, offset, data[offset:offset + 16 * MiB])
    backend.set_xattr(name, XATTR_PREFIX + "source", uri.encode())
    backend.set_xattr(name, XATTR_PREFIX + "sha256", hashlib.sha256(data).hexdigest().encode())
    backend.set_xattr(name, XATTR_PREFIX + "size", str(len(data)).encode())
    # and the record recovery trusts (trusted.*, the source's endpoint), as stage commit does
    store = planner_records.open_records(StateStore(load_config(mnt.config).state.database))
    planner_records.write_recovery_record(backend, store, name, source=uri, size=len(data),
                                          sha256=hashlib.sha256(data).hexdigest())
    return backend.layout(name)


def file_source(mnt, name: str, data: bytes) -> str:
    """A ``file://`` source every user may read, beside the mount's store."""
    folder = mnt.store.parent / "sources"
    folder.mkdir(mode=0o755, exist_ok=True)
    path = folder / name
    path.write_bytes(data)
    os.chmod(path, 0o644)
    return f"file://{path}"


def layout_of(mnt, name: str) -> FileLayout:
    return FileLayout.from_lov(os.getxattr(mnt.mdt / name, LOV), name)


def fail_ost(mnt, index: int) -> None:
    """``store fail-ost``: the store's own call (the OST's directory renamed); returns once the
    mount saw it (its OST watcher, woken by inotify, logs each change)."""
    line = f"OST {index} is failed"
    seen = mnt.log.read_text().count(line)
    open_backend(load_config(mnt.config)).fail_ost(index)
    wait_for(lambda: mnt.log.read_text().count(line) > seen, f"the mount to log {line!r}",
             timeout=10)


@contextmanager
def failed_osts(mnt):
    """Restore, at the end, every OST the test failed."""
    try:
        yield
    finally:
        backend = open_backend(load_config(mnt.config))
        for index in range(mnt.settings["ost_count"]):
            if (mnt.store / f"ost{index:04d}.failed").exists():
                backend.restore_ost(index)


@contextmanager
def recoveryd(mnt):
    """recoveryd on the mount's site configuration (its socket, store and state)."""
    service = RecoveryService(load_config(mnt.config), scheduler=NoQueue())
    service.start()
    try:
        yield service
    finally:
        service.shutdown()


def drop_cache(path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def read_position(pid: int, path: Path) -> int | None:
    """Where the process's descriptor of ``path`` stands (None: not open yet)."""
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                    with open(f"/proc/{pid}/fdinfo/{fd}") as info:
                        return int(info.readline().split()[1])
            except (FileNotFoundError, ProcessLookupError):
                continue
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def start_reader(argv: list[str], path: Path, *, user: int | None = None) -> subprocess.Popen:
    """Start an unmodified reader of ``path`` and stop it (SIGSTOP) once it has read its first
    bytes, so that the OST can fail while it is in the middle of the file."""
    kwargs = {} if user is None else dict(user=user, group=user, extra_groups=[])
    reader = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)
    deadline = time.monotonic() + 30
    while True:
        position = read_position(reader.pid, path)
        if position:
            reader.send_signal(signal.SIGSTOP)
            break
        if reader.poll() is not None:
            raise AssertionError(f"{argv} ended before it could be stopped: "
                                 f"{reader.stderr.read().decode()}")
        if time.monotonic() > deadline:
            reader.kill()
            raise AssertionError(f"{argv} did not start reading {path}")
        time.sleep(0.0005)
    stopped = read_position(reader.pid, path)
    assert stopped is not None and stopped < os.stat(path).st_size // 2, stopped
    return reader


def finish(reader: subprocess.Popen) -> tuple[int, str, str, float]:
    """Let a stopped reader go on; (exit status, stdout, stderr, seconds until it ended)."""
    started = time.monotonic()
    reader.send_signal(signal.SIGCONT)
    try:
        out, err = reader.communicate(timeout=READ_TIMEOUT)
    except subprocess.TimeoutExpired:
        reader.kill()
        reader.communicate(timeout=30)
        raise AssertionError(f"the reader did not end within {READ_TIMEOUT}s") from None
    return reader.returncode, out.decode(), err.decode(), time.monotonic() - started


def lost_offset(layout: FileLayout, ost: int, size: int) -> int:
    return min(e.offset for e in layout.extents_on_ost(ost, size))


# -- (a) a mirror: no stall -------------------------------------------------------------------



def test_a_mirror_serves_the_failed_ost_without_a_stall(make_mount):
    mnt = make_mount(**{**SETTINGS, "recovery_timeout": 30.0})
    data = pattern(SMALL, 1)
    stage(mnt, "mirrored.bin", data, file_source(mnt, "mirrored.bin", data), **STRIPES)
    layout = mnt.add_mirror("mirrored.bin")
    failed = layout.first.ost_list[1]
    path = mnt.root / "mirrored.bin"
    drop_cache(path)
    with failed_osts(mnt):
        reader = start_reader(["sha256sum", str(path)], path)
        fail_ost(mnt, failed)
        status, out, err, seconds = finish(reader)
    assert status == 0, err
    assert out.split()[0] == hashlib.sha256(data).hexdigest()
    assert seconds < 5.0, seconds  # never a recovery wait (30 s here)
    log = mnt.log.read_text()
    assert "waiting up to" not in log
    assert layout_of(mnt, "mirrored.bin") == layout  # nothing was rebuilt


# -- (b) no mirror, recoveryd running: the read stalls until the patch commits -----------------

def _stalled_read(mnt, name: str, data: bytes, uri: str) -> None:
    layout = stage(mnt, name, data, uri, **STRIPES)
    failed = layout.ost_list[2]
    path = mnt.root / name
    drop_cache(path)
    with failed_osts(mnt), recoveryd(mnt) as service:
        reader = start_reader(["sha256sum", str(path)], path)
        fail_ost(mnt, failed)
        status, out, err, seconds = finish(reader)
        ended = time.time()
        request = records.last_request(service.store, str(path))
    assert status == 0, err
    assert out.split()[0] == hashlib.sha256(data).hexdigest()
    # the reader really waited for recoveryd: the mount reported the OST, recoveryd patched it
    log = mnt.log.read_text()
    assert f"is on failed OST {failed} and no mirror holds it" in log, log[-2000:]
    assert "not recovered: EIO" not in log
    assert request is not None and request["origin"] == "report" and request["state"] == "done"
    assert request["requested_by"] == 0  # the mount asks as root
    rebuilt = layout_of(mnt, name)
    assert failed not in rebuilt.ost_list and rebuilt.layout_gen > layout.layout_gen
    outcome = json.loads(request["outcome"])
    lost = sum(e.length for e in layout.extents_on_ost(failed, len(data)))
    assert outcome["state"] == "patched" and outcome["patched_bytes"] == lost
    # the reader was still reading when the report came, and ended after the patch
    assert ended >= request["created"] + outcome["patch_seconds"], (ended, dict(request))
    print(f"{name}: reader went on for {seconds:.3f}s; recoveryd: {outcome['seconds']:.3f}s "
          f"end to end, {outcome['patch_seconds']:.3f}s patch")
    # and the file stays whole afterwards, cold
    drop_cache(path)
    assert hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(data).digest()


def test_a_read_stalls_until_recoveryd_patched_the_stripe(make_mount):
    mnt = make_mount(**SETTINGS)
    data = pattern(SIZE, 2)
    _stalled_read(mnt, "stalled.bin", data, file_source(mnt, "stalled.bin", data))


def test_a_read_stalls_until_the_gridftp_patch_committed(make_mount, local_cluster):
    mnt = make_mount(**SETTINGS)
    data = pattern(SIZE, 3)
    folder = local_cluster.source_dir / f"mount-recovery-{uuid.uuid4().hex[:10]}"
    folder.mkdir()
    try:
        os.chmod(folder, 0o755)
        (folder / "gridftp.bin").write_bytes(data)
        os.chmod(folder / "gridftp.bin", 0o644)
        _stalled_read(mnt, "gridftp.bin", data,
                      f"{local_cluster.gridftp_url}{folder / 'gridftp.bin'}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# -- (c) no recoveryd: EIO after mount.recovery_timeout, never wrong bytes --------------------

def test_without_recoveryd_the_reader_gets_eio_after_the_timeout(make_mount):
    timeout = 1.5
    mnt = make_mount(**{**SETTINGS, "recovery_timeout": timeout})
    data = pattern(SMALL, 4)
    layout = stage(mnt, "orphan.bin", data, file_source(mnt, "orphan.bin", data), **STRIPES)
    failed = layout.ost_list[1]
    first_lost = lost_offset(layout, failed, len(data))
    path = mnt.root / "orphan.bin"
    copy = mnt.store.parent / "orphan.copy"
    drop_cache(path)
    with failed_osts(mnt):
        fail_ost(mnt, failed)
        # sha256sum: an error, never a checksum
        started = time.monotonic()
        result = mnt.run(["sha256sum", str(path)])
        waited = time.monotonic() - started
        assert result.returncode != 0
        assert "Input/output error" in result.stderr.decode()
        assert result.stdout == b""
        assert timeout - 0.1 <= waited < timeout + 10, waited
        # dd: what it copied before the error is the file's bytes, up to the lost stripe
        drop_cache(path)
        result = mnt.run(["dd", f"if={path}", f"of={copy}", "bs=4M"])
        assert result.returncode != 0 and b"Input/output error" in result.stderr
        copied = copy.read_bytes()
        assert len(copied) <= first_lost and copied == data[:len(copied)]
        # one request across a healthy and a lost stripe: EIO, not a short count
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        try:
            buf = bytearray(2 * MiB)
            with pytest.raises(OSError) as err:
                os.preadv(fd, [memoryview(buf)], first_lost - MiB)
            assert err.value.errno == errno.EIO
        finally:
            os.close(fd)
    copy.unlink(missing_ok=True)
    log = mnt.log.read_text()
    assert "not recovered: EIO" in log
    drop_cache(path)  # the OST back: whole again
    assert hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(data).digest()


# -- (d) two users ----------------------------------------------------------------------------

def test_the_owner_reads_through_a_patch_and_another_user_triggers_nothing(make_mount):
    mnt = make_mount(**SETTINGS)
    data = pattern(SMALL, 5)
    uri = file_source(mnt, "owned.bin", data)
    layout = stage(mnt, "owned.bin", data, uri, owner=(OWNER, OWNER), mode=0o600, **STRIPES)
    failed = layout.ost_list[0]
    path = mnt.root / "owned.bin"
    drop_cache(path)
    with failed_osts(mnt), recoveryd(mnt) as service:
        fail_ost(mnt, failed)
        # another user: the kernel refuses the open (default_permissions); nothing reaches
        # recoveryd, nothing is patched
        other = mnt.run(["sha256sum", str(path)], user=OTHER, group=OTHER, extra_groups=[])
        assert other.returncode != 0 and "Permission denied" in other.stderr.decode()
        other = mnt.run(["dd", f"if={path}", "of=/dev/null", "bs=1M", "count=8"],
                        user=OTHER, group=OTHER, extra_groups=[])
        assert other.returncode != 0 and b"Permission denied" in other.stderr
        # what must not happen cannot be waited for: a request sent would have reached
        # recoveryd well within this
        time.sleep(0.5)
        assert records.last_request(service.store, str(path)) is None
        assert "no mirror holds it" not in mnt.log.read_text()
        assert layout_of(mnt, "owned.bin") == layout
        # the owner (not root): the read waits for the patch recoveryd makes for the mount
        owner = mnt.run(["sha256sum", str(path)], user=OWNER, group=OWNER, extra_groups=[],
                        timeout=READ_TIMEOUT)
        request = records.last_request(service.store, str(path))
    assert owner.returncode == 0, owner.stderr
    assert owner.stdout.decode().split()[0] == hashlib.sha256(data).hexdigest()
    assert request is not None and request["state"] == "done" and request["requested_by"] == 0
    assert failed not in layout_of(mnt, "owned.bin").ost_list
    # the rebuilt objects still belong to the owner, readable by the owner only
    for obj in layout_of(mnt, "owned.bin").first.objects:
        st = os.stat(mnt.ost(obj.ost_index) / obj.object_id)
        assert st.st_uid == OWNER and st.st_mode & 0o077 == 0, (obj, oct(st.st_mode))


# -- a file recoveryd cannot patch: EIO, without hammering recoveryd --------------------------

def test_a_file_recoveryd_reports_lost_fails_with_eio_without_a_busy_wait(make_mount):
    timeout = 20.0
    mnt = make_mount(**{**SETTINGS, "recovery_timeout": timeout})
    data = pattern(SMALL, 6)
    uri = file_source(mnt, "gone.bin", data)
    layout = stage(mnt, "gone.bin", data, uri, **STRIPES)
    os.unlink(uri[len("file://"):])  # the source is gone: recoveryd can only report it lost
    failed = layout.ost_list[3]
    path = mnt.root / "gone.bin"
    drop_cache(path)
    with failed_osts(mnt), recoveryd(mnt) as service:
        waits = []
        real_wait = service.wait_for

        def counted(*args, **kwargs):
            waits.append(time.monotonic())
            return real_wait(*args, **kwargs)

        service.wait_for = counted
        fail_ost(mnt, failed)
        started = time.monotonic()
        result = mnt.run(["sha256sum", str(path)])
        waited = time.monotonic() - started
        request = records.last_request(service.store, str(path))
    assert result.returncode != 0 and result.stdout == b""
    assert "Input/output error" in result.stderr.decode()
    assert request is not None and request["state"] == "failed"
    # at once, not at mount.recovery_timeout: recoveryd said it is lost
    assert waited < timeout / 2, waited
    assert "recoveryd reports it lost" in mnt.log.read_text()
    # a few waits (one per FUSE request that reached the stripe), not a busy loop
    assert len(waits) <= 4 * (waited / 2 + 2), len(waits)


# -- (e) recoveryd and the mount never wait on each other --------------------------------------

def test_recoveryd_resolves_a_request_s_path_without_the_mount(make_mount):
    """A read waiting on recoveryd holds the file's page locked; recoveryd looking the path up
    through the mount then waits on that read (the kernel invalidates the page at the lookup
    of a changed file): both stall for ever. So recoveryd resolves paths in the store's
    namespace: with the mount's server stopped, its checks still answer."""
    import threading

    from scratchkeeper.recovery.safety import check_inside_scratch

    mnt = make_mount(**SETTINGS)
    data = pattern(SMALL, 7)
    stage(mnt, "held.bin", data, file_source(mnt, "held.bin", data), **STRIPES)
    (mnt.root / "folder").mkdir()
    os.symlink("folder", mnt.root / "via")
    backend = open_backend(load_config(mnt.config))
    answers = []

    def check():
        check_inside_scratch(str(mnt.root / "held.bin"), backend)
        check_inside_scratch(str(mnt.root / "via" / "new.bin"), backend)
        answers.append(backend.stat(str(mnt.root / "held.bin")).size)

    mnt.process.send_signal(signal.SIGSTOP)
    try:
        checker = threading.Thread(target=check, daemon=True)
        checker.start()
        checker.join(timeout=10)
        assert answers == [len(data)], "recoveryd's path checks went through the mount"
    finally:
        mnt.process.send_signal(signal.SIGCONT)
    checker.join(timeout=30)


def test_a_read_s_report_to_a_recoveryd_that_never_answers_is_bounded(tmp_path):
    """The mount's callback gives a report and a wait no more than the slice (plus the connect
    bound), whatever recoveryd does: a silent service cannot hold a read for ever."""
    import socket
    import threading

    from conftest import write_config
    from scratchkeeper.mount.serve import _recover_callback

    config_path, _ = write_config(tmp_path)
    config = load_config(config_path)
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.bind(config.recovery.socket)
    silent.listen(16)  # accepts (the kernel's backlog), never reads, never answers
    try:
        recover = _recover_callback(config)
        reader = threading.Thread(target=recover, args=(str(tmp_path / "scratch" / "any.bin"), 1,
                                                        1.0, True), daemon=True)
        reader.start()
        reader.join(timeout=4.0)
        assert not reader.is_alive(), "the read's report waited past its slice"
    finally:
        silent.close()
