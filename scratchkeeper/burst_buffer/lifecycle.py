"""What each stage of Slurm's burst-buffer life cycle does for a job (``burst_buffer.lua`` calls
``scratchkeeper bb STAGE ...``, which calls the function of the same name here).

* :func:`job_process` (at ``sbatch``, synchronous): the planner's checks of the script; a bad
  directive refuses the job with ``script:LINE: reason``.
* :func:`setup` (pending): record the job and its owner (the only stage Slurm tells the uid).
* :func:`data_in` (pending, ``BurstBufferStageIn``): plan the script as ``scratchkeeper submit``
  would, submit its stage-in data jobs on the data-transfer queue *as the job's owner* (root
  submits with ``sbatch --uid --gid``: the transfers run with the user's rights, on a compute
  node, never on the controller) with the owner's umask (files.owner_umask) and wait for them.
  Each data job records its files with ``stage commit``, exactly as on the other paths, so
  recovery and replication know them. The chain's spool is the owner's alone
  (files.restrict_spool).
* :func:`real_size`: the bytes staged, which Slurm then accounts in the pool.
* :func:`pre_run` (allocated, before the job starts): the pre-execution recovery check
  (recoveryd verifies the job's inputs and patches lost stripes; the thesis, §4.6).
* :func:`data_out` (``STAGE_OUT``): the stage-out data jobs, as the owner, waited for; any
  failure is recorded and answered, never raised (Slurm would keep the job in STAGE_OUT).
* :func:`teardown`: cancel what is left of the job's data jobs and close its chain.

``post_run`` has nothing to do: burst_buffer.lua answers it without calling scratchkeeper.

A stage run again (Slurm retries it) finds its chain and data jobs in the records and waits
for them instead of submitting them twice. A slurmctld restart during a stage-in is a teardown
then a new stage-in: Slurm 22.05 tears down every pending job whose staging it finds in
``staging-in`` or ``staged-in`` ("We do not know the state of staging", burst_buffer/lua's
``_recover_job_bb``), and once the teardown is done sets the job back to pending and runs
``setup`` and ``data_in`` again. The teardown cancels the data jobs as for any teardown (a job
cancelled before Slurm stages it again gets no other), marking them cancelled; ``data_in`` run
again on a torn-down job reopens its chain and submits those again.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from ..config import SiteConfig
from ..errors import DirectiveError, InputError, SchedulerError, ScratchkeeperError
from ..inputfiles import decode_utf8, read_limited
from ..planner import records as chains
from ..planner.directives import STAGE_IN, STAGE_OUT, parse_script
from ..planner.plan import COMPUTE, PlannedJob, build_plan
from ..planner.spool import spool_dir
from ..planner.status import stage_in_failure
from ..planner.submit import MAX_SCRIPT_BYTES, plan_queued_job, spool_data_jobs, submit_chain_job
from ..runner import get_runner
from ..schedulers import JobRecord, Scheduler, get_scheduler, slurm
from ..state import StateStore
from . import files, records

log = logging.getLogger(__name__)

_JOB_ID_RE = re.compile(r"^[0-9]+$")
#: how often a waiting stage looks at the records (cheap) and asks the scheduler (not cheap)
RECORD_POLL, SCHEDULER_POLL = 1.0, 5.0
#: the file of environment variables ``slurm_bb_paths`` hands to the job, per job id
ENV_SUFFIX = ".env"
#: the bytes jobs hold in the pool (``slurm_bb_pools`` reads it) and the lock of its writers
HELD_FILE, HELD_LOCK = "held-bytes", "held-bytes.lock"
#: the state of a chain this path made: not the chain service's ``submitted``, so its sweep
#: (settling failed stage-ins, offload at close) never acts on a job Slurm's burst buffer runs
CHAIN_STATE = records.CHAIN_STATE


class StageFailed(ScratchkeeperError):
    """A stage of the life cycle failed; the message is the reason Slurm shows the user."""


@dataclass(frozen=True)
class JobFacts:
    """What the queue says of the job (``squeue --json``): where it runs from and its name."""

    job_id: str
    name: str
    workdir: str
    #: the script as the user named it at sbatch (what errors name), or "script"
    command: str = "script"


def check_job_id(job_id: str) -> str:
    if not _JOB_ID_RE.match(job_id or ""):
        raise InputError(f"job id {job_id!r}: expected a Slurm job id")
    return job_id


def state_dir(config: SiteConfig) -> Path:
    """Where the burst-buffer path keeps its files (the env files, the pool's held bytes)."""
    return Path(config.state.database).resolve().parent / "burst-buffer"


# -- sbatch ----------------------------------------------------------------------------------------
def job_process(config: SiteConfig, script_path: str, *, shown_as: str = "script") -> int:
    """The planner's checks of the script Slurm saved; the number of data steps. Relative paths
    are checked as if the job ran from the scratch root (Slurm does not say from where yet):
    :func:`data_in` resolves them against the job's own directory."""
    text = _read_script(script_path)
    try:
        parsed = parse_script(text, shown_as, cwd=config.storage.scratch_root,
                              scratch_root=config.storage.scratch_root)
        build_plan(parsed, config, chain_id="check", workdir=config.storage.scratch_root,
                   scheduler="slurm")
    except DirectiveError as err:
        raise StageFailed(str(err)) from err
    return len(parsed.steps)


def _read_script(path: str) -> str:
    """Slurm's saved copy of the batch script: a regular file of at most MAX_SCRIPT_BYTES of
    UTF-8, with the C string's terminating NUL slurmctld saves it with."""
    data = read_limited(path, MAX_SCRIPT_BYTES + 1, what="batch script")
    return decode_utf8(data[:-1] if data.endswith(b"\0") else data, path)


# -- pending -----------------------------------------------------------------------------------------
def setup(config: SiteConfig, store: StateStore, job_id: str, uid: int, gid: int, pool: str,
          size: int, script_path: str = "") -> None:
    check_job_id(job_id)
    replaced = records.set_up(store, job_id, uid, gid, pool if pool not in ("(null)", "") else "",
                              size, submission=submission_of(script_path))
    if replaced is not None:
        log.warning("job %s: a new job with the id of an ended one: the earlier record%s "
                    "replaced", job_id, f" (chain {replaced})" if replaced else "")
    write_held(config, store)


def submission_of(script_path: str) -> str | None:
    """Which submission of a job id this is: the inode and modification time of the script
    slurmctld saved for it (``StateSaveLocation/hash.N/job.ID/script``, written once at
    ``sbatch``, removed when the job is purged), None when there is none to look at. Slurm
    hands an id out again once its state is reset or ids wrap at ``MaxJobId``; the same job
    set up again (slurmctld restarted) keeps its file."""
    if not script_path:
        return None
    try:
        st = os.stat(script_path)
    except OSError:
        return None
    return f"{st.st_ino}:{st.st_mtime_ns}"


def data_in(config: SiteConfig, store: StateStore, job_id: str, script_path: str, *,
            scheduler: Scheduler | None = None, timeout: float | None = None) -> str:
    """Stage the job's input; the chain id. Raises :class:`StageFailed` with the reason.

    Run for a job torn down since its last stage-in (a slurmctld restart), it reopens the
    chain and stages again what the teardown cancelled. A teardown during the wait (of a job
    cancelled, or of a restart that outlived this process) has the last word: the outcome is
    not recorded and the job is left as the teardown left it."""
    row = _job_row(store, job_id)
    torn_down_at = row["teardown_at"]
    scheduler = scheduler or get_scheduler(config, "slurm")
    chain_id = row["chain_id"] or _plan_and_record(config, store, row, script_path, scheduler)
    if row["stage"] == records.TORN_DOWN:
        _reopen(store, job_id, chain_id)
    records.set_stage(store, job_id, records.STAGING_IN)
    keys = [r["job_key"] for r in chains.chain_jobs(store, chain_id) if r["role"] == STAGE_IN]
    _submit(config, store, row, chain_id, keys, scheduler)
    failure = _wait(store, scheduler, chain_id, keys,
                    config.burst_buffer.stage_in_timeout if timeout is None else timeout)
    _close_spool(config, chain_id, int(row["uid"]))
    latest = records.job(store, job_id)
    if latest is not None and latest["teardown_at"] != torn_down_at:
        log.warning("job %s: torn down while its stage-in waited; the outcome (%s) is left "
                    "to the teardown", job_id, failure or "staged")
        raise StageFailed(f"job {job_id} was torn down while its stage-in waited")
    if failure is not None:
        records.set_stage(store, job_id, records.STAGE_IN_FAILED, failure)
        chains.set_chain_state(store, chain_id, chains.STAGE_IN_FAILED, failure)
        _settle(store, chain_id, "stage-in-failed")
        end_failed_job(config, store, scheduler, job_id, f"stage-in failed: {failure}")
        raise StageFailed(f"stage-in failed: {failure}")
    staged = [f for f in chains.staged_files(store, chain_id) if f["state"] == "staged"]
    total = sum(int(f["size"] or 0) for f in staged)
    _write_env(config, job_id, chain_id, [f["path"] for f in staged])
    records.set_stage(store, job_id, records.STAGED_IN, staged_bytes=total)
    write_held(config, store)
    return chain_id


def _reopen(store: StateStore, job_id: str, chain_id: str) -> None:
    """The job is staged again after a teardown: its chain is live again (a failed one keeps
    its failure, and the stage fails again with it)."""
    chain = chains.chain(store, chain_id)
    if chain is not None and chain["state"] == records.CHAIN_ENDED:
        chains.set_chain_state(store, chain_id, CHAIN_STATE)
        log.info("job %s: staged again after a teardown (slurmctld restarted, or Slurm took "
                 "its buffer back): chain %s reopened", job_id, chain_id)


def end_failed_job(config: SiteConfig, store: StateStore, scheduler: Scheduler, job_id: str,
                    reason: str) -> None:
    """The job's stage-in failed: its reason goes into its comment (``sacct -o Comment``), and
    with ``burst_buffer.stage_in_failure = "cancel"`` it is marked to be cancelled once Slurm
    has torn it down (:mod:`.ending`: a cancel from here would race Slurm's teardown); with
    ``"hold"`` it stays pending with Slurm's reason (``burst_buffer/lua: slurm_bb_data_in:
    ...``) until someone cancels it (Slurm never runs data-in for it again)."""
    scheduler.annotate([job_id], reason)
    if config.burst_buffer.stage_in_failure == "cancel":
        records.mark_to_end(store, job_id)


def _settle(store: StateStore, chain_id: str, outcome: str) -> None:
    """This path settled the chain's end itself: the chain service's sweep leaves it alone."""
    chains.open_chain_ends(store)
    chains.record_chain_end(store, chain_id, outcome)


def write_held(config: SiteConfig, store: StateStore) -> None:
    """The bytes jobs hold in the pool, for ``slurm_bb_pools`` (which must answer at once and
    so reads a file: free space on scratch + these bytes is the pool Slurm hands out).

    Stages of many jobs run at once (slurmctld runs each in a process of its own). Each writer
    reads the records and replaces the file under one lock: the last to write read every
    record committed before it took the lock, so a slower writer's older sum never overwrites
    a newer one, and each writes a temporary of its own."""
    folder = state_dir(config)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    with files.locked(folder / HELD_LOCK):
        files.replace_file(folder / HELD_FILE, f"{records.held_bytes(store)}\n")


def _close_spool(config: SiteConfig, chain_id: str, owner_uid: int) -> None:
    """The logs the data jobs wrote since, made the owner's alone (files.restrict_spool); a
    failure here is logged, never the stage's outcome."""
    try:
        files.restrict_spool(spool_dir(config, chain_id), owner_uid)
    except OSError as err:
        log.warning("chain %s: spool not restricted to its owner: %s", chain_id, err)


def _job_row(store: StateStore, job_id: str) -> sqlite3.Row:
    row = records.job(store, check_job_id(job_id))
    if row is None:
        raise StageFailed(f"job {job_id}: not set up (slurm_bb_setup did not record it)")
    return row


def job_facts(job_id: str, config: SiteConfig) -> JobFacts:
    """The job's name and directory from the queue (one ``squeue --json -j``)."""
    job = slurm.queued_job(job_id, get_runner(), config.scheduler.command_timeout)
    if job is None:
        raise SchedulerError(f"job {job_id}: not in the queue")
    return JobFacts(job_id, job.get("name") or "", job.get("current_working_directory") or "/",
                    job.get("command") or "script")


def _plan_and_record(config: SiteConfig, store: StateStore, row: sqlite3.Row, script_path: str,
                     scheduler: Scheduler) -> str:
    """Plan the script for its owner, write the data jobs' scripts, record the chain with the
    job itself as its compute job; the chain id."""
    job_id, uid, gid = row["job_id"], int(row["uid"]), int(row["gid"])
    facts = job_facts(job_id, config)
    text = _read_script(script_path)
    try:
        plan = plan_queued_job(text, facts.command, config, workdir=facts.workdir,
                               job_name=facts.name)
    except DirectiveError as err:
        raise StageFailed(str(err)) from err
    log_paths = spool_data_jobs(plan, config, (uid, gid))
    files.restrict_spool(spool_dir(config, plan.chain_id), uid)
    records.set_umask(store, job_id, files.owner_umask(script_path))
    chains.record_plan(store, plan, uid, log_paths)
    chains.set_job_submitted(store, plan.chain_id, COMPUTE, job_id)
    chains.set_chain_state(store, plan.chain_id, CHAIN_STATE)
    records.set_chain(store, job_id, plan.chain_id)
    log.info("job %s: chain %s planned (%d data job(s))", job_id, plan.chain_id,
             len(plan.jobs) - 1)
    return plan.chain_id


def _submit(config: SiteConfig, store: StateStore, row: sqlite3.Row, chain_id: str, keys: list[str],
            scheduler: Scheduler) -> None:
    """Submit the data jobs ``keys`` not submitted yet, as the job's owner, with the owner's
    umask (the staged files are the owner's); in a live chain, also those a teardown cancelled
    (Slurm stages the job again). A data job of the chain in the queue but not recorded (a kill
    between ``sbatch`` and the record) is cancelled first, so a stage run again never leaves
    two copies of a transfer."""
    chain = chains.chain(store, chain_id)
    rows = {r["job_key"]: r for r in chains.chain_jobs(store, chain_id)}
    again = chain["state"] == CHAIN_STATE
    todo = [k for k in keys if not rows[k]["job_id"]
            or (again and rows[k]["state"] == chains.JOB_CANCELLED)]
    if not todo:
        return
    recorded = {r["job_id"] for r in rows.values() if r["job_id"]}
    strays = [j for j in scheduler.queued_from(str(spool_dir(config, chain_id)))
              if j not in recorded]
    if strays:
        scheduler.cancel(strays, reason=f"chain {chain_id}: submitted but not recorded before "
                                        "a restart; submitted again")
    names = {j["key"]: j["name"] for j in json.loads(chain["plan_json"])["jobs"]}
    umask = (records.job(store, row["job_id"]) or row)["umask"]
    with files.submitting_with_umask(files.FALLBACK_UMASK if umask is None else int(umask)):
        for key in todo:
            planned = PlannedJob(key=key, role=rows[key]["role"], queue=rows[key]["queue"],
                                 name=names[key], depends_on=[])
            job_id = submit_chain_job(planned, config, scheduler, chain_id=chain_id,
                                      workdir=chain["workdir"],
                                      on_behalf_of=(int(row["uid"]), int(row["gid"])))
            chains.set_job_submitted(store, chain_id, key, job_id)
            log.info("job %s: chain %s: %s submitted as %s", row["job_id"], chain_id, key,
                     job_id)


def _wait(store: StateStore, scheduler: Scheduler, chain_id: str, keys: list[str],
          timeout: float | None) -> str | None:
    """Wait until every data job ``keys`` recorded its outcome; None when all succeeded, else
    why one failed. A data job that ended without recording (cancelled, killed, walltime) is
    found through the scheduler."""
    deadline = None if timeout is None else time.monotonic() + timeout
    next_ask = time.monotonic() + SCHEDULER_POLL

    def rows_now() -> list[sqlite3.Row]:
        return [r for r in chains.chain_jobs(store, chain_id) if r["job_key"] in keys]
    while True:
        rows = rows_now()
        ended_all, why = _recorded(rows)
        if ended_all:
            return why
        if time.monotonic() >= next_ask:
            next_ask = time.monotonic() + SCHEDULER_POLL
            pending = [r for r in rows if r["state"] != chains.JOB_DONE]
            found = scheduler.lookup([r["job_id"] for r in pending], missing_ok=True)
            ended = [text for r in pending
                     if (text := _ended_text(r, found.get(r["job_id"]))) is not None]
            if ended:
                # recorded after the first look (a job records its end before it exits)? look
                # once more: its own record (staged, or failed with the line and the words of
                # its failure) is what is said, the scheduler's bare end only without one
                ended_all, why = _recorded(rows_now())
                return why if ended_all else "; ".join(ended)
        if deadline is not None and time.monotonic() >= deadline:
            return "timed out waiting for the data jobs " + ", ".join(
                r["job_id"] for r in rows if r["state"] != chains.JOB_DONE)
        time.sleep(RECORD_POLL)


def _recorded(rows: list[sqlite3.Row]) -> tuple[bool, str | None]:
    """Whether the data jobs ``rows`` recorded their end: every one staged (None), or one failed
    (why, in each failed job's own words)."""
    failed = [r for r in rows if r["state"] == chains.JOB_FAILED]
    if failed:
        return True, "; ".join(_failure_text(r) for r in failed)
    return all(r["state"] == chains.JOB_DONE for r in rows), None


def _failure_text(row: sqlite3.Row) -> str:
    """Why a data job failed: its own ``stage fail`` words (``stage-in failed: script:3: exit
    1: ...``, which name the script's line) without their prefix, which the job's reason adds
    again; otherwise the job and its line."""
    reason, prefix = row["reason"] or "", f"{row['role']} failed: "
    if reason.startswith(prefix) and reason[len(prefix):].strip():
        return reason[len(prefix):]
    where = f" (script line {row['failed_line']})" if row["failed_line"] else ""
    return f"{row['role']} job {row['job_id']}{where}: {reason or 'failed'}"


def _ended_text(row: sqlite3.Row, record: JobRecord | None) -> str | None:
    if row["role"] == STAGE_IN:
        return stage_in_failure(row, record)
    if record is None:
        return f"{row['role']} job {row['job_id']} is known neither to the queue nor to " \
               "accounting and never recorded its outcome"
    if record.state.is_final and row["state"] != chains.JOB_DONE:
        if record.state.value == "completed":
            return None  # its record comes with the next look
        return f"{row['role']} job {row['job_id']} ended {record.outcome()}"
    return None


def _write_env(config: SiteConfig, job_id: str, chain_id: str, paths: list[str]) -> None:
    """The variables ``slurm_bb_paths`` copies into the job's environment: the chain and each
    staged file (a path holding a newline, which would end its line, is left out)."""
    folder = state_dir(config)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    usable = [p for p in paths if "\n" not in p and "\0" not in p]
    lines = [f"SCRATCHKEEPER_CHAIN={chain_id}", f"SCRATCHKEEPER_STAGED_COUNT={len(usable)}"]
    lines += [f"SCRATCHKEEPER_STAGED_{n}={p}" for n, p in enumerate(usable, 1)]
    files.replace_file(folder / f"{job_id}{ENV_SUFFIX}", "\n".join(lines) + "\n")


def real_size(store: StateStore, job_id: str) -> int:
    """What the job holds in the pool: the bytes it staged, never less than it asked to reserve
    (``#STAGE capacity=``: room for what it will write)."""
    row = _job_row(store, job_id)
    return max(int(row["staged_bytes"] or 0), int(row["requested_bytes"] or 0))


# -- allocated ----------------------------------------------------------------------------------
def pre_run(config: SiteConfig, store: StateStore, job_id: str, *, timeout: float | None = None
            ) -> str:
    """The pre-execution recovery check through recoveryd; what it found. Raises
    :class:`StageFailed` when an input is lost for good. recoveryd down does not stop the job
    (as the SPANK prolog: the check is a service, not a gate)."""
    from ..recovery.client import RecoveryClient, ServiceUnavailable

    _job_row(store, job_id)
    records.set_stage(store, job_id, records.RUNNING)
    try:
        result = RecoveryClient.for_site(config).check_job(
            job_id, timeout if timeout is not None else config.recovery.wait_timeout)
    except ServiceUnavailable as err:
        log.warning("job %s: pre-run recovery check skipped: %s", job_id, err)
        return f"recovery check skipped: recoveryd is not answering ({err})"
    if not result["whole"]:
        raise StageFailed(f"staged input not recoverable: {result['reason']}")
    return f"{result['checked']} staged input(s) whole"


# -- ended ----------------------------------------------------------------------------------------
def data_out(config: SiteConfig, store: StateStore, job_id: str, *,
             scheduler: Scheduler | None = None, timeout: float | None = None) -> str:
    """Run the job's stage-out data jobs as its owner and wait; what happened.

    A failed stage-out does not fail this stage, whatever failed (a data job, a scheduler
    command, this code): Slurm 22.05 keeps a job whose data_out failed in STAGE_OUT until an
    operator runs ``scancel --hurry`` (docs/slurm-plugins.rst), while the results are safe on
    scratch. The failure is recorded on the job and its chain (``scontrol show bbstat``,
    ``scratchkeeper status``), in slurmctld's log (this stage's line), and in accounting on the
    stage-out data job when it ran (its state, and its comment, which the data job writes
    itself: Slurm refuses a comment on the ended compute job)."""
    try:
        return _data_out(config, store, job_id, scheduler, timeout)
    except Exception as err:  # any failure: the job must leave STAGE_OUT all the same
        reason = str(err) if isinstance(err, ScratchkeeperError) else f"internal error: {err!r}"
        log.exception("job %s: stage-out failed: %s", job_id, reason)
        _record_stage_out_failure(store, job_id, reason)
        return f"stage-out FAILED, results left on scratch: {reason}"


def _record_stage_out_failure(store: StateStore, job_id: str, reason: str) -> None:
    """The failure on the job's record and its chain, where there are (best effort: the
    failure is already in slurmctld's log)."""
    try:
        row = records.job(store, job_id)
        if row is None:
            return
        records.set_stage(store, job_id, records.STAGE_OUT_FAILED, reason)
        if row["chain_id"]:
            chains.set_chain_state(store, row["chain_id"], chains.STAGE_OUT_FAILED, reason)
    except Exception:  # the records themselves failing: the log line above stays
        log.exception("job %s: stage-out failure not recorded", job_id)


def _data_out(config: SiteConfig, store: StateStore, job_id: str, scheduler: Scheduler | None,
              timeout: float | None) -> str:
    row = _job_row(store, job_id)
    if not row["chain_id"]:
        return "nothing to stage out"
    scheduler = scheduler or get_scheduler(config, "slurm")
    chain_id = row["chain_id"]
    keys = [r["job_key"] for r in chains.chain_jobs(store, chain_id) if r["role"] == STAGE_OUT]
    if not keys:
        records.set_stage(store, job_id, records.STAGED_OUT)
        return "nothing to stage out"
    records.set_stage(store, job_id, records.STAGING_OUT)
    _submit(config, store, row, chain_id, keys, scheduler)
    failure = _wait(store, scheduler, chain_id, keys,
                    config.burst_buffer.stage_out_timeout if timeout is None else timeout)
    _close_spool(config, chain_id, int(row["uid"]))
    if failure is not None:
        _record_stage_out_failure(store, job_id, failure)
        log.error("job %s: stage-out failed: %s", job_id, failure)
        return f"stage-out FAILED, results left on scratch: {failure}"
    records.set_stage(store, job_id, records.STAGED_OUT)
    return f"{len(keys)} stage-out job(s) done"


def teardown(config: SiteConfig, store: StateStore, job_id: str, hurry: bool, *,
             scheduler: Scheduler | None = None) -> list[str]:
    """Cancel the job's data jobs still queued or running, close its chain (a chain still in
    :data:`CHAIN_STATE` ends in ``records.CHAIN_ENDED``: a failed one keeps its failure),
    remove its env file; the data jobs cancelled.

    Slurm tears down a job that ended (it ran, or was cancelled: ``hurry``) and one still
    pending whose staging it gives up (slurmctld restarted during its stage-in): the cancelled
    data jobs are marked so, and the pending one's chain is left unsettled, for the ``data_in``
    Slurm runs again to reopen it."""
    row = records.job(store, check_job_id(job_id))
    if row is None:
        return []
    # recorded before any cancel: a data_in still waiting, which sees its data job end, then
    # knows the teardown ended it (a teardown cut short is run again by Slurm)
    records.set_stage(store, job_id, records.TORN_DOWN, row["reason"])
    cancelled: list[str] = []
    if row["chain_id"]:
        cancelled = _tear_down_chain(config, store, row, hurry,
                                     scheduler or get_scheduler(config, "slurm"))
    (state_dir(config) / f"{job_id}{ENV_SUFFIX}").unlink(missing_ok=True)
    write_held(config, store)
    return cancelled


def _tear_down_chain(config: SiteConfig, store: StateStore, row: sqlite3.Row, hurry: bool,
                     scheduler: Scheduler) -> list[str]:
    job_id, chain_id = row["job_id"], row["chain_id"]
    open_rows = [r for r in chains.chain_jobs(store, chain_id)
                 if r["role"] != COMPUTE and r["job_id"]
                 and r["state"] not in (chains.JOB_DONE, chains.JOB_FAILED)]
    found = scheduler.lookup([r["job_id"] for r in open_rows] + [job_id], missing_ok=True)
    job = found.get(job_id)
    # pending: Slurm may stage it again, unless its stage-in failed (held, to be cancelled)
    queued = job is not None and job.state.is_queued and row["stage"] != records.STAGE_IN_FAILED
    live = [r for r in open_rows if r["job_id"] in found and not found[r["job_id"]].state.is_final]
    if live:
        reason = (f"job {job_id} is still pending but Slurm tore its staging down (slurmctld "
                  "restarted, or it took the buffer back): cancelled, staged again with the "
                  "job's next data_in" if queued
                  else f"job {job_id} was torn down" + (" (cancelled)" if hurry else ""))
        # marked before the cancel: a teardown killed in between is run again by Slurm, and a
        # data_in run again submits what is marked cancelled
        chains.set_jobs_state(store, chain_id, [r["job_key"] for r in live], chains.JOB_CANCELLED,
                              "cancelled: " + reason)
        scheduler.cancel([r["job_id"] for r in live], reason=reason)
    if not queued:
        _settle(store, chain_id, "torn-down")
    chain = chains.chain(store, chain_id)
    if chain is not None and chain["state"] == CHAIN_STATE:
        chains.set_chain_state(store, chain_id, records.CHAIN_ENDED)
    _close_spool(config, chain_id, int(row["uid"]))
    return [r["job_id"] for r in live]
