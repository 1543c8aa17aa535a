"""Replication decision-cycle benchmark.

One decision cycle (parsed queue snapshot in, decisions out) for 10,000 queued and 1,000 running
jobs, goal < 200 ms, in two situations: the first cycle (no claims, every target new) and the
steady state (the window's jobs and the running jobs already hold claims and replicas).

Then the daemon's whole cycle except the scheduler call itself, goal <= 200 ms: the queue
snapshot parsed from the text ``squeue -a -t all -o`` prints (each job a copy of a line captured
from the real Slurm 22.05, tests/data/slurm/squeue-snapshot.txt), the planner query, the claims and
replicas read, the decision and the state writes, through the real ``Scheduler`` with a command
runner that answers at once. Its peer, measured interleaved in the same process on a copy of
the same state database, is the cycle as it was: ``squeue --json`` (26.7 MB) parsed and
everything read and written whole every cycle. Both must decide the same.

    .venv/bin/python -m benchmarks.replication [--quick]

Writes benchmarks/results/replication/results.json and docs/benchmarks/replication/report.md.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import platform
import random
import statistics
import time

from benchmarks import harness
from scratchkeeper.replication.decisions import Claim, CycleInput, InputFile, JobInputs, ReplicaStatus, decide
from scratchkeeper.replication.window import WindowParams
from scratchkeeper.schedulers import slurm
from scratchkeeper.schedulers.base import JobRecord, JobState, QueueSnapshot

ROOT = harness.REPO
RESULTS = harness.results_dir("replication")
REPORT = harness.report_dir("replication") / "report.md"
SQUEUE_RESULTS = RESULTS / "squeue.json"
CAPTURED = ROOT / "tests" / "replication" / "data" / "squeue-window.json"
CAPTURED_TEXT = ROOT / "tests" / "data" / "slurm" / "squeue-snapshot.txt"
GOAL_MS = 200.0
SYSTEM_NODES = 4096


def node_count(rng: random.Random) -> int:
    """Job sizes skewed to small jobs, as in production logs: mostly 1-16 nodes, a few large."""
    return min(SYSTEM_NODES, 2 ** min(int(rng.expovariate(0.45)), 11) + rng.randrange(2))


def build_queue(queued: int, running: int, seed: int = 5) -> QueueSnapshot:
    rng = random.Random(seed)
    jobs = []
    for index in range(running):
        jobs.append(JobRecord(str(100000 + index), JobState.RUNNING, "RUNNING", queue="batch",
                              user=f"u{index % 300}", nodes=node_count(rng),
                              priority=10_000_000 - index, submit_time=1.7e9 + index))
    for index in range(queued):
        state = JobState.HELD if rng.random() < 0.03 else JobState.PENDING
        jobs.append(JobRecord(str(200000 + index), state, "PENDING",
                              reason="JobHeldUser" if state is JobState.HELD else "Priority",
                              queue="batch" if rng.random() < 0.9 else "large",
                              user=f"u{index % 300}", nodes=node_count(rng),
                              priority=rng.randrange(1, 9_000_000),
                              submit_time=1.7e9 + running + index))
    return QueueSnapshot(tuple(slurm.order_by_priority(jobs)))


def build_inputs(snapshot: QueueSnapshot, rng: random.Random) -> dict[str, JobInputs]:
    """Two thirds of the jobs have known inputs, one to three files each."""
    inputs = {}
    for job in snapshot.jobs:
        if rng.random() < 2 / 3:
            files = tuple(InputFile(f"/scratch/{job.user}/{job.job_id}/in{k}.h5",
                                    rng.randrange(1 << 20, 1 << 34))
                          for k in range(rng.randrange(1, 4)))
            inputs[job.job_id] = JobInputs(job.job_id, 1000 + int(job.user[1:]), files)
    return inputs


def steady_state(base: CycleInput) -> CycleInput:
    """The cycle after the first: every target's claims and replicas exist."""
    first = decide(base)
    claims = [Claim(c.job_id, c.path, True, c.reason) for c in first.claim]
    for job in base.snapshot.running():
        for item in base.inputs.get(job.job_id, JobInputs(job.job_id, 0, ())).files:
            claims.append(Claim(job.job_id, item.path))
    sizes = {f.path: f.size for j in base.inputs.values() for f in j.files}
    replicas = {c.path: ReplicaStatus(c.path, "ready", sizes.get(c.path) or 0) for c in claims}
    return CycleInput(snapshot=base.snapshot, system_nodes=base.system_nodes, inputs=base.inputs,
                      claims=claims, replicas=replicas, params=base.params,
                      partition_params=base.partition_params, ignored_queues=base.ignored_queues)


