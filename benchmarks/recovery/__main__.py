"""Recovery benchmark on the local cluster's GridFTP and HTTP servers.

``.venv/bin/python -m benchmarks.recovery [--quick]``

1. Patch throughput: bytes/s of recovering the stripes a file lost on one failed OST (end to
   end: probe, substitute, ranged transfers, verification, layout switch), against a plain
   whole-file ``globus-url-copy`` of the same number of bytes from the same server.
2. Patching 1/k of a file (stripe count k, one OST failed) against patching all of it (k = 1).
3. Detection: ``check_osts`` over 8..256 OSTs with one failed OST (answers at once) and with one
   dead OST that never answers (the probe timeout), to show the total is flat in OST count.

It reports; it never fails on a speed goal. Raw figures go to benchmarks/results/recovery/
(git-ignored), the report to docs/benchmarks/recovery/report.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

from scratchkeeper.config import parse_config
from scratchkeeper.recovery.reconstruct import PATCHED, Recoverer
from scratchkeeper.runner import get_runner
from scratchkeeper.storage import LayoutRequest, open_backend
from scratchkeeper.storage.base import XATTR_PREFIX
from scratchkeeper.storage.local import LocalStripedStore

ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = ROOT / "benchmarks" / "results" / "recovery"
REPORT_DIR = ROOT / "docs" / "benchmarks" / "recovery"
CLUSTER = Path(os.environ.get("SK_LOCAL_DIR", "/var/lib/scratchkeeper-local")) / "cluster.json"
MiB = 1 << 20


def _cluster() -> dict:
    try:
        status = json.loads(CLUSTER.read_text())
    except (OSError, json.JSONDecodeError) as err:
        sys.exit(f"benchmarks.recovery: local cluster not available ({err}); "
                 "run scripts/local-cluster up")
    if status.get("state") != "up":
        sys.exit("benchmarks.recovery: local cluster not up; run scripts/local-cluster up")
    return status


class Bench:
    """A private store and state; sources in a private folder of the cluster's source dir."""

    def __init__(self, cluster: dict, workdir: Path, *, ost_count: int = 40, extra: str = ""):
        self.cluster = cluster
        self.workdir = workdir
        self.source_dir = Path(cluster["source_dir"]) / f"recovery-bench-{uuid.uuid4().hex[:8]}"
        self.source_dir.mkdir()
        os.chmod(self.source_dir, 0o755)
        (workdir / "scratch").mkdir(parents=True, exist_ok=True)
        self.config = parse_config(
            f'[storage]\nbackend = "local"\nscratch_root = "{workdir}/scratch"\n'
            f'store_root = "{workdir}/store"\nost_count = {ost_count}\n'
            f'[state]\ndatabase = "{workdir}/state.db"\n'
            f'[recovery]\nprobe_timeout = 5.0\n{extra}\n')
        self.backend = open_backend(self.config)

    def source(self, name: str, size: int) -> tuple[Path, bytes]:
        data = os.urandom(size)
        path = self.source_dir / name
        path.write_bytes(data)
        os.chmod(path, 0o644)
        return path, data

    def uri(self, path: Path, scheme: str) -> str:
        if scheme == "http":
            return self.cluster["http_source_url"] + str(path.relative_to(self.cluster["source_dir"]))
        return self.cluster["gridftp_url"] + str(path)

    def stage(self, name: str, data: bytes, uri: str, stripe_count: int, stripe_size: int) -> str:
        backend = self.backend
        if backend.exists(name):
            backend.remove(name)
        backend.create(name, LayoutRequest(stripe_count=stripe_count, stripe_size=stripe_size))
        for offset in range(0, len(data), 16 * MiB):
            backend.write(name, offset, data[offset:offset + 16 * MiB])
        backend.set_xattr(name, XATTR_PREFIX + "source", uri.encode())
        backend.set_xattr(name, XATTR_PREFIX + "sha256", hashlib.sha256(data).hexdigest().encode())
        backend.set_xattr(name, XATTR_PREFIX + "size", str(len(data)).encode())
        return backend.paths.resolve(name)

    def patch_once(self, path: str, config=None) -> tuple[float, int]:
        """Fail one OST of the file, recover it; (seconds, bytes patched)."""
        backend = self.backend
        failed = backend.layout(path).ost_list[0]
        backend.fail_ost(failed)
        try:
            outcome = Recoverer(backend, config or self.config).recover(path)
        finally:
            backend.restore_ost(failed)
        if outcome.state != PATCHED:
            raise SystemExit(f"benchmarks.recovery: {path}: {outcome.state}: {outcome.reason}")
        return outcome.seconds, outcome.patched_bytes

    def cleanup(self) -> None:
        shutil.rmtree(self.source_dir, ignore_errors=True)


