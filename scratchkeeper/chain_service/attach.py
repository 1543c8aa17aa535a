"""Chain data jobs to a compute job already in the queue (plain sbatch + the Slurm plugins).

``job_submit.lua`` holds a job that asks for staging (``--stage-in``/``--stage-out`` through the
SPANK plugin, or ``#STAGEIN``/``#STAGEOUT`` lines) and writes the requests to its admin comment,
which only an operator can set. :func:`chain_pending` finds such jobs in ONE ``squeue --json``
call and, for each, plans the script exactly as ``scratchkeeper submit`` would (the plugin's
requests become ``#STAGEIN SRC DST`` / ``#STAGEOUT SRC DST`` lines appended to the script, so
the data jobs and the recovery metadata are the planner's own), submits the data jobs, makes
the compute job depend on its stage-in jobs, marks it chained and releases it.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import os
import re
import shlex
from dataclasses import dataclass, field

from ..config import SiteConfig
from ..errors import InputError, SchedulerError, ScratchkeeperError
from ..ownership import Owner
from ..planner import records
from ..planner.directives import STAGE_IN, STAGE_OUT
from ..planner.plan import COMPUTE
from ..planner.spool import spool_dir
from ..planner.submit import hold_back_jit, plan_queued_job, spool_data_jobs, submit_chain_job
from ..runner import get_runner
from ..schedulers import Scheduler, get_scheduler, slurm
from ..schedulers.base import cancel_comment
from ..state import StateStore
from ..transfer.uri import SCHEMES

log = logging.getLogger(__name__)

PENDING = "scratchkeeper:chain-pending"
#: set in sbatch's environment by `scratchkeeper submit` handing a script to the chain service;
#: job_submit.lua then holds a directive script even where plain sbatch of one is rejected
SUBMIT_ENV = "SCRATCHKEEPER_SUBMIT"
CHAINED = "scratchkeeper:chained"
FAILED = "scratchkeeper:chain-failed"

_URI_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_JOB_ID_RE = re.compile(r"^[0-9]+$")
_UNSAFE_NAME_RE = re.compile(r"[^A-Za-z0-9._+@=-]")


@dataclass(frozen=True)
class StageRequest:
    """One ``--stage-in``/``--stage-out`` value split into its source and destination."""

    stage: str
    source: str
    destination: str

    def directive(self) -> str:
        prefix = "#STAGEIN" if self.stage == STAGE_IN else "#STAGEOUT"
        return f"{prefix} {shlex.quote(self.source)} {shlex.quote(self.destination)}"


@dataclass(frozen=True)
class HeldJob:
    """A compute job job_submit.lua held for chaining."""

    job_id: str
    name: str
    user_id: int
    group_id: int
    workdir: str
    script_path: str
    dependency: str
    requests: tuple[StageRequest, ...]
    chained: str | None = None  # chain id once marked chained (the release may still be due)
    submit_time: float | None = None  # when Slurm took it (epoch seconds), None: not said


@dataclass
class ChainOutcome:
    job_id: str
    chain_id: str | None = None
    data_jobs: dict[str, str] = field(default_factory=dict)
    error: str | None = None


def split_request(stage: str, value: str) -> StageRequest:
    """Split ``SRC:DST`` at the last ':' whose remainder is the right kind of destination.

    Stage-in: the remainder starts with '/' (an absolute path); stage-out: with ``scheme://``.
    The SPANK plugin applies the same rule (slurm-plugins/spank_scratchkeeper.c).
    """
    option = f"--{stage}"
    if not value:
        raise InputError(f"{option}: needs SRC:DST")
    if value.endswith(":"):
        raise InputError(f"{option}={value}: empty DST")
    split = -1
    for index, char in enumerate(value):
        if char != ":":
            continue
        rest = value[index + 1:]
        if (rest.startswith("/") if stage == STAGE_IN else _URI_RE.match(rest)):
            split = index
    if ":" not in value:
        raise InputError(f"{option}={value}: expected SRC:DST (no ':' found)")
    if split < 0:
        kind = "an absolute path" if stage == STAGE_IN else "a URI"
        raise InputError(f"{option}={value}: expected SRC:DST with DST {kind}")
    source, destination = value[:split], value[split + 1:]
    if not source:
        raise InputError(f"{option}={value}: empty SRC")
    remote = source if stage == STAGE_IN else destination
    match = _URI_RE.match(remote)
    if not match or not remote[match.end():]:
        raise InputError(f"{option}={value}: {'SRC' if stage == STAGE_IN else 'DST'} must be a "
                         f"URI scheme://...")
    if match.group(1).lower() not in SCHEMES:
        raise InputError(f"{option}={value}: unknown scheme {match.group(1)!r} "
                         f"(known: {', '.join(SCHEMES)})")
    local = destination if stage == STAGE_IN else source
    if local in ("", "/") or not local.startswith("/"):
        raise InputError(f"{option}={value}: {'DST' if stage == STAGE_IN else 'SRC'} must be an "
                         f"absolute file path")
    return StageRequest(stage, source, destination)


def parse_admin_comment(text: str) -> tuple[str, tuple[StageRequest, ...], str | None] | None:
    """(marker, requests, chain id) of a comment written by job_submit.lua; None if not ours."""
    lines = text.split("\n") if text else []
    if not lines:
        return None
    head = lines[0].split()
    if not head or head[0] not in (PENDING, CHAINED, FAILED):
        return None
    chain_id = head[1] if head[0] == CHAINED and len(head) > 1 else None
    requests = []
    for line in lines[1:]:
        stage, _, value = line.partition(" ")
        if stage in (STAGE_IN, STAGE_OUT):
            requests.append(split_request(stage, value))
    return head[0], tuple(requests), chain_id


def held_jobs(runner=None, *, timeout: float = 30.0) -> list[HeldJob]:
    """Jobs in the queue that job_submit.lua marked, from one ``squeue --json`` call."""
    runner = runner or get_runner()
    result = runner.run(["squeue", "--json"], timeout=timeout, mutating=False)
    try:
        jobs = json.loads(result.stdout).get("jobs", [])
    except (json.JSONDecodeError, AttributeError) as err:
        raise SchedulerError(f"squeue --json: unreadable output: {err}") from err
    found = []
    for job in jobs:
        state = job.get("job_state")
        state = state[0] if isinstance(state, list) and state else state
        if state != "PENDING":
            continue
        try:
            parsed = parse_admin_comment(job.get("admin_comment") or "")
        except InputError as err:
            log.error("job %s: unreadable staging request: %s", job.get("job_id"), err)
            continue
        if parsed is None or parsed[0] == FAILED:
            continue
        marker, requests, chain_id = parsed
        # a number in 22.05's JSON, {"set", "infinite", "number"} from 23.02 on
        if marker == CHAINED and slurm.job_priority(job) != 0:
            continue  # chained and released: done
        found.append(HeldJob(job_id=str(job["job_id"]), name=job.get("name") or "",
                             user_id=int(job.get("user_id", -1)),
                             group_id=int(job.get("group_id", -1)),
                             workdir=job.get("current_working_directory") or "/",
                             script_path=job.get("command") or f"slurm-job-{job['job_id']}",
                             dependency=job.get("dependency") or "", requests=requests,
                             chained=chain_id, submit_time=slurm.submit_time_of(job)))
    return found


def _queued_job(job_id: str, runner, timeout: float) -> dict:
    """The job's whole record (``scontrol show job`` prints only the admin comment's first
    line); empty when the queue has no such job."""
    return slurm.queued_job(job_id, runner, timeout) or {}


def job_script(job_id: str, runner=None, *, timeout: float = 30.0) -> str:
    """The batch script of a queued job (``scontrol write batch_script JOBID -``)."""
    if not _JOB_ID_RE.match(job_id):
        raise InputError(f"job id {job_id!r}: expected a Slurm job id")
    runner = runner or get_runner()
    return runner.run(["scontrol", "write", "batch_script", job_id, "-"], timeout=timeout,
                      mutating=False).stdout


def planned_text(script: str, requests: tuple[StageRequest, ...]) -> str:
    """The script with the plugin's requests appended as directives (its own lines keep their
    numbers, so errors and the recorded ``line`` of a #STAGEIN still point into the script)."""
    extra = [request.directive() for request in requests]
    body = script if script.endswith("\n") or not script else script + "\n"
    return body + "".join(line + "\n" for line in extra)


