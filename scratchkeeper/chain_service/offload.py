"""Offload at close (``#STAGEOUT -when close``): each result sent away as soon as it is closed
after writing, while its job still runs (the thesis, §4.9, future work there).

The scratch mount appends a CLOSE record to ``store_root/closes.log`` whenever a handle that
created, truncated or wrote a file is released (as Lustre's changelog keeps CLOSE records; on
Lustre the changelog's own CLOSE records are read instead, :func:`lustre_closes`)::

    CLOSE <time> <inode> <uid> <size> <mtime> <scratch path, %XX-encoded>

The chain service reads the records it has not read (the log moved aside first, its offset in
the state database) and, for each file of a running chain whose stage-out says ``-when close``
(the file itself, or a file under a listed directory), submits an *offload job* to the data
queue as the file's owner (``sbatch --uid``): the same client, retries and checksum as the
stage-out, for that file only. The mount writes one record per file until its log is read
(docs/mount.rst "Bounded logs"), so a record says "closed after writing since the last read",
and the file is offloaded as it is when the record is read (its size and mtime then). The
stage-out job is made to wait for the offload jobs (its dependency is extended), and once an
offload job completed and the file is still what was sent (size, mtime), the file's SHA-256 is
recorded and written to the chain's ``offloaded.list`` in its spool folder. The
stage-out job at the end skips every result listed there that is unchanged (size, mtime,
digest: ``scratchkeeper stage unchanged``), so nothing is sent twice.

A record is acted on only for the chain's owner: the record's uid, the file's owner and the
chain's owner must be the same user, and the file must still be a regular file inside the
chain's listed results. Replayed records (after a crash) are harmless: an offload is keyed by
chain, path, size and mtime.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import posixpath
import pwd
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from ..config import SiteConfig
from ..errors import ScratchkeeperError
from ..ownership import open_owned
from ..planner import records
from ..planner.plan import PlannedJob, StepAction, job_name_of, safe_job_name
from ..planner.render import render_data_job
from ..planner.spool import OFFLOADED_LIST, spool_dir, write_script
from ..planner.submit import submit_chain_job
from ..runner import get_runner
from ..schedulers import JobState, get_scheduler
from ..state import StateStore
from ..storage.lustre import lfs
from ..storage.mount_logs import MountLog, decode_path
from ..transfer.clients import client_command
from ..transfer.uri import parse_location

log = logging.getLogger(__name__)

CLOSE_LOG = "closes.log"
PENDING = "-"
#: how long the stage-out waits for offloads in flight to be recorded (the chain service
#: records an ended offload job at its next sweep)
PENDING_WAIT = 180.0
SUBMITTING, SUBMITTED, DONE, FAILED, CHANGED = ("submitting", "submitted", "done", "failed",
                                                "changed")


@dataclass(frozen=True)
class CloseRecord:
    time: float
    ino: int
    uid: int
    size: int
    mtime: str          # "seconds.nanoseconds", as the mount wrote it
    path: str


def parse_close(line: bytes) -> CloseRecord:
    """One line of ``closes.log``; ValueError for anything else."""
    fields = line.rstrip(b"\n").split(b" ")
    if len(fields) != 7 or fields[0] != b"CLOSE":
        raise ValueError(f"not a CLOSE record: {line[:120]!r}")
    path = decode_path(fields[6])
    mtime = fields[5].decode("ascii")
    seconds, _, nanoseconds = mtime.partition(".")
    if not (seconds.lstrip("-").isdigit() and nanoseconds.isdigit() and len(nanoseconds) == 9):
        raise ValueError(f"bad mtime {mtime!r}")
    return CloseRecord(float(fields[1]), int(fields[2]), int(fields[3]), int(fields[4]), mtime,
                       path)


def mtime_text(info: os.stat_result) -> str:
    return f"{info.st_mtime_ns // 10**9}.{info.st_mtime_ns % 10**9:09d}"


def read_closes(store: StateStore, store_root: str) -> tuple[list[CloseRecord], Callable[[], None]]:
    """The CLOSE records not read before, and the function that saves how far they were read,
    to call once they were acted on: a crash in between reads them again, which submits
    nothing twice (an offload is keyed by chain, path, size, mtime). The log is moved aside
    before it is read (``move_first``): the mount's next record of a file it has a record of
    goes to a new log, never one already read."""
    return MountLog(store, "close_log", store_root, CLOSE_LOG, parse_close,
                    move_first=True).read()


def lustre_closes(config: SiteConfig, chains) -> list[CloseRecord]:
    """CLOSE records of the Lustre changelog (``staging.changelog_mdt``, read and cleared as
    ``staging.changelog_user``) by the owners of chains that offload at close, as records of
    the mount's form: each FID's path (``lfs fid2path``) and its size and mtime now."""
    staging, storage = config.staging, config.storage
    if not staging.changelog_mdt or not staging.changelog_user:
        if chains:
            log.warning("offload at close on Lustre needs staging.changelog_mdt and "
                        "staging.changelog_user: the stage-outs send everything at the end")
        return []
    runner, timeout = get_runner(), config.scheduler.command_timeout
    text = runner.run(lfs.changelog_argv(storage.lfs, staging.changelog_mdt), timeout=timeout,
                      mutating=False).stdout
    entries = lfs.parse_changelog(text)
    owners = {chain["owner_uid"] for chain, _ in chains}
    found: list[CloseRecord] = []
    paths: dict[str, list[str]] = {}
    for entry in entries:
        if entry.type_name != "CLOSE" or (entry.uid is not None and entry.uid not in owners):
            continue
        if entry.fid not in paths:
            try:
                paths[entry.fid] = lfs.parse_fid2path(runner.run(
                    lfs.fid2path_argv(storage.lfs, storage.scratch_root, entry.fid),
                    timeout=timeout, mutating=False).stdout)
            except ScratchkeeperError:
                paths[entry.fid] = []          # removed since: nothing to offload
        for path in paths[entry.fid][:1]:
            try:
                info = os.lstat(path)
            except OSError:
                continue
            found.append(CloseRecord(entry.when, info.st_ino, info.st_uid, info.st_size,
                                     mtime_text(info), path))
    if entries:
        runner.run(lfs.changelog_clear_argv(storage.lfs, staging.changelog_mdt,
                                            staging.changelog_user, entries[-1].recno),
                   timeout=timeout, mutating=True)
    return found


@dataclass(frozen=True)
class Target:
    """A file of a running chain to offload at close, and where it goes."""

    chain_id: str
    owner_uid: int
    path: str
    destination: str
    line: int


def close_targets(store: StateStore) -> list[tuple[dict, list[dict]]]:
    """(chain row, its ``-when close`` results) of every chain still submitted."""
    chains = []
    for row in records.chains_in_state(store, records.SUBMITTED):
        plan = json.loads(row["plan_json"])
        keys = {j["key"] for j in plan.get("jobs", [])
                if j.get("role") == "stage-out" and j.get("start") == "close"}
        files = [f for f in plan.get("offloaded_files", []) if f["job_key"] in keys]
        if files:
            chains.append((dict(row), files))
    return chains


def match(record: CloseRecord, chains) -> Target | None:
    for chain, files in chains:
        for entry in files:
            listed = entry["path"].rstrip("/")
            if record.path == listed:
                destination = entry["destination"]
                if destination.endswith("/"):
                    destination += posixpath.basename(record.path)
            elif record.path.startswith(listed + "/"):
                destination = entry["destination"].rstrip("/") + "/" + \
                    record.path[len(listed) + 1:]
            else:
                continue
            return Target(chain["chain_id"], chain["owner_uid"], record.path, destination,
                          entry["line"])
    return None


def offload_closed(config: SiteConfig, store: StateStore) -> list[str]:
    """One sweep: submit offload jobs for new CLOSE records, record the ones that ended.
    Returns one line per action for the service's output."""
    records.open_staging(store)
    said: list[str] = []
    said += _finish(config, store)
    chains = close_targets(store)
    said += _resume(config, store, chains)
    if config.storage.backend == "lustre":
        closes, commit = lustre_closes(config, chains), (lambda: None)
    else:
        closes, commit = read_closes(store, config.storage.store_root)
    if not chains:
        commit()
        return said
    latest: dict[tuple[str, str], tuple[CloseRecord, Target]] = {}
    for record in closes:
        target = match(record, chains)
        if target is not None:
            latest[(target.chain_id, target.path)] = (record, target)  # the last close wins
    for record, target in latest.values():
        line = _submit(config, store, record, target, chains)
        if line:
            said.append(line)
    commit()
    return said