def time_it(function, repeats: int) -> dict:
    samples = []
    for _ in range(repeats):
        gc.collect()
        started = time.perf_counter()
        result = function()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return {"repeats": repeats, "median_ms": statistics.median(samples),
            "p95_ms": samples[min(len(samples) - 1, int(0.95 * len(samples)))],
            "max_ms": samples[-1], "min_ms": samples[0], "result": result}


def squeue_document(snapshot: QueueSnapshot) -> str:
    """An ``squeue --json`` document of the snapshot's jobs, each a copy of a captured job."""
    captured = json.loads(CAPTURED.read_text())
    template = next(j for j in captured["jobs"] if j["job_state"] == "PENDING")
    jobs = []
    for job in snapshot.jobs:
        entry = dict(template)
        running = job.state is JobState.RUNNING
        entry.update(job_id=int(job.job_id), node_count=job.nodes, priority=job.priority,
                     partition=job.queue, user_name=job.user, name=f"job{job.job_id}",
                     job_state="RUNNING" if running else "PENDING",
                     state_reason=job.reason or "None", submit_time=int(job.submit_time),
                     start_time=int(job.submit_time) if running else 0)
        jobs.append(entry)
    return json.dumps({"meta": captured.get("meta", {}), "errors": [], "jobs": jobs})


def squeue_text(snapshot: QueueSnapshot) -> str:
    """What ``slurm.build_snapshot()`` prints for the snapshot: each job a captured line."""
    import datetime

    lines = CAPTURED_TEXT.read_text().splitlines()
    assert "|".join(field.strip() for field in lines[0].split("|")) == slurm.SNAPSHOT_HEADER
    template = next(line.split("|", 9) for line in lines[1:] if "|RUNNING|" in line)
    out = [lines[0]]
    for job in snapshot.jobs:
        fields = list(template)
        running = job.state is JobState.RUNNING
        submit = datetime.datetime.fromtimestamp(job.submit_time).isoformat(timespec="seconds")
        fields[0], fields[1], fields[2] = job.job_id, job.queue, job.user
        fields[3], fields[4] = ("RUNNING", "None") if running else ("PENDING", job.reason)
        fields[4] = fields[4][:slurm.REASON_WIDTH].ljust(slurm.REASON_WIDTH)  # as squeue cuts it
        fields[5] = str(job.nodes)
        fields[6], fields[7] = submit, submit if running else "N/A"
        fields[8], fields[9] = str(job.priority), f"job{job.job_id}"
        out.append("|".join(fields))
    return "\n".join(out) + "\n"


def _priorities_raised(text: str) -> str:
    """The same queue with every job's priority one higher: every line differs, same order."""
    out = []
    for number, line in enumerate(text.splitlines()):
        if number:
            fields = line.split("|", 9)
            fields[8] = str(int(fields[8]) + 1)
            line = "|".join(fields)
        out.append(line)
    return "\n".join(out) + "\n"


class _Answers:
    """A command runner that answers ``squeue`` and ``sinfo`` at once with prepared output."""

    dry_run = False

    def __init__(self, *squeue: str):
        from scratchkeeper.runner import CommandResult
        self._squeue = itertools.cycle(squeue)
        self._result = CommandResult
        self._sinfo = "".join(f"node{n}\n" for n in range(SYSTEM_NODES))

    def run(self, argv, **_):
        out = next(self._squeue) if argv[0] == "squeue" else self._sinfo
        return self._result(tuple(argv), 0, out, "", 0.0)