def chain_job(job: HeldJob, config: SiteConfig, store: StateStore,
              scheduler: Scheduler | None = None) -> ChainOutcome:
    """Submit the data jobs of ``job``, make it depend on them, mark it chained, release it.

    A crash at any point is finished by the next call: a chain recorded as submitted is only
    marked and released; one left half-submitted is cancelled and planned again.
    """
    scheduler = scheduler or get_scheduler(config, "slurm")
    runner = get_runner()
    outcome = ChainOutcome(job.job_id)
    existing = _earlier_chaining(store, job)
    if existing is not None:
        row = records.chain(store, existing)
        if row is not None and row["state"] == records.SUBMITTED:
            _mark_and_release(job, existing, runner, config)
            outcome.chain_id = existing
            return outcome
        if row is not None and row["state"] == records.STAGE_IN_FAILED:
            # its stage-in ended before the release (the sweep's cancel of the job failed):
            # planning it again would stage what already failed; it ends instead
            refuse_job(job, f"chain {existing}: {row['reason']}", config, runner)
            outcome.chain_id, outcome.error = existing, row["reason"]
            return outcome
        _undo(store, scheduler, existing, job.job_id, config)
    own = own_dependency(job, store)
    text = job_script(job.job_id, runner, timeout=config.scheduler.command_timeout)
    plan = plan_queued_job(planned_text(text, job.requests), job.script_path, config,
                           workdir=job.workdir, job_name=job.name)
    outcome.chain_id = plan.chain_id
    on_behalf = job.user_id not in (-1, os.geteuid())
    log_paths = spool_data_jobs(plan, config,
                                (job.user_id, job.group_id) if on_behalf else None)
    records.record_plan(store, plan, job.user_id, log_paths)
    records.set_job_submitted(store, plan.chain_id, COMPUTE, job.job_id)
    ids = {COMPUTE: job.job_id}
    held = []
    # Root submits on the owner's behalf: the data jobs run as the job's user, not as root.
    as_owner = (job.user_id, job.group_id) if on_behalf else None
    try:
        for planned in plan.jobs:
            if planned.role == COMPUTE:
                continue
            deps: dict[str, list[str]] = {}
            for dep in planned.depends_on:
                deps.setdefault(dep.type, []).append(ids[dep.key])
            hold = planned.role == STAGE_IN
            ids[planned.key] = submit_chain_job(planned, config, scheduler,
                                                chain_id=plan.chain_id, workdir=job.workdir,
                                                dependencies=deps, hold=hold,
                                                on_behalf_of=as_owner)
            if hold:
                held.append(ids[planned.key])
            records.set_job_submitted(store, plan.chain_id, planned.key, ids[planned.key])
            log.info("job %s: chain %s: %s submitted as %s", job.job_id, plan.chain_id,
                     planned.key, ids[planned.key])
        _depend_on(job, own, [ids[p.key] for p in plan.jobs if p.role == STAGE_IN], runner,
                   config)
        hold_back_jit(plan, ids, scheduler, store, config,
                      Owner.of(job.user_id, job.group_id) if on_behalf else None)
        scheduler.release(held)
    except ScratchkeeperError as err:
        submitted = [v for k, v in ids.items() if k != COMPUTE]
        if submitted:
            try:
                scheduler.cancel(submitted, reason=f"chaining job {job.job_id} failed ({err}); "
                                                   "it is chained again")
            except ScratchkeeperError as cancel_err:
                log.error("job %s: could not cancel %s: %s", job.job_id, submitted, cancel_err)
        records.set_chain_state(store, plan.chain_id, records.SUBMIT_FAILED, str(err))
        raise
    records.set_chain_state(store, plan.chain_id, records.SUBMITTED)
    outcome.data_jobs = {k: v for k, v in ids.items() if k != COMPUTE}
    _mark_and_release(job, plan.chain_id, runner, config)
    return outcome


