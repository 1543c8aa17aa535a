"""What a data job does when its transfers end: record the staged files, or the failure.

``stage commit`` (run by the data job after its last transfer) checks every staged file exists,
measures size, SHA-256 and per-block CRC-32 (one read), hands it to the storage backend (the
local striped store takes it in; Lustre keeps it where it is) and writes the recovery metadata
as extended attributes and in the state store: ``user.scratchkeeper.*`` for users to read, and,
when it runs as root, the record recovery trusts (``trusted.scratchkeeper.*``, which no user
can write, and the source's endpoint; :func:`records.write_recovery_record`). Committing for a
user (recoveryd, for a data job that runs as them), every path is looked at as that user, and a
path they cannot reach gets the same answer as a missing one. ``stage fail`` records why the
data job failed and, for a stage-in, cancels the compute and stage-out jobs with that reason,
so nothing waits on a dead dependency.

Many data jobs end at once: the state database and the store's namespace are then busy. Each
step of a commit is retried while they stay locked (:func:`recorded`, for up to
:data:`COMMIT_LOCK_WAIT`), each try itself waiting :data:`~scratchkeeper.state.LOCK_WAIT`:
contention delays a commit, it never fails a stage-in whose transfers succeeded. The steps are
ordered so a retried one finds its work undone (the import) or redoes it idempotently (the
records are upserts).
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import select
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from .. import digests
from ..config import SiteConfig
from ..errors import InputError, PermissionDenied, ScratchkeeperError, UnknownJobError
from ..ownership import Owner, _reap, open_owned
from ..schedulers import get_scheduler
from ..state import DatabaseBusy, StateStore, retry_busy
from ..storage import open_backend
from ..storage.sources import open_regular
from . import records
from .predict import source_client, source_host
from .transfer_timing import timing_rows

log = logging.getLogger(__name__)

T = TypeVar("T")

XATTR = "user.scratchkeeper."
#: how long one step of a data job's commit is retried while the databases stay locked
COMMIT_LOCK_WAIT = 1800.0


@dataclass(frozen=True)
class CommittedFile:
    path: str
    source: str
    size: int
    checksum: str | None


def recorded(action: Callable[[], T], what: str) -> T:
    """``action()``, retried with growing jittered pauses while it raises :class:`DatabaseBusy`,
    for up to :data:`COMMIT_LOCK_WAIT` seconds."""
    def busy(err: BaseException) -> bool:
        if isinstance(err, DatabaseBusy):
            # not an error: SQLite's own words stay out of the log (they are the error's)
            log.warning("%s: databases busy, retrying (%s held by another process)", what,
                        str(err).split(":", 1)[0])
            return True
        return False
    return retry_busy(action, what, wait=COMMIT_LOCK_WAIT, busy=busy)


def _job_row(store: StateStore, chain_id: str, job_key: str):
    for row in records.chain_jobs(store, chain_id):
        if row["job_key"] == job_key:
            return row
    raise UnknownJobError(f"chain {chain_id} has no job {job_key!r}")


def _files_of(staged_row, owner: Owner | None = None, script: str = "") -> list[tuple[str, str]]:
    """(path, source) of a staged row; a directory contributes every file below it.

    ``owner``: a privileged service commits for that user, so the row's path is looked at, and
    a directory walked, with the user's rights (in a child running as them): a name the user
    may not reach is answered as a missing one (:func:`_unreachable`), and no name inside a
    directory the user may not read is ever listed.
    """
    path, source = staged_row["path"], staged_row["source"]
    if owner is not None:
        found = _walk_as(owner, path, bool(staged_row["recursive"]))
        if found is None:
            raise _unreachable(path, owner.uid, staged_row["line"], script)
        return [(f, source if f == path else
                 source.rstrip("/") + "/" + os.path.relpath(f, path)) for f in found]
    if not staged_row["recursive"] and not os.path.isdir(path):
        return [(path, source)]
    found = []
    for folder, _, names in os.walk(path):
        for name in sorted(names):
            full = os.path.join(folder, name)
            relative = os.path.relpath(full, path)
            found.append((full, source.rstrip("/") + "/" + relative))
    return found


def _unreachable(path: str, uid: int, line: int, script: str) -> InputError:
    """The one answer for a staged path that is missing, not the user's, a link, or not
    reachable by them: the same words whatever the case, so a commit tells nothing of other
    users' files."""
    return InputError(f"line {line}: {path}: no file of uid {uid} there (the transfer reported "
                      "success, but the user cannot reach a regular file of their own at that "
                      "path)", path=script)


