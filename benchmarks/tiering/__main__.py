"""Tiering benchmark (issue 20, docs/tiering.rst; the SUORA paper §4, Figure 13).

``.venv/bin/python -m benchmarks.tiering [--quick]`` (root: FUSE, loop devices, tmpfs, the
cgroup-v1 blkio throttle and memory controller, ``drop_caches``)

A local store with two performance classes: the ``disk`` pool (OSTs 0 and 1) is two ext4 file
systems on loop devices whose reads the blkio controller throttles (``read_bps_device`` and
``read_iops_device``), the ``flash`` pool (OSTs 2 and 3) two tmpfs mounts, together about a
quarter of the data. Many files are created in the disk pool and read through
``scratchkeeper mount`` by fio (``rw=randread``, psync, O_DIRECT, several jobs, a fixed runtime) whose
file choice follows a Zipf popularity (``file_service_type=zipf:THETA``). The mount and fio run
in a cgroup-v1 memory cgroup with a small limit, so the page cache cannot hold the data, and the
caches are dropped before every run; the tmpfs data is written from outside that cgroup.

Three configurations, measured in the same run, repeated in rounds (a, b, c in each):

a. everything on disk: primaries in the disk pool, no replica in flash;
b. a static split: as many files as the flash class takes (``tiering.upper_watermark`` of its
   room) chosen blind to popularity (evenly spaced by name) get a ``prefer``-flagged flash
   mirror (``add_mirror``);
c. hotness migration: in the first round a warm-up fio run with the mount recording reads
   (``mount.read_log_interval``), then ``scratchkeeper tierd --once`` (timed; its moves from
   ``tier_moves``), then the measurement; in later rounds (where a and b took the replicas
   away) ``tierd --once`` puts them back from its saved counters.

The bytes of a few files read through the mount after the migration are checked (sha256). It
reports; it never fails on a speed goal. Results: docs/benchmarks/tiering/results.json,
report.md, throughput.png (``--quick``: the same names ending in -quick).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import harness
from benchmarks.mount_rig import (
    BLKIO,
    MEMCG,
    MemoryCgroup,
    MountRig,
    device_reads,
    drop_caches,
    loop_ost,
    say,
    sh,
    sha256,
    throttle_reads,
)

REPORT_DIR = harness.report_dir("tiering")
STATS = "user.scratchkeeper.dispatch"
MiB = 1 << 20
DISK_OSTS = (0, 1)
FLASH_OSTS = (2, 3)
CONFIGS = ("all on disk", "static split", "hotness migration")
KEYS = ("a", "b", "c")


def plan(quick: bool) -> dict:
    if quick:
        return {"files": 64, "file_size": 4 * MiB, "flash_per_ost": 32 * MiB,
                "memory_limit": 40 * MiB, "runtime": 10, "ramp": 1, "warmup": 15,
                "rounds": 2, "jobs": 4, "bs": 64 * 1024, "theta": 0.9,
                "disk_bps": 32 * MiB, "disk_iops": 200, "raw_runtime": 5, "stripe": MiB}
    return {"files": 128, "file_size": 8 * MiB, "flash_per_ost": 128 * MiB,
            "memory_limit": 80 * MiB, "runtime": 30, "ramp": 2, "warmup": 45,
            "rounds": 3, "jobs": 4, "bs": 64 * 1024, "theta": 0.9,
            "disk_bps": 32 * MiB, "disk_iops": 200, "raw_runtime": 10, "stripe": MiB}


class Rig(MountRig):
    """The store (disk OSTs on throttled loop devices, flash OSTs on tmpfs), the memory cgroup
    the mount and fio run in, and the mount."""

    name = "tiering"

    def __init__(self, work: Path, p: dict):
        super().__init__(work)
        self.p = p
        self.rules: list[str] = []
        self.backend = None
        self.names = [f"f{i:03d}.dat" for i in range(p["files"])]
        self.digests: dict[str, str] = {}

    # -- set up --------------------------------------------------------------------------------
    def build(self) -> None:
        p = self.p
        os.chmod(self.work, 0o755)
        self.scratch.mkdir()
        for index in DISK_OSTS + FLASH_OSTS:
            self.ost(index).mkdir(parents=True)
        per_disk = p["files"] * p["file_size"] // len(DISK_OSTS)
        for index in DISK_OSTS:
            # the plain ext4 defaults (lazy init, atime) this benchmark has always measured
            self.rules.append(loop_ost(self.work / f"disk{index}.img",
                                       per_disk + per_disk // 4 + 128 * MiB, self.ost(index),
                                       self.devices, self.mounts, (), ()))
        for index in FLASH_OSTS:
            sh(["mount", "-t", "tmpfs", "-o", f"size={p['flash_per_ost']},mode=0755", "tmpfs",
                str(self.ost(index))])
            self.mounts.append(self.ost(index))
        self.cgroup = MemoryCgroup.create("sk-tiering-bench", p["memory_limit"])
        self.config.write_text(f"""