def own_dependency(job: HeldJob, store: StateStore) -> list[slurm.DependencyEntry]:
    """The entries of the job's dependency that its owner gave: all but those naming a data
    job of an earlier chaining of this job (one killed after it set the dependency: those data
    jobs were cancelled by :func:`_undo`, and Slurm leaves a job depending on a cancelled one
    ``DependencyNeverSatisfied`` for ever).

    An owner's ``?`` (any of the entries) cannot take the stage-in's ``afterok`` beside it
    (Slurm takes one separator per dependency): such a job is refused with the reason.
    """
    entries, separator = slurm.parse_dependency(job.dependency)
    earlier = _earlier_data_jobs(store, job.job_id, {e.job_id for e in entries if e.job_id})
    own = [entry for entry in entries if not entry.job_id or entry.job_id not in earlier]
    if separator == "?" and len(own) > 1:
        raise InputError(f"job {job.job_id}: its dependency "
                         f"{slurm.format_dependency(own, separator)} is met by any one of its "
                         "jobs ('?'), and Slurm takes one separator per dependency, so the "
                         "stage-in's afterok cannot join it: use ',' (all of them)")
    return own


def _earlier_data_jobs(store: StateStore, job_id: str, named: set[str]) -> set[str]:
    """Which of the job ids ``named`` are data jobs of a chain whose compute job is
    ``job_id``."""
    rows = [row for row in records.jobs_by_id(store, named) if row["role"] != COMPUTE]
    mine = {chain_id for chain_id in {row["chain_id"] for row in rows}
            if any(r["role"] == COMPUTE and r["job_id"] == job_id
                   for r in records.chain_jobs(store, chain_id))}
    return {row["job_id"] for row in rows if row["chain_id"] in mine}