def _json_backend():
    """The Slurm backend as it was: the snapshot is ``squeue --json`` and its parse."""
    import types
    backend = types.ModuleType("slurm_json")
    backend.__dict__.update({k: v for k, v in vars(slurm).items() if not k.startswith("__")})
    backend.build_snapshot = lambda: slurm.build_query(None)
    backend.parse_snapshot = lambda stdout, reuse=None: slurm.parse_query(stdout)
    return backend


def _same(a, b) -> bool:
    return (a.targets == b.targets and a.claim == b.claim and a.release == b.release
            and a.forget == b.forget and a.create == b.create and a.remove == b.remove
            and a.at_risk == b.at_risk and a.windows == b.windows)


def _daemon_config(folder: str, database: str):
    """The configuration of a daemon of the benchmark: its state database in ``folder``."""
    from scratchkeeper.config import parse_config

    return parse_config(f"""
[storage]
scratch_root = "/scratch"
store_root = "{folder}/store"
[state]
database = "{folder}/{database}"
[replication]
close_events = "none"
""", "benchmark.toml")


def _seed_state(database: str, steady: CycleInput) -> None:
    """The steady state in the planner's and the replication tables: the inputs, the claims
    and the replicas."""
    from scratchkeeper.planner import records
    from scratchkeeper.replication.state import ReplicationState
    from scratchkeeper.state import StateStore

    store = StateStore(database)
    records.open_records(store)
    ReplicationState(store)          # the replication tables
    with store.transaction() as conn:
        for job_id, item in steady.inputs.items():
            conn.execute("INSERT INTO chains VALUES (?,?,?,?,?,?,?,?,?,?)",
                         (job_id, "/dev/null", "/tmp", "slurm", item.owner_uid, "submitted",
                          "", 0, 0, "{}"))
            conn.execute("INSERT INTO chain_jobs(chain_id, job_key, role, queue, position,"
                         " job_id, state, updated) VALUES (?, 'compute', 'compute', 'batch',"
                         " 1, ?, 'submitted', 0)", (job_id, job_id))
            conn.executemany(
                "INSERT INTO staged_files(chain_id, path, job_key, source, line, state, size,"
                " checksum) VALUES (?, ?, 'stage-in', 'file:///x', 1, 'staged', ?, NULL)",
                [(job_id, f.path, f.size) for f in item.files])
        conn.executemany(
            "INSERT OR IGNORE INTO claims(job_id, path, active, reason, position, created,"
            " updated) VALUES (?, ?, 1, ?, 0, 0, 0)",
            [(c.job_id, c.path, c.reason) for c in steady.claims])
        conn.executemany(
            "INSERT INTO replicas(path, state, job_id, reason, mirror_id, expected_mirror_id,"
            " primary_mirrors, primary_osts, size, token, created, updated)"
            " VALUES (?, 'ready', '', 'window', 2, 2, '[1]', '[0]', ?, ?, 0, 0)",
            [(path, r.size, path) for path, r in steady.replicas.items()])
    store.close()


def daemon_cycle(steady: CycleInput, repeats: int) -> dict:
    """The whole daemon cycle in process, steady state, minus the squeue call itself, and its
    peer (the cycle as it was), interleaved.

    The planner's tables hold the inputs, the replication tables the claims and replicas; each
    cycle gets the snapshot through ``Scheduler.snapshot`` (parse included), reads what it
    needs, decides (no creation, no removal) and writes its status.
    """
    import shutil
    import tempfile

    from scratchkeeper.replication.daemon import ReplicationDaemon
    from scratchkeeper.schedulers import Scheduler
    from scratchkeeper.storage import open_backend

    with tempfile.TemporaryDirectory(prefix="skrep-bench-") as folder:
        config = _daemon_config(folder, "state.db")
        _seed_state(config.state.database, steady)
        shutil.copy(config.state.database, f"{folder}/peer.db")
        peer_config = _daemon_config(folder, "peer.db")
        text, document = squeue_text(steady.snapshot), squeue_document(steady.snapshot)
        daemon = ReplicationDaemon(config, scheduler=Scheduler(slurm),
                                   backend=open_backend(config))
        peer = ReplicationDaemon(peer_config, scheduler=Scheduler(_json_backend()),
                                 backend=open_backend(peer_config))
        try:
            timed = _time_cycles(daemon, peer, text, document, repeats)
        finally:
            daemon.shutdown()
            peer.shutdown()
        return {**timed, "squeue_text_bytes": len(text), "squeue_json_bytes": len(document)}


