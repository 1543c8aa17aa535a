"""Every sweep behind the committed replay figures, under the closest conditions to the thesis's.

One call does what ``docs/benchmarks/replay/`` shows: it *measures* the load factors that give
the thesis's conditions (35 % and 70 % utilisation for the recovery results of §4.7.2 and
§4.7.4; average queue lengths 1.5, 27.5 and 45.5 for figure 4.8), writes the sweep files with
them, runs every task of every sweep on a pool of local processes, merges each sweep's
``results.csv``, draws the figures and writes ``reproduction.rst`` (see
:mod:`scratchkeeper.sim.claims`). Finished task results of the same settings are reused, so a
stopped run goes on where it stopped; the report says how long the tasks took.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ..errors import InputError, ScratchkeeperError
from ..inputfiles import read_text
from . import DATA_DIR, sweep
from .run import ReplayConfig, run_replay
from .workload import SimJob

#: The thesis: LANL system 20 ran at 35 % (§4.7.2) and 70.5 % (§4.7.4) utilisation; Jaguar's
#: average queue length in August 2005, 2006 and 2007 was 1.5, 27.5 and 45.5 (fig. 4.8).
UTILISATION_TARGETS = (35.0, 70.0)
QUEUE_TARGETS = (1.5, 27.5, 45.5)
UTILISATION_TOLERANCE = 0.5         # percentage points
QUEUE_TOLERANCE = 0.1               # relative
MAX_PROBES = 12
#: Largest record of a run read back (a task's results, the timings): a few KiB each.
JSON_SIZE_MAX = 64 << 20

FULL_TRACE = "RICC-2010-2.swf.gz"
FULL_FAILURES = "LA-UR-05-7318-failure-data-1996-2005.csv.xz"
#: Other traces the replication claims are graded on, where the shortcut's T is not automatic.
OTHER_TRACES = {"hpc2n": "HPC2N-2002-sample-3171.swf.gz"}
#: Seeds of every sweep (the grading rule's intervals need at least 5).
SEEDS = (1, 2, 3, 4, 5)
#: The thesis's §4.5.1: Jaguar's file system bandwidth.
JAGUAR_BANDWIDTH = 284e9
#: §4.8's long jobs are measured in the setting of figs. 4.9-4.12 (§4.7.4), at the stripe
#: count of more than 90 % of the files in ORNL's scratch trace (§4.7.2).
LONG_JOBS_POLICY = "on-the-fly"
LONG_JOBS_UTILISATION = 70.0
LONG_JOBS_STRIPE_COUNT = 4
#: Bumped when the per-job measures gain a field, so a cached measures.json is not reused.
MEASURES_VERSION = 2
QUICK_TRACE = os.path.join(DATA_DIR, "RICC-2010-2-first5000.swf.gz")
QUICK_FAILURES = os.path.join(DATA_DIR, "LA-UR-05-7318-system20.csv.xz")


@dataclass(frozen=True)
class Setup:
    """The traces and the grid sizes of one reproduction (full, or quick on the excerpt)."""

    trace: str
    failures: str
    quick: bool = False
    # Figure 4.8's month: August 2010 is days 92-123 of RICC (which starts on 1 May 2010).
    month_start_day: float = 92.0
    month_days: float = 31.0
    stripe_counts: tuple[int, ...] = (2, 4, 8, 16, 32)
    alphas: tuple[float, ...] = (0.1, 0.2, 0.5, 1.0, 2.0, math.inf)
    load_factors: tuple[float, ...] = (0.5, 0.75, 1.0, 1.1)
    ost_count: int = 64
    seeds: tuple[int, ...] = SEEDS
    other_traces: tuple[tuple[str, str], ...] = ()     # (sweep suffix, path)

    @classmethod
    def full(cls, trace: str, failures: str) -> Setup:
        folder = os.path.dirname(trace)
        others = tuple((name, os.path.join(folder, file)) for name, file in OTHER_TRACES.items()
                       if os.path.isfile(os.path.join(folder, file)))
        return cls(trace, failures, other_traces=others)

    @classmethod
    def quick_setup(cls) -> Setup:
        # The excerpt spans a few days: figure 4.8 takes all of it as its "month".
        return cls(QUICK_TRACE, QUICK_FAILURES, quick=True, month_start_day=0.0, month_days=0.0,
                   stripe_counts=(2, 8, 32), alphas=(0.2, 0.5, 2.0, math.inf),
                   load_factors=(0.5, 1.0), seeds=(1, 2))

    def base(self, **values) -> ReplayConfig:
        return ReplayConfig(trace=self.trace, ost_count=self.ost_count, **values)


def find_traces(folder: str) -> tuple[str, str]:
    """The full RICC trace and the LANL failure data in ``folder`` (the shared traces folder)."""
    paths = (os.path.join(folder, FULL_TRACE), os.path.join(folder, FULL_FAILURES))
    for path in paths:
        if not os.path.isfile(path):
            raise InputError(f"no {os.path.basename(path)} here (the full reproduction needs "
                             "the RICC trace and the LANL failure data; --quick uses the "
                             "shipped excerpts)", path=folder)
    return paths


# ---------------------------------------------------------------------------------------------
# Load factors found by measurement


@dataclass
class Search:
    """One load-factor search: the probes made and the factor chosen."""

    metric: str
    target: float
    probes: list[tuple[float, float]] = field(default_factory=list)    # (load factor, value)
    load_factor: float = math.nan
    value: float = math.nan
    seconds: float = 0.0

    def close_enough(self, value: float) -> bool:
        if self.metric == "utilisation_pct":
            return abs(value - self.target) <= UTILISATION_TOLERANCE
        return abs(value - self.target) <= QUEUE_TOLERANCE * self.target


def _measure(config: ReplayConfig, metric: str) -> float:
    return run_replay(config).rows[0].values[metric]


def next_probe(search: Search) -> float:
    """The next load factor to try: a secant step in log-log space inside the bracket so far.

    Utilisation grows nearly in proportion to the load factor and the queue length steeply but
    monotonically, so interpolating log(value) against log(load factor) between the closest
    probes below and above the target converges in a few probes; without a bracket yet, the
    factor is scaled by the ratio (utilisation) or doubled/halved (queue length).
    """
    below = [p for p in search.probes if p[1] < search.target]
    above = [p for p in search.probes if p[1] >= search.target]
    if below and above:
        (x0, y0), (x1, y1) = max(below), min(above)
        if y0 > 0 and y1 > y0:
            t = (math.log(search.target) - math.log(y0)) / (math.log(y1) - math.log(y0))
            guess = math.exp(math.log(x0) + t * (math.log(x1) - math.log(x0)))
            # Keep away from the bracket's ends, so a flat stretch cannot stall the search.
            low, high = x0 + 0.1 * (x1 - x0), x1 - 0.1 * (x1 - x0)
            return min(max(guess, low), high)
        return math.sqrt(x0 * x1)
    x, y = search.probes[-1]
    if search.metric == "utilisation_pct" and y > 0:
        return x * search.target / y
    return x * 2 if y < search.target else x / 2


def find_load_factor(config: ReplayConfig, metric: str, target: float,
                     start: float) -> Search:
    """The load factor at which ``metric`` of ``config`` (an ideal replay) reaches ``target``."""
    search = Search(metric, target)
    started = time.monotonic()
    factor = start
    for _ in range(MAX_PROBES):
        value = _measure(replace(config, load_factor=factor), metric)
        search.probes.append((factor, value))
        if search.close_enough(value):
            break
        factor = next_probe(search)
    # The probe closest to the target is the answer, even when none was close enough.
    search.load_factor, search.value = min(search.probes, key=lambda p: abs(p[1] - target))
    search.seconds = time.monotonic() - started
    return search


def _search_job(args):
    config, metric, target, start = args
    return find_load_factor(config, metric, target, start)


def calibrate(setup: Setup, pool, cache_path: str,
              report: Callable[[str], None]) -> dict[str, Search]:
    """Load factors for the utilisation and queue-length targets; cached in ``cache_path``."""
    jobs = {}
    base = setup.base(policy="ideal")
    for target in UTILISATION_TARGETS:
        jobs[f"utilisation-{target:g}"] = (base, "utilisation_pct", target, target / 80.0)
    month = replace(base, start_day=setup.month_start_day, days=setup.month_days)
    for target in QUEUE_TARGETS:
        jobs[f"queue-{target:g}"] = (month, "queue_length_mean", target, 0.5)
    key = {name: [repr(job[0]), job[1], job[2]] for name, job in jobs.items()}
    cached = _read_json(cache_path)
    if cached.get("key") == key:
        report("load factors: measured before, reused from " + cache_path)
        return {name: Search(**value) for name, value in cached["searches"].items()}
    names = list(jobs)
    searches = {}
    for name, search in zip(names, pool.imap(_search_job, [jobs[n] for n in names])):
        searches[name] = search
        report(f"load factor for {name.replace('-', ' ')}: {search.load_factor:.4g} "
               f"(gives {search.value:.4g}; {len(search.probes)} probes, "
               f"{search.seconds:.0f} s)")
    _write_json(cache_path, {"key": key, "searches": {
        name: {"metric": s.metric, "target": s.target, "probes": s.probes,
               "load_factor": s.load_factor, "value": s.value, "seconds": s.seconds}
        for name, s in searches.items()}})
    return searches


# ---------------------------------------------------------------------------------------------
# The sweeps


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(value)


def _table(name: str, values: dict) -> list[str]:
    lines = [f"[{name}]"]
    for key, value in values.items():
        if isinstance(value, (list, tuple)):
            lines.append(f"{key} = [{', '.join(_toml_value(v) for v in value)}]")
        else:
            lines.append(f"{key} = {_toml_value(value)}")
    return lines + [""]


def seed_draws(failures: bool, memory_recorded: float) -> list[str]:
    """What the seed draws that changes a replay's result; empty when nothing does.

    The seed always draws each job's stripe placement and, for a job whose memory the trace
    does not record, its input size. The placement matters only when OSTs fail (an ideal
    replay and the replication analyses never read it); the failures are placed by the seed
    too when they are extrapolated.
    """
    draws = []
    if failures:
        draws.append("where and when each OST fails and which OSTs each job's stripes are on "
                      "(so which jobs a failure hits)")
    if memory_recorded < 1.0:
        draws.append(f"the input size of the {(1 - memory_recorded) * 100:.1f} % of jobs "
                     "without recorded memory")
    return draws


def sweep_draws(setup: Setup, facts: dict) -> dict[str, list[str]]:
    """Per sweep, what its seed draws (:func:`seed_draws`) on its trace."""
    def recorded(path: str) -> float:
        return facts.get("traces", {}).get(os.path.basename(path), {}).get("memory_recorded",
                                                                              0.0)
    ricc = recorded(setup.trace)
    draws = {name: seed_draws(True, ricc) for name in ("recovery-35", "recovery-70", "load")}
    draws.update({name: seed_draws(False, ricc)
                  for name in ("queue-length", "replication-recorded", "replication")})
    draws.update({f"replication-{name}": seed_draws(False, recorded(path))
                  for name, path in setup.other_traces})
    return draws


def sweep_files(setup: Setup, searches: dict[str, Search], folder: str,
                draws: dict[str, list[str]] | None = None) -> dict[str, str]:
    """The sweep files (TOML text by sweep name) behind every figure; paths relative to ``folder``.

    A sweep runs every seed of ``setup`` where its seed draws something (``draws``: sweep ->
    :func:`seed_draws`; every sweep when not given), else once, with seed 1.
    """
    draws = draws if draws is not None else {}
    trace = os.path.relpath(setup.trace, folder)
    failures = os.path.relpath(setup.failures, folder)
    replication_grids = [
        {"input_model": ["requested-memory", "peak-memory"],
         "strategy": ["fcfs", "dispatch-aware"], "alpha": list(setup.alphas)},
        {"input_model": ["requested-memory", "peak-memory"], "strategy": ["shortcut"],
         "threshold": [0.01, 0.1], "alpha": list(setup.alphas)},
    ]

    def document(name: str, comment: str, replay: dict, grids: list[dict],
                 path: str = trace) -> str:
        drawn = draws.get(name, ["(not known)"])
        seeds = list(setup.seeds) if drawn else [1]
        lines = [f"# {line}" for line in comment.splitlines()]
        lines.append("# The seed draws: " + ("; ".join(drawn) if drawn else
                                             "nothing that changes the result: one run."))
        lines += _table("replay", dict(trace=path, **replay))
        for grid in grids:
            # Every setting with every seed: the grading rule's intervals are across seeds.
            # The ideal run has no failure and its waits do not depend on the seed: one is enough.
            grid = grid if "seed" in grid else dict(grid, seed=seeds)
            lines += ["[[grid]]"] + _table("", grid)[1:]
        return "\n".join(lines)

    recovery = {"failures": failures, "failure_mode": "extrapolated", "failure_system": 20,
                "ost_count": setup.ost_count}
    files = {
        "replication": document("replication",
            "The thesis's fig. 4.7 on the modelled schedule (EASY): jobs at risk and replica space\n"
            "vs alpha per strategy, with the requested-memory and the peak-memory input model.",
            {"policy": "ideal", "ost_count": setup.ost_count}, replication_grids),
        "replication-recorded": document("replication-recorded",
            "The thesis's fig. 4.7 as the thesis did it (§4.7.3): the queue replayed from the\n"
            "submission and dispatch times the trace records.",
            {"policy": "ideal", "schedule": "recorded", "ost_count": setup.ost_count},
            replication_grids),
        "load": document("load",
            "The thesis's fig. 4.6 (§4.7.2, pre-execution recovery): wait mean/SD as the\n"
            "submissions are spread or packed.",
            dict(recovery, stripe_count=4),
            [{"policy": ["none", "pre-execution"], "load_factor": list(setup.load_factors)},
             {"policy": ["ideal"], "load_factor": list(setup.load_factors), "seed": [1]}]),
    }
    # Fig. 4.5 (4.7.2) compares pre-execution recovery at the LANL trace's 35 %, figs.
    # 4.9-4.12 (4.7.4) on-the-fly recovery at 70 %: each sweep runs its section's policy.
    for target, policy in zip(UTILISATION_TARGETS, ("pre-execution", "on-the-fly")):
        search = searches[f"utilisation-{target:g}"]
        files[f"recovery-{target:g}"] = document(f"recovery-{target:g}",
            f"The thesis's {'fig. 4.5' if policy == 'pre-execution' else 'figs. 4.9-4.12'} at "
            f"{target:g} % utilisation (load factor measured by\nscratchkeeper reproduce: "
            f"{search.value:.2f} % at {search.load_factor:.6g}).",
            dict(recovery, load_factor=search.load_factor),
            [{"policy": ["none", policy], "stripe_count": list(setup.stripe_counts)},
             {"policy": ["ideal"], "stripe_count": [4], "seed": [1]}])
    month = {"policy": "ideal", "ost_count": setup.ost_count, "input_model": "peak-memory",
             "start_day": setup.month_start_day, "days": setup.month_days}
    factors = [searches[f"queue-{t:g}"].load_factor for t in QUEUE_TARGETS]
    files["queue-length"] = document("queue-length",
        "The thesis's fig. 4.8: jobs at risk per strategy for one month at three loads, the load\n"
        "factors measured to give average queue lengths "
        + ", ".join(f"{t:g}" for t in QUEUE_TARGETS) + ".",
        month,
        [{"load_factor": factors, "strategy": ["fcfs", "dispatch-aware"],
          "alpha": [0.2, 0.5, math.inf]},
         {"load_factor": factors, "strategy": ["shortcut"], "threshold": [0.01, 0.1],
          "alpha": [0.2, 0.5, math.inf]}])
    for name, path in setup.other_traces:
        files[f"replication-{name}"] = document(f"replication-{name}",
            f"The thesis's fig. 4.7 on {os.path.basename(path)} (model schedule, sizes drawn: the\n"
            "trace records no memory): a trace where T = 0.01 and T = 0.1 are not automatic.",
            {"policy": "ideal", "ost_count": setup.ost_count},
            [{"strategy": ["fcfs", "dispatch-aware"], "alpha": list(setup.alphas)},
             {"strategy": ["shortcut"], "threshold": [0.01, 0.1], "alpha": list(setup.alphas)}],
            os.path.relpath(path, folder))
    # In the order they run: the recovery sweeps (whose grading needs the seeds most) first.
    order = ["recovery-35", "recovery-70", "load", "queue-length", "replication-recorded",
             "replication"] + [f"replication-{name}" for name, _ in setup.other_traces]
    return {name: files[name] for name in order}


@dataclass
class SweepRun:
    name: str
    plan: sweep.SweepPlan
    output: str


def _task_done(run: SweepRun, index: int) -> bool:
    """A result of exactly this task's settings is already there (left by an earlier run)."""
    document = _read_json(os.path.join(run.output, "tasks", f"task-{index:04d}.json"))
    return (document.get("digest") == sweep.task_digest(run.plan.tasks[index])
            and os.path.exists(os.path.join(run.output, "tasks", f"task-{index:04d}.waits")))


