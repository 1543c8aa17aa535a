"""Bad input to the trace readers, ``replay``, ``sweep`` and ``report``: one line naming the
file and line, exit 2, never a hang, a MemoryError or a traceback (issue 30)."""

from __future__ import annotations

import lzma
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from scratchkeeper.cli import main
from scratchkeeper.errors import TraceError
from scratchkeeper.sim import DATA_DIR
from scratchkeeper.sim.traces import MAX_LINE, read_lanl_failures, read_lanl_jobs, read_site_csv, read_swf

RICC_EXCERPT = os.path.join(DATA_DIR, "RICC-2010-2-first5000.swf.gz")
LANL_EXCERPT = os.path.join(DATA_DIR, "LA-UR-05-7318-system20.csv.xz")
GOOD_SWF = "    1     0   5    60   4   -1   -1   4   120   1000  1  1  1  -1  1  -1  -1  -1\n"


def _lanl_lines() -> list[str]:
    with lzma.open(LANL_EXCERPT, "rt", newline="") as stream:
        return stream.read().splitlines(keepends=True)


def _limits():
    # a reader that regressed to holding a whole line, or reading /dev/zero, fails here
    resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))


def _child(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scratchkeeper", *argv], capture_output=True,
                          text=True, timeout=120, preexec_fn=_limits,
                          cwd=Path(__file__).resolve().parents[2])


# --- a line past MAX_LINE: a decompression bomb --------------------------------------------------

@pytest.mark.parametrize("reader, head", [
    (read_swf, "; Version: 2.2\n" + GOOD_SWF),
    (read_lanl_failures, "".join(_lanl_lines()[:3])),
    (read_lanl_jobs, ""),
    (read_site_csv, "job_id,submit_time,run_time,procs\n1,0,10,4\n"),
])
@pytest.mark.parametrize("strict", [True, False])
def test_a_line_past_the_cap_is_one_error_naming_it(tmp_path, reader, head, strict):
    path = tmp_path / "trace.xz"
    with lzma.open(path, "wt") as stream:
        stream.write(head + "7" * (MAX_LINE + 10) + "\n")
    line = head.count("\n") + 1
    with pytest.raises(TraceError) as caught:
        reader(path, strict=strict)
    assert str(caught.value) == (f"{path}:{line}: a line longer than {MAX_LINE:,} characters: "
                                 "not a trace (or a corrupt one)")


def test_a_decompression_bomb_is_refused_within_bounded_memory(tmp_path):
    """45 KB of .xz that is one 300 MB line: before, the reader held the line (and died of
    MemoryError under this child's 512 MiB); now it stops at MAX_LINE characters."""
    bomb = tmp_path / "failures.csv.xz"
    compressor = lzma.LZMACompressor(preset=1)
    block = b"7" * (1 << 20)
    with open(bomb, "wb") as stream:
        for _ in range(300):
            stream.write(compressor.compress(block))
        stream.write(compressor.flush())
    assert bomb.stat().st_size < 100_000
    done = _child("replay", RICC_EXCERPT, "--limit", "50", "--failures", str(bomb),
                  "--no-progress")
    assert done.returncode == 2, done.stderr
    assert done.stderr == (f"{bomb}:1: a line longer than {MAX_LINE:,} characters: not a trace "
                           "(or a corrupt one)\n")


# --- failure records: node counts and numbers -----------------------------------------------------

def _failures_with(tmp_path, column: int, value: str) -> Path:
    lines = _lanl_lines()
    cells = lines[3].split(",")
    cells[column] = value
    lines[3] = ",".join(cells)
    path = tmp_path / "failures.csv"
    path.write_text("".join(lines))
    return path


