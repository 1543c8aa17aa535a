"""From a parsed script to a plan: which jobs, in which queue, depending on what.

stage-in job(s) -> compute job (``afterok``) -> stage-out job (``afterany`` on the compute job by
default, and ``afterok`` on the stage-in jobs, so that a stage-in that failed cancels both).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import field

from ..config import SiteConfig, slurm_time_seconds
from ..errors import DirectiveError
from ..structs import record
from ..transfer.clients import ClientCommand, UnsupportedTransfer, client_command, destination_path
from .directives import STAGE_IN, STAGE_OUT, DataStep, ParsedScript, StageOptions
from .layout_directive import LayoutDecision, decide_layout
from .metadata import extract_transfers

COMPUTE = "compute"

#: the priorities each scheduler takes: Slurm --priority 0..2^32-2, PBS -p -1024..1023
PRIORITY_RANGE = {"slurm": (0, 4294967294), "pbs": (-1024, 1023)}


@record(frozen=True)
class Dependency:
    """This job starts after job ``key`` reached ``type`` (afterok / afterany)."""

    key: str
    type: str


@record(frozen=True)
class StepAction:
    """What a data job runs for one step: a client argv or a literal shell command."""

    line: int
    argv: tuple[str, ...] | None = None
    shell: str | None = None
    local_path: str | None = None
    recursive: bool = False
    describe: str = ""

    @property
    def prepare_dir(self) -> str:
        """The folder a stage-in must create before the client writes ``local_path``."""
        if self.recursive:
            return self.local_path.rstrip("/") or "/"
        return posixpath.dirname(self.local_path.rstrip("/")) or "/"


@record(frozen=True)
class StagedFile:
    """A file a stage-in job creates, with where it came from: the recovery metadata."""

    path: str
    source: str
    line: int
    job_key: str
    recursive: bool = False


@record(frozen=True)
class OffloadedFile:
    """A result a stage-out job sends away."""

    path: str
    destination: str
    line: int
    job_key: str


@record
class PlannedJob:
    """One job of the chain; ``script`` is filled in by the renderer."""

    key: str
    role: str
    queue: str
    name: str
    depends_on: list[Dependency]
    retries: int = 0
    retry_delay: float = 0.0
    #: a source not found is retried like a transient failure (the stage wrote ``-retry N``)
    retry_missing: bool = False
    #: seconds a missing source is tried again for before the retries count (``-wait-for-source``)
    source_wait: int = 0
    walltime: str | None = None
    qos: str | None = None
    account: str | None = None
    priority: int | None = None
    #: a stage-in: "jit" (held back until just before the compute job's expected start) or
    #: "now"; a stage-out: "close" (each result offloaded once closed) or "end"
    start: str | None = None
    #: a stage-in: the layout its transfers create files with (``#STAGEIN -layout``), or why
    #: the layout asked for is not applied (``layout_skipped``)
    layout: LayoutDecision | None = None
    layout_skipped: str | None = None
    actions: list[StepAction] = field(default_factory=list)
    script: str = ""


@record
class Plan:
    """The whole chain for one script."""

    chain_id: str
    script_path: str
    workdir: str
    scheduler: str
    jobs: list[PlannedJob]
    staged_files: list[StagedFile]
    offloaded_files: list[OffloadedFile]
    inputs: list[str]

    def job(self, key: str) -> PlannedJob:
        return next(j for j in self.jobs if j.key == key)

    def jobs_with_role(self, role: str) -> list[PlannedJob]:
        return [j for j in self.jobs if j.role == role]


#: longest job name derived from a script's name: Slurm takes any length, PBS Pro 236
#: characters; the data jobs add ``.stage-out-256`` and keep well inside both
JOB_NAME_MAX = 64
_NOT_IN_JOB_NAME = re.compile(r"[^A-Za-z0-9._+-]+")


def job_name_of(script_path: str) -> str:
    """The jobs' name when the script names none (``#SBATCH --job-name``, ``#PBS -N``): its
    file name, with each run of characters a job name cannot hold (a blank, brackets, a
    quote, anything not ASCII) made one ``_``, starting with a letter or digit and at most
    JOB_NAME_MAX characters: ``my job.sh`` is ``my_job.sh``, ``run(2).sh`` ``run_2.sh``.
    These characters (letters, digits, ``. _ + -``) are what Slurm's ``--job-name``, PBS's
    ``-N`` and the templates' ``header`` filter all take."""
    return safe_job_name(posixpath.basename(script_path))


