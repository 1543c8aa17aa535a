"""``scratchkeeper replay``, ``sweep`` and ``report``: the dry-run trace replay of the thesis's §4.7."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import os
import re
import stat
import sys
import tempfile
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


POLICY_HELP = (
    "recovery policies to compare, one run each on the same jobs: "
    "ideal (no OST ever fails: the reference curve); "
    "none (no recovery: an affected queued job moves to the queue's tail and waits for its OST "
    "to come back, an affected running job is killed and requeued); "
    "pre-execution (the lost stripes are patched from the source before the job starts; a "
    "running job is killed and requeued until the patch is done); "
    "on-the-fly (as pre-execution for queued jobs, and a running job keeps running and ends "
    "later by the patch time). Without --failures nothing fails and every policy is the "
    "ideal run, labelled ideal (default: none)")
STRATEGY_HELP = (
    "temporal replication strategies evaluated on each schedule, one row each: "
    "fcfs (the replication window, the shortest head of the queue in arrival order that "
    "requests max(R, alpha x S) nodes, R the largest running job, S the system); "
    "shortcut (the same, and a job of at most T x S nodes is replicated at once wherever it "
    "stands); dispatch-aware (the offline oracle: the window over the queue in the "
    "order jobs really leave it). A job is at risk when its replica is not ready at its "
    "first dispatch (default: none, no replication analysis)")
FAILURE_MODE_HELP = (
    "extrapolated (default, as the thesis did): each OST fails as often as one node of the "
    "failure trace, with the trace's repair times. replayed: every failure record of the "
    "system's nodes hits OST (node %% ost-count), so each OST fails (system nodes / "
    "ost-count) times as often as a node: a much heavier load (system 20's 512 nodes on "
    "64 OSTs: 8x; on the shipped 5,000 jobs 31 OST failures and 32 %% of the jobs affected "
    "against 4 and 2.6 %%)")


def register(subparsers) -> None:
    _register_replay(subparsers)
    _register_sweep_and_report(subparsers)


def _register_replay(subparsers) -> None:
    from ..sim.run import TRACE_FORMATS

    replay = subparsers.add_parser(
        "replay", help="replay a job trace (and a failure trace) through the scheduler model",
        description="Replay a job trace through FCFS/EASY scheduling with OST failures, "
                    "recovery policies and temporal replication (the thesis, §4.7).")
    replay.add_argument("trace", help="job trace: SWF (the Parallel Workloads Archive's "
                        "format), Slurm sacct output (TZ=UTC sacct -a -X -P -o JobID,Submit,"
                        "Start,End,Elapsed,Timelimit,NNodes,NCPUS,State), a PBS/Torque "
                        "accounting log, "
                        "a LANL job log or a site CSV; .gz/.xz/.bz2 are read as they are")
    replay.add_argument("--format", dest="trace_format", default="auto", choices=TRACE_FORMATS,
                        help="the trace's format (default auto: told from its first lines, "
                             "else from a .swf or .csv name)")
    replay.add_argument("--failures", default="", metavar="CSV",
                        help="LANL failure CSV (LA-UR-05-7318); without it no OST fails")
    replay.add_argument("--failure-mode", default="extrapolated", choices=("extrapolated", "replayed"),
                        help=FAILURE_MODE_HELP)
    replay.add_argument("--failure-system", type=int, default=20,
                        help="LANL system whose failures are used (default 20)")
    replay.add_argument("--policy", nargs="+", default=None,
                        choices=("ideal", "none", "pre-execution", "on-the-fly"), help=POLICY_HELP)
    replay.add_argument("--strategy", nargs="*", default=[],
                        choices=("fcfs", "shortcut", "dispatch-aware"), help=STRATEGY_HELP)
    replay.add_argument("--alpha", nargs="+", type=_positive_float, default=None,
                        help="replication eagerness alpha: the window covers max(R, alpha x S) "
                             "requested nodes (inf: replicate every job on submission); "
                             "config: replication.alpha")
    replay.add_argument("--threshold", nargs="+", type=float, default=None,
                        help="shortcut threshold T, 0..1: jobs of at most T x S nodes are "
                             "replicated at once (strategy shortcut only); "
                             "config: replication.threshold")
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
                        help="processors of one scheduling node (1: schedule processors, or "
                             "nodes for a sacct trace read with NNodes only)")
    replay.add_argument("--system-nodes", type=int, default=0,
                        help="nodes of the system (default: SWF header MaxProcs / procs per "
                             "node; a sacct or PBS history: the machine described by "
                             "TRACE.sinfo (sinfo -N -h -o '%%N %%c') or TRACE.pbsnodes "
                             "(pbsnodes -a) beside it, required without; else the largest job)")
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
    replay.add_argument("--csv", metavar="FILE",
                        help="also write the result rows to this CSV (settings that do not act "
                             "on a row are blank)")
    replay.add_argument("--jobs-csv", metavar="FILE",
                        help="also write the jobs in long form: a row per job and policy "
                             "(job_id, nodes, submit, run_time, limit, first_start, start, end, "
                             "wait, recorded_wait, affected, kills; seconds from the first "
                             "submission), and a row per job and replication variant with its "
                             "at_risk only. A regular FILE is replaced when the replay is done; "
                             "a device or FIFO (/dev/stdout) is written in place")
    replay.add_argument("--core", choices=("c", "python"), default=None,
                        help="the scheduler and replication cores: c (default when built) or "
                             "python (the reference model, same per-job output, slower)")
    replay.add_argument("--progress", dest="progress", action="store_true", default=None,
                        help="progress bar even when stderr is not a terminal")
    replay.add_argument("--no-progress", dest="progress", action="store_false",
                        help="no progress bar (default when stderr is not a terminal)")
    replay.set_defaults(func=_replay)


def _register_sweep_and_report(subparsers) -> None:
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
                       help="show progress (the default): a line per finished run (redrawn "
                            "on a terminal) with the count, the run's settings and the time "
                            "left; OUTPUT/results.csv gets each run as it finishes")
    sweep.add_argument("--no-progress", dest="progress", action="store_false",
                       help="no progress line")
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

    UNITS = {"reading trace": "bytes", "building workload": "jobs", "scheduling": "jobs"}

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
    from ..sim.run import ReplayConfig
    from ..sim.scheduler import using_core

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
    # Before the run, not after it: a replay of a whole trace can take an hour.
    for path in (args.csv, args.jobs_csv):
        if path:
            check_output_file(path)
    asked = args.policy or ["none"]
    policies = list(dict.fromkeys(ReplayConfig(policy=p, **base).policy for p in asked))
    if args.policy and not args.failures and policies != args.policy:
        print(f"scratchkeeper: no --failures: nothing fails, so {', '.join(args.policy)} "
              "is the one run without failure, labelled ideal", file=sys.stderr)
    jobs_csv = JobsCsv(args.jobs_csv) if args.jobs_csv else None
    try:
        with using_core(_core_of(args.core)):
            table, waits_by_policy = _replay_policies(args, base, policies, alphas,
                                                      thresholds, show_progress, jobs_csv)
        if jobs_csv is not None:
            jobs_csv.commit()
    finally:
        if jobs_csv is not None:
            jobs_csv.close()
    filtered = filtered_wait_stats(waits_by_policy)
    for row in table:
        stats = filtered[row.config.policy]
        row.values.update(filtered_jobs=stats.jobs, filtered_wait_mean=stats.mean,
                          filtered_wait_sd=stats.sd)
    _print_table(table)
    if args.csv:
        _write_csv(args.csv, table)
    return 0


def _core_of(option: str | None) -> str:
    """The scheduler module's name of ``--core`` (``c`` is its ``native``)."""
    from ..sim.scheduler import default_core
    if option is None:
        return default_core()
    return "native" if option == "c" else option


