"""Recovery benchmark on the local cluster's GridFTP and HTTP servers.

``.venv/bin/python -m benchmarks.recovery [--quick]``

1. Patch throughput: bytes/s of recovering the stripes a file lost on one failed OST (end to
   end: probe, substitute, ranged transfers, verification, sync, layout switch; and the patch
   alone, without the OST probe), against a plain whole-file ``globus-url-copy`` of the same
   number of bytes from the same server, and against that copy made durable (fsync).
2. An OST failure under many files, recovered as recoveryd does (its check, its file workers,
   from the check's start to the last request closed), against ``globus-url-copy -f`` of the
   same lost bytes, plain and followed by an fsync of each copy (durable), in the same repeats,
   with the batch's timeline (:mod:`benchmarks.recovery.batch`).
3. Patching 1/k of a 1 GiB file (stripe count k = 2..16, one OST failed) against a durable
   whole-file copy, the fixed cost (a line fitted through bytes and seconds) and a plot
   (``docs/benchmarks/recovery/fraction.png``).
4. Detection: ``check_osts`` over 8..256 OSTs with one failed OST (answers at once) and with one
   dead OST that never answers (the probe timeout), to show the total is flat in OST count.

It reports; it never fails on a speed goal. Raw figures go to benchmarks/results/recovery/
(git-ignored), the report to docs/benchmarks/recovery/report.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

from benchmarks import harness
from benchmarks.recovery.batch import batch_report, bench_batch
from benchmarks.recovery.rig import Bench, MiB, median, spread, summary
from scratchkeeper import digests
from scratchkeeper.recovery.reconstruct import Recoverer
from scratchkeeper.runner import get_runner
from scratchkeeper.storage import Extent
from scratchkeeper.storage.local import LocalStripedStore
from scratchkeeper.transfer.buffers import BufferPool
from scratchkeeper.transfer.ranged import open_ranged

RESULTS_DIR = harness.results_dir("recovery")
REPORT_DIR = harness.report_dir("recovery")


DEFAULT = "ftp://, one MODE E transfer, block digests (default)"
METHODS = (
    # label, scheme, [recovery] overrides, block digests recorded at stage-in
    (DEFAULT, "ftp", {}, True),
    ("ftp://, one MODE E transfer, CKSM per range + source SHA-256 (no digests)", "ftp", {},
     False),
    ("ftp://, ERET + CKSM per range + source SHA-256 (no digests)", "ftp",
     {"ftp_method": "eret-per-range"}, False),
    ("ftp://, globus-url-copy -partial-offset per range (no digests)", "ftp",
     {"ftp_method": "globus-url-copy"}, False),
    ("http://, curl -r with --next, block digests", "http", {}, True),
)


BASELINES = (("plain", [], False), ("verify", ["-verify-checksum"], False),
             ("durable", [], True))


def _copy_once(bench: Bench, same_bytes: Path, target: Path, options: list[str],
               durable: bool) -> float:
    """One whole-file globus-url-copy into the scratch file system (then fsync if durable)."""
    target.unlink(missing_ok=True)
    started = time.monotonic()
    get_runner().run(["globus-url-copy", *options, bench.uri(same_bytes, "ftp"),
                      f"file://{target}"], timeout=600, mutating=False)
    if durable:  # the patch syncs what it wrote before the layout switch: so does this
        harness.fsync_file(target)
    return time.monotonic() - started


FETCH_ONLY = "the default method's transfer and CRC-32C checks alone, nothing written"


def _fetch_once(bench: Bench, source: Path, data: bytes, lost: int) -> float:
    """The default patch's network half: its ranges in one MODE E transfer on a new connection,
    into pooled receive buffers, every block checked against the stage-in digests; nothing is
    written. Patch minus this is what writing the bytes durably (and the rebuild's begin and
    commit) add on this machine."""
    config = bench.config
    extents = [Extent(offset, MiB) for offset in range(0, len(data), 4 * MiB)]
    assert sum(e.length for e in extents) == lost
    blocks = digests.digest_bytes(data, config.recovery.digest_block)
    pool = BufferPool(keep_bytes=64 * MiB)
    started = time.monotonic()
    reader = open_ranged(bench.uri(source, "ftp"), config.transfer,
                         ftp_method=config.recovery.ftp_method,
                         spool_dir=str(bench.workdir / "scratch"))
    try:
        reader.connect()
        for piece in reader.fetch(extents, server_checksums=False, buffers=pool):
            bad, _ = blocks.check(piece.extent.offset, piece.data)
            if bad:
                raise SystemExit(f"benchmarks.recovery: {source}: block {bad[0]} arrived corrupt")
            pool.give(piece.data)
    finally:
        reader.close()
    elapsed = time.monotonic() - started
    pool.release()
    return elapsed


def bench_throughput(bench: Bench, sizes: list[int], repeats: int) -> dict:
    """Patch of one OST's share of a 4-stripe file vs whole-file globus-url-copy of that share.

    Every method at the first size; the default method again at the larger ones. Each repeat
    runs every method and every copy once, each right after the file was staged into the
    store and synced (on this virtual disk, writing new blocks right after a large write is
    slower, and the copies must not be spared what the patch pays): slow phases of the machine
    then fall on patches and copies alike instead of on one block of runs.
    """
    runs = []
    for index, size in enumerate(sizes):
        methods = METHODS if index == 0 else METHODS[:1]
        source, data = bench.source(f"throughput-{size}.bin", size)
        lost = size // 4  # one OST of four, stripes of 1 MiB, size a multiple of 4 MiB
        same_bytes, _ = bench.source(f"baseline-{size}.bin", lost)
        target = bench.workdir / "scratch" / "baseline.copy"
        ends = {label: [] for label, *_ in methods}
        patches = {label: [] for label, *_ in methods}
        verified = {}
        copies = {label: [] for label, *_ in BASELINES}
        fetches = []
        for repeat in range(repeats):
            print(f"  {size // MiB} MiB file, repeat {repeat + 1} of {repeats}", flush=True)
            for label, scheme, extra, with_digests in methods:
                config = replace(bench.config, recovery=replace(bench.config.recovery, **extra))
                path = bench.stage("throughput.bin", data, bench.uri(source, scheme), 4, MiB,
                                   with_digests)
                os.sync()  # staging dirtied the page cache: do not bill its writeback to the patch
                outcome = bench.patch_once(path, config)
                if outcome.patched_bytes != lost:
                    raise SystemExit(f"benchmarks.recovery: patched {outcome.patched_bytes} "
                                     f"bytes, {lost} expected")
                ends[label].append(outcome.seconds)
                patches[label].append(outcome.patch_seconds)
                verified[label] = outcome.verified
            for label, options, durable in BASELINES:
                bench.stage("throughput.bin", data, bench.uri(source, "ftp"), 4, MiB)
                os.sync()
                copies[label].append(_copy_once(bench, same_bytes, target, options, durable))
            fetches.append(_fetch_once(bench, source, data, lost))
        target.unlink(missing_ok=True)
        rows = {}
        for label, *_ in methods:
            row = summary(ends[label], lost)
            row.update({"patch_seconds": median(patches[label]),
                        "patch_min": min(patches[label]), "patch_max": max(patches[label]),
                        "patch_bytes_per_s": lost / median(patches[label]),
                        "verified": verified[label], "all_patch": patches[label]})
            rows[label] = row
        os.unlink(source)
        os.unlink(same_bytes)
        del data
        runs.append({"file_size": size, "stripe_count": 4, "stripe_size": MiB, "rows": rows,
                     "fetch_only": summary(fetches, lost),
                     **{f"baseline_{label}": summary(copies[label], lost)
                        for label, *_ in BASELINES}})
    return {"runs": runs}


def bench_breakdown(bench: Bench, size: int) -> dict:
    """Where the default method's time goes: wall seconds of each step in one run."""
    from scratchkeeper.recovery import patching
    source, data = bench.source("breakdown.bin", size)
    spent: dict[str, float] = {}
    lock = threading.Lock()
    originals = []

    def timed(owner, name, label):
        original = getattr(owner, name)
        originals.append((owner, name, original))

        def wrapper(*args, **kwargs):
            started = time.monotonic()
            try:
                return original(*args, **kwargs)
            finally:
                with lock:
                    spent[label] = spent.get(label, 0.0) + time.monotonic() - started
        setattr(owner, name, wrapper)

    timed(bench.backend, "check_osts", "OST probe (detection)")
    timed(bench.backend, "begin_rebuilds", "begin rebuild (substitute objects)")
    timed(Recoverer, "_patch_from", "fetch + check + write, until the last write (wall)")
    timed(bench.backend, "write_rebuild_batch", "of which: writes (writer thread)")
    timed(bench.backend, "record_patched", "of which: journal updates (writer thread)")
    timed(patching._BlockChecker, "check", "of which: CRC-32C checks (lane threads)")
    timed(Recoverer, "_verify_blocks", "read back blocks covered in part")
    timed(bench.backend, "commit_rebuilds", "sync substitute objects + layout switch")
    try:
        path = bench.stage("breakdown.bin", data, bench.uri(source, "ftp"), 4, MiB)
        os.sync()
        outcome = bench.patch_once(path)
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)
    os.unlink(source)
    return {"seconds": outcome.seconds, "bytes": outcome.patched_bytes, "steps": spent}


