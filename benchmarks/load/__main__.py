"""Load benchmark on the local cluster: many users' chains at once (issue 14, "Under load").

    .venv/bin/python -m benchmarks.load [--chains 200] [--users 4] [--payload BYTES]
                                        [--path chain-service|spank|submit|burst-buffer]

As root, on a cluster `scripts/local-cluster up` started (recoveryd and the chain service
running). Users ``skload1``..``skloadN`` (created when missing, as the tests' plain user is)
each submit their share of the chains within a minute with ``scratchkeeper submit`` of the
users' configuration (``/etc/scratchkeeper/site.toml``, ``submit_via = "chain-service"``), as a
site's users do: job_submit.lua holds each job, the cluster's chain service chains its stage-in
(a small ``file://`` input the user owns), the data job runs as the user and records what it
staged through recoveryd. Every chain must complete with its file recorded and no log may
mention a locked database; it reports chains per minute and the slowest commit (each data
job's ``stage commit`` prints how long recording took, lock waits included). Each compute job
reads its staged input with ``sha256sum``: the data are verified where the job reads them.

``--path`` chooses the way in (issue 46: 200 chains from 4 users through each path):
``chain-service`` (default) hands a checked script with #STAGEIN lines to ``sbatch`` as
``scratchkeeper submit`` does under ``submit_via = "chain-service"``; ``spank`` puts the
stage-in in the script's ``#SBATCH --stage-in=SRC:DST`` (the SPANK plugin's option); both are
held by job_submit.lua and chained by the chain service. ``submit`` runs the whole
``scratchkeeper submit`` per chain with the users' configuration (it checks the script and hands
it to the chain service; the local cluster's users cannot submit ``direct``: the spool and the
state database are the head's). ``burst-buffer`` switches the cluster to Slurm's burst-buffer path
(``local-cluster burst-buffer on``, back off at the end) and submits the #STAGEIN script with
plain ``sbatch``: Slurm stages it in while the job pends.

It reports; a chain that fails or a lock error makes the run exit 1 and is written in the
report as such. Raw figures go to benchmarks/results/load/ (git-ignored), the report to
docs/benchmarks/load/report.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import hashlib
import json
import os
import platform
import pwd
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import harness
from scratchkeeper.chain_service.attach import SUBMIT_ENV
from scratchkeeper.config import load_config
from scratchkeeper.planner import records
from scratchkeeper.state import StateStore
from scratchkeeper.storage import open_backend

ROOT = harness.REPO
RESULTS = harness.results_dir("load")
REPORT = harness.report_dir("load") / "report.md"
USER_PREFIX = "skload"
LOCKED = "database is locked"
RETRIED = "databases busy, retrying"
COMMITTED = re.compile(r"^committed (\d+) file\(s\) in ([0-9.]+)s$", re.M)
#: sacct states of a job that has not ended yet
ACTIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING",
                    "SUSPENDED", "REQUEUE_HOLD", "REQUEUE_FED", "SIGNALING", "STAGE_OUT"})
DAEMON_LOGS = ("recoveryd", "spank-chain", "replicad")
PATHS = {
    "chain-service": "with `sbatch` as `scratchkeeper submit` hands a checked script with "
                     "#STAGEIN lines over, held by job_submit.lua, chained by the cluster's chain "
                     "service",
    "spank": "with `sbatch` and the SPANK plugin's `#SBATCH --stage-in=SRC:DST`, held by "
             "job_submit.lua, chained by the cluster's chain service",
    "submit": "with the whole `scratchkeeper submit` per chain (the users' configuration: it "
              "checks the script and hands it to the chain service)",
    "burst-buffer": "with plain `sbatch` of the #STAGEIN script on Slurm's burst-buffer path "
                    "(burst_buffer.lua: Slurm stages in while the job pends)",
}
#: earlier runs' ``via`` (before ``--path``), as the path they took
OLD_VIA = {"sbatch": "chain-service", "cli": "submit (chain-service)"}


@dataclass
class Chain:
    user: str
    index: int
    script: Path
    staged: Path
    digest: str
    submitted_at: float = 0.0
    job_id: str = ""  # the compute job (what `submit` prints)
    chain_id: str = ""
    stage_in: str = ""
    stage_in_log: str = ""
    states: dict[str, str] = field(default_factory=dict)
    #: sacct's Submit and Start of each role (epoch seconds), once the job ended
    times: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    commit_seconds: float | None = None
    #: the compute job's sha256sum of its staged input was the source's
    verified: bool = False
    problems: list[str] = field(default_factory=list)


def run(argv: list[str], timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)


def load_user(name: str) -> pwd.struct_passwd:
    """The benchmark user ``name``, created when missing (a system user without a home)."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        run(["useradd", "--system", "--no-create-home", "--shell", "/bin/sh", name], timeout=30,
            check=True)
        return pwd.getpwnam(name)