def check_output_file(path: str) -> None:
    """One clear line, before any work, when ``path`` cannot be written: its folder is missing,
    is not a folder or is not writable (a regular file is replaced from a temporary one made
    there), the path is a folder itself, or a device or FIFO it names is not writable."""
    if os.path.isdir(path):
        raise InputError("cannot write results here: it is a folder", path=path)
    if os.path.exists(path) and not os.path.isfile(path):
        # a device, a FIFO, /dev/stdout: written in place, its folder is not written
        if not os.access(path, os.W_OK):
            raise InputError("cannot write results: permission denied", path=path)
        return
    # a regular file is replaced from a temporary file beside its target (a link's too)
    folder = os.path.dirname(os.path.realpath(path))
    if not os.path.isdir(folder):
        raise InputError(f"cannot write results: no folder {folder}", path=path)
    if not os.access(folder, os.W_OK | os.X_OK) or \
            (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise InputError("cannot write results: permission denied", path=path)


class OutputFile:
    """A results file written so that a failed replay leaves nothing half-done where it can.

    A regular file (or a new name) is written under a temporary name in the same folder and
    renamed over it by :meth:`commit`, atomically, keeping the replaced file's mode; a symbolic
    link to a regular file keeps the link, its target is replaced. Anything else (a device such
    as ``/dev/stdout``, a FIFO, a link to one) is written in place and never replaced: renaming
    a file over ``/dev/stdout`` would put a regular file where the device was."""

    def __init__(self, path: str):
        self.path = path
        try:
            # by the path itself, links followed: /dev/stdout's target may be a pipe, which
            # has no name to resolve
            existing: int | None = os.stat(path).st_mode
        except FileNotFoundError:
            existing = None
        self.temporary: str | None = None
        descriptor = _descriptor_named(path)
        if descriptor is not None:
            # /dev/stdout, /dev/fd/N: the process's own descriptor, sharing its offset (a new
            # open of a redirected stdout would truncate the file and write over the table)
            sys.stdout.flush()
            self.stream = os.fdopen(os.dup(descriptor), "w", newline="")
            return
        if existing is not None and not stat.S_ISREG(existing):
            self.stream = open(path, "w", newline="")
            return
        self.target = os.path.realpath(path)
        folder, name = os.path.split(self.target)
        descriptor, self.temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp",
                                                      dir=folder)
        self.mode = stat.S_IMODE(existing) if existing is not None else 0o666 & ~_umask()
        self.stream = os.fdopen(descriptor, "w", newline="")

    def commit(self) -> None:
        """The file complete: the temporary one renamed over the path's (regular) file."""
        self.stream.close()
        if self.temporary is not None:
            os.chmod(self.temporary, self.mode)
            os.replace(self.temporary, self.target)
            self.temporary = None

    def discard(self) -> None:
        """Nothing written stays (the temporary file), unless :meth:`commit` came first."""
        self.stream.close()
        if self.temporary is not None:
            os.unlink(self.temporary)
            self.temporary = None


