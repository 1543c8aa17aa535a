"""Planner benchmark.

1. parse + plan + render of a 200-line batch script (goal < 5 ms), in process, many repetitions;
2. the command's start: ``scratchkeeper plan --dry-run`` of a 20-line script as a whole process
   (goal <= 60 ms) against ``python -c pass`` of the same interpreter, runs interleaved, and
   ``python -X importtime`` of that run (the modules it loads, each the fastest of 5 runs);
3. ``submit`` of a three-job chain on the real local cluster: in process (submit_plan, goal
   <= 1.2x the sum of its scheduler commands) and as the whole CLI process against the same
   sbatch/scontrol calls made from a shell script (goal <= 2x), runs interleaved.

Child processes run without PYTHONDONTWRITEBYTECODE (an installed package has its bytecode),
after one warm-up run of each.

    .venv/bin/python -m benchmarks.planner [--quick]

Writes benchmarks/results/planner/results.json and docs/benchmarks/planner/report.md.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import resource
import shlex
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
from scratchkeeper.planner.submit import dry_run_commands, prepare, spool_dir, submit_plan
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


def _child_env() -> dict:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _wall(argv: list[str], env: dict, cwd: str,
          cpu: list[float] | None = None) -> tuple[float, subprocess.CompletedProcess]:
    """Wall time of ``argv`` as a whole process; its CPU time (user + system) appended to ``cpu``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if cpu is not None:
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return wall, result


def _spread(samples: list[float]) -> dict:
    """Median and range of seconds, in ms."""
    return {"median_ms": statistics.median(samples) * 1000, "min_ms": min(samples) * 1000,
            "max_ms": max(samples) * 1000}


def script_20_lines(scratch: str) -> str:
    lines = ["#!/bin/bash", "#SBATCH --job-name=start20", "#SBATCH --nodes=1",
             "#SBATCH --time=00:10:00",
             f"#STAGEIN https://data.example.org/a.dat {scratch}/run/a.dat",
             f"#STAGEIN gsiftp://dtn.example.org:2811/archive/b.h5 {scratch}/run/b.h5",
             f"#STAGEOUT {scratch}/run/out.h5 gsiftp://dtn.example.org:2811/results/out.h5",
             f"cd {scratch}/run"]
    while len(lines) < 19:
        lines.append(f"echo step {len(lines)}")
    lines.append("srun ./step")
    return "\n".join(lines) + "\n"


def bench_start(repeats: int) -> dict:
    """``plan --dry-run`` of a 20-line script as a whole process, against ``python -c pass``."""
    work = Path(tempfile.mkdtemp(prefix="sk-bench-start-"))
    scratch = work / "scratch"
    (scratch / "run").mkdir(parents=True)
    site = work / "site.toml"
    site.write_text(f'[storage]\nscratch_root = "{scratch}"\n[state]\ndatabase = "{work / "state.db"}"\n')
    script = work / "job.sh"
    script.write_text(script_20_lines(str(scratch)))
    env = _child_env()
    peer = [sys.executable, "-c", "pass"]
    plan = [sys.executable, "-m", "scratchkeeper", "-c", str(site), "plan", "--dry-run", str(script)]
    for argv in (peer, plan):  # warm-up: bytecode written, files in the page cache
        _wall(argv, env, str(work))
    peer_s, plan_s, peer_cpu, plan_cpu = [], [], [], []
    for _ in range(repeats):
        peer_s.append(_wall(peer, env, str(work), peer_cpu)[0])
        plan_s.append(_wall(plan, env, str(work), plan_cpu)[0])
    return {"repeats": repeats, "lines": script.read_text().count("\n"), "goal_ms": 60.0,
            "plan": _spread(plan_s), "python_pass": _spread(peer_s),
            "plan_cpu": _spread(plan_cpu), "python_pass_cpu": _spread(peer_cpu),
            "ratio_median": statistics.median(plan_s) / statistics.median(peer_s),
            "importtime": importtime([*plan[1:]], env, str(work))}


def importtime(args: list[str], env: dict, cwd: str, runs: int = 5) -> dict:
    """Self and cumulative import time (us) of every module the run loads, each the fastest of
    ``runs`` runs, and the depth it was imported at."""
    best: dict[str, list] = collections.defaultdict(lambda: [float("inf"), float("inf"), 0])
    for _ in range(runs):
        result = subprocess.run([sys.executable, "-X", "importtime", *args], capture_output=True,
                                text=True, env=env, cwd=cwd, check=True)
        for line in result.stderr.splitlines():
            match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)$", line)
            if match:
                entry = best[match.group(4)]
                entry[0] = min(entry[0], int(match.group(1)))
                entry[1] = min(entry[1], int(match.group(2)))
                entry[2] = (len(match.group(3)) - 1) // 2
    modules = {name: {"self_us": s, "cumulative_us": c, "depth": d} for name, (s, c, d) in best.items()}
    return {"modules": len(modules), "self_sum_ms": sum(m["self_us"] for m in modules.values()) / 1000,
            "top": sorted(modules.items(), key=lambda kv: -kv[1]["cumulative_us"])[:20]}


