"""Reads through the scratch mount with kernel passthrough, without it, bindfs and the plain
directory, in one run, on an idle machine and with every core busy (issue 45).

``.venv/bin/python -m benchmarks.mount.passthrough [--quick] [--workdir DIR]``

One file of --size bytes on every target: the plain directory, bindfs over a plain directory,
the scratch mount (a 1-stripe and a 4-stripe file; passthrough on, as the mount runs) and the
same mount started with ``SK_MOUNT_PASSTHROUGH=0`` (what the mount did before). Workloads: a
sequential read in 1 MiB blocks and 4 KiB random reads for a fixed time (the fio job files of
benchmarks/mount/jobs/), each from cold caches (sync, drop_caches). Loads: idle, and one
CPU-bound loop per core (as a compute job keeps them). Rounds interleave every case; the
report gives the median of the rounds, the spread (lowest-highest), the ratio to the plain
directory, and the FUSE daemon's CPU seconds (user + system, from /proc/PID/stat) per GiB read.
It reports; it never fails on a speed goal. Writes docs/benchmarks/mount/passthrough.md and
passthrough.json (--quick: passthrough-quick.*).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import harness
from benchmarks.mount_rig import drop_caches
from testkit import mount_targets as targets

JOBS = Path(__file__).resolve().parent / "jobs"
REPORT_DIR = harness.report_dir("mount")
MiB = 1 << 20
GiB = 1 << 30
TICKS = os.sysconf("SC_CLK_TCK")
#: the issue's goals, as ratios to the plain directory and CPU seconds per GiB
GOAL_RATIO_1_STRIPE = 0.9
GOAL_RATIO_4_STRIPE_SEQ = 0.8
GOAL_CPU_PER_GIB = 0.05


@dataclass(frozen=True)
class Case:
    name: str           # plain, bindfs, mount-1, mount-4, nopt-1, nopt-4
    target: str         # the target it reads through
    folder: str         # the folder of its file, under the target's path


CASES = (Case("plain", "plain", "f"), Case("bindfs", "bindfs", "f"),
         Case("mount-1", "mount", "s1"), Case("mount-4", "mount", "s4"),
         Case("nopt-1", "nopt", "s1"), Case("nopt-4", "nopt", "s4"))
WORKLOADS = ("seq", "rand")
LOADS = ("idle", "busy")


class RunFailed(Exception):
    pass


def _run(argv: list[str], timeout: float, env: dict | None = None) -> str:
    done = targets.run_group(["timeout", "-k", "10", str(int(timeout)), *argv], timeout + 30,
                             env=env)
    if done.returncode != 0:
        raise RunFailed(f"{' '.join(argv[:3])}... exit {done.returncode}: "
                        f"{(done.stderr or done.stdout)[-600:]}")
    return done.stdout


def daemon_pid(mount_point: Path) -> int | None:
    """The FUSE daemon serving mount_point (its command line names it)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if str(mount_point).encode() in argv and argv[0] != b"timeout":
                return int(entry.name)
    return None


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of the process (its threads included)."""
    if pid is None:
        return float("nan")
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def fio(job: str, directory: Path, size: int, runtime: int) -> tuple[float, int]:
    """(MB/s or IOPS, bytes read) of one fio run of ``job`` over directory/seq1.0."""
    env = dict(os.environ, DIR=str(directory), NUMJOBS="1", SIZE=str(size), RUNTIME=str(runtime))
    # no POSIX_FADV_RANDOM from fio: a hint on a passed-through file reaches the FUSE file,
    # not the object the kernel reads, so with it the plain directory alone would read without
    # readahead; without it every target reads with the kernel's default readahead
    out = _run(["fio", "--output-format=json", "--fadvise_hint=0", str(JOBS / job)], 900, env)
    read = json.loads(out[out.index("{"):])["jobs"][0]["read"]
    if read["io_bytes"] <= 0:
        raise RunFailed(f"fio {job} read nothing in {directory}")
    value = read["iops"] if job.startswith("rand") else read["bw_bytes"] / 1e6
    return value, read["io_bytes"]


@contextlib.contextmanager
def busy_cores(load: str):
    """One CPU-bound loop per core while the block runs (load "busy"), none when "idle"."""
    loops = []
    try:
        if load == "busy":
            for _ in range(os.cpu_count() or 1):
                loops.append(subprocess.Popen(["sh", "-c", "while :; do :; done"],
                                              start_new_session=True))
            time.sleep(0.5)
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait(timeout=30)


def write_file(directory: Path, size: int, stripe: bytes | None) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    if stripe:
        os.setxattr(directory, "user.scratchkeeper.stripe", stripe)
    _run(["dd", "if=/dev/urandom", f"of={directory / 'seq1.0'}", "bs=1M",
          f"count={size // MiB}", "conv=fsync", "status=none"], 900)


def passthrough_opens(mount_point: Path) -> int:
    return json.loads(os.getxattr(mount_point, "user.scratchkeeper.passthrough"))["opens"]


def measure(case: Case, path: Path, workload: str, size: int, runtime: int) -> dict:
    pid = daemon_pid(path) if case.target != "plain" else None
    drop_caches(sync_timeout=300)
    before = cpu_seconds(pid)
    value, read = fio("seq-read.fio" if workload == "seq" else "rand-read.fio",
                      path / case.folder, size, runtime)
    cpu = cpu_seconds(pid) - before
    return {"value": value, "bytes": read, "cpu": cpu if pid is not None else None}


def run(quick: bool, workdir: Path, size: int, runtime: int, rounds: int) -> dict:
    base = Path(tempfile.mkdtemp(prefix="sk-bench-passthrough.", dir=workdir))
    samples: dict = {load: {w: {c.name: [] for c in CASES} for w in WORKLOADS} for load in LOADS}
    errors: list[str] = []
    loads: list[float] = []
    started = time.monotonic()
    described = {}
    try:
        with contextlib.ExitStack() as stack:
            paths = {"plain": stack.enter_context(targets.plain(base / "plain")),
                     "bindfs": stack.enter_context(targets.bindfs(base / "bindfs")),
                     "mount": stack.enter_context(targets.scratch_mount(base / "mount")),
                     "nopt": stack.enter_context(targets.scratch_mount(
                         base / "nopt", env={"SK_MOUNT_PASSTHROUGH": "0"}))}
            for name, target in paths.items():
                described[name] = target.description
            for case in CASES:
                stripe = None
                if case.folder == "s1":
                    stripe = f"stripe_count=1 stripe_size={MiB}".encode()
                write_file(paths[case.target].path / case.folder, size, stripe)
            opened = passthrough_opens(paths["mount"].path)
            for repeat in range(rounds):
                for load in LOADS:
                    with busy_cores(load):
                        for workload in WORKLOADS:
                            order = CASES[repeat % len(CASES):] + CASES[:repeat % len(CASES)]
                            for case in order:
                                try:
                                    sample = measure(case, paths[case.target].path, workload,
                                                     size, runtime)
                                except RunFailed as err:
                                    errors.append(f"{load} {workload} {case.name}: {err}")
                                    print(f"bench passthrough: {errors[-1]}", file=sys.stderr,
                                          flush=True)
                                    continue
                                finally:
                                    loads.append(float(Path("/proc/loadavg").read_text()
                                                       .split()[0]))
                                samples[load][workload][case.name].append(sample)
                                print(f"bench passthrough: [{repeat + 1}/{rounds}] {load} "
                                      f"{workload} {case.name}: {sample['value']:,.1f}",
                                      flush=True)
            passed = passthrough_opens(paths["mount"].path) - opened
    finally:
        targets.clean_base(base)
    return {"quick": quick, "size": size, "runtime": runtime, "rounds": rounds,
            "targets": described, "samples": samples, "errors": errors,
            "passthrough_opens": passed, "load_average_1min": loads,
            "seconds": round(time.monotonic() - started, 1)}


def summarize(result: dict) -> dict:
    table: dict = {}
    for load in LOADS:
        for workload in WORKLOADS:
            rows = {}
            for case in CASES:
                got = result["samples"][load][workload][case.name]
                if not got:
                    continue
                values = [s["value"] for s in got]
                # CPU time is counted in clock ticks: summed over the rounds, per GiB of them all
                cpu = sum(s["cpu"] for s in got) if got[0]["cpu"] is not None else None
                rows[case.name] = {"median": statistics.median(values), "min": min(values),
                                   "max": max(values),
                                   "cpu_per_gib": None if cpu is None
                                   else cpu / (sum(s["bytes"] for s in got) / GiB)}
            plain = rows.get("plain", {}).get("median")
            for row in rows.values():
                row["ratio"] = row["median"] / plain if plain else None
            table[f"{load}/{workload}"] = rows
    return table


def _cell(row: dict | None) -> str:
    if row is None:
        return "failed"
    cpu = "" if row["cpu_per_gib"] is None else f"; {row['cpu_per_gib']:.3f} CPU-s/GiB"
    ratio = "" if row["ratio"] is None else f" **{row['ratio']:.2f}x**"
    return f"{row['median']:,.0f} ({row['min']:,.0f}-{row['max']:,.0f}){ratio}{cpu}"


def write_report(result: dict, table: dict) -> None:
    stem = "passthrough-quick" if result["quick"] else "passthrough"
    loads = result["load_average_1min"]
    lines = [
        "# Reads through the scratch mount with kernel passthrough (issue 45)", "",
        f"`.venv/bin/python -m benchmarks.mount.passthrough{' --quick' if result['quick'] else ''}`"
        f", {time.strftime('%Y-%m-%d %H:%M')} (Linux {platform.release()}, {os.cpu_count()} "
        f"shared cores; CPython {platform.python_version()}). A file of "
        f"{result['size'] // MiB} MiB per case, {result['rounds']} rounds, random reads for "
        f"{result['runtime']} s; {result['seconds']:.0f} s in all; {result['passthrough_opens']} "
        "opens passed through by the mount.", "",
        f"Load average (1 min) during the run: median {statistics.median(loads):.2f}, "
        f"{min(loads):.2f}-{max(loads):.2f} (other engineers share the machine; \"busy\" adds one "
        "CPU-bound loop per core).", "",
        "Cold cache every run. Cells: median of the rounds (lowest-highest), **ratio to the "
        "plain directory**, and the FUSE daemon's CPU seconds per GiB read (user + system, in "
        f"clock ticks of {1 / TICKS:g} s, summed over the rounds). Sequential: MB/s, 1 MiB "
        "reads; random: IOPS, 4 KiB reads for a fixed time (so the random runs read the file "
        "more than once where the page cache holds it), fio without its POSIX_FADV_RANDOM hint "
        "(it would reach the FUSE file, not the object a passed-through read comes from).", "",
        "| load / workload | " + " | ".join(c.name for c in CASES) + " |",
        "|---|" + "---|" * len(CASES),
    ]
    for key, rows in table.items():
        lines.append(f"| {key} | " + " | ".join(_cell(rows.get(c.name)) for c in CASES) + " |")
    lines += ["", "Cases: **plain** the directory; **bindfs** bindfs over a directory; "
              "**mount-1**/**mount-4** the scratch mount (passthrough on), a 1-stripe and a "
              "4-stripe file; **nopt-1**/**nopt-4** the same with SK_MOUNT_PASSTHROUGH=0.", "",
              "Goals (issue 45): 1-stripe sequential and random >= "
              f"{GOAL_RATIO_1_STRIPE}x, 4-stripe sequential >= {GOAL_RATIO_4_STRIPE_SEQ}x, "
              f"<= {GOAL_CPU_PER_GIB} CPU-s/GiB for a passed-through file.", "", "Targets:", ""]
    lines += [f"* **{name}**: {text}" for name, text in result["targets"].items()]
    if result["errors"]:
        lines += ["", "Runs that failed:", ""] + [f"* {e}" for e in result["errors"]]
    (REPORT_DIR / f"{stem}.md").write_text("\n".join(lines) + "\n")
    harness.write_json(REPORT_DIR / f"{stem}.json", dict(result, summary=table), newline=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mount.passthrough",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="128 MiB files, 2 s of random reads (3 rounds still)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path("/var/tmp"),
                        help="a folder of the local disk (default /var/tmp)")
    args = parser.parse_args(argv)
    harness.require_root("mount", "dropping caches and mounting")
    harness.require_tools("mount", ("fio", "bindfs", "fusermount3", "dd"))
    size, runtime = (128 * MiB, 2) if args.quick else (512 * MiB, 4)
    with targets.exit_on_sigterm():
        result = run(args.quick, args.workdir, size, runtime, args.rounds)
    table = summarize(result)
    write_report(result, table)
    print(f"bench passthrough: wrote {REPORT_DIR}/passthrough{'-quick' if args.quick else ''}"
          ".md, .json")
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