def _walk_as(owner: Owner, path: str, recursive: bool, timeout: float = 600.0) -> list[str] | None:
    """The regular files at ``path`` as ``owner`` sees it, in a forked child running as them:
    ``[path]`` for a file, the files below it for a directory (links not followed, folders
    they may not read passed over); None when they cannot reach ``path`` or it is a link."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child lists names as the user, then exits
        answer = b"null"
        try:
            os.setgroups(list(owner.groups) or [owner.gid])
            os.setresgid(owner.gid, owner.gid, owner.gid)
            os.setresuid(owner.uid, owner.uid, owner.uid)
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode):
                answer = json.dumps([path]).encode()
            elif stat.S_ISDIR(info.st_mode):
                found = [os.path.join(folder, name) for folder, _, names in os.walk(path)
                         for name in sorted(names)]
                answer = json.dumps(found).encode()
            elif not recursive:
                answer = json.dumps([path]).encode()  # a FIFO...: refused when it is opened
        except BaseException:
            pass
        finally:
            try:
                view = memoryview(answer)
                while view:
                    view = view[os.write(write_end, view):]
            finally:
                os._exit(0)
    os.close(write_end)
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            ready, _, _ = select.select([read_end], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(read_end, 1 << 20) if ready else b""
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_end)
        _reap(pid)
    try:
        found = json.loads(b"".join(chunks) or b"null")
    except ValueError:
        return None
    return found if isinstance(found, list) else None


def check_owner(store: StateStore, chain_id: str, for_uid: int | None):
    """The chain's row; a caller acting for ``for_uid`` (not root) must own the chain."""
    chain = records.chain(store, chain_id)
    if chain is None:
        raise UnknownJobError(f"no chain {chain_id!r}")
    if for_uid not in (None, 0) and chain["owner_uid"] != for_uid:
        raise PermissionDenied(f"chain {chain_id} belongs to uid {chain['owner_uid']}; uid "
                               f"{for_uid} may report only on its own chains")
    return chain


def commit_stage(store: StateStore, config: SiteConfig, chain_id: str, job_key: str, *,
                 for_uid: int | None = None, backend=None, layout: str | None = None,
                 timings: dict[int, float] | None = None) -> list[CommittedFile]:
    """Record the staged files of one data job (stage-in) or its success (stage-out).

    ``for_uid``: a privileged service commits for the data job of that user (the data job
    cannot write the state database): the chain and every staged file must be that user's, and
    each file is opened once, without following links, for its digests. ``layout``: the
    stage-in's layout decision (``#STAGEIN -layout``), kept as ``user.scratchkeeper.layout``.
    ``timings``: {script line: seconds} the data job measured (:mod:`.transfer_timing`).
    """
    received = time.time()
    if layout is not None:
        # one line of text: a record; only its workload word is read back (replicad, hybrid
        # replicas: advisor.hybrid.parse_workload, strictly, as data)
        layout = " ".join(layout.split())[:4000]
    what = f"chain {chain_id}: commit of {job_key}"
    chain, row = recorded(lambda: (check_owner(store, chain_id, for_uid),
                                   _job_row(store, chain_id, job_key)), what)
    committed: list[CommittedFile] = []
    lines: dict[int, tuple[str, str, int, int]] = {}   # line -> host, client, bytes, files
    if row["role"] == "stage-in":
        backend = backend or open_backend(config)
        jobs = recorded(lambda: records.chain_jobs(store, chain_id), what)
        compute = [r for r in jobs if r["role"] == "compute"]
        compute_id = compute[0]["job_id"] if compute else ""
        user = Owner.of(for_uid, _primary_gid(for_uid)) if for_uid not in (None, 0) else None
        for staged in recorded(lambda: records.staged_files(store, chain_id, job_key), what):
            if staged["state"] == "staged":
                continue  # a re-run of the data job: already recorded
            files = [_commit_file(store, config, backend, chain, staged, path, source,
                                  compute_id or "", for_uid, layout)
                     for path, source in _files_of(staged, user, chain["script_path"])]
            committed += files
            lines[staged["line"]] = (source_host(staged["source"]),
                                     source_client(staged["source"]),
                                     sum(f.size for f in files), len(files))
            recorded(lambda: records.mark_staged(store, chain_id, staged["path"]), what)
        if committed:
            _record_transfers(store, config, chain, row, committed, lines, timings or {},
                              received)
    recorded(lambda: records.set_jobs_state(store, chain_id, [job_key], records.JOB_DONE), what)
    return committed