def _time_cycles(daemon, peer, text: str, document: str, repeats: int) -> dict:
    """The two daemons' cycles, interleaved, each answered at once with its own form of the
    same queue; the daemon's again with every line changed. Both must decide the same."""
    from scratchkeeper.runner import set_runner

    # every line changed at every cycle: what a cycle right after slurmctld recomputed
    # the priorities sees (PriorityCalcPeriod, 5 min by default); the order stays the same
    shifted = _priorities_raised(text)
    answers = {daemon: _Answers(text), peer: _Answers(document)}
    changing = _Answers(shifted)

    def one(which, forget: bool, runner=None):
        previous = set_runner(runner or answers[which])
        try:
            if forget:
                which.forget_kept()
            gc.collect()
            started = time.perf_counter()
            report = which.cycle()
            elapsed = (time.perf_counter() - started) * 1000
        finally:
            set_runner(previous)
        assert report.ok and not report.decisions.create and not report.decisions.remove
        return elapsed, report

    cold, first = one(daemon, False)        # the first cycle after a start reads all
    one(peer, True)
    if os.environ.get("SK_PROFILE"):
        import cProfile
        cProfile.runctx("one(daemon, False)", globals(), locals(), sort="cumtime")
    ours, theirs, changed, reads = [], [], [], []
    for _ in range(repeats):
        one(daemon, False)                  # after the changed lines below: steady again
        elapsed, report = one(daemon, False)
        ours.append(elapsed)
        reads.append(daemon._known_inputs.last_read)
        elapsed, peer_report = one(peer, True)
        theirs.append(elapsed)
        assert _same(report.decisions, peer_report.decisions), "decisions differ"
        elapsed, changed_report = one(daemon, False, changing)
        changed.append(elapsed)
        assert _same(changed_report.decisions, peer_report.decisions), "decisions differ"
    return {"cycle": _stats(ours), "peer": _stats(theirs), "cold_first_ms": cold,
            "cycle_all_lines_changed": _stats(changed),
            "cold_first_claims": len(first.decisions.claim),
            "ratio": statistics.median(theirs) / statistics.median(ours),
            "jobs_read_again": max(reads)}