_STANDARD_STREAMS = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}
_DESCRIPTOR_NAME = re.compile(r"/(?:dev/fd|proc/self/fd)/(\d+)")


def _descriptor_named(path: str) -> int | None:
    """The open descriptor ``path`` names (``/dev/stdout``, ``/dev/fd/3``, a link to one), if
    it names one."""
    name = os.path.abspath(path)
    for _ in range(40):         # the kernel's own limit of links followed
        if name in _STANDARD_STREAMS:
            return _STANDARD_STREAMS[name]
        match = _DESCRIPTOR_NAME.fullmatch(name)
        if match:
            return int(match.group(1))
        if not os.path.islink(name):
            return None
        name = os.path.normpath(os.path.join(os.path.dirname(name), os.readlink(name)))
    return None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class JobsCsv:
    """``--jobs-csv``: long form, each job's fields once per policy, each replication variant's
    verdict in rows of its own.

    A row without ``strategy`` is a job under ``policy``: its processors' scheduling ``nodes``,
    ``submit``, ``run_time`` (cut at the limit), ``limit``, ``first_start`` (its first dispatch,
    before any kill), ``start`` and ``end`` (its last run), ``wait`` (last start - submit),
    ``recorded_wait`` (the trace's, -1 when unknown), ``affected``, ``kills``; times in seconds
    from the first submission. A row with ``strategy`` (and ``alpha``, ``threshold`` for
    shortcut) gives only ``job_id`` and ``at_risk`` (1: the job's replica was not ready at its
    first dispatch) under that variant; the job's other cells are blank, not repeated."""

    FIELDS = ("policy", "strategy", "alpha", "threshold", "job_id", "nodes", "submit",
              "run_time", "limit", "first_start", "start", "end", "wait", "recorded_wait",
              "affected", "kills", "at_risk")

    def __init__(self, path: str):
        self.output = OutputFile(path)
        self.writer = csv.writer(self.output.stream)
        self.writer.writerow(self.FIELDS)

    def write(self, policy: str, jobs, at_risk=()) -> None:
        """The jobs of one policy's replay, then ``at_risk``: (variant, flags) per replication
        variant, flags in the jobs' order."""
        for job in jobs:
            self.writer.writerow((policy, "", "", "", job.job_id, job.nodes, repr(job.submit),
                                  repr(job.run_time), repr(job.limit), repr(job.first_start),
                                  repr(job.start), repr(job.end), repr(job.start - job.submit),
                                  repr(float(job.recorded_wait)), int(job.affected), job.kills,
                                  ""))
        blank = ("",) * 11
        for variant, flags in at_risk:
            threshold = repr(variant.threshold) if variant.strategy == "shortcut" else ""
            setting = (policy, variant.strategy, repr(variant.alpha), threshold)
            for job, flag in zip(jobs, flags):
                self.writer.writerow((*setting, job.job_id, *blank, flag))
        self.output.stream.flush()

    def commit(self) -> None:
        self.output.commit()

    def close(self) -> None:
        self.output.discard()