def owned_dir(path: Path, account: pwd.struct_passwd) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, account.pw_uid, account.pw_gid)
    path.chmod(0o755)
    return path


def prepare(status: dict, run_id: str, users: int, chains: int, payload: int,
            work: Path, path: str) -> list[Chain]:
    """Users, their inputs, scratch folders and scripts; the chains in submission order."""
    source_root = Path(status["source_dir"]) / run_id
    scratch_root = Path(status["scratch_root"])
    made: list[Chain] = []
    for number in range(1, users + 1):
        name = f"{USER_PREFIX}{number}"
        account = load_user(name)
        source = owned_dir(source_root / name, account)
        scratch = owned_dir(owned_dir(scratch_root / name, account) / run_id, account)
        home = owned_dir(work / name, account)
        for index in range(number - 1, chains, users):
            data = os.urandom(payload + index)
            source_file = source / f"in{index}.dat"
            source_file.write_bytes(data)
            os.chown(source_file, account.pw_uid, account.pw_gid)
            staged = scratch / f"in{index}.dat"
            script = home / f"chain{index}.sh"
            stage = (f"#SBATCH --stage-in=file://{source_file}:{staged}\n" if path == "spank"
                     else f"#STAGEIN -retry 1\n#STAGEIN file://{source_file} {staged}\n")
            script.write_text(f"""#!/bin/bash
#SBATCH --job-name={run_id}-{index}
#SBATCH --output={home}/compute-{index}.out
{stage}sha256sum {staged}
""")
            os.chown(script, account.pw_uid, account.pw_gid)
            made.append(Chain(name, index, script, staged, hashlib.sha256(data).hexdigest()))
    made.sort(key=lambda c: c.index)
    source_root.chmod(0o755)
    return made


def submit(chain: Chain, command: list[str], users_config: str, path: str) -> None:
    """Submit as the chain's user, from its folder, by ``path`` (see the module's text):
    ``scratchkeeper submit`` (``submit``, with ``users_config``), or plain sbatch (with
    SUBMIT_ENV set on the chain service's path, as ``submit`` hands a checked script over),
    without an interpreter start per chain."""
    if path == "submit":
        argv = [*command, "-c", users_config, "submit", str(chain.script), "--json"]
    elif path == "chain-service":
        argv = ["env", f"{SUBMIT_ENV}=chain-service", "sbatch", "--parsable", str(chain.script)]
    else:
        argv = ["sbatch", "--parsable", str(chain.script)]
    result = run(["runuser", "-u", chain.user, "--", *argv], timeout=300, cwd=chain.script.parent)
    chain.submitted_at = time.monotonic()
    if result.returncode != 0:
        chain.problems.append(f"submit exit {result.returncode}: {result.stderr.strip()}")
        return
    chain.job_id = json.loads(result.stdout)["job_id"] if path == "submit" else \
        result.stdout.strip().split(";")[0]


def local_cluster(*args: str) -> None:
    """``scripts/local-cluster ARGS`` (the burst-buffer path on or off); stops the run on error."""
    result = run([sys.executable, str(ROOT / "scripts" / "local-cluster"), *args], timeout=600)
    if result.returncode != 0:
        raise SystemExit(f"benchmark: local-cluster {' '.join(args)}: {result.stderr.strip()}")


def _epoch(text: str) -> float | None:
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None  # Unknown, None