@pytest.mark.parametrize("column, value, message", [
    (2, "0", "nodes '0' is not a whole number from 1 to 2147483647"),
    (2, "-512", "nodes '-512' is not a whole number from 1 to 2147483647"),
    (5, "-3", "nodenum '-3' is not a whole number from 0 to 2147483647"),
    (5, "9" * 500, "nodenum '99999999999999999999...' is not a whole number from 0 to "
                   "2147483647"),
    (5, "1_000", "nodenum '1_000' is not a whole number"),
    (5, "٣", "nodenum '٣' is not a whole number"),  # a digit, but not an ASCII one
    (0, "2" * 500, "System '22222222222222222222...' is not a whole number"),
])
def test_a_bad_node_count_or_number_is_a_bad_record(tmp_path, column, value, message):
    path = _failures_with(tmp_path, column, value)
    with pytest.raises(TraceError) as caught:
        read_lanl_failures(path, system=20)
    assert str(caught.value).startswith(f"{path}:4: bad failure record: {message}")
    lenient = read_lanl_failures(path, system=20, strict=False)
    assert len(lenient.records) == len(_lanl_lines()) - 2
    assert lenient.report.skipped_total == 1


def test_a_system_of_zero_nodes_is_one_line_not_a_division_by_zero(tmp_path, capsys):
    lines = _lanl_lines()
    lines[1:] = [",".join(["20", "cluster", "0", *line.split(",")[3:]]) for line in lines[1:]]
    failures = tmp_path / "failures.csv"
    failures.write_text("".join(lines))
    assert main(["replay", RICC_EXCERPT, "--limit", "50", "--failures", str(failures),
                 "--strict", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err == (f"{failures}:2: bad failure record: nodes '0' is not a whole number from 1 "
                   "to 2147483647\n")


# --- report, sweep: the shared bounded reader --------------------------------------------------

@pytest.mark.parametrize("command", ["report", "sweep"])
@pytest.mark.parametrize("special", ["fifo", "/dev/zero", "folder"])
def test_report_and_sweep_refuse_a_fifo_a_device_or_a_folder(tmp_path, command, special):
    if special == "fifo":
        special = str(tmp_path / "results.csv")
        os.mkfifo(special)  # nobody writes: a blocking open would wait for ever
    elif special == "folder":
        special = str(tmp_path)
    done = _child(command, special)
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"{special}: cannot read: not a regular file\n"


def test_report_of_a_csv_that_is_not_utf8_names_the_line(tmp_path, capsys):
    results = tmp_path / "results.csv"
    results.write_bytes(b"policy,stripe_count,wait_mean\nnone,4,1.0\nnon\xe9,8,2.0\n")
    assert main(["report", str(results)]) == 2
    assert capsys.readouterr().err == f"{results}:3: not UTF-8 text: byte 0xe9 at column 4\n"


def test_report_of_a_csv_the_csv_module_refuses_names_the_line(tmp_path, capsys):
    results = tmp_path / "results.csv"
    results.write_text("policy,stripe_count,wait_mean\nnone,4,1.0\nnone,8," + "9" * 200_000
                       + "\n")
    assert main(["report", str(results)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{results}:3: not a CSV record: field larger than field limit")
    assert err.count("\n") == 1


def test_a_sweep_file_that_is_not_utf8_names_the_line(tmp_path, capsys):
    sweep = tmp_path / "sweep.toml"
    sweep.write_bytes(b"[replay]\ntrace = \"t\xff.swf\"\n")
    assert main(["sweep", str(sweep)]) == 2
    assert capsys.readouterr().err == f"{sweep}:2: not UTF-8 text: byte 0xff at column 11\n"


def test_a_sweep_file_far_larger_than_one_is_refused_at_its_line(tmp_path, capsys):
    sweep = tmp_path / "sweep.toml"
    sweep.write_text("# padding\n" * 200_000)
    assert main(["sweep", str(sweep)]) == 2
    assert capsys.readouterr().err == (f"{sweep}:{(1 << 20) // 10 + 1}: larger than 1 MiB: not "
                                       "a sweep file\n")


def test_a_site_csv_row_the_csv_module_refuses_is_named_by_its_own_line(tmp_path):
    """csv.DictReader's line_num lags a row behind when a row fails: the line is the row's."""
    path = tmp_path / "jobs.csv"
    path.write_text("job_id,submit_time,run_time,procs\n1,0,10,4\n2,0," + "9" * 200_000
                    + ",4\n3,5,10,4\n")
    with pytest.raises(TraceError) as caught:
        read_site_csv(path)
    assert str(caught.value).startswith(f"{path}:3: not a CSV record: field larger")
