"""Recovery never writes outside the scratch root and never follows a symlink out of it, and
answers a user about a path only as far as that user can reach it."""

from __future__ import annotations

import os
import select
import stat

from ..errors import InputError
from ..ownership import Owner, _reap

_WALK = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW


def check_inside_scratch(full: str, scratch_root: str) -> None:
    """Refuse ``full`` if, with every symbolic link on the way resolved, it leaves the root.

    The path itself need not exist (the local store's files live in its namespace); the
    directories it names are checked as far as they exist.
    """
    root = os.path.realpath(scratch_root)
    real = os.path.realpath(full)
    if real != root and not real.startswith(root.rstrip("/") + "/"):
        raise InputError(f"{full}: leads outside the scratch root {root} (through a symbolic "
                         "link); refusing to touch it")
    if os.path.islink(full):
        raise InputError(f"{full}: is a symbolic link; refusing to follow it")



def reaches_own_file(root: str, relative: str, owner: Owner, timeout: float = 10.0) -> bool:
    """Whether ``owner`` (uid, gid, groups) reaches a regular file of their own at ``relative``
    below the namespace directory ``root``, as the kernel judges it for them: search
    permission on every directory below the scratch root (mode and POSIX ACLs), no symbolic
    link on the way.

    A path the user may not reach is answered like a missing one by whoever asks this, so it
    must be judged as the user, not as root: a forked child drops to the user's credentials
    and looks the path up one component at a time and says only yes or no. The scratch root
    is everyone's (the store keeps its MDT root private, users see it through the mount), so
    its entry is opened here, as root, and the child goes on from it; the child runs whether
    or not that entry exists, so that every answer costs the same.
    """
    parts = relative.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return False
    root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            first_fd = os.open(parts[0], os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC,
                               dir_fd=root_fd)
        except OSError:
            first_fd = -1
        try:
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child only makes system calls, then exits
                _child_reach(first_fd, parts[1:], owner, write_end)
            os.close(write_end)
            try:
                ready, _, _ = select.select([read_end], [], [], timeout)
                answer = os.read(read_end, 1) if ready else b""
            finally:
                os.close(read_end)
                _reap(pid)
        finally:
            if first_fd >= 0:
                os.close(first_fd)
    finally:
        os.close(root_fd)
    return answer == b"Y"


def _child_reach(first_fd: int, below: list[str], owner: Owner, write_end: int) -> None:
    answer = b"N"
    try:
        os.setgroups(list(owner.groups) or [owner.gid])
        os.setresgid(owner.gid, owner.gid, owner.gid)
        os.setresuid(owner.uid, owner.uid, owner.uid)
        if first_fd < 0:
            raise FileNotFoundError
        if below:
            *directories, name = below
            fd = os.open(".", _WALK, dir_fd=first_fd)  # a directory, not a link to one
            for component in directories:
                fd = os.open(component, _WALK, dir_fd=fd)
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        else:
            info = os.fstat(first_fd)
        if stat.S_ISREG(info.st_mode) and info.st_uid == owner.uid:
            answer = b"Y"
    except BaseException:
        pass
    finally:
        try:
            os.write(write_end, answer)
        finally:
            os._exit(0)