def _record_transfers(store: StateStore, config: SiteConfig, chain, row,
                      committed: list[CommittedFile], lines: dict, timings: dict[int, float],
                      received: float) -> None:
    """The bytes of this stage-in per source host and the seconds from the job's start, as the
    scheduler reports it, to now (a job reading from several hosts shares its seconds out by
    bytes; the chaining delay of the metrics); and what the JIT prediction learns from, the
    job's own timing of each line, when they fit in the scheduler's figure
    (:func:`.transfer_timing.timing_rows`). Never fails the commit."""
    try:
        job = get_scheduler(config, chain["scheduler"]).lookup([row["job_id"]]).get(row["job_id"])
    except ScratchkeeperError as err:
        log.warning("chain %s: %s: no start time, transfer not recorded: %s",
                    chain["chain_id"], row["job_key"], err)
        return
    if job is None or job.start_time is None:
        return
    _record_timings(store, config, chain, row, lines, timings, received - job.start_time)
    now = time.time()
    seconds = max(now - job.start_time, 1e-3)
    per_host: dict[str, int] = {}
    for file in committed:
        host = source_host(file.source)
        if host:
            per_host[host] = per_host.get(host, 0) + file.size
    total = sum(per_host.values())
    if not total:
        return
    try:
        records.open_staging(store)
        for host, size in per_host.items():
            recorded(lambda: records.record_transfer(
                store, chain["chain_id"], row["job_key"], host, size, seconds * size / total,
                job.start_time, chain["owner_uid"]), f"chain {chain['chain_id']}: transfer record")
    except ScratchkeeperError as err:
        log.warning("chain %s: transfer not recorded: %s", chain["chain_id"], err)


def _record_timings(store: StateStore, config: SiteConfig, chain, row, lines: dict,
                    timings: dict[int, float], job_seconds: float) -> None:
    if not timings:
        return
    rows, why = timing_rows(lines, timings, chain_id=chain["chain_id"], job_key=row["job_key"],
                            owner_uid=chain["owner_uid"], job_seconds=job_seconds,
                            slack=config.staging.timing_slack, finished=time.time())
    if not rows:
        log.info("chain %s: %s: transfer timings not learned from: %s", chain["chain_id"],
                 row["job_key"], why)
        return
    try:
        records.open_staging(store)
        recorded(lambda: records.record_timings(store, rows),
                 f"chain {chain['chain_id']}: timing record")
    except ScratchkeeperError as err:
        log.warning("chain %s: transfer timings not recorded: %s", chain["chain_id"], err)


def _commit_file(store, config, backend, chain, staged, path, source, compute_id, for_uid,
                 layout=None):
    chain_id, script = chain["chain_id"], chain["script_path"]
    on_behalf = for_uid not in (None, 0)
    if not on_behalf and not os.path.lexists(path):
        raise InputError(f"line {staged['line']}: the transfer reported success but {path} "
                         "does not exist", path=script)
    if not on_behalf and os.path.islink(path):
        raise InputError(f"line {staged['line']}: {path} is a symbolic link; refusing to follow it",
                         path=script)
    inside = _inside(path, config.storage.scratch_root)
    block = config.recovery.digest_block if inside else 0
    # One descriptor for everything read or set here, so a path swapped meanwhile cannot
    # redirect it; acting for a user, the file must be that user's (open_owned), and whatever
    # keeps it from being one (missing, another's, a link...) gets the one answer.
    # Either way a FIFO or a device put there is refused, not waited on or read without end.
    try:
        fd = open_owned(path, for_uid) if on_behalf else \
            open_regular(path, follow_links=False)[0]
    except ScratchkeeperError as err:
        if on_behalf:
            raise _unreachable(path, for_uid, staged["line"], script) from None
        raise InputError(str(err), path=script, line=staged["line"]) from None
    try:
        info = os.fstat(fd)
        # one read: the whole-file SHA-256 and the per-block CRC-32 that patches are checked by
        checksum, blocks = digests.digest_file(fd, block)
        metadata = {"source": source, "sha256": checksum, "size": str(info.st_size),
                    "chain": chain_id, "job": compute_id, "staged": f"{time.time():.0f}"}
        if layout:
            metadata["layout"] = layout
        if not inside:
            # outside the scratch file system: plain user xattrs on the file, where supported
            for name, value in metadata.items():
                try:
                    os.setxattr(fd, XATTR + name, value.encode())
                except OSError as err:
                    log.warning("%s: cannot set %s%s: %s", path, XATTR, name, err.strerror)
                    break
    finally:
        os.close(fd)
    what = f"chain {chain_id}: commit of {path}"
    if inside:
        # a re-staged input supersedes what an earlier chain put at the same path; an import
        # that meets a locked namespace is undone whole, so its retry starts from the file
        recorded(lambda: backend.import_file(
            path, owner=(info.st_uid, info.st_gid), replace=True,
            **({"expect_uid": for_uid} if on_behalf else {})), what)
        recorded(lambda: backend.set_xattrs(path, {XATTR + name: value.encode()
                                                   for name, value in metadata.items()}), what)
        if os.geteuid() == 0:
            # what recovery trusts: attributes only root can write (the user.* ones above are
            # the user's to read, and to change), and the source's endpoint
            recorded(lambda: records.write_recovery_record(
                backend, store, path, source=source, sha256=checksum, size=info.st_size), what)
        else:
            log.warning("%s: committed by uid %d, not root: no trusted recovery record (the "
                        "file cannot be patched from its source until root commits it)", path,
                        os.geteuid())
    recorded(lambda: records.record_staged(
        store, chain_id, path, job_key=staged["job_key"], line=staged["line"], source=source,
        size=info.st_size, checksum="sha256:" + checksum, owner_uid=info.st_uid,
        owner_gid=info.st_gid), what)
    if blocks is not None:
        resolved = backend.paths.resolve(path)
        recorded(lambda: digests.record(store, resolved, checksum, blocks), what)
    log.info("chain %s: staged %s (%d bytes) from %s", chain_id, path, info.st_size, source)
    return CommittedFile(path, source, info.st_size, checksum)