def _stats(samples: list[float]) -> dict:
    samples = sorted(samples)
    return {"repeats": len(samples), "median_ms": statistics.median(samples),
            "p95_ms": samples[min(len(samples) - 1, int(0.95 * len(samples)))],
            "min_ms": samples[0], "max_ms": samples[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.replication")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--squeue", action="store_true",
                        help="only time the real squeue of the local cluster (both forms) and "
                             "keep the figures for the next run's report (SK_SQUEUE_NOTE: what "
                             "the queue held)")
    args = parser.parse_args()
    if args.squeue:
        # alone, so that the jobs held for it can be cancelled before the in-process timings
        squeue = real_squeue(10)
        squeue["measured"] = harness.utc_now()
        harness.write_json(SQUEUE_RESULTS, squeue, indent=2, newline=True)
        print(json.dumps(squeue, indent=2))
        return
    base, steady = set_up()
    summary = measure(base, steady, 5 if args.quick else 30)
    summary["quick"] = args.quick
    write(summary)


def set_up() -> tuple[CycleInput, CycleInput]:
    """The snapshot of 10,000 queued and 1,000 running jobs, their inputs: the first cycle's
    input and the steady state's."""
    snapshot = build_queue(10_000, 1_000)
    rng = random.Random(7)
    inputs = build_inputs(snapshot, rng)
    base = CycleInput(snapshot=snapshot, system_nodes=SYSTEM_NODES, inputs=inputs,
                      params=WindowParams(0.5, 0.1),
                      partition_params={"large": WindowParams(1.0, 0.0)},
                      ignored_queues=frozenset({"dataxfer", "replica"}),
                      space_budget=1 << 50)
    return base, steady_state(base)


def measure(base: CycleInput, steady: CycleInput, repeats: int) -> dict:
    """The decision, the parses and the daemon's whole cycle timed; the results (without
    ``quick``)."""
    snapshot, inputs = base.snapshot, base.inputs
    first = time_it(lambda: decide(base), repeats)
    again = time_it(lambda: decide(steady), repeats)
    document, text = squeue_document(snapshot), squeue_text(snapshot)
    parse_json, parse_text = [], []
    for _ in range(max(3, repeats // 3)):       # interleaved: load falls on both
        parse_json.append(time_it(lambda: len(slurm.order_by_priority(
            slurm.parse_query(document))), 1)["median_ms"])
        parse_text.append(time_it(lambda: len(slurm.order_by_priority(
            slurm.parse_snapshot(text))), 1)["median_ms"])
    whole = daemon_cycle(steady, max(5, repeats // 2))
    squeue = json.loads(SQUEUE_RESULTS.read_text()) if SQUEUE_RESULTS.exists() else None
    decisions = first.pop("result")
    steady_decisions = again.pop("result")
    return {
        "jobs": {"queued": len(snapshot.pending()), "running": len(snapshot.running()),
                 "with_inputs": len(inputs), "system_nodes": SYSTEM_NODES},
        "first_cycle": {**first, "targets": len(decisions.targets),
                        "claims": len(decisions.claim), "creations": len(decisions.create),
                        "windows": [(w.group, w.length, w.required) for w in decisions.windows]},
        "steady_cycle": {**again, "claims_in": len(steady.claims),
                         "creations": len(steady_decisions.create),
                         "removals": len(steady_decisions.remove)},
        "parse_squeue_text": {**_stats(parse_text), "bytes": len(text)},
        "parse_squeue_json": {**_stats(parse_json), "bytes": len(document)},
        "daemon_cycle_steady": whole,
        "squeue_call": squeue,
        "goal_ms": GOAL_MS,
        "machine": f"{platform.python_implementation()} {platform.python_version()}, "
                   f"{platform.machine()}",
    }


def write(summary: dict) -> None:
    """The results JSON and the report, the report printed too."""
    harness.write_json(RESULTS / "results.json", summary, indent=2, newline=True)
    lines = _decision_section(summary) + _daemon_section(summary)
    if summary["squeue_call"]:
        lines += _squeue_section(summary["squeue_call"])
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"\nreport: {REPORT.relative_to(ROOT)}")


def _row(label: str, stats: dict, work: str) -> str:
    return (f"| {label} | {stats['median_ms']:.1f} | {stats['min_ms']:.1f}-"
            f"{stats['max_ms']:.1f} | {stats['p95_ms']:.1f} | {work} |")


def _decision_section(summary: dict) -> list[str]:
    """The title, the run, the snapshot, and the decision (pure function) timed."""
    first, again = summary["first_cycle"], summary["steady_cycle"]
    verdict = "meets" if max(first["p95_ms"], again["p95_ms"]) < GOAL_MS else "MISSES"
    return [
        "# Replication decision cycle and the daemon's whole cycle",
        "",
        f"`.venv/bin/python -m benchmarks.replication{' --quick' if summary['quick'] else ''}` "
        f"({summary['machine']}, 2 cores shared with "
        "other work: medians of interleaved repeats, min-max beside them).",
        "",
        f"Snapshot: {summary['jobs']['queued']} queued (3 % held, 10 % in a partition with its "
        f"own alpha) and {summary['jobs']['running']} running jobs, S = {SYSTEM_NODES} nodes, "
        f"{summary['jobs']['with_inputs']} jobs with 1-3 known inputs.",
        "",
        "## The decision (pure function)",
        "",
        "| cycle | median ms | min-max ms | p95 ms | work |",
        "|---|---|---|---|---|",
        _row("first (no claims)", first, f"{first['targets']} targets, "
             f"{first['creations']} creations"),
        _row("steady (claims and replicas exist)", again,
             f"{again['claims_in']} claims in, {again['creations']} creations"),
        "",
        f"Goal: one decision cycle < {GOAL_MS:.0f} ms: **{verdict}** (p95 of both cycles).",
        "",
    ]


def _daemon_section(summary: dict) -> list[str]:
    """The daemon's whole cycle without the scheduler call, against its peer, and the parses."""
    whole = summary["daemon_cycle_steady"]
    cycle, peer = whole["cycle"], whole["peer"]
    whole_verdict = "meets" if max(cycle["median_ms"], whole["cycle_all_lines_changed"][
        "median_ms"]) <= GOAL_MS else "MISSES"
    return [
        "## The daemon's whole cycle, without the scheduler call itself",
        "",
        "| cycle | median ms | min-max ms | p95 ms | work |",
        "|---|---|---|---|---|",
        _row("replicad cycle, steady", cycle,
             f"`squeue -o` text parsed ({whole['squeue_text_bytes'] / 1e6:.1f} MB), planner "
             f"read for changed jobs only ({whole['jobs_read_again']} read again), decision, "
             "status keys that changed"),
        _row("replicad cycle, every squeue line changed", whole["cycle_all_lines_changed"],
             "the same with every line parsed (priorities recomputed)"),
        _row("peer: the cycle as it was", peer,
             f"`squeue --json` parsed ({whole['squeue_json_bytes'] / 1e6:.1f} MB), planner, "
             "claims and replicas read whole, every status key written"),
        f"| first cycle after a start (reads all) | {whole['cold_first_ms']:.1f} | | | "
        f"once; wrote {whole['cold_first_claims']} claims |",
        _row("(part) parse `squeue -o` text + priority order", summary["parse_squeue_text"],
             "11,000 jobs"),
        _row("(part) parse `squeue --json` + priority order", summary["parse_squeue_json"],
             "11,000 jobs"),
        "",
        f"Goal: the whole cycle except the scheduler call <= {GOAL_MS:.0f} ms (median, both "
        "rows): "
        f"**{whole_verdict}**; {whole['ratio']:.1f}x faster than the peer. Both decided the same "
        "in every repeat (checked).",
    ]


def _squeue_section(squeue: dict) -> list[str]:
    """The real squeue of the local cluster, both forms (``--squeue``'s figures)."""
    command = " ".join(slurm.build_snapshot()).replace("|", "\\|")   # inside a table
    return [
        "",
        "## The scheduler call itself (real `squeue` on the local cluster)",
        "",
        f"`python -m benchmarks.replication --squeue` at {squeue['measured']}, "
        f"interleaved, {squeue['text']['repeats']} each: {squeue['jobs']} jobs in the queue "
        f"({squeue['note']}).",
        "",
        "| command | median ms | min-max ms | bytes |",
        "|---|---|---|---|",
        f"| `{command}` | {squeue['text']['median_ms']:.0f} | "
        f"{squeue['text']['min_ms']:.0f}-{squeue['text']['max_ms']:.0f} | "
        f"{squeue['text_bytes']} |",
        f"| `squeue --json` | {squeue['json']['median_ms']:.0f} | "
        f"{squeue['json']['min_ms']:.0f}-{squeue['json']['max_ms']:.0f} | "
        f"{squeue['json_bytes']} |",
    ]


def real_squeue(repeats: int) -> dict:
    """The scheduler call itself: the real squeue, both forms, interleaved, through the runner."""
    from scratchkeeper.runner import get_runner

    runner = get_runner()
    text_ms, json_ms, sizes = [], [], {}
    for _ in range(repeats):
        for kind, argv, sink in (("text", slurm.build_snapshot(), text_ms),
                                 ("json", slurm.build_query(None), json_ms)):
            started = time.perf_counter()
            out = runner.run(argv, timeout=120, mutating=False).stdout
            sink.append((time.perf_counter() - started) * 1000)
            sizes[kind] = len(out)
            if kind == "text":
                jobs = len(slurm.parse_snapshot(out))
    return {"text": _stats(text_ms), "json": _stats(json_ms), "text_bytes": sizes["text"],
            "json_bytes": sizes["json"], "jobs": jobs,
            "note": os.environ.get("SK_SQUEUE_NOTE", "as found")}


if __name__ == "__main__":
    main()
