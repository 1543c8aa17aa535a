"""sbatch latency with and without the burst buffer, under concurrent submissions (issue 46,
item 2: slurm_bb_job_process ran the planner's Python inside slurmctld for every sbatch).

    .venv/bin/python -m benchmarks.bb_submit [--jobs 100] [--rounds 3]

As root, on a cluster `scripts/local-cluster up` started, with the plugins installed
(`make -C slurm-plugins install LOCAL=1`). The run turns the cluster's burst-buffer mode on
(`local-cluster burst-buffer on`: a slurmctld restart) and, if it was off, back off at the end.

Peers, in the same run, on the same controller, in alternating rounds:

* ``burst-buffer``: a plain user's ``sbatch --hold job.sh`` whose script has #STAGEIN/#STAGEOUT
  lines and options (absolute paths in the user's scratch): slurmctld calls
  slurm_bb_job_process, which reads the script and checks its directives (in Lua);
* ``plain``: the same command and script without the #STAGE lines: no burst-buffer call;
* ``plugin-off`` (``--off-rounds``, after the others): the plain script with BurstBufferType
  unset, the controller as it is without the plugin.

Each round starts ``--jobs`` sbatch at once (a thread each, each its own process), all of one
peer, and times each command from its start to its exit. slurmctld's own time for each
submission (``_slurm_rpc_submit_batch_job: JobId=N ... usec=U`` in its log: the RPC under its
locks, job_process included) is read too. The jobs are held, so nothing stages in or runs, and
they are cancelled after each round. Every sbatch must succeed and every burst-buffer job must
carry its BurstBuffer field; a run that sees otherwise exits 1 and says so in the report.

Report: docs/benchmarks/bb_submit/report.md (ratios of p95 and median: burst-buffer over
plain; goal <= 1.5); raw figures in benchmarks/results/bb_submit/.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pwd
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks import harness

NAME = "bb_submit"
LOCAL_CLUSTER = harness.REPO / "scripts" / "local-cluster"
USER = "skplain"
RPC = re.compile(r"_slurm_rpc_submit_batch_job: JobId=(\d+) .*?usec=(\d+)")


@dataclass
class Submission:
    peer: str
    round: int
    seconds: float
    job_id: str = ""
    rpc_usec: int | None = None
    error: str = ""


@dataclass
class Run:
    submissions: list[Submission] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def run(argv: list[str], *, check: bool = True, timeout: float = 300
        ) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise SystemExit(f"{NAME}: {' '.join(argv)}: {done.stderr.strip()}")
    return done


def say(text: str) -> None:
    print(f"{NAME}: {text}", file=sys.stderr, flush=True)


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank ``q`` percentile (0 < q <= 100)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def scripts(folder: Path, cluster: dict, user: tuple[int, int]) -> dict[str, Path]:
    """The burst-buffer script and its plain twin, the user's."""
    body = "echo computed\n"
    staging = (f"#STAGEIN -retry 2 -walltime 00:10:00\n"
               f"#STAGEIN {cluster['gridftp_url']}/bb-submit/in.dat {folder}/in.dat\n"
               f"#STAGEIN {cluster['http_source_url']}bb-submit/more.dat {folder}/more.dat\n"
               f"#STAGEOUT {folder}/out.dat {cluster['http_sink_url']}bb-submit-out.dat\n")
    header = "#!/bin/bash\n#SBATCH --output=/dev/null --job-name=bb-submit\n"
    made = {"burst-buffer": folder / "bb.sh", "plain": folder / "plain.sh"}
    made["burst-buffer"].write_text(header + staging + body)
    made["plain"].write_text(header + body)
    for path in made.values():
        os.chown(path, *user)
    return made