def _timed_task(args) -> tuple[str, int, float, str | None]:
    run, index = args
    started = time.monotonic()
    try:
        sweep.run_task(run.plan, index, run.output)
        error = None
    except ScratchkeeperError as err:
        error = str(err)
    return run.name, index, time.monotonic() - started, error


def run_sweeps(runs: list[SweepRun], pool, timings: dict,
               report: Callable[[str], None]) -> list[str]:
    """Every task not yet done, on ``pool``; a line per finished task with the time left."""
    todo = [(run, index) for run in runs for index in range(len(run.plan.tasks))
            if not _task_done(run, index)]
    reused = sum(len(run.plan.tasks) for run in runs) - len(todo)
    if reused:
        report(f"{reused} task(s) already done with the same settings: reused")
    errors = []
    started = time.monotonic()
    workers = getattr(pool, "_processes", 1) or 1
    for done, (name, index, seconds, error) in enumerate(
            pool.imap_unordered(_timed_task, todo), 1):
        timings[f"{name}/{index}"] = seconds
        elapsed = time.monotonic() - started
        left = elapsed / done * (len(todo) - done)
        if error:
            errors.append(f"{name} task {index}: {error}")
        report(f"[{done}/{len(todo)}] {name} task {index} {'failed' if error else 'done'} "
               f"in {seconds:.1f} s; about {sweep.format_duration(left)} left"
               + (f" ({workers} workers)" if done == 1 else ""))
    return errors


