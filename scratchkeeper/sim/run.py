"""One replay configuration end to end: trace → workload → outages → schedule → metrics rows.

Everything a run needs is in :class:`ReplayConfig` (plain values, so a sweep can write it to a
CSV row and a Slurm array task can rebuild it); :func:`run_replay` returns one
:class:`ReplayRow` per replication variant plus the per-job wait times that the cross-run
filtering of :mod:`scratchkeeper.sim.metrics` needs.
"""

from __future__ import annotations

import dataclasses
import math
import os
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial

from ..errors import InputError, TraceError
from . import accounting, trace_columns, traces
from .metrics import wait_stats
from .outages import extrapolated_outages, failure_stats, replayed_outages
from .replication import STRATEGIES, ReplicationParams, replay_replication
from .scheduler import POLICIES, RecoveryParams, Schedule, default_core, recorded_schedule, simulate
from .workload import TraceJob, Workload, WorkloadParams, build_workload, from_lanl, from_site, from_swf

TRACE_FORMATS = ("auto", "swf", "sacct", "pbs", "lanl-jobs", "site-csv")
FAILURE_MODES = ("extrapolated", "replayed")
#: ``ideal`` is the run without any failure (the thesis's reference curve).
RUN_POLICIES = ("ideal",) + POLICIES
SCHEDULES = ("model", "recorded")


@dataclass(frozen=True)
class ReplayConfig:
    """Every choice of one replay; defaults follow the thesis's §4.7 where it gives one."""

    trace: str
    trace_format: str = "auto"
    limit: int = 0                      # first N jobs of the trace (0: all)
    start_day: float = 0.0              # only jobs submitted from this day of the trace ...
    days: float = 0.0                   # ... for this many days (0: to the end)
    strict: bool = False                # corrupt trace lines: fail (True) or skip and count
    failures: str = ""                  # LANL failure CSV; empty: no failures
    failure_mode: str = "extrapolated"
    failure_system: int = 20
    policy: str = "none"                # without failures, every policy is "ideal"
    schedule: str = "model"             # model: FCFS/EASY replay; recorded: the trace's dispatches
    backfill: bool = True
    procs_per_node: int = 1
    system_nodes: int = 0               # 0: from the trace header (MaxProcs / procs per node)
    load_factor: float = 1.0
    stripe_count: int = 4
    stripe_size: int = 1 << 20
    ost_count: int = 64
    patch_bandwidth: float = 100e6
    patch_latency: float = 30.0
    seed: int = 1
    strategy: str = ""                  # replication strategy; empty: no replication analysis
    alpha: float = 0.5
    threshold: float = 0.1
    copy_bandwidth: float = 250e6
    scratch_bytes: float = 0.0          # 0: aggregate memory / 0.078 (Jaguar's ratio, thesis table 4.2)
    node_memory_bytes: float = 12 * 1024 ** 3
    input_model: str = "requested-memory"   # or peak-memory (calibrated on the thesis's §4.5.1)

    def __post_init__(self):
        if not self.failures and self.policy in POLICIES:
            # Nothing fails: every recovery policy is the run without failure, and says so.
            object.__setattr__(self, "policy", "ideal")
        if self.trace_format not in TRACE_FORMATS:
            raise InputError(f"unknown trace format {self.trace_format!r}; choose one of "
                             f"{', '.join(TRACE_FORMATS)}")
        if self.failure_mode not in FAILURE_MODES:
            raise InputError(f"unknown failure mode {self.failure_mode!r}; choose one of "
                             f"{', '.join(FAILURE_MODES)}")
        if self.policy not in RUN_POLICIES:
            raise InputError(f"unknown policy {self.policy!r}; choose one of "
                             f"{', '.join(RUN_POLICIES)}")
        if self.strategy and self.strategy not in STRATEGIES:
            raise InputError(f"unknown replication strategy {self.strategy!r}; choose one of "
                             f"{', '.join(STRATEGIES)}")
        if self.schedule not in SCHEDULES:
            raise InputError(f"unknown schedule {self.schedule!r}; choose one of "
                             f"{', '.join(SCHEDULES)}")
        if self.schedule == "recorded" and (self.policy != "ideal" or self.load_factor != 1):
            raise InputError("the recorded schedule has no failure and no load change: use "
                             "policy 'ideal' and load factor 1 with it")
        if self.limit < 0:
            raise InputError(f"limit must be >= 0, got {self.limit}")
        self.workload_params()      # validates stripe count, load factor, ...
        self.recovery_params()
        if self.strategy:
            # Fail before the schedule is computed, not after.
            ReplicationParams(self.strategy, self.alpha, self.threshold, self.copy_bandwidth,
                              self.scratch_bytes or 1.0)

    @classmethod
    def from_mapping(cls, values: dict, *, where: str = "") -> ReplayConfig:
        """Build from a dict (a TOML table or a CSV row), converting and naming unknown keys."""
        known = {f.name: f for f in dataclasses.fields(cls)}
        kwargs = {}
        for key, value in values.items():
            if key not in known:
                raise InputError(f"unknown replay setting {key!r}", path=where or None)
            kwargs[key] = _convert(known[key], value, where)
        if "trace" not in kwargs:
            raise InputError("replay setting 'trace' is required", path=where or None)
        return cls(**kwargs)

    def workload_params(self, machine_nodes: int = 0) -> WorkloadParams:
        """How the trace becomes jobs; ``machine_nodes`` (the trace's) sizes the aggregate memory."""
        return WorkloadParams(procs_per_node=self.procs_per_node,
                              system_nodes=self.system_nodes or None,
                              load_factor=self.load_factor, stripe_count=self.stripe_count,
                              stripe_size=self.stripe_size, ost_count=self.ost_count,
                              seed=self.seed, input_model=self.input_model,
                              node_memory_bytes=self.node_memory_bytes,
                              machine_nodes=machine_nodes, start_day=self.start_day,
                              days=self.days)

    def recovery_params(self) -> RecoveryParams:
        policy = "none" if self.policy == "ideal" else self.policy
        return RecoveryParams(policy, self.patch_bandwidth, self.patch_latency)

    def schedule_key(self) -> tuple:
        """Settings that change the schedule; runs equal in these share one schedule."""
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self)
                     if f.name not in _REPLICATION_ONLY)

    def workload_key(self) -> tuple:
        """Settings that change which jobs exist: runs equal in these can be compared job by job."""
        return (self.trace, self.trace_format, self.limit, self.strict, self.procs_per_node,
                self.system_nodes, self.load_factor, self.start_day, self.days)


