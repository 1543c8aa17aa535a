"""Trace readers: real excerpts parse, corrupt lines give FILE:LINE errors or are counted."""

from __future__ import annotations

import gzip
import lzma
import os
from pathlib import Path

import pytest

from scratchkeeper.errors import TraceError
from scratchkeeper.sim import DATA_DIR
from scratchkeeper.sim.traces import (read_lanl_failures, read_lanl_jobs, read_site_csv,
                                      read_swf)
from scratchkeeper.sim.workload import (WorkloadParams, build_workload, from_lanl, from_site,
                                        from_swf)

HERE = Path(__file__).parent / "data"
RICC_EXCERPT = os.path.join(DATA_DIR, "RICC-2010-2-first5000.swf.gz")
LANL_EXCERPT = os.path.join(DATA_DIR, "LA-UR-05-7318-system20.csv.xz")
SHARED = Path(__file__).resolve().parents[3] / "shared" / "traces"

SWF_HEAD = "; Version: 2.2\n; MaxNodes: 4\n; MaxProcs: 16\n; Queue:  1 short\n; Queue:  2 long\n"
GOOD = "    1     0   5    60   4   -1   -1   4   120   1000  1  1  1  -1  1  -1  -1  -1\n"


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_swf_excerpt_reads_header_and_all_fields():
    trace = read_swf(RICC_EXCERPT)
    assert len(trace.jobs) == 5000 and trace.report.skipped_total == 0
    assert trace.header.max_nodes == 1024 and trace.header.max_procs == 8192
    assert trace.header.unix_start_time == 1272639895
    first = trace.jobs[0]
    assert (first.job_id, first.submit_time, first.run_time, first.allocated_procs,
            first.requested_time, first.requested_memory, first.status, first.queue) == \
        (1, 0, 222, 80, 14400, 1200000, 1, 1)
    assert first.think_time == -1


def test_swf_repeated_header_keys_keep_every_value(tmp_path):
    trace = read_swf(_write(tmp_path, "t.swf", SWF_HEAD + GOOD))
    assert trace.header.fields["Queue"] == ["1 short", "2 long"]


def test_swf_fractional_cpu_time_is_accepted(tmp_path):
    line = GOOD.replace("  -1   -1   4", "  552.21   -1   4", 1)
    trace = read_swf(_write(tmp_path, "t.swf", SWF_HEAD + line))
    assert trace.jobs[0].average_cpu_time == pytest.approx(552.21)


@pytest.mark.parametrize("bad, message", [
    ("    2     0   5    60   4   -1   -1   4   120\n", "has 9 fields, expected 18"),
    (GOOD.replace("120", "12x"), "field 9 (requested_time) is not a number: '12x'"),
    (GOOD.replace("    1     0", "    1    -5"), "negative submit time"),
    (GOOD.replace("    60", "  60.5"), "field 4 (run_time) is not an integer: '60.5'"),
])
def test_swf_corrupt_line_names_file_and_line(tmp_path, bad, message):
    path = _write(tmp_path, "bad.swf", SWF_HEAD + GOOD + bad)
    with pytest.raises(TraceError) as err:
        read_swf(path)
    assert str(err.value).startswith(f"{path}:7: ") and message in str(err.value)
    assert err.value.exit_code == 2


def test_swf_integral_fields_written_as_decimals_are_accepted(tmp_path):
    trace = read_swf(_write(tmp_path, "t.swf", SWF_HEAD + GOOD.replace("    60", "  60.0")))
    assert trace.jobs[0].run_time == 60 and isinstance(trace.jobs[0].run_time, int)


def test_swf_lenient_mode_skips_and_counts(tmp_path):
    path = _write(tmp_path, "bad.swf", SWF_HEAD + GOOD + "garbage\n" + GOOD + "1 2 3\n")
    trace = read_swf(path, strict=False)
    assert len(trace.jobs) == 2
    assert trace.report.skipped == {"field count": 2}
    assert trace.report.first_errors[0].startswith(f"{path}:7: ")


def test_swf_gzip_and_missing_file(tmp_path):
    path = tmp_path / "t.swf.gz"
    with gzip.open(path, "wt") as stream:
        stream.write(SWF_HEAD + GOOD)
    assert len(read_swf(path).jobs) == 1
    with pytest.raises(TraceError, match="cannot open trace"):
        read_swf(tmp_path / "absent.swf")


def test_lanl_failures_excerpt():
    trace = read_lanl_failures(LANL_EXCERPT)
    assert len(trace.records) == 2478
    first = trace.records[0]
    # The earliest record (12/20/2001 8:00) kept a node down 8955 minutes.
    assert (first.system, first.system_nodes, first.down_seconds) == (20, 512, 8955 * 60)
    assert first.cause == "Hardware: CPU"
    assert [r.started for r in trace.records] == sorted(r.started for r in trace.records)


def test_lanl_failures_bad_date_names_the_line(tmp_path):
    with lzma.open(LANL_EXCERPT, "rt") as stream:
        lines = stream.read().splitlines()[:4]
    lines[3] = lines[3].replace("1/3/2002 9:00", "13/45/2002 9:00")
    path = _write(tmp_path, "f.csv", "\n".join(lines) + "\n")
    with pytest.raises(TraceError, match=rf"^{path}:4: bad failure record"):
        read_lanl_failures(path)
    assert len(read_lanl_failures(path, strict=False).records) == 2