def safe_job_name(base: str) -> str:
    """``base`` (a script's file name, or a job name a script's header gives) made a name every
    scheduler takes, by :func:`job_name_of`'s rule; ``job`` when nothing of it is left."""

    def replace(found: re.Match) -> str:  # nothing beside a dot or at an end: run(2).sh
        start, end = found.span()
        edge = start == 0 or end == len(base) or base[start - 1] == "." or base[end:end + 1] == "."
        return "" if edge else "_"

    name = _NOT_IN_JOB_NAME.sub(replace, base)
    name = re.sub(r"^[^A-Za-z0-9]+", "", name)[:JOB_NAME_MAX].rstrip("._+-")
    return name or "job"


def build_plan(parsed: ParsedScript, config: SiteConfig, *, chain_id: str, workdir: str,
               scheduler: str | None = None) -> Plan:
    """Decide the jobs of ``parsed``; raises DirectiveError for what no client can do."""
    sched = config.scheduler
    kind = scheduler or sched.kind
    base_name = parsed.compute_job.get("name") or job_name_of(parsed.path)
    jobs: list[PlannedJob] = []
    staged: list[StagedFile] = []
    offloaded: list[OffloadedFile] = []

    _check_priorities(parsed, kind)
    _check_source_wait(parsed, config)
    # once per plan: a -darshan log is read once, and -parallel stage-ins share the decision
    stage_in = parsed.options[STAGE_IN]
    layout, layout_skipped = decide_layout(stage_in.layout, stage_in.lines, parsed.compute_job,
                                           config, parsed.path)
    in_keys = _data_jobs(parsed, STAGE_IN, config, base_name, chain_id, workdir, jobs, staged,
                         offloaded, kind=kind)
    for job in jobs:  # only stage-in jobs so far
        job.layout, job.layout_skipped = layout, layout_skipped
    compute = PlannedJob(key=COMPUTE, role=COMPUTE, queue=sched.batch_queue,
                         name=parsed.compute_job.get("name") or base_name,
                         depends_on=[Dependency(k, "afterok") for k in in_keys])
    jobs.append(compute)
    out_type = parsed.options[STAGE_OUT].dependency or sched.stage_out_dependency
    out_deps = [Dependency(COMPUTE, out_type)] + [Dependency(k, "afterok") for k in in_keys]
    _data_jobs(parsed, STAGE_OUT, config, base_name, chain_id, workdir, jobs, staged, offloaded,
               depends=out_deps, kind=kind)
    inputs = sorted({f.path for f in staged} | set(parsed.options[STAGE_IN].inputs))
    return Plan(chain_id=chain_id, script_path=parsed.path, workdir=workdir, scheduler=kind,
                jobs=jobs, staged_files=staged, offloaded_files=offloaded, inputs=inputs)


def _data_jobs(parsed: ParsedScript, stage: str, config: SiteConfig, base_name: str, chain_id: str,
               workdir: str, jobs: list[PlannedJob], staged: list[StagedFile],
               offloaded: list[OffloadedFile], depends: list[Dependency] | None = None, *,
               kind: str) -> list[str]:
    steps = parsed.stage_steps(stage)
    if not steps:
        return []
    opts = parsed.options[stage]
    groups = [[s] for s in steps] if opts.parallel else [steps]
    keys = []
    for number, group in enumerate(groups, 1):
        key = stage if len(groups) == 1 else f"{stage}-{number}"
        job = _data_job(key, stage, opts, parsed, config, base_name, chain_id, depends or [],
                        kind)
        for step in group:
            job.actions.append(_action(step, config, parsed.path))
            _record(step, key, workdir, staged, offloaded)
        jobs.append(job)
        keys.append(key)
    return keys


def _check_priorities(parsed: ParsedScript, kind: str) -> None:
    """A stage's -priority must be one the scheduler takes."""
    low, high = PRIORITY_RANGE[kind]
    for stage, opts in parsed.options.items():
        if opts.priority is not None and not low <= opts.priority <= high:
            directive = "#STAGEIN" if stage == STAGE_IN else "#STAGEOUT"
            raise DirectiveError(f"{directive}: -priority {opts.priority} is outside {kind}'s "
                                 f"range {low}..{high}", path=parsed.path,
                                 line=opts.lines.get("priority"))