# ---------------------------------------------------------------------------------------------
# Facts of the shipped files and per-job measures (for the disclosures and four claims)


def trace_facts(setup: Setup) -> dict:
    """What the disclosures say, counted from the files: system 20's failure records and span,
    and per job trace the share of jobs asking at most 1 % and 10 % of the machine and the
    share whose memory the trace records (the others' input size is drawn by the seed)."""
    from . import traces
    failures = traces.read_lanl_failures(setup.failures, strict=False, system=20).records
    starts = sorted(r.started for r in failures)
    facts: dict = {"failures": {"records": len(failures),
                                "days": (starts[-1] - starts[0]) / 86400 if starts else 0.0},
                   "traces": {}}
    for path in (setup.trace, *(p for _, p in setup.other_traces)):
        trace = traces.read_swf(path, strict=False)
        machine = trace.header.max_procs or max(j.allocated_procs for j in trace.jobs)
        procs = [j.allocated_procs if j.allocated_procs > 0 else j.requested_procs
                 for j in trace.jobs]
        procs = [p for p in procs if p > 0]
        memory = sum(1 for j in trace.jobs if j.used_memory > 0 or j.requested_memory > 0)
        facts["traces"][os.path.basename(path)] = {
            "jobs": len(procs), "max_procs": machine,
            "memory_recorded": memory / len(trace.jobs) if trace.jobs else 0.0,
            "le1": sum(p <= 0.01 * machine for p in procs) / len(procs),
            "le10": sum(p <= 0.1 * machine for p in procs) / len(procs)}
    return facts


