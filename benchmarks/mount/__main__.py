"""Scratch mount benchmark: the mount against bindfs and the plain directory, cold cache.

``.venv/bin/python -m benchmarks.mount [--quick] [--workdir DIR]``

Workloads (fio job files in benchmarks/mount/jobs/, the metadata program statfiles.py):

* sequential write, 1 MiB blocks, 1 job and 4 jobs (``seq-write.fio``, until fsync'd);
* sequential read, 1 MiB blocks, 1 job and 4 jobs (``seq-read.fio``, the files just written);
* random 4 KiB reads, one job, a fixed time (``rand-read.fio``, the one-job file);
* ``lstat`` of 10,000 files in 100 folders (``statfiles.py``).

Targets: the plain directory, bindfs over a plain directory, the scratch mount over a local
store, all on the same disk under --workdir. Every measured run starts from cold caches (sync,
``echo 3 > /proc/sys/vm/drop_caches``); runs are interleaved (each workload on every target in
turn, the targets' order rotated each repeat) and repeated, so that load from other processes
falls on all of them; the report gives medians, ranges and the ratios mount/bindfs against the
goals, and the load average seen during the run. It reports; it never fails on a speed goal.
Everything mounted is unmounted, the big files removed, on errors too. Writes
docs/benchmarks/mount/report.md, results.json and results.png (--quick: report-quick.md,
results-quick.json, results-quick.png, so that a quick check keeps the full run's figures).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import harness
from benchmarks.mount_rig import drop_caches
from testkit import mount_targets as targets

ROOT = harness.REPO
JOBS = Path(__file__).resolve().parent / "jobs"
REPORT_DIR = harness.report_dir("mount")
MiB = 1 << 20
GiB = 1 << 30
STAT_FILES = 10_000


@dataclass(frozen=True)
class Workload:
    name: str
    title: str
    unit: str           # what the figure counts (higher is better)
    goal: float         # least mount/bindfs ratio wanted
    job: str = ""       # fio job file; empty: the stat program
    numjobs: int = 1


WORKLOADS = (
    Workload("seq-write-1", "sequential write 1 MiB, 1 job", "MB/s", 0.7, "seq-write.fio", 1),
    Workload("seq-write-4", "sequential write 1 MiB, 4 jobs", "MB/s", 0.7, "seq-write.fio", 4),
    Workload("seq-read-1", "sequential read 1 MiB, 1 job", "MB/s", 0.8, "seq-read.fio", 1),
    Workload("seq-read-4", "sequential read 1 MiB, 4 jobs", "MB/s", 0.8, "seq-read.fio", 4),
    Workload("rand-read-4k", "random read 4 KiB, 1 job", "IOPS", 0.7, "rand-read.fio", 1),
    Workload("stat-10k", f"lstat of {STAT_FILES:,} files", "files/s", 0.5),
)


@dataclass(frozen=True)
class Settings:
    quick: bool
    seq_bytes: int      # bytes of a sequential run (split over its jobs)
    rand_seconds: int
    repeats: int


FULL = Settings(False, 4 * GiB, 15, 5)
QUICK = Settings(True, 512 * MiB, 4, 3)


class RunFailed(Exception):
    pass


def _load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def _run(argv: list[str], timeout: float, env: dict | None = None) -> str:
    done = targets.run_group(["timeout", "-k", "10", str(int(timeout)), *argv], timeout + 30,
                             env=env)
    if done.returncode != 0:
        raise RunFailed(f"{' '.join(argv[:3])}... exit {done.returncode}: "
                        f"{(done.stderr or done.stdout)[-600:]}")
    return done.stdout


def fio(workload: Workload, directory: Path, settings: Settings) -> float:
    env = dict(os.environ, DIR=str(directory), NUMJOBS=str(workload.numjobs),
               SIZE=str(settings.seq_bytes // workload.numjobs), RUNTIME=str(settings.rand_seconds))
    if workload.name.startswith("rand"):
        env["SIZE"] = str(settings.seq_bytes)  # the one-job file
    out = _run(["fio", "--output-format=json", str(JOBS / workload.job)], 900, env)
    job = json.loads(out[out.index("{"):])["jobs"][0]  # group_reporting: one entry
    side = job["write"] if "write" in workload.name else job["read"]
    if side["io_bytes"] <= 0:
        raise RunFailed(f"fio {workload.job} moved no bytes in {directory}")
    return side["iops"] if workload.unit == "IOPS" else side["bw_bytes"] / 1e6


def stat_files(directory: Path) -> float:
    out = _run([sys.executable, "-m", "benchmarks.mount.statfiles", "stat", str(directory),
                str(STAT_FILES)], 600)
    result = json.loads(out)
    return result["files"] / result["seconds"]


def remove_files(directory: Path, pattern: str) -> None:
    """rm -f directory/pattern, in a child under timeout (the directory may be a FUSE one)."""
    _run(["sh", "-c", f'rm -f -- "$1"/{pattern}', "sh", str(directory)], 300)


def measure(workload: Workload, target: targets.Target, settings: Settings) -> float:
    data = target.path / "bench"
    if workload.job == "seq-write.fio":
        remove_files(data, f"seq{workload.numjobs}.*")  # each write creates its files anew
    drop_caches(sync_timeout=300)  # a sync through a hung FUSE mount would not return
    if workload.job:
        return fio(workload, data, settings)
    return stat_files(target.path / "stat")


def prepare(target: targets.Target) -> None:
    _run(["mkdir", "-p", str(target.path / "bench")], 60)
    _run([sys.executable, "-m", "benchmarks.mount.statfiles", "create", str(target.path / "stat"),
          str(STAT_FILES)], 900)


def run(settings: Settings, workdir: Path) -> dict:
    base = Path(tempfile.mkdtemp(prefix="sk-bench-mount.", dir=workdir))
    samples: dict[str, dict[str, list]] = {w.name: {} for w in WORKLOADS}
    errors: list[str] = []
    loads = [_load()]
    described = {}
    started = time.monotonic()
    try:
        with contextlib.ExitStack() as stack:
            chosen = [stack.enter_context(targets.plain(base / "plain")),
                      stack.enter_context(targets.bindfs(base / "bindfs"))]
            if targets.mount_available():
                try:
                    chosen.append(stack.enter_context(targets.scratch_mount(base / "mount")))
                except RuntimeError as err:  # reported; plain and bindfs are still measured
                    errors.append(f"the scratch mount did not start: {err}")
                    print(f"bench mount: {errors[-1]}", file=sys.stderr, flush=True)
            else:
                print(f"bench mount: the scratch mount not measured: {targets.NO_MOUNT}",
                      flush=True)
            for target in chosen:
                described[target.name] = {"description": target.description,
                                          "mount_options": target.mount_options}
                prepare(target)
            for repeat in range(settings.repeats):
                order = chosen[repeat % len(chosen):] + chosen[:repeat % len(chosen)]
                for workload in WORKLOADS:
                    for target in order:
                        try:
                            value = measure(workload, target, settings)
                        except RunFailed as err:
                            errors.append(f"{workload.name} on {target.name}: {err}")
                            print(f"bench mount: {errors[-1]}", file=sys.stderr, flush=True)
                            continue
                        finally:
                            loads.append(_load())
                        samples[workload.name].setdefault(target.name, []).append(value)
                        print(f"bench mount: [{repeat + 1}/{settings.repeats}] {workload.name} "
                              f"{target.name}: {value:,.1f} {workload.unit}", flush=True)
    finally:
        targets.clean_base(base)
    return {"settings": settings.__dict__, "targets": described, "samples": samples,
            "errors": errors, "load_average_1min": loads,
            "seconds": round(time.monotonic() - started, 1)}


def summarize(result: dict) -> dict:
    table = {}
    for workload in WORKLOADS:
        row = {}
        for name, values in result["samples"][workload.name].items():
            row[name] = {"median": statistics.median(values), "min": min(values),
                         "max": max(values), "n": len(values)}
        ratios = {}
        for upper, lower in (("mount", "bindfs"), ("mount", "plain"), ("bindfs", "plain")):
            if upper in row and lower in row:
                ratios[f"{upper}/{lower}"] = row[upper]["median"] / row[lower]["median"]
        table[workload.name] = {"title": workload.title, "unit": workload.unit,
                                "goal_mount_vs_bindfs": workload.goal, "targets": row,
                                "ratios": ratios}
    return table


def _figure(stats: dict) -> str:
    return f"{stats['median']:,.0f} ({stats['min']:,.0f}-{stats['max']:,.0f})"


def _name(stem: str, settings: dict, ext: str) -> str:
    return f"{stem}{'-quick' if settings['quick'] else ''}.{ext}"


def write_report(result: dict, table: dict) -> None:
    REPORT_DIR.mkdir(parents=True, exist_ok=True)
    settings = result["settings"]
    names = [n for n in ("plain", "bindfs", "mount") if n in result["targets"]]
    loads = result["load_average_1min"]
    lines = [
        "# The scratch mount against bindfs and the plain directory",
        "",
        f"`.venv/bin/python -m benchmarks.mount{' --quick' if settings['quick'] else ''}`, "
        f"{time.strftime('%Y-%m-%d %H:%M')} (CPython {platform.python_version()}, Linux "
        f"{platform.release()}, {os.cpu_count()} shared cores, "
        f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / GiB:.0f} GiB RAM; every "
        f"target on the same local disk). {settings['repeats']} repeats, "
        f"{'quick' if settings['quick'] else 'full'} sizes: sequential runs of "
        f"{settings['seq_bytes'] // MiB:,} MiB (split over the jobs), random reads for "
        f"{settings['rand_seconds']} s; {result['seconds']:.0f} s in all.",
        "",
        f"Load average (1 min) during the run: median {statistics.median(loads):.2f}, "
        f"{min(loads):.2f}-{max(loads):.2f} (sampled after every run; two other engineers share "
        "the machine's two cores).",
        "",
        "Every run starts from cold caches (sync; `echo 3 > /proc/sys/vm/drop_caches`); the "
        "workloads run on each target in turn, the targets' order rotated each repeat. Figures "
        "are medians with the lowest and highest run; higher is better.",
        "",
        "| workload | unit | " + " | ".join(names) + " | bindfs/plain | mount/plain | "
        "mount/bindfs | goal (mount/bindfs) |",
        "|---|---|" + "---|" * len(names) + "---|---|---|---|",
    ]
    for workload in WORKLOADS:
        row = table[workload.name]
        cells = [_figure(row["targets"][n]) if n in row["targets"] else "failed" for n in names]
        ratios = row["ratios"]
        verdict = "-"
        if "mount/bindfs" in ratios:
            met = ratios["mount/bindfs"] >= workload.goal
            verdict = f">= {workload.goal} ({'met' if met else '**missed**'})"
        else:
            verdict = f">= {workload.goal} (not measured)"
        lines.append(f"| {workload.title} | {workload.unit} | " + " | ".join(cells) + " | "
                     + " | ".join(f"{ratios[k]:.2f}" if k in ratios else "-"
                                  for k in ("bindfs/plain", "mount/plain", "mount/bindfs"))
                     + f" | {verdict} |")
    lines += ["", "Targets:", ""]
    for name in names:
        info = result["targets"][name]
        lines.append(f"* **{name}**: {info['description']}"
                     + (f"; mount options `{info['mount_options']}`" if info["mount_options"]
                        else ""))
    if "mount" not in names:
        lines.append(f"* **mount**: not measured: {targets.NO_MOUNT}.")
    if result["errors"]:
        lines += ["", "Runs that failed:", ""] + [f"* {e}" for e in result["errors"]]
    lines += ["", f"![bars per workload]({_name('results', settings, 'png')})", "",
              "How to run, what each workload measures and why the peers' options are fair: "
              "[README.rst](README.rst).", ""]
    (REPORT_DIR / _name("report", settings, "md")).write_text("\n".join(lines))


def plot(result: dict, table: dict) -> None:
    plt = harness.pyplot()
    names = [n for n in ("plain", "bindfs", "mount") if n in result["targets"]]
    colours = {"plain": "#9e9e9e", "bindfs": "#1f77b4", "mount": "#d62728"}
    fig, axes = plt.subplots(1, len(WORKLOADS), figsize=(3 * len(WORKLOADS), 3.6))
    for ax, workload in zip(axes, WORKLOADS):
        row = table[workload.name]["targets"]
        for i, name in enumerate(names):
            if name not in row:
                continue
            stats = row[name]
            ax.bar(i, stats["median"], color=colours[name], label=name,
                   yerr=[[stats["median"] - stats["min"]], [stats["max"] - stats["median"]]],
                   capsize=3)
        ax.set_xticks(range(len(names)), names, fontsize=8)
        ax.set_title(workload.title, fontsize=8)
        ax.set_ylabel(workload.unit, fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
        ratio = table[workload.name]["ratios"].get("mount/bindfs")
        if ratio is not None:
            ax.set_xlabel(f"mount/bindfs {ratio:.2f} (goal {workload.goal})", fontsize=7)
    fig.suptitle("Cold cache, medians and ranges of "
                 f"{result['settings']['repeats']} repeats (higher is better)", fontsize=9)
    fig.tight_layout()
    harness.save_figure(fig, REPORT_DIR / _name("results", result["settings"], "png"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mount",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="512 MiB sequential runs, 4 s of random reads, 3 repeats")
    parser.add_argument("--workdir", type=Path, default=Path("/var/tmp"),
                        help="where the targets live: a folder of the local disk (default "
                             "/var/tmp); needs about 8 GiB per target (1 GiB quick)")
    args = parser.parse_args(argv)
    harness.require_root("mount", "dropping caches and mounting bindfs")
    harness.require_tools("mount", ("fio", "bindfs", "fusermount3"))
    settings = QUICK if args.quick else FULL
    with targets.exit_on_sigterm():
        result = run(settings, args.workdir)
    table = summarize(result)
    result["summary"] = table
    harness.write_json(REPORT_DIR / _name("results", result["settings"], "json"), result,
                       newline=True)
    write_report(result, table)
    plot(result, table)
    print(f"bench mount: wrote {REPORT_DIR.relative_to(ROOT)}/"
          + ", ".join(_name(stem, result["settings"], ext) for stem, ext in
                      (("report", "md"), ("results", "json"), ("results", "png"))))
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