def _resume(config: SiteConfig, store: StateStore, chains) -> list[str]:
    """Offloads a killed sweep left between its record and its job: the job found by its name
    (unique per offload) if it was submitted, else submitted now."""
    said = []
    for row in records.offloads(store, state=SUBMITTING):
        key = (row["chain_id"], row["path"], row["size"], row["mtime"])
        chain = next((c for c, _ in chains if c["chain_id"] == row["chain_id"]), None)
        try:
            found = get_scheduler(config, "slurm").find_by_name(row["job_name"])
        except ScratchkeeperError as err:
            log.warning("offload %s: cannot look for its job: %s", row["job_name"], err)
            continue
        if found:
            job_id = found[-1]
        elif chain is None:
            _set(store, key, FAILED, reason="its chain ended before it was submitted")
            continue
        else:
            target = Target(row["chain_id"], chain["owner_uid"], row["path"], row["destination"],
                            0)
            try:
                job_id = _submit_job(config, store, chain, target,
                                     row["job_name"].rsplit(".", 1)[-1])
            except ScratchkeeperError as err:
                _set(store, key, FAILED, reason=f"submission failed: {err}")
                continue
        records.set_offload_submitted(store, key, job_id, SUBMITTED)
        said.append(f"chain {row['chain_id']}: offload of {row['path']} resumed as job {job_id}")
    return said


