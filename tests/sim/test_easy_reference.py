"""The EASY model against an independent textbook EASY (tests/sim/easy_reference.py), job for job."""

from __future__ import annotations

from pathlib import Path

import pytest

from scratchkeeper.sim.run import ReplayConfig, load_trace
from scratchkeeper.sim.scheduler import simulate
from scratchkeeper.sim.workload import build_workload

from .easy_reference import easy_start_times
from .helpers import make_jobs

REPO = Path(__file__).resolve().parents[2]
SHARED_TRACES = REPO.parent / "shared" / "traces"
RICC_SAMPLE = REPO / "scratchkeeper" / "sim" / "data" / "RICC-2010-2-first5000.swf.gz"


def _compare(trace: Path, limit: int = 0) -> int:
    if not trace.exists():
        pytest.skip(f"{trace} is not here (shared/ beside the checkout)")
    config = ReplayConfig(trace=str(trace), limit=limit)
    trace_jobs, header_nodes, _, _ = load_trace(config)
    workload = build_workload(trace_jobs, config.workload_params(), header_nodes)
    simulate(workload.jobs, workload.system_nodes, backfill=True)
    reference = easy_start_times(workload.jobs, workload.system_nodes)
    differ = [(job.job_id, job.start, ref) for job, ref in zip(workload.jobs, reference)
              if job.start != ref]
    assert not differ, f"{len(differ)} of {len(reference)} start times differ, e.g. {differ[:5]}"
    return len(reference)


def test_the_reference_itself_counts_ties_at_the_shadow_time():
    jobs = make_jobs((0, 1, 100), (0, 1, 100), (0, 1, 100), (0, 1, 100),
                     (1, 3, 10), (2, 1, 1000))
    assert easy_start_times(jobs, 5) == [0, 0, 0, 0, 100, 2]


def test_every_start_time_equals_textbook_easy_on_the_hpc2n_sample():
    assert _compare(SHARED_TRACES / "HPC2N-2002-sample-3171.swf.gz") > 3000


def test_every_start_time_equals_textbook_easy_on_ricc_first_5000():
    assert _compare(RICC_SAMPLE) == 5000


def test_every_start_time_equals_textbook_easy_on_ricc_first_30000():
    assert _compare(SHARED_TRACES / "RICC-2010-2.swf.gz", limit=30_000) == 30_000