def _check_source_wait(parsed: ParsedScript, config: SiteConfig) -> None:
    """A -wait-for-source within the site's bound and shorter than the data job's time limit
    (a job killed by its limit while waiting would not say why)."""
    opts = parsed.options[STAGE_IN]
    wait = opts.wait_for_source
    if wait is None:
        return
    line = opts.lines.get("wait-for-source")
    bound = config.staging.max_source_wait
    if wait > bound:
        allowed = "this site does not allow waiting" if bound == 0 else \
            f"this site allows at most {bound:g} s (staging.max_source_wait)"
        raise DirectiveError(f"#STAGEIN: -wait-for-source {wait} s is too long: {allowed}",
                             path=parsed.path, line=line)
    walltime = opts.walltime or config.scheduler.data_walltime
    limit = slurm_time_seconds(walltime)
    if limit is not None and wait >= limit:
        raise DirectiveError(f"#STAGEIN: -wait-for-source {wait} s does not fit in the data "
                             f"job's time limit {walltime} ({limit} s); raise -walltime",
                             path=parsed.path, line=line)


def _inherited_priority(value: str | None, kind: str) -> int | None:
    """The compute job's priority, if the data jobs can take it on this scheduler."""
    low, high = PRIORITY_RANGE[kind]
    if value is None or not re.fullmatch(r"-?[0-9]{1,10}", value):
        return None
    return int(value) if low <= int(value) <= high else None


def _data_job(key: str, stage: str, opts: StageOptions, parsed: ParsedScript, config: SiteConfig,
              base_name: str, chain_id: str, depends: list[Dependency], kind: str) -> PlannedJob:
    inherited = parsed.compute_job
    retries = opts.retries if opts.retries is not None else config.retry.attempts - 1
    priority = opts.priority
    if priority is None:
        priority = _inherited_priority(inherited.get("priority"), kind)
    start = (opts.start or config.staging.start) if stage == STAGE_IN else (opts.when or "end")
    return PlannedJob(
        key=key, role=stage, queue=config.scheduler.data_queue,
        name=opts.job_name or f"{base_name}.{key}",
        depends_on=list(depends), retries=retries, retry_missing=opts.retries is not None,
        source_wait=opts.wait_for_source or 0,
        retry_delay=opts.retry_delay if opts.retry_delay is not None else config.retry.delay,
        walltime=opts.walltime or config.scheduler.data_walltime,
        qos=opts.qos or inherited.get("qos"), account=opts.account or inherited.get("account"),
        priority=priority, start=start)


def _action(step: DataStep, config: SiteConfig, path: str) -> StepAction:
    if step.command is not None:
        return StepAction(line=step.line, shell=step.command, describe=step.command)
    transfer = step.transfer
    try:
        command: ClientCommand = client_command(transfer.source, transfer.destination,
                                                recursive=transfer.recursive, config=config.transfer)
    except UnsupportedTransfer as err:
        directive = "#STAGEIN" if step.stage == STAGE_IN else "#STAGEOUT"
        raise DirectiveError(f"{directive}: {err}", path=path, line=step.line) from err
    return StepAction(line=step.line, argv=command.argv, local_path=command.local_path,
                      recursive=transfer.recursive,
                      describe=f"{transfer.source.text} -> {transfer.destination.text}")


def _record(step: DataStep, key: str, workdir: str, staged: list[StagedFile],
            offloaded: list[OffloadedFile]) -> None:
    if step.transfer is not None:
        t = step.transfer
        if step.stage == STAGE_IN:
            staged.append(StagedFile(destination_path(t.source, t.destination), t.source.uri,
                                     step.line, key, t.recursive))
        else:
            offloaded.append(OffloadedFile(t.source.path, t.destination.uri, step.line, key))
        return
    for found in extract_transfers(step.command, cwd=workdir, stage_in=step.stage == STAGE_IN):
        if step.stage == STAGE_IN:
            staged.append(StagedFile(found.destination.rstrip("/") or "/", found.source, step.line,
                                     key, found.destination.endswith("/")))
        else:
            offloaded.append(OffloadedFile(found.source, found.destination, step.line, key))
