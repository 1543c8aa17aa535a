"""Recovery never writes outside the scratch root and never follows a symlink out of it, and
answers a user about a path only as far as that user can reach it."""

from __future__ import annotations

import os
import select
import stat

from ..errors import InputError
from ..ownership import Owner, _reap

_WALK = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW


_MAX_LINKS = 40  # as the kernel's limit on symbolic links in one lookup (ELOOP)


def check_inside_scratch(full: str, backend) -> None:
    """Refuse ``full`` if, with every symbolic link on the way resolved, it leaves the root, or
    if it is a symbolic link itself.

    The path is resolved in the namespace users see through the scratch root (the local
    store's MDT, else the root itself), never through the scratch mount: a daemon the mount
    waits on (recoveryd answering a read's report) must not look a path up through that
    mount, or a file whose page the waiting read holds locked stalls both. A link's absolute
    target is the users' view: inside the scratch root it is followed in the namespace, any
    other leaves the root. The path itself need not exist (the local store's files live in
    its namespace); the directories it names are checked as far as they exist.
    """
    root = backend.paths.root
    namespace = str(getattr(backend, "mdt_root", root))
    parts = [part for part in backend.paths.relative(full).split("/") if part]
    resolved: list[str] = []
    links = 0
    while parts:
        part = parts.pop(0)
        if part == ".":
            continue
        if part == "..":
            if not resolved:
                raise InputError(f"{full}: leads outside the scratch root {root} (through a "
                                 "symbolic link); refusing to touch it")
            resolved.pop()
            continue
        candidate = os.path.join(namespace, *resolved, part)
        try:
            info = os.lstat(candidate)
        except OSError:
            resolved.append(part)  # not there (yet): nothing below it can be a link
            continue
        if not stat.S_ISLNK(info.st_mode):
            resolved.append(part)
            continue
        if not parts:  # the name the path ends at
            raise InputError(f"{full}: is a symbolic link; refusing to follow it")
        links += 1
        if links > _MAX_LINKS:
            raise InputError(f"{full}: too many symbolic links on the way; refusing it")
        target = os.readlink(candidate)
        if target.startswith("/"):
            norm = os.path.normpath(target)
            if norm != root and not norm.startswith(root.rstrip("/") + "/"):
                raise InputError(f"{full}: leads outside the scratch root {root} (through a "
                                 "symbolic link); refusing to touch it")
            resolved = []
            target = norm[len(root):]
        parts = [piece for piece in target.split("/") if piece] + parts


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