def _current(record: CloseRecord, owner_uid: int) -> tuple[CloseRecord | None, str]:
    """The record with the file's size and mtime now, when it is the chain owner's regular
    file: the mount leaves out later closes of a file whose record is not read yet (one
    record per file and log), so the record's own are those of its first close."""
    try:
        info = os.lstat(record.path)
    except OSError as err:
        return None, f"gone ({err.strerror})"
    if not stat.S_ISREG(info.st_mode):
        return None, "not a regular file"
    if info.st_uid != owner_uid or record.uid != owner_uid:
        return None, f"not the chain owner's (uid {info.st_uid}, closed by uid {record.uid})"
    return replace(record, size=info.st_size, mtime=mtime_text(info)), ""


def _submit(config: SiteConfig, store: StateStore, record: CloseRecord, target: Target,
            chains) -> str:
    current, why = _current(record, target.owner_uid)
    if current is None:
        log.info("chain %s: %s closed, not offloaded: %s", target.chain_id, record.path, why)
        return ""
    record = current  # sent as it is now; _finish lists it only if it is still that
    key = (target.chain_id, record.path, record.size, record.mtime)
    if records.offload_known(store, key):
        return ""
    chain = next(c for c, _ in chains if c["chain_id"] == target.chain_id)
    if chain["scheduler"] != "slurm":
        log.info("chain %s: offload at close needs Slurm (sbatch --uid); %s left to the "
                 "stage-out", target.chain_id, record.path)
        return ""
    digest = hashlib.sha1("\0".join(map(str, key)).encode()).hexdigest()[:10]
    job_key = f"offload-{digest}"
    records.add_offload(store, key, destination=target.destination,
                        job_name=job_name(chain, job_key), state=SUBMITTING, closed=record.time)
    try:
        job_id = _submit_job(config, store, chain, target, job_key)
    except ScratchkeeperError as err:
        _set(store, key, FAILED, reason=f"submission failed: {err}")
        log.warning("chain %s: offload of %s not submitted: %s", target.chain_id, record.path, err)
        return f"chain {target.chain_id}: offload of {record.path} not submitted: {err}"
    records.set_offload_submitted(store, key, job_id, SUBMITTED)
    _hold_stage_out(config, store, chain)
    write_list(config, store, target.chain_id)
    log.info("chain %s: %s closed (%d bytes): offload job %s to %s", target.chain_id,
             record.path, record.size, job_id, target.destination)
    return f"chain {target.chain_id}: {record.path} closed: offload job {job_id}"


def job_name(chain: dict, job_key: str) -> str:
    """An offload job's name: the chain's compute job's name (``#SBATCH -J``, ``#PBS -N``,
    else the script's name, as the stage-in and stage-out jobs are named) and the offload's
    key, ``myjob.offload-<hash>``: unique per offload, so that a sweep killed right after
    submitting it finds it again (:func:`_resume`), and made safe by the planner's rule."""
    try:
        jobs = json.loads(chain["plan_json"])["jobs"]
        name = next((j["name"] for j in jobs if j["role"] == "compute"), None)
    except (KeyError, TypeError, ValueError):
        name = None  # a chain recorded without its plan's names: the script's name
    base = safe_job_name(name) if name else job_name_of(chain["script_path"])
    return f"{base}.{job_key}"