def _depend_on(job: HeldJob, own: list[slurm.DependencyEntry], stage_in_ids: list[str], runner,
               config: SiteConfig) -> None:
    """Set the job's whole dependency: its owner's entries and ``afterok`` on the chain's
    stage-in jobs. ``scontrol update Dependency=`` replaces the job's list, so an earlier
    chaining's entries go (Slurm's update_job_dependency builds a new list and frees the
    old); nothing is sent when there is no stage-in and nothing to drop."""
    entries, _ = slurm.parse_dependency(job.dependency)
    if not stage_in_ids and len(own) == len(entries):
        return
    dependency = slurm.format_dependency(own)
    if stage_in_ids:
        dependency = ",".join(filter(None, (dependency, "afterok:" + ":".join(stage_in_ids))))
    runner.run(["scontrol", "update", f"JobId={job.job_id}", f"Dependency={dependency}"],
               timeout=config.scheduler.command_timeout, mutating=True)


def _mark_and_release(job: HeldJob, chain_id: str, runner, config: SiteConfig) -> None:
    # Marked before the release: a crash in between leaves a held job marked chained, which the
    # next sweep only releases (held_jobs lists chained jobs still at priority 0).
    comment = "\n".join([f"{CHAINED} {chain_id}"] + [f"{r.stage} {r.source}:{r.destination}"
                                                     for r in job.requests])
    timeout = config.scheduler.command_timeout
    runner.run(["scontrol", "update", f"JobId={job.job_id}", f"AdminComment={comment}"],
               timeout=timeout, mutating=True)
    runner.run(["scontrol", "release", job.job_id], timeout=timeout, mutating=True)
    log.info("job %s: chained as %s and released", job.job_id, chain_id)


