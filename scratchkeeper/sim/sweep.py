"""A grid of replay configurations: plan it from a TOML file, run it here or as a Slurm array, collect.

The sweep file has a ``[replay]`` table of settings shared by every run and a ``[grid]`` table
whose values are lists; every combination is one run. Relative paths are taken from the
sweep file's folder. Runs that differ only in replication settings share one schedule, so a
*task* is one schedule and all its replication variants; task results are written under
``OUTPUT/tasks/`` and :func:`collect` merges them into ``OUTPUT/results.csv`` with the
cross-run filtered wait statistics.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import hashlib
import itertools
import json
import math
import os
import re
import shlex
import signal
import sys
import threading
import time
import tomllib
from array import array
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import get_context

from ..errors import InputError, ScratchkeeperError
from ..inputfiles import read_text
from ..runner import get_runner
from .metrics import filtered_wait_stats
from .run import ReplayConfig, ReplayRow, applicable_settings, run_replay

#: A sweep file is a few lines of TOML; anything far larger is not one.
SWEEP_SIZE_MAX = 1 << 20
CONFIG_FIELDS = [f.name for f in dataclasses.fields(ReplayConfig)]
METRIC_FIELDS = ["jobs", "model_system_nodes", "ost_failures", "node_mtbf_days", "utilisation_pct",
                 "wait_mean", "wait_sd", "filtered_jobs", "filtered_wait_mean",
                 "filtered_wait_sd", "affected_jobs", "affected_pct", "affected_wait_mean",
                 "affected_wait_sd", "kills", "makespan_s", "queue_length_mean", "input_mean_bytes",
                 "model_scratch_bytes", "at_risk_pct",
                 "space_mean_pct", "space_max_pct", "replicated_jobs"]


@dataclass
class SweepPlan:
    path: str
    tasks: list[list[ReplayConfig]]     # each: configurations sharing one schedule

    @property
    def runs(self) -> int:
        return sum(len(t) for t in self.tasks)


def load_sweep(path: str) -> SweepPlan:
    """Read a sweep file and expand its grid into tasks; errors name the file and the key."""
    text = read_text(path, SWEEP_SIZE_MAX, what="sweep file")
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        # Python 3.11 puts the place only in the text: "Invalid value (at line 2, column 9)".
        found = re.search(r"^(.*) \(at line (\d+), column \d+\)$", str(err))
        message, line = (found.group(1), int(found.group(2))) if found else (str(err), None)
        raise InputError(f"not valid TOML: {message}", path=path, line=line) from err
    unknown = set(document) - {"replay", "grid"}
    if unknown:
        raise InputError(f"unknown table(s) {', '.join(sorted(unknown))}; expected [replay] "
                         "and [grid]", path=path)
    base = dict(document.get("replay", {}))
    grids = document.get("grid", {})
    # [grid] is one table; [[grid]] several, whose combinations are all run (a union of grids).
    if isinstance(grids, dict):
        grids = [grids]
    for grid in grids:
        if not isinstance(grid, dict):
            raise InputError("grid must be a table or an array of tables", path=path)
        for key, values in grid.items():
            if not isinstance(values, list) or not values:
                raise InputError(f"grid.{key} must be a non-empty list", path=path)
            if key in base:
                raise InputError(f"{key!r} is set in both [replay] and [grid]", path=path)
    folder = os.path.dirname(os.path.abspath(path))
    for key in ("trace", "failures"):
        if base.get(key):
            base[key] = os.path.normpath(os.path.join(folder, base[key]))
    configs = []
    seen = set()
    for grid in grids:
        keys = list(grid)
        for combo in itertools.product(*(grid[k] for k in keys)):
            values = dict(base)
            values.update(zip(keys, combo))
            for key in ("trace", "failures"):
                if key in grid and values.get(key):
                    values[key] = os.path.normpath(os.path.join(folder, values[key]))
            config = ReplayConfig.from_mapping(values, where=path)
            if config not in seen:
                seen.add(config)
                configs.append(config)
    if not configs:
        raise InputError("the sweep has no run", path=path)
    tasks: dict[tuple, list[ReplayConfig]] = {}
    for config in configs:
        tasks.setdefault(config.schedule_key(), []).append(config)
    return SweepPlan(os.path.abspath(path), list(tasks.values()))


def task_digest(configs: list[ReplayConfig]) -> str:
    """Fingerprint of a task's configurations, so a result left by another sweep is not merged."""
    text = json.dumps([dataclasses.asdict(c) for c in configs], sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _task_stem(output: str, index: int) -> str:
    return os.path.join(output, "tasks", f"task-{index:04d}")


def run_task(plan: SweepPlan, index: int, output: str,
             on_run: Callable[[int, dict], None] | None = None) -> int:
    """Run task ``index`` of the plan and write its rows and per-job waits; returns rows written.

    ``on_run(index, row)`` as each run of the task finishes (its settings and metrics)."""
    if not 0 <= index < len(plan.tasks):
        raise InputError(f"task {index} out of range (the sweep has {len(plan.tasks)} tasks)",
                         path=plan.path)
    configs = plan.tasks[index]

    def finished(row: ReplayRow) -> None:
        if on_run is not None:
            on_run(index, dict(dataclasses.asdict(row.config), **row.values))

    outcome = run_replay(configs[0], configs, on_row=finished)
    stem = _task_stem(output, index)
    os.makedirs(os.path.dirname(stem), exist_ok=True)
    # Written under a temporary name and renamed, so a killed task leaves no half result.
    with open(stem + ".waits.tmp", "wb") as stream:
        outcome.waits.tofile(stream)
    with open(stem + ".affected.tmp", "wb") as stream:
        stream.write(outcome.affected)
    rows = [dict(dataclasses.asdict(r.config), **r.values) for r in outcome.rows]
    with open(stem + ".json.tmp", "w") as stream:
        json.dump({"digest": task_digest(configs), "rows": rows, "skipped": outcome.skipped},
                  stream, default=_json_default)
    for suffix in (".waits", ".affected", ".json"):
        os.replace(stem + suffix + ".tmp", stem + suffix)
    return len(rows)


def _json_default(value):
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


#: Where a worker sends each finished run (set in each worker by the pool's initializer).
_RUN_QUEUE = None


def _run_task_in_child(args: tuple[SweepPlan, int, str]) -> tuple[int, str | None]:
    plan, index, output = args
    queue = _RUN_QUEUE
    try:
        if queue is None:
            run_task(plan, index, output)
        else:
            run_task(plan, index, output, on_run=lambda i, row: queue.put((i, row)))
        return index, None
    except ScratchkeeperError as err:
        return index, str(err)
    finally:
        if queue is not None and not isinstance(queue, _Direct):
            # the task's end, behind its runs in this worker's queue: a worker's puts reach
            # the queue from a feeder thread, after the task's result may have reached the pool
            queue.put((index, None))


def run_local(plan: SweepPlan, output: str, workers: int,
              on_run: Callable[[int, dict], None] | None = None) -> list[str]:
    """Run every task on up to ``workers`` local processes; returns the error lines of failed
    tasks. ``on_run(task index, row)`` is called in this process as each run finishes."""
    todo = [(plan, i, output) for i in range(len(plan.tasks))]

    def collect(results) -> list[str]:
        return [f"task {index}: {error}" for index, error in results if error]

    if workers <= 1:
        global _RUN_QUEUE
        if on_run is None:
            return collect(map(_run_task_in_child, todo))
        _RUN_QUEUE = _Direct(on_run)
        try:
            return collect(map(_run_task_in_child, todo))
        finally:
            _RUN_QUEUE = None
    if on_run is None:
        with worker_pool(workers) as pool:
            return collect(pool.imap_unordered(_run_task_in_child, todo))
    queue = get_context("fork").Queue()
    drain = threading.Thread(target=_drain, args=(queue, on_run, len(todo)), daemon=True)
    drain.start()
    try:
        with worker_pool(workers, queue) as pool:
            errors = collect(pool.imap_unordered(_run_task_in_child, todo))
    except BaseException:
        # Stopped: the runs drained so far are written; a worker killed while it wrote to the
        # queue may hold its lock, so neither the end mark nor the exit waits for it.
        queue.cancel_join_thread()
        queue.put(None)
        drain.join(timeout=1)
        raise
    # Each task's end mark follows its runs in the queue: the drain stops after the last one
    # (a worker that died without sending its mark: the pool had raised above).
    drain.join(timeout=600)
    if drain.is_alive():
        queue.put(None)
        drain.join(timeout=5)
    return errors


class _Direct:
    """A stand-in for the run queue in a sweep without worker processes: calls at once."""

    def __init__(self, on_run: Callable[[int, dict], None]):
        self.on_run = on_run

    def put(self, item: tuple[int, dict]) -> None:
        self.on_run(*item)


def _drain(queue, on_run: Callable[[int, dict], None], tasks: int) -> None:
    """``on_run`` for each run the workers send, until every task's end mark came (or None)."""
    ended = 0
    while ended < tasks and (item := queue.get()) is not None:
        index, row = item
        if row is None:
            ended += 1
        else:
            on_run(index, row)


@contextlib.contextmanager
def worker_pool(workers: int, run_queue=None):
    """A pool of ``workers`` forked processes that a stopped sweep takes down with it; each
    worker sends its finished runs to ``run_queue`` when one is given.

    Leaving the block by an exception (Ctrl-C, SIGTERM turned into :class:`SweepStopped`, a
    crash) terminates the pool: no worker goes on after the sweep is stopped.
    """
    with _stop_on_sigterm(), get_context("fork").Pool(processes=max(1, workers),
                                                      initializer=_worker_signals,
                                                      initargs=(run_queue,)) as pool:
        yield pool


class SweepStopped(ScratchkeeperError):
    """The sweep got SIGTERM; its workers were stopped, finished tasks keep their results."""

    exit_code = 128 + signal.SIGTERM


class _stop_on_sigterm:
    """While a local sweep runs: SIGTERM raises :class:`SweepStopped` in the parent."""

    def __enter__(self):
        self.previous = None
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, self._raise)
        return self

    @staticmethod
    def _raise(signum, frame):
        raise SweepStopped("sweep stopped by SIGTERM, its workers with it (the tasks that "
                           "had finished left their results under OUTPUT/tasks/)")

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)
        return False


