"""Trace readers: real excerpts parse, corrupt lines give FILE:LINE errors or are counted."""

from __future__ import annotations

import gzip
import lzma
import os
from pathlib import Path

import pytest

from scratchkeeper.errors import TraceError
from scratchkeeper.sim import DATA_DIR
from scratchkeeper.sim.traces import read_lanl_failures, read_lanl_jobs, read_site_csv, read_swf
from scratchkeeper.sim.workload import WorkloadParams, build_workload, from_lanl, from_site, from_swf

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
    (GOOD.replace("120", "12x"), "field 9 (requested_time) is not a finite number within ±2**53: '12x'"),
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


# --- truncated or corrupt compressed traces, nan/inf values, devices ----------------------------

def _compressed(tmp_path: Path, name: str, text: str, keep: float | None = None,
                flip: bool = False) -> Path:
    import bz2
    compress = {".gz": gzip.compress, ".xz": lzma.compress, ".bz2": bz2.compress}
    data = compress[os.path.splitext(name)[1]](text.encode())
    if keep is not None:
        data = data[: int(len(data) * keep)]
    if flip:  # damage the middle of the stream, keep its length
        middle = len(data) // 2
        data = data[:middle] + bytes(b ^ 0x5A for b in data[middle:middle + 64]) + \
            data[middle + 64:]
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _lanl_text() -> str:
    with lzma.open(LANL_EXCERPT, "rt", newline="") as stream:
        return stream.read()


@pytest.mark.parametrize("suffix", [".xz", ".gz", ".bz2"])
@pytest.mark.parametrize("strict", [True, False])
def test_truncated_failure_csv_is_one_error_naming_the_file(tmp_path, suffix, strict):
    path = _compressed(tmp_path, "failures.csv" + suffix, _lanl_text(), keep=0.5)
    with pytest.raises(TraceError) as info:
        read_lanl_failures(path, strict=strict)
    assert str(info.value).startswith(f"{path}: cannot read trace: truncated: the compressed "
                                      "data ends early, after line ")
    assert info.value.exit_code == 2 and "\n" not in str(info.value)


@pytest.mark.parametrize("suffix", [".xz", ".gz", ".bz2"])
def test_corrupt_compressed_failure_csv_is_one_error(tmp_path, suffix):
    path = _compressed(tmp_path, "failures.csv" + suffix, _lanl_text(), flip=True)
    # xz and gzip check as they go; bzip2 may first hand out a damaged block (a bad header)
    with pytest.raises(TraceError, match=rf"^{path}(:1: not a LANL failure CSV|: cannot read "
                       "trace: corrupt)"):
        read_lanl_failures(path, strict=False)


@pytest.mark.parametrize("reader, text", [
    (read_swf, SWF_HEAD + GOOD * 3000),
    (read_site_csv, "job_id,submit_time,run_time,procs\n" + "a,0,10,4\n" * 5000),
    (read_lanl_jobs, "1005600000 143 8 1005590000 1005590000 0 1005591200 1 1 2 20.1 0 / 12 /\n"
     * 3000),
])
@pytest.mark.parametrize("suffix", [".xz", ".gz"])
def test_every_reader_names_a_truncated_file(tmp_path, reader, text, suffix):
    path = _compressed(tmp_path, "trace" + suffix, text, keep=0.6)
    with pytest.raises(TraceError, match=rf"^{path}: cannot read trace: truncated"):
        reader(path, strict=False)


@pytest.mark.parametrize("special", ["/dev/zero", "fifo"])
def test_a_device_or_fifo_is_refused_not_read(tmp_path, special):
    import subprocess
    import sys
    if special == "fifo":
        special = str(tmp_path / "fifo.swf")
        os.mkfifo(special)
    # in a child with a deadline: reading either would never end
    done = subprocess.run([sys.executable, "-c", "import sys\n"
                           "from scratchkeeper.sim.traces import read_swf\n"
                           "try:\n    read_swf(sys.argv[1])\n"
                           "except Exception as err:\n    print(err)", special],
                          capture_output=True, text=True, timeout=60)
    assert done.stdout == f"{special}: cannot open trace: not a regular file\n", done.stderr


def _strict_fails_lenient_skips(reader, path, message: str):
    """``reader(path)`` raises ``message``; the trace read with ``strict=False``."""
    with pytest.raises(TraceError, match=message):
        reader(path)
    return reader(path, strict=False)