def shell_peer(plan, config, work: Path) -> Path:
    """A shell script making the same sbatch/scontrol calls as ``submit`` of ``plan``: the
    rendered scripts copied to ``work``, each job id captured and passed on as submit does."""
    commands = dry_run_commands(plan, config)
    spool = str(spool_dir(config, plan.chain_id))
    for job in plan.jobs:
        (work / f"{job.key}.sh").write_text(job.script)
        (work / f"{job.key}.sh").chmod(0o700)
    names, lines = {}, ["#!/bin/bash", "set -e"]
    for argv in commands:
        argv = [a.replace(spool, str(work)) for a in argv]
        text = re.sub(r"<([^<>]+)>", lambda m: "${" + names[m.group(1)] + "}", shlex.join(argv))
        text = re.sub(r"'([^']*\$\{[^']*)'", r'"\1"', text)  # let the shell expand the ids
        if argv[0] in ("sbatch", "qsub"):
            name = next(a.split("=", 1)[1] for a in argv if a.startswith("--job-name="))
            names[name] = f"J{len(names)}"
            lines += [f"{names[name]}=$({text})", f"{names[name]}=${{{names[name]}%%;*}}"]
        else:
            lines.append(text)
    lines.append("echo " + " ".join(f"${{{v}}}" for v in names.values()))
    peer = work / "peer.sh"
    peer.write_text("\n".join(lines) + "\n")
    return peer


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
    in_process, commands_sum, cli_wall, cli_sum, shell_wall = [], [], [], [], []
    os.chdir(work)
    _, plan = prepare(str(script), config, workdir=str(work))
    peer = shell_peer(plan, config, work)
    env = _child_env()
    cli = [sys.executable, "-m", "scratchkeeper", "-vv", "-c", cluster["site_config"], "submit",
           str(script), "--json"]

    def cancel(job_ids) -> None:
        """Untimed, at once: chains left to run would load slurmctld and the state database
        (their data jobs report there) under the next measurements."""
        get_runner().run(["scancel", *job_ids], check=False)

    for argv in (cli, ["bash", str(peer)]):  # warm-up, as the measured runs
        result = _wall(argv, env, str(work))[1]
        cancel([j["job_id"] for j in json.loads(result.stdout)["jobs"]] if argv is cli
               else result.stdout.split())
    for _ in range(repeats):
        _, plan = prepare(str(script), config, workdir=str(work))
        started = time.perf_counter()
        submission = submit_plan(plan, config, store)
        in_process.append(time.perf_counter() - started)
        commands_sum.append(submission.scheduler_seconds)
        cancel(submission.job_ids.values())
        # the whole CLI: interpreter start, imports, config, parse, render, state, sbatch x3
        seconds, result = _wall(cli, env, str(work))
        cli_wall.append(seconds)
        cli_sum.append(_commands_seconds(result.stderr))
        cancel([j["job_id"] for j in json.loads(result.stdout)["jobs"]])
        seconds, result = _wall(["bash", str(peer)], env, str(work))
        shell_wall.append(seconds)
        cancel(result.stdout.split())
    ratio = [w / c for w, c in zip(in_process, commands_sum)]
    cli_ratio = [w / c for w, c in zip(cli_wall, cli_sum)]
    return {"repeats": repeats, "jobs_per_submit": 3,
            "in_process_median_s": statistics.median(in_process),
            "scheduler_calls_median_s": statistics.median(commands_sum),
            "in_process_ratio_median": statistics.median(ratio),
            "cli_wall_median_s": statistics.median(cli_wall),
            "cli_scheduler_calls_median_s": statistics.median(cli_sum),
            "cli_ratio_median": statistics.median(cli_ratio), "goal_ratio": 1.2,
            "cli": _spread(cli_wall), "shell_peer": _spread(shell_wall),
            "cli_vs_shell_ratio_median": statistics.median(cli_wall) / statistics.median(shell_wall),
            "cli_vs_shell_goal": 2.0, "shell_peer_script": peer.read_text()}


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
    start = bench_start(10 if args.quick else 40)
    print(f"plan --dry-run process: median {start['plan']['median_ms']:.1f} ms "
          f"({start['plan']['min_ms']:.1f}-{start['plan']['max_ms']:.1f}) vs python -c pass "
          f"{start['python_pass']['median_ms']:.1f} ms (goal <= 60 ms); "
          f"{start['importtime']['modules']} modules imported")
    submit = bench_submit(3 if args.quick else 10)
    if submit is None:
        print("submit: skipped, the local cluster is not up (scripts/local-cluster up)")
    else:
        print(f"submit in process: median {submit['in_process_median_s'] * 1000:.1f} ms vs "
              f"{submit['scheduler_calls_median_s'] * 1000:.1f} ms in scheduler calls: "
              f"ratio {submit['in_process_ratio_median']:.2f} (goal <= 1.2)")
        print(f"submit CLI process: median {submit['cli']['median_ms']:.1f} ms vs the same calls "
              f"from a shell script {submit['shell_peer']['median_ms']:.1f} ms: ratio "
              f"{submit['cli_vs_shell_ratio_median']:.2f} (goal <= 2)")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "results.json").write_text(json.dumps(
        {"render": render, "start": start, "submit": submit}, indent=2))
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(report(render, start, submit, args.quick))
    print(f"report: {REPORT.relative_to(ROOT)}")


