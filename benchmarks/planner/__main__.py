"""Planner benchmark.

1. parse + plan + render of a 200-line batch script (goal < 5 ms), in process, many repetitions;
2. the command's start: ``scratchkeeper plan --dry-run`` of a 20-line script as a whole process
   (goal <= 60 ms) against ``python -c pass`` of the same interpreter, runs interleaved, in two
   forms: this checkout's editable install (``python -m scratchkeeper``; every interpreter of
   this virtualenv, ``python -c pass`` too, loads the editable finder at start) and a
   non-editable install as users run it (a console script; :func:`installed_copy`), with
   ``python -c "import jinja2"`` of the latter as what rendering with Jinja2 would cost at least
   (the compiled templates do not import it), and
   ``python -X importtime`` of the installed form (the modules it loads, each the fastest of 5
   runs);
3. ``submit`` of a three-job chain on the real local cluster: in process (submit_plan, goal
   <= 1.2x the sum of its scheduler commands) and as the whole CLI process, in both forms,
   against the same sbatch/scontrol calls made from a shell script (goal <= 2x), runs
   interleaved.

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
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from benchmarks import harness
from scratchkeeper.cli import _client, _server
from scratchkeeper.config import SiteConfig, load_config
from scratchkeeper.planner import records
from scratchkeeper.planner.directives import parse_script
from scratchkeeper.planner.plan import build_plan
from scratchkeeper.planner.render import render_plan
from scratchkeeper.planner.spool import spool_dir
from scratchkeeper.planner.submit import dry_run_commands, prepare, submit_plan
from scratchkeeper.runner import get_runner
from scratchkeeper.state import StateStore

ROOT = harness.REPO
RESULTS = harness.results_dir("planner")
REPORT = harness.report_dir("planner") / "report.md"
CLUSTER = harness.CLUSTER


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
    lines += [f"#DW stage_in source=/lus/u/d{i} destination=/scratch/u/d{i} type=directory"
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


def installed_copy(work: Path) -> Path:
    """A non-editable install of this checkout, laid out as pip lays it out, and its console
    script (what ``/usr/local/bin/scratchkeeper`` is): a virtualenv of this interpreter whose
    site-packages holds a copy of the package with job-templates as
    ``scratchkeeper/job_templates``, byte-compiled and with the templates compiled as the
    runtime install does (scripts/localcluster/runtime.py). Jinja2 comes from this virtualenv's
    site-packages through a plain path line (no ``.pth`` code runs there, so not the editable
    finder). Nothing is built: the native extensions are not needed to plan or submit."""
    venv = work / "installed"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   capture_output=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; "
                                "print(sysconfig.get_paths()['purelib'])"], check=True,
                               capture_output=True, text=True).stdout.strip())
    skip = shutil.ignore_patterns("__pycache__", "*.so", "*.c", "*.h")
    shutil.copytree(ROOT / "scratchkeeper", site / "scratchkeeper", ignore=skip)
    shutil.copytree(ROOT / "job-templates", site / "scratchkeeper" / "job_templates", ignore=skip)
    (site / "checkout-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    script = venv / "bin" / "scratchkeeper"
    script.write_text(f"#!{python}\n# -*- coding: utf-8 -*-\nimport re\nimport sys\n"
                      "from scratchkeeper.cli import main\nif __name__ == '__main__':\n"
                      "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
                      "    sys.exit(main())\n")
    script.chmod(0o755)
    env = _child_env()
    # run in ``work``: from the checkout, python -c would import the checkout's package
    subprocess.run([str(python), "-m", "compileall", "-q", str(site / "scratchkeeper")],
                   check=True, env=env, cwd=work, capture_output=True)
    subprocess.run([str(python), "-c", "from scratchkeeper.planner.render import "
                    "compile_templates; compile_templates()"], check=True, env=env, cwd=work)
    # the command users type: the command server's C client (scratchkeeper/cli/_client.py)
    _client.build(venv / "bin" / "scratchkeeper-client", script, python)
    return script


def client_env(work: Path) -> dict:
    """The environment of client runs: the command server's socket in a directory of this
    run (``XDG_RUNTIME_DIR``), so that the server measured is this run's install."""
    runtime = work / "xdg-runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    return {**_child_env(), "XDG_RUNTIME_DIR": str(runtime)}


