"""Temporal replication replayed over a finished schedule (the thesis, §4.5.2 and §4.7.3).

The decisions are those of the replication daemon: after every instant of the schedule the
window of :mod:`scratchkeeper.replication.window` is evaluated on the queue as it stands, and the
jobs it names get a replica, ready after the copy time. A job is *at risk* when its replica was
not ready at its first dispatch. Replicas stay until the job completes, so the replica space at
an instant is the input size of every job with a replica requested and not yet completed.

Strategies: ``fcfs`` (window in queue order, no shortcut), ``shortcut`` (the same with the
threshold T), ``dispatch-aware`` (the offline oracle: the queue ordered by actual dispatch
time, no shortcut). ``alpha = inf`` replicates every job on submission.

Two cores give the same numbers: ``native`` (``native/replication.c``, the default when the
extension is built) and ``python`` (:func:`_replay_python` with
:class:`~scratchkeeper.replication.window.RankedWindow`, the reference of the tests).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import InputError
from ..replication.window import RankedWindow, WindowParams
from .scheduler import CORES, LOG_ENTER, LOG_REQUEUE, LOG_START, Schedule, default_core

try:
    from . import _native
except ImportError:     # not built: the Python reference runs
    _native = None

STRATEGIES = ("fcfs", "shortcut", "dispatch-aware")


@dataclass(frozen=True)
class ReplicationParams:
    """One temporal-replication configuration of the replay."""

    strategy: str = "shortcut"
    alpha: float = 0.5
    threshold: float = 0.1
    copy_bandwidth: float = 250e6       # bytes/s of one replica copy (the thesis: cp on Jaguar)
    scratch_bytes: float = 1e15
    samples: int = 300

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise InputError(f"unknown replication strategy {self.strategy!r}; choose one of "
                             f"{', '.join(STRATEGIES)}")
        if not self.copy_bandwidth > 0:
            raise InputError(f"copy bandwidth must be > 0, got {self.copy_bandwidth}")
        if not self.scratch_bytes > 0:
            raise InputError(f"scratch size must be > 0, got {self.scratch_bytes}")
        if self.samples < 1:
            raise InputError(f"samples must be >= 1, got {self.samples}")
        try:
            self.window_params()
        except ValueError as err:
            raise InputError(str(err)) from err

    def window_params(self) -> WindowParams:
        # The oracle is the bare window in dispatch order: its reference value is the window's.
        threshold = self.threshold if self.strategy == "shortcut" else 0.0
        return WindowParams(alpha=self.alpha, threshold=threshold)


@dataclass
class ReplicationResult:
    params: ReplicationParams
    jobs: int
    jobs_at_risk: int
    replicated_jobs: int
    space_samples: list[float]          # replica bytes / scratch bytes at each sample point
    #: 1 per job (workload order) whose input was not replicated in time: the jobs at risk
    at_risk: bytes = b""

    @property
    def at_risk_pct(self) -> float:
        return 100.0 * self.jobs_at_risk / self.jobs if self.jobs else 0.0

    @property
    def space_mean_pct(self) -> float:
        return 100.0 * sum(self.space_samples) / len(self.space_samples) if self.space_samples else 0.0

    @property
    def space_max_pct(self) -> float:
        return 100.0 * max(self.space_samples, default=0.0)


#: queue events between two progress reports of the replication pass
PROGRESS_EVENTS = 1 << 16


def replay_replication(schedule: Schedule, params: ReplicationParams,
                       progress: Callable[[int, int], None] | None = None,
                       core: str | None = None) -> ReplicationResult:
    """Run the replication daemon's decisions over ``schedule`` and measure risk and space.

    ``progress(events done, events)`` as the schedule's queue events are replayed; ``core``:
    ``native`` (C), ``python`` (the reference) or None (the scheduler's default core)."""
    core = core or default_core()
    if core == "python":
        return _replay_python(schedule, params, progress)
    if core != "native":
        raise InputError(f"unknown replication core {core!r}; choose one of {', '.join(CORES)}")
    if _native is None:
        raise InputError("the native replication core is not built (python setup.py build_ext "
                         "--inplace, or pip install -e .)")
    nodes, input_bytes, end = schedule.job_columns()
    at_risk, replicated, samples, flags = _native.replicate(
        log_time=schedule.log_time, log_kind=schedule.log_kind, log_job=schedule.log_job,
        nodes=nodes, input_bytes=input_bytes, end=end, system_nodes=schedule.system_nodes,
        first_submit=schedule.first_submit, last_end=schedule.last_end,
        order=1 if params.strategy == "dispatch-aware" else 0, alpha=params.alpha,
        threshold=params.window_params().threshold, copy_bandwidth=params.copy_bandwidth,
        scratch_bytes=params.scratch_bytes, samples=params.samples, progress=progress,
        progress_events=PROGRESS_EVENTS)
    space = array("d")
    space.frombytes(samples)
    return ReplicationResult(params, len(schedule.jobs), at_risk, replicated, space.tolist(),
                             flags)


def _replay_python(schedule: Schedule, params: ReplicationParams,
                   progress: Callable[[int, int], None] | None) -> ReplicationResult:
    """:func:`replay_replication` in Python with :class:`RankedWindow`: the reference."""
    jobs = schedule.jobs
    times, kinds, job_of = schedule.log_time, schedule.log_kind, schedule.log_job
    # Queue stints: one per entry into the queue, closed by a dispatch or a move to the tail.
    stint_job: list[int] = []
    stint_close: list[float] = []
    open_stint: dict[int, int] = {}
    for when, kind, job in zip(times, kinds, job_of):
        if kind == LOG_ENTER:
            open_stint[job] = len(stint_job)
            stint_job.append(job)
            stint_close.append(math.inf)
        elif kind == LOG_START or kind == LOG_REQUEUE:
            stint_close[open_stint.pop(job)] = when
    count = len(stint_job)
    if params.strategy == "dispatch-aware":
        # The oracle's queue order is the order in which jobs actually leave the queue.
        order = sorted(range(count), key=stint_close.__getitem__)
        rank_of = [0] * count
        for rank, stint in enumerate(order):
            rank_of[stint] = rank
    else:
        rank_of = list(range(count))       # stints are numbered in entry (FCFS) order
    stint_of_rank = [0] * count
    for stint, rank in enumerate(rank_of):
        stint_of_rank[rank] = stint

    window = RankedWindow(count, schedule.system_nodes, params.window_params())
    requested_at = [-1.0] * len(jobs)
    running_count = [0] * (schedule.system_nodes + 1)
    largest = 0
    at_risk = 0
    flags = bytearray(len(jobs))
    dispatched = bytearray(len(jobs))
    copy_bandwidth = params.copy_bandwidth
    stint_number = 0
    current_rank: dict[int, int] = {}
    n_log = len(times)
    i = 0
    next_report = PROGRESS_EVENTS
    while i < n_log:
        if progress is not None and i >= next_report:
            progress(i, n_log)
            next_report = i + PROGRESS_EVENTS
        now = times[i]
        while i < n_log and times[i] == now:
            kind = kinds[i]
            job = job_of[i]
            nodes = jobs[job].nodes
            if kind == LOG_ENTER:
                rank = rank_of[stint_number]
                stint_number += 1
                current_rank[job] = rank
                window.enter(rank, nodes)
            elif kind == LOG_REQUEUE:
                window.leave(current_rank.pop(job))
            elif kind == LOG_START:
                window.leave(current_rank.pop(job))
                if not dispatched[job]:
                    dispatched[job] = 1
                    asked = requested_at[job]
                    if asked < 0 or asked + jobs[job].input_bytes / copy_bandwidth > now:
                        at_risk += 1
                        flags[job] = 1
                running_count[nodes] += 1
                if nodes > largest:
                    largest = nodes
            else:   # LOG_STOP
                running_count[nodes] -= 1
                while largest and running_count[largest] == 0:
                    largest -= 1
            i += 1
        for rank in window.advance(largest):
            job = stint_job[stint_of_rank[rank]]
            if requested_at[job] < 0:
                requested_at[job] = now
    if progress is not None:
        progress(n_log, n_log)
    samples = _space_samples(schedule, requested_at, params)
    replicated = sum(1 for r in requested_at if r >= 0)
    return ReplicationResult(params, len(jobs), at_risk, replicated, samples, bytes(flags))


def _space_samples(schedule: Schedule, requested_at: list[float],
                   params: ReplicationParams) -> list[float]:
    """Replica bytes / scratch bytes at ``params.samples`` instants spread evenly over the replay."""
    start, stop = schedule.first_submit, schedule.last_end
    count = params.samples
    step = (stop - start) / count if stop > start else 0.0
    points = [start + step * (k + 0.5) for k in range(count)]
    changes: list[tuple[float, float]] = []
    for job, asked in zip(schedule.jobs, requested_at):
        if asked >= 0:
            changes.append((asked, job.input_bytes))
            changes.append((job.end, -job.input_bytes))
    changes.sort()
    samples = []
    held = 0.0
    k = 0
    for point in points:
        while k < len(changes) and changes[k][0] <= point:
            held += changes[k][1]
            k += 1
        samples.append(max(held, 0.0) / params.scratch_bytes)
    return samples
