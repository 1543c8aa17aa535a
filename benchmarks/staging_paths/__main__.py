"""Three ways a Slurm user gets staging, on the same work (issue 33): Slurm's burst-buffer path
(``burst_buffer.lua``), ``scratchkeeper submit`` and the SPANK options with the chain service.

    .venv/bin/python -m benchmarks.staging_paths [--repeats 5] [--size BYTES] [--busy 40]

As root, on a cluster `scripts/local-cluster up` started, with the plugins installed
(`make -C slurm-plugins install LOCAL=1`). The run turns the cluster's burst-buffer mode on
(`local-cluster burst-buffer on`) and back off at the end. In that mode the three paths live
side by side: a script with #STAGE lines goes to the burst buffer, a job with
--stage-in/--stage-out to the chain service, and `submit` chains its own jobs.

Each job stages one file in from GridFTP, hashes it, and stages the hash out to nginx:

* ``burst-buffer``: a plain user's ``sbatch job.sh`` with #STAGEIN/#STAGEOUT lines;
* ``spank``: a plain user's ``sbatch --stage-in=SRC:DST --stage-out=SRC:DST job.sh``;
* ``submit``: ``scratchkeeper submit job.sh`` by root with the cluster's own site.toml (a plain
  user's ``submit`` hands the script to the chain service, i.e. the ``spank`` path).

Three scenarios: an idle cluster (jobs one at a time), a busy one (every node's batch CPUs held
by a blocker for ``--busy`` seconds, one CPU per node left to the data queue: how soon each job
starts once nodes free, and how long its input sat on scratch before), and a stage-in that fails
(a missing source: how the job ends, and where its user reads why). What squeue said at each
poll is kept per job. Report: docs/benchmarks/staging_paths/report.md; raw figures in
benchmarks/results/staging_paths/.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks import harness
from scratchkeeper.planner import records
from scratchkeeper.state import StateStore

NAME = "staging_paths"
PATHS = ("burst-buffer", "spank", "submit")
LOCAL_CLUSTER = harness.REPO / "scripts" / "local-cluster"
USER = "skplain"


@dataclass
class Job:
    path: str
    scenario: str
    submitted: float
    job_id: str = ""
    chain_id: str = ""
    states: list[tuple[float, str]] = field(default_factory=list)
    final: str = ""
    start: float | None = None
    end: float | None = None
    stage_in_end: float | None = None
    stage_out_end: float | None = None
    comment: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def to_start(self) -> float | None:
        return None if self.start is None else self.start - self.submitted

    @property
    def to_results(self) -> float | None:
        return None if self.stage_out_end is None else self.stage_out_end - self.submitted


def run(argv: list[str], *, user: tuple[int, int] | None = None, cwd: Path | None = None,
        check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    def as_user():
        os.setgroups([])
        os.setgid(user[1])
        os.setuid(user[0])

    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          preexec_fn=as_user if user else None)
    if check and done.returncode != 0:
        raise SystemExit(f"{NAME}: {' '.join(argv)}: {done.stderr.strip()}")
    return done


def sacct(job_id: str) -> dict[str, str]:
    """State, Start, End, Comment of a job once accounting has its whole record."""
    for _ in range(120):
        out = run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o",
                   "State,Start,End,Comment,Partition"], check=False).stdout.strip()
        fields = out.split("|") if out else []
        if len(fields) == 5 and fields[4] and fields[2] not in ("Unknown", ""):
            return {"state": fields[0].split()[0], "start": fields[1], "end": fields[2],
                    "comment": fields[3]}
        time.sleep(1)
    return {"state": "UNKNOWN", "start": "", "end": "", "comment": ""}


def say(text: str) -> None:
    print(f"{NAME}: {text}", file=sys.stderr, flush=True)


def epoch(text: str) -> float | None:
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


class Bench:
    def __init__(self, args, cluster: dict):
        import pwd

        entry = pwd.getpwnam(USER)
        self.user = (entry.pw_uid, entry.pw_gid)
        self.args, self.cluster = args, cluster
        tag = uuid.uuid4().hex[:8]
        self.scratch = Path(cluster["scratch_root"]) / f"{USER}-paths-{tag}"
        self.scratch.mkdir()
        os.chown(self.scratch, *self.user)
        self.root_scratch = Path(cluster["scratch_root"]) / f"root-paths-{tag}"
        self.root_scratch.mkdir()
        self.source_dir = Path(cluster["source_dir"]) / f"paths-{tag}"
        self.source_dir.mkdir()
        self.source = self.source_dir / "input.bin"
        self.source.write_bytes(os.urandom(args.size))
        os.chmod(self.source_dir, 0o755)
        os.chmod(self.source, 0o644)
        self.jobs: list[Job] = []
        self.count = 0
        self.store = records.open_records(StateStore(cluster["state_db"]))

    def close(self) -> None:
        import shutil

        for folder in (self.scratch, self.root_scratch, self.source_dir):
            shutil.rmtree(folder, ignore_errors=True)

    # -- one job of one path ------------------------------------------------------------------
    def submit(self, path: str, scenario: str, *, source: str | None = None,
               cpus: int = 1) -> Job:
        self.count += 1
        n = self.count
        folder = self.root_scratch if path == "submit" else self.scratch
        uri = source or f"{self.cluster['gridftp_url']}{self.source}"
        staged, result = folder / f"in-{n}.bin", folder / f"hash-{n}.txt"
        sink = f"{self.cluster['http_sink_url']}paths-{folder.name}-{n}.txt"
        body = f"sha256sum {staged} | cut -d' ' -f1 > {result}\n"
        header = f"#!/bin/bash\n#SBATCH --output=/dev/null -c {cpus} -J paths-{path}\n"
        lines = f"#STAGEIN {uri} {staged}\n#STAGEOUT {result} {sink}\n"
        script = folder / f"job-{n}.sh"
        script.write_text(header + (lines if path != "spank" else "") + body)
        if path != "submit":
            os.chown(script, *self.user)
        job = Job(path, scenario, time.time())
        if path == "burst-buffer":
            job.job_id = run(["sbatch", "--parsable", str(script)], user=self.user,
                             cwd=folder).stdout.strip()
        elif path == "spank":
            job.job_id = run(["sbatch", "--parsable", f"--stage-in={uri}:{staged}",
                              f"--stage-out={result}:{sink}", str(script)], user=self.user,
                             cwd=folder).stdout.strip()
        else:
            out = run([sys.executable, "-m", "scratchkeeper", "-c",
                       self.cluster["site_config"], "submit", "--json", str(script)],
                      cwd=folder).stdout
            chain_id = json.loads(out)["chain_id"]
            rows = {r["role"]: r for r in records.chain_jobs(self.store, chain_id)}
            job.job_id = rows["compute"]["job_id"] or ""
            if not job.job_id:
                job.problems.append(f"chain {chain_id}: no compute job recorded")
        self.jobs.append(job)
        return job

    def watch(self, jobs: list[Job], timeout: float = 600) -> None:
        """Poll squeue for ``jobs`` until every one left the queue; keep each change."""
        deadline = time.monotonic() + timeout
        left = {j.job_id: j for j in jobs if j.job_id}
        while left and time.monotonic() < deadline:
            out = run(["squeue", "-h", "-o", "%i|%T|%r", "-j", ",".join(left)],
                      check=False).stdout
            seen = {}
            for line in out.splitlines():
                parts = line.split("|")
                if len(parts) == 3:
                    seen[parts[0]] = f"{parts[1]} ({parts[2]})"
            now = time.time()
            for job_id, job in list(left.items()):
                state = seen.get(job_id, "gone")
                if not job.states or job.states[-1][1] != state:
                    job.states.append((round(now - job.submitted, 1), state))
                if state == "gone":
                    del left[job_id]
            time.sleep(0.3)
        for job in left.values():
            job.problems.append(f"still queued after {timeout:g} s")

    def settle(self, jobs: list[Job]) -> None:
        """Accounting's view of each job and of its chain's data jobs."""
        for job in jobs:
            if not job.job_id:
                continue
            record = sacct(job.job_id)
            job.final, job.comment = record["state"], record["comment"]
            job.start, job.end = epoch(record["start"]), epoch(record["end"])
            chain_id = records.chain_of_job(self.store, job.job_id)
            job.chain_id = chain_id or ""
            for row in records.chain_jobs(self.store, chain_id) if chain_id else []:
                if row["role"] in ("stage-in", "stage-out") and row["job_id"]:
                    data = sacct(row["job_id"])
                    when = epoch(data["end"])
                    if row["role"] == "stage-in":
                        job.stage_in_end = when
                        if data["state"] != "COMPLETED" and not job.comment:
                            job.comment = f"(stage-in job {row['job_id']}: " \
                                          f"{data['state']} {data['comment']})"
                    else:
                        job.stage_out_end = when

    # -- scenarios ----------------------------------------------------------------------------
    def idle(self) -> None:
        for _ in range(self.args.repeats):
            for path in PATHS:
                job = self.submit(path, "idle")
                self.watch([job])
                self.settle([job])
                say(f"idle {path}: {job.final}, start after "
                                 f"{job.to_start if job.to_start is not None else '-'} s")

    def busy(self) -> None:
        cpus = int(self.cluster.get("node_cpus", 4))
        blockers = []
        for node in self.cluster["nodes"]:
            blockers.append(run(["sbatch", "--parsable", "-w", node, "-c", str(cpus - 1),
                                 "-o", "/dev/null", "--wrap", f"sleep {self.args.busy}"]
                                ).stdout.strip())
        time.sleep(2)
        jobs = [self.submit(path, "busy", cpus=cpus - 1) for path in PATHS]
        self.watch(jobs)
        self.settle(jobs)
        freed = max(epoch(sacct(b)["end"]) or 0 for b in blockers)
        for job in jobs:
            job.problems += [] if job.start else ["never started"]
            say(f"busy {job.path}: start {job.start and job.start - freed:+.0f} s "
                             f"after the nodes freed")
        self.freed = freed

    def failing(self) -> None:
        missing = f"{self.cluster['gridftp_url']}{self.source_dir}/missing.bin"
        jobs = [self.submit(path, "stage-in fails", source=missing) for path in PATHS]
        self.watch(jobs, timeout=300)
        self.settle(jobs)


def summarize(bench: Bench) -> dict:
    out: dict = {"idle": {}, "busy": {}, "fails": {}}
    for path in PATHS:
        idle = [j for j in bench.jobs if j.scenario == "idle" and j.path == path]
        starts = [j.to_start for j in idle if j.to_start is not None]
        results = [j.to_results for j in idle if j.to_results is not None]
        out["idle"][path] = {
            "jobs": len(idle), "completed": sum(j.final == "COMPLETED" for j in idle),
            "to_start_median": statistics.median(starts) if starts else None,
            "to_start_max": max(starts) if starts else None,
            "to_results_median": statistics.median(results) if results else None}
        busy = [j for j in bench.jobs if j.scenario == "busy" and j.path == path]
        for job in busy:
            freed = getattr(bench, "freed", None)
            out["busy"][path] = {
                "start_after_free": None if job.start is None or freed is None
                else job.start - freed,
                "input_waited": None if job.start is None or job.stage_in_end is None
                else job.start - job.stage_in_end,
                "states": [s for _, s in job.states]}
        fails = [j for j in bench.jobs if j.scenario == "stage-in fails" and j.path == path]
        for job in fails:
            gone = [t for t, s in job.states if s == "gone"]
            out["fails"][path] = {"final": job.final, "comment": job.comment,
                                  "ended_after": gone[0] if gone else None,
                                  "states": [s for _, s in job.states]}
    return out


def release(cluster: dict) -> str:
    """The Slurm release the local cluster runs (cluster.json's ``slurm``)."""
    return str(cluster.get("slurm") or "22.05")


def report_name(cluster: dict, stem: str, suffix: str) -> str:
    """``report.md`` on Debian's 22.05, ``report-24.11.md`` on another release: both kept."""
    name = release(cluster)
    return f"{stem}.{suffix}" if name == "22.05" else f"{stem}-{name}.{suffix}"


def fmt(value, unit: str = " s") -> str:
    return "-" if value is None else f"{value:.0f}{unit}"


def write_report(bench: Bench, summary: dict, began: str) -> Path:
    args = bench.args
    lines = [
        "# Three staging paths on the same work: Slurm's burst buffer, `submit`, SPANK",
        "",
        f"Run {began} on {harness.machine()}, load {harness.load_average()}; the local cluster "
        f"(8 nodes of 4 CPUs on one host, Slurm {release(bench.cluster)}). Command: "
        f"`.venv/bin/python -m benchmarks.staging_paths --repeats {args.repeats} "
        f"--size {args.size} --busy {args.busy}`"
        + (" with 24.11's commands first on PATH (`make cluster SLURM=24.11`)."
           if release(bench.cluster) != "22.05" else "."),
        "",
        f"Each job stages in one {args.size / (1 << 20):.0f} MiB file from GridFTP, hashes it "
        "and stages the hash out to nginx. Times are from the submitting command's start to "
        "Slurm's start of the compute job (sacct, whole seconds), and to the end of the "
        "stage-out data job.",
        "",
        "## Idle cluster",
        "",
        "| path | jobs | completed | submit to start (median / max) | submit to results out "
        "(median) |",
        "|---|---|---|---|---|",
    ]
    for path in PATHS:
        row = summary["idle"][path]
        lines.append(f"| {path} | {row['jobs']} | {row['completed']} | "
                     f"{fmt(row['to_start_median'])} / {fmt(row['to_start_max'])} | "
                     f"{fmt(row['to_results_median'])} |")
    lines += ["", f"## Busy cluster (every node's batch CPUs held for {args.busy} s)", "",
              "| path | start after the nodes freed | input on scratch before the start | "
              "what squeue said, in order |", "|---|---|---|---|"]
    for path in PATHS:
        row = summary["busy"].get(path, {})
        lines.append(f"| {path} | {fmt(row.get('start_after_free'))} | "
                     f"{fmt(row.get('input_waited'))} | "
                     f"{' → '.join(row.get('states', [])) or '-'} |")
    lines += ["", "## A stage-in that fails (missing source)", "",
              "| path | final state | gone from the queue after | where the user reads why | "
              "what squeue said |", "|---|---|---|---|---|"]
    for path in PATHS:
        row = summary["fails"].get(path, {})
        lines.append(f"| {path} | {row.get('final') or '-'} | {fmt(row.get('ended_after'))} | "
                     f"{(row.get('comment') or '-')[:110]} | "
                     f"{' → '.join(row.get('states', [])) or '-'} |")
    problems = [f"- {j.path} {j.scenario} job {j.job_id}: {p}" for j in bench.jobs
                for p in j.problems]
    lines += ["", "## Problems", ""] + (problems or ["none"]) + [""]
    path = harness.report_dir(NAME) / report_name(bench.cluster, "report", "md")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(prog="benchmarks.staging_paths", description=__doc__)
    parser.add_argument("--repeats", type=int, default=5, help="idle jobs per path")
    parser.add_argument("--size", type=int, default=16 << 20, help="bytes staged per job")
    parser.add_argument("--busy", type=int, default=40, help="seconds the blockers hold nodes")
    args = parser.parse_args()
    harness.require_root(NAME, "it submits as the test user and switches slurmctld's mode")
    cluster = harness.local_cluster(NAME)
    began = harness.utc_now()
    run([sys.executable, str(LOCAL_CLUSTER), "burst-buffer", "on"], timeout=300)
    bench = Bench(args, cluster)
    try:
        bench.idle()
        bench.busy()
        bench.failing()
    finally:
        bench.close()
        run([sys.executable, str(LOCAL_CLUSTER), "burst-buffer", "off"], timeout=300,
            check=False)
    summary = summarize(bench)
    harness.write_json(harness.results_dir(NAME) / report_name(cluster, "results", "json"),
                       {"summary": summary, "jobs": [asdict(j) for j in bench.jobs]})
    print(f"report: {write_report(bench, summary, began)}")
    return 1 if any(j.problems for j in bench.jobs) else 0


if __name__ == "__main__":
    sys.exit(main())