# node_memory_bytes is not among them: it sizes the peak-memory inputs.
_REPLICATION_ONLY = {"strategy", "alpha", "threshold", "copy_bandwidth", "scratch_bytes"}
_PATCHING_POLICIES = ("pre-execution", "on-the-fly")


def applicable_settings(values: dict) -> dict:
    """A result row's settings (a :class:`ReplayConfig` as a dict, metrics beside it) with
    those that did not act on the run set to None, so a CSV shows them blank: the replication
    settings without a strategy (T without ``shortcut``), the failure mode and system without
    a failure trace, the patch rate and latency unless the policy patches, backfilling on the
    recorded schedule, the node memory unless it sizes scratch or peak-memory inputs."""
    out = dict(values)
    strategy = out.get("strategy") or ""
    blank = set()
    if not strategy:
        blank |= {"alpha", "threshold", "copy_bandwidth", "scratch_bytes"}
    elif strategy != "shortcut":
        blank.add("threshold")
    if not out.get("failures"):
        blank |= {"failure_mode", "failure_system"}
    if out.get("policy") not in _PATCHING_POLICIES or not out.get("failures"):
        blank |= {"patch_bandwidth", "patch_latency"}
    if out.get("schedule") == "recorded":
        blank.add("backfill")
    if not strategy and out.get("input_model") != "peak-memory":
        blank.add("node_memory_bytes")
    for key in blank & out.keys():
        out[key] = None
    return out


def _convert(spec: dataclasses.Field, value, where: str):
    kind = spec.type if isinstance(spec.type, str) else spec.type.__name__
    try:
        if kind == "bool":
            if isinstance(value, str):
                if value.lower() in ("1", "true", "yes"):
                    return True
                if value.lower() in ("0", "false", "no", ""):
                    return False
                raise ValueError(value)
            return bool(value)
        if kind == "int":
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            return int(value)
        if kind == "float":
            return float(value)     # accepts "inf"
        return str(value)
    except (TypeError, ValueError):
        raise InputError(f"replay setting {spec.name!r} expects {kind}, got {value!r}",
                         path=where or None) from None