#: seconds the head's clock may be behind slurmctld's (a site's hosts keep time with NTP)
CLOCK_SLACK = 60.0


def _earlier_chaining(store: StateStore, job: HeldJob) -> str | None:
    """The chain an earlier chaining of this very job made (interrupted, or not released yet);
    None when there is none. A chain that holds the id as a data job's, or that was made
    before the job was submitted, is another job's: Slurm hands ids out again once its state
    is reset (or ids wrap at MaxJobId), and undoing that chain would cancel the jobs that
    now have its ids (seen after a switch of the local cluster's Slurm release)."""
    chain_id = records.chain_of_job(store, job.job_id)
    if chain_id is None:
        return None
    chain = records.chain(store, chain_id)
    computes = [r["job_id"] for r in records.chain_jobs(store, chain_id) if r["role"] == COMPUTE]
    earlier = chain is not None and job.submit_time is not None \
        and chain["created"] < job.submit_time - CLOCK_SLACK
    if chain is None or computes != [job.job_id] or earlier:
        log.warning("job %s: chain %s holds its id but is another job's (an id Slurm handed "
                    "out again): left alone", job.job_id, chain_id)
        return None
    return chain_id


def _undo(store: StateStore, scheduler: Scheduler, chain_id: str, job_id: str,
          config: SiteConfig) -> None:
    """Cancel the data jobs a crashed chaining left behind (never the user's compute job): the
    recorded ones, and any submitted but killed before its id was recorded (a held stage-in
    would stay pending for ever), found by its script in the chain's spool folder."""
    data_ids = [row["job_id"] for row in records.chain_jobs(store, chain_id)
                if row["job_id"] and row["role"] != COMPUTE]
    data_ids += [found for found in scheduler.queued_from(str(spool_dir(config, chain_id)))
                 if found not in data_ids and found != job_id]
    if data_ids:
        scheduler.cancel(data_ids, reason=f"chaining job {job_id} was interrupted; it is "
                                          "chained again")
    records.set_chain_state(store, chain_id, records.SUBMIT_FAILED,
                            "chaining interrupted; planned again")
    log.warning("job %s: chain %s was left half-submitted; cancelled %s", job_id, chain_id,
                data_ids or "nothing")


def refuse_job(job: HeldJob, reason: str, config: SiteConfig, runner=None) -> None:
    """A job whose staging cannot be planned: cancel it, with the reason in its admin comment."""
    runner = runner or get_runner()
    timeout = config.scheduler.command_timeout
    one_line = " ".join(reason.split())[:900]
    # the admin comment for `scratchkeeper submit` (hand_over reads it), the comment for the
    # job's owner (squeue -o %k, sacct -o Comment)
    runner.run(["scontrol", "update", f"JobId={job.job_id}",
                f"AdminComment={FAILED} {one_line}",
                f"Comment={cancel_comment('staging cannot be planned: ' + one_line)}"],
               timeout=timeout, mutating=True)
    runner.run(["scancel", job.job_id], timeout=timeout, mutating=True)
    log.error("job %s: staging cannot be planned, cancelled: %s", job.job_id, one_line)


