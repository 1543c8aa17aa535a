"""Just-in-time stage-in and offload at close in the replay (issue 18, the thesis's §4.4 and §4.9).

A replayed schedule gives each job its submit time, start, end, input size and OSTs, and the
outages give when each OST was down. This module replays the *staging* of those jobs two ways
on the same schedule:

``now``
    the stage-in starts at submission; the data is on scratch from ``submit + T`` (``T`` the
    transfer time at ``transfer_bandwidth``) until the job starts.
``jit``
    :func:`scratchkeeper.planner.jit.decide`'s rule: the stage-in starts at
    ``E - P_hi - margin`` (``E`` the expected start, ``P_hi`` the pessimistic predicted transfer
    time), at once when ``P_hi`` plus a sweep exceeds ``jit_max_delay``, and at the latest one
    sweep after the job could start (the estimate came forward). The errors are drawn per job:
    ``E = submit + wait * (1 + estimate_error * u)`` and ``P = T * (1 + prediction_error * u')``
    with ``u, u'`` uniform on [-1, 1]; ``P_hi = P * (1 + sigmas * prediction_error / sqrt(3))``
    (the standard deviation of that error). With ``measured`` pairs (the transfer model's
    errors measured on real transfers, :func:`load_measured`) ``u'`` picks one pair per job
    instead, each pair equally likely: ``P = T * (1 + e)`` and ``P_hi = T * r`` for that
    transfer's relative error ``e = (P - T) / T`` and bound ratio ``r = P_hi / T``, so the two
    keep their measured joint distribution, bounds below the actual time (late data) included.
    The pair is drawn from the same ``u'`` the uniform model uses, so with the same seed every
    job keeps its start estimate error whichever model its prediction follows.

Measured per mode: byte-hours of staged input on scratch before the job starts, the jobs whose
input had an OST down between its arrival and the job's start (at risk), and the compute start
delay caused by late data (against ``now``, whose data can also be late for a short wait). The
delay is measured, not fed back into the schedule. For results, ``results_per_job`` files per
job of ``output_ratio`` times the input in all, closed at evenly spaced times over the run:
with ``close`` each is offloaded when closed (after ``close_latency``), with ``end`` all after
the job in turn; the time each spends on scratch between its close and the end of its offload.
"""

from __future__ import annotations

import bisect
import json
import math
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import InputError
from ..inputfiles import StrPath, read_text
from .outages import OstOutage
from .workload import SimJob

HOUR = 3600.0
#: a prediction record (benchmarks/jit/prediction.py writes ~70 KB for 160 transfers)
MEASURED_SIZE_MAX = 16 << 20
MEASURED_TRANSFERS_MAX = 100_000


@dataclass(frozen=True)
class StagingParams:
    transfer_bandwidth: float = 100e6      # bytes/s of a stage-in or offload
    jit_margin: float = 120.0
    jit_max_delay: float = 1800.0
    jit_sigmas: float = 2.0
    sweep_interval: float = 30.0
    prediction_error: float = 0.0          # relative, uniform +-
    estimate_error: float = 0.0            # relative to the wait, uniform +-
    results_per_job: int = 3
    output_ratio: float = 1.0
    close_latency: float = 30.0            # close record seen and its offload job started
    seed: int = 1
    delay_bound: float | None = None       # over_max_delay counts beyond this (default jit_max_delay)
    #: (relative error (P - T) / T, bound ratio P_hi / T) per measured transfer: when given,
    #: the prediction follows these instead of the uniform prediction_error
    measured: tuple[tuple[float, float], ...] = ()


@dataclass
class StagingResult:
    mode: str
    jobs: int
    held_back: int                     # jit only: stage-ins that did not start at submission
    input_byte_hours: float            # staged input on scratch before its job started
    at_risk: int                       # jobs whose input had an OST down before they started
    delayed: int                       # jobs whose start waited for late data
    delay_mean: float                  # over delayed jobs, seconds
    delay_p95: float
    delay_max: float
    over_max_delay: int                # delayed by more than jit_max_delay

    def row(self) -> dict:
        return dict(self.__dict__)