@dataclass
class ReplayRow:
    """The metrics of one configuration (one CSV row of a sweep)."""

    config: ReplayConfig
    values: dict = field(default_factory=dict)


@dataclass
class ReplayOutcome:
    rows: list[ReplayRow]
    waits: array                # final dispatch - submit, per job, in workload order
    affected: bytearray         # 1 where the job was hit by a failure
    skipped: list[str]
    jobs: list = field(default_factory=list)    # the replayed SimJobs, in workload order
    #: per replication variant: (its config, 1 per job at risk, in workload order)
    at_risk: list = field(default_factory=list)


def format_by_name(path: str) -> str | None:
    """The format a trace's file name suggests (``.swf``, ``.csv``), if any."""
    name = os.path.basename(path).lower()
    for suffix in (".gz", ".xz", ".bz2"):
        name = name.removesuffix(suffix)
    return {".swf": "swf", ".csv": "site-csv"}.get(os.path.splitext(name)[1])


def detect_format(path: str) -> tuple[str, str]:
    """A job trace's format from its content (the Parallel Workloads Archive's files often
    have no extension), else from its name; and how it was told, for messages."""
    kind, why = accounting.sniff_format(path)
    if kind is not None:
        return kind, f"detected from its content: {why}"
    by_name = format_by_name(path)
    if by_name is not None:
        return by_name, f"from its name ({why})"
    raise TraceError(f"cannot tell the trace's format: {why}; give --format "
                     f"({', '.join(TRACE_FORMATS[1:])})", path=path)


def _from_accounting(records: list[accounting.AccountingJob]) -> list[TraceJob]:
    """Accounting records as TraceJobs: processors, the limit, and the recorded wait."""
    return [TraceJob(r.job_id, r.submit_time, r.run_time, r.procs, r.requested_time,
                     wait_time=r.wait_time) for r in records]


def _read_trace(config: ReplayConfig, kind: str, progress: Callable[[int, int], None] | None):
    """The trace's jobs as TraceJobs, header and machine nodes (SWF only), and the read report."""
    first = config.limit or None
    if kind == "swf":
        trace = traces.read_swf(config.trace, strict=config.strict, limit=first,
                                progress=progress)
        header_nodes, nodes = _swf_machine(trace.header, config.procs_per_node)
        return from_swf(trace.jobs), header_nodes, nodes, trace.report
    if kind in ("sacct", "pbs"):
        reader = accounting.read_sacct if kind == "sacct" else accounting.read_pbs_accounting
        records, report = reader(config.trace, strict=config.strict, progress=progress)
        return _from_accounting(records[:first]), None, None, report
    if kind == "lanl-jobs":
        lanl, report = traces.read_lanl_jobs(config.trace, strict=config.strict,
                                             progress=progress)
        return from_lanl(lanl[:first]), None, None, report
    site, report = traces.read_site_csv(config.trace, strict=config.strict, progress=progress)
    return from_site(site[:first]), None, None, report