def one_round(peer: str, number: int, script: Path, jobs: int, user: tuple[int, int],
              folder: Path) -> list[Submission]:
    """``jobs`` sbatch of ``script`` started at once, as ``user``; each timed."""
    start = threading.Barrier(jobs)

    def as_user():
        os.setgroups([])
        os.setgid(user[1])
        os.setuid(user[0])

    def submit(_: int) -> Submission:
        start.wait()
        began = time.monotonic()
        try:
            done = subprocess.run(["sbatch", "--parsable", "--hold", str(script)],
                                  capture_output=True, text=True, timeout=300, cwd=folder,
                                  preexec_fn=as_user)
        except subprocess.TimeoutExpired:
            return Submission(peer, number, time.monotonic() - began, error="timed out (300 s)")
        seconds = time.monotonic() - began
        if done.returncode != 0:
            return Submission(peer, number, seconds, error=done.stderr.strip()[-200:])
        return Submission(peer, number, seconds, job_id=done.stdout.strip().split(";")[0])

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(submit, range(jobs)))


def rpc_times(log: Path, offset: int) -> dict[str, int]:
    """slurmctld's time for each submission RPC logged after ``offset``: job id -> usec."""
    with open(log, "rb") as stream:
        stream.seek(offset)
        text = stream.read().decode(errors="replace")
    return {job_id: int(usec) for job_id, usec in RPC.findall(text)}


def cancel_all(job_ids: list[str]) -> None:
    """Cancel the round's jobs and wait until the queue has none of them (up to 5 minutes)."""
    if not job_ids:
        return
    for start in range(0, len(job_ids), 200):
        run(["scancel", *job_ids[start:start + 200]], check=False)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        out = run(["squeue", "-h", "-o", "%i", "-j", ",".join(job_ids)], check=False).stdout
        if not out.strip():
            return
        time.sleep(1)
    say(f"jobs still queued 5 minutes after scancel: {out.split()[:10]}")


def taken_by_the_burst_buffer(job_id: str) -> bool:
    shown = run(["scontrol", "show", "job", job_id], check=False).stdout
    return "BurstBuffer=#STAGEIN" in shown


def measure(peer: str, number: int, script: Path, args, user, folder: Path, log: Path,
            result: Run) -> None:
    offset = log.stat().st_size
    done = one_round(peer, number, script, args.jobs, user, folder)
    time.sleep(1)  # the log line of the last RPC
    usec = rpc_times(log, offset)
    for submission in done:
        submission.rpc_usec = usec.get(submission.job_id)
        if submission.error:
            result.problems.append(f"{peer} round {number}: sbatch failed: {submission.error}")
    ids = [s.job_id for s in done if s.job_id]
    if peer == "burst-buffer":
        result.problems += [f"job {j}: not taken by the burst buffer" for j in ids[:5]
                            if not taken_by_the_burst_buffer(j)]
    cancel_all(ids)
    result.submissions += done
    seconds = [s.seconds for s in done if not s.error]
    say(f"{peer} round {number}: {len(seconds)}/{len(done)} submitted, median "
        f"{statistics.median(seconds) if seconds else float('nan'):.3f} s, p95 "
        f"{percentile(seconds, 95) or float('nan'):.3f} s")


def summarize(result: Run) -> dict:
    out: dict = {}
    for peer in ("burst-buffer", "plain", "plugin-off"):
        mine = [s for s in result.submissions if s.peer == peer and not s.error]
        if not mine:
            continue
        seconds = [s.seconds for s in mine]
        usec = [s.rpc_usec for s in mine if s.rpc_usec is not None]
        out[peer] = {"submitted": len(mine),
                     "failed": sum(1 for s in result.submissions if s.peer == peer and s.error),
                     "median": statistics.median(seconds), "p95": percentile(seconds, 95),
                     "max": max(seconds),
                     "rpc_median_ms": statistics.median(usec) / 1000 if usec else None,
                     "rpc_p95_ms": percentile(usec, 95) / 1000 if usec else None}
    for other in ("plain", "plugin-off"):
        if "burst-buffer" in out and other in out:
            out[f"ratio_over_{other}"] = {
                key: out["burst-buffer"][key] / out[other][key]
                for key in ("median", "p95") if out[other][key]}
    return out


def fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def write_report(args, summary: dict, result: Run, began: str) -> Path:
    lines = [
        "# sbatch latency with and without the burst buffer (issue 46, item 2)", "",
        f"Run {began} on {harness.machine()}, load {harness.load_average()}; the local cluster "
        "(Slurm 22.05, slurmctld on the same host as the submitting commands). Command: "
        f"`.venv/bin/python -m benchmarks.bb_submit --jobs {args.jobs} --rounds {args.rounds} "
        f"--off-rounds {args.off_rounds}`.", "",
        f"Each round starts {args.jobs} `sbatch --hold` at once, from a plain user, all of one "
        "peer; burst-buffer and plain rounds alternate on the same controller in burst-buffer "
        "mode, the plugin-off rounds follow with BurstBufferType unset. Seconds: each command's "
        "wall time. RPC: slurmctld's own time for the submission (its log's `usec=`), under "
        "its locks, `slurm_bb_job_process` included.", "",
        "| peer | submitted | failed | median s | p95 s | max s | RPC median ms | RPC p95 ms |",
        "|---|---|---|---|---|---|---|---|"]
    for peer in ("burst-buffer", "plain", "plugin-off"):
        row = summary.get(peer)
        if row:
            lines.append(f"| {peer} | {row['submitted']} | {row['failed']} | {fmt(row['median'])} "
                         f"| {fmt(row['p95'])} | {fmt(row['max'])} | "
                         f"{fmt(row['rpc_median_ms'], 2)} | {fmt(row['rpc_p95_ms'], 2)} |")
    lines.append("")
    for other in ("plain", "plugin-off"):
        ratio = summary.get(f"ratio_over_{other}")
        if ratio:
            lines.append(f"burst-buffer over {other}: median {fmt(ratio.get('median'), 2)}x, "
                         f"p95 {fmt(ratio.get('p95'), 2)}x (goal: at most 1.5x).")
    lines += ["", "## Problems", ""] + ([f"- {p}" for p in result.problems] or ["none"]) + [""]
    path = harness.report_dir(NAME) / "report.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(prog=f"benchmarks.{NAME}", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=100, help="sbatch started at once per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each peer in bb mode")
    parser.add_argument("--off-rounds", type=int, default=1,
                        help="rounds of plain jobs with the plugin off, after (0: none)")
    args = parser.parse_args()
    harness.require_root(NAME, "it submits as the test user and switches slurmctld's mode")
    cluster = harness.local_cluster(NAME)
    entry = pwd.getpwnam(USER)
    user = (entry.pw_uid, entry.pw_gid)
    log = Path(cluster["log_dir"]) / "slurmctld.log"
    was_on = bool(cluster.get("burst_buffer"))
    folder = Path(cluster["scratch_root"]) / f"{USER}-bbsubmit-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    os.chown(folder, *user)
    began = harness.utc_now()
    result = Run()
    try:
        made = scripts(folder, cluster, user)
        run([sys.executable, str(LOCAL_CLUSTER), "burst-buffer", "on"])
        for number in range(1, args.rounds + 1):
            order = ("burst-buffer", "plain") if number % 2 else ("plain", "burst-buffer")
            for peer in order:
                measure(peer, number, made[peer], args, user, folder, log, result)
        if args.off_rounds:
            run([sys.executable, str(LOCAL_CLUSTER), "burst-buffer", "off"])
            for number in range(1, args.off_rounds + 1):
                measure("plugin-off", number, made["plain"], args, user, folder, log, result)
    finally:
        state = "on" if was_on else "off"
        run([sys.executable, str(LOCAL_CLUSTER), "burst-buffer", state], check=False)
        shutil.rmtree(folder, ignore_errors=True)
    summary = summarize(result)
    harness.write_json(harness.results_dir(NAME) / "results.json",
                       {"summary": summary, "submissions": [asdict(s) for s in result.submissions],
                        "problems": result.problems})
    print(f"report: {write_report(args, summary, result, began)}")
    print(json.dumps({k: v for k, v in summary.items() if k.startswith("ratio")}))
    return 1 if result.problems else 0


if __name__ == "__main__":
    sys.exit(main())