def sacct_states(job_ids: list[str]) -> dict[str, tuple[str, float | None, float | None]]:
    """(state, submit time, start time) of the jobs whose accounting record is final."""
    found = {}
    for start in range(0, len(job_ids), 200):
        result = run(["sacct", "-n", "-X", "-P", "-o", "JobID,State,Partition,Submit,Start",
                      "-j", ",".join(job_ids[start:start + 200])], timeout=120)
        for line in result.stdout.splitlines():
            fields = line.split("|")
            if len(fields) == 5 and fields[2] and fields[1].split()[0] not in ACTIVE:
                found[fields[0]] = (fields[1].split()[0], _epoch(fields[3]), _epoch(fields[4]))
    return found


def wait(chains: list[Chain], store: StateStore, timeout: float) -> float:
    """Wait until every chained job has ended; the moment the last was seen ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for chain in chains:
            if chain.job_id and not chain.stage_in:
                chain.chain_id = records.chain_of_job(store, chain.job_id) or ""
                rows = {r["role"]: r for r in records.chain_jobs(store, chain.chain_id)} \
                    if chain.chain_id else {}
                if "stage-in" in rows and rows["stage-in"]["job_id"]:
                    chain.stage_in = rows["stage-in"]["job_id"]
                    chain.stage_in_log = rows["stage-in"]["log_path"].replace("%j", chain.stage_in)
        jobs = [j for c in chains for j in (c.job_id, c.stage_in) if j]
        ended = sacct_states(jobs)
        for chain in chains:
            roles = (("compute", chain.job_id), ("stage-in", chain.stage_in))
            chain.states = {role: ended[j][0] for role, j in roles if j in ended}
            chain.times = {role: ended[j][1:] for role, j in roles if j in ended}
        pending = [c for c in chains if c.job_id and len(c.states) < 2]
        if not pending:
            return time.monotonic()
        print(f"  {len(chains) - len(pending)}/{len(chains)} chains ended", flush=True)
        if time.monotonic() + 10 >= deadline:
            for chain in pending:  # stuck: reported as such, the run fails
                chain.problems.append(f"not ended after {timeout:g}s (ended: {chain.states})")
            return time.monotonic()
        time.sleep(10)
    return time.monotonic()


def check(chains: list[Chain], config, store: StateStore) -> None:
    backend = open_backend(config)
    for chain in chains:
        if not chain.job_id:
            continue
        for role in ("stage-in", "compute"):
            if chain.states.get(role) != "COMPLETED":
                chain.problems.append(f"{role} {chain.states.get(role)}")
        try:
            log = Path(chain.stage_in_log).read_text(errors="replace")
        except OSError as err:
            chain.problems.append(f"stage-in log: {err}")
            log = ""
        found = COMMITTED.search(log)
        if found:
            chain.commit_seconds = float(found.group(2))
        if LOCKED in log:
            chain.problems.append(f"{chain.stage_in_log}: {LOCKED}")
        rows = records.staged_files(store, chain.chain_id) if chain.chain_id else []
        if len(rows) != 1 or rows[0]["state"] != "staged" \
                or rows[0]["checksum"] != "sha256:" + chain.digest:
            chain.problems.append(f"staged file not recorded: {[dict(r) for r in rows]}")
            continue
        output = chain.script.parent / f"compute-{chain.index}.out"
        try:
            if output.read_text(errors="replace") != f"{chain.digest}  {chain.staged}\n":
                chain.problems.append(f"{output}: not the staged bytes' sha256 (the compute "
                                      "job's sha256sum of its input)")
            else:
                chain.verified = True
        except OSError as err:
            chain.problems.append(f"compute output: {err}")
        info = backend.stat(str(chain.staged))
        if info.uid != pwd.getpwnam(chain.user).pw_uid:
            chain.problems.append(f"{chain.staged} is uid {info.uid}'s")


def log_sizes(log_dir: Path) -> dict[str, int]:
    return {name: (log_dir / f"{name}.log").stat().st_size
            for name in DAEMON_LOGS if (log_dir / f"{name}.log").exists()}


def daemon_log_lines(log_dir: Path, since: dict[str, int], pattern: str) -> dict[str, list[str]]:
    """Lines containing ``pattern`` the daemons logged since ``since`` (their sizes then)."""
    found = {}
    for name, offset in since.items():
        with open(log_dir / f"{name}.log", errors="replace") as handle:
            handle.seek(offset)
            found[name] = [line.rstrip() for line in handle if pattern in line]
    return found


def runtime_has_the_fix(status: dict) -> bool:
    release = Path(status.get("runtime", {}).get("release", ""))
    state = list(release.glob("lib/python3*/site-packages/scratchkeeper/state.py"))
    return bool(state) and "def retry_busy" in state[0].read_text()


def chaining_delays(chains: list[Chain]) -> dict[str, list[float]]:
    """Per chain, from the compute job's submission (sacct Submit, Slurm's clock) to its
    stage-in's submission by the chain service (the chaining delay) and to its start."""
    delays: dict[str, list[float]] = {"to stage-in submitted": [], "to stage-in started": []}
    for chain in chains:
        compute = chain.times.get("compute", (None, None))[0]
        submitted, started = chain.times.get("stage-in", (None, None))
        if compute is None:
            continue
        if submitted is not None:
            delays["to stage-in submitted"].append(submitted - compute)
        if started is not None:
            delays["to stage-in started"].append(started - compute)
    return delays