def bench_fraction(bench: Bench, size: int, ks: list[int], repeats: int) -> dict:
    """Patching 1/k of a file (stripe count k, one OST failed) against a durable whole-file copy.

    Each repeat copies the whole file once (``globus-url-copy``, then fsync) and patches it once
    for every k, each right after the file was staged and synced. The fixed cost is the
    intercept of a least-squares line through (bytes patched, end-to-end seconds).
    """
    source, data = bench.source("fraction.bin", size)
    target = bench.workdir / "scratch" / "fraction-copy.bin"
    copies: list[float] = []
    times: dict[int, list[float]] = {k: [] for k in ks}
    patches: dict[int, list[float]] = {k: [] for k in ks}
    patched: dict[int, int] = {}
    for repeat in range(repeats):
        print(f"  1/k of {size / MiB:.0f} MiB, repeat {repeat + 1} of {repeats}", flush=True)
        os.sync()
        copies.append(_copy_once(bench, source, target, [], True))
        target.unlink()
        for k in ks:
            path = bench.stage("fraction.bin", data, bench.uri(source, "ftp"), k, 1 * MiB)
            os.sync()
            outcome = bench.patch_once(path)
            times[k].append(outcome.seconds)
            patches[k].append(outcome.patch_seconds)
            patched[k] = outcome.patched_bytes
    os.unlink(source)
    copy = median(copies)
    rows = [{"k": k, "bytes": patched[k], "seconds": median(times[k]), "min": min(times[k]),
             "max": max(times[k]), "patch_seconds": median(patches[k]), "all": times[k],
             "ratio": median(times[k]) / copy} for k in ks]
    slope, fixed = statistics.linear_regression([row["bytes"] for row in rows],
                                                [row["seconds"] for row in rows])
    return {"file_size": size, "copy": summary(copies, size), "rows": rows,
            "fixed_seconds": fixed, "seconds_per_byte": slope}