@pytest.mark.parametrize("field, value", [
    (1, "nan"), (1, "inf"), (3, "-inf"), (3, "NaN"), (8, "Infinity"), (1, "1e300"),
    (5, "nan"), (6, "inf"), (0, str(2 ** 60)),
])
def test_swf_nan_inf_and_huge_values_are_bad_lines(tmp_path, field, value):
    parts = GOOD.split()
    parts[field] = value
    path = _write(tmp_path, "t.swf", SWF_HEAD + GOOD + " ".join(parts) + "\n" + GOOD)
    trace = _strict_fails_lenient_skips(read_swf, path, rf"^{path}:7: SWF field {field + 1} .* "
                                        "is not ")
    assert len(trace.jobs) == 2 and trace.report.skipped == {"not a number": 1}


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400"])
def test_failure_down_time_nan_or_inf_is_a_bad_row(tmp_path, value):
    lines = _lanl_text().splitlines(keepends=True)[:5]
    cells = lines[2].split(",")
    cells[18] = value
    lines[2] = ",".join(cells)
    path = _write(tmp_path, "f.csv", "".join(lines))
    trace = _strict_fails_lenient_skips(read_lanl_failures, path,
                                        rf"^{path}:3: bad failure record: .* is not a finite")
    assert len(trace.records) == 3 and trace.report.skipped == {"bad value": 1}


@pytest.mark.parametrize("row", ["b,nan,10,4", "b,0,inf,4", "b,0,10,4,-inf", "b,0,10,4,,,nan"])
def test_site_csv_nan_inf_are_bad_rows(tmp_path, row):
    path = _write(tmp_path, "s.csv", "job_id,submit_time,run_time,procs,requested_time,"
                  "memory_kb_per_proc,input_bytes\na,0,10,4\n" + row + "\n")
    with pytest.raises(TraceError, match=rf"^{path}:3: bad site CSV row: .* is not a finite"):
        read_site_csv(path)


def test_lanl_job_cpu_nan_is_a_bad_line(tmp_path):
    path = _write(tmp_path, "jobs.txt", "1005600000 143 8 1005590000 1005590000 0 1005591200 "
                  "nan 1 2 20.1 0 / 12 /\n")
    with pytest.raises(TraceError, match=rf"^{path}:1: bad LANL job line: 'nan' is not"):
        read_lanl_jobs(path)


def test_a_csv_field_past_the_csv_limit_is_a_bad_row(tmp_path):
    lines = _lanl_text().splitlines(keepends=True)[:4]
    lines.insert(2, "20," + "x" * 200_000 + "\n")
    path = _write(tmp_path, "f.csv", "".join(lines))
    trace = read_lanl_failures(path, strict=False)
    assert len(trace.records) == 3 and trace.report.skipped == {"not CSV": 1}
    assert trace.report.first_errors[0].startswith(f"{path}:3: not a CSV record: field larger")


def test_report_lines_give_the_count_then_the_first_errors(tmp_path):
    from scratchkeeper.sim.traces import iter_records
    bad = "".join(f"{i} 0 0\n" for i in range(7))
    trace = read_swf(_write(tmp_path, "t.swf", SWF_HEAD + GOOD + bad), strict=False)
    lines = list(iter_records(trace.report))
    assert lines[0] == f"{tmp_path / 't.swf'}: skipped 7 of 8 line(s) (7 field count); the first:"
    assert lines[1:] == [f"{tmp_path / 't.swf'}:{n}: SWF record has 3 fields, expected 18"
                         for n in range(7, 12)]
    assert list(iter_records(read_swf(RICC_EXCERPT, limit=10).report)) == []


def test_failure_stats_count_nodes_without_records():
    from scratchkeeper.sim.outages import failure_stats
    records = read_lanl_failures(LANL_EXCERPT).records
    stats = failure_stats(records)
    assert (stats.system_nodes, stats.nodes_with_records, stats.silent_nodes) == (512, 400, 112)
    lost = failure_stats([r for r in records if r.node % 2 == 0])
    assert lost.silent_nodes == 512 - len({r.node for r in records if r.node % 2 == 0})
    warning, = lost.warnings("f.csv")
    assert warning.startswith(f"f.csv: warning: {lost.silent_nodes} of the system's 512 nodes")
    whole = failure_stats([r for r in records if r.node < 4], system_nodes=4)
    assert whole.warnings("f.csv") == []


@pytest.mark.parametrize("value", ["0", "-5", str(10 ** 30), "1e9", "many"])
def test_swf_header_sizes_out_of_range_count_as_absent(tmp_path, value):
    trace = read_swf(_write(tmp_path, "t.swf", f"; MaxNodes: {value}\n; MaxProcs: {value}\n"
                            + GOOD))
    assert trace.header.max_nodes is None and trace.header.max_procs is None
    assert read_swf(_write(tmp_path, "u.swf", SWF_HEAD + GOOD)).header.max_procs == 16