def warm_client(argv: list[str], env: dict, cwd: str) -> None:
    """Run ``argv`` until its command server is up (the first run starts it and runs the
    command itself; the server answers from the next run on)."""
    directory = Path(env["XDG_RUNTIME_DIR"]) / "scratchkeeper"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        _wall(argv, env, cwd)
        if any(_server.server_pids(str(sock)) for sock in directory.glob("*.sock")):
            _wall(argv, env, cwd)
            return
        time.sleep(0.2)
    raise SystemExit("benchmarks.planner: the command server did not start")


def bench_start(repeats: int, installed: Path) -> dict:
    """``plan --dry-run`` of a 20-line script as a whole process, against ``python -c pass``,
    in the editable and the installed form, with ``import jinja2`` as a floor."""
    work = Path(tempfile.mkdtemp(prefix="sk-bench-start-"))
    scratch = work / "scratch"
    (scratch / "run").mkdir(parents=True)
    site = work / "site.toml"
    site.write_text(f'[storage]\nscratch_root = "{scratch}"\n[state]\ndatabase = "{work / "state.db"}"\n')
    script = work / "job.sh"
    script.write_text(script_20_lines(str(scratch)))
    env = _child_env()
    options = ["-c", str(site), "plan", "--dry-run", str(script)]
    installed_python = str(installed.parent / "python")
    client = str(installed.with_name("scratchkeeper-client"))
    argvs = {"python_pass": [sys.executable, "-c", "pass"],
             "plan": [sys.executable, "-m", "scratchkeeper", *options],
             "installed_python_pass": [installed_python, "-c", "pass"],
             "installed_plan": [str(installed), *options],
             "installed_import_jinja2": [installed_python, "-c", "import jinja2"],
             "client_plan": [client, *options]}
    envs = dict.fromkeys(argvs, env)
    envs["client_plan"] = client_env(work)
    for name, argv in argvs.items():  # warm-up: bytecode written, files in the page cache
        _wall(argv, envs[name], str(work))
    warm_client(argvs["client_plan"], envs["client_plan"], str(work))
    wall = {name: [] for name in argvs}
    cpu = {name: [] for name in argvs}
    try:
        for _ in range(repeats):
            for name, argv in argvs.items():
                wall[name].append(_wall(argv, envs[name], str(work), cpu[name])[0])
    finally:
        _server.stop_servers(str(Path(envs["client_plan"]["XDG_RUNTIME_DIR"]) / "scratchkeeper"))
    result = {"repeats": repeats, "lines": script.read_text().count("\n"), "goal_ms": 60.0}
    for name in argvs:
        result[name] = _spread(wall[name])
        result[name + "_cpu"] = _spread(cpu[name])
    result["ratio_median"] = statistics.median(wall["plan"]) / statistics.median(wall["python_pass"])
    result["importtime"] = importtime([installed_python, "-X", "importtime", *argvs["installed_plan"]],
                                      env, str(work))
    shutil.rmtree(work, ignore_errors=True)
    return result


def importtime(argv: list[str], env: dict, cwd: str, runs: int = 5) -> dict:
    """Self and cumulative import time (us) of every module the run of ``argv`` (with
    ``-X importtime``) loads, each the fastest of ``runs`` runs, and the depth it was imported at."""
    best: dict[str, list] = collections.defaultdict(lambda: [float("inf"), float("inf"), 0])
    for _ in range(runs):
        result = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd,
                                check=True)
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


