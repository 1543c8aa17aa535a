"""File-close events for eager replica removal (the thesis, §4.5.3).

Local striped store: a file's data lives in one object per stripe under ``store_root/ostNNNN``,
and the scratchkeeper reader (``store cat``/``get``, ``open_reader``) opens and closes the
objects it needs around every ``read`` call; there is no file-level open to watch. So the
watcher puts ``IN_OPEN | IN_CLOSE_NOWRITE`` inotify watches on the OST directories, maps object
names back to the replicated files, and counts a file as *closed* once every open of its
primary objects has been closed and nothing has opened them again for ``close_quiet`` seconds.
The quiet period joins the per-chunk open/close pairs of one sequential read into one access.
Only accesses after the job was seen running count, and none while the daemon itself is copying
the file.

Lustre: ``lfs changelog`` CLOSE records (type 11) of the files with a replica. Lustre records
CLOSE for a file opened read-only only when OPEN records are enabled too, so the MDT needs
``lctl set_param mdd.<fsname>-MDT0000.changelog_mask="+OPEN +CLOSE"`` and a registered changelog
user (``lctl --device <fsname>-MDT0000 changelog_register`` prints ``cl1``). Without them the
daemon removes replicas at job end only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import select
import struct
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..errors import CommandError, ReplicationError
from ..runner import get_runner
from ..storage.lustre.lfs import parse_changelog

log = logging.getLogger(__name__)

IN_OPEN = 0x00000020
IN_CLOSE_NOWRITE = 0x00000010
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
_EVENT = struct.Struct("iIII")


@dataclass
class _Access:
    """Opens and closes of one watched file's primary objects since its replica became ready."""

    outstanding: int = 0
    last_close: float = 0.0
    last_event: float = 0.0


@dataclass
class CloseTracker:
    """Turns object open/close events into file closes; pure bookkeeping, fed by the watcher.

    A file is watched from the moment its replica is ready (the daemon's own copying is over by
    then), so a job that reads its input the second it starts is seen even though the daemon
    notices the dispatch a cycle later: :meth:`closed_since` asks about closes after the job's
    start time.
    """

    quiet: float = 2.0
    _objects: dict[str, str] = field(default_factory=dict)      # object id -> path
    _access: dict[str, _Access] = field(default_factory=dict)   # path -> accesses
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def watch(self, path: str, object_ids: Iterable[str]) -> None:
        """Follow the objects of ``path`` (its primary); already watched: unchanged."""
        with self._lock:
            if path in self._access:
                return
            self._access[path] = _Access()
            for object_id in object_ids:
                self._objects[object_id] = path

    def unwatch(self, path: str) -> None:
        with self._lock:
            self._access.pop(path, None)
            for object_id in [o for o, p in self._objects.items() if p == path]:
                del self._objects[object_id]

    def watched(self) -> set[str]:
        with self._lock:
            return set(self._access)

    def event(self, object_id: str, opened: bool, when: float) -> None:
        with self._lock:
            path = self._objects.get(object_id)
            access = self._access.get(path) if path else None
            if access is None:
                return
            if opened:
                access.outstanding += 1
            else:
                # an open from before the watch began has no matching count: stay at zero
                access.outstanding = max(0, access.outstanding - 1)
                access.last_close = when
            access.last_event = when

    def closed_since(self, path: str, since: float, now: float) -> bool:
        """Whether ``path`` was closed after ``since`` and has stayed unopened for ``quiet`` s."""
        with self._lock:
            access = self._access.get(path)
            return (access is not None and access.last_close >= since
                    and access.outstanding == 0 and now - access.last_event >= self.quiet)


