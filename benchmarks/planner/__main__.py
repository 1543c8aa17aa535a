"""Planner benchmark.

1. parse + plan + render of a 200-line batch script (goal < 5 ms), in process, many repetitions;
2. ``submit`` wall time against the sum of the scheduler commands it makes (goal <= 1.2x), on the
   real local cluster: in process (submit_plan) and as the whole CLI process.

    .venv/bin/python -m benchmarks.planner [--quick]

Writes benchmarks/results/planner/results.json and docs/benchmarks/planner/report.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scratchkeeper.config import SiteConfig, load_config
from scratchkeeper.planner import records
from scratchkeeper.planner.directives import parse_script
from scratchkeeper.planner.plan import build_plan
from scratchkeeper.planner.render import render_plan
from scratchkeeper.planner.submit import prepare, submit_plan
from scratchkeeper.runner import get_runner
from scratchkeeper.state import StateStore

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "planner"
REPORT = ROOT / "docs" / "benchmarks" / "planner" / "report.md"
CLUSTER = Path(os.environ.get("SK_LOCAL_DIR", "/var/lib/scratchkeeper-local")) / "cluster.json"


def script_200_lines() -> str:
    """A realistic 200-line script: headers, 60 transfers of every kind, options, compute lines."""
    lines = ["#!/bin/bash", "#SBATCH --job-name=bench", "#SBATCH --nodes=4", "#SBATCH --time=02:00:00",
             "#SBATCH --qos=normal", "#STAGEIN -retry 3 -retry-delay 2 -walltime 00:30:00"]
    kinds = ["gsiftp://dtn.example.org:2811/archive/run/in{0}.h5 /scratch/u/run/in{0}.h5",
             "https://data.example.org/tables/t{0}.dat /scratch/u/run/",
             "u@login.example.org:/home/u/p{0}.nml /scratch/u/run/p{0}.nml",
             "/home/u/mesh{0}.bin /scratch/u/run/mesh{0}.bin",
             "globus-url-copy -p 4 gsiftp://dtn.example.org/a/f{0} file:///scratch/u/run/f{0}",
             "hsi -q \"get /scratch/u/run/h{0} : archive/h{0}\""]
    for index in range(48):
        lines.append("#STAGEIN " + kinds[index % len(kinds)].format(index))
    lines.append("#STAGEIN curl -fsS -o /scratch/u/run/long.dat \\")
    lines.append("#STAGEIN    https://data.example.org/long.dat")
    lines += ["#DW stage_in source=/lus/u/d{0} destination=/scratch/u/d{0} type=directory".format(i)
              for i in range(4)]
    lines.append("#STAGEOUT -dependency afterany -name bench.out")
    for index in range(8):
        lines.append(f"#STAGEOUT /scratch/u/run/out{index}.h5 gsiftp://dtn.example.org:2811/results/out{index}.h5")
    while len(lines) < 200:
        lines.append(f"srun --ntasks=4 ./step {len(lines)} /scratch/u/run  # compute line")
    return "\n".join(lines[:200]) + "\n"


def bench_render(repeats: int) -> dict:
    text = script_200_lines()
    config = SiteConfig()
    samples = []
    for index in range(repeats):
        started = time.perf_counter()
        parsed = parse_script(text, "bench.sbatch", cwd="/home/u", scratch_root=config.storage.scratch_root)
        plan = build_plan(parsed, config, chain_id=f"skbench{index}", workdir="/home/u")
        render_plan(plan, parsed.shebang, parsed.compute_script, config)
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return {"lines": text.count("\n"), "transfers": len(plan.staged_files) + len(plan.offloaded_files),
            "repeats": repeats, "median_ms": statistics.median(samples),
            "p95_ms": samples[int(0.95 * (len(samples) - 1))], "first_ms": None, "goal_ms": 5.0}


def bench_submit(repeats: int) -> dict | None:
    if not CLUSTER.exists():
        return None
    cluster = json.loads(CLUSTER.read_text())
    config = load_config(cluster["site_config"])
    store = records.open_records(StateStore(config.state.database))
    work = Path(tempfile.mkdtemp(prefix="sk-bench-"))
    script = work / "job.sh"
    script.write_text(f"""#!/bin/bash