def _submit_job(config: SiteConfig, store: StateStore, chain: dict, target: Target,
                job_key: str) -> str:
    command = client_command(parse_location(target.path), parse_location(target.destination),
                             recursive=False, config=config.transfer)
    job = PlannedJob(key=job_key, role="offload", queue=config.scheduler.data_queue,
                     name=job_name(chain, job_key),
                     depends_on=[], retries=config.retry.attempts - 1,
                     retry_delay=config.retry.delay, walltime=config.scheduler.data_walltime,
                     actions=[StepAction(line=target.line, argv=command.argv,
                                         local_path=command.local_path,
                                         describe=f"{target.path} -> {target.destination}")])
    render_data_job(job, config, chain_id=chain["chain_id"], script_path=chain["script_path"],
                    workdir=chain["workdir"], scheduler="slurm")
    # root's file, read by the offload job running as the chain's owner
    write_script(spool_dir(config, chain["chain_id"]), job_key, job.script, 0o755)
    owner = chain["owner_uid"]
    return submit_chain_job(job, config, get_scheduler(config, "slurm"),
                            chain_id=chain["chain_id"], workdir=chain["workdir"],
                            on_behalf_of=None if owner == os.geteuid()
                            else (owner, pwd.getpwuid(owner).pw_gid))


def _hold_stage_out(config: SiteConfig, store: StateStore, chain: dict) -> None:
    """Make the chain's pending stage-out wait for its offload jobs still in flight, so that
    it sends only what they did not."""
    rows = {r["job_key"]: r for r in records.chain_jobs(store, chain["chain_id"])}
    plan = json.loads(chain["plan_json"])
    offloads = records.offload_job_ids(store, chain["chain_id"], SUBMITTED)
    for job in plan.get("jobs", []):
        row = rows.get(job["key"])
        if job.get("role") != "stage-out" or row is None or not row["job_id"]:
            continue
        parts = [f"{d['type']}:{rows[d['key']]['job_id']}" for d in job["depends_on"]
                 if d["key"] == "compute" and rows.get(d["key"]) and rows[d["key"]]["job_id"]]
        parts.append("afterany:" + ":".join(offloads))
        try:
            get_runner().run(["scontrol", "update", f"JobId={row['job_id']}",
                              "Dependency=" + ",".join(parts)],
                             timeout=config.scheduler.command_timeout, mutating=True)
        except ScratchkeeperError as err:
            # already started (the job ended meanwhile): it sends what is not listed yet
            log.info("chain %s: stage-out %s not made to wait for the offloads: %s",
                     chain["chain_id"], row["job_id"], err)


def _set(store: StateStore, key: tuple, state: str, *, digest: str | None = None,
         reason: str = "") -> None:
    records.set_offload_state(store, key, state, digest=digest, reason=reason)


def _finish(config: SiteConfig, store: StateStore) -> list[str]:
    """Offload jobs that ended: the file's digest recorded and listed, or the failure kept."""
    rows = records.offloads(store, state=SUBMITTED)
    if not rows:
        return []
    scheduler = get_scheduler(config, "slurm")
    try:
        states = scheduler.lookup([r["job_id"] for r in rows], missing_ok=True)
    except ScratchkeeperError as err:
        log.warning("offload jobs: cannot look them up: %s", err)
        return []
    said, touched = [], set()
    for row in rows:
        live = states.get(row["job_id"])
        if live is None or not live.state.is_final:
            continue
        key = (row["chain_id"], row["path"], row["size"], row["mtime"])
        touched.add(row["chain_id"])
        if live.state is not JobState.COMPLETED:
            _set(store, key, FAILED, reason=f"offload job {row['job_id']}: {live.outcome()}")
            said.append(f"chain {row['chain_id']}: offload of {row['path']} failed "
                        f"({live.outcome()}); the stage-out sends it")
            continue
        owner = records.chain(store, row["chain_id"])["owner_uid"]
        digest, why = _digest_if_unchanged(row, owner)
        if digest is None:
            _set(store, key, CHANGED, reason=why)
            said.append(f"chain {row['chain_id']}: {row['path']} offloaded, but {why}")
            continue
        _set(store, key, DONE, digest=digest)
        said.append(f"chain {row['chain_id']}: {row['path']} offloaded at close "
                    f"(sha256 {digest[:12]}...)")
    for chain_id in touched:
        write_list(config, store, chain_id)
    return said