def plot_fraction(fraction: dict, path: Path) -> None:
    """Patch time / durable whole-file copy against k, beside 1/k and the 0.1 goal."""
    plt = harness.pyplot()
    ks = [row["k"] for row in fraction["rows"]]
    copy = fraction["copy"]["seconds"]
    figure, axes = plt.subplots(figsize=(6.4, 4.0))
    axes.plot(ks, [row["ratio"] for row in fraction["rows"]], "o-",
              label="patch end to end / durable copy (median)")
    axes.fill_between(ks, [row["min"] / copy for row in fraction["rows"]],
                      [row["max"] / copy for row in fraction["rows"]], alpha=0.2,
                      label="min-max")
    axes.plot(ks, [1 / k for k in ks], "--", label="1/k (ideal)")
    axes.plot(ks, [(fraction["fixed_seconds"] + fraction["seconds_per_byte"] * row["bytes"])
                   / copy for row in fraction["rows"]], ":",
              label=f"fit: {fraction['fixed_seconds'] * 1000:.0f} ms fixed + bytes at "
                    f"{1 / fraction['seconds_per_byte'] / 1e6:.0f} MB/s")
    axes.axhline(0.1, color="grey", linewidth=0.8)
    axes.annotate("goal at k = 16: 0.1", (ks[-1], 0.1), textcoords="offset points",
                  xytext=(-90, 6), fontsize=8)
    axes.set_xlabel("stripe count k (1/k of the file lost)")
    axes.set_ylabel("time / durable whole-file copy")
    axes.set_title(f"Patching 1/k of a {fraction['file_size'] / MiB:.0f} MiB file")
    axes.set_ylim(0, max(0.6, max(row["max"] / copy for row in fraction["rows"]) * 1.05))
    axes.legend(fontsize=8)
    figure.tight_layout()
    harness.save_figure(figure, path)