def _outage_index(outages: Sequence[OstOutage]) -> dict[int, tuple[list[float], list[float]]]:
    by_ost: dict[int, list[tuple[float, float]]] = {}
    for outage in outages:
        by_ost.setdefault(outage.ost_index, []).append((outage.down, outage.up))
    return {ost: ([d for d, _ in sorted(spans)], [u for _, u in sorted(spans)])
            for ost, spans in by_ost.items()}


def _down_between(index, osts: Sequence[int], start: float, end: float) -> bool:
    """Whether any of ``osts`` was down at some time in [start, end)."""
    if end <= start:
        return False
    for ost in osts:
        spans = index.get(ost)
        if spans is None:
            continue
        downs, ups = spans
        # outages beginning before `end`; the latest of them that is still up after `start`
        last = bisect.bisect_left(downs, end)
        for i in range(last - 1, -1, -1):
            if ups[i] > start:
                return True
            if downs[i] < start - 30 * 86400:   # outages are hours long: stop looking back
                break
    return False


@dataclass(frozen=True)
class MeasuredPredictions:
    """The transfer model's errors measured on real transfers (a prediction record)."""

    path: str
    date: str                          # when it was measured, as the record gives it
    load: str                          # the machine's load average then
    machine: str
    pairs: tuple[tuple[float, float], ...]   # (P - T) / T and P_hi / T per transfer
    actual: tuple[float, ...]                # T per transfer, seconds (in the same order)


def load_measured(path: StrPath, min_bytes: int = 0) -> MeasuredPredictions:
    """The measured pairs of a prediction record (``benchmarks/jit/prediction.py``'s JSON: a
    ``transfers`` list of ``predicted``, ``bound`` and ``actual`` seconds, and ``bytes``);
    anything else is refused with one :class:`InputError` naming the file (and the line of a
    JSON syntax error or the transfer at fault). ``min_bytes``: only the transfers of at least
    that many bytes (the replay's transfers are far longer than most measured ones)."""
    name = os.fspath(path)
    text = read_text(path, MEASURED_SIZE_MAX, what="prediction record")
    try:
        record = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"not JSON: {err.msg} (column {err.colno})", path=name,
                         line=err.lineno) from None
    except (ValueError, RecursionError) as err:
        raise InputError(f"not JSON: {err}", path=name) from None
    transfers = record.get("transfers") if isinstance(record, dict) else None
    if not isinstance(transfers, list) or not transfers:
        raise InputError("not a prediction record: expected an object with a non-empty "
                         "'transfers' list", path=name)
    if len(transfers) > MEASURED_TRANSFERS_MAX:
        raise InputError(f"{len(transfers):,} transfers: more than {MEASURED_TRANSFERS_MAX:,}",
                         path=name)
    pairs, actuals = [], []
    for number, transfer in enumerate(transfers):
        if min_bytes:
            size = transfer.get("bytes") if isinstance(transfer, dict) else None
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise InputError(f"transfers[{number}]: 'bytes' is {size!r}, expected a "
                                 "number of bytes", path=name)
            if size < min_bytes:
                continue
        seconds = []
        for key in ("predicted", "bound", "actual"):
            value = transfer.get(key) if isinstance(transfer, dict) else None
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or not math.isfinite(value) or value <= 0):
                raise InputError(f"transfers[{number}]: {key!r} is {value!r}, expected a "
                                 "positive number of seconds", path=name)
            seconds.append(float(value))
        predicted, bound, actual = seconds
        pairs.append(((predicted - actual) / actual, bound / actual))
        actuals.append(actual)
    if not pairs:
        raise InputError(f"no transfer of {min_bytes:,} bytes or more", path=name)
    about = {key: record.get(key) for key in ("date", "load", "machine")}
    for key, value in about.items():
        if value is not None and not isinstance(value, str):
            raise InputError(f"{key!r} is {value!r}, expected a string", path=name)
    return MeasuredPredictions(name, about["date"] or "", about["load"] or "",
                               about["machine"] or "", tuple(pairs), tuple(actuals))