def bench_submit(repeats: int, installed: Path) -> dict | None:
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
    installed_wall, installed_sum = [], []
    previous = os.getcwd()
    os.chdir(work)
    _, plan = prepare(str(script), config, workdir=str(work))
    peer = shell_peer(plan, config, work)
    env = _child_env()
    options = ["-vv", "-c", cluster["site_config"], "submit", str(script), "--json"]
    cli = [sys.executable, "-m", "scratchkeeper", *options]
    installed_cli = [str(installed), *options]
    client_cli = [str(installed.with_name("scratchkeeper-client")), *options]
    served_env = client_env(work)
    client_wall, client_sum = [], []

    def cancel(job_ids) -> None:
        """Untimed, at once: chains left to run would load slurmctld and the state database
        (their data jobs report there) under the next measurements."""
        get_runner().run(["scancel", *job_ids], check=False)

    for argv in (cli, installed_cli, ["bash", str(peer)]):  # warm-up, as the measured runs
        result = _wall(argv, env, str(work))[1]
        cancel(result.stdout.split() if argv[0] == "bash"
               else [j["job_id"] for j in json.loads(result.stdout)["jobs"]])
    # the server started by a plan of the same script (a submit's chains are cancelled)
    warm_client([client_cli[0], "-c", cluster["site_config"], "plan", "--dry-run",
                 str(script)], served_env, str(work))
    try:
        _submit_runs(repeats, script, config, store, work, peer, env, served_env, cancel,
                     (cli, installed_cli, client_cli),
                     (in_process, commands_sum, cli_wall, cli_sum, installed_wall,
                      installed_sum, client_wall, client_sum, shell_wall))
    finally:
        _server.stop_servers(str(Path(served_env["XDG_RUNTIME_DIR"]) / "scratchkeeper"))
    ratio = [w / c for w, c in zip(in_process, commands_sum)]
    cli_ratio = [w / c for w, c in zip(cli_wall, cli_sum)]
    result = {"repeats": repeats, "jobs_per_submit": 3,
              "in_process_median_s": statistics.median(in_process),
              "scheduler_calls_median_s": statistics.median(commands_sum),
              "in_process_ratio_median": statistics.median(ratio),
              "cli_wall_median_s": statistics.median(cli_wall),
              "cli_scheduler_calls_median_s": statistics.median(cli_sum),
              "cli_ratio_median": statistics.median(cli_ratio), "goal_ratio": 1.2,
              "cli": _spread(cli_wall), "shell_peer": _spread(shell_wall),
              "cli_vs_shell_ratio_median": statistics.median(cli_wall) / statistics.median(shell_wall),
              "cli_vs_shell_goal": 2.0, "shell_peer_script": peer.read_text(),
              "installed_cli": _spread(installed_wall),
              "installed_cli_scheduler_calls_median_s": statistics.median(installed_sum),
              "installed_cli_vs_shell_ratio_median":
                  statistics.median(installed_wall) / statistics.median(shell_wall),
              "client_cli": _spread(client_wall),
              "client_cli_scheduler_calls_median_s": statistics.median(client_sum),
              "client_cli_vs_shell_ratio_median":
                  statistics.median(client_wall) / statistics.median(shell_wall)}
    os.chdir(previous)
    shutil.rmtree(work, ignore_errors=True)  # the chains were cancelled
    return result


def _submit_runs(repeats, script, config, store, work, peer, env, served_env, cancel, argvs,
                 samples) -> None:
    """Each repeat: submit_plan in process, the three command forms, the shell peer."""
    cli, installed_cli, client_cli = argvs
    (in_process, commands_sum, cli_wall, cli_sum, installed_wall, installed_sum, client_wall,
     client_sum, shell_wall) = samples
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
        seconds, result = _wall(installed_cli, env, str(work))
        installed_wall.append(seconds)
        installed_sum.append(_commands_seconds(result.stderr))
        cancel([j["job_id"] for j in json.loads(result.stdout)["jobs"]])
        seconds, result = _wall(client_cli, served_env, str(work))
        client_wall.append(seconds)
        client_sum.append(_commands_seconds(result.stderr))
        cancel([j["job_id"] for j in json.loads(result.stdout)["jobs"]])
        seconds, result = _wall(["bash", str(peer)], env, str(work))
        shell_wall.append(seconds)
        cancel(result.stdout.split())


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
    installed_root = Path(tempfile.mkdtemp(prefix="sk-bench-installed-"))
    try:
        installed = installed_copy(installed_root)
        start = bench_start(10 if args.quick else 40, installed)
        submit = bench_submit(3 if args.quick else 10, installed)
    finally:
        shutil.rmtree(installed_root, ignore_errors=True)
    for form, prefix in (("editable", ""), ("installed", "installed_")):
        print(f"plan --dry-run process ({form}): median {_range(start[prefix + 'plan'])} vs "
              f"python -c pass {start[prefix + 'python_pass']['median_ms']:.1f} ms (goal <= 60 ms)")
    print(f"plan --dry-run through the command server: median {_range(start['client_plan'])} "
          "(goal <= 60 ms)")
    print(f"python -c 'import jinja2' (installed): {_range(start['installed_import_jinja2'])}; "
          f"{start['importtime']['modules']} modules imported by plan --dry-run")
    if submit is None:
        print("submit: skipped, the local cluster is not up (scripts/local-cluster up)")
    else:
        print(f"submit in process: median {submit['in_process_median_s'] * 1000:.1f} ms vs "
              f"{submit['scheduler_calls_median_s'] * 1000:.1f} ms in scheduler calls: "
              f"ratio {submit['in_process_ratio_median']:.2f} (goal <= 1.2)")
        print(f"submit CLI process: median {submit['cli']['median_ms']:.1f} ms vs the same calls "
              f"from a shell script {submit['shell_peer']['median_ms']:.1f} ms: ratio "
              f"{submit['cli_vs_shell_ratio_median']:.2f} (goal <= 2); installed form "
              f"{submit['installed_cli']['median_ms']:.1f} ms: ratio "
              f"{submit['installed_cli_vs_shell_ratio_median']:.2f}; through the command "
              f"server {submit['client_cli']['median_ms']:.1f} ms: ratio "
              f"{submit['client_cli_vs_shell_ratio_median']:.2f}")
    harness.write_json(RESULTS / "results.json",
                       {"render": render, "start": start, "submit": submit}, indent=2)
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(report(render, start, submit, args.quick))
    print(f"report: {REPORT.relative_to(ROOT)}")