class HungProbeStore(LocalStripedStore):
    """The local store with one OST whose server never answers (a dead OSS), for detection."""

    hung: set[int] = set()

    def _probe_ost(self, ost, timeout):
        if ost.ost_index in self.hung:
            threading.Event().wait(timeout * 4)  # answers long after the deadline
        return super()._probe_ost(ost, timeout)


def bench_detection(workdir: Path, timeout: float, repeats: int) -> dict:
    rows = []
    for count in (8, 32, 128, 256):
        root = workdir / f"detect-{count}"
        store = HungProbeStore(str(root / "scratch"), str(root / "store"), ost_count=count)
        store.list_osts()
        store.fail_ost(count // 2)
        failed_times, hung_times, healthy_times = [], [], []
        for _ in range(repeats):
            store.hung = set()
            started = time.monotonic()
            found = store.check_osts(timeout)
            failed_times.append(time.monotonic() - started)
            assert [o.ost_index for o in found if not o.healthy] == [count // 2]
            store.hung = {count // 3}
            started = time.monotonic()
            found = store.check_osts(timeout)
            hung_times.append(time.monotonic() - started)
            assert {o.ost_index for o in found if not o.healthy} == {count // 2, count // 3}
        store.restore_ost(count // 2)
        store.hung = set()
        for _ in range(repeats):
            started = time.monotonic()
            store.check_osts(timeout)
            healthy_times.append(time.monotonic() - started)
        rows.append({"osts": count, "healthy": median(healthy_times),
                     "one_failed": median(failed_times), "one_dead": median(hung_times)})
        shutil.rmtree(root, ignore_errors=True)
    return {"timeout": timeout, "rows": rows}


def _durable_bound(results: dict) -> str:
    """What the durable copies of this run say about the 0.9x goal."""
    ratios = [run["baseline_plain"]["seconds"] / run["baseline_durable"]["seconds"]
              for run in results["throughput"]["runs"]]
    shown = " and ".join(f"{r:.2f}x" for r in ratios)
    if max(ratios) < 0.9:
        return (f"here the durable copy itself reaches only {shown} the plain copy, below "
                "the 0.9x goal set against the plain one.")
    return f"here the durable copy reaches {shown} the plain copy."


def report(results: dict, quick: bool) -> str:
    """The report (markdown): the run, then one section per measurement."""
    lines = ["# Recovery: patch throughput, partial patches, detection", "",
             f"`.venv/bin/python -m benchmarks.recovery{' --quick' if quick else ''}` "
             f"(CPython {platform.python_version()}, {platform.machine()}, "
             f"{os.cpu_count()} shared cores; GridFTP and nginx of scripts/local-cluster on "
             "loopback; the store on the local disk). Medians of "
             f"{results['repeats']} runs.", ""]
    lines += (_throughput_report(results["throughput"]) + _breakdown_report(results)
              + batch_report(results["batch"]) + _fraction_report(results["fraction"])
              + _detection_report(results["detection"]))
    return "\n".join(lines)


def _throughput_report(throughput: dict) -> list[str]:
    """Section 1: the patch of one OST's share against whole-file copies, per file size."""
    lines = ["## 1. Patch throughput vs a whole-file globus-url-copy", "",
             "A file of 4 stripes of 1 MiB, one OST failed: a quarter of the file lost, in "
             "1 MiB ranges. *End to end* is what `recover` takes: the OST probe (detection), "
             "substitute, ranged transfers, verification, sync of the substitute objects and "
             "the atomic layout switch. *Patch* leaves out the probe (detection has its own "
             "section below). The baselines copy a file of the same byte count whole from the "
             "same server into the same file system: plain (into the page cache, nothing "
             "checked), with `-verify-checksum`, and followed by an fsync, as the patch is "
             "before its layout switch. Each repeat runs every method and every copy once, "
             "each right after the file was staged into the store and synced, so that slow "
             "phases of this virtual machine fall on patches and copies alike. Times are "
             "medians, with the fastest and slowest run.", ""]
    for run in throughput["runs"]:
        base = run["baseline_plain"]
        durable = run["baseline_durable"]
        lost = base["bytes"]
        lines += [f"### File {run['file_size'] / MiB:.0f} MiB: {lost / MiB:.0f} MiB lost in "
                  f"{lost // MiB} ranges", "",
                  "| method | verified by | end to end s (min-max) | MB/s | vs plain "
                  "| vs durable | patch s (min-max) | patch MB/s | patch vs plain |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for label, key in (("baseline: `globus-url-copy` whole file (plain)", "plain"),
                           ("`globus-url-copy -verify-checksum` whole file", "verify"),
                           ("`globus-url-copy` whole file, then fsync (durable)", "durable")):
            row = run[f"baseline_{key}"]
            lines.append(f"| {label} | {'server MD5' if key == 'verify' else '-'} | "
                         f"{spread(row['seconds'], row['min'], row['max'])} | "
                         f"{row['bytes_per_s'] / 1e6:.0f} | "
                         f"{row['bytes_per_s'] / base['bytes_per_s']:.2f} | "
                         f"{row['bytes_per_s'] / durable['bytes_per_s']:.2f} | | | |")
        for label, row in run["rows"].items():
            lines.append(f"| {label} | {row['verified']} | "
                         f"{spread(row['seconds'], row['min'], row['max'])} | "
                         f"{row['bytes_per_s'] / 1e6:.0f} | "
                         f"{row['bytes_per_s'] / base['bytes_per_s']:.2f} | "
                         f"{row['bytes_per_s'] / durable['bytes_per_s']:.2f} | "
                         f"{spread(row['patch_seconds'], row['patch_min'], row['patch_max'])} | "
                         f"{row['patch_bytes_per_s'] / 1e6:.0f} | "
                         f"{row['patch_bytes_per_s'] / base['bytes_per_s']:.2f} |")
        fetch = run["fetch_only"]
        lines.append(f"| {FETCH_ONLY} | blocks | | | | | "
                     f"{spread(fetch['seconds'], fetch['min'], fetch['max'])} | "
                     f"{fetch['bytes_per_s'] / 1e6:.0f} | "
                     f"{fetch['bytes_per_s'] / base['bytes_per_s']:.2f} |")
        row = run["rows"][DEFAULT]
        ratio = row["bytes_per_s"] / base["bytes_per_s"]
        patch_ratio = row["patch_bytes_per_s"] / base["bytes_per_s"]
        best = base["min"] / row["patch_min"]
        lines += ["", f"Goal >= 0.9x the plain copy, default method, medians: {ratio:.2f}x end "
                  f"to end, {patch_ratio:.2f}x without the probe "
                  f"(**{'meets' if patch_ratio >= 0.9 else 'misses'}**); "
                  f"{row['bytes_per_s'] / durable['bytes_per_s']:.2f}x the durable copy end "
                  f"to end; fastest patch against fastest plain copy: {best:.2f}x.", ""]
    return lines


def _breakdown_report(results: dict) -> list[str]:
    """Where the default method's time goes, and why the durable copy is its peer."""
    b = results["breakdown"]
    lines = ["Where the default method's time goes (one run of the first size, "
             f"{b['seconds']:.3f} s end to end; wall seconds per step, the \"of which\" rows "
             "run in other threads during the step above them):", "",
             "| step | seconds |", "|---|---|"]
    for label, seconds in b["steps"].items():
        lines.append(f"| {label} | {seconds:.3f} |")
    lines += ["", "The plain baseline is one C process streaming into the page cache: nothing "
              "checked, nothing synced. On this virtual machine it runs in one of two modes "
              "(see its min-max): new page-cache pages sometimes cost a host fault each (the "
              "balloon's free page reporting hands freed memory back to the host), and then the "
              "same copy takes several times as long. The patch checks every block against the "
              "CRC-32C recorded at stage-in and its bytes are on disk before the layout switch "
              "(a committed layout never points at bytes a power loss can take), so the durable "
              f"copy is its natural peer; {_durable_bound(results)} It writes with O_DIRECT from "
              "page-aligned receive buffers, which keeps it out of the page cache's slow mode "
              "(a narrow spread), and receives all its ranges in one MODE E stream over a "
              "connection opened while the rebuild begins. The last row of each table is that "
              "network half alone (the same transfer on a new connection, every block checked, "
              "nothing written): what the patch adds to it is writing its bytes durably (the "
              "direct writes, with the receiving thread and the GridFTP server on the same two "
              "cores) and the fixed costs above (begin, commit: a few fsyncs each).", ""]
    return lines


def _fraction_report(f: dict) -> list[str]:
    """Section 3: patching 1/k of a file against a durable whole-file copy."""
    copy = f["copy"]
    k16 = next((row for row in f["rows"] if row["k"] == 16), None)
    lines = ["## 3. Patching 1/k of a file vs a durable whole-file copy", "",
             f"File {f['file_size'] / MiB:.0f} MiB, stripe size 1 MiB, stripe count k, one OST "
             "failed: 1/k of the file lost. Default method (one MODE E transfer, block "
             "digests), end to end (the file's OST probe included), against the whole file "
             "copied from the same server with `globus-url-copy` and then fsynced, "
             f"{spread(copy['seconds'], copy['min'], copy['max'])} s "
             f"({copy['bytes_per_s'] / 1e6:.0f} MB/s), in the same repeats "
             f"({len(copy['all'])}). Plot: `fraction.png`.", "",
             "| k | bytes patched | end to end s (min-max) | / durable copy | 1/k | patch s |",
             "|---|---|---|---|---|---|"]
    for row in f["rows"]:
        lines.append(f"| {row['k']} | {row['bytes']} | "
                     f"{spread(row['seconds'], row['min'], row['max'])} | "
                     f"{row['ratio']:.3f} | {1 / row['k']:.3f} | {row['patch_seconds']:.3f} |")
    lines += ["", f"Fixed cost (intercept of the least-squares line through bytes patched and "
              f"end-to-end seconds): {f['fixed_seconds'] * 1000:.0f} ms; the bytes then go at "
              f"{1 / f['seconds_per_byte'] / 1e6:.0f} MB/s."]
    if k16 is not None:
        lines += ["", f"Goal <= 0.1 of the durable copy at k = 16 (ideal 0.0625): "
                  f"{k16['ratio']:.3f} (**{'meets' if k16['ratio'] <= 0.1 else 'misses'}**)."]
    lines.append("")
    return lines


def _detection_report(d: dict) -> list[str]:
    """Section 4: detection time against the OST count."""
    lines = ["", "## 4. Detection time vs OST count", "",
             f"`check_osts({d['timeout']:g})` on the local store: every OST probed (write, "
             "read back, delete a probe object) in 4 lanes, those not started after 50 ms in a "
             "thread each, one timeout for all. \"one failed\": "
             "an OST failed with `fail-ost` (its probe fails at once); \"one dead\": in addition "
             "one OST whose probe never answers, as a dead OSS.", "",
             "| OSTs | all healthy s | one failed s | one dead s | dead - timeout s |",
             "|---|---|---|---|---|"]
    for row in d["rows"]:
        lines.append(f"| {row['osts']} | {row['healthy']:.3f} | {row['one_failed']:.3f} | "
                     f"{row['one_dead']:.3f} | {row['one_dead'] - d['timeout']:.3f} |")
    spread = max(r["one_dead"] for r in d["rows"]) - min(r["one_dead"] for r in d["rows"])
    worst = max(r["one_dead"] for r in d["rows"]) - d["timeout"]
    lines += ["", f"Goal: one probe timeout + a small constant, flat in OST count: the dead-OST "
              f"check takes the timeout + at most {worst:.3f} s, spread {spread:.3f} s over "
              "8..256 OSTs.", ""]
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.recovery")
    parser.add_argument("--quick", action="store_true", help="smaller files, fewer repeats")
    parser.add_argument("--batch-only", action="store_true",
                        help="only the OST failure under many files; its figures are printed, "
                             "the report is not written")
    args = parser.parse_args(argv)
    cluster = harness.local_cluster("recovery")
    repeats = 3 if args.quick else 7
    workdir = Path(tempfile.mkdtemp(prefix="sk-recovery-bench-"))
    if args.batch_only:
        alone = Bench(cluster, workdir / "batch")
        try:
            batch = bench_batch(alone, 4 if args.quick else 8, (32 if args.quick else 64) * MiB,
                                repeats)
        finally:
            alone.cleanup()
            shutil.rmtree(workdir, ignore_errors=True)
        print("\n".join(batch_report(batch)))
        return 0
    bench = Bench(cluster, workdir)
    try:
        results = {"repeats": repeats, "quick": args.quick}
        print("patch throughput ...", flush=True)
        results["throughput"] = bench_throughput(
            bench, [64 * MiB] if args.quick else [256 * MiB, 1024 * MiB], repeats)
        results["breakdown"] = bench_breakdown(bench, (64 if args.quick else 256) * MiB)
        print("an OST failure under many files ...", flush=True)
        # a store of its own: recoveryd's check recovers every file on the failed OST
        alone = Bench(cluster, workdir / "batch")
        try:
            results["batch"] = bench_batch(alone, 4 if args.quick else 8,
                                           (32 if args.quick else 64) * MiB, repeats)
        finally:
            alone.cleanup()
        print("1/k of a file ...", flush=True)
        results["fraction"] = bench_fraction(
            bench, (256 if args.quick else 1024) * MiB,
            [2, 4, 8, 16] if args.quick else list(range(2, 17)), 3)
        print("detection ...", flush=True)
        results["detection"] = bench_detection(workdir, 0.5 if args.quick else 1.0, repeats)
    finally:
        bench.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    harness.write_json(RESULTS_DIR / f"recovery-{'quick' if args.quick else 'full'}.json",
                       results, indent=2)
    REPORT_DIR.mkdir(parents=True, exist_ok=True)
    text = report(results, args.quick)
    (REPORT_DIR / "report.md").write_text(text)
    plot_fraction(results["fraction"], REPORT_DIR / "fraction.png")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