def _swf_machine(header: traces.SwfHeader, procs_per_node: int) -> tuple[int | None, int | None]:
    """The system in scheduling nodes an SWF header declares (MaxProcs / procs per node, or
    MaxNodes when a node has several processors), and the machine's nodes (MaxNodes)."""
    procs, nodes = header.max_procs, header.max_nodes
    if procs:
        return -(-procs // procs_per_node), nodes
    if nodes and procs_per_node > 1:
        return nodes, nodes
    return None, nodes


#: the last trace read without progress: a sweep worker's tasks read the same file (issue 34)
_last_read: dict = {}


def _read_trace_once(config: ReplayConfig, kind: str, progress: Callable[[int, int], None] | None):
    """:func:`_read_trace`, the last result kept while the file (path, size, mtime) is the same
    (the policies of one replay, a sweep worker's tasks); a kept one is reported read at once."""
    try:
        stat = os.stat(config.trace)
    except OSError:
        return _read_trace(config, kind, progress)
    key = (os.path.abspath(config.trace), stat.st_size, stat.st_mtime_ns, kind, config.strict,
           config.limit, config.procs_per_node)
    if key in _last_read:
        if progress is not None:
            progress(stat.st_size, stat.st_size)
    else:
        _last_read.clear()
        _last_read[key] = _read_trace(config, kind, progress)
    return _last_read[key]


def load_trace(config: ReplayConfig, progress: Callable[[int, int], None] | None = None):
    """The trace's jobs, the system size in scheduling nodes, the machine's nodes, what was skipped.

    ``progress(bytes read, file size)`` as the file is read. A trace of which no job is left
    is an InputError naming the file, the format it was read as and what was skipped."""
    traces.require_content(config.trace)
    kind, how = _trace_kind(config)
    jobs, header_nodes, machine_nodes, report = _read_trace_once(config, kind, progress)
    skipped = list(traces.iter_records(report))
    if not any(job.run_time >= 0 and job.procs > 0 for job in jobs):
        raise InputError(no_job_left(kind, how, report, len(jobs)), path=config.trace)
    if kind in accounting.MACHINE_FILES and not config.system_nodes:
        machine = site_machine(config.trace, kind)
        header_nodes = -(-machine.processors // config.procs_per_node)
        machine_nodes = machine.nodes
        skipped.append(f"{config.trace}: a machine of {machine.nodes:,} node(s), "
                       f"{machine.processors:,} processor(s), as {machine.source} says")
    return jobs, header_nodes, machine_nodes, skipped


def site_machine(trace: str, kind: str) -> accounting.MachineSize:
    """The machine a site's history ran on, from its configuration saved beside it; without
    it an InputError saying how to give it. A history records jobs, not the machine: sized by
    its largest job, a replay of a busy machine runs on too small a one (a recorded schedule
    past 100 % utilisation)."""
    machine = accounting.read_machine_size(trace, kind)
    if machine is None:
        suffix, command = accounting.MACHINE_FILES[kind]
        raise InputError(f"a {kind} history does not say how large the machine is: give "
                         f"--system-nodes N (with --procs-per-node), or save the output of "
                         f"`{command}` beside it as {os.path.basename(trace)}{suffix}",
                         path=trace)
    return machine


def no_job_left(kind: str, how: str, report: traces.ReadReport, records: int) -> str:
    """Why a trace gave the scheduler model no job: its format and every count of skipped lines."""
    reasons = ", ".join(f"{count:,} {reason}" for reason, count in sorted(report.skipped.items()))
    kept = (f"{records:,} record(s) read, none with a known run time and processor count"
            if records else "no job record read")
    return (f"no job left to replay: read as {kind} ({how}); {kept}; skipped "
            f"{report.skipped_total:,} line(s){' (' + reasons + ')' if reasons else ''}")


#: the last trace read by the C parser, as :data:`_last_read`, and (key ``"workload"``) the
#: last workload built from it with its (params, header nodes)
_last_columns: dict = {}


def _trace_kind(config: ReplayConfig) -> tuple[str, str]:
    if config.trace_format == "auto":
        return detect_format(config.trace)
    return config.trace_format, "as --format says"


def _columns_once(config: ReplayConfig, progress: Callable[[int, int], None] | None):
    """The SWF trace read into columns by the C parser, kept while the file is the same (the
    policies of one replay, a sweep worker's tasks); None when the C parser does not read it."""
    stat = os.stat(config.trace)
    key = (os.path.abspath(config.trace), stat.st_size, stat.st_mtime_ns, config.limit,
           config.procs_per_node)
    if key in _last_columns:
        if progress is not None:
            progress(stat.st_size, stat.st_size)
        return _last_columns[key]
    # another file: neither its columns nor the workload built from them are kept
    swf = trace_columns.read_swf_columns(config.trace, limit=config.limit or None,
                                         progress=progress)
    if swf is None:
        return None
    header_nodes, nodes = _swf_machine(swf.header, config.procs_per_node)
    columns = trace_columns.swf_trace_columns(swf)
    # the fields no job uses are not kept (a sweep worker holds what is kept between tasks)
    swf.columns = {"job_id": swf.columns["job_id"]}
    _last_columns.clear()
    _last_columns[key] = (columns, header_nodes, nodes, swf)
    return _last_columns[key]


def _native_workload(config: ReplayConfig, phase) -> tuple[Workload, int | None, list[str]] | None:
    """The workload read and built by the C path (an SWF trace), with the machine's nodes and
    what was skipped; None when the reference path must do it."""
    traces.require_content(config.trace)
    kind, how = _trace_kind(config)
    if kind != "swf":
        return None
    read = _columns_once(config, phase("reading trace"))
    if read is None:
        return None
    columns, header_nodes, machine_nodes, swf = read
    if not any(r >= 0 and p > 0 for r, p in zip(columns.run_time, columns.procs)):
        raise InputError(no_job_left(kind, how, swf.report, len(swf)), path=config.trace)
    params = config.workload_params(machine_nodes or 0)
    built = _last_columns.get("workload")
    progress = phase("building workload")
    if built is not None and built[0] == (params, header_nodes):
        kept = built[1]
        if progress is not None:
            progress(len(kept.workload.jobs), len(kept.workload.jobs))
    else:
        try:
            workload = trace_columns.build_workload_columns(columns, params, header_nodes,
                                                            progress=progress)
        except InputError as err:
            raise InputError(f"{err.message} ({len(swf):,} job(s) read from the trace)",
                             path=config.trace) from err
        if workload is None:
            return None
        kept = trace_columns.KeptWorkload.keep(workload)
        _last_columns["workload"] = ((params, header_nodes), kept)
    return kept.fresh_copy(), machine_nodes, list(traces.iter_records(swf.report))


@lru_cache(maxsize=4)
def _failure_trace(path: str, system: int, strict: bool) -> traces.FailureTrace:
    trace = traces.read_lanl_failures(path, strict=strict, system=system)
    if not trace.records:
        raise InputError(f"no failure record of system {system}", path=path)
    return trace


def _failure_records(path: str, system: int, strict: bool):
    return _failure_trace(path, system, strict).records


def _reference_workload(config: ReplayConfig, phase) -> tuple[Workload, int | None, list[str]]:
    """The workload read and built in Python (the reference, and every format but SWF)."""
    trace_jobs, header_nodes, machine_nodes, skipped = load_trace(config, phase("reading trace"))
    try:
        workload = build_workload(trace_jobs, config.workload_params(machine_nodes or 0),
                                  header_nodes, progress=phase("building workload"))
    except InputError as err:
        if err.path is not None:
            raise
        # No job left after the workload's own choices (a period, the system size): name the
        # trace, and how many jobs it gave.
        raise InputError(f"{err.message} ({len(trace_jobs):,} job(s) read from the trace)",
                         path=config.trace) from err
    return workload, machine_nodes, skipped


@dataclass
class ReplayedSchedule:
    """A configuration's jobs (with their replayed start and end), the outages and the rest."""

    workload: Workload
    schedule: Schedule
    outages: list
    machine_nodes: int
    node_mtbf_days: float
    skipped: list[str]


def replay_schedule(config: ReplayConfig,
                    progress: Callable[[str, int, int], None] | None = None) -> ReplayedSchedule:
    """Read the trace and the failures of ``config`` and replay its schedule."""

    def phase(name: str) -> Callable[[int, int], None] | None:
        return None if progress is None else partial(progress, name)

    built = _native_workload(config, phase) if default_core() == "native" else None
    if built is not None:
        workload, machine_nodes, skipped = built
    else:
        workload, machine_nodes, skipped = _reference_workload(config, phase)
    # The machine's nodes (SWF MaxNodes), else the modelled system's: the aggregate memory.
    machine_nodes = machine_nodes or workload.system_nodes
    for reason, count in sorted(workload.dropped.items()):
        skipped.append(f"{config.trace}: left out {count} job(s): {reason}")
    jobs = workload.jobs
    horizon = jobs[-1].submit + max(j.run_time for j in jobs) * 4 + 86400
    outages = []
    node_mtbf_days = math.nan
    if config.failures and config.policy != "ideal":
        if progress is not None:
            progress("reading failures", 0, 1)
        failure_trace = _failure_trace(config.failures, config.failure_system, config.strict)
        if progress is not None:
            progress("reading failures", 1, 1)
        records = failure_trace.records
        stats = failure_stats(records)
        skipped += [*traces.iter_records(failure_trace.report), *stats.warnings(config.failures)]
        node_mtbf_days = stats.node_mtbf_days
        if config.failure_mode == "replayed":
            outages = replayed_outages(records, config.ost_count, horizon)
        else:
            outages = extrapolated_outages(stats, config.ost_count, horizon, seed=config.seed)
    if config.schedule == "recorded":
        schedule = recorded_schedule(jobs, workload.system_nodes)
    else:
        schedule = simulate(jobs, workload.system_nodes, backfill=config.backfill,
                            outages=outages, recovery=config.recovery_params(),
                            progress=phase("scheduling"))
    return ReplayedSchedule(workload, schedule, outages, machine_nodes, node_mtbf_days, skipped)


def run_replay(config: ReplayConfig, replications: Sequence[ReplayConfig] = (),
               progress: Callable[[str, int, int], None] | None = None,
               on_row: Callable[[ReplayRow], None] | None = None) -> ReplayOutcome:
    """Replay ``config`` once; each of ``replications`` (same schedule) adds a replication row.

    ``progress(phase, done, total)`` as each phase goes: ``reading trace`` (bytes of the file),
    ``reading failures``, ``scheduling`` (jobs ended), ``replication ...`` (queue events).
    ``on_row(row)`` as each row (each run) is finished, before the next one is computed."""

    def phase(name: str) -> Callable[[int, int], None] | None:
        return None if progress is None else partial(progress, name)

    replayed = replay_schedule(config, progress)
    workload, schedule, machine_nodes = replayed.workload, replayed.schedule, replayed.machine_nodes
    node_mtbf_days, skipped, jobs = replayed.node_mtbf_days, replayed.skipped, workload.jobs
    waits = array("d", (j.start - j.submit for j in jobs))
    affected = bytearray(1 if j.affected else 0 for j in jobs)
    n = len(jobs)
    span = schedule.last_end - schedule.first_submit
    hit = [w for w, a in zip(waits, affected) if a]
    every, affected_only = wait_stats(waits), wait_stats(hit)
    base = {
        "jobs": n,
        "model_system_nodes": workload.system_nodes,
        "ost_failures": schedule.failures,
        "node_mtbf_days": node_mtbf_days,
        "utilisation_pct": 100.0 * schedule.utilisation,
        "wait_mean": every.mean,
        "wait_sd": every.sd,
        "affected_jobs": len(hit),
        "affected_pct": 100.0 * len(hit) / n if n else 0.0,
        "affected_wait_mean": affected_only.mean,
        "affected_wait_sd": affected_only.sd,
        "kills": sum(j.kills for j in jobs),
        "makespan_s": span,
        # Little's law: the time-average number of queued jobs is their summed wait over the span.
        "queue_length_mean": math.fsum(waits) / span if span > 0 else 0.0,
        "input_mean_bytes": math.fsum(j.input_bytes for j in jobs) / n,
    }
    if schedule.utilisation > 1.0:
        skipped.append(f"{config.trace}: warning: utilisation {100.0 * schedule.utilisation:.2f} "
                       f"% passes 100 %: the jobs need more than the {workload.system_nodes:,} "
                       "node(s) modelled (give the machine's size: --system-nodes)")
    rows = []
    at_risk = []
    variants = list(replications) or [config]
    for variant in variants:
        values = dict(base)
        if variant.strategy:
            # The thesis's table 4.2: memory is under 8 % of scratch on the top systems; without a
            # given scratch size, take the aggregate memory as 7.8 % of it (Jaguar's ratio).
            scratch = variant.scratch_bytes or machine_nodes * variant.node_memory_bytes / 0.078
            result = replay_replication(schedule, ReplicationParams(
                variant.strategy, variant.alpha, variant.threshold, variant.copy_bandwidth,
                scratch), progress=phase(f"replication {variant.strategy} "
                                         f"alpha={variant.alpha:g}"))
            values.update(model_scratch_bytes=scratch, at_risk_pct=result.at_risk_pct,
                          space_mean_pct=result.space_mean_pct,
                          space_max_pct=result.space_max_pct,
                          replicated_jobs=result.replicated_jobs)
            at_risk.append((variant, result.at_risk))
        rows.append(ReplayRow(variant, values))
        if on_row is not None:
            on_row(rows[-1])
    return ReplayOutcome(rows, waits, affected, skipped, jobs, at_risk)