def test_lanl_failures_wrong_header(tmp_path):
    path = _write(tmp_path, "f.csv", "a,b,c\n1,2,3\n")
    with pytest.raises(TraceError, match=rf"^{path}:1: not a LANL failure CSV"):
        read_lanl_failures(path)


def test_lanl_job_log_format():
    jobs, report = read_lanl_jobs(HERE / "lanl-system20-jobs.txt")
    assert report.records == 4
    assert jobs[0].run_time == 1005600000 - 1005591200
    assert jobs[3].node_ranges == ((20, 21), (30, 31))
    assert jobs[2].status == "1" and jobs[1].nprocs == 64
    workload = build_workload(from_lanl(jobs), WorkloadParams(procs_per_node=4))
    assert [j.nodes for j in workload.jobs] == [2, 16, 1, 4]


@pytest.mark.parametrize("bad, message", [
    ("1005600000 143 8 1005590000 / 12 /", "has 4 fields before the node list, expected 12"),
    ("1005600000 143 8 1005590000 1005590000 0 1005591200 35100.5 120.25 35220 20.1 0 / 12-3 /",
     "runs backwards"),
    ("1005600000 143 8 1005590000 1005590000 0 1005601200 1 1 2 20.1 0 / 12 /",
     "times out of order"),
])
def test_lanl_job_log_corrupt_lines(tmp_path, bad, message):
    path = _write(tmp_path, "jobs.txt", "# header\n" + bad + "\n")
    with pytest.raises(TraceError, match=rf"^{path}:2: .*{message}"):
        read_lanl_jobs(path)


def test_site_csv():
    jobs, report = read_site_csv(HERE / "site-jobs.csv")
    assert [j.job_id for j in jobs] == ["a1", "a2", "a3"]
    workload = build_workload(from_site(jobs), WorkloadParams(procs_per_node=4))
    sizes = [j.input_bytes for j in workload.jobs]
    assert sizes[0] == 2000000 * 1024 * 16 and sizes[1] == 5e9 and sizes[2] > 0


def test_site_csv_errors(tmp_path):
    path = _write(tmp_path, "s.csv", "job_id,submit_time\n1,0\n")
    with pytest.raises(TraceError, match=rf"^{path}:1: .*run_time, procs"):
        read_site_csv(path)
    path = _write(tmp_path, "s.csv", "job_id,submit_time,run_time,procs\na,0,10,4\nb,x,10,4\n")
    with pytest.raises(TraceError, match=rf"^{path}:3: bad site CSV row"):
        read_site_csv(path)


def test_workload_cuts_run_time_at_the_limit_and_drops_unrunnable_jobs(tmp_path):
    lines = [GOOD,
             GOOD.replace("    60   4", "   500   4"),             # ran past its 120 s limit
             GOOD.replace("    60   4   -1", "    -1   4   -1"),     # never ran
             GOOD.replace("   4   -1   -1   4", "  64   -1   -1  64")]  # larger than the system
    trace = read_swf(_write(tmp_path, "t.swf", SWF_HEAD + "".join(lines)))
    workload = build_workload(from_swf(trace.jobs), WorkloadParams(), header_nodes=16)
    assert [j.run_time for j in workload.jobs] == [60, 120]
    assert workload.dropped == {"unknown run time": 1, "larger than the system": 1}


def test_workload_stripes_follow_count_and_size():
    trace = read_swf(RICC_EXCERPT, limit=200)
    params = WorkloadParams(stripe_count=8, stripe_size=1 << 20, ost_count=64)
    jobs = build_workload(from_swf(trace.jobs), params).jobs
    assert all(len(set(j.osts)) == len(j.osts) == 8 for j in jobs)   # every input is >= 8 MiB
    assert all(0 <= o < 64 for j in jobs for o in j.osts)
    again = build_workload(from_swf(trace.jobs), params).jobs
    assert [j.osts for j in again] == [j.osts for j in jobs]


@pytest.mark.skipif(not (SHARED / "RICC-2010-2.swf.gz").exists(),
                    reason="full RICC trace not present in ../shared/traces")
def test_full_ricc_trace_has_every_job():
    trace = read_swf(SHARED / "RICC-2010-2.swf.gz")
    assert len(trace.jobs) == 447794 == trace.header.get_int("MaxJobs")
    assert trace.report.skipped_total == 0


@pytest.mark.skipif(not (SHARED / "LA-UR-05-7318-failure-data-1996-2005.csv.xz").exists(),
                    reason="LANL failure data not present in ../shared/traces")
def test_full_lanl_failure_data_system_20():
    trace = read_lanl_failures(SHARED / "LA-UR-05-7318-failure-data-1996-2005.csv.xz", system=20)
    assert len(trace.records) == 2478


@pytest.mark.skipif(not (SHARED / "HPC2N-2002-sample-3171.swf.gz").exists(),
                    reason="HPC2N sample not present in ../shared/traces")
def test_hpc2n_sample_with_fractional_fields_and_full_header():
    trace = read_swf(SHARED / "HPC2N-2002-sample-3171.swf.gz")
    # 3,171 lines after the header, the last one empty: 3,170 job records.
    assert len(trace.jobs) == 3170 and trace.report.skipped_total == 0
    assert trace.header.max_procs == 240 and trace.header.get("Note") == "uses MAUI scheduler"
    assert trace.header.fields["Partition"] == ["1 DEFAULT", "2 ALL"]
    assert any(not j.average_cpu_time.is_integer() for j in trace.jobs if j.average_cpu_time > 0)
