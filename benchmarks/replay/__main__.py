"""``python -m benchmarks.replay [--quick]``: replay speed, peak memory and scaling with trace length.

Each measurement runs in a fresh interpreter (through the project's command runner) so its
peak resident memory is its own. Goal on the full RICC trace (447,794 jobs), EASY backfilling,
LANL system-20 failures extrapolated to 64 OSTs, on-the-fly recovery and one replication
strategy (shortcut T=0.1, alpha 0.5): at most 60 s on one core and 1 GB peak memory. This
reports; it never fails on a missed goal.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

from benchmarks import harness
from scratchkeeper.runner import run
from scratchkeeper.sim import DATA_DIR

FULL_TRACE = harness.TRACES / "RICC-2010-2.swf.gz"
FULL_FAILURES = harness.TRACES / "LA-UR-05-7318-failure-data-1996-2005.csv.xz"
EXCERPT = Path(DATA_DIR) / "RICC-2010-2-first5000.swf.gz"
EXCERPT_FAILURES = Path(DATA_DIR) / "LA-UR-05-7318-system20.csv.xz"
GOAL_SECONDS = 60.0
GOAL_BYTES = 1 << 30


def measure(trace: str, failures: str, limit: int) -> dict:
    """One replay in this process: seconds per stage and peak memory."""
    from scratchkeeper.sim.outages import extrapolated_outages, failure_stats
    from scratchkeeper.sim.replication import ReplicationParams, replay_replication
    from scratchkeeper.sim.run import ReplayConfig, _failure_records, load_trace
    from scratchkeeper.sim.scheduler import simulate
    from scratchkeeper.sim.workload import build_workload

    config = ReplayConfig(trace=trace, failures=failures, limit=limit, policy="on-the-fly",
                          strategy="shortcut", alpha=0.5, threshold=0.1, stripe_count=4)
    t0 = time.perf_counter()
    trace_jobs, header_nodes, machine_nodes, _ = load_trace(config)
    workload = build_workload(trace_jobs, config.workload_params(), header_nodes)
    del trace_jobs
    t1 = time.perf_counter()
    records = _failure_records(failures, config.failure_system, False)
    horizon = workload.jobs[-1].submit + 30 * 86400
    outages = extrapolated_outages(failure_stats(records), config.ost_count, horizon, config.seed)
    schedule = simulate(workload.jobs, workload.system_nodes, backfill=True, outages=outages,
                        recovery=config.recovery_params())
    t2 = time.perf_counter()
    scratch = (machine_nodes or workload.system_nodes) * config.node_memory_bytes / 0.078
    result = replay_replication(schedule, ReplicationParams("shortcut", 0.5, 0.1,
                                                            config.copy_bandwidth, scratch))
    t3 = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    jobs = len(workload.jobs)
    return {"jobs": jobs, "read_s": t1 - t0, "schedule_s": t2 - t1, "replication_s": t3 - t2,
            "total_s": t3 - t0, "jobs_per_s": jobs / (t3 - t0), "peak_bytes": peak,
            "failures": schedule.failures, "utilisation_pct": 100 * schedule.utilisation,
            "at_risk_pct": result.at_risk_pct}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.replay", description=__doc__)
    parser.add_argument("--quick", action="store_true",
                        help="the shipped 5,000-job excerpt instead of the full RICC trace")
    parser.add_argument("--json", metavar="FILE", help="also write the measurements as JSON")
    parser.add_argument("--one", type=int, metavar="LIMIT", help=argparse.SUPPRESS)
    parser.add_argument("--trace", help=argparse.SUPPRESS)
    parser.add_argument("--failures", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one is not None:
        print(json.dumps(measure(args.trace, args.failures, args.one)))
        return 0
    if args.quick or not FULL_TRACE.exists():
        if not args.quick:
            print(f"{FULL_TRACE} absent: measuring the shipped excerpt", file=sys.stderr)
        trace, failures, total = EXCERPT, EXCERPT_FAILURES, 5000
    else:
        trace, failures, total = FULL_TRACE, FULL_FAILURES, 447794
    rows = []
    for fraction in (0.1, 0.5, 1.0):
        limit = max(1, round(total * fraction))
        result = run([sys.executable, "-m", "benchmarks.replay", "--one", str(limit),
                      "--trace", str(trace), "--failures", str(failures)],
                     timeout=1800, mutating=False, cwd=str(harness.REPO))
        row = json.loads(result.stdout)
        row["fraction"] = fraction
        rows.append(row)
    print(f"trace {trace.name}; EASY backfilling, on-the-fly recovery, LANL system-20 failures "
          "on 64 OSTs, shortcut T=0.1 alpha 0.5; one process per line")
    print(f"{'share':>6} {'jobs':>8} {'read s':>7} {'sched s':>8} {'repl s':>7} {'total s':>8} "
          f"{'jobs/s':>8} {'peak MB':>8} {'time/job vs 10%':>16}")
    base = rows[0]["total_s"] / rows[0]["jobs"]
    for r in rows:
        print(f"{r['fraction']:>6.0%} {r['jobs']:>8,} {r['read_s']:>7.1f} {r['schedule_s']:>8.1f} "
              f"{r['replication_s']:>7.1f} {r['total_s']:>8.1f} {r['jobs_per_s']:>8,.0f} "
              f"{r['peak_bytes'] / 1e6:>8.0f} {r['total_s'] / r['jobs'] / base:>16.2f}")
    full = rows[-1]
    if not args.quick:
        print(f"goal <= {GOAL_SECONDS:.0f} s: {'met' if full['total_s'] <= GOAL_SECONDS else 'MISSED'} "
              f"({full['total_s']:.1f} s); goal <= 1 GB: "
              f"{'met' if full['peak_bytes'] <= GOAL_BYTES else 'MISSED'} "
              f"({full['peak_bytes'] / 1e6:.0f} MB)")
    if args.json:
        with open(args.json, "w") as stream:
            json.dump({"trace": str(trace), "cpus": os.cpu_count(), "rows": rows}, stream, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
