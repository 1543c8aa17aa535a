"""The replay's command-line defects of issue 34: each test fails without its fix."""

from __future__ import annotations

import argparse
import csv
import os
import shutil
from pathlib import Path

import pytest

from scratchkeeper.cli import build_parser, main
from scratchkeeper.sim import DATA_DIR, sweep
from scratchkeeper.sim.run import ReplayConfig, run_replay

HERE = Path(__file__).parent / "data"
RICC_EXCERPT = os.path.join(DATA_DIR, "RICC-2010-2-first5000.swf.gz")
LANL_EXCERPT = os.path.join(DATA_DIR, "LA-UR-05-7318-system20.csv.xz")


def _rows(path: Path) -> list[dict]:
    with path.open(newline="") as stream:
        return list(csv.DictReader(stream))


@pytest.mark.parametrize("option", ["--csv", "--jobs-csv"])
def test_an_unwritable_output_fails_before_the_run(tmp_path, capsys, option):
    for target, why in ((tmp_path / "missing" / "rows.csv", "no folder"),
                        (tmp_path, "it is a folder")):
        assert main(["replay", RICC_EXCERPT, "--failures", LANL_EXCERPT, option, str(target),
                     "--no-progress"]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""                       # no replay ran
        assert captured.err.count("\n") == 1 and why in captured.err
        assert captured.err.startswith(f"{target}: cannot write results")


def test_no_job_left_names_the_file_the_format_and_the_skipped_lines(tmp_path, capsys):
    trace = tmp_path / "site-trace"
    trace.write_text("; MaxProcs: 8\n1 0 0 10\n2 0 0 10\n3 x 0 10 4 -1 -1 4 60 -1 1 1 1 -1 1 -1 "
                     "-1 -1\n")
    assert main(["replay", str(trace), "--no-progress"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"{trace}: no job left to replay: read as swf (detected from its content: line 1 reads "
        "as swf); no job record read; skipped 3 line(s) (2 field count, 1 not a number)")
    history = tmp_path / "pending.txt"
    history.write_text((HERE / "sacct-parsable2.txt").read_text().splitlines()[0] + "\n" +
                       "9|2026-11-28T05:49:38|None|2026-11-28T05:49:43|00:00:00|"
                       "Partition_Limit|4|4|CANCELLED by 0\n")
    assert main(["replay", str(history), "--format", "sacct", "--no-progress"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"{history}: no job left to replay: read as sacct (as --format says); no job record "
        "read; skipped 1 line(s) (1 never started)")


def test_an_swf_without_extension_is_read_as_swf(tmp_path, capsys):
    trace = tmp_path / "RICC-2010-2"            # gzipped, as the archive serves it, no name
    shutil.copy(RICC_EXCERPT, trace)
    assert main(["replay", str(trace), "--limit", "300", "--no-progress"]) == 0
    assert "jobs 300  system nodes 8,192" in capsys.readouterr().out


def test_a_sites_slurm_and_torque_history_replay(tmp_path, capsys):
    rows = tmp_path / "rows.csv"
    assert main(["replay", str(HERE / "sacct-parsable2.txt"), "--schedule", "recorded",
                 "--system-nodes", "32", "--strategy", "fcfs", "--no-progress",
                 "--csv", str(rows)]) == 0
    assert "jobs 27  system nodes 32" in capsys.readouterr().out
    assert _rows(rows)[0]["policy"] == "ideal" and _rows(rows)[0]["at_risk_pct"] != ""
    assert main(["replay", str(HERE / "torque-accounting.log"), "--system-nodes", "8",
                 "--no-progress"]) == 0
    assert "jobs 7  system nodes 8" in capsys.readouterr().out


def test_jobs_csv_has_a_row_per_job_and_policy(tmp_path):
    jobs, rows = tmp_path / "jobs.csv", tmp_path / "rows.csv"
    assert main(["replay", RICC_EXCERPT, "--limit", "400", "--failures", LANL_EXCERPT,
                 "--failure-mode", "replayed", "--policy", "ideal", "none", "--no-progress",
                 "--jobs-csv", str(jobs), "--csv", str(rows)]) == 0
    per_job = _rows(jobs)
    assert list(per_job[0]) == ["policy", "strategy", "alpha", "threshold", "job_id", "nodes",
                                "submit", "run_time", "limit", "first_start", "start", "end",
                                "wait", "recorded_wait", "affected", "kills", "at_risk"]
    assert all(r["strategy"] == r["at_risk"] == "" for r in per_job)  # no replication asked
    assert len(per_job) == 800 and [r["policy"] for r in per_job[::400]] == ["ideal", "none"]
    for row in per_job:
        assert float(row["wait"]) == float(row["start"]) - float(row["submit"]) >= 0
        assert float(row["end"]) >= float(row["start"]) >= float(row["first_start"]) >= 0
        assert 0 <= float(row["run_time"]) <= float(row["limit"]) and int(row["nodes"]) >= 1
    # the trace's own columns: RICC's first job ran 222 s of 14,400 on 80 processors, no wait
    first = per_job[0]
    assert (first["job_id"], first["nodes"], first["run_time"], first["limit"],
            first["recorded_wait"]) == ("1", "80", "222.0", "14400.0", "0.0")
    summary = {r["policy"]: r for r in _rows(rows)}
    for policy in ("ideal", "none"):
        hit = sum(int(r["affected"]) for r in per_job if r["policy"] == policy)
        assert hit == int(summary[policy]["affected_jobs"])
    assert int(summary["none"]["affected_jobs"]) > 0
    assert not (tmp_path / "jobs.csv.tmp").exists()


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser([name])
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]


def test_every_option_has_help_and_says_what_each_policy_and_strategy_does(monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")      # no line wrapped inside "pre-execution"
    for name in ("replay", "sweep", "report"):
        for action in _subparser(name)._actions:
            assert action.help and action.help != argparse.SUPPRESS, (name, action.dest)
    text = _subparser("replay").format_help()
    flat = " ".join(text.split())
    for policy in ("ideal (no OST ever fails", "none (no recovery", "pre-execution (the lost",
                   "on-the-fly (as pre-execution"):
        assert policy in flat
    for strategy in ("fcfs (the replication window", "shortcut (the same", "dispatch-aware (the "
                     "offline oracle"):
        assert strategy in flat
    assert "a much heavier load" in flat


def test_replayed_failures_are_the_much_heavier_load_the_help_says():
    def failures(mode: str) -> int:
        config = ReplayConfig(trace=RICC_EXCERPT, limit=1500, failures=LANL_EXCERPT,
                              failure_mode=mode, policy="none")
        return run_replay(config).rows[0].values["ost_failures"]

    # 512 nodes' failures on 64 OSTs: each OST fails about 8 times as often as a node.
    assert failures("replayed") >= 4 * max(1, failures("extrapolated"))
    docs = (Path(__file__).resolve().parents[2] / "docs" / "replay.rst").read_text()
    assert "much heavier load" in " ".join(docs.split())


def test_ideal_is_the_label_when_nothing_fails(tmp_path, capsys):
    rows = tmp_path / "rows.csv"
    assert main(["replay", RICC_EXCERPT, "--limit", "200", "--no-progress",
                 "--csv", str(rows)]) == 0
    assert [r["policy"] for r in _rows(rows)] == ["ideal"]
    assert " ideal " in capsys.readouterr().out
    assert main(["replay", RICC_EXCERPT, "--limit", "200", "--policy", "none", "pre-execution",
                 "--no-progress", "--csv", str(rows)]) == 0
    assert [r["policy"] for r in _rows(rows)] == ["ideal"]
    assert "nothing fails, so none, pre-execution is the one run without failure" in \
        capsys.readouterr().err
    assert ReplayConfig(trace="t", policy="on-the-fly").policy == "ideal"
    assert ReplayConfig(trace="t", policy="on-the-fly", failures="f").policy == "on-the-fly"


def test_settings_that_do_not_apply_are_blank(tmp_path):
    rows = tmp_path / "rows.csv"
    assert main(["replay", RICC_EXCERPT, "--limit", "300", "--failures", LANL_EXCERPT,
                 "--policy", "none", "on-the-fly", "--strategy", "fcfs", "shortcut",
                 "--no-progress", "--csv", str(rows)]) == 0
    got = {(r["policy"], r["strategy"]): r for r in _rows(rows)}
    assert got["none", "fcfs"]["threshold"] == "" and got["none", "shortcut"]["threshold"] == "0.1"
    assert got["none", "fcfs"]["patch_bandwidth"] == ""
    assert got["on-the-fly", "fcfs"]["patch_bandwidth"] == "100000000.0"
    assert got["none", "fcfs"]["failure_mode"] == "extrapolated"
    assert main(["replay", RICC_EXCERPT, "--limit", "300", "--no-progress",
                 "--csv", str(rows)]) == 0
    (plain,) = _rows(rows)
    for key in ("alpha", "threshold", "copy_bandwidth", "scratch_bytes", "failure_mode",
                "failure_system", "patch_bandwidth", "patch_latency", "node_memory_bytes",
                "at_risk_pct"):
        assert plain[key] == "", key
    assert plain["stripe_count"] == "4" and plain["backfill"] == "True"


def _plan(tmp_path: Path) -> sweep.SweepPlan:
    path = tmp_path / "sweep.toml"
    path.write_text(f"""
[replay]
trace = "{RICC_EXCERPT}"
failures = "{LANL_EXCERPT}"
limit = 300
ost_count = 16
strategy = "fcfs"

[[grid]]
policy = ["none", "on-the-fly"]
stripe_count = [2, 8]
alpha = [0.5, inf]
""")
    return sweep.load_sweep(str(path))


class _Stop(Exception):
    pass


def test_an_interrupted_sweep_keeps_the_runs_that_finished(tmp_path):
    plan = _plan(tmp_path)
    results = tmp_path / "out" / "results.csv"
    log = sweep.RunLog(plan, str(results))

    def on_run(index: int, row: dict) -> None:
        log(index, row)
        if log.done == 3:
            raise _Stop

    with pytest.raises(_Stop):
        sweep.run_local(plan, str(tmp_path / "out"), 1, on_run)
    rows = _rows(results)            # read while the file is still open: flushed per run
    assert len(rows) == 3
    assert [(r["policy"], r["stripe_count"], r["alpha"]) for r in rows] == [
        ("none", "2", "0.5"), ("none", "2", "inf"), ("none", "8", "0.5")]
    assert all(r["at_risk_pct"] and r["filtered_wait_mean"] == "" for r in rows)
    log.close()


def test_a_sweep_on_workers_writes_every_run_and_a_line_each(tmp_path, capsys):
    plan = _plan(tmp_path)
    output = tmp_path / "out"
    assert main(["sweep", plan.path, "--output", str(output), "--workers", "2"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("sweep:")]
    assert len(lines) == plan.runs == 8
    assert lines[-1].startswith("sweep: 8/8 runs done")
    assert all("policy=" in line and "stripe_count=" in line and "alpha=" in line
               for line in lines)
    rows = _rows(output / "results.csv")
    assert len(rows) == 8 and all(r["filtered_wait_mean"] for r in rows)   # collected
    # Before collect, the same rows were there as the runs finished (without the filtering).
    log_path = tmp_path / "partial.csv"
    log = sweep.RunLog(plan, str(log_path))
    assert sweep.run_local(plan, str(output), 2, log) == []
    log.close()
    assert len(_rows(log_path)) == 8


def test_a_sweep_output_that_cannot_be_made_is_one_line(tmp_path, capsys):
    plan = _plan(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["sweep", plan.path, "--output", str(blocker / "out"), "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"{blocker / 'out'}: cannot write the sweep")


@pytest.mark.parametrize("header", ["; MaxNodes: 16\n", ""])
def test_an_swf_header_without_max_procs_replays_with_one_processor_a_node(tmp_path, capsys,
                                                                         header):
    trace = tmp_path / "small.swf"
    trace.write_text(header + "".join(
        f"{n} {n * 10} 0 100 2 -1 -1 2 200 -1 1 1 1 -1 1 -1 -1 -1\n" for n in range(1, 21)))
    assert main(["replay", str(trace), "--procs-per-node", "1", "--no-progress"]) == 0
    assert "jobs 20" in capsys.readouterr().out


def test_jobs_csv_says_which_jobs_were_at_risk_under_each_replication_variant(tmp_path):
    jobs, rows = tmp_path / "jobs.csv", tmp_path / "rows.csv"
    assert main(["replay", RICC_EXCERPT, "--limit", "400", "--failures", LANL_EXCERPT,
                 "--policy", "none", "--strategy", "fcfs", "shortcut", "--alpha", "0.5", "inf",
                 "--threshold", "0.01", "--no-progress", "--jobs-csv", str(jobs),
                 "--csv", str(rows)]) == 0
    per_job = _rows(jobs)
    summary = _rows(rows)
    # long form: each job's fields once, then a row per job and variant with its at_risk only
    assert len(per_job) == 400 + 400 * len(summary) == 400 * 5
    assert all(r["strategy"] == "" and r["submit"] != "" for r in per_job[:400])
    assert all(r["strategy"] != "" and r["submit"] == r["nodes"] == "" for r in per_job[400:])
    for row in summary:
        mine = [r for r in per_job if (r["strategy"], r["alpha"]) ==
                (row["strategy"], repr(float(row["alpha"])))]
        assert len(mine) == 400
        assert [r["job_id"] for r in mine] == [r["job_id"] for r in per_job[:400]]
        at_risk = sum(int(r["at_risk"]) for r in mine)
        assert abs(100.0 * at_risk / 400 - float(row["at_risk_pct"])) < 1e-9
        assert all((r["threshold"] != "") == (r["strategy"] == "shortcut") for r in mine)