class InotifyWatcher:
    """inotify on the local store's OST directories, feeding a :class:`CloseTracker`."""

    def __init__(self, directories: Iterable[str], tracker: CloseTracker):
        self.tracker = tracker
        self.directories = list(directories)
        self._fd = -1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._libc = None

    def start(self) -> None:
        name = ctypes.util.find_library("c")
        libc = ctypes.CDLL(name, use_errno=True)
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise ReplicationError(f"inotify_init1: {os.strerror(ctypes.get_errno())}")
        for directory in self.directories:
            wd = libc.inotify_add_watch(fd, os.fsencode(directory), IN_OPEN | IN_CLOSE_NOWRITE)
            if wd < 0:
                code = ctypes.get_errno()
                os.close(fd)
                raise ReplicationError(f"{directory}: inotify_add_watch: {os.strerror(code)}"
                                       + (" (raise fs.inotify.max_user_watches)"
                                          if code == errno.ENOSPC else ""))
        self._fd = fd
        self._thread = threading.Thread(target=self._loop, name="inotify", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _loop(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self._fd], [], [], 0.5)
            if not ready:
                continue
            try:
                buffer = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                continue
            except OSError as err:
                log.warning("inotify read failed, close events stop: %s", err)
                return
            now = time.time()
            for object_id, mask in parse_events(buffer):
                if mask & IN_Q_OVERFLOW:
                    log.warning("inotify queue overflow: some closes missed (job end still "
                                "removes replicas)")
                    continue
                if object_id:
                    self.tracker.event(object_id, bool(mask & IN_OPEN), now)


def parse_events(buffer: bytes) -> list[tuple[str, int]]:
    """``struct inotify_event`` records as ``(name, mask)``."""
    events = []
    offset = 0
    while offset + _EVENT.size <= len(buffer):
        _, mask, _, length = _EVENT.unpack_from(buffer, offset)
        offset += _EVENT.size
        name = buffer[offset:offset + length].rstrip(b"\0").decode(errors="replace")
        offset += length
        events.append((name, mask))
    return events


# -- Lustre changelog (the parser is the lfs backend's: scratchkeeper.storage.lustre.lfs) -------
class ChangelogReader:
    """Reads CLOSE records of one MDT for the files of interest, and clears what it read.

    A busy file system writes many records; only the FIDs of files with a replica matter, so
    paths are turned into FIDs once (``lfs path2fid``) instead of every record into a path.
    """

    def __init__(self, lfs: str, mdt: str, user: str, *, timeout: float = 30.0):
        if not mdt or not user:
            raise ReplicationError("replication.changelog_mdt and replication.changelog_user "
                                   "must both be set to read Lustre changelogs")
        self.lfs, self.mdt, self.user, self.timeout = lfs, mdt, user, timeout
        self._fids: dict[str, str] = {}      # path -> fid

    def fid_of(self, path: str) -> str | None:
        if path not in self._fids:
            try:
                out = get_runner().run([self.lfs, "path2fid", path], timeout=self.timeout,
                                       mutating=False).stdout
            except CommandError:
                return None
            self._fids[path] = out.strip().strip("[]")
        return self._fids[path]

    def forget(self, path: str) -> None:
        self._fids.pop(path, None)

    def closes(self, paths: set[str]) -> tuple[dict[str, float], int | None]:
        """When each of ``paths`` was last closed since the last clear; the last record read."""
        try:
            text = get_runner().run([self.lfs, "changelog", self.mdt], timeout=self.timeout,
                                    mutating=False).stdout
        except CommandError as err:
            raise ReplicationError(f"lfs changelog {self.mdt}: {err}") from err
        records = parse_changelog(text)
        by_fid = {}
        for path in paths:
            fid = self.fid_of(path)
            if fid:
                by_fid[fid] = path
        closed: dict[str, float] = {}
        for record in records:
            if record.type_name == "CLOSE" and record.fid in by_fid:
                path = by_fid[record.fid]
                closed[path] = max(closed.get(path, 0.0), record.when)
        return closed, (records[-1].recno if records else None)

    def clear(self, up_to: int) -> None:
        get_runner().run([self.lfs, "changelog_clear", self.mdt, self.user, str(up_to)],
                         timeout=self.timeout, mutating=True)