def _range(spread: dict) -> str:
    return f"{spread['median_ms']:.1f} ms ({spread['min_ms']:.1f}-{spread['max_ms']:.1f})"


def goals(start: dict, submit: dict | None) -> list[str]:
    """Whether each goal of the command's start is met, from this run's figures."""
    def verdict(met: bool) -> str:
        return "met" if met else "**not met**"

    lines = []
    for form, prefix in (("editable", ""), ("installed", "installed_"),
                         ("as users run it: the command server's client", "client_")):
        median = start[prefix + "plan"]["median_ms"]
        interpreter = start["installed_python_pass" if prefix == "client_" else
                            prefix + "python_pass"]["median_ms"]
        lines.append(f"- `plan --dry-run` <= 60 ms ({form}): {median:.1f} ms, "
                     f"{verdict(median <= start['goal_ms'])} ({median / interpreter:.1f}x "
                     f"`python -c pass` of the same interpreter).")
    floor = start["installed_import_jinja2"]["median_ms"]
    lines.append(f"- For comparison, the interpreter and `import jinja2` alone take {floor:.1f} ms "
                 f"in this run (`python -c \"import jinja2\"`), "
                 f"{floor / start['installed_plan']['median_ms']:.0%} of the installed "
                 f"`plan --dry-run`, which renders its compiled templates without importing it.")
    if submit:
        for form, key in (("editable", "cli_vs_shell_ratio_median"),
                          ("installed", "installed_cli_vs_shell_ratio_median"),
                          ("as users run it: the command server's client",
                           "client_cli_vs_shell_ratio_median")):
            lines.append(f"- `submit` <= 2x the shell script's sbatch calls ({form}): "
                         f"{submit[key]:.2f}x, {verdict(submit[key] <= submit['cli_vs_shell_goal'])}.")
        floor = start["installed_python_pass"]["median_ms"] + \
            submit["installed_cli_scheduler_calls_median_s"] * 1000
        shell = submit["shell_peer"]["median_ms"]
        plan_over_pass = (start["installed_plan"]["median_ms"]
                          - start["installed_python_pass"]["median_ms"])
        lines.append(f"- What no Python program started per command can go below: the "
                     f"interpreter's start "
                     f"(`python -c pass`, {start['installed_python_pass']['median_ms']:.1f} ms) and "
                     f"the same scheduler calls (their sum in the installed runs, "
                     f"{submit['installed_cli_scheduler_calls_median_s'] * 1000:.1f} ms): "
                     f"{floor:.1f} ms, {floor / shell:.2f}x the shell script, which leaves "
                     f"{2 * shell - floor:.1f} ms for reading the configuration, parsing, planning, "
                     f"rendering and recording the chain within the 2x goal; `plan --dry-run` "
                     f"alone, which does all but the recording, takes "
                     f"{plan_over_pass:.1f} ms "
                     f"more than `python -c pass`. The command server's client goes below it: "
                     f"the interpreter has started and imported before the command is typed.")
    return lines