def predicted_transfer(transfer: float, draw: float, params: StagingParams) -> tuple[float, float]:
    """The predicted and the pessimistic transfer time ``(P, P_hi)`` of a transfer that takes
    ``transfer`` seconds, for ``draw`` uniform on [-1, 1] (one per job)."""
    if params.measured:
        pairs = params.measured
        # (draw + 1) / 2 is uniform on [0, 1]: every pair equally likely
        error, ratio = pairs[min(len(pairs) - 1, int((draw + 1) / 2 * len(pairs)))]
        return transfer * (1 + error), transfer * ratio
    predicted = transfer * (1 + params.prediction_error * draw)
    return predicted, predicted * (1 + params.jit_sigmas * params.prediction_error / math.sqrt(3))


def replay_staging(jobs: Sequence[SimJob], outages: Sequence[OstOutage], mode: str,
                   params: StagingParams) -> StagingResult:
    """The staging of ``jobs`` (with their replayed start) in ``mode`` ("now" or "jit")."""
    if mode not in ("now", "jit"):
        raise ValueError(f"mode {mode!r}: expected now or jit")
    if params.measured and params.prediction_error:
        raise ValueError("prediction_error and measured pairs given: one error model at a time")
    rng = random.Random(params.seed)
    index = _outage_index(outages)
    bandwidth = params.transfer_bandwidth
    byte_hours = 0.0
    at_risk = held = 0
    delays: list[float] = []
    for job in jobs:
        if job.start < 0:
            continue
        transfer = job.input_bytes / bandwidth
        now_ready = job.submit + transfer
        # draw both errors for every job in both modes: the same jobs get the same errors
        u_estimate, u_predict = rng.uniform(-1, 1), rng.uniform(-1, 1)
        if mode == "now":
            ready = now_ready
        else:
            wait = job.start - job.submit
            expected = job.submit + wait * (1 + params.estimate_error * u_estimate)
            _, pessimistic = predicted_transfer(transfer, u_predict, params)
            if pessimistic + params.sweep_interval > params.jit_max_delay:
                begin = job.submit
            else:
                begin = max(job.submit, expected - pessimistic - params.jit_margin)
                # the estimate came forward: the sweep starts it once the job could start
                begin = min(begin, job.start + params.sweep_interval)
            if begin > job.submit:
                held += 1
            ready = begin + transfer
        start = max(job.start, ready)
        delay = start - max(job.start, now_ready) if mode == "jit" else start - job.start
        if delay > 1e-9:
            delays.append(delay)
        byte_hours += job.input_bytes * max(0.0, start - ready) / HOUR
        if _down_between(index, job.osts, min(ready, start), start):
            at_risk += 1
    delays.sort()
    n = len(delays)
    return StagingResult(
        mode, len(jobs), held, byte_hours, at_risk, n,
        sum(delays) / n if n else 0.0,
        delays[min(n - 1, int(0.95 * n))] if n else 0.0, delays[-1] if n else 0.0,
        sum(1 for d in delays if d > (params.delay_bound or params.jit_max_delay)))


@dataclass
class OffloadResult:
    mode: str
    results: int
    scratch_seconds_mean: float        # per result: its close to the end of its offload
    scratch_seconds_p95: float
    byte_hours: float                  # results on scratch between close and offloaded


def replay_offload(jobs: Sequence[SimJob], mode: str, params: StagingParams) -> OffloadResult:
    """Results' time on scratch between their close and their offload: "close" or "end"."""
    if mode not in ("close", "end"):
        raise ValueError(f"mode {mode!r}: expected close or end")
    k = params.results_per_job
    times: list[float] = []
    byte_hours = 0.0
    for job in jobs:
        if job.start < 0 or job.end < job.start:
            continue
        size = job.input_bytes * params.output_ratio / k
        offload = size / params.transfer_bandwidth
        run = job.end - job.start
        closes = [job.start + run * (i + 1) / k for i in range(k)]
        if mode == "close":
            # one offload job per closed result: each starts after the close is seen
            done = [c + params.close_latency + offload for c in closes]
        else:
            # the stage-out job at the end sends them one after the other
            done = [job.end + params.close_latency + offload * (i + 1) for i in range(k)]
        for closed, finished in zip(closes, done):
            times.append(finished - closed)
            byte_hours += size * (finished - closed) / HOUR
    times.sort()
    n = len(times)
    return OffloadResult(mode, n, sum(times) / n if n else 0.0,
                         times[min(n - 1, int(0.95 * n))] if n else 0.0, byte_hours)