def _replay_policies(args, base: dict, policies: list[str], alphas, thresholds,
                     show_progress: bool, jobs_csv: JobsCsv | None):
    """One replay per policy (each with its replication variants): the rows, and each
    policy's per-job waits for the filtered statistics."""
    from ..sim.run import ReplayConfig, run_replay

    results = []
    waits_by_policy = {}
    reported = set()  # each policy reads the same traces: say what was skipped once
    for policy in policies:
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
        if jobs_csv is not None:
            jobs_csv.write(policy, outcome.jobs, outcome.at_risk)
        for row in outcome.rows:
            row.values["seconds"] = seconds
            results.append(row)
    return results, waits_by_policy


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
    from ..sim.run import applicable_settings
    from ..sim.sweep import RESULT_FIELDS, _cell
    output = OutputFile(path)
    try:
        writer = csv.DictWriter(output.stream, fieldnames=RESULT_FIELDS + ["seconds"],
                                extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            values = applicable_settings(dict(dataclasses.asdict(row.config), **row.values))
            writer.writerow({k: _cell(v) for k, v in values.items()})
        output.commit()
    finally:
        output.discard()


def _sweep(args) -> int:
    from ..sim import sweep

    plan = sweep.load_sweep(args.config)
    output = args.output or os.path.splitext(os.path.abspath(args.config))[0] + "-results"
    try:
        # Before any run: a folder that cannot be made is one line now, not a crash later.
        os.makedirs(os.path.join(output, "tasks"), exist_ok=True)
    except OSError as err:
        raise InputError(f"cannot write the sweep's results: {err.strerror or err}",
                         path=output) from err
    if args.task is not None:
        # An array task: a line per finished run in the task's output file.
        log = sweep.RunLog(plan, None, sys.stderr if args.progress else None,
                           label=f"task {args.task}",
                           total=len(plan.tasks[args.task]) if 0 <= args.task < len(plan.tasks)
                           else 0)
        sweep.run_task(plan, args.task, output, on_run=log)
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
    log = sweep.RunLog(plan, os.path.join(output, "results.csv"),
                       sys.stderr if args.progress else None, terminal=sys.stderr.isatty())
    try:
        errors = sweep.run_local(plan, output, min(args.workers, len(plan.tasks)), log)
    finally:
        log.close()
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