#SBATCH --job-name=sk-bench
#STAGEIN {cluster['http_source_url']}bench-missing.dat {cluster['scratch_root']}/bench/x.dat
true
#STAGEOUT {cluster['scratch_root']}/bench/x.dat {cluster['gridftp_url']}{cluster['sink_dir']}/bench.dat
""")
    in_process, commands_sum, cli_wall, cli_sum, submitted = [], [], [], [], []
    os.chdir(work)
    for _ in range(repeats):
        _, plan = prepare(str(script), config, workdir=str(work))
        started = time.perf_counter()
        submission = submit_plan(plan, config, store)
        in_process.append(time.perf_counter() - started)
        commands_sum.append(submission.scheduler_seconds)
        submitted += submission.job_ids.values()
        # the whole CLI: interpreter start, imports, config, parse, render, state, sbatch x3
        started = time.perf_counter()
        result = subprocess.run([sys.executable, "-m", "scratchkeeper", "-vv", "-c",
                                 cluster["site_config"], "submit", str(script), "--json"],
                                capture_output=True, text=True, check=True)
        cli_wall.append(time.perf_counter() - started)
        cli_sum.append(_commands_seconds(result.stderr))
        submitted += [j["job_id"] for j in json.loads(result.stdout)["jobs"]]
    get_runner().run(["scancel", *submitted], check=False)
    ratio = [w / c for w, c in zip(in_process, commands_sum)]
    cli_ratio = [w / c for w, c in zip(cli_wall, cli_sum)]
    return {"repeats": repeats, "jobs_per_submit": 3,
            "in_process_median_s": statistics.median(in_process),
            "scheduler_calls_median_s": statistics.median(commands_sum),
            "in_process_ratio_median": statistics.median(ratio),
            "cli_wall_median_s": statistics.median(cli_wall),
            "cli_scheduler_calls_median_s": statistics.median(cli_sum),
            "cli_ratio_median": statistics.median(cli_ratio), "goal_ratio": 1.2}


def _commands_seconds(stderr: str) -> float:
    """Sum of 'exit N after S s' debug lines the runner logs for each command (-vv)."""
    total = 0.0
    for line in stderr.splitlines():
        if "scratchkeeper.runner DEBUG: exit" in line:
            total += float(line.split(" after ")[1].split("s:")[0])
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    render = bench_render(200 if args.quick else 2000)
    print(f"parse+plan+render, {render['lines']}-line script with {render['transfers']} transfers: "
          f"median {render['median_ms']:.2f} ms, p95 {render['p95_ms']:.2f} ms (goal < 5 ms)")
    submit = bench_submit(3 if args.quick else 10)
    if submit is None:
        print("submit: skipped, the local cluster is not up (scripts/local-cluster up)")
    else:
        print(f"submit in process: median {submit['in_process_median_s'] * 1000:.1f} ms vs "
              f"{submit['scheduler_calls_median_s'] * 1000:.1f} ms in scheduler calls: "
              f"ratio {submit['in_process_ratio_median']:.2f} (goal <= 1.2)")
        print(f"submit CLI process: median {submit['cli_wall_median_s'] * 1000:.1f} ms vs "
              f"{submit['cli_scheduler_calls_median_s'] * 1000:.1f} ms in scheduler calls: "
              f"ratio {submit['cli_ratio_median']:.2f}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "results.json").write_text(json.dumps({"render": render, "submit": submit}, indent=2))
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    lines = ["# Planner benchmark", "", f"Command: `.venv/bin/python -m benchmarks.planner"
             f"{' --quick' if args.quick else ''}` on this 2-core machine, "
             f"{time.strftime('%Y-%m-%d')}.", "",
             "| measure | median | p95 / other | goal |", "|---|---|---|---|",
             f"| parse + plan + render, {render['lines']}-line script, {render['transfers']} transfers "
             f"({render['repeats']} runs) | {render['median_ms']:.2f} ms | {render['p95_ms']:.2f} ms | < 5 ms |"]
    if submit:
        lines += [
            f"| `submit_plan` wall time / sum of its scheduler calls (3 jobs, {submit['repeats']} runs) "
            f"| {submit['in_process_ratio_median']:.2f}x | {submit['in_process_median_s'] * 1000:.1f} ms vs "
            f"{submit['scheduler_calls_median_s'] * 1000:.1f} ms | <= 1.2x |",
            f"| `scratchkeeper submit` process wall time / sum of its scheduler calls "
            f"| {submit['cli_ratio_median']:.2f}x | {submit['cli_wall_median_s'] * 1000:.1f} ms vs "
            f"{submit['cli_scheduler_calls_median_s'] * 1000:.1f} ms | (interpreter start and imports included) |"]
    REPORT.write_text("\n".join(lines) + "\n")
    print(f"report: {REPORT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
