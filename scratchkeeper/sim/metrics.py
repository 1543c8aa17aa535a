"""Wait-time statistics across runs, filtered the way the thesis's §4.7 did.

Job wait times are bimodal (many zero waits, a few very long ones), so the thesis left out the
jobs that waited zero seconds *under every configuration* before taking mean and SD of all
jobs. That needs every run of a comparison at once: it is done here, over runs that replayed
the same jobs (same :meth:`ReplayConfig.workload_key`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class WaitStats:
    jobs: int
    mean: float
    sd: float


def wait_stats(values: Sequence[float]) -> WaitStats:
    """Mean and population SD (NaN for no value)."""
    n = len(values)
    if not n:
        return WaitStats(0, math.nan, math.nan)
    mean = math.fsum(values) / n
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / n)
    return WaitStats(n, mean, sd)


def nonzero_somewhere(waits_by_run: Mapping[object, Sequence[float]]) -> list[int]:
    """Indices of the jobs that waited in at least one run (all runs replay the same jobs)."""
    runs = list(waits_by_run.values())
    if not runs:
        return []
    count = len(runs[0])
    for waits in runs:
        if len(waits) != count:
            raise ValueError("runs to compare replayed different job counts "
                             f"({count} and {len(waits)})")
    return [i for i in range(count) if any(waits[i] > 0 for waits in runs)]


def filtered_wait_stats(waits_by_run: Mapping[object, Sequence[float]]) -> dict[object, WaitStats]:
    """Each run's wait statistics over the jobs that waited in at least one of the runs."""
    keep = nonzero_somewhere(waits_by_run)
    return {run: wait_stats([waits[i] for i in keep]) for run, waits in waits_by_run.items()}


def discarded_run_seconds(log_time: Sequence[float], log_kind: Sequence[int],
                          log_job: Sequence[int], start: int, stop: int) -> dict[int, float]:
    """Per job index, the run time a kill threw away: every run but the last one.

    The replay's event log (time, kind, job) marks each run with a ``start`` and a ``stop``
    entry; a killed run is stopped and the job starts again later, so all of a job's runs
    before its last are run time lost to kills. Jobs never killed are left out.
    """
    opened: dict[int, float] = {}
    runs: dict[int, list[float]] = {}
    for when, kind, job in zip(log_time, log_kind, log_job):
        if kind == start:
            opened[job] = when
        elif kind == stop and job in opened:
            runs.setdefault(job, []).append(when - opened.pop(job))
    return {job: math.fsum(lengths[:-1]) for job, lengths in runs.items() if len(lengths) > 1}