def _median(values):
    return statistics.median(values)


def bench_throughput(bench: Bench, size: int, repeats: int) -> dict:
    """Patch of one OST's share of a 4-stripe file vs whole-file globus-url-copy of that share."""
    stripe_size = 1 * MiB
    source, data = bench.source("throughput.bin", size)
    rows = {}
    lost = None
    for label, scheme, extra in (
            ("ERET + CKSM per range (ftp://)", "ftp", {}),
            ("ERET, source SHA-256 check off", "ftp", {"verify_source": False}),
            ("ERET, CKSM MD5 per range", "ftp", {"range_checksum": "MD5"}),
            ("globus-url-copy -partial-offset per range", "ftp",
             {"ftp_method": "globus-url-copy"}),
            ("curl -r with --next (http://)", "http", {})):
        config = replace(bench.config, recovery=replace(bench.config.recovery, **extra))
        times = []
        for _ in range(repeats):
            path = bench.stage("throughput.bin", data, bench.uri(source, scheme), 4, stripe_size)
            os.sync()  # staging dirtied the page cache: do not bill its writeback to the patch
            seconds, patched = bench.patch_once(path, config)
            times.append(seconds)
            lost = patched
        rows[label] = {"seconds": _median(times), "bytes": lost,
                       "bytes_per_s": lost / _median(times), "all": times}
    # the baselines: one globus-url-copy of a file of exactly the lost byte count, plain and
    # with -verify-checksum (what the site's stage-in uses)
    same_bytes, _ = bench.source("baseline.bin", lost)
    target = bench.workdir / "scratch" / "baseline.copy"
    baselines = {}
    for label, options, durable in (("plain", [], False),
                                    ("verify", ["-verify-checksum"], False),
                                    ("durable", [], True)):
        times = []
        for _ in range(repeats):
            target.unlink(missing_ok=True)
            os.sync()  # start each run with no dirty pages of an earlier one
            started = time.monotonic()
            get_runner().run(["globus-url-copy", *options, bench.uri(same_bytes, "ftp"),
                              f"file://{target}"], timeout=600, mutating=False)
            if durable:  # the patch syncs what it wrote before the layout switch: so does this
                fd = os.open(target, os.O_RDONLY)
                os.fsync(fd)
                os.close(fd)
            times.append(time.monotonic() - started)
        target.unlink(missing_ok=True)
        baselines[label] = {"seconds": _median(times), "bytes": lost,
                            "bytes_per_s": lost / _median(times), "all": times}
    baseline = baselines["plain"]
    return {"file_size": size, "stripe_count": 4, "stripe_size": stripe_size, "rows": rows,
            "baseline": baseline, "baseline_verify": baselines["verify"],
            "baseline_durable": baselines["durable"]}


def bench_breakdown(bench: Bench, size: int) -> dict:
    """Where a patch's time goes: seconds summed over threads in each step (one run)."""
    from scratchkeeper.transfer import ranged
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

    timed(ranged.EretRangedReader, "_connect", "FTP connect + login (per lane)")
    timed(ranged.EretRangedReader, "_retrieve", "ERET transfers")
    timed(ranged.EretRangedReader, "_range_checksum", "CKSM per range (server)")
    timed(ranged.EretRangedReader, "whole_checksum", "source SHA-256 check (server)")
    timed(bench.backend, "write_rebuild_batch", "write + fsync + journal")
    timed(bench.backend, "check_osts", "OST probe")
    timed(bench.backend, "begin_rebuild", "begin rebuild")
    timed(bench.backend, "commit_rebuild", "commit (layout switch)")
    try:
        path = bench.stage("breakdown.bin", data, bench.uri(source, "ftp"), 4, MiB)
        os.sync()
        seconds, patched = bench.patch_once(path)
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)
    return {"seconds": seconds, "bytes": patched, "steps": spent}


