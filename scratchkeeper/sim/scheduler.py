"""Event-driven scheduler model: FCFS or FCFS with EASY backfilling on nodes, OST failures, recovery.

Jobs run for their trace run time on ``nodes`` whole nodes; backfilling trusts the requested
time (the limit). When an OST fails, every queued or running job with a stripe on it is
*affected*, and the recovery policy decides what happens (the thesis, §4.7.2 and §4.7.4):

``none``
    queued jobs go to the tail of the queue, running jobs are killed and requeued at the tail;
    either waits for the OST to come back before it can run again.
``pre-execution``
    queued jobs keep their place and can run once their lost stripe is patched from the
    source (the patch time); running jobs are killed and requeued at the tail, runnable after
    the patch.
``on-the-fly``
    queued jobs as for pre-execution; running jobs keep running and end later by the patch time.

The run writes a chronological log of queue entries, dispatches and run ends, which the
temporal-replication analysis (``replication.py``) replays.

Two cores run the same model: ``native`` (``native/schedule.c``, the default when the extension
is built) and ``python`` (:class:`_Replay` below, the reference the tests compare the C core with
event for event: same start times, same log, same totals, bit for bit).
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
from array import array
from bisect import bisect_left, insort
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from ..errors import InputError
from .outages import OstOutage
from .workload import SimJob

try:
    from . import _native
except ImportError:     # a checkout whose extensions are not built: the Python model runs
    _native = None

POLICIES = ("none", "pre-execution", "on-the-fly")
CORES = ("native", "python")
#: OST numbers at or above this are renumbered for the C core (it keeps one slot per number)
_OST_SLOTS_MAX = 1 << 20

# Event kinds, in the order events of the same instant are handled.
_END, _DOWN, _UP, _READY = 0, 1, 2, 3

# Kinds of the chronological log.
LOG_ENTER, LOG_START, LOG_REQUEUE, LOG_STOP = 0, 1, 2, 3


@dataclass(frozen=True)
class RecoveryParams:
    """The recovery policy and what patching a lost stripe from the source costs."""

    policy: str = "none"
    patch_bandwidth: float = 100e6      # bytes/s from the remote source
    patch_latency: float = 30.0         # seconds to notice the failure and plan the patch

    def __post_init__(self):
        if self.policy not in POLICIES:
            raise InputError(f"unknown recovery policy {self.policy!r}; choose one of "
                             f"{', '.join(POLICIES)}")
        if not self.patch_bandwidth > 0:
            raise InputError(f"patch bandwidth must be > 0, got {self.patch_bandwidth}")
        if self.patch_latency < 0:
            raise InputError(f"patch latency must be >= 0, got {self.patch_latency}")


@dataclass
class Schedule:
    """What the replay did: the jobs with their times, the event log, and totals."""

    jobs: Sequence[SimJob]
    system_nodes: int
    busy_node_seconds: float
    first_submit: float
    last_end: float
    log_time: array = field(default_factory=lambda: array("d"))
    log_kind: array = field(default_factory=lambda: array("b"))
    log_job: array = field(default_factory=lambda: array("l"))
    failures: int = 0
    # (nodes, input bytes, end) per job, taken once for the replication analyses of this schedule
    columns: tuple[array, array, array] | None = field(default=None, repr=False, compare=False)

    @property
    def utilisation(self) -> float:
        span = self.last_end - self.first_submit
        return self.busy_node_seconds / (self.system_nodes * span) if span > 0 else 0.0

    def job_columns(self) -> tuple[array, array, array]:
        """Every job's nodes (int32), input bytes and end as the replay left them, built once:
        the replication analyses of one schedule (a sweep's variants) read them many times."""
        if self.columns is None:
            self.columns = (array("i", [job.nodes for job in self.jobs]),
                            array("d", [job.input_bytes for job in self.jobs]),
                            array("d", [job.end for job in self.jobs]))
        return self.columns


#: the core chosen by :func:`using_core` for calls that name none
_chosen_core: str | None = None


def default_core() -> str:
    """The core of calls that name none: :func:`using_core`'s, else ``native`` when the C
    extension is built, else ``python``."""
    if _chosen_core is not None:
        return _chosen_core
    return "native" if _native is not None else "python"


@contextlib.contextmanager
def using_core(core: str) -> Iterator[None]:
    """Within the block, :func:`simulate` and the replication analysis use ``core`` unless a
    call names one: a whole run (trace to rows) replayed on either core, as benchmarks do."""
    global _chosen_core
    if core not in CORES:
        raise InputError(f"unknown scheduler core {core!r}; choose one of {', '.join(CORES)}")
    before, _chosen_core = _chosen_core, core
    try:
        yield
    finally:
        _chosen_core = before


def recorded_schedule(jobs: Sequence[SimJob], system_nodes: int) -> Schedule:
    """The schedule the trace itself records: dispatch = submission + the trace's wait time.

    The thesis's §4.7.3 replayed the Jaguar queue "according to the submission and dispatch
    times of jobs"; this gives the replication analysis that queue instead of the model's.
    """
    marks = []
    busy = 0.0
    for job in jobs:
        if job.recorded_wait < 0:
            raise InputError(f"job {job.job_id} has no recorded wait time; use the scheduler "
                             "model")
        job.first_start = job.start = job.submit + job.recorded_wait
        job.end = job.start + job.run_time
        busy += job.nodes * job.run_time
        # Within one instant: entries, then dispatches, then ends (all read after the instant).
        marks.append((job.submit, LOG_ENTER, job.index))
        marks.append((job.start, LOG_START, job.index))
        marks.append((job.end, LOG_STOP, job.index))
    marks.sort()
    schedule = Schedule(jobs, system_nodes, busy, jobs[0].submit if jobs else 0.0,
                        max((j.end for j in jobs), default=0.0))
    for when, kind, index in marks:
        schedule.log_time.append(when)
        schedule.log_kind.append(kind)
        schedule.log_job.append(index)
    return schedule


class _RunningByExpectedEnd:
    """Running jobs ordered by when the scheduler expects them to end (start + limit).

    A plain sorted list: insertion and removal move memory (fast for the thousands of jobs a
    machine runs at once) and the reservation walks it in order without sorting.
    """

    __slots__ = ("entries", "key_of")

    def __init__(self):
        self.entries: list[tuple[float, int, int]] = []
        self.key_of: dict[int, tuple[float, int, int]] = {}

    def add(self, expected_end: float, job: SimJob) -> None:
        key = (expected_end, job.index, job.nodes)
        self.key_of[job.index] = key
        insort(self.entries, key)

    def remove(self, job: SimJob) -> None:
        key = self.key_of.pop(job.index)
        del self.entries[bisect_left(self.entries, key)]

    def extend(self, job: SimJob, seconds: float) -> None:
        """``job`` is now expected to end ``seconds`` later (on-the-fly recovery)."""
        expected_end, _, _ = self.key_of[job.index]
        self.remove(job)
        self.add(expected_end + seconds, job)

    def in_order(self):
        return self.entries


def simulate(jobs: Sequence[SimJob], system_nodes: int, *, backfill: bool = True,
             outages: Sequence[OstOutage] = (), recovery: RecoveryParams = RecoveryParams(),
             progress: Callable[[int, int], None] | None = None,
             core: str | None = None) -> Schedule:
    """Replay ``jobs`` (sorted by submit time, state fresh) and return the schedule.

    ``core``: ``native`` (C), ``python`` (the reference model) or None (:func:`default_core`).
    """
    for job in jobs:
        if job.nodes > system_nodes:
            raise InputError(f"job {job.job_id} requests {job.nodes} nodes, the system has "
                             f"{system_nodes}")
    core = core or default_core()
    if core == "python":
        return _Replay(jobs, system_nodes, backfill, outages, recovery, progress).run()
    if core != "native":
        raise InputError(f"unknown scheduler core {core!r}; choose one of {', '.join(CORES)}")
    if _native is None:
        raise InputError("the native scheduler core is not built (python setup.py build_ext "
                         "--inplace, or pip install -e .)")
    return _simulate_native(jobs, system_nodes, backfill, outages, recovery, progress)


def _dense_osts(jobs: Sequence[SimJob],
                outages: Sequence[OstOutage]) -> tuple[bytes | array, bytes | array, array, int]:
    """The jobs' OSTs flattened (offsets, numbers), the outages' OSTs and the number of slots.

    OST numbers are used as they are when they are small non-negative integers (every
    workload's are), else renumbered densely in order of first appearance (the Python model
    only compares them)."""
    assert _native is not None
    try:
        # int32 values: what has __index__ (bool, numpy integers: equal to that int)
        offsets, flat, low, high = _native.read_int_lists(jobs, "osts")
        down = array("i", [o.ost_index for o in outages])
        lows = [value for value in (low, *down) if value is not None]
        highs = [value for value in (high, *down) if value is not None]
        if not lows or 0 <= min(lows) and max(highs) < _OST_SLOTS_MAX:
            return offsets, flat, down, max(highs, default=-1) + 1
    except (TypeError, OverflowError):
        pass
    number: dict = {}
    offsets = array("q", itertools.accumulate((len(job.osts) for job in jobs), initial=0))
    named = array("i", [number.setdefault(ost, len(number))
                        for ost in itertools.chain.from_iterable(job.osts for job in jobs)])
    down = array("i", [number.setdefault(o.ost_index, len(number)) for o in outages])
    return offsets, named, down, len(number)


#: what the C core reads of each job and what it writes back, with the column kinds of
#: ``_native.read_columns`` (d float64, q int64, i int32, ? a 0/1 byte)
_JOB_INPUTS = (("submit", "d"), ("run_time", "d"), ("limit", "d"), ("input_bytes", "d"),
               ("nodes", "i"))
_JOB_STATE = (("ready_at", "d"), ("first_start", "d"), ("start", "d"), ("end", "d"),
              ("recovery_seconds", "d"), ("kills", "q"), ("version", "q"), ("affected", "?"))


def _simulate_native(jobs: Sequence[SimJob], system_nodes: int, backfill: bool,
                     outages: Sequence[OstOutage], recovery: RecoveryParams,
                     progress: Callable[[int, int], None] | None) -> Schedule:
    """The same replay by ``native/schedule.c``: the jobs' columns in, their state written back."""
    assert _native is not None
    offsets, osts, outage_osts, slots = _dense_osts(jobs, outages)
    columns = _native.read_columns(jobs, *_names_and_kinds(_JOB_INPUTS + _JOB_STATE))
    inputs = dict(zip((name for name, _ in _JOB_INPUTS), columns))
    state = {name: bytearray(column)
             for (name, _), column in zip(_JOB_STATE, columns[len(_JOB_INPUTS):])}
    log_time, log_kind, log_job, busy, failures = _native.simulate(
        **inputs, **state, ost_offsets=offsets, osts=osts, ost_slots=slots,
        system_nodes=system_nodes, backfill=backfill, policy=POLICIES.index(recovery.policy),
        patch_bandwidth=recovery.patch_bandwidth, patch_latency=recovery.patch_latency,
        outage_ost=outage_osts, outage_down=array("d", [o.down for o in outages]),
        outage_up=array("d", [o.up for o in outages]), progress=progress)
    _native.write_columns(jobs, *_names_and_kinds(_JOB_STATE), tuple(state.values()))
    nodes, input_bytes, end = array("i"), array("d"), array("d")
    nodes.frombytes(inputs["nodes"])
    input_bytes.frombytes(inputs["input_bytes"])
    end.frombytes(state["end"])
    schedule = Schedule(jobs, system_nodes, busy, jobs[0].submit if jobs else 0.0,
                        max(end, default=0.0), array("d"), array("b"), array("l"), failures,
                        columns=(nodes, input_bytes, end))
    schedule.log_time.frombytes(log_time)
    schedule.log_kind.frombytes(log_kind)
    schedule.log_job.frombytes(log_job)
    return schedule


def _names_and_kinds(columns: tuple[tuple[str, str], ...]) -> tuple[tuple[str, ...], str]:
    return tuple(name for name, _ in columns), "".join(kind for _, kind in columns)


class _Replay:
    def __init__(self, jobs, system_nodes, backfill, outages, recovery, progress):
        self.jobs = jobs
        self.system_nodes = system_nodes
        self.backfill = backfill
        self.recovery = recovery
        self.progress = progress
        self.free = system_nodes
        self.queue: dict[SimJob, None] = {}         # insertion-ordered: the FCFS order
        self.running: dict[SimJob, None] = {}
        self.by_expected_end = _RunningByExpectedEnd()
        self.events: list = []
        self.seq = 0
        self.down_until: dict[int, float] = {}
        self.busy = 0.0
        self.ended = 0
        # Cached result of the last full pass: the blocked head and its reservation.
        self.head: SimJob | None = None
        self.shadow = 0.0
        self.extra = 0
        self.log_time = array("d")
        self.log_kind = array("b")
        self.log_job = array("l")
        self.failures = 0
        for o in outages:
            self._push(o.down, _DOWN, o)

    def _push(self, when: float, kind: int, payload) -> None:
        self.seq += 1
        heapq.heappush(self.events, (when, kind, self.seq, payload))

    def _log(self, when: float, kind: int, job: SimJob) -> None:
        self.log_time.append(when)
        self.log_kind.append(kind)
        self.log_job.append(job.index)

    # ------------------------------------------------------------------ main loop
    def run(self) -> Schedule:
        jobs = self.jobs
        n = len(jobs)
        events = self.events
        pointer = 0
        last_report = 0
        for job in jobs:
            job.ready_at = job.submit
        # Until every job has ended: outages after that change nothing and are not counted.
        while pointer < n or self.running or self.queue:
            next_submit = jobs[pointer].submit if pointer < n else float("inf")
            if events and events[0][0] <= next_submit:
                now = events[0][0]
            elif pointer < n:
                now = next_submit
            else:
                # Queued jobs but nothing that could ever start them: the model is broken.
                raise AssertionError(f"{len(self.queue)} queued job(s) can never start")
            full = False
            while events and events[0][0] == now:
                _, kind, _, payload = heapq.heappop(events)
                if kind == _END:
                    job, version = payload
                    if version == job.version:
                        self._finish(job, now)
                        full = True
                elif kind == _DOWN:
                    self._ost_down(payload, now)
                    full = True
                elif kind == _UP:
                    if self.down_until.get(payload.ost_index) == payload.up:
                        del self.down_until[payload.ost_index]
                else:   # _READY
                    full = True
            arrivals = []
            while pointer < n and jobs[pointer].submit == now:
                job = jobs[pointer]
                pointer += 1
                self._submit(job, now)
                arrivals.append(job)
            if full or self.head is None or not self.backfill:
                self._full_pass(now)
            else:
                self._arrivals_pass(now, arrivals)
            if self.progress is not None and self.ended - last_report >= 4096:
                last_report = self.ended
                self.progress(self.ended, n)
        if self.progress is not None:
            self.progress(self.ended, n)
        last_end = max((j.end for j in jobs), default=0.0)
        first = jobs[0].submit if n else 0.0
        return Schedule(jobs, self.system_nodes, self.busy, first, last_end, self.log_time,
                        self.log_kind, self.log_job, self.failures)

    # ------------------------------------------------------------------ job life
    def _submit(self, job: SimJob, now: float) -> None:
        self.queue[job] = None
        self._log(now, LOG_ENTER, job)
        down_until = self.down_until
        if down_until:
            lost = [o for o in job.osts if o in down_until]
            if lost:
                # The stage-in landed on a failed target: affected before it ever ran.
                job.affected = True
                if self.recovery.policy == "none":
                    self._hold(job, max(down_until[o] for o in lost))
                else:
                    self._hold(job, now + self._patch_seconds(job, len(lost)))

    def _hold(self, job: SimJob, until: float) -> None:
        if until > job.ready_at:
            job.ready_at = until
            self._push(until, _READY, None)

    def _patch_seconds(self, job: SimJob, lost_stripes: int = 1) -> float:
        per_ost = job.input_bytes / len(job.osts)
        seconds = self.recovery.patch_latency + lost_stripes * per_ost / self.recovery.patch_bandwidth
        job.recovery_seconds += seconds
        return seconds

    def _start(self, job: SimJob, now: float) -> None:
        del self.queue[job]
        self.free -= job.nodes
        job.start = now
        if job.first_start < 0:
            job.first_start = now
        job.end = now + job.run_time
        self.running[job] = None
        self.by_expected_end.add(now + job.limit, job)
        self._push(job.end, _END, (job, job.version))
        self._log(now, LOG_START, job)

    def _finish(self, job: SimJob, now: float) -> None:
        self.free += job.nodes
        del self.running[job]
        self.by_expected_end.remove(job)
        self.busy += job.nodes * (now - job.start)
        self.ended += 1
        self._log(now, LOG_STOP, job)

    def _requeue(self, job: SimJob, now: float) -> None:
        """Move ``job`` to the tail of the queue (killing it first if it runs)."""
        if job in self.running:
            job.version += 1        # its pending end event is void now
            job.kills += 1
            self.free += job.nodes
            del self.running[job]
            self.by_expected_end.remove(job)
            self.busy += job.nodes * (now - job.start)
            job.end = -1.0
            self._log(now, LOG_STOP, job)
        else:
            del self.queue[job]
            self._log(now, LOG_REQUEUE, job)
        self.queue[job] = None
        self._log(now, LOG_ENTER, job)

    def _ost_down(self, outage: OstOutage, now: float) -> None:
        ost = outage.ost_index
        self.failures += 1
        self.down_until[ost] = max(outage.up, self.down_until.get(ost, 0.0))
        self._push(outage.up, _UP, outage)
        policy = self.recovery.policy
        hit_queued = [j for j in self.queue if ost in j.osts]
        hit_running = [j for j in self.running if ost in j.osts]
        for job in hit_queued:
            job.affected = True
            if policy == "none":
                self._requeue(job, now)
                self._hold(job, self.down_until[ost])
            else:
                self._hold(job, now + self._patch_seconds(job))
        for job in hit_running:
            job.affected = True
            if policy == "on-the-fly":
                # The job keeps running while the stripe is patched and ends later by that much;
                # the scheduler knows it, so the reservation counts on the later end too.
                job.version += 1
                extension = self._patch_seconds(job)
                job.end += extension
                self._push(job.end, _END, (job, job.version))
                self.by_expected_end.extend(job, extension)
            else:
                self._requeue(job, now)
                if policy == "none":
                    self._hold(job, self.down_until[ost])
                else:
                    self._hold(job, now + self._patch_seconds(job))

    # ------------------------------------------------------------------ scheduling passes
    def _full_pass(self, now: float) -> None:
        """FCFS from the head; then, with backfilling, EASY around the first job that does not fit."""
        started = []
        free = self.free
        head = None
        for job in self.queue:
            if job.ready_at > now:
                continue        # held (data not there yet): it neither runs nor blocks
            if job.nodes <= free:
                started.append(job)
                free -= job.nodes
            else:
                head = job
                break
        for job in started:
            self._start(job, now)
        self.head = head
        if head is None or not self.backfill:
            return
        self._reserve(head, now)
        if self.free == 0:
            return
        candidates = []
        free = self.free
        extra = self.extra
        shadow = self.shadow
        past_head = False
        for job in self.queue:
            if not past_head:
                past_head = job is head
                continue
            if job.nodes > free or job.ready_at > now:
                continue
            if now + job.limit <= shadow:
                candidates.append(job)
                free -= job.nodes
            elif job.nodes <= extra:
                candidates.append(job)
                free -= job.nodes
                extra -= job.nodes
            if free == 0:
                break
        self.extra = extra
        for job in candidates:
            self._start(job, now)

    def _reserve(self, head: SimJob, now: float) -> None:
        """Shadow time (when the head can start) and the nodes spare at that time."""
        available = self.free
        entries = self.by_expected_end.in_order()
        for position, (expected_end, _, nodes) in enumerate(entries):
            available += nodes
            if available >= head.nodes:
                shadow = max(expected_end, now)
                # Every job expected to end by the shadow time frees its nodes then, not only
                # the ones it took to reach the head's size: ties at the shadow time (and jobs
                # already past their limit) leave their nodes spare for backfilling too.
                for later_end, _, later_nodes in entries[position + 1:]:
                    if later_end > shadow:
                        break
                    available += later_nodes
                self.shadow = shadow
                self.extra = available - head.nodes
                return
        # Unreachable while head.nodes <= system nodes; kept as a guard for the invariant.
        raise AssertionError(f"job {head.job_id} can never start")

    def _arrivals_pass(self, now: float, arrivals: list[SimJob]) -> None:
        """Only new jobs arrived since the last full pass: each may backfill, nothing else changed."""
        head = self.head
        for job in arrivals:
            if job.ready_at > now or job.nodes > self.free:
                continue
            if now + job.limit <= self.shadow:
                self._start(job, now)
            elif job.nodes <= self.extra:
                self.extra -= job.nodes
                self._start(job, now)
        assert head is not None