[storage]
scratch_root = "{self.scratch}"
store_root = "{self.store}"
ost_count = 4
stripe_count = 2
stripe_size = {p['stripe']}
tier_order = ["flash", "disk"]
[storage.pools]
disk = "0-1"
flash = "2-3"
[storage.pool_tiers]
disk = "disk"
flash = "flash"
[state]
database = "{self.work / 'state.db'}"
[recovery]
socket = "{self.work / 'recovery.sock'}"
[mount]
threads = 8
read_log_interval = 1.0
[tiering]
hot_reads = 8
budget = 1000
half_life = 86400.0
upper_watermark = 0.9
lower_watermark = 0.8
[logging]
level = "WARNING"
""")

    def throttle(self, on: bool) -> None:
        throttle_reads(self.rules, bps=self.p["disk_bps"] if on else 0,
                       iops=self.p["disk_iops"] if on else 0)

    def throttled(self) -> bool:
        return bool(self.rules)

    def unthrottle(self) -> None:
        self.throttle(False)

    def device_reads(self) -> dict:
        """Reads and bytes the disk OSTs' loop devices served (blkio, root cgroup)."""
        rules = dict.fromkeys(self.rules, "disk")
        return {"ios": device_reads(rules)["disk"],
                "bytes": device_reads(rules, "io_service_bytes")["disk"]}

    def reset_peak(self) -> None:
        self.cgroup.reset_peak()

    def peak(self) -> dict:
        return self.cgroup.peak()

    def make_files(self) -> None:
        from scratchkeeper.config import load_config
        from scratchkeeper.storage import open_backend
        from scratchkeeper.storage.layout import LayoutRequest

        self.backend = open_backend(load_config(self.config))
        for name in self.names:
            data = os.urandom(self.p["file_size"])
            path = str(self.scratch / name)
            self.backend.create(path, LayoutRequest(pool="disk"))
            self.backend.write(path, 0, data)
            self.digests[name] = hashlib.sha256(data).hexdigest()
            if not self.backend.layout(path).osts() <= set(DISK_OSTS):
                raise RuntimeError(f"{name}: not in the disk pool: {self.backend.layout(path)}")
        os.sync()

    # -- replicas ------------------------------------------------------------------------------
    def flash_mirrors(self, name: str) -> list[int]:
        layout = self.backend.layout(str(self.scratch / name))
        return [m for m in layout.mirror_ids if layout.osts(m) <= set(FLASH_OSTS)]

    def drop_flash(self) -> int:
        dropped = 0
        for name in self.names:
            for mirror in self.flash_mirrors(name):
                self.backend.remove_mirror(str(self.scratch / name), mirror)
                dropped += 1
        return dropped

    def add_static(self, chosen: list[str]) -> None:
        from scratchkeeper.storage.layout import LayoutRequest

        for name in chosen:
            self.backend.add_mirror(str(self.scratch / name),
                                    LayoutRequest(pool="flash", prefer=True))

    def on_flash(self) -> list[str]:
        return [name for name in self.names if self.flash_mirrors(name)]

    # -- the mount -----------------------------------------------------------------------------
    def stats(self) -> dict:
        return self.xattr(STATS)

    # -- fio -----------------------------------------------------------------------------------
    def fio(self, label: str, directory: Path, names: list[str], runtime: int, *,
            zipf: bool = True, direct: bool = True) -> dict:
        p = self.p
        job = self.work / f"{label}.fio"
        out = self.work / f"{label}.json"
        job.write_text(f"""[global]
directory={directory}
filename={':'.join(names)}
rw=randread
bs={p['bs']}
ioengine=psync
direct={int(direct)}
file_service_type={f"zipf:{p['theta']}" if zipf else "random"}
random_distribution=random
norandommap=1
time_based=1
runtime={runtime}
ramp_time={p['ramp']}
numjobs={p['jobs']}
group_reporting=1
[{label}]
""")
        self.reset_peak()
        sh(["fio", "--readonly", "--output-format=json", f"--output={out}", str(job)],
           timeout=runtime + 120, preexec_fn=self.join_cgroup, stdout=subprocess.DEVNULL)
        read = json.loads(out.read_text())["jobs"][0]["read"]
        return {"bytes_per_s": read["bw_bytes"], "iops": read["iops"],
                "io_bytes": read["io_bytes"], "clat_mean_ms": read["clat_ns"]["mean"] / 1e6,
                "clat_p99_ms": read["clat_ns"].get("percentile", {}).get("99.000000", 0) / 1e6,
                "memcg": self.peak()}

    # -- tierd ---------------------------------------------------------------------------------
    def cli(self, *args: str, timeout: float = 600,
            check: bool = True) -> subprocess.CompletedProcess:
        return super().cli(*args, timeout=timeout, check=check)

    def moves_since(self, last: int) -> list[dict]:
        if not (self.work / "state.db").exists():
            return []
        db = sqlite3.connect(f"file:{self.work / 'state.db'}?mode=ro", uri=True)
        try:
            db.row_factory = sqlite3.Row
            return [dict(r) for r in db.execute("SELECT * FROM tier_moves WHERE id > ? "
                                                "ORDER BY id", (last,))]
        finally:
            db.close()