def job_measures(setup: Setup) -> dict:
    """Fig. 4.4 and §4.5.1's bandwidth on the ideal replays with peak-memory inputs.

    Queued and running jobs' aggregate input are time averages by Little's law (the summed
    input x wait, or x run time, over the span); the bandwidth of replicating every job's input
    once is the summed input over the span, against Jaguar's 284 GB/s scaled by aggregate
    memory as the scratch size is.
    """
    from .run import replay_schedule
    from .workload import JAGUAR_MEMORY
    out: dict = {"memory": {}}
    for schedule in ("model", "recorded"):
        replayed = replay_schedule(setup.base(policy="ideal", input_model="peak-memory",
                                              schedule=schedule))
        jobs, span = replayed.workload.jobs, (replayed.schedule.last_end
                                              - replayed.schedule.first_submit)
        out["memory"][schedule] = {
            "queued_bytes": math.fsum(j.input_bytes * (j.start - j.submit) for j in jobs) / span,
            "running_bytes": math.fsum(j.input_bytes * j.run_time for j in jobs) / span}
        if schedule == "model":
            memory = replayed.machine_nodes * replayed.workload.params.node_memory_bytes
            out["bandwidth"] = {
                "bytes_per_s": math.fsum(j.input_bytes for j in jobs) / span,
                "file_system_bytes_per_s": JAGUAR_BANDWIDTH * memory / JAGUAR_MEMORY}
    return out


