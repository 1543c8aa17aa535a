"""Plan a script and submit its chain atomically: all jobs or none."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ..config import SiteConfig
from ..errors import DirectiveError, InputError, SchedulerError, ScratchkeeperError, TemplateError
from ..inputfiles import read_text
from ..runner import CommandRunner, get_runner, set_runner
from ..schedulers import Scheduler, SubmitSpec, get_scheduler
from ..structs import record
from .directives import ParsedScript, confine, parse_script
from .plan import COMPUTE, Plan, PlannedJob, build_plan
from .render import render_plan
from .spool import make_spool, output_path, script_path, spool_dir, write_script

if TYPE_CHECKING:
    from ..state import StateStore

log = logging.getLogger(__name__)

MAX_SCRIPT_BYTES = 4 << 20
#: what a job name may keep when it names data jobs in a directive (Slurm takes any character)
_UNSAFE_NAME_RE = re.compile(r"[^A-Za-z0-9._+@=-]")


@record
class Submission:
    """The commands a submission ran (or would run) and the job ids it got."""

    plan: Plan
    job_ids: dict[str, str]
    commands: list[list[str]]
    scheduler_seconds: float = 0.0


def new_chain_id() -> str:
    """``sk`` and 10 random hex digits (uuid4's first 40 bits, without importing uuid)."""
    return "sk" + os.urandom(5).hex()


def plan_queued_job(text: str, shown_as: str, config: SiteConfig, *, workdir: str,
                    job_name: str) -> Plan:
    """Plan and render the script of a job already in Slurm's queue (the chain service and the
    burst-buffer path): ``shown_as`` names it in errors, ``job_name`` (the name Slurm holds:
    ``-J`` wins over ``#SBATCH``) names its data jobs, made safe for a directive. Raises
    :class:`DirectiveError`."""
    parsed = parse_script(text, shown_as, cwd=workdir, scratch_root=config.storage.scratch_root)
    if job_name:
        parsed.compute_job["name"] = _UNSAFE_NAME_RE.sub("_", job_name)[:200]
    plan = build_plan(parsed, config, chain_id=new_chain_id(), workdir=workdir,
                      scheduler="slurm")
    try:
        render_plan(plan, parsed.shebang, parsed.compute_script, config)
    except ValueError as err:
        raise DirectiveError(str(err), path=shown_as) from err
    return plan


def spool_data_jobs(plan: Plan, config: SiteConfig, owner: tuple[int, int] | None) -> dict[str, str]:
    """Write the data jobs' scripts into the chain's spool folder (root's files, read by the
    data jobs); ``owner`` (uid, gid), when root plans for a user, gets the folder, where the
    data jobs, running as that user, write their logs. Each data job's log path."""
    spool = make_spool(config, plan.chain_id, owner)
    log_paths = {}
    for planned in plan.jobs:
        if planned.role != COMPUTE:
            write_script(spool, planned.key, planned.script, 0o755)
            log_paths[planned.key] = output_path(spool, planned.key)
    return log_paths


def read_script(path: str) -> str:
    """The batch script at ``path`` as text: a regular file of at most MAX_SCRIPT_BYTES of
    UTF-8 (a FIFO or ``/dev/zero`` is refused, not read); errors name the script and line."""
    return read_text(path, MAX_SCRIPT_BYTES, what="batch script", error=DirectiveError)


def prepare(script_path: str, config: SiteConfig, *, scheduler: str | None = None,
            workdir: str | None = None, chain_id: str | None = None,
            extra_inputs: list[str] | None = None) -> tuple[ParsedScript, Plan]:
    """Parse, plan and render ``script_path``; raises before anything is submitted."""
    workdir = os.path.abspath(workdir or os.getcwd())
    text = read_script(script_path)
    parsed = parse_script(text, script_path, cwd=workdir, scratch_root=config.storage.scratch_root)
    for path in extra_inputs or []:
        full = os.path.normpath(os.path.join(workdir, path))
        reason = confine(full, config.storage.scratch_root)
        if reason:
            raise InputError(f"--input {path}: {full} {reason}")
        parsed.options["stage-in"].inputs.append(full)
    plan = build_plan(parsed, config, chain_id=chain_id or new_chain_id(), workdir=workdir,
                      scheduler=scheduler)
    try:
        render_plan(plan, parsed.shebang, parsed.compute_script, config)
    except TemplateError as err:  # named by the script, with where the template refused it
        raise DirectiveError(f"{err.message} (rendering {err.path}"
                             f"{f':{err.line}' if err.line else ''})", path=script_path) from err
    return parsed, plan


def submit_chain_job(job: PlannedJob, config: SiteConfig, scheduler: Scheduler, *,
                     chain_id: str, workdir: str,
                     dependencies: Mapping[str, Sequence[str]] | None = None, hold: bool = False,
                     on_behalf_of: tuple[int, int] | None = None) -> str:
    """Submit one job of chain ``chain_id`` (a data job, or the compute job of ``scratchkeeper
    submit``) from its script in the chain's spool folder; its job id.

    ``dependencies`` maps a type (afterok, afterany) to job ids; a data job's output goes to
    the spool folder (the compute job's where its script says); ``on_behalf_of`` (uid, gid):
    root submits for the chain's owner (``sbatch --uid --gid``), so the job runs as that user.
    Every submission of the planner and of the chain service goes through here.
    """
    spool = spool_dir(config, chain_id)
    spec = SubmitSpec(script_path=str(script_path(spool, job.key)), queue=job.queue,
                      job_name=job.name, workdir=workdir,
                      output_path=None if job.role == COMPUTE else output_path(spool, job.key),
                      dependencies=tuple((t, tuple(v)) for t, v in (dependencies or {}).items()),
                      hold=hold,
                      extra_args=(f"--uid={on_behalf_of[0]}", f"--gid={on_behalf_of[1]}")
                      if on_behalf_of is not None else (),
                      kill_on_invalid_dependency=config.scheduler.kill_on_invalid_dependency)
    return scheduler.submit(spec)


def submit_plan(plan: Plan, config: SiteConfig, store: StateStore | None,
                scheduler: Scheduler | None = None, *, owner_uid: int | None = None) -> Submission:
    """Submit every job of ``plan``; on any failure cancel what was submitted and re-raise.

    The stage-in jobs are submitted held and released only once the whole chain is in the
    queue, so a stage-in that fails at once can never race the submission of its dependents.
    With ``store=None`` (dry run) nothing is written and commands are only recorded.
    """
    scheduler = scheduler or get_scheduler(config, plan.scheduler)
    runner = get_runner()
    dry_run = runner.dry_run
    if not dry_run:
        # here, not at the top: `plan --dry-run` must not load sqlite3 (tests/test_cli_imports.py)
        from . import records

        spool = make_spool(config, plan.chain_id)
        for job in plan.jobs:
            write_script(spool, job.key, job.script, 0o700)
        records.record_plan(store, plan, os.getuid() if owner_uid is None else owner_uid,
                            {job.key: output_path(spool, job.key) for job in plan.jobs
                             if job.role != COMPUTE})
    ids: dict[str, str] = {}
    held: list[str] = []
    has_dependents = len(plan.jobs) > 1
    with runner.capture() as commands:
        try:
            _submit_all(plan, config, store, scheduler, ids, held, has_dependents, dry_run)
        except ScratchkeeperError as err:
            _roll_back(plan, store, scheduler, ids, dry_run, err)
            raise
    if not dry_run:
        records.set_chain_state(store, plan.chain_id, records.SUBMITTED)
    return Submission(plan, ids, [list(c.argv) for c in commands],
                      sum(c.seconds for c in commands))


def _submit_all(plan: Plan, config: SiteConfig, store, scheduler: Scheduler,
                ids: dict[str, str], held: list[str], has_dependents: bool, dry_run: bool) -> None:
    """Submit in order (stage-in, compute, stage-out), filling ``ids`` as it goes (the caller
    rolls back on error)."""
    for job in plan.jobs:
        deps: dict[str, list[str]] = {}
        for dep in job.depends_on:
            deps.setdefault(dep.type, []).append(ids[dep.key])
        hold = job.role == "stage-in" and has_dependents
        job_id = submit_chain_job(job, config, scheduler, chain_id=plan.chain_id,
                                  workdir=plan.workdir, dependencies=deps, hold=hold)
        ids[job.key] = job_id
        if hold:
            held.append(job_id)
        if not dry_run:
            from . import records

            records.set_job_submitted(store, plan.chain_id, job.key, job_id)
        log.info("chain %s: %s submitted as %s", plan.chain_id, job.key, job_id)
    if not dry_run:
        hold_back_jit(plan, ids, scheduler, store, config)
    scheduler.release(held)


def hold_back_jit(plan: Plan, ids: dict[str, str], scheduler: Scheduler, store: StateStore,
                  config: SiteConfig, owner=None) -> None:
    """Before the held stage-in jobs are released: give each ``-start jit`` one its begin time
    (:mod:`.jit`); its sources' sizes are asked with ``owner``'s rights, and, when a root
    service plans for ``owner``, only of the servers ``recovery.allowed_sources`` allows."""
    held_back = [job for job in plan.jobs if job.role == "stage-in" and job.start == "jit"]
    if not held_back or COMPUTE not in ids:
        return
    # here, not at the top: `plan --dry-run` must not load sqlite3 (tests/test_cli_imports.py)
    from . import jit, records
    from .predict import predict
    from .sources import SourceAllowList

    allowed = SourceAllowList(config.recovery, store) if owner is not None else None
    records.open_staging(store)
    for job in held_back:
        sources = [(f.source, f.recursive) for f in plan.staged_files if f.job_key == job.key]
        prediction = predict(sources, store, config, owner=owner, allowed=allowed)
        jit.hold_back(scheduler, store, config, chain_id=plan.chain_id, job_key=job.key,
                              job_id=ids[job.key], compute_id=ids[COMPUTE],
                              prediction=prediction)


def _roll_back(plan: Plan, store, scheduler: Scheduler, ids: dict[str, str], dry_run: bool,
               err: ScratchkeeperError) -> None:
    submitted = list(ids.values())
    note = ""
    if submitted:
        try:
            scheduler.cancel(submitted, reason=f"submitting chain {plan.chain_id} failed: {err}")
            note = f" (cancelled the jobs already submitted: {', '.join(submitted)})"
        except ScratchkeeperError as cancel_err:
            note = (f" (and cancelling the jobs already submitted, {', '.join(submitted)}, "
                    f"failed too: {cancel_err})")
            log.error("chain %s: could not cancel %s: %s", plan.chain_id, submitted, cancel_err)
    if not dry_run:
        from . import records

        records.set_jobs_state(store, plan.chain_id, ids.keys(), records.JOB_CANCELLED,
                               "submission of the chain failed")
        records.set_chain_state(store, plan.chain_id, records.SUBMIT_FAILED, str(err) + note)
    if isinstance(err, SchedulerError):
        err.args = (str(err) + note,)


def dry_run_commands(plan: Plan, config: SiteConfig) -> list[list[str]]:
    """The exact scheduler commands ``submit`` would run, with placeholders for job ids."""
    previous = set_runner(CommandRunner(dry_run=True))
    try:
        return submit_plan(plan, config, None).commands
    finally:
        set_runner(previous)