def bench_fraction(bench: Bench, size: int, repeats: int) -> dict:
    """Time to patch 1/k of a file (stripe count k) against the whole file (k = 1)."""
    source, data = bench.source("fraction.bin", size)
    config = replace(bench.config, recovery=replace(bench.config.recovery, verify_source=False))
    rows = []
    for k in (1, 2, 4, 8, 16):
        times, patched = [], 0
        for _ in range(repeats):
            path = bench.stage("fraction.bin", data, bench.uri(source, "ftp"), k, 1 * MiB)
            os.sync()
            seconds, patched = bench.patch_once(path, config)
            times.append(seconds)
        rows.append({"k": k, "seconds": _median(times), "bytes": patched, "all": times})
    whole = rows[0]["seconds"]
    for row in rows:
        row["ratio"] = row["seconds"] / whole
    return {"file_size": size, "rows": rows}


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
        rows.append({"osts": count, "healthy": _median(healthy_times),
                     "one_failed": _median(failed_times), "one_dead": _median(hung_times)})
        shutil.rmtree(root, ignore_errors=True)
    return {"timeout": timeout, "rows": rows}


def report(results: dict, quick: bool) -> str:
    lines = ["# Recovery: patch throughput, partial patches, detection", "",
             f"`.venv/bin/python -m benchmarks.recovery{' --quick' if quick else ''}` "
             f"(CPython {platform.python_version()}, {platform.machine()}, "
             f"{os.cpu_count()} shared cores; GridFTP and nginx of scripts/local-cluster on "
             "loopback; the store on the local disk). Medians of "
             f"{results['repeats']} runs.", ""]
    t = results["throughput"]
    base = t["baseline"]
    lines += ["## 1. Patch throughput vs a whole-file globus-url-copy", "",
              f"File {t['file_size'] / MiB:.0f} MiB, 4 stripes of 1 MiB, one OST failed: "
              f"{base['bytes'] / MiB:.0f} MiB lost in {base['bytes'] // MiB} ranges. "
              "Patch time is end to end (probe, substitute, ranged transfers, verification, "
              "atomic layout switch); the baseline copies a file of the same byte count whole "
              "from the same server into the same file system.", "",
              "| method | seconds | MB/s | vs baseline |", "|---|---|---|---|",
              f"| baseline: `globus-url-copy` whole file | {base['seconds']:.3f} | "
              f"{base['bytes_per_s'] / 1e6:.1f} | 1.00 |",
              f"| `globus-url-copy -verify-checksum` whole file | "
              f"{t['baseline_verify']['seconds']:.3f} | "
              f"{t['baseline_verify']['bytes_per_s'] / 1e6:.1f} | "
              f"{t['baseline_verify']['bytes_per_s'] / base['bytes_per_s']:.2f} |",
              f"| `globus-url-copy` whole file, then fsync | "
              f"{t['baseline_durable']['seconds']:.3f} | "
              f"{t['baseline_durable']['bytes_per_s'] / 1e6:.1f} | "
              f"{t['baseline_durable']['bytes_per_s'] / base['bytes_per_s']:.2f} |"]
    for label, row in t["rows"].items():
        lines.append(f"| {label} | {row['seconds']:.3f} | {row['bytes_per_s'] / 1e6:.1f} | "
                     f"{row['bytes_per_s'] / base['bytes_per_s']:.2f} |")
    best = max(r["bytes_per_s"] for r in t["rows"].values()) / base["bytes_per_s"]
    default = t["rows"]["ERET + CKSM per range (ftp://)"]["bytes_per_s"] / base["bytes_per_s"]
    durable = t["baseline_durable"]["bytes_per_s"]
    default_bps = t["rows"]["ERET + CKSM per range (ftp://)"]["bytes_per_s"]
    lines += ["", f"Goal >= 0.9x the plain copy: default method {default:.2f}x "
              f"(**{'meets' if default >= 0.9 else 'misses'}**), best method {best:.2f}x. "
              f"Against the copy made durable (fsync), as the patch is before its layout "
              f"switch: default method {default_bps / durable:.2f}x.", ""]
    b = results["breakdown"]
    lines += ["Where the default method's time goes (one run, "
              f"{b['seconds']:.3f} s end to end; seconds summed over the patch lanes, which run "
              "at once, so steps overlap):", "", "| step | seconds |", "|---|---|"]
    for label, seconds in sorted(b["steps"].items(), key=lambda item: -item[1]):
        lines.append(f"| {label} | {seconds:.3f} |")
    lines += ["", "The plain baseline is one C process streaming into the page cache with no "
              "check at all. The patch, by design, (a) asks the server to hash the whole source "
              "(SHA-256, `recovery.verify_source`) so a changed source is never patched in, "
              "(b) checks every range with a server CKSM, (c) syncs the substitute objects "
              "before it journals bytes as patched, so a crash or power loss never commits "
              "unwritten bytes, and (d) pays one data connection per range. On this 2-core "
              "machine shared with other test runs, the server's hashing and our Python "
              "threads compete for the same cores, and fixed costs (probe, connections) weigh "
              "on small patches. Closing the gap would take: the source check turned off "
              f"({t['rows']['ERET, source SHA-256 check off']['bytes_per_s'] / base['bytes_per_s']:.2f}x "
              "without it here), ranges coalesced into fewer ERETs (GridFTP extended block mode "
              "with several ranges per request), and a server on another host so its hashing "
              "does not eat the client's CPU.", ""]
    f = results["fraction"]
    lines += ["## 2. Patching 1/k of a file vs all of it", "",
              f"File {f['file_size'] / MiB:.0f} MiB, stripe size 1 MiB, stripe count k, one OST "
              "failed (k = 1: the whole file is patched). ERET, source check off (it hashes the "
              "whole source on the server, a cost independent of k).", "",
              "| k | bytes patched | seconds | time / whole-file time | 1/k |",
              "|---|---|---|---|---|"]
    for row in f["rows"]:
        lines.append(f"| {row['k']} | {row['bytes']} | {row['seconds']:.3f} | "
                     f"{row['ratio']:.3f} | {1 / row['k']:.3f} |")
    d = results["detection"]
    lines += ["", "## 3. Detection time vs OST count", "",
              f"`check_osts({d['timeout']:g})` on the local store: all OSTs probed at once "
              "(write, read back, delete a probe object), one timeout for all. \"one failed\": "
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
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.recovery")
    parser.add_argument("--quick", action="store_true", help="smaller files, fewer repeats")
    args = parser.parse_args(argv)
    cluster = _cluster()
    repeats = 2 if args.quick else 3
    workdir = Path(tempfile.mkdtemp(prefix="sk-recovery-bench-"))
    bench = Bench(cluster, workdir)
    try:
        results = {"repeats": repeats, "quick": args.quick}
        print("patch throughput ...", flush=True)
        results["throughput"] = bench_throughput(bench, (64 if args.quick else 256) * MiB,
                                                 repeats)
        results["breakdown"] = bench_breakdown(bench, (64 if args.quick else 256) * MiB)
        print("1/k of a file ...", flush=True)
        results["fraction"] = bench_fraction(bench, (32 if args.quick else 128) * MiB, repeats)
        print("detection ...", flush=True)
        results["detection"] = bench_detection(workdir, 0.5 if args.quick else 1.0, repeats)
    finally:
        bench.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / f"recovery-{'quick' if args.quick else 'full'}.json").write_text(
        json.dumps(results, indent=2))
    REPORT_DIR.mkdir(parents=True, exist_ok=True)
    text = report(results, args.quick)
    (REPORT_DIR / "report.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
