"""``scratchkeeper replay``, ``sweep`` and ``report``: the dry-run trace replay of the thesis's §4.7."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import os
import sys
import time

from ..config import slurm_time_seconds
from ..errors import InputError
from . import site_config

_UNITS = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4, "P": 1024 ** 5}


def parse_size(text: str) -> float:
    """``150T``, ``2.5G``, ``1048576``: bytes (binary units)."""
    value = text.strip().upper().removesuffix("/S").removesuffix("B").removesuffix("I")
    unit = value[-1:] if value[-1:] in _UNITS and value[-1:] else ""
    try:
        number = float(value[: len(value) - len(unit)])
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 100M, 150T)") from None
    if not 0 <= number * _UNITS[unit] < math.inf:  # false for nan
        raise argparse.ArgumentTypeError(f"size must be finite and >= 0: {text!r}")
    return number * _UNITS[unit]


def _number(text: str, *, positive: bool, infinite: bool = False) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if math.isnan(value) or (math.isinf(value) and not infinite) or value < 0 \
            or (positive and value == 0):
        raise argparse.ArgumentTypeError(f"must be {'> 0' if positive else '>= 0'}"
                                         f"{'' if infinite else ' and finite'}: {text!r}")
    return value


def _positive_float(text: str) -> float:
    """> 0, ``inf`` allowed (replication alpha: replicate every job)."""
    return _number(text, positive=True, infinite=True)


def _positive_finite(text: str) -> float:
    return _number(text, positive=True)


def _seconds(text: str) -> float:
    return _number(text, positive=False)


def _slurm_time(text: str) -> str:
    """A Slurm time limit, or empty for none (the default)."""
    if text and slurm_time_seconds(text) is None:
        raise argparse.ArgumentTypeError(f"not a Slurm time limit (MM, MM:SS, HH:MM:SS, D-HH, "
                                         f"D-HH:MM or D-HH:MM:SS): {text!r}")
    return text


def register(subparsers) -> None:
    replay = subparsers.add_parser(
        "replay", help="replay a job trace (and a failure trace) through the scheduler model",
        description="Replay a job trace through FCFS/EASY scheduling with OST failures, "
                    "recovery policies and temporal replication (the thesis, §4.7).")
    replay.add_argument("trace", help="job trace: SWF (.swf[.gz]), LANL job log, or site CSV (.csv)")
    replay.add_argument("--format", dest="trace_format", default="auto",
                        choices=("auto", "swf", "lanl-jobs", "site-csv"))
    replay.add_argument("--failures", default="", metavar="CSV",
                        help="LANL failure CSV (LA-UR-05-7318); without it no OST fails")
    replay.add_argument("--failure-mode", default="extrapolated", choices=("extrapolated", "replayed"),
                        help="extrapolated: the trace's node failure rate and repair times per OST "
                             "(as the thesis did); replayed: node N fails as OST N %% ost-count")
    replay.add_argument("--failure-system", type=int, default=20,
                        help="LANL system whose failures are used (default 20)")
    replay.add_argument("--policy", nargs="+", default=["none"],
                        choices=("ideal", "none", "pre-execution", "on-the-fly"),
                        help="recovery policies to compare (ideal: no failure); several give "
                             "one run each, compared on the same jobs")
    replay.add_argument("--strategy", nargs="*", default=[],
                        choices=("fcfs", "shortcut", "dispatch-aware"),
                        help="temporal replication strategies to evaluate on each schedule")
    replay.add_argument("--alpha", nargs="+", type=_positive_float, default=None,
                        help="replication eagerness alpha (inf allowed); config: replication.alpha")
    replay.add_argument("--threshold", nargs="+", type=float, default=None,
                        help="shortcut threshold T; config: replication.threshold")
    replay.add_argument("--stripe-count", type=int, default=None,
                        help="OSTs per input file, 2..32; config: storage.stripe_count")
    replay.add_argument("--stripe-size", type=parse_size, default=None,
                        help="stripe size (e.g. 1M); config: storage.stripe_size")
    replay.add_argument("--ost-count", type=int, default=64, help="OSTs of the file system (64)")
    replay.add_argument("--load-factor", type=_positive_finite, default=1.0,
                        help="> 1 shortens the gaps between submissions (the thesis's fig. 4.6)")
    replay.add_argument("--schedule", default="model", choices=("model", "recorded"),
                        help="model: replay FCFS/EASY; recorded: the dispatch times the trace "
                             "records (replication analysis only, policy ideal, as in "
                             "the thesis's §4.7.3)")
    replay.add_argument("--no-backfill", dest="backfill", action="store_false",
                        help="plain FCFS instead of FCFS with EASY backfilling")
    replay.add_argument("--procs-per-node", type=int, default=1,
                        help="processors of one scheduling node (1: schedule processors)")
    replay.add_argument("--system-nodes", type=int, default=0,
                        help="nodes of the system (default: trace header MaxProcs / procs per node)")
    replay.add_argument("--patch-bandwidth", type=parse_size, default=100e6,
                        help="bytes/s of patching a lost stripe from the source (default 1e8; "
                             "K/M/G/T suffixes are binary)")
    replay.add_argument("--patch-latency", type=_seconds, default=30.0,
                        help="seconds to notice a failure and plan the patch (30)")
    replay.add_argument("--copy-bandwidth", type=parse_size, default=250e6,
                        help="bytes/s of one replica copy (default 2.5e8)")
    replay.add_argument("--scratch-size", type=parse_size, default=0.0,
                        help="scratch capacity for replica space (default: aggregate memory / 0.078)")
    replay.add_argument("--limit", type=int, default=0, help="replay only the first N jobs")
    replay.add_argument("--strict", action="store_true",
                        help="stop at the first corrupt trace line (default: skip and count)")
    replay.add_argument("--seed", type=int, default=1, help="random seed of sizes, stripes, failures")
    replay.add_argument("--csv", metavar="FILE", help="also write the result rows to this CSV")
    replay.add_argument("--progress", dest="progress", action="store_true", default=None,
                        help="progress bar even when stderr is not a terminal")
    replay.add_argument("--no-progress", dest="progress", action="store_false")
    replay.set_defaults(func=_replay)

    sweep = subparsers.add_parser(
        "sweep", help="run a grid of replay configurations (locally or as a Slurm job array)",
        description="Run every combination of a sweep file's [grid] and collect results.csv.")
    sweep.add_argument("config", help="sweep file (TOML with [replay] and [grid])")
    sweep.add_argument("--output", help="results folder (default: beside CONFIG, named after it)")
    sweep.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                       help="local processes (default: every core)")
    sweep.add_argument("--slurm", action="store_true",
                       help="submit a Slurm job array (one task per schedule) and a collect job")
    sweep.add_argument("--partition", default="", help="Slurm partition of the array")
    sweep.add_argument("--time", dest="time_limit", default="", type=_slurm_time,
                       help="Slurm time limit per task (MM, HH:MM:SS, D-HH:MM:SS...)")
    sweep.add_argument("--task", type=int, help="run only this task (what each array task does)")
    sweep.add_argument("--collect", action="store_true", help="only merge finished task results")
    sweep.add_argument("--progress", dest="progress", action="store_true", default=True,
                       help="show progress (the default): a line redrawn on a terminal, a line "
                            "per finished task elsewhere, with the time left")
    sweep.add_argument("--no-progress", dest="progress", action="store_false")
    sweep.set_defaults(func=_sweep)

    report = subparsers.add_parser(
        "report", help="PNG plots and a table beside the thesis's numbers from sweep results",
        description="Draw the shapes of the thesis's figures 4.5-4.12 from a results.csv.")
    report.add_argument("results", nargs="+",
                        help="results.csv written by scratchkeeper sweep (several are merged)")
    report.add_argument("--output",
                        help="folder of the PNGs and summary.rst (default: beside the first results)")
    report.set_defaults(func=_report)


class ProgressBar:
    """Progress of a replay on stderr, phase by phase (reading the traces, scheduling, each
    replication pass): one line redrawn at most ten times a second, ended at each phase's end."""

    UNITS = {"reading trace": "bytes", "scheduling": "jobs"}

    def __init__(self, label: str, enabled: bool):
        self.label = label
        self.enabled = enabled
        self.phase = None
        self.started = time.monotonic()
        self.last = 0.0

    def __call__(self, phase: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if phase != self.phase:
            self.phase, self.started = phase, now
        elif done < total and now - self.last < 0.1:
            return
        self.last = now
        width = 30
        fraction = min(done / total, 1.0) if total else 1.0
        bar = "#" * int(width * fraction)
        unit = self.UNITS.get(phase, "events")
        rate = done / (now - self.started) if now > self.started else 0.0
        sys.stderr.write(f"\r{self.label} {phase} [{bar:<{width}}] {100 * fraction:5.1f}% "
                         f"{done:,}/{total:,} {unit} {rate:,.0f}/s\x1b[K")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _replay(args) -> int:
    from ..sim.metrics import filtered_wait_stats
    from ..sim.run import ReplayConfig, run_replay

    config = site_config(args)
    alphas = args.alpha or [config.replication.alpha]
    thresholds = args.threshold or [config.replication.threshold]
    stripe_count = args.stripe_count if args.stripe_count is not None else config.storage.stripe_count
    stripe_size = int(args.stripe_size if args.stripe_size is not None
                      else config.storage.stripe_size)
    show_progress = sys.stderr.isatty() if args.progress is None else args.progress
    base = dict(trace=args.trace, trace_format=args.trace_format, limit=args.limit,
                strict=args.strict, failures=args.failures, failure_mode=args.failure_mode,
                failure_system=args.failure_system, backfill=args.backfill,
                schedule=args.schedule,
                procs_per_node=args.procs_per_node, system_nodes=args.system_nodes,
                load_factor=args.load_factor, stripe_count=stripe_count, stripe_size=stripe_size,
                ost_count=args.ost_count, patch_bandwidth=args.patch_bandwidth,
                patch_latency=args.patch_latency,
                copy_bandwidth=args.copy_bandwidth, scratch_bytes=args.scratch_size,
                seed=args.seed)
    if not os.path.exists(args.trace):
        raise InputError("no such trace file", path=args.trace)
    if args.failures and not os.path.exists(args.failures):
        raise InputError("no such failure trace", path=args.failures)
    results = []
    waits_by_policy = {}
    reported = set()  # each policy reads the same traces: say what was skipped once
    for policy in args.policy:
        schedule_config = ReplayConfig(policy=policy, **base)
        variants = []
        for strategy in args.strategy:
            for alpha in alphas:
                for threshold in (thresholds if strategy == "shortcut" else thresholds[:1]):
                    variants.append(dataclasses.replace(schedule_config, strategy=strategy,
                                                        alpha=alpha, threshold=threshold))
        started = time.monotonic()
        outcome = run_replay(schedule_config, variants,
                             progress=ProgressBar(f"replay {policy}", show_progress))
        seconds = time.monotonic() - started
        for line in outcome.skipped:
            if line not in reported:
                reported.add(line)
                print(line, file=sys.stderr)
        waits_by_policy[policy] = outcome.waits
        for row in outcome.rows:
            results.append((row, seconds))
    filtered = filtered_wait_stats(waits_by_policy)
    table = []
    for row, seconds in results:
        v = row.values
        stats = filtered[row.config.policy]
        v.update(filtered_jobs=stats.jobs, filtered_wait_mean=stats.mean,
                 filtered_wait_sd=stats.sd, seconds=seconds)
        table.append(row)
    _print_table(table)
    if args.csv:
        _write_csv(args.csv, table)
    return 0


def _fmt(value, digits=1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _print_table(rows) -> None:
    first = rows[0].values
    print(f"jobs {first['jobs']:,}  system nodes {first['model_system_nodes']:,}  "
          f"filtered (waited in some run) {first['filtered_jobs']:,}")
    columns = [("policy", lambda r: r.config.policy),
               ("stripes", lambda r: r.config.stripe_count),
               ("failures", lambda r: r.values["ost_failures"]),
               ("util %", lambda r: _fmt(r.values["utilisation_pct"], 2)),
               ("wait mean", lambda r: _fmt(r.values["filtered_wait_mean"], 0)),
               ("wait SD", lambda r: _fmt(r.values["filtered_wait_sd"], 0)),
               ("affected %", lambda r: _fmt(r.values["affected_pct"], 2)),
               ("aff. wait mean", lambda r: _fmt(r.values["affected_wait_mean"], 0)),
               ("aff. wait SD", lambda r: _fmt(r.values["affected_wait_sd"], 0)),
               ("kills", lambda r: r.values["kills"])]
    if any(r.config.strategy for r in rows):
        columns += [("strategy", lambda r: r.config.strategy or "-"),
                    ("alpha", lambda r: _fmt(r.config.alpha, 2) if r.config.strategy else "-"),
                    ("T", lambda r: _fmt(r.config.threshold, 2)
                     if r.config.strategy == "shortcut" else "-"),
                    ("at risk %", lambda r: _fmt(r.values.get("at_risk_pct"), 2)),
                    ("space %", lambda r: _fmt(r.values.get("space_mean_pct"), 3))]
    columns.append(("seconds", lambda r: _fmt(r.values["seconds"], 1)))
    cells = [[str(get(r)) for _, get in columns] for r in rows]
    widths = [max(len(name), *(len(c[i]) for c in cells)) for i, (name, _) in enumerate(columns)]
    print("  ".join(name.rjust(w) for (name, _), w in zip(columns, widths)))
    for c in cells:
        print("  ".join(x.rjust(w) for x, w in zip(c, widths)))


def _write_csv(path: str, rows) -> None:
    from ..sim.sweep import CONFIG_FIELDS, METRIC_FIELDS, _cell
    with open(path, "w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=CONFIG_FIELDS + METRIC_FIELDS + ["seconds"],
                                extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            values = dict(dataclasses.asdict(row.config), **row.values)
            writer.writerow({k: _cell(v) for k, v in values.items()})


def _sweep(args) -> int:
    from ..sim import sweep

    plan = sweep.load_sweep(args.config)
    output = args.output or os.path.splitext(os.path.abspath(args.config))[0] + "-results"
    if args.task is not None:
        sweep.run_task(plan, args.task, output)
        return 0
    if args.collect:
        return _collect(plan, output)
    if args.slurm:
        array_id, collect_id = sweep.submit_slurm(plan, output, partition=args.partition,
                                                  time_limit=args.time_limit)
        print(f"submitted job array {array_id} ({len(plan.tasks)} tasks, {plan.runs} runs); "
              f"collect job {collect_id} writes {os.path.join(output, 'results.csv')}")
        return 0
    if args.workers < 1:
        raise InputError(f"--workers must be >= 1, got {args.workers}")
    progress = (sweep.TaskProgress(sys.stderr, terminal=sys.stderr.isatty())
                if args.progress else None)
    errors = sweep.run_local(plan, output, min(args.workers, len(plan.tasks)), progress)
    for line in errors:
        print(f"scratchkeeper: {line}", file=sys.stderr)
    status = _collect(plan, output)
    return 1 if errors else status


def _collect(plan, output) -> int:
    from ..sim import sweep

    path, count, missing = sweep.collect(plan, output)
    print(f"{path}: {count} rows from {len(plan.tasks) - len(missing)} of {len(plan.tasks)} tasks")
    if missing:
        print(f"scratchkeeper: tasks without a result: {', '.join(map(str, missing))}",
              file=sys.stderr)
        return 1
    return 0


def _report(args) -> int:
    from ..sim.report import make_report

    output = args.output or os.path.dirname(os.path.abspath(args.results[0]))
    for path in make_report(args.results, output):
        print(path)
    return 0