def report(render: dict, start: dict, submit: dict | None, quick: bool) -> str:
    lines = ["# Planner benchmark", "", f"Command: `.venv/bin/python -m benchmarks.planner"
             f"{' --quick' if quick else ''}` on this 2-core machine (shared with other work: "
             f"each method and its peer run interleaved, medians with min-max), "
             f"{time.strftime('%Y-%m-%d %H:%M')}, load average at the end "
             f"{os.getloadavg()[0]:.1f}. Compare figures within one run: under load every "
             f"figure grows, the peers' as well.", "",
             "| measure | median | p95 / peer | goal |", "|---|---|---|---|",
             f"| parse + plan + render, {render['lines']}-line script, "
             f"{render['transfers']} transfers ({render['repeats']} runs) | "
             f"{render['median_ms']:.2f} ms | {render['p95_ms']:.2f} ms | < 5 ms |",
             f"| `scratchkeeper plan --dry-run`, {start['lines']}-line script, whole process, "
             f"editable install (`python -m scratchkeeper`, {start['repeats']} runs) | "
             f"{_range(start['plan'])} | `python -c pass`: {_range(start['python_pass'])} | <= 60 ms |",
             f"| the same, CPU time (user + system) of the process | {_range(start['plan_cpu'])} "
             f"| `python -c pass`: {_range(start['python_pass_cpu'])} | |",
             f"| `scratchkeeper plan --dry-run`, installed as users run it (console script of a "
             f"non-editable install) | {_range(start['installed_plan'])} | `python -c pass`: "
             f"{_range(start['installed_python_pass'])} | <= 60 ms |",
             f"| the same, CPU time | {_range(start['installed_plan_cpu'])} | `python -c pass`: "
             f"{_range(start['installed_python_pass_cpu'])} | |",
             f"| `scratchkeeper plan --dry-run` through the command server (the C client "
             f"`/usr/local/bin/scratchkeeper` is; the server started by an earlier command) | "
             f"{_range(start['client_plan'])} | `python -c pass`: "
             f"{_range(start['installed_python_pass'])} | <= 60 ms |",
             f"| `python -c \"import jinja2\"` of the installed form (what rendering with Jinja2 "
             f"in process would cost at least; the compiled templates do not import it) | "
             f"{_range(start['installed_import_jinja2'])} | "
             f"CPU {_range(start['installed_import_jinja2_cpu'])} | |"]
    if submit:
        lines += [
            f"| `submit_plan` wall time / sum of its scheduler calls (3 jobs, {submit['repeats']} runs) "
            f"| {submit['in_process_ratio_median']:.2f}x | {submit['in_process_median_s'] * 1000:.1f} ms vs "
            f"{submit['scheduler_calls_median_s'] * 1000:.1f} ms | <= 1.2x |",
            f"| `scratchkeeper submit` process (editable) / the same sbatch and scontrol calls from "
            f"a shell script (3 jobs, {submit['repeats']} runs) | "
            f"{submit['cli_vs_shell_ratio_median']:.2f}x "
            f"| {_range(submit['cli'])} vs {_range(submit['shell_peer'])} | <= 2x |",
            f"| `scratchkeeper submit` process (installed) / the same shell script | "
            f"{submit['installed_cli_vs_shell_ratio_median']:.2f}x | "
            f"{_range(submit['installed_cli'])} vs {_range(submit['shell_peer'])} | <= 2x |",
            f"| `scratchkeeper submit` through the command server / the same shell script | "
            f"{submit['client_cli_vs_shell_ratio_median']:.2f}x | "
            f"{_range(submit['client_cli'])} vs {_range(submit['shell_peer'])} | <= 2x |",
            f"| `scratchkeeper submit` process (editable) / the sum of its own scheduler calls "
            f"| {submit['cli_ratio_median']:.2f}x | {submit['cli_wall_median_s'] * 1000:.1f} ms vs "
            f"{submit['cli_scheduler_calls_median_s'] * 1000:.1f} ms | (for comparison) |"]
    else:
        lines.append("| `submit` on the local cluster | not run | the cluster was not up | |")
    lines += ["", "## Goals in this run", ""] + goals(start, submit)
    imports = start["importtime"]
    lines += ["", "## The command's start: the rule", "",
              "A run imports the module of its subcommand only (`scratchkeeper/cli/__init__.py`: "
              "`COMMANDS`, subcommand -> module); a module's `register` imports only what its "
              "parsers need and each handler imports the rest when it runs. A name missing from "
              "the table (a new module, `--help`, a typo) loads every module, so a new subcommand "
              "is still just a new module; `tests/test_cli_imports.py` checks the table against "
              "the modules and, in a fresh interpreter, that `plan --dry-run` loads neither the "
              "state database (sqlite3) nor recovery, storage, replication, the solver or the other "
              "scheduler backend. The built-in job templates are compiled to plain Python with "
              "Jinja2's parser and kept beside them in `__pycache__` "
              "(`scratchkeeper/planner/template_compiler.py`, `compiled_templates.py`; written by "
              "the package's owner, the runtime install compiles them), so a run renders without "
              "importing Jinja2 at all (Jinja2 renders only a site's override templates); "
              "tomllib is imported when a configuration file is read. The classes on the "
              "command's path are `scratchkeeper.structs.record`s: dataclasses whose methods are "
              "shared functions instead of code written and compiled per class (about 0.5 ms a "
              "class; the configuration schema alone has 18).",
              "", "## `python -X importtime` of `scratchkeeper plan --dry-run` (installed form)",
              "",
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