def _digest_if_unchanged(row, owner_uid: int) -> tuple[str | None, str]:
    try:
        fd = open_owned(row["path"], owner_uid)
    except ScratchkeeperError as err:
        return None, str(err)
    try:
        info = os.fstat(fd)
        if info.st_size != row["size"] or mtime_text(info) != row["mtime"]:
            return None, "it changed since it was closed (the stage-out sends it)"
        digest = hashlib.sha256()
        while chunk := os.read(fd, 1 << 20):
            digest.update(chunk)
        return digest.hexdigest(), ""
    finally:
        os.close(fd)


def encode_path(path: str) -> str:
    """A path on one line of the list: ``%XX`` for every byte but letters, digits and ``/._-+~``."""
    out = []
    for byte in os.fsencode(path):
        char = chr(byte)
        out.append(char if char.isascii() and (char.isalnum() or char in "/._-+~")
                   else f"%{byte:02X}")
    return "".join(out)


def write_list(config: SiteConfig, store: StateStore, chain_id: str) -> None:
    """The chain's ``offloaded.list`` (path, size, mtime, sha256 per line), replaced whole."""
    rows = records.listed_offloads(store, chain_id, (SUBMITTED, DONE))
    spool = spool_dir(config, chain_id)
    if not spool.is_dir():
        return
    # an offload still in flight is listed with "-" for its digest: the stage-out waits for it
    text = "".join(f"{encode_path(r['path'])}\t{r['size']}\t{r['mtime']}\t"
                   f"{r['digest'] if r['state'] == DONE else PENDING}\n" for r in rows)
    temporary = spool / f".{OFFLOADED_LIST}.tmp"
    temporary.write_text(text)
    temporary.chmod(0o644)
    os.replace(temporary, spool / OFFLOADED_LIST)


def _read_list(list_path: str) -> dict[str, tuple[int, str, str]]:
    listed: dict[str, tuple[int, str, str]] = {}
    with open(list_path, encoding="ascii") as stream:
        for line in stream:
            fields = line.rstrip("\n").split("\t")
            if len(fields) == 4 and fields[1].isdigit():
                listed[fields[0]] = (int(fields[1]), fields[2], fields[3])
    return listed


def unchanged(list_path: str, path: str, *, wait: float = PENDING_WAIT) -> tuple[bool, str]:
    """Whether ``path`` (a file, or every file under a directory) is listed in ``list_path``
    as offloaded with its current size, mtime and SHA-256; and why not. Offloads listed as in
    flight are waited for, up to ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while True:
        try:
            listed = _read_list(list_path)
        except FileNotFoundError:
            return False, "nothing was offloaded at close"
        except (OSError, UnicodeDecodeError) as err:
            return False, f"{list_path}: {err}"
        if not any(entry[2] == PENDING for entry in listed.values()) or \
                time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if os.path.isdir(path) and not os.path.islink(path):
        files = [os.path.join(folder, name) for folder, _, names in os.walk(path)
                 for name in names]
        if not files:
            return False, "an empty directory"
    else:
        files = [path]
    for file in files:
        entry = listed.get(encode_path(file))
        if entry is None:
            return False, f"{file} was not offloaded at close"
        if entry[2] == PENDING:
            return False, f"{file}: its offload at close did not end within {wait:g}s"
        try:
            info = os.lstat(file)
        except OSError as err:
            return False, f"{file}: {err.strerror}"
        if not stat.S_ISREG(info.st_mode) or info.st_size != entry[0] or \
                mtime_text(info) != entry[1]:
            return False, f"{file} changed since it was offloaded"
        digest = hashlib.sha256()
        with open(file, "rb") as stream:
            while chunk := stream.read(1 << 20):
                digest.update(chunk)
        if digest.hexdigest() != entry[2]:
            return False, f"{file} changed since it was offloaded (its digest differs)"
    return True, f"{len(files)} file(s) offloaded at close, unchanged"


def link_changed(list_path: str, folder: str, into: str) -> tuple[int, int]:
    """Hard-link every file under ``folder`` that is not listed in ``list_path`` as offloaded
    unchanged into ``into`` at the same relative path; (files linked, files left out)."""
    linked = skipped = 0
    for parent, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(parent, name)
            if unchanged(list_path, path)[0]:
                skipped += 1
                continue
            target = os.path.join(into, os.path.relpath(path, folder))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.link(path, target, follow_symlinks=False)
            linked += 1
    return linked, skipped