def paced_submit(chains: list[Chain], rate: float, submitters: int, command: list[str],
                 users_config: str, path: str) -> None:
    """Submit every chain; with ``rate`` (chains per minute), chain i not before i * 60 / rate
    seconds after the first, as a site's users submit over time rather than in one burst."""
    start = time.monotonic()

    def one(chain: Chain) -> None:
        if rate > 0:
            due = start + chain.index * 60.0 / rate
            time.sleep(max(0.0, due - time.monotonic()))
        submit(chain, command, users_config, path)

    with concurrent.futures.ThreadPoolExecutor(max_workers=submitters) as pool:
        list(pool.map(one, chains))


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * (len(ordered) - 1) + 0.5))]


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.load", description=__doc__.split(
        "\n\n")[0])
    parser.add_argument("--chains", type=int, default=200)
    parser.add_argument("--users", type=int, default=4)
    parser.add_argument("--payload", type=int, default=64 << 10, help="bytes of each input")
    parser.add_argument("--submitters", type=int, default=12,
                        help="submissions in flight at once (all users together)")
    parser.add_argument("--path", choices=tuple(PATHS), default="chain-service",
                        help="the way in (default chain-service; see the module's text)")
    parser.add_argument("--rate", type=float, default=0.0, metavar="PER_MINUTE",
                        help="submit at this many chains per minute (default 0: all at once, "
                             "as fast as the submitters go)")
    parser.add_argument("--timeout", type=float, default=3600)
    args = parser.parse_args()
    harness.require_root("load", "it submits as the benchmark users")
    status = harness.local_cluster("load")
    for daemon in ("recoveryd", "spank-chain"):
        pid = status.get("pids", {}).get(daemon)
        if not pid or not Path(f"/proc/{pid}").exists():
            raise SystemExit(f"benchmark: the cluster's {daemon} is not running")
    users_config = status["users_site_config"]
    command = [status["runtime"]["command"]]
    config = load_config(status["site_config"])
    store = records.open_records(StateStore(config.state.database))
    log_dir = Path(status["log_dir"])
    run_id = time.strftime("load%Y%m%d%H%M%S", time.gmtime())

    # on /var/tmp, which every host of the cluster shares (each has a /tmp of its own)
    work = Path(tempfile.mkdtemp(prefix=f"sk-{run_id}-", dir="/var/tmp"))
    work.chmod(0o755)
    chains = prepare(status, run_id, args.users, args.chains, args.payload, work, args.path)
    print(f"{run_id}: {len(chains)} chains from {args.users} users, {args.payload} B inputs; "
          f"runtime {status['runtime']['release']} (fix in it: {runtime_has_the_fix(status)})",
          flush=True)
    since = log_sizes(log_dir)
    if args.path == "burst-buffer":
        local_cluster("burst-buffer", "on")
    try:
        started = time.monotonic()
        paced_submit(chains, args.rate, args.submitters, command, users_config, args.path)
        submitted = time.monotonic()
        print(f"  submitted in {submitted - started:.1f}s", flush=True)
        finished = wait(chains, store, args.timeout)
        check(chains, config, store)
    finally:
        if args.path == "burst-buffer":
            local_cluster("burst-buffer", "off")

    locked_lines = daemon_log_lines(log_dir, since, LOCKED)
    retried_lines = daemon_log_lines(log_dir, since, RETRIED)
    failed = [c for c in chains if c.problems]
    commits = [c.commit_seconds for c in chains if c.commit_seconds is not None]
    makespan = finished - started
    delays = chaining_delays(chains)
    slowest = max(chains, key=lambda c: c.commit_seconds or -1.0)
    results = {
        "run": run_id, "chains": len(chains), "users": args.users, "payload_bytes": args.payload,
        "submitters": args.submitters, "path": args.path, "submit_seconds": submitted - started,
        "makespan_seconds": makespan, "chains_per_minute": len(chains) / makespan * 60,
        "completed": len(chains) - len(failed),
        "verified": sum(c.verified for c in chains),
        "failed": [{"user": c.user, "index": c.index, "job": c.job_id, "chain": c.chain_id,
                    "problems": c.problems} for c in failed],
        "commit_seconds": {"measured": len(commits),
                           "slowest": max(commits) if commits else None,
                           "slowest_chain": slowest.chain_id if commits else None,
                           "median": statistics.median(commits) if commits else None,
                           "p95": percentile(commits, 0.95) if commits else None},
        "rate_per_minute": args.rate,
        "chaining_delay_seconds": {
            what: {"measured": len(values),
                   "median": statistics.median(values) if values else None,
                   "p95": percentile(values, 0.95) if values else None,
                   "max": max(values) if values else None}
            for what, values in delays.items()},
        "lock_errors_in_daemon_logs": locked_lines,
        "lock_retries_in_daemon_logs": {k: len(v) for k, v in retried_lines.items()},
        "runtime": status["runtime"], "runtime_has_the_fix": runtime_has_the_fix(status),
        "git_head": run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]).stdout.strip(),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "nodes": len(status["nodes"])},
        "date": harness.utc_now(),
    }
    harness.write_json(RESULTS / f"{run_id}.json", results, indent=2)
    write_report(results)
    print(json.dumps({k: results[k] for k in ("chains_per_minute", "completed", "commit_seconds",
                                              "chaining_delay_seconds",
                                              "lock_errors_in_daemon_logs")}, indent=2))
    ok = not failed and not any(locked_lines.values())
    return 0 if ok else 1


