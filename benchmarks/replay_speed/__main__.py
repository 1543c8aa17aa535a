"""Replay speed (issue 34): the C cores (scratchkeeper/sim/native) against the Python model
they follow, on the same inputs in the same run, and the wall time of the replication sweeps.

1. The scheduling core: :func:`simulate` on the full RICC trace (447,794 jobs), each core on
   fresh jobs, for EASY without failures, EASY with LANL system-20 failures extrapolated to 64
   OSTs (on-the-fly and no recovery) and FCFS with failures; seconds per core, their ratio,
   and whether every job's state, the log and the totals are bit-identical.
2. The replication analysis on the EASY schedule: each strategy, both cores, ratio, identity.
3. The first task of each shipped replication sweep (a schedule and its replication variants:
   trace read, workload, schedule, every variant) in this process, on each core.
4. The issue's 96 runs (the two shipped replication sweeps, 48 runs each, seed 1) through
   ``scratchkeeper sweep`` on ``--workers`` processes with the default (C) core; with
   ``--shipped`` also the shipped sweep files as they are (every seed).

Goals (issue 34): the scheduling core >= 10x faster than the Python model; the 96 runs <= 60 s
on a 2-core machine. The report gives the load average before and after each part (the
machine is shared); it reports and never fails on a missed goal.

    nice -n 10 .venv/bin/python -m benchmarks.replay_speed [--quick] [--workers 2] [--shipped]

Writes benchmarks/results/replay_speed/results{,-quick}.json and
docs/benchmarks/replay_speed/report{,-quick}.md; --quick uses the shipped 5,000-job excerpt.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import os
import shutil
import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

from benchmarks import harness
from scratchkeeper.runner import run
from scratchkeeper.sim import DATA_DIR
from scratchkeeper.sim.outages import extrapolated_outages, failure_stats
from scratchkeeper.sim.replication import ReplicationParams, replay_replication
from scratchkeeper.sim.run import ReplayConfig, _failure_records, load_trace, run_replay
from scratchkeeper.sim.scheduler import RecoveryParams, simulate, using_core
from scratchkeeper.sim.sweep import load_sweep
from scratchkeeper.sim.workload import build_workload

NAME = "replay_speed"
FULL_TRACE = harness.TRACES / "RICC-2010-2.swf.gz"
FULL_FAILURES = harness.TRACES / "LA-UR-05-7318-failure-data-1996-2005.csv.xz"
EXCERPT = Path(DATA_DIR) / "RICC-2010-2-first5000.swf.gz"
EXCERPT_FAILURES = Path(DATA_DIR) / "LA-UR-05-7318-system20.csv.xz"
SWEEPS = [harness.REPO / "benchmarks" / "replay" / f"ricc-replication{tail}.toml"
          for tail in ("", "-recorded")]
GOAL_RATIO = 10.0
GOAL_SWEEP_SECONDS = 60.0
#: the scheduling cases: name, backfill, recovery policy (None: no failures)
CASES = [("EASY, no failures", True, None), ("EASY, failures, on-the-fly", True, "on-the-fly"),
         ("EASY, failures, no recovery", True, "none"),
         ("FCFS, failures, no recovery", False, "none")]


def _timed(call: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    answer = call()
    return time.perf_counter() - started, answer


def _fingerprint(jobs, schedule) -> tuple:
    """Everything the replay decides, floats by their bits."""
    return ([(j.start.hex(), j.end.hex(), j.first_start.hex(), j.ready_at.hex(),
              j.recovery_seconds.hex(), j.kills, j.version, j.affected) for j in jobs],
            schedule.log_time.tobytes(), schedule.log_kind.tobytes(), schedule.log_job.tobytes(),
            schedule.busy_node_seconds.hex(), schedule.last_end.hex(), schedule.failures)


def scheduling(trace: Path, failures: Path) -> tuple[list[dict], object]:
    """Part 1: each case on each core; returns the rows and the native EASY schedule."""
    config = ReplayConfig(trace=str(trace))
    trace_jobs, header_nodes, _, _ = load_trace(config)

    def fresh():
        return build_workload(trace_jobs, config.workload_params(), header_nodes)

    workload = fresh()
    horizon = workload.jobs[-1].submit + 30 * 86400
    outages = extrapolated_outages(failure_stats(_failure_records(str(failures), 20, False)),
                                   config.ost_count, horizon, config.seed)
    rows, easy = [], None
    for name, backfill, policy in CASES:
        row: dict = {"case": name, "jobs": len(workload.jobs)}
        prints = {}
        for core in ("python", "native"):
            jobs = fresh().jobs
            seconds, schedule = _timed(lambda: simulate(
                jobs, workload.system_nodes, backfill=backfill,
                outages=outages if policy else (), recovery=RecoveryParams(policy or "none"),
                core=core))
            row[f"{core}_s"] = seconds
            row["failures"] = schedule.failures
            prints[core] = _fingerprint(jobs, schedule)
            if core == "native" and policy is None and backfill:
                easy = schedule
        row["ratio"] = row["python_s"] / row["native_s"]
        row["identical"] = prints["python"] == prints["native"]
        rows.append(row)
        print(f"  {name}: python {row['python_s']:.2f} s, native {row['native_s']:.3f} s, "
              f"{row['ratio']:.1f}x, identical {row['identical']}", flush=True)
    return rows, easy


def replication(schedule) -> list[dict]:
    """Part 2: each strategy on the EASY schedule, both cores."""
    rows = []
    for strategy in ("fcfs", "shortcut", "dispatch-aware"):
        params = ReplicationParams(strategy, 0.5, 0.1, 250e6, 1e15)
        row: dict = {"strategy": strategy}
        results = {}
        for core in ("python", "native"):
            seconds, result = _timed(lambda: replay_replication(schedule, params, core=core))
            row[f"{core}_s"] = seconds
            results[core] = (result.jobs_at_risk, result.replicated_jobs,
                             [s.hex() for s in result.space_samples])
        row["ratio"] = row["python_s"] / row["native_s"]
        row["identical"] = results["python"] == results["native"]
        rows.append(row)
        print(f"  replication {strategy}: python {row['python_s']:.2f} s, native "
              f"{row['native_s']:.3f} s, {row['ratio']:.1f}x, identical {row['identical']}",
              flush=True)
    return rows


def _grid_without_seeds(sweep: Path, trace: Path) -> dict:
    """The sweep file's [replay] and [[grid]] with one seed (the default) and ``trace``."""
    document = tomllib.loads(sweep.read_text())
    document["replay"]["trace"] = str(trace)
    grids = document["grid"] if isinstance(document["grid"], list) else [document["grid"]]
    for grid in grids:
        grid.pop("seed", None)
    document["grid"] = grids
    return document


