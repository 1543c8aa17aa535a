"""The C path of reading an SWF trace and building its workload (issue 41) gives the jobs the
Python reference gives, field for field, and leaves every file it does not read exactly to it."""

from __future__ import annotations

import gzip
import math
import os
import random
import re
from array import array
from pathlib import Path

import pytest

from scratchkeeper.errors import TraceError
from scratchkeeper.sim import DATA_DIR, trace_columns
from scratchkeeper.sim.run import ReplayConfig, _native_workload, _reference_workload, replay_schedule
from scratchkeeper.sim.scheduler import using_core
from scratchkeeper.sim.workload import WorkloadParams

pytestmark = pytest.mark.skipif(trace_columns._native is None, reason="C extension not built")

RICC_EXCERPT = os.path.join(DATA_DIR, "RICC-2010-2-first5000.swf.gz")
HPC2N = Path(__file__).parents[3] / "shared" / "traces" / "HPC2N-2002-sample-3171.swf.gz"


def _phase(name):
    return None


def _fields(workload):
    return ([(j.index, j.job_id, j.submit, j.run_time, j.limit, j.nodes, j.input_bytes, j.osts,
              j.recorded_wait) for j in workload.jobs],
            workload.system_nodes, dict(workload.dropped), workload.span)


@pytest.mark.parametrize("settings", [
    {},
    {"input_model": "peak-memory", "stripe_count": 8, "seed": 7, "procs_per_node": 8},
    {"stripe_count": 32, "ost_count": 40, "start_day": 2, "days": 3, "load_factor": 1.3},
    {"limit": 1000, "system_nodes": 64, "stripe_count": 3, "ost_count": 5},
])
@pytest.mark.parametrize("trace", [RICC_EXCERPT, str(HPC2N)])
def test_the_c_path_builds_the_references_jobs(settings, trace):
    if not os.path.exists(trace):
        pytest.skip(f"{trace} is not there (../shared/traces beside the checkout)")
    config = ReplayConfig(trace=trace, **settings)
    native = _native_workload(config, _phase)
    reference = _reference_workload(config, _phase)
    assert native is not None
    assert _fields(native[0]) == _fields(reference[0])
    assert native[1:] == reference[1:]


@pytest.mark.parametrize("ost_count, stripe_count", [(64, 4), (20, 4), (40, 32), (7, 6), (2, 2)])
def test_the_draws_are_pythons(ost_count, stripe_count):
    params = WorkloadParams(ost_count=ost_count, stripe_count=stripe_count, seed=11)
    drawn = trace_columns.draw_inputs(params, 3000)
    assert drawn is not None
    fallback, osts = drawn
    rng = random.Random(11)
    log_median = math.log(params.input_median_bytes)
    for job in range(3000):
        assert fallback[job] == rng.lognormvariate(log_median, params.input_sigma)
        assert list(osts[job * stripe_count:(job + 1) * stripe_count]) == \
            rng.sample(range(ost_count), stripe_count)


HEADER = "; MaxProcs: 16\n; Note: plain\n"
PLAIN = "1 0 5 100 4 -1 -1 4 200 -1 1 1 1 -1 1 -1 -1 -1\n"


def _swf(tmp_path, body: str, name="t.swf") -> str:
    path = tmp_path / name
    path.write_bytes(body.encode())
    return str(path)


@pytest.mark.parametrize("line", [
    "2 10 0 100 4.0 -1 -1 4 200 -1 1 1 1 -1 1 -1 -1 -1",      # an integer written 4.0
    "2 10 0 100 4 1e3 -1 4 200 -1 1 1 1 -1 1 -1 -1 -1",       # an exponent
    "2 10 0 100 4 -1 -1 4 200 -1 1 1 1 -1 1 -1 -1",           # 17 fields
    "2 -10 0 100 4 -1 -1 4 200 -1 1 1 1 -1 1 -1 -1 -1",       # a negative submit time
    "2 10 0 100 4 -1 -1 4 200 -1 1 1 1 -1 1 -1 -1 9999999999999999",   # 16 digits
    "2 10 0 100 4 -1 -1 4 200 -1 1 1 1 -1 1 -1 -1 -1\r",      # a CR line end
    "2 10 0 100 4 -1 -1 4 200 -1 1 1 1 -1 1 -1 -1 \u00a0-1",  # a non-ASCII space
    "\x0c2 10 0 100 4 -1 -1 4 200 -1 1 1 1 -1 1 -1 -1 -1",    # a form feed
])
def test_what_the_c_parser_does_not_read_exactly_goes_to_the_reference(tmp_path, line):
    path = _swf(tmp_path, HEADER + PLAIN + line + "\n")
    assert trace_columns.read_swf_columns(path) is None
    config = ReplayConfig(trace=path)
    with using_core("native"):
        try:
            expected = _fields(_reference_workload(config, _phase)[0])
        except TraceError as err:       # a line the reference refuses: the same error
            with pytest.raises(TraceError, match=re.escape(str(err))):
                replay_schedule(config)
            return
        assert _fields(replay_schedule(config).workload) == expected


def test_the_c_parser_reads_headers_limits_and_fractions(tmp_path):
    body = (HEADER + PLAIN + "  \t\n" + "\t2  7 0 50 2 12.5 .25 2 60 -1 1 1 1 -1 1 -1 -1 -1  \n"
            + "; MaxNodes: 4\n" + "3 9 0 50 2 -0 5. 2 60 -1 1 1 1 -1 1 -1 -1 -1")
    path = _swf(tmp_path, body, "t.swf.gz")
    Path(path).write_bytes(gzip.compress(body.encode()))
    read = trace_columns.read_swf_columns(path)
    assert read is not None and len(read) == 3
    assert read.columns["job_id"] == [1, 2, 3] and read.columns["submit_time"] == [0, 7, 9]
    assert read.columns["average_cpu_time"] == [-1.0, 12.5, -0.0]
    assert read.columns["used_memory"] == [-1.0, 0.25, 5.0]
    assert read.header.fields == {"MaxProcs": ["16"], "Note": ["plain"], "MaxNodes": ["4"]}
    first = trace_columns.read_swf_columns(path, limit=2)
    assert first is not None and len(first) == 2 and "MaxNodes" not in first.header.fields


def test_kept_workloads_are_handed_out_as_fresh_jobs():
    config = ReplayConfig(trace=RICC_EXCERPT, limit=500)
    with using_core("native"):
        first = replay_schedule(config).workload.jobs
        second = replay_schedule(config).workload.jobs
    assert not set(map(id, first)) & set(map(id, second))
    assert [(j.start, j.end) for j in first] == [(j.start, j.end) for j in second]
    assert all(j.start >= 0 for j in first)
    fresh = trace_columns.KeptWorkload.keep(
        _native_workload(config, _phase)[0]).fresh_copy().jobs   # type: ignore[index]
    assert all(j.start == -1.0 and j.kills == 0 for j in fresh)


def test_a_state_of_another_length_is_refused():
    with pytest.raises(ValueError, match="words"):
        trace_columns._native.draw_inputs(array("I", [0] * 10).tobytes(), 0, 1, 0.0, 1.0,
                                          64, 4, 21)