def _primary_gid(uid: int) -> int:
    try:
        return pwd.getpwuid(uid).pw_gid
    except KeyError:
        return uid


def _inside(path: str, root: str) -> bool:
    real = os.path.realpath(path)
    root = os.path.realpath(root)
    return real == root or real.startswith(root.rstrip("/") + "/")


def fail_stage(store: StateStore, config: SiteConfig, chain_id: str, job_key: str, reason: str,
               line: int | None, *, for_uid: int | None = None) -> list[str]:
    """Record a data job's failure; a failed stage-in cancels the rest of the chain.

    Returns the job ids it cancelled. ``for_uid`` as for :func:`commit_stage`.
    """
    what = f"chain {chain_id}: failure of {job_key}"
    chain, row = recorded(lambda: (check_owner(store, chain_id, for_uid),
                                   _job_row(store, chain_id, job_key)), what)
    where = f"{chain['script_path']}:{line}: " if line else ""
    message = f"{row['role']} failed: {where}{reason or 'no error message'}"
    recorded(lambda: records.set_jobs_state(store, chain_id, [job_key], records.JOB_FAILED,
                                            message, line), what)
    successor = recorded(lambda: records.replacements(store, [chain_id]), what).get(chain_id)
    if successor is not None:
        # a data job of an abandoned chaining (the chain service was killed mid-chain and
        # chained the compute job again): that job is chain `successor`'s now, not to cancel
        log.warning("chain %s: %s failed after chain %s took over its compute job; nothing "
                    "cancelled", chain_id, job_key, successor)
        return []
    if row["role"] != "stage-in":
        recorded(lambda: records.set_chain_state(store, chain_id, records.STAGE_OUT_FAILED,
                                                 message), what)
        return []
    recorded(lambda: records.set_chain_state(store, chain_id, records.STAGE_IN_FAILED, message),
             what)
    if chain["state"] == records.BURST_BUFFER:
        # the compute job is Slurm's burst-buffer job, whose data_in waits for this one: it
        # ends the job once Slurm has torn it down (a cancel from here races that teardown)
        return []
    dependents = [r for r in recorded(lambda: records.chain_jobs(store, chain_id), what)
                  if r["role"] in ("compute", "stage-out") and r["job_id"]]
    ids = [r["job_id"] for r in dependents]
    if ids:
        try:
            get_scheduler(config, chain["scheduler"]).cancel(ids, reason=message)
        except ScratchkeeperError as err:
            # the scheduler cancels them too (kill-on-invalid-dep), so this is logged, not fatal
            log.warning("chain %s: cancelling %s failed: %s", chain_id, ids, err)
        recorded(lambda: records.set_jobs_state(store, chain_id,
                                                [r["job_key"] for r in dependents],
                                                records.JOB_CANCELLED, "cancelled: " + message),
                 what)
    return ids
