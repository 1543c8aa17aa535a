"""``scratchkeeper replay``, ``sweep`` and ``report`` from the command line."""

from __future__ import annotations

import argparse
import csv
import os
from pathlib import Path

import pytest

from scratchkeeper.cli import main
from scratchkeeper.cli.replay import parse_size
from scratchkeeper.runner import CommandResult, set_runner
from scratchkeeper.sim import DATA_DIR

RICC_EXCERPT = os.path.join(DATA_DIR, "RICC-2010-2-first5000.swf.gz")
LANL_EXCERPT = os.path.join(DATA_DIR, "LA-UR-05-7318-system20.csv.xz")


def test_replay_prints_a_summary_table_and_writes_csv(tmp_path, capsys):
    out = tmp_path / "rows.csv"
    code = main(["replay", RICC_EXCERPT, "--limit", "800", "--failures", LANL_EXCERPT,
                 "--policy", "ideal", "none", "--strategy", "shortcut", "--alpha", "0.5", "inf",
                 "--stripe-count", "8", "--ost-count", "16", "--no-progress", "--csv", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    assert "jobs 800" in text and "at risk %" in text
    rows = list(csv.DictReader(out.open()))
    assert [(r["policy"], r["alpha"]) for r in rows] == [
        ("ideal", "0.5"), ("ideal", "inf"), ("none", "0.5"), ("none", "inf")]
    assert all(r["filtered_jobs"] == rows[0]["filtered_jobs"] for r in rows)


def test_replay_corrupt_trace_exits_2_naming_the_line(tmp_path, capsys):
    trace = tmp_path / "bad.swf"
    trace.write_text("; MaxProcs: 8\n1 0 0 10 4 -1 -1 4 60 -1 1 1 1 -1 1 -1 -1 -1\n1 0 0 10\n")
    assert main(["replay", str(trace), "--strict", "--no-progress"]) == 2
    assert capsys.readouterr().err.strip() == f"{trace}:3: SWF record has 4 fields, expected 18"
    # Without --strict the line is skipped and reported: the count, then the line itself.
    assert main(["replay", str(trace), "--no-progress"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"{trace}: skipped 1 of 2 line(s) (1 field count); the first:",
        f"{trace}:3: SWF record has 4 fields, expected 18"]


def test_replay_missing_trace_and_bad_option(tmp_path, capsys):
    assert main(["replay", str(tmp_path / "none.swf"), "--no-progress"]) == 2
    assert "no such trace file" in capsys.readouterr().err
    assert main(["replay", RICC_EXCERPT, "--stripe-count", "40", "--no-progress"]) == 2
    assert "stripe count must be within 2..32" in capsys.readouterr().err


def _sweep_file(tmp_path: Path) -> Path:
    path = tmp_path / "sweep.toml"
    path.write_text(f"""
[replay]
trace = "{RICC_EXCERPT}"
failures = "{LANL_EXCERPT}"
limit = 600
ost_count = 16

[[grid]]
policy = ["none", "on-the-fly"]
stripe_count = [2, 8]
strategy = ["fcfs", "dispatch-aware"]
alpha = [0.5, inf]

[[grid]]
policy = ["ideal"]
stripe_count = [2]
""")
    return path


def test_sweep_runs_locally_and_report_draws_the_figures(tmp_path, capsys):
    sweep = _sweep_file(tmp_path)
    output = tmp_path / "out"
    assert main(["sweep", str(sweep), "--output", str(output), "--workers", "1"]) == 0
    rows = list(csv.DictReader((output / "results.csv").open()))
    assert len(rows) == 2 * 2 * 2 * 2 + 1
    # One schedule per (policy, stripe count): 5 tasks for 17 rows.
    assert len(list((output / "tasks").glob("*.json"))) == 5
    assert len({r["filtered_jobs"] for r in rows}) == 1
    # Not a terminal (pytest captures stderr): a line per finished run with the time left.
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("sweep:")]
    assert [line.split(",")[0] for line in lines] == [f"sweep: {n}/17 runs done"
                                                      for n in range(1, 18)]
    assert all("left" in line for line in lines)
    assert main(["sweep", str(sweep), "--output", str(output), "--workers", "1",
                 "--no-progress"]) == 0
    assert "tasks done" not in capsys.readouterr().err
    assert main(["report", str(output / "results.csv"), "--output", str(tmp_path / "rep")]) == 0
    written = sorted(p.name for p in (tmp_path / "rep").iterdir())
    assert written == ["replication_vs_alpha.png", "summary.rst", "wait_vs_stripe_count.png"]
    assert all((tmp_path / "rep" / name).stat().st_size > 10000 for name in written
               if name.endswith(".png"))
    table = (tmp_path / "rep" / "summary.rst").read_text()
    assert "0.14 -> 2.09" in table and "stripe 2 -> 8" in table


def test_sweep_bad_file_names_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("[replay]\ntrace = \n")
    assert main(["sweep", str(bad)]) == 2
    assert capsys.readouterr().err.startswith(f"{bad}:2: not valid TOML")
    bad.write_text("[replay]\ntrace = 't'\n[grid]\nstripes = [2]\n")
    assert main(["sweep", str(bad)]) == 2
    assert "unknown replay setting 'stripes'" in capsys.readouterr().err


class _FakeSbatch:
    """Answers sbatch --parsable with job ids and records every argv."""

    def __init__(self):
        self.calls = []

    def run(self, argv, **kwargs):
        self.calls.append(list(argv))
        return CommandResult(tuple(argv), 0, f"{4100 + len(self.calls)}\n", "", 0.01)


def test_sweep_slurm_submits_an_array_and_a_collect_job(tmp_path, capsys):
    sweep = _sweep_file(tmp_path)
    output = tmp_path / "out"
    fake = _FakeSbatch()
    previous = set_runner(fake)
    try:
        assert main(["sweep", str(sweep), "--output", str(output), "--slurm",
                     "--partition", "debug"]) == 0
    finally:
        set_runner(previous)
    array_call, collect_call = fake.calls
    assert array_call[:2] == ["sbatch", "--parsable"]
    script = Path(array_call[2]).read_text()
    assert "#SBATCH --array=0-4" in script and "#SBATCH --partition=debug" in script
    assert '--task "$SLURM_ARRAY_TASK_ID"' in script
    assert "--dependency=afterany:4101" in collect_call
    assert any(a.startswith("--wrap=") and "--collect" in a for a in collect_call)
    assert "job array 4101" in capsys.readouterr().out
    # What one array task does, then the collect job: task 0 alone leaves 4 missing.
    assert main(["sweep", str(sweep), "--output", str(output), "--task", "0"]) == 0
    assert main(["sweep", str(sweep), "--output", str(output), "--collect"]) == 1
    assert "tasks without a result: 1, 2, 3, 4" in capsys.readouterr().err


def test_report_rejects_a_file_that_is_not_results(tmp_path, capsys):
    other = tmp_path / "x.csv"
    other.write_text("a,b\n1,2\n")
    assert main(["report", str(other)]) == 2
    assert capsys.readouterr().err.startswith(f"{other}:1: not a sweep results.csv")


def test_sizes_and_rates_on_the_command_line():
    assert parse_size("1e8") == 1e8
    assert parse_size("100MB/s") == parse_size("100M") == 100 * 1024 ** 2
    assert parse_size("1GiB") == 1024 ** 3
    with pytest.raises(argparse.ArgumentTypeError, match="not a size"):
        parse_size("fast")


def test_collect_ignores_results_of_another_grid(tmp_path, capsys):
    sweep = _sweep_file(tmp_path)
    output = tmp_path / "out"
    assert main(["sweep", str(sweep), "--output", str(output), "--task", "0"]) == 0
    assert main(["sweep", str(sweep), "--output", str(output), "--collect"]) == 1
    assert "tasks without a result: 1, 2, 3, 4" in capsys.readouterr().err
    sweep.write_text(sweep.read_text().replace("limit = 600", "limit = 500"))
    assert main(["sweep", str(sweep), "--output", str(output), "--collect"]) == 1
    assert "tasks without a result: 0, 1, 2, 3, 4" in capsys.readouterr().err


# --- bad traces: one line naming the file, skipped lines counted and quoted, lost nodes said ---

def _lanl_lines() -> list[str]:
    import lzma
    with lzma.open(LANL_EXCERPT, "rt", newline="") as stream:
        return stream.read().splitlines(keepends=True)


def test_truncated_failure_trace_is_one_line_exit_2(tmp_path, capsys):
    import lzma
    truncated = tmp_path / "failures.csv.xz"
    truncated.write_bytes(lzma.compress("".join(_lanl_lines()).encode())[:15000])
    assert main(["replay", RICC_EXCERPT, "--limit", "200", "--failures", str(truncated),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{truncated}: cannot read trace: truncated") and err.count("\n") == 1


def test_skipped_failure_rows_are_counted_and_quoted_once(tmp_path, capsys):
    lines = _lanl_lines()
    lines[5] = lines[5].replace(lines[5].split(",")[18], "nan", 1)      # Down Time
    lines[9] = lines[9].replace(lines[9].split(",")[18], "inf", 1)
    lines[12] = "20,garbage\n"
    failures = tmp_path / "failures.csv"
    failures.write_text("".join(lines))
    assert main(["replay", RICC_EXCERPT, "--limit", "200", "--failures", str(failures),
                 "--policy", "none", "on-the-fly", "--no-progress"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[:4] == [
        f"{failures}: skipped 3 of 2,478 line(s) (2 bad value, 1 column count); the first:",
        f"{failures}:6: bad failure record: 'nan' is not a finite number within ±2**53",
        f"{failures}:10: bad failure record: 'inf' is not a finite number within ±2**53",
        f"{failures}:13: failure record has 2 columns, expected 26"]
    assert sum(line.startswith(f"{failures}: skipped") for line in err) == 1  # not per policy


def test_failure_trace_that_lost_whole_nodes_says_so(tmp_path, capsys):
    lines = _lanl_lines()
    node = lines[0].split(",").index("nodenum")
    kept = [lines[0]] + [line for line in lines[1:] if int(line.split(",")[node]) >= 256]
    failures = tmp_path / "failures.csv"
    failures.write_text("".join(kept))
    assert main(["replay", RICC_EXCERPT, "--limit", "200", "--failures", str(failures),
                 "--no-progress"]) == 0
    silent = 512 - len({int(line.split(",")[node]) for line in kept[1:]})
    warning = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warning) == 1 and warning[0].startswith(
        f"{failures}: warning: {silent} of the system's 512 nodes (")
    assert "have no failure record at all" in warning[0] and "too low" in warning[0]


@pytest.mark.parametrize("option, value", [
    ("--patch-latency", "nan"), ("--patch-latency", "inf"), ("--load-factor", "inf"),
    ("--load-factor", "nan"), ("--scratch-size", "inf"), ("--scratch-size", "nan"),
    ("--patch-bandwidth", "1e400"), ("--copy-bandwidth", "infM"), ("--stripe-size", "inf"),
])
def test_replay_options_refuse_what_is_not_finite(capsys, option, value):
    with pytest.raises(SystemExit) as info:
        main(["replay", RICC_EXCERPT, "--no-progress", option, value])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: " in err and "finite" in err and "Traceback" not in err


def test_replay_stripe_size_zero_is_refused_not_replaced_by_the_default(capsys):
    assert main(["replay", RICC_EXCERPT, "--limit", "50", "--stripe-size", "0",
                 "--no-progress"]) == 2
    assert capsys.readouterr().err == ("scratchkeeper: stripe size must be a multiple of 64 KiB, "
                                       "got 0\n")


@pytest.mark.parametrize("value", ["1 hour", "01:61:00", "1-25", "--uid=0", "1:2:3:4", "x\n"])
def test_sweep_time_limit_must_be_a_slurm_time(tmp_path, capsys, value):
    with pytest.raises(SystemExit) as info:
        main(["sweep", str(_sweep_file(tmp_path)), "--slurm", f"--time={value}"])
    assert info.value.code == 2
    assert "argument --time: not a Slurm time limit" in capsys.readouterr().err