def _worker_signals(run_queue=None) -> None:
    # Ctrl-C reaches the whole foreground process group: the parent alone handles it (and
    # terminates the pool); a worker dies by the pool's SIGTERM with the default action.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    global _RUN_QUEUE
    _RUN_QUEUE = run_queue


def format_duration(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``2 h 07 min``: a time left or taken, for people."""
    seconds = int(round(max(seconds, 0.0)))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


RESULT_FIELDS = CONFIG_FIELDS + METRIC_FIELDS


class RunLog:
    """A sweep's runs as they finish: each appended to ``path`` (OUTPUT/results.csv; None: no
    file) and flushed, so an interrupted sweep keeps every finished run (its filtered
    statistics stay blank: they compare all runs, and :func:`collect` fills them in when the
    sweep ends); and a progress line per run on ``stream`` (None: none), with the count of
    ``total`` runs (default: the plan's) and the time left."""

    def __init__(self, plan: SweepPlan, path: str | None, stream=None, *,
                 terminal: bool = False, label: str = "sweep", total: int | None = None):
        self.total = plan.runs if total is None else total
        self.stream = stream
        self.terminal = terminal
        self.label = label
        configs = [config for task in plan.tasks for config in task]
        # A run is named by the settings the sweep varies (its grid keys).
        self.varying = [name for name in CONFIG_FIELDS
                        if len({repr(getattr(c, name)) for c in configs}) > 1]
        self.done = 0
        self.started = time.monotonic()
        self.file = None
        if path is not None:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            self.file = open(path, "w", newline="")
            self.writer = csv.DictWriter(self.file, fieldnames=RESULT_FIELDS,
                                         extrasaction="ignore")
            self.writer.writeheader()
            self.file.flush()

    def __call__(self, index: int, row: dict) -> None:
        if self.file is not None:
            self.writer.writerow({k: _cell(v) for k, v in applicable_settings(row).items()})
            self.file.flush()
        self.done += 1
        if self.stream is None:
            return
        elapsed = time.monotonic() - self.started
        left = elapsed / self.done * (self.total - self.done)
        named = " ".join(f"{k}={_shown(row.get(k))}" for k in self.varying)
        text = (f"{self.label}: {self.done}/{self.total} runs done, "
                f"{format_duration(elapsed)} so far, about {format_duration(left)} left "
                f"(task {index}{': ' + named if named else ''})")
        if self.terminal:
            self.stream.write("\r" + text + "\x1b[K" + ("\n" if self.done >= self.total else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


def _shown(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return os.path.basename(value) if isinstance(value, str) and os.sep in value else str(value)


def slurm_script(plan: SweepPlan, output: str, *, partition: str = "", time_limit: str = "",
                 python: str = sys.executable) -> str:
    """The job-array script: task ``$SLURM_ARRAY_TASK_ID`` of the sweep, one core each."""
    lines = ["#!/bin/sh",
             "#SBATCH --job-name=sk-sweep",
             f"#SBATCH --array=0-{len(plan.tasks) - 1}",
             "#SBATCH --ntasks=1",
             "#SBATCH --cpus-per-task=1",
             f"#SBATCH --output={shlex.quote(os.path.join(output, 'tasks', 'slurm-%A_%a.out'))}"]
    if partition:
        lines.append(f"#SBATCH --partition={shlex.quote(partition)}")
    if time_limit:
        lines.append(f"#SBATCH --time={shlex.quote(time_limit)}")
    lines.append(" ".join([shlex.quote(python), "-m", "scratchkeeper", "sweep",
                           shlex.quote(plan.path), "--output", shlex.quote(output),
                           "--task", '"$SLURM_ARRAY_TASK_ID"']))
    return "\n".join(lines) + "\n"


def submit_slurm(plan: SweepPlan, output: str, *, partition: str = "", time_limit: str = "",
                 sbatch: str = "sbatch", timeout: float = 60.0) -> tuple[str, str]:
    """Submit the array and a collect job that runs after it; returns both job ids."""
    os.makedirs(os.path.join(output, "tasks"), exist_ok=True)
    script = os.path.join(output, "sweep.sbatch")
    with open(script, "w") as stream:
        stream.write(slurm_script(plan, output, partition=partition, time_limit=time_limit))
    runner = get_runner()
    array_id = _job_id(runner.run([sbatch, "--parsable", script], timeout=timeout).stdout)
    collect = " ".join([shlex.quote(sys.executable), "-m", "scratchkeeper", "sweep",
                        shlex.quote(plan.path), "--output", shlex.quote(output), "--collect"])
    argv = [sbatch, "--parsable", f"--dependency=afterany:{array_id}", "--job-name=sk-collect",
            f"--output={os.path.join(output, 'collect-%j.out')}"]
    if partition:
        argv.append(f"--partition={partition}")
    argv.append(f"--wrap={collect}")
    collect_id = _job_id(runner.run(argv, timeout=timeout).stdout)
    return array_id, collect_id


def _job_id(stdout: str) -> str:
    text = stdout.strip().split(";")[0]
    if not text.isdigit():
        raise ScratchkeeperError(f"sbatch --parsable printed {stdout.strip()!r}, not a job id")
    return text


def collect(plan: SweepPlan, output: str) -> tuple[str, int, list[int]]:
    """Merge task results into ``OUTPUT/results.csv``; returns its path, rows, missing tasks."""
    rows = []
    waits_by_run: dict[tuple, dict[int, array]] = defaultdict(dict)
    missing = []
    for index in range(len(plan.tasks)):
        stem = _task_stem(output, index)
        try:
            with open(stem + ".json") as stream:
                document = json.load(stream)
            if document.get("digest") != task_digest(plan.tasks[index]):
                # Written for another grid (the sweep file changed): not this task's result.
                missing.append(index)
                continue
            task_rows = document["rows"]
            waits = array("d")
            with open(stem + ".waits", "rb") as stream:
                waits.frombytes(stream.read())
        except FileNotFoundError:
            missing.append(index)
            continue
        except (OSError, ValueError, KeyError) as err:
            raise InputError(f"unreadable task result: {err}", path=stem + ".json") from err
        for row in task_rows:
            row["_task"] = index
            rows.append(row)
        config = plan.tasks[index][0]
        waits_by_run[config.workload_key()][index] = waits
    filtered = {}
    for group in waits_by_run.values():
        try:
            filtered.update(filtered_wait_stats(group))
        except ValueError as err:
            raise InputError(f"cannot compare runs: {err}", path=plan.path) from err
    for row in rows:
        stats = filtered[row.pop("_task")]
        row.update(filtered_jobs=stats.jobs, filtered_wait_mean=stats.mean,
                   filtered_wait_sd=stats.sd)
    path = os.path.join(output, "results.csv")
    with open(path + ".tmp", "w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=RESULT_FIELDS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _cell(v) for k, v in applicable_settings(row).items()})
    os.replace(path + ".tmp", path)
    return path, len(rows), missing


def _cell(value):
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        return repr(value)
    return value