def raw_speeds(rig: Rig) -> dict:
    """Each tier alone, fio straight on files in its OST file systems (no mount), in the memory
    cgroup, caches dropped, the disk throttled; the files are removed before the store is
    opened."""
    p = rig.p
    result = {}
    disk_size = min(256 * MiB, p["files"] * p["file_size"] // 4)
    flash_size = p["flash_per_ost"] // 2
    tiers = (("disk", DISK_OSTS, disk_size), ("flash", FLASH_OSTS, flash_size))
    for tier, osts, size in tiers:
        names = []
        for index in osts:
            path = rig.ost(index) / "rawtest.dat"
            sh(["dd", "if=/dev/urandom", f"of={path}", "bs=1M", f"count={size // MiB}",
                "status=none"])
            names.append(str(path).replace(":", "\\:"))
        drop_caches()
        rig.throttle(tier == "disk")
        fio = rig.fio(f"raw-{tier}", Path("/"), [n.lstrip("/") for n in names],
                      p["raw_runtime"], zipf=False, direct=tier == "disk")
        rig.throttle(False)
        for index in osts:
            (rig.ost(index) / "rawtest.dat").unlink()
        result[tier] = fio
        say(f"raw {tier} tier alone (fio on its file systems, no mount): "
            f"{fio['bytes_per_s'] / MiB:.1f} MiB/s, {fio['iops']:.0f} IOPS")
    return result


def line(run: dict) -> str:
    return (f"{run['bytes_per_s'] / MiB:.1f} MiB/s {run['iops']:.0f} IOPS, disk devices "
            f"{run['device_reads']['ios']} reads {run['device_reads']['bytes'] / MiB:.0f} MiB, "
            f"mean latency "
            f"{run['clat_mean_ms']:.2f} ms, flash share {run['flash_share']:.0%}, memory cgroup "
            f"peak {run['memcg']['max_usage'] / MiB:.0f} MiB (anon {run['memcg']['rss'] / MiB:.0f}"
            f" MiB at the end, limit hit "
            f"{run['memcg']['failcnt']}x)")


def measure(rig: Rig, label: str) -> dict:
    rig.throttle(True)
    drop_caches()
    rig.start()
    try:
        before, device = rig.stats(), rig.device_reads()
        t0 = time.monotonic()
        fio = rig.fio(label, rig.scratch, rig.names, rig.p["runtime"])
        fio["seconds"] = time.monotonic() - t0
        after, device_after = rig.stats(), rig.device_reads()
    finally:
        rig.stop()
    fio["device_reads"] = {k: device_after[k] - device[k] for k in device}
    b = {int(o["ost"]): o for o in before["osts"]}
    per_ost = {int(o["ost"]): o["read_bytes"] - b.get(int(o["ost"]), {}).get("read_bytes", 0)
               for o in after["osts"]}
    total = sum(per_ost.values()) or 1
    fio["ost_read_bytes"] = per_ost
    fio["flash_share"] = sum(v for k, v in per_ost.items() if k in FLASH_OSTS) / total
    return fio


def run_tierd(rig: Rig) -> dict:
    last = max([m["id"] for m in rig.moves_since(0)] or [0])
    rig.throttle(True)
    started = time.monotonic()
    done = rig.cli("tierd", "--once")
    seconds = time.monotonic() - started
    moves = rig.moves_since(last)
    up = [m for m in moves if m["direction"] == "up" and m["state"] == "done"]
    return {"seconds": seconds, "moves": len(moves), "up_done": len(up),
            "failed": sum(m["state"] != "done" for m in moves),
            "bytes_moved": sum(m["size"] for m in up),
            "move_seconds": sum((m["ended"] or 0) - m["started"] for m in up),
            "stderr": done.stderr[-2000:],
            "moved": sorted(Path(m["path"]).name for m in up),
            "rows": moves}


def warm_up_reads(rig: Rig) -> dict[str, int]:
    from scratchkeeper.tiering.reads import parse_reads

    counts: dict[str, int] = {}
    log = rig.store / "reads.log"
    for line in log.read_bytes().splitlines() if log.exists() else []:
        record = parse_reads(line)
        name = Path(record.path).name
        counts[name] = counts.get(name, 0) + record.reads
    return counts


def run(work: Path, p: dict) -> dict:
    rig = Rig(work, p)
    results: dict = {"runs": [], "tierd": []}
    try:
        say(f"building the store in {work}")
        rig.build()
        results["devices"] = list(zip(rig.devices, rig.rules))
        results["raw"] = raw_speeds(rig)
        say(f"writing {p['files']} files of {p['file_size'] // MiB} MiB in the disk pool")
        rig.make_files()
        flash_room = sum(os.statvfs(rig.ost(i)).f_bavail * os.statvfs(rig.ost(i)).f_frsize
                         for i in FLASH_OSTS)
        n_static = int(0.9 * flash_room // p["file_size"])
        static = [rig.names[(i * p["files"]) // n_static] for i in range(n_static)]
        results.update(flash_room=flash_room, static_files=static)
        say(f"flash room {flash_room / MiB:.0f} MiB: static split of {n_static} files "
            f"(every {p['files'] / n_static:.1f}th by name)")
        for r in range(p["rounds"]):
            # (a) everything on disk
            dropped = rig.drop_flash()
            say(f"round {r + 1}/{p['rounds']}: (a) all on disk ({dropped} flash mirrors "
                f"dropped), fio {p['runtime']} s")
            a = measure(rig, f"a-round{r}")
            results["runs"].append({"round": r, "config": "a", **a})
            say(f"  (a) {line(a)}")
            # (b) static split
            rig.throttle(False)
            rig.add_static(static)
            say(f"round {r + 1}: (b) static split, {len(rig.on_flash())} files with a flash "
                "mirror")
            b = measure(rig, f"b-round{r}")
            results["runs"].append({"round": r, "config": "b", **b})
            say(f"  (b) {line(b)}")
            rig.drop_flash()
            # (c) hotness migration
            if r == 0:
                say(f"round 1: (c) warm-up, fio {p['warmup']} s with the mount recording reads")
                drop_caches()
                rig.start()
                try:
                    warm = rig.fio("warmup", rig.scratch, rig.names, p["warmup"])
                finally:
                    rig.stop()
                results["warmup"] = warm
                # the reads recorded so far: (a), (b) and the warm-up, all the same popularity
                results["recorded_reads"] = warm_up_reads(rig)
                say(f"  warm-up {warm['bytes_per_s'] / MiB:.1f} MiB/s; "
                    f"{sum(results['recorded_reads'].values())} reads recorded over "
                    f"{len(results['recorded_reads'])} files")
            tierd = run_tierd(rig)
            tierd["round"] = r
            results["tierd"].append(tierd)
            say(f"  tierd --once: {tierd['up_done']} up moves done ({tierd['failed']} failed), "
                f"{tierd['bytes_moved'] / MiB:.0f} MiB in {tierd['seconds']:.1f} s "
                f"(moves themselves {tierd['move_seconds']:.1f} s)")
            if r == 0:
                results["tiers"] = json.loads(rig.cli("tiers", "--json", "--limit",
                                                      str(p["files"])).stdout)
            c = measure(rig, f"c-round{r}")
            results["runs"].append({"round": r, "config": "c", **c})
            say(f"  (c) {line(c)}")
            if r == 0:
                results["migrated"] = rig.on_flash()
                checked = sorted(results["migrated"][:4] + [n for n in rig.names if n not in
                                                            results["migrated"]][:2])
                rig.throttle(False)
                drop_caches()
                rig.start()
                try:
                    results["checked"] = {n: sha256(rig.scratch / n) == rig.digests[n]
                                          for n in checked}
                finally:
                    rig.stop()
                say(f"  sha256 through the mount after migration: {results['checked']}")
        results["job"] = (work / "c-round0.fio").read_text()
    finally:
        rig.close()
    return results


def summarize(results: dict) -> dict:
    summary = {}
    for key in KEYS:
        runs = [r for r in results["runs"] if r["config"] == key]
        rates = [r["bytes_per_s"] for r in runs]
        summary[key] = {"median": statistics.median(rates), "low": min(rates),
                        "high": max(rates), "n": len(rates),
                        "iops": statistics.median(r["iops"] for r in runs),
                        "clat_mean_ms": statistics.median(r["clat_mean_ms"] for r in runs),
                        "flash_share": statistics.median(r["flash_share"] for r in runs),
                        "device_iops": statistics.median(r["device_reads"]["ios"] / r["seconds"]
                                                         for r in runs),
                        "device_bps": statistics.median(r["device_reads"]["bytes"] / r["seconds"]
                                                        for r in runs)}
    summary["c/a"] = summary["c"]["median"] / summary["a"]["median"]
    summary["c/b"] = summary["c"]["median"] / summary["b"]["median"]
    summary["b/a"] = summary["b"]["median"] / summary["a"]["median"]
    reads = results.get("recorded_reads", {})
    total = sum(reads.values()) or 1
    ranked = sorted(reads.values(), reverse=True)
    n = len(results["names"])
    weights = [k ** -results["plan"]["theta"] for k in range(1, n + 1)]
    summary["popularity"] = {
        "zipf_top_quarter_share": sum(weights[:n // 4]) / sum(weights),
        "static_expected_share": len(results["static_files"]) / n,
        "recorded_reads": sum(reads.values()), "files_read": len(reads),
        "top_quarter_share": sum(ranked[:len(results["names"]) // 4]) / total,
        "migrated_share": sum(reads.get(n, 0) for n in results.get("migrated", [])) / total,
        "static_share": sum(reads.get(n, 0) for n in results["static_files"]) / total,
        "best_possible_share": sum(ranked[:len(results.get("migrated", []))]) / total}
    return summary


def plot(results: dict, path: Path) -> None:
    plt = harness.pyplot()
    s = results["summary"]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [3, 2]})
    labels = ["(a) all on disk", "(b) static split", "(c) hotness\nmigration"]
    med = [s[k]["median"] / MiB for k in KEYS]
    err = [[(s[k]["median"] - s[k]["low"]) / MiB for k in KEYS],
           [(s[k]["high"] - s[k]["median"]) / MiB for k in KEYS]]
    bars = ax.bar(labels, med, yerr=err, capsize=5, color=["#8c8c8c", "#5b8fd1", "#d1785b"])
    for bar, value in zip(bars, med):
        ax.annotate(f"{value:.1f}", (bar.get_x() + bar.get_width() / 2, value),
                    xytext=(0, 4), textcoords="offset points", ha="center", fontsize=9)
    ax.axhline(results["raw"]["disk"]["bytes_per_s"] / MiB, color="k", ls=":", lw=1,
               label="disk tier alone (no mount)")
    ax.set_ylabel("fio randread through the mount (MiB/s)")
    ax.set_title(f"{results['plan']['files']} files x {results['plan']['file_size'] // MiB} MiB,"
                 f" Zipf {results['plan']['theta']}, {results['plan']['jobs']} jobs "
                 f"(median, range of {results['plan']['rounds']})", fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    ax2.bar(labels, [100 * s[k]["flash_share"] for k in KEYS],
            color=["#8c8c8c", "#5b8fd1", "#d1785b"])
    ax2.set_ylabel("bytes the mount read from flash (%)")
    ax2.set_ylim(0, 100)
    ax2.tick_params(axis="x", labelsize=8)
    ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    harness.save_figure(fig, path, dpi=100)


def job_text(results: dict) -> str:
    """The job file, its list of file names cut short."""
    names = results["names"]
    lines = []
    for text in results["job"].rstrip().splitlines():
        if text.startswith("filename="):
            lines.append(f"; filename= lists all {len(names)} files, colon-separated")
            text = f"filename={names[0]}:{names[1]}:...:{names[-1]}"
        lines.append(text)
    return "\n".join(lines)


def mib(bytes_: float) -> str:
    """Bytes (per second) in MiB, one decimal."""
    return f"{bytes_ / MiB:.1f}"


def report(results: dict) -> str:
    """The report (markdown), one section after another."""
    lines = (_rig_section(results) + _configurations_section(results)
             + _results_section(results) + _migration_section(results)
             + _tiers_section(results) + _reading_section(results))
    return "\n".join(lines)


def _rig_section(results: dict) -> list[str]:
    """The title, the run, the two classes, the page cache, each tier alone, the data, the
    mount, fio and tierd."""
    p = results["plan"]
    quick = " --quick" if results["quick"] else ""
    data = p["files"] * p["file_size"]
    anon = statistics.median(r["memcg"]["rss"] for r in results["runs"])
    lines = [
        "# Tiering: fio Zipf reads through the mount, hotness migration vs static split vs "
        "all on disk", "",
        f"`.venv/bin/python -m benchmarks.tiering{quick}` on {platform.node()} "
        f"({os.cpu_count()} CPUs shared, kernel {platform.release()}, {results['fio']}), "
        f"{results['date']}; {results['seconds']:.0f} s in all.", "",
        "Issue 20's last verification item; the SUORA paper §4, Figure 13 (throughput with "
        "hotness migration against a static split and against all data on the slow tier).", "",
        "## Rig", "",
        f"- **disk class** (pool `disk`, OSTs 0-1): two ext4 file systems, each on its own loop "
        f"device ({', '.join(d for d, _ in results['devices'])}) backed by a sparse file in "
        f"/var/tmp; reads throttled by the cgroup-v1 blkio controller of the root cgroup "
        f"(`blkio.throttle.read_bps_device` {p['disk_bps'] // MiB} MiB/s and "
        f"`blkio.throttle.read_iops_device` {p['disk_iops']} per device).",
        f"- **flash class** (pool `flash`, OSTs 2-3): two tmpfs mounts of "
        f"{p['flash_per_ost'] // MiB} MiB each: {results['flash_room'] / MiB:.0f} MiB of room, "
        f"{results['flash_room'] / data:.0%} of the {data // MiB} MiB of data.",
        f"- **page cache**: the mount and fio run in a cgroup-v1 memory cgroup "
        f"(`/sys/fs/cgroup/memory/sk-tiering-bench-PID`, `memory.limit_in_bytes` = "
        f"{p['memory_limit'] // MiB} MiB, no swap), so the page cache of the disk OSTs and of "
        f"the mount is bounded; `echo 3 > /proc/sys/vm/drop_caches` before every fio run; "
        f"the tmpfs data (tierd's and the static split's mirrors) is written by processes "
        f"outside that cgroup. Peak memory of the cgroup during the measured runs: "
        f"{max(r['memcg']['max_usage'] for r in results['runs']) / MiB:.0f} MiB, the limit "
        f"hit {sum(r['memcg']['failcnt'] for r in results['runs'])} times; the mount's and "
        f"fio's own memory (anon) about "
        f"{anon / MiB:.0f} MiB, so about {(p['memory_limit'] - anon) / data:.0%} "
        f"of the data fits in the page cache. The disk devices' reads in each run "
        f"(`blkio.throttle.io_serviced`) are in the results table.",
        f"- **each tier alone** (fio as below but uniform over 2 files, straight on the OST "
        f"file systems, no mount, same cgroup): disk {mib(results['raw']['disk']['bytes_per_s'])}"
        f" MiB/s ({results['raw']['disk']['iops']:.0f} IOPS), tmpfs "
        f"{mib(results['raw']['flash']['bytes_per_s'])} MiB/s "
        f"({results['raw']['flash']['iops']:.0f} IOPS).",
        f"- **data**: {p['files']} files of {p['file_size'] // MiB} MiB (`f000.dat` ..), "
        f"created in the disk pool with the store API (`create(path, LayoutRequest(pool=\"disk\"))`"
        f", 2 stripes of {p['stripe'] // MiB} MiB).",
        "- **mount**: `scratchkeeper mount` (8 threads, `mount.read_log_interval` = 1 s in every "
        "run), a fresh mount for each fio run.",
        f"- **fio** ({results['fio']}): `rw=randread`, `bs={p['bs'] // 1024}k`, `ioengine=psync`, "
        f"`direct=1` (O_DIRECT through the FUSE mount: every read reaches the mount; the page "
        f"cache left is the OST file systems' under the mount, bounded by the cgroup), "
        f"`numjobs={p['jobs']}`, `file_service_type=zipf:{p['theta']}` over the {p['files']} "
        f"files, uniform offsets within a file (`random_distribution=random`, `norandommap`), "
        f"`time_based`, `runtime={p['runtime']}`, `ramp_time={p['ramp']}`; fio's default "
        f"`randrepeat=1` gives every run the same sequence, so the popularity the warm-up "
        f"shows is the one measured (the premise of hotness tiering). "
        f"`file_service_type` is the Zipf that matters here: tierd moves whole files, and fio "
        f"applies `random_distribution` within each file. The job file is at the end.",
        "- **tierd**: `hot_reads = 8`, `budget = 1000`, `half_life = 86400`, "
        "`upper_watermark = 0.9`, `lower_watermark = 0.8`: every file read in the warm-up is "
        "hot enough, so the flash room decides, hottest first.", ""]
    return lines


def _configurations_section(results: dict) -> list[str]:
    """(a), (b) and (c), and how each round runs them."""
    p = results["plan"]
    lines = [
        "## Configurations", "",
        "Measured in the same run, in rounds of (a), (b), (c):", "",
        "- **(a) all on disk**: primaries in the disk pool, no flash replica.",
        f"- **(b) static split**: {len(results['static_files'])} files (as many as fit under the"
        f" upper watermark: 0.9 x {results['flash_room'] / MiB:.0f} MiB), every "
        f"{p['files'] / len(results['static_files']):.1f}th by name, blind to popularity, get a "
        f"`prefer`-flagged flash mirror (`add_mirror(path, LayoutRequest(pool=\"flash\", "
        f"prefer=True))`), dropped again after the run.",
        f"- **(c) hotness migration**: round 1: from (a), a {p['warmup']} s warm-up fio run "
        f"(the same job) with the mount recording reads, then `scratchkeeper tierd --once`, then"
        f" the measurement. Rounds 2 on: (a) and (b) dropped the replicas; `tierd --once` puts "
        f"them back from its saved counters (plus the reads (a) and (b) recorded) before the "
        f"measurement.", ""]
    return lines


def _results_section(results: dict) -> list[str]:
    """Throughput per configuration, the ratios, and each round's runs."""
    p, s = results["plan"], results["summary"]
    lines = [
        "## Results", "",
        "| configuration | median MiB/s | range MiB/s | median IOPS | mean latency ms | "
        "bytes the mount read from flash | disk devices: reads/s, MiB/s |",
        "| --- | --- | --- | --- | --- | --- | --- |"]
    for key, name in zip(KEYS, CONFIGS):
        x = s[key]
        lines.append(f"| ({key}) {name} | {mib(x['median'])} | {mib(x['low'])}-{mib(x['high'])}"
                     f" | {x['iops']:.0f} | {x['clat_mean_ms']:.1f} | {x['flash_share']:.0%} | "
                     f"{x['device_iops']:.0f}, {mib(x['device_bps'])} |")
    lines += ["", f"**(c) / (a) = {s['c/a']:.2f}, (c) / (b) = {s['c/b']:.2f}**, (b) / (a) = "
              f"{s['b/a']:.2f} (medians of {p['rounds']} rounds).", "",
              "Per run (MiB/s, in the order run):", "",
              "| round | (a) | (b) | (c) |", "| --- | --- | --- | --- |"]
    for r in range(p["rounds"]):
        row = {x["config"]: x for x in results["runs"] if x["round"] == r}
        lines.append(f"| {r + 1} | " + " | ".join(mib(row[k]["bytes_per_s"]) for k in KEYS)
                     + " |")
    return lines


def _migration_section(results: dict) -> list[str]:
    """The reads recorded, the popularity they show, and what tierd moved."""
    p = results["plan"]
    t0 = results["tierd"][0]
    pop = results["summary"]["popularity"]
    lines = ["", "## The migration", "",
             f"Warm-up: {mib(results['warmup']['bytes_per_s'])} MiB/s (all on disk). Reads the "
             f"mount recorded before the first tierd cycle ((a), (b) and the warm-up): "
             f"{pop['recorded_reads']} over {pop['files_read']} files; the hottest quarter of "
             f"the files took {pop['top_quarter_share']:.0%} of them (a Zipf({p['theta']}) over "
             f"{p['files']} files: {pop['zipf_top_quarter_share']:.0%}). The hot files come in "
             f"runs of consecutive names, one run per job (hottest: "
             f"{', '.join(results['hottest'][:8])}): fio does not scatter "
             f"`file_service_type=zipf` ranks over the file list, and each job starts its ranks "
             f"at its own offset. theta {p['theta']}, not above 1: in a trial run of this "
             f"benchmark at 1.2 (64 files), 4 files (one per job) took 84 % of the reads, "
             f"where a Zipf(1.2) over 64 files gives the "
             f"hottest one 29 %.", "",
             f"First `tierd --once` (after the warm-up): {t0['up_done']} up moves done, "
             f"{t0['failed']} failed, {t0['bytes_moved'] / MiB:.0f} MiB copied to flash in "
             f"{t0['seconds']:.1f} s for the whole command ({t0['move_seconds']:.1f} s in the "
             f"moves themselves, `tier_moves` started..ended: "
             f"{t0['bytes_moved'] / MiB / max(t0['move_seconds'], 1e-9):.1f} MiB/s, reading the "
             f"throttled disk OSTs). The migrated files took {pop['migrated_share']:.0%} of the "
             f"recorded reads (the {len(results.get('migrated', []))} most read files: "
             f"{pop['best_possible_share']:.0%}); the static split's files "
             f"{pop['static_share']:.0%} (a blind choice of "
             f"{len(results['static_files'])} of {p['files']} files gets "
             f"{pop['static_expected_share']:.0%} on average; this one, evenly spaced names, "
             f"missed more of the runs of hot names).", "",
             "Later rounds' `tierd --once` (replicas put back after (a) and (b) dropped them): "
             + ", ".join(f"{t['up_done']} moves, {t['bytes_moved'] / MiB:.0f} MiB in "
                         f"{t['seconds']:.1f} s" for t in results["tierd"][1:]) + ".", ""]
    return lines


def _tiers_section(results: dict) -> list[str]:
    """``scratchkeeper tiers --json`` after the first cycle, and the bytes checked."""
    tiers = results.get("tiers", {})
    served: dict[str, int] = {}
    for f in tiers.get("files", []):
        served[str(f["served_from"])] = served.get(str(f["served_from"]), 0) + 1
    lines = [f"`scratchkeeper tiers --json` after the first cycle: classes "
             f"{tiers.get('classes')}, thresholds {tiers.get('thresholds')}, "
             f"{tiers.get('known_files')} known files, served from: {served}. Hottest five:", "",
             "| file | hotness | reads | served from |", "| --- | --- | --- | --- |"]
    for f in tiers.get("files", [])[:5]:
        lines.append(f"| {Path(f['path']).name} | {f['hotness']:.0f} | {f['reads']} | "
                     f"{f['served_from']} |")
    lines += ["", f"Bytes read through the mount after the migration equal the written ones "
              f"(sha256; migrated and not): {results['checked']}.", ""]
    return lines


def _reading_section(results: dict) -> list[str]:
    """How to read the figures, and the fio job."""
    return ["## How to read it", "",
            "With psync jobs, a read from tmpfs takes microseconds and a read from the "
            "throttled disk milliseconds, so the throughput is set by the share of reads that "
            "still go to disk: the 'bytes read from flash' column (the mount's own per-OST "
            "counters, `user.scratchkeeper.dispatch`) is what each configuration buys with "
            "the same flash room. The static split gets what its files happen to be read; "
            "migration gets the recorded hottest files'. One 2-core VM, the disk a throttled "
            "loop device over a host-cached image: the ratios, not the absolute figures, are "
            "the result. Raw runs: `results.json`; plot: `throughput" +
            harness.suffix(results["quick"]) + ".png`.", "",
            "fio job (the hotness-migration run of round 1):", "", "```ini",
            job_text(results), "```", ""]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tiering")
    parser.add_argument("--quick", action="store_true",
                        help="64 files of 4 MiB, 10 s runs, 2 rounds")
    args = parser.parse_args(argv)
    harness.require_root("tiering", "FUSE, loop devices, tmpfs, cgroups")
    harness.require_paths("tiering", [BLKIO / "blkio.throttle.read_bps_device",
                                      MEMCG / "cgroup.procs"])
    harness.require_tools("tiering", ["fio"])
    p = plan(args.quick)
    started = time.monotonic()
    with harness.work_folder("tiering", "sk-tiering-bench-", "/var/tmp", mounts=lambda work: [
            work / "scratch"] + [work / "store" / f"ost{i:04d}" for i in DISK_OSTS + FLASH_OSTS]
            ) as work:
        results = run(work, p)
    results.update({"quick": args.quick, "plan": p, "seconds": time.monotonic() - started,
                    "names": [f"f{i:03d}.dat" for i in range(p["files"])],
                    "fio": subprocess.run(["fio", "--version"], capture_output=True,
                                          text=True).stdout.strip(),
                    "date": harness.utc_now()})
    reads = results.get("recorded_reads", {})
    results["hottest"] = sorted(reads, key=lambda n: (-reads[n], n))
    results["summary"] = summarize(results)
    suffix = harness.suffix(args.quick)
    harness.write_json(REPORT_DIR / f"results{suffix}.json", results, indent=2)
    plot(results, REPORT_DIR / f"throughput{suffix}.png")
    text = report(results)
    (REPORT_DIR / f"report{suffix}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
