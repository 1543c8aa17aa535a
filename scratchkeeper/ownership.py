"""Acting for a user: open a file only if it is that user's, or only with that user's rights.

A privileged service (recoveryd runs as root) reads and records files for users. Two rules, one
module, used by the planner's ``stage commit`` and by recovery alike:

* :func:`open_owned` opens a file the service will act on for a user: it must be a regular file
  owned by that user, reached without a symbolic link at its end.
* :func:`open_as` opens a file *with the user's credentials* (uid, gid, supplementary groups),
  so the kernel decides what the user may read: a source the user could not read themselves is
  refused, wherever a symbolic link on the way points. The open runs in a forked child that
  drops to the user (``setgroups``/``setresgid``/``setresuid``) and hands the descriptor back
  over a socket pair; the service's threads keep their own credentials (``setfsuid`` would be
  per thread but Python has no call for it, and ``setresuid`` in a thread changes them all).
"""

from __future__ import annotations

import errno
import os
import pwd
import signal
import socket
import stat
import struct
import threading
import time
from dataclasses import dataclass

from .errors import InputError, PermissionDenied
from .inputfiles import READ_FLAGS


@dataclass(frozen=True)
class Owner:
    """Whose rights a file is opened with: uid, primary gid and supplementary groups."""

    uid: int
    gid: int
    groups: tuple[int, ...] = ()

    @classmethod
    def of(cls, uid: int, gid: int) -> Owner:
        """The user ``uid`` with primary group ``gid`` and the groups the system gives them
        (none beyond ``gid`` for a uid without a passwd entry)."""
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            return cls(uid, gid, (gid,))
        try:
            groups = os.getgrouplist(name, gid)
        except OSError:
            groups = [gid]
        return cls(uid, gid, tuple(sorted(set(groups))))

    @property
    def key(self) -> str:
        return f"{self.uid}:{self.gid}:{','.join(map(str, self.groups))}"


def open_owned(path: str, uid: int) -> int:
    """Open the regular file ``path`` for reading on behalf of ``uid``; the descriptor.

    For a privileged service acting for a user on a path that user can change: the last
    component is opened without following a link, and the file the kernel actually opened must
    be at ``path`` (its directories resolved when the request came in; a directory swapped for a
    link in between shows up here) and be owned by ``uid``. The caller closes the descriptor.
    """
    expected = os.path.realpath(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise InputError(f"{path}: is a symbolic link; refusing to follow it") from None
        raise InputError(f"{path}: cannot open: {err.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"{path}: not a regular file")
        actual = os.readlink(f"/proc/self/fd/{fd}")
        if actual != expected:
            raise InputError(f"{path}: changed while it was being opened (now {actual}); "
                             "refusing it")
        if info.st_uid != uid:
            raise PermissionDenied(f"{path}: owned by uid {info.st_uid}, not by uid {uid}")
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_as(path: str, owner: Owner, *, timeout: float = 60.0, flags: int = READ_FLAGS) -> int:
    """Open ``path`` with ``owner``'s rights; the descriptor (the caller closes it).

    Raises the ``OSError`` the open raised as that user (``EACCES``, ``ENOENT``...), so callers
    decide what to tell; :class:`PermissionDenied` when this process can neither be the user nor
    become them. Each call resolves the path anew.
    """
    euid = os.geteuid()
    if euid == owner.uid:
        return os.open(path, flags)  # already the user (or root acting for root)
    if euid != 0:
        raise PermissionDenied(f"{path}: cannot open it as uid {owner.uid}: this process runs "
                               f"as uid {euid}, not as root")
    parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child only makes system calls, then exits
            _child_open(child_end, path, owner, flags)
        child_end.close()
        try:
            return _receive_descriptor(parent_end, path, timeout)
        finally:
            _reap(pid)
    finally:
        parent_end.close()
        child_end.close()


_ERRNO = struct.Struct("i")


def _child_open(channel: socket.socket, path: str, owner: Owner, flags: int) -> None:
    """In the forked child: become ``owner``, open, send the descriptor or the errno, exit."""
    code = 0
    try:
        try:
            os.setgroups(list(owner.groups) or [owner.gid])
            os.setresgid(owner.gid, owner.gid, owner.gid)
            os.setresuid(owner.uid, owner.uid, owner.uid)
            fd = os.open(path, flags)
            socket.send_fds(channel, [b"\0"], [fd])
        except OSError as err:
            channel.sendall(b"E" + _ERRNO.pack(err.errno or errno.EIO))
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def _receive_descriptor(channel: socket.socket, path: str, timeout: float) -> int:
    channel.settimeout(timeout)
    try:
        message, fds, _, _ = socket.recv_fds(channel, 1 + _ERRNO.size, 1)
        if not fds and message[:1] == b"E":
            while len(message) < 1 + _ERRNO.size:
                more = channel.recv(1 + _ERRNO.size - len(message))
                if not more:
                    break
                message += more
    except TimeoutError:
        raise OSError(errno.ETIMEDOUT, f"no answer within {timeout:g}s") from None
    if fds:
        for extra in fds[1:]:
            os.close(extra)
        return fds[0]
    if message[:1] == b"E" and len(message) == 1 + _ERRNO.size:
        code = _ERRNO.unpack(message[1:])[0]
        raise OSError(code, os.strerror(code), path)
    raise OSError(errno.EIO, "the helper opening it as its owner failed", path)


def _reap(pid: int) -> None:
    """Collect the child; one that hangs (a dead NFS server) is killed and reaped meanwhile."""
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return
        time.sleep(0.001)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    threading.Thread(target=os.waitpid, args=(pid, 0), daemon=True,
                     name="open-as-reap").start()
