"""The files the burst-buffer path writes or reads for a job, and with which modes.

* Root's files in the path's folder (the pool's held bytes, each job's env file): written whole
  (a temporary of a name of its own beside the target, flushed to disk, renamed over it), so a
  reader never sees half a file and two writers never share a temporary.
* The owner's umask: the job's data jobs create the staged files, so they take the umask the
  owner had at ``sbatch``, which Slurm saved in the job's environment (``SLURM_UMASK``).
* The chain's spool folder: the data jobs' scripts and logs, readable by the job's owner alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..errors import InputError
from ..inputfiles import read_limited

log = logging.getLogger(__name__)

#: the umask of a job whose environment Slurm did not save where the path looks for it
#: (``<job's folder>/environment``, beside the script Slurm hands each stage): owner-only files
FALLBACK_UMASK = 0o077
#: Slurm saves at most this much environment here for a job (it refuses larger ones at sbatch)
ENVIRONMENT_LIMIT = 64 << 20
#: ``SLURM_UMASK=0022`` as sbatch records it, one NUL-terminated entry of the environment file
#: (a 4-byte count, then the entries): an entry begins after the count or after a NUL
_UMASK_ENTRY = re.compile(rb"(?:\A[\s\S]{4}|\x00)SLURM_UMASK=(0?[0-7]{1,3})\x00")
#: the spool's modes: the folder, root's scripts, the owner's files (the data jobs' logs)
SPOOL_DIR_MODE, SPOOL_SCRIPT_MODE, SPOOL_FILE_MODE = 0o700, 0o700, 0o600


def replace_file(target: Path, text: str, mode: int = 0o600) -> None:
    """Write ``text`` as ``target`` whole: a temporary of its own in the same folder, flushed to
    disk, renamed over the target, the folder flushed (the rename survives a crash)."""
    folder = target.parent
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as stream:
            stream.write(text)
            stream.flush()
            os.fchmod(stream.fileno(), mode)
            os.fsync(stream.fileno())
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    directory = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold the exclusive lock of the file ``path`` (made 0600 if missing) for the block; a
    process killed in it releases it with its descriptor."""
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


def owner_umask(script_path: str) -> int:
    """The umask the job's owner had at ``sbatch`` (``SLURM_UMASK``, which sbatch puts in the
    job's environment), from the environment file slurmctld keeps beside the job's script
    (``<StateSaveLocation>/hash.N/job.ID/{script,environment}``: the path Slurm hands every
    stage); :data:`FALLBACK_UMASK` when it is not there or holds none. It is the owner's own
    value, and it only sets the modes of the owner's own staged files."""
    environment = Path(script_path).parent / "environment"
    try:
        data = read_limited(environment, ENVIRONMENT_LIMIT, what="job environment")
    except InputError as err:
        log.warning("%s: the owner's umask unknown, staged files get %04o: %s", environment,
                    FALLBACK_UMASK, err)
        return FALLBACK_UMASK
    found = _UMASK_ENTRY.search(data)
    if found is None:
        log.warning("%s: no SLURM_UMASK, staged files get %04o", environment, FALLBACK_UMASK)
        return FALLBACK_UMASK
    return int(found.group(1), 8) & 0o777


@contextlib.contextmanager
def submitting_with_umask(umask: int) -> Iterator[None]:
    """The block's ``sbatch`` calls give their jobs ``umask``: sbatch records its own umask in
    the job's environment as ``SLURM_UMASK`` unless the variable is set (then it keeps it), and
    slurmstepd applies it to the job's processes, which create the staged files."""
    previous_mask = os.umask(umask)
    previous_variable = os.environ.get("SLURM_UMASK")
    os.environ["SLURM_UMASK"] = f"{umask:04o}"
    try:
        yield
    finally:
        os.umask(previous_mask)
        if previous_variable is None:
            os.environ.pop("SLURM_UMASK", None)
        else:
            os.environ["SLURM_UMASK"] = previous_variable


def restrict_spool(folder: Path, owner_uid: int) -> None:
    """The chain's spool readable by its owner alone: the folder 0700 (it is the owner's: the
    data jobs write their logs in it as the owner), root's scripts 0700 (sbatch reads them as
    root), the owner's files (the data jobs' logs) 0600. A log a data job is writing keeps the
    mode the job's umask gave it until the next call, inside the closed folder.

    The owner may rename, link or replace anything in the folder: each entry is opened without
    following a link, relative to the folder opened once, and changed only when it is a regular
    file with one link, so root never changes the mode of a file the owner pointed it at."""
    directory = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fchmod(directory, SPOOL_DIR_MODE)
        for name in os.listdir(directory):
            _restrict(directory, name, owner_uid)
    finally:
        os.close(directory)


def _restrict(directory: int, name: str, owner_uid: int) -> None:
    try:
        descriptor = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
                             | os.O_CLOEXEC, dir_fd=directory)
    except OSError:
        return  # a link, or gone since the listing
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            return
        if name.endswith(".sh") and info.st_uid in (0, owner_uid):
            mode = SPOOL_SCRIPT_MODE
        elif info.st_uid == owner_uid:
            mode = SPOOL_FILE_MODE
        else:
            return  # root's other files (none on this path) keep what their writer gave them
        if stat.S_IMODE(info.st_mode) != mode:
            os.fchmod(descriptor, mode)
    finally:
        os.close(descriptor)
