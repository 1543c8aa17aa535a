"""Hand-made jobs for the scheduler model tests."""

from __future__ import annotations

from scratchkeeper.sim.workload import SimJob


def make_jobs(*specs) -> list[SimJob]:
    """``(submit, nodes, run_time[, limit[, osts[, input_bytes]]])`` tuples, in submit order."""
    jobs = []
    for index, spec in enumerate(specs):
        submit, nodes, run_time, *rest = spec
        limit = rest[0] if len(rest) > 0 and rest[0] is not None else run_time
        osts = rest[1] if len(rest) > 1 else (index % 4,)
        size = rest[2] if len(rest) > 2 else 1e9
        jobs.append(SimJob(index, f"j{index}", float(submit), float(run_time), float(limit),
                           nodes, size, tuple(osts)))
    return jobs


def starts(jobs) -> list[float]:
    return [job.start for job in jobs]