def benefit_by_run_time(without: Sequence[SimJob], recovered: Sequence[SimJob],
                        discarded_without: Mapping[int, float] | None = None,
                        discarded_recovered: Mapping[int, float] | None = None) -> dict | None:
    """What recovery gave each job a failure affected in the run ``without`` it, by run time.

    A job's benefit is its wait without recovery minus its wait in the ``recovered`` run, the
    same job matched by id and position in the workload, measured two ways: *wait* (final
    dispatch - submission, so a killed job's discarded run counts as wait) and *queue wait*
    (the same less the run time its kills threw away, ``discarded_*``: job index -> seconds);
    the turnaround (end - submission) is given beside them, and the share of each group that
    was killed. The jobs are split at the median run time of the affected jobs: *long* above
    it, *short* at or below. None when no job was affected.
    """
    lost_a, lost_b = discarded_without or {}, discarded_recovered or {}
    by_job = {(job.index, job.job_id): job for job in recovered}
    pairs = []
    for job in without:
        if job.affected:
            other = by_job.get((job.index, job.job_id))
            if other is None:
                raise ScratchkeeperError(f"job {job.job_id} is not in the run with recovery: "
                                         "the two runs must replay the same workload")
            pairs.append((job, other))
    if not pairs:
        return None
    median = statistics.median(job.run_time for job, _ in pairs)

    def group(jobs: list) -> dict:
        # Submission is the same in both runs: the benefit is the difference of the dispatch
        # (wait) or of the end (turnaround).
        def mean_of(values: list[float]) -> float:
            return math.fsum(values) / len(values) if values else math.nan
        return {"jobs": len(jobs),
                "killed_pct": mean_of([100.0 * (a.kills > 0) for a, _ in jobs]),
                "wait_benefit_s": mean_of([a.start - b.start for a, b in jobs]),
                "queue_wait_benefit_s": mean_of([(a.start - lost_a.get(a.index, 0.0))
                                                 - (b.start - lost_b.get(b.index, 0.0))
                                                 for a, b in jobs]),
                "turnaround_benefit_s": mean_of([a.end - b.end for a, b in jobs])}

    return {"affected": len(pairs), "median_run_time_s": median,
            "long": group([p for p in pairs if p[0].run_time > median]),
            "short": group([p for p in pairs if p[0].run_time <= median])}