def _range(spread: dict) -> str:
    return f"{spread['median_ms']:.1f} ms ({spread['min_ms']:.1f}-{spread['max_ms']:.1f})"


def report(render: dict, start: dict, submit: dict | None, quick: bool) -> str:
    lines = ["# Planner benchmark", "", f"Command: `.venv/bin/python -m benchmarks.planner"
             f"{' --quick' if quick else ''}` on this 2-core machine (shared with other work: "
             f"each method and its peer run interleaved, medians with min-max), "
             f"{time.strftime('%Y-%m-%d %H:%M')}, load average at the end "
             f"{os.getloadavg()[0]:.1f}. Compare figures within one run: under load every "
             f"figure grows, the peers' as well.", "",
             "| measure | median | p95 / peer | goal |", "|---|---|---|---|",
             f"| parse + plan + render, {render['lines']}-line script, {render['transfers']} transfers "
             f"({render['repeats']} runs) | {render['median_ms']:.2f} ms | {render['p95_ms']:.2f} ms | < 5 ms |",
             f"| `scratchkeeper plan --dry-run`, {start['lines']}-line script, whole process "
             f"({start['repeats']} runs) | {_range(start['plan'])} | `python -c pass`: "
             f"{_range(start['python_pass'])} | <= 60 ms |",
             f"| the same, CPU time (user + system) of the process | {_range(start['plan_cpu'])} "
             f"| `python -c pass`: {_range(start['python_pass_cpu'])} | |"]
    if submit:
        lines += [
            f"| `submit_plan` wall time / sum of its scheduler calls (3 jobs, {submit['repeats']} runs) "
            f"| {submit['in_process_ratio_median']:.2f}x | {submit['in_process_median_s'] * 1000:.1f} ms vs "
            f"{submit['scheduler_calls_median_s'] * 1000:.1f} ms | <= 1.2x |",
            f"| `scratchkeeper submit` process / the same sbatch and scontrol calls from a shell "
            f"script (3 jobs, {submit['repeats']} runs) | {submit['cli_vs_shell_ratio_median']:.2f}x "
            f"| {_range(submit['cli'])} vs {_range(submit['shell_peer'])} | <= 2x |",
            f"| `scratchkeeper submit` process / the sum of its own scheduler calls "
            f"| {submit['cli_ratio_median']:.2f}x | {submit['cli_wall_median_s'] * 1000:.1f} ms vs "
            f"{submit['cli_scheduler_calls_median_s'] * 1000:.1f} ms | (for comparison) |"]
    else:
        lines.append("| `submit` on the local cluster | not run | the cluster was not up | |")
    imports = start["importtime"]
    lines += ["", "## The command's start: the rule", "",
              "A run imports the module of its subcommand only (`scratchkeeper/cli/__init__.py`: "
              "`COMMANDS`, subcommand -> module); a module's `register` imports only what its "
              "parsers need and each handler imports the rest when it runs. A name missing from "
              "the table (a new module, `--help`, a typo) loads every module, so a new subcommand "
              "is still just a new module; `tests/test_cli_imports.py` checks the table against "
              "the modules and, in a fresh interpreter, that `plan --dry-run` loads neither the "
              "state database (sqlite3) nor recovery, storage, replication, the solver or the other "
              "scheduler backend. The Jinja2 environment is built, and jinja2 imported, when the "
              "first script is rendered; tomllib when a configuration file is read.",
              "", f"## `python -X importtime` of `scratchkeeper plan --dry-run`", "",
              f"{imports['modules']} modules imported, their own times summing to "
              f"{imports['self_sum_ms']:.1f} ms (each module's fastest of 5 runs; the interpreter's "
              f"own start-up modules included). The 20 largest by cumulative time:", "",
              "| module | self (us) | cumulative (us) | nesting (0: imported by the run itself) |",
              "|---|---|---|---|"]
    for name, entry in imports["top"]:
        lines.append(f"| `{name}` | {entry['self_us']} | {entry['cumulative_us']} | "
                     f"{entry['depth']} |")
    if submit:
        lines += ["", "The shell-script peer of `submit` (the rendered scripts copied beside it):", "",
                  "```sh", submit["shell_peer_script"].rstrip(), "```"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