def _toml_value(value) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))


def write_sweep(document: dict, path: Path) -> Path:
    lines = ["[replay]"] + [f"{k} = {_toml_value(v)}" for k, v in document["replay"].items()]
    for grid in document["grid"]:
        lines += ["", "[[grid]]"] + [f"{k} = {_toml_value(v)}" for k, v in grid.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def tasks(work: Path, trace: Path) -> list[dict]:
    """Part 3: the first task of each sweep (a schedule and its variants), on each core; each
    core reads its own copy of the trace (a worker keeps the last trace it read)."""
    rows = [{"sweep": path.name} for path in SWEEPS]
    for core in ("python", "native"):
        folder = work / core
        folder.mkdir()
        copy = folder / trace.name
        shutil.copyfile(trace, copy)
        for row, path in zip(rows, SWEEPS):
            sweep = write_sweep(_grid_without_seeds(path, copy), folder / path.name)
            configs = load_sweep(str(sweep)).tasks[0]
            with using_core(core):
                seconds, _ = _timed(lambda: run_replay(configs[0], configs))
            row.update({"runs": len(configs), f"{core}_s": seconds})
    for row in rows:
        row["ratio"] = row["python_s"] / row["native_s"]
        print(f"  task 0 of {row['sweep']} ({row['runs']} runs): python {row['python_s']:.1f} s, "
              f"native {row['native_s']:.1f} s, {row['ratio']:.1f}x", flush=True)
    return rows


def sweeps(sweep_files: list[Path], work: Path, workers: int) -> dict:
    """Part 4: every run of the sweep files through the CLI, one after the other."""
    row: dict = {"workers": workers, "load_before": harness.load_average(), "sweeps": []}
    total_runs, total_seconds = 0, 0.0
    for path in sweep_files:
        runs = load_sweep(str(path)).runs
        seconds, _ = _timed(lambda: run(
            [sys.executable, "-m", "scratchkeeper", "sweep", str(path), "--output",
             str(work / path.stem), "--workers", str(workers), "--no-progress"],
            timeout=3600, mutating=False, cwd=str(harness.REPO)))
        row["sweeps"].append({"file": path.name, "runs": runs, "seconds": seconds})
        total_runs += runs
        total_seconds += seconds
        print(f"  sweep {path.name}: {runs} runs in {seconds:.1f} s", flush=True)
    row.update(runs=total_runs, seconds=total_seconds, load_after=harness.load_average())
    return row


#: the whole replay of issue 41: every recovery policy, every strategy, through the CLI
CLI_POLICIES = ("ideal", "none", "pre-execution", "on-the-fly")
CLI_STRATEGIES = ("fcfs", "shortcut", "dispatch-aware")
GOAL_CLI_RATIO = 10.0


def whole_replay(trace: Path, failures: Path, work: Path, jobs_csv: bool) -> dict:
    """Part 5: ``scratchkeeper replay`` of 4 policies x 3 strategies, ``--core c`` and
    ``--core python`` one after the other in this run, each a fresh process (trace reading and
    workload building included): wall and CPU seconds, their ratio, and whether the result
    rows (and with ``jobs_csv`` the per-job CSVs, written by the same Python code on both
    cores) are identical."""
    row: dict = {"policies": len(CLI_POLICIES), "strategies": len(CLI_STRATEGIES),
                 "jobs_csv": jobs_csv, "load_before": harness.load_average()}
    outputs = {}
    for core in ("c", "python"):
        jobs, rows = work / f"jobs-{core}.csv", work / f"rows-{core}.csv"
        before = os.times()
        seconds, _ = _timed(lambda: run(
            [sys.executable, "-m", "scratchkeeper", "replay", str(trace), "--failures",
             str(failures), "--policy", *CLI_POLICIES, "--strategy", *CLI_STRATEGIES,
             "--no-progress", "--core", core, "--csv", str(rows),
             *(["--jobs-csv", str(jobs)] if jobs_csv else [])],
            timeout=3600, mutating=False, cwd=str(harness.REPO)))
        after = os.times()
        row[f"{core}_s"] = seconds
        row[f"{core}_cpu_s"] = (after.children_user + after.children_system
                                - before.children_user - before.children_system)
        digest = hashlib.md5(jobs.read_bytes()).hexdigest() if jobs_csv else ""
        outputs[core] = (digest, _rows_without_seconds(rows))
        row[f"{core}_jobs_csv_md5"] = digest
        if jobs_csv:
            row["jobs_csv_bytes"] = jobs.stat().st_size
            jobs.unlink()
        print(f"  replay --core {core}: {seconds:.1f} s wall, {row[f'{core}_cpu_s']:.1f} s CPU",
              flush=True)
    row["ratio"] = row["python_s"] / row["c_s"]
    row["cpu_ratio"] = row["python_cpu_s"] / row["c_cpu_s"]
    row["identical"] = outputs["c"] == outputs["python"]
    row["load_after"] = harness.load_average()
    print(f"  whole replay: {row['ratio']:.1f}x, identical {row['identical']}", flush=True)
    return row


def _rows_without_seconds(path: Path) -> list[dict]:
    """The result rows, but for the column of seconds each run took."""
    with path.open(newline="") as stream:
        return [{k: v for k, v in r.items() if k != "seconds"} for r in csv.DictReader(stream)]


def report(results: dict, quick: bool) -> str:
    lines: list[str] = [
        f"# Replay speed: C cores against the Python model (issues 34, 41){' (quick)' if quick else ''}",
             "", f"{results['date']}, {results['machine']}; trace {results['trace']}.",
             f"Load average (1, 5, 15 min) at the start {results['load_start']}, at the end "
             f"{results['load_end']}: {results['others']}", "",
             "    " + results["command"], ""]
    for key in ("whole_replay", "whole_replay_jobs_csv"):
        if key in results:
            lines += _whole_replay_lines(results[key])
    if "scheduling" not in results:
        return "\n".join(lines) + "\n"
    lines += ["## 1. Scheduling core (`simulate`, each core on fresh jobs)", "",
             "| case | jobs | failures | Python s | C s | ratio | bit-identical |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for r in results["scheduling"]:
        lines.append(f"| {r['case']} | {r['jobs']:,} | {r['failures']} | {r['python_s']:.2f} | "
                     f"{r['native_s']:.3f} | {r['ratio']:.1f}x | {r['identical']} |")
    lowest = min(r["ratio"] for r in results["scheduling"])
    lines += ["", f"Goal >= {GOAL_RATIO:.0f}x: {'met' if lowest >= GOAL_RATIO else 'MISSED'} "
              f"(lowest ratio {lowest:.1f}x). The C time includes reading the jobs' attributes "
              "and writing their state back.", "",
              "## 2. Replication analysis (EASY schedule, alpha 0.5, T 0.1 for shortcut)", "",
              "| strategy | Python s | C s | ratio | bit-identical |", "|---|---:|---:|---:|---|"]
    for r in results["replication"]:
        lines.append(f"| {r['strategy']} | {r['python_s']:.2f} | {r['native_s']:.3f} | "
                     f"{r['ratio']:.1f}x | {r['identical']} |")
    lines += ["", "## 3. One sweep task in one process (trace read, workload, schedule, every "
              "variant)", "", "| sweep | runs | Python s | C s | ratio |", "|---|---:|---:|---:|---:|"]
    for r in results["tasks"]:
        lines.append(f"| {r['sweep']} | {r['runs']} | {r['python_s']:.1f} | {r['native_s']:.1f} | "
                     f"{r['ratio']:.1f}x |")
    for key, title in (("sweeps_96", "the issue's 96 runs (seed 1)"),
                       ("sweeps_shipped", "the shipped sweep files as they are")):
        if key not in results:
            continue
        s = results[key]
        lines += ["", f"## 4. `scratchkeeper sweep`, {title}, {s['workers']} workers", "",
                  "| sweep | runs | wall s |", "|---|---:|---:|"]
        lines += [f"| {x['file']} | {x['runs']} | {x['seconds']:.1f} |" for x in s["sweeps"]]
        lines.append(f"| total | {s['runs']} | {s['seconds']:.1f} |")
        lines += ["", f"Load average before {s['load_before']}, after {s['load_after']}."]
        if key == "sweeps_96":
            lines.append(f"Goal <= {GOAL_SWEEP_SECONDS:.0f} s: "
                         f"{'met' if s['seconds'] <= GOAL_SWEEP_SECONDS else 'MISSED'} "
                         f"({s['seconds']:.1f} s; the issue measured 10 min 12 s before).")
    return "\n".join(lines) + "\n"


def _whole_replay_lines(r: dict) -> list[str]:
    if r["jobs_csv"]:
        title = "with `--jobs-csv` (the per-job CSVs compared)"
        same = f"Per-job CSV ({r['jobs_csv_bytes']:,} bytes) and result rows identical"
        goal = ("the per-job CSV is written by the same Python code on both cores, so its "
                "seconds are added to each")
    else:
        title = "the result rows only (the issue's measure)"
        same = "Result rows identical (but for each run's seconds)"
        goal = (f"goal >= {GOAL_CLI_RATIO:.0f}x: "
                f"{'met' if r['ratio'] >= GOAL_CLI_RATIO else 'MISSED'}")
    return [f"## 5. The whole replay through the CLI, {r['policies']} policies x "
            f"{r['strategies']} strategies with failures, {title}", "",
            "| core | wall s | CPU s | --jobs-csv md5 |", "|---|---:|---:|---|",
            f"| python (reference reader, builder and cores) | {r['python_s']:.1f} | "
            f"{r['python_cpu_s']:.1f} | {r['python_jobs_csv_md5'] or '-'} |",
            f"| c | {r['c_s']:.1f} | {r['c_cpu_s']:.1f} | {r['c_jobs_csv_md5'] or '-'} |", "",
            f"Ratio {r['ratio']:.1f}x wall, {r['cpu_ratio']:.1f}x CPU; {goal}. {same}: "
            f"{r['identical']}. Load average before {r['load_before']}, after "
            f"{r['load_after']}.", ""]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.replay_speed",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="the shipped 5,000-job excerpt instead of the full RICC trace")
    parser.add_argument("--workers", type=int, default=2, help="sweep processes (default 2)")
    parser.add_argument("--shipped", action="store_true",
                        help="also time the shipped sweep files as they are (every seed)")
    parser.add_argument("--whole-replay-only", action="store_true",
                        help="only part 5, the whole replay through the CLI on both cores "
                             "(report-whole{,-quick}.md)")
    parser.add_argument("--others", default="not said",
                        help="what else ran on the machine meanwhile, for the report")
    args = parser.parse_args(argv)
    quick = args.quick or not FULL_TRACE.exists()
    trace, failures = (EXCERPT, EXCERPT_FAILURES) if quick else (FULL_TRACE, FULL_FAILURES)
    command = "nice -n 10 .venv/bin/python -m benchmarks.replay_speed" + \
        (" --quick" if args.quick else "") + (" --shipped" if args.shipped else "") + \
        f" --workers {args.workers}"
    results: dict = {"date": harness.utc_now(), "machine": harness.machine(),
                     "trace": trace.name, "load_start": harness.load_average(),
                     "others": args.others, "command": command}
    if args.whole_replay_only:
        command += " --whole-replay-only"
        results["command"] = command
        with harness.work_folder(NAME, "sk-replay-speed-") as work:
            print("the whole replay through the CLI, both cores", flush=True)
            results["whole_replay"] = whole_replay(trace, failures, work, False)
            print("the same with --jobs-csv", flush=True)
            results["whole_replay_jobs_csv"] = whole_replay(trace, failures, work, True)
        results["load_end"] = harness.load_average()
        tail = "-whole" + harness.suffix(quick)
        harness.write_json(harness.results_dir(NAME) / f"results{tail}.json", results)
        path = harness.report_dir(NAME) / f"report{tail}.md"
        path.write_text(report(results, quick))
        print(f"wrote {path}")
        return 0
    print("scheduling core", flush=True)
    results["scheduling"], easy = scheduling(trace, failures)
    print("replication analysis", flush=True)
    results["replication"] = replication(easy)
    del easy
    with harness.work_folder(NAME, "sk-replay-speed-") as work:
        print("the whole replay through the CLI, both cores", flush=True)
        results["whole_replay"] = whole_replay(trace, failures, work, False)
        print("one task of each sweep, both cores", flush=True)
        results["tasks"] = tasks(work, trace)
        sweep_files = [write_sweep(_grid_without_seeds(path, trace), work / path.name)
                       for path in SWEEPS]
        print("the 96 runs", flush=True)
        results["sweeps_96"] = sweeps(sweep_files, work, args.workers)
        if args.shipped and not quick:
            print("the shipped sweep files", flush=True)
            results["sweeps_shipped"] = sweeps(SWEEPS, work / "shipped", args.workers)
    results["load_end"] = harness.load_average()
    tail = harness.suffix(quick)
    harness.write_json(harness.results_dir(NAME) / f"results{tail}.json", results)
    path = harness.report_dir(NAME) / f"report{tail}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report(results, quick))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