def _discarded(replayed) -> dict[int, float]:
    from .metrics import discarded_run_seconds
    from .scheduler import LOG_START, LOG_STOP
    schedule = replayed.schedule
    return discarded_run_seconds(schedule.log_time, schedule.log_kind, schedule.log_job,
                                 LOG_START, LOG_STOP)


def long_job_measures(setup: Setup, load_factor: float) -> dict:
    """§4.8's "more significant benefits are seen for long jobs", per seed: the setting of
    figs. 4.9-4.12 (on-the-fly recovery against none, at the load factor of 70 % utilisation)
    at the stripe count most files have (4, §4.7.2), each seed replayed with and without
    recovery and compared job by job (:func:`benefit_by_run_time`)."""
    from .run import replay_schedule
    out: dict = {"policy": LONG_JOBS_POLICY, "stripe_count": LONG_JOBS_STRIPE_COUNT,
                 "load_factor": load_factor, "utilisation_target": LONG_JOBS_UTILISATION,
                 "seeds": {}}
    for seed in setup.seeds:
        runs = [replay_schedule(setup.base(
            failures=setup.failures, failure_mode="extrapolated", failure_system=20,
            policy=policy, stripe_count=LONG_JOBS_STRIPE_COUNT, load_factor=load_factor,
            seed=seed)) for policy in ("none", LONG_JOBS_POLICY)]
        measured = benefit_by_run_time(runs[0].workload.jobs, runs[1].workload.jobs,
                                       _discarded(runs[0]), _discarded(runs[1]))
        if measured is not None:
            out["seeds"][str(seed)] = measured      # JSON keys: the cache holds text
    return out


def _measured(setup: Setup, long_jobs_load_factor: float, path: str,
              report: Callable[[str], None]) -> dict:
    """The per-job measures, cached in ``path`` for the same setup and load factor."""
    key = (f"{setup!r}; long jobs at load factor {long_jobs_load_factor!r}; "
           f"measures {MEASURES_VERSION}")
    cached = _read_json(path)
    if cached.get("key") == key:
        return cached["measures"]
    started = time.monotonic()
    measures = job_measures(setup)
    measures["long_jobs"] = long_job_measures(setup, long_jobs_load_factor)
    report(f"per-job measures in {sweep.format_duration(time.monotonic() - started)}")
    _write_json(path, {"key": key, "measures": measures})
    return measures


