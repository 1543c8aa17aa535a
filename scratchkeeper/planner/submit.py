"""Plan a script and submit its chain atomically: all jobs or none."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..structs import record
from ..config import SiteConfig
from ..errors import DirectiveError, InputError, ScratchkeeperError, SchedulerError, TemplateError
from ..inputfiles import read_text
from ..runner import CommandRunner, get_runner, set_runner
from ..schedulers import Scheduler, SubmitSpec, get_scheduler
from .directives import ParsedScript, confine, parse_script
from .plan import COMPUTE, Plan, build_plan
from .render import render_plan

if TYPE_CHECKING:
    from ..state import StateStore

log = logging.getLogger(__name__)

MAX_SCRIPT_BYTES = 4 << 20


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


def spool_dir(config: SiteConfig, chain_id: str) -> Path:
    return Path(config.state.database).resolve().parent / "spool" / chain_id


def _submit_specs(plan: Plan, spool: Path):
    """(job, script path, log path) in submission order: stage-in, compute, stage-out."""
    for job in plan.jobs:
        script = spool / f"{job.key}.sh"
        log_path = None if job.role == COMPUTE else str(spool / f"{job.key}.%j.out")
        yield job, script, log_path


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
    spool = spool_dir(config, plan.chain_id)
    entries = list(_submit_specs(plan, spool))
    if not dry_run:
        from . import records

        spool.mkdir(parents=True, exist_ok=True)
        for job, script, _ in entries:
            script.write_text(job.script)
            script.chmod(0o700)
        records.record_plan(store, plan, os.getuid() if owner_uid is None else owner_uid,
                            {job.key: log for job, _, log in entries if log})
    ids: dict[str, str] = {}
    held: list[str] = []
    has_dependents = len(plan.jobs) > 1
    with runner.capture() as commands:
        try:
            _submit_all(plan, config, store, scheduler, entries, ids, held, has_dependents, dry_run)
        except ScratchkeeperError as err:
            _roll_back(plan, store, scheduler, ids, dry_run, err)
            raise
    if not dry_run:
        records.set_chain_state(store, plan.chain_id, records.SUBMITTED)
    return Submission(plan, ids, [list(c.argv) for c in commands],
                      sum(c.seconds for c in commands))


def _submit_all(plan: Plan, config: SiteConfig, store, scheduler: Scheduler, entries,
                ids: dict[str, str], held: list[str], has_dependents: bool, dry_run: bool) -> None:
    """Submit in order, filling ``ids`` as it goes (the caller rolls back on error)."""
    for job, script, log_path in entries:
        deps: dict[str, list[str]] = {}
        for dep in job.depends_on:
            deps.setdefault(dep.type, []).append(ids[dep.key])
        hold = job.role == "stage-in" and has_dependents
        spec = SubmitSpec(script_path=str(script), queue=job.queue, job_name=job.name,
                          workdir=plan.workdir, output_path=log_path,
                          dependencies=tuple((t, tuple(v)) for t, v in deps.items()), hold=hold,
                          kill_on_invalid_dependency=config.scheduler.kill_on_invalid_dependency)
        job_id = scheduler.submit(spec)
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
    (:mod:`scratchkeeper.staging.jit`); its sources' sizes are asked with ``owner``'s rights."""
    jit = [job for job in plan.jobs if job.role == "stage-in" and job.start == "jit"]
    if not jit or COMPUTE not in ids:
        return
    from ..staging import jit as jit_staging, records as staging_records
    from ..staging.predict import predict

    staging_records.open_staging(store)
    for job in jit:
        sources = [(f.source, f.recursive) for f in plan.staged_files if f.job_key == job.key]
        prediction = predict(sources, store, config, owner=owner)
        jit_staging.hold_back(scheduler, store, config, chain_id=plan.chain_id, job_key=job.key,
                              job_id=ids[job.key], compute_id=ids[COMPUTE],
                              prediction=prediction)


def _roll_back(plan: Plan, store, scheduler: Scheduler, ids: dict[str, str], dry_run: bool,
               err: ScratchkeeperError) -> None:
    submitted = list(ids.values())
    note = ""
    if submitted:
        try:
            scheduler.cancel(submitted)
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