def chain_pending(config: SiteConfig, store: StateStore, *, only: set[str] | None = None,
                  scheduler: Scheduler | None = None) -> list[ChainOutcome]:
    """Chain every held job (or those in ``only``): one squeue call, then per-job work.

    A script or request that cannot be planned (InputError) cancels that job with the reason;
    a scheduler error, or any other failure of one job, leaves it held for the next sweep.
    """
    scheduler = scheduler or get_scheduler(config, "slurm")
    jobs = [job for job in held_jobs(timeout=config.scheduler.command_timeout)
            if only is None or job.job_id in only]

    def chain_one(job: HeldJob) -> ChainOutcome:
        try:
            return chain_job(job, config, store, scheduler)
        except InputError as err:
            refuse_job(job, str(err), config)
            return ChainOutcome(job.job_id, error=str(err))
        except ScratchkeeperError as err:
            log.error("job %s: chaining failed, left held for the next sweep: %s", job.job_id, err)
            return ChainOutcome(job.job_id, error=str(err))
        except Exception as err:  # one job's bug must not stop the others' chains
            log.exception("job %s: chaining failed, left held for the next sweep", job.job_id)
            return ChainOutcome(job.job_id, error=f"internal error: {err!r}")

    # Chaining one job is a few scheduler commands in a row (script, sbatch per data job,
    # update, release), so it mostly waits on slurmctld: several jobs at once keep the
    # delay from submission to stage-in short under a burst. Each job's steps stay in order;
    # jobs share nothing but the state database (one connection per thread).
    workers = max(1, min(config.scheduler.chain_workers, len(jobs)))
    if workers == 1:
        return [chain_one(job) for job in jobs]
    with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="chain") as pool:
        return list(pool.map(chain_one, jobs))


@dataclass(frozen=True)
class HandedOver:
    """A script ``submit`` handed to sbatch: its job id and who stages its data."""

    job_id: str
    #: HELD_FOR_CHAINING (job_submit.lua held it for the chain service) or BURST_BUFFER
    staged_by: str


HELD_FOR_CHAINING, BURST_BUFFER = "chain-service", "burst-buffer"


def hand_over(script_path: str, config: SiteConfig, runner=None) -> HandedOver:
    """``scratchkeeper submit`` with ``scheduler.submit_via = "chain-service"``: submit the
    (already checked) script with plain sbatch, for job_submit.lua to hold and the chain
    service to chain, or, where the site runs ``#STAGE`` scripts through Slurm's burst buffer
    (job_submit.lua's ``staging = "burst-buffer"``), for burst_buffer.lua to stage.

    What is needed is that one of them took the job: held and marked by job_submit.lua, or
    given a burst-buffer request by Slurm (the record's ``burst_buffer``, the script's
    ``#STAGE`` lines). A job neither took (the plugins are not installed) is cancelled at
    once: it would run without its data.
    """
    runner = runner or get_runner()
    timeout = config.scheduler.command_timeout
    result = runner.run(["sbatch", "--parsable", os.path.abspath(script_path)],
                        env={SUBMIT_ENV: "chain-service"}, timeout=timeout, mutating=True)
    job_id = result.stdout.strip().split(";")[0]
    if not _JOB_ID_RE.match(job_id):
        raise SchedulerError(f"sbatch {script_path}: unexpected output {result.stdout.strip()!r}")
    job = _queued_job(job_id, runner, timeout)
    comment = job.get("admin_comment") or ""
    marker = comment.split("\n", 1)[0].split(" ", 1)[0]
    if marker == FAILED:  # the chain service was faster, and refused it
        raise InputError(f"job {job_id}: the chain service refused it: "
                         f"{comment[len(FAILED):].strip()}", path=script_path)
    if marker in (PENDING, CHAINED):
        log.info("%s: job %s held for the chain service", script_path, job_id)
        return HandedOver(job_id, HELD_FOR_CHAINING)
    if (job.get("burst_buffer") or "").strip():
        log.info("%s: job %s taken by Slurm's burst buffer", script_path, job_id)
        return HandedOver(job_id, BURST_BUFFER)
    runner.run(["scancel", job_id], timeout=timeout, mutating=True, check=False)
    raise SchedulerError(f"job {job_id} was neither held for chaining nor taken by Slurm's "
                         "burst buffer, so it was cancelled: scheduler.submit_via = "
                         "\"chain-service\" needs scratchkeeper's job_submit.lua in slurmctld "
                         "(or its burst_buffer.lua, staging = \"burst-buffer\"; "
                         "docs/slurm-plugins.rst)")