@dataclass
class Reproduction:
    """What one call produced, for the report."""

    setup: Setup
    output: str
    searches: dict[str, Search]
    results: dict[str, str]             # sweep name -> results.csv
    timings: dict[str, float]           # "sweep/task" -> seconds, this and earlier runs
    wall_seconds: float                 # this call, from start to the report
    figures: list[str] = field(default_factory=list)
    facts: dict = field(default_factory=dict)
    measures: dict = field(default_factory=dict)
    trace_sweeps: dict[str, str] = field(default_factory=dict)   # other traces' sweeps
    draws: dict[str, list[str]] = field(default_factory=dict)    # sweep -> what its seed draws


def reproduce(setup: Setup, output: str, work: str = "", workers: int = 1,
              report: Callable[[str], None] = lambda line: None) -> Reproduction:
    """Calibrate, run every sweep, draw the figures and write ``OUTPUT/reproduction.rst``.

    ``output`` gets what is published (figures, ``results-*.csv``, ``sweeps/*.toml``, the
    report); ``work`` (default ``OUTPUT/work``) the task results, reused by a later call.
    """
    work = work or os.path.join(output, "work")
    started = time.monotonic()
    os.makedirs(output, exist_ok=True)
    os.makedirs(work, exist_ok=True)
    timings_path = os.path.join(work, "timings.json")
    timings = _read_json(timings_path)
    facts = trace_facts(setup)
    draws = sweep_draws(setup, facts)
    with sweep.worker_pool(workers) as pool:
        searches = calibrate(setup, pool, os.path.join(work, "calibration.json"), report)
        for name, search in searches.items():
            timings[f"calibration/{name}"] = search.seconds
        folder = os.path.join(output, "sweeps")
        os.makedirs(folder, exist_ok=True)
        runs = []
        for name, text in sweep_files(setup, searches, folder, draws).items():
            path = os.path.join(folder, f"{name}.toml")
            with open(path, "w") as stream:
                stream.write(text)
            runs.append(SweepRun(name, sweep.load_sweep(path), os.path.join(work, name)))
        try:
            errors = run_sweeps(runs, pool, timings, report)
        finally:
            _write_json(timings_path, timings)
    if errors:
        raise ScratchkeeperError("; ".join(errors))
    results = {}
    for run in runs:
        path, _, missing = sweep.collect(run.plan, run.output)
        if missing:
            raise ScratchkeeperError(f"sweep {run.name}: tasks without a result: "
                                     f"{', '.join(map(str, missing))}")
        results[run.name] = os.path.join(output, f"results-{run.name}.csv")
        shutil.copyfile(path, results[run.name])
    from .report import make_report
    from .reproduction_rst import write_reproduction

    measures = _measured(
        setup, searches[f"utilisation-{LONG_JOBS_UTILISATION:g}"].load_factor,
        os.path.join(work, "measures.json"), report)
    # Only the tasks of these sweeps: an earlier layout's tasks are not part of this result.
    current = {f"{run.name}/{index}" for run in runs for index in range(len(run.plan.tasks))}
    timings = {k: v for k, v in timings.items() if k in current or k.startswith("calibration")}
    outcome = Reproduction(setup, output, searches, results, timings, 0.0, facts=facts,
                           measures=measures, draws=draws)
    outcome.trace_sweeps = {f"replication-{name}": f"{os.path.basename(path)}, model schedule, "
                            "drawn sizes" for name, path in setup.other_traces}
    outcome.figures = make_report(list(results.values()), output)
    outcome.wall_seconds = time.monotonic() - started
    write_reproduction(outcome)
    report(f"wrote {os.path.join(output, 'reproduction.rst')} in "
           f"{sweep.format_duration(outcome.wall_seconds)}")
    return outcome


def _read_json(path: str) -> dict:
    """A JSON file this run or an earlier one wrote in the output folder ({} while there is
    none); read through the shared bounded reader, since the folder is the user's to name."""
    if not os.path.lexists(path):
        return {}
    text = read_text(path, JSON_SIZE_MAX, what="reproduction record")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as err:
        raise InputError(f"unreadable: {err}", path=path) from err


def _write_json(path: str, value: dict) -> None:
    with open(path + ".tmp", "w") as stream:
        json.dump(value, stream, indent=1, sort_keys=True)
    os.replace(path + ".tmp", path)