def path_of(results: dict) -> str:
    """The run's way in (runs before ``--path`` recorded ``via``)."""
    return results.get("path") or OLD_VIA.get(results.get("via", "cli"), "submit (chain-service)")


def write_report(results: dict) -> None:
    commit = results["commit_seconds"]
    locks = sum(len(v) for v in results["lock_errors_in_daemon_logs"].values())
    def seconds(value):
        return "not measured" if value is None else f"{value:.2f} s"

    lines = [
        "# Load benchmark",
        "",
        "Command: `.venv/bin/python -m benchmarks.load"
        + (f" --path {path_of(results)}" if path_of(results) != "chain-service" else "")
        + (f" --rate {results['rate_per_minute']:g}" if results.get("rate_per_minute") else "")
        + "` (as root) on the local cluster "
        f"({results['machine']['nodes']} slurmd on this {results['machine']['cpus']}-core "
        f"machine, shared with other work), {results['date']}, checkout {results['git_head']}, "
        f"runtime {Path(results['runtime']['release']).name}.",
        "",
        f"{results['chains']} chains from {results['users']} users (`skload1`..), each a "
        f"{results['payload_bytes'] // 1024} KiB `file://` stage-in and a compute job that "
        f"reads it with `sha256sum`, submitted as their users "
        f"{PATHS.get(path_of(results), path_of(results))} ({results['submitters']} "
        "submissions in flight), staged as the user and recorded through recoveryd.",
        "",
        "| measure | value |",
        "|---|---|",
        f"| chains submitted in | {results['submit_seconds']:.1f} s"
        + (f" (paced at {results['rate_per_minute']:g} a minute)"
           if results.get("rate_per_minute") else "") + " |",
        *[f"| **chaining delay {what}** (median / p95 / max) | "
          f"**{seconds(d['median'])} / {seconds(d['p95'])}** / {seconds(d['max'])} |"
          for what, d in results.get("chaining_delay_seconds", {}).items()],
        f"| all chains ended after | {results['makespan_seconds']:.0f} s |",
        f"| **chains per minute** | **{results['chains_per_minute']:.1f}** |",
        f"| chains completed, file recorded | {results['completed']} of {results['chains']} |",
        f"| **data verified** (the compute job's sha256sum of its input is the source's) | "
        f"**{results.get('verified', 'not measured')} of {results['chains']}** |",
        f"| **slowest commit** (`stage commit`, lock waits included) | "
        f"**{seconds(commit['slowest'])}** |",
        f"| median / p95 commit | {seconds(commit['median'])} / {seconds(commit['p95'])} |",
        f"| commits measured | {commit['measured']} |",
        f"| \"{LOCKED}\" in data-job and daemon logs | {locks} |",
        f"| lock waits retried (logged by recoveryd) | "
        f"{sum(results['lock_retries_in_daemon_logs'].values())} |",
        "",
    ]
    if results["failed"]:
        lines += ["Failed chains:", ""]
        lines += [f"- {f['user']} chain {f['index']} (job {f['job']}): "
                  f"{'; '.join(f['problems'])}" for f in results["failed"][:20]]
        lines.append("")
    lines += ["Every run kept in benchmarks/results/load/ (of at least 50 chains):", "",
              "| run | path | chains | submitted in | chaining delay p95: to stage-in "
              "submitted / started | chains/min | slowest commit | completed | data verified "
              "| lock errors |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for raw in sorted(RESULTS.glob("*.json")):
        past = json.loads(raw.read_text())
        if past["chains"] < 50:
            continue
        delay = past.get("chaining_delay_seconds", {})
        p95 = " / ".join(seconds(delay.get(what, {}).get("p95")) for what in
                         ("to stage-in submitted", "to stage-in started")) if delay else "-"
        lines.append(
            f"| {past['run']} | {path_of(past)} | {past['chains']} | "
            f"{past['submit_seconds']:.0f} s"
            + (f" ({past['rate_per_minute']:g}/min)" if past.get("rate_per_minute") else "")
            + f" | {p95} | {past['chains_per_minute']:.1f} | "
            f"{seconds(past['commit_seconds']['slowest'])} | {past['completed']} | "
            f"{past.get('verified', 'not measured')} | "
            f"{sum(len(v) for v in past['lock_errors_in_daemon_logs'].values())} |")
    lines += [
        "",
        "`scratchkeeper submit` costs an interpreter start and its imports per chain (about 1 s "
        "of CPU here): with 12 in flight on 2 shared cores, 200 take over 3 minutes, so the "
        "chain service's run submits the way it hands a checked script over (`sbatch` with "
        f"`{SUBMIT_ENV}=chain-service`, the same hold and chaining); `--path submit` runs the "
        "whole command per chain, `--path spank` and `--path burst-buffer` plain "
        "`sbatch`. Runs before `--path` existed show `submit (chain-service)` for the whole "
        "command handing over to the chain service.",
        "",
        "The chaining delay runs from a compute job's submission to its stage-in's (the chain "
        "service's part: holding, planning, submitting the data jobs, releasing; one sweep "
        "every 5 s, four jobs chained at once) and to the stage-in's start (Slurm's scheduling "
        "of the data queue, on the same 2 cores the data jobs' `stage commit` and the "
        "benchmark's submissions use); both from sacct's Submit and Start, whole seconds. "
        "`--rate 200` submits 200 chains over a minute, as a site's users do; the default "
        "submits them all at once.",
        "",
        "Chains per minute counts from the first submission to the moment the last job was "
        "seen ended (sacct polled every 10 s): the cluster's scheduling cycle and the 5 s "
        "chain-service sweep are in it, so it is the throughput a user sees, not the commit's.",
        "",
    ]
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text("\n".join(lines) + "\n")
    print(f"report: {REPORT.relative_to(ROOT)}")


if __name__ == "__main__":
    sys.exit(main())
