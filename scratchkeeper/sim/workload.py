"""The simulator's workload: trace records turned into jobs with nodes, input size and stripes.

A trace gives submit time, run time, processors, requested time and (sometimes) memory. The
storage side is not in any job trace, so it is added here as the thesis's §4.7.1 did. The
input size follows ``input_model``:

``requested-memory``
    the job's aggregate memory as the trace records it (its used memory where the trace has
    it, else its request), or drawn from a log-normal distribution when it has neither;
``peak-memory``
    the same sizes scaled by one factor so that the run-time-weighted mean input of the jobs
    (the mean over running jobs at evenly spaced instants) is the share of the machine's
    aggregate memory that the thesis's §4.5.1 measured on Jaguar: 31.8 GB of peak memory
    per running job on a machine of 46.8 TB (table 4.2), so 31.8 GB of 600 TB of scratch.

A site CSV's known input size is always taken as it is. The file is striped over
``stripe_count`` OSTs chosen at random, fewer when the file is smaller than ``stripe_count``
stripes.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import InputError
from .traces import LanlJob, SiteJob, SwfJob

KIB = 1024
INPUT_MODELS = ("requested-memory", "peak-memory")
#: The thesis, §4.5.1: Jaguar's running jobs used 31.8 GB of peak memory on average, on a
#: machine of 46.8 TB aggregate memory (table 4.2) and 600 TB of scratch.
JAGUAR_PEAK_PER_JOB = 31.8e9
JAGUAR_MEMORY = 46.8e12
DAY = 86400.0


@dataclass(frozen=True)
class WorkloadParams:
    """How trace records become simulated jobs (all choices that the trace does not make)."""

    procs_per_node: int = 1
    system_nodes: int | None = None     # None: from the trace header, else the largest job
    load_factor: float = 1.0            # > 1 shortens the gaps between submissions (the thesis's fig. 4.6)
    stripe_count: int = 4
    stripe_size: int = 1 << 20
    ost_count: int = 64
    seed: int = 1
    input_median_bytes: float = 2 * 1024 ** 3   # log-normal fallback when memory is unknown
    input_sigma: float = 1.5
    input_model: str = "requested-memory"
    node_memory_bytes: float = 12 * 1024 ** 3   # the machine's aggregate memory, for peak-memory,
    machine_nodes: int = 0              # is its nodes (0: the system's) times this
    start_day: float = 0.0              # keep jobs submitted from this day of the trace ...
    days: float = 0.0                   # ... for this many days (0: to the end)

    def __post_init__(self):
        if self.input_model not in INPUT_MODELS:
            raise InputError(f"unknown input model {self.input_model!r}; choose one of "
                             f"{', '.join(INPUT_MODELS)}")
        if not self.node_memory_bytes > 0:
            raise InputError(f"node memory must be > 0, got {self.node_memory_bytes:g}")
        if self.start_day < 0 or self.days < 0:
            raise InputError(f"start day and days must be >= 0, got {self.start_day:g} and "
                             f"{self.days:g}")
        if self.procs_per_node < 1:
            raise InputError(f"procs per node must be >= 1, got {self.procs_per_node}")
        if not self.load_factor > 0:
            raise InputError(f"load factor must be > 0, got {self.load_factor}")
        if not 2 <= self.stripe_count <= 32:
            raise InputError(f"stripe count must be within 2..32, got {self.stripe_count}")
        if self.stripe_size < 65536 or self.stripe_size % 65536:
            raise InputError(f"stripe size must be a multiple of 64 KiB, got {self.stripe_size}")
        if self.ost_count < self.stripe_count:
            raise InputError(f"OST count {self.ost_count} is below the stripe count "
                             f"{self.stripe_count}")


class SimJob:
    """One job as the scheduler model sees it, with the state the replay gives it."""

    __slots__ = ("index", "job_id", "submit", "run_time", "limit", "nodes", "input_bytes", "osts",
                 "ready_at", "first_start", "start", "end", "affected", "kills", "version",
                 "recovery_seconds", "recorded_wait")

    def __init__(self, index: int, job_id, submit: float, run_time: float, limit: float,
                 nodes: int, input_bytes: float, osts: tuple[int, ...],
                 recorded_wait: float = -1.0):
        self.index = index
        self.job_id = job_id
        self.submit = submit
        self.run_time = run_time
        self.limit = limit
        self.nodes = nodes
        self.input_bytes = input_bytes
        self.osts = osts
        self.ready_at = 0.0
        self.first_start = -1.0
        self.start = -1.0
        self.end = -1.0
        self.affected = False
        self.kills = 0
        self.version = 0
        self.recovery_seconds = 0.0
        self.recorded_wait = recorded_wait     # the wait the trace records (-1: unknown)

    def __repr__(self) -> str:
        return (f"SimJob({self.job_id!r}, submit={self.submit}, run={self.run_time}, "
                f"nodes={self.nodes}, start={self.start})")


@dataclass
class Workload:
    """Jobs sorted by submit time, the system size, and what was left out and why."""

    jobs: list[SimJob]
    system_nodes: int
    params: WorkloadParams
    dropped: Counter = field(default_factory=Counter)
    span: float = 0.0       # seconds from the first submission to the last one

    def bytes_on_ost(self, job: SimJob) -> float:
        return job.input_bytes / len(job.osts) if job.osts else 0.0


@dataclass(frozen=True, slots=True)
class TraceJob:
    """What every trace format reduces to: the fields the scheduler model needs."""

    job_id: object
    submit: float
    run_time: float
    procs: int
    requested_time: float = -1
    memory_bytes: float = -1    # aggregate memory of the job (peak use, else request)
    input_bytes: float = -1     # known input size, when the site log has it
    wait_time: float = -1       # the wait the trace records (-1: unknown)


def from_swf(records: list[SwfJob]) -> list[TraceJob]:
    """SWF records as TraceJobs: allocated processors (else requested), used memory (else requested)."""
    out = []
    for r in records:
        procs = r.allocated_procs if r.allocated_procs > 0 else r.requested_procs
        per_proc = r.used_memory if r.used_memory > 0 else r.requested_memory
        memory = per_proc * KIB * procs if per_proc > 0 and procs > 0 else -1
        out.append(TraceJob(r.job_id, r.submit_time, r.run_time, procs, r.requested_time, memory,
                            wait_time=r.wait_time))
    return out


def from_lanl(records: list[LanlJob]) -> list[TraceJob]:
    """LANL job-log lines as TraceJobs; the log has no requested time and no memory."""
    return [TraceJob(r.batch_id, r.submit_time, r.run_time, r.nprocs,
                     wait_time=r.dispatch_time - r.submit_time) for r in records]


def from_site(records: list[SiteJob]) -> list[TraceJob]:
    out = []
    for r in records:
        memory = r.memory_kb_per_proc * KIB * r.procs if r.memory_kb_per_proc > 0 else -1
        out.append(TraceJob(r.job_id, r.submit_time, r.run_time, r.procs, r.requested_time,
                            memory, r.input_bytes))
    return out


#: trace jobs between two progress reports while the workload is built
PROGRESS_JOBS = 1 << 15


def build_workload(trace_jobs: list[TraceJob], params: WorkloadParams,
                   header_nodes: int | None = None,
                   progress: Callable[[int, int], None] | None = None) -> Workload:
    """Jobs for the scheduler model; records it cannot run (unknown run time, too big) are dropped.

    ``header_nodes`` is the machine size the trace declares (SWF ``MaxProcs`` / procs per node).
    ``progress(trace jobs done, trace jobs)`` as the jobs are drawn, and once at the end.
    """
    dropped: Counter = Counter()
    rng = random.Random(params.seed)
    usable = []
    for t in trace_jobs:
        if t.run_time < 0:
            dropped["unknown run time"] += 1
            continue
        if t.procs <= 0:
            dropped["unknown processor count"] += 1
            continue
        usable.append(t)
    if not usable:
        raise InputError("the trace has no job the scheduler model can run")
    usable.sort(key=lambda t: t.submit)
    nodes_of = [-(-t.procs // params.procs_per_node) for t in usable]
    system_nodes = params.system_nodes or header_nodes or max(nodes_of)
    first = usable[0].submit
    window_start = first + params.start_day * DAY
    window_end = window_start + params.days * DAY if params.days else math.inf
    origin = None
    log_median = math.log(params.input_median_bytes)
    ost_range = range(params.ost_count)
    jobs: list[SimJob] = []
    sizes: list[tuple[float, float]] = []     # (known input, recorded memory or drawn size)
    for done, (t, nodes) in enumerate(zip(usable, nodes_of)):
        if progress is not None and done % PROGRESS_JOBS == 0:
            progress(done, len(usable))
        # Draw every random value for every job, kept or not, so a job's stripes and size do
        # not depend on which other jobs were dropped.
        fallback = rng.lognormvariate(log_median, params.input_sigma)
        osts = rng.sample(ost_range, params.stripe_count)
        if not window_start <= t.submit < window_end:
            continue        # outside the chosen period: not a job of this replay
        if nodes > system_nodes:
            dropped["larger than the system"] += 1
            continue
        if origin is None:
            origin = t.submit
        run_time = float(t.run_time)
        limit = float(t.requested_time) if t.requested_time > 0 else run_time
        # The scheduler kills a job at its limit, so a trace run time past it is cut there.
        run_time = min(run_time, limit)
        submit = (t.submit - origin) / params.load_factor
        jobs.append(SimJob(len(jobs), t.job_id, submit, run_time, limit, nodes, 0.0,
                           tuple(osts), t.wait_time))
        sizes.append((t.input_bytes, t.memory_bytes if t.memory_bytes > 0 else fallback))
    if not jobs:
        raise InputError(f"no job submitted in days {params.start_day:g} to "
                         f"{params.start_day + params.days:g} of the trace")
    machine_memory = (params.machine_nodes or system_nodes) * params.node_memory_bytes
    scale = input_scale(jobs, [memory for _, memory in sizes], params, machine_memory)
    for job, (known, memory) in zip(jobs, sizes):
        job.input_bytes = known if known > 0 else memory * scale
        used = max(1, min(params.stripe_count, math.ceil(job.input_bytes / params.stripe_size)))
        job.osts = job.osts[:used]
    span = jobs[-1].submit - jobs[0].submit
    if progress is not None:
        progress(len(usable), len(usable))
    return Workload(jobs, system_nodes, params, dropped, span)


def input_scale(jobs: list[SimJob], memory: list[float], params: WorkloadParams,
                machine_memory: float) -> float:
    """The factor from recorded memory to input size: 1, or the peak-memory calibration.

    ``peak-memory``: the run-time-weighted mean of the scaled sizes (what a sample of the
    running jobs at evenly spaced instants averages) becomes Jaguar's 31.8 GB per running job
    scaled from Jaguar's 46.8 TB of aggregate memory to ``machine_memory``.
    """
    if params.input_model == "requested-memory":
        return 1.0
    run_seconds = math.fsum(job.run_time for job in jobs)
    if not run_seconds > 0:
        return 1.0
    weighted_mean = math.fsum(m * job.run_time for m, job in zip(memory, jobs)) / run_seconds
    target = JAGUAR_PEAK_PER_JOB * machine_memory / JAGUAR_MEMORY
    return target / weighted_mean
