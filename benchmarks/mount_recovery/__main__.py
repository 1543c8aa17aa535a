"""Transparent recovery through the scratch mount: the stall a reader sees when an OST fails in
the middle of its read (issue 15).

``.venv/bin/python -m benchmarks.mount_recovery [--quick]`` (root; the local cluster up)

A private site (store with 16 OSTs, state, recoveryd socket) under a temporary folder; the real
``scratchkeeper mount`` on its scratch root and the real ``scratchkeeper recoveryd`` on its
socket, both as subprocesses; the source of the file on the cluster's GridFTP server. For each
stripe count k (4 and 8) and each repeat:

1. the file (1 GiB; 256 MiB with ``--quick``) is staged as ``stage commit`` leaves it (the
   GridFTP URI, SHA-256, size, block digests), on k OSTs with 1 MiB stripes;
2. baseline: caches dropped (``sync; echo 3 > /proc/sys/vm/drop_caches``), the whole file read
   through the mount in 1 MiB ``read`` calls and hashed (SHA-256), as ``sha256sum`` does;
3. the same cold read again, and when a quarter of the file has been read, one of its OSTs
   fails (``fail-ost``, 1/k of the file lost, no mirror): the reader goes on, the mount
   reports the OST to recoveryd and waits; the *stall* is the longest ``read`` call after the
   failure, the *extra* is this read's time minus the baseline's; the SHA-256 must match;
4. recoveryd's own figures for that patch from its request record: ``seconds`` (end to end,
   the OST probe included) and ``patch_seconds`` (from the end of the probe to the layout
   switch), and the request's time from report to close.

In the same run: a whole-file ``globus-url-copy`` of the same source from the same server
into a plain folder on the same disk, plain and durable (+ fsync), caches dropped before each.
Goals (reported, never enforced): stall <= patch end to end + 0.5 s; patch ~ 1/k of the
copy. Writes ``docs/benchmarks/mount_recovery/report.md``, ``results.json`` and
``stall.png``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from benchmarks import harness
from benchmarks.mount_rig import drop_caches, mounted
from scratchkeeper import digests
from scratchkeeper.config import load_config
from scratchkeeper.planner import records as planner_records
from scratchkeeper.recovery import records
from scratchkeeper.state import StateStore
from scratchkeeper.storage import LayoutRequest, open_backend
from scratchkeeper.storage.base import XATTR_PREFIX

REPORT_DIR = harness.report_dir("mount_recovery")
MiB = 1 << 20
OST_COUNT = 16
FAIL_AT = 0.25          # share of the file read when the OST fails
START_TIMEOUT = 30.0
READ_TIMEOUT = 600.0
GOAL_MARGIN = 0.5       # seconds a stall may exceed recoveryd's patch


class Site:
    """A private store, state and socket; ``scratchkeeper mount`` and ``recoveryd`` on them."""

    def __init__(self, cluster: dict, workdir: Path):
        self.cluster = cluster
        self.workdir = workdir
        self.scratch = workdir / "scratch"
        self.scratch.mkdir()
        self.copies = workdir / "copies"
        self.copies.mkdir()
        self.source_dir = Path(cluster["source_dir"]) / f"mount-recovery-bench-{uuid.uuid4().hex[:8]}"
        self.source_dir.mkdir()
        os.chmod(self.source_dir, 0o755)
        self.config_path = workdir / "site.toml"
        self.config_path.write_text(f"""
[storage]
backend = "local"
scratch_root = "{self.scratch}"
store_root = "{workdir / 'store'}"
ost_count = {OST_COUNT}
stripe_count = 4
stripe_size = {MiB}
[state]
database = "{workdir / 'state.db'}"
[recovery]
socket = "{workdir / 'recoveryd.sock'}"
probe_timeout = 5.0
check_interval = 3600.0
[mount]
recovery_timeout = 300.0
[logging]
level = "INFO"
""")
        self.config = load_config(self.config_path)
        self.backend = open_backend(self.config)
        self.store = StateStore(self.config.state.database)
        self.mount: subprocess.Popen | None = None
        self.recoveryd: subprocess.Popen | None = None
        self._digests: tuple = (None, "", None)

    # -- processes ---------------------------------------------------------------------------
    def _spawn(self, args: list[str], log: str) -> subprocess.Popen:
        with open(self.workdir / log, "ab") as out:
            return subprocess.Popen([sys.executable, "-m", "scratchkeeper", "-c",
                                     str(self.config_path), *args], stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)

    def start(self) -> None:
        self.mount = self._spawn(["mount", str(self.scratch)], "mount.log")
        self._until(lambda: mounted(self.scratch) and os.path.isdir(self.scratch / "."),
                    self.mount, "mount.log")
        self.recoveryd = self._spawn(["recoveryd"], "recoveryd.log")
        self._until(self._socket_answers, self.recoveryd, "recoveryd.log")

    def _socket_answers(self) -> bool:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self.config.recovery.socket)
            return True
        except OSError:
            return False
        finally:
            conn.close()

    def _until(self, ready, process: subprocess.Popen, log: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not ready():
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"benchmarks.mount_recovery: {process.args[5]} did not start:\n"
                                 f"{(self.workdir / log).read_text()[-3000:]}")
            time.sleep(0.05)

    def stop(self) -> None:
        """recoveryd stopped, the mount unmounted (lazily if it must), both waited for."""
        if self.recoveryd is not None:
            self.recoveryd.send_signal(signal.SIGTERM)
            try:
                self.recoveryd.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.recoveryd.kill()
                self.recoveryd.wait(timeout=30)
            self.recoveryd = None
        if mounted(self.scratch):
            done = subprocess.run(["fusermount3", "-u", str(self.scratch)], capture_output=True,
                                  timeout=60)
            if done.returncode != 0 and mounted(self.scratch):
                subprocess.run(["fusermount3", "-u", "-z", str(self.scratch)],
                               capture_output=True, timeout=60)
        if self.mount is not None:
            try:
                self.mount.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.mount.kill()
                self.mount.wait(timeout=30)
            self.mount = None

    # -- files -------------------------------------------------------------------------------
    def source(self, size: int) -> tuple[Path, bytes]:
        data = os.urandom(size)
        path = self.source_dir / "source.bin"
        path.write_bytes(data)
        os.chmod(path, 0o644)
        return path, data

    def uri(self, path: Path) -> str:
        return self.cluster["gridftp_url"] + str(path)

    def stage(self, name: str, data: bytes, uri: str, stripe_count: int):
        backend = self.backend
        if backend.exists(name):
            backend.remove(name)
        backend.create(name, LayoutRequest(stripe_count=stripe_count, stripe_size=MiB))
        for offset in range(0, len(data), 16 * MiB):
            backend.write(name, offset, data[offset:offset + 16 * MiB])
        if self._digests[0] is not data:
            self._digests = (data, hashlib.sha256(data).hexdigest(),
                             digests.digest_bytes(data, self.config.recovery.digest_block))
        _, sha256, blocks = self._digests
        backend.set_xattr(name, XATTR_PREFIX + "source", uri.encode())
        backend.set_xattr(name, XATTR_PREFIX + "sha256", sha256.encode())
        backend.set_xattr(name, XATTR_PREFIX + "size", str(len(data)).encode())
        # the record recovery trusts (trusted.*, the source's endpoint), as stage commit does
        planner_records.write_recovery_record(backend, planner_records.open_records(self.store),
                                              name, source=uri, sha256=sha256, size=len(data))
        full = backend.paths.resolve(name)
        digests.record(self.store, full, sha256, blocks)
        return full, backend.layout(name)

    def cleanup(self) -> None:
        shutil.rmtree(self.source_dir, ignore_errors=True)


class Reader(threading.Thread):
    """What ``sha256sum`` does: 1 MiB ``read`` calls, each hashed; every call timed."""

    def __init__(self, path: Path):
        super().__init__(daemon=True)
        self.path = path
        self.position = 0
        self.reads: list[tuple[float, float]] = []  # (start, seconds) per read call
        self.sha256 = ""
        self.error: BaseException | None = None
        self.seconds = 0.0

    def run(self) -> None:
        try:
            digest = hashlib.sha256()
            buffer = bytearray(MiB)
            view = memoryview(buffer)
            fd = os.open(self.path, os.O_RDONLY)
            started = time.monotonic()
            try:
                while True:
                    before = time.monotonic()
                    count = os.readv(fd, [buffer])
                    self.reads.append((before, time.monotonic() - before))
                    if count == 0:
                        break
                    digest.update(view[:count])
                    self.position += count
            finally:
                os.close(fd)
            self.seconds = time.monotonic() - started
            self.sha256 = digest.hexdigest()
        except BaseException as err:
            self.error = err


def read_through(path: Path, expected: str, fail=None, at: int = 0) -> Reader:
    """A cold read of ``path``; ``fail()`` is called once ``at`` bytes were read."""
    drop_caches()
    reader = Reader(path)
    reader.start()
    if fail is not None:
        deadline = time.monotonic() + READ_TIMEOUT
        while reader.position < at and reader.is_alive() and time.monotonic() < deadline:
            time.sleep(0.001)
        if not reader.is_alive():
            raise SystemExit("benchmarks.mount_recovery: the read ended before the OST failed")
        reader.failed_at = time.monotonic()
        reader.failed_position = reader.position
        fail()
    reader.join(READ_TIMEOUT)
    if reader.is_alive():
        raise SystemExit(f"benchmarks.mount_recovery: {path}: read not done in {READ_TIMEOUT}s")
    if reader.error is not None:
        raise SystemExit(f"benchmarks.mount_recovery: {path}: {reader.error}")
    if reader.sha256 != expected:
        raise SystemExit(f"benchmarks.mount_recovery: {path}: WRONG BYTES (sha256 "
                         f"{reader.sha256}, staged {expected})")
    return reader


def copy_once(site: Site, source: Path, durable: bool) -> float:
    target = site.copies / "copy.bin"
    target.unlink(missing_ok=True)
    drop_caches()
    started = time.monotonic()
    subprocess.run(["globus-url-copy", site.uri(source), f"file://{target}"], check=True,
                   capture_output=True, timeout=600)
    if durable:
        harness.fsync_file(target)
    seconds = time.monotonic() - started
    target.unlink()
    return seconds


def trial(site: Site, source: Path, data: bytes, expected: str, k: int) -> dict:
    """One staged file, a cold baseline read, then a cold read with an OST failing mid-read."""
    name = f"k{k}.bin"
    full, layout = site.stage(name, data, site.uri(source), k)
    path = site.scratch / name
    baseline = read_through(path, expected)
    failed = layout.ost_list[0]
    try:
        reader = read_through(path, expected, lambda: site.backend.fail_ost(failed),
                              int(len(data) * FAIL_AT))
    finally:
        if any(o.ost_index == failed and not o.healthy for o in site.backend.list_osts()):
            site.backend.restore_ost(failed)
    after = [seconds for start, seconds in reader.reads if start >= reader.failed_at]
    request = records.last_request(site.store, full)
    if request is None or request["state"] != "done":
        raise SystemExit(f"benchmarks.mount_recovery: {full}: recoveryd did not patch it: "
                         f"{dict(request) if request else None}")
    outcome = json.loads(request["outcome"])
    rebuilt = site.backend.layout(name)
    if failed in rebuilt.ost_list:
        raise SystemExit(f"benchmarks.mount_recovery: {full}: OST {failed} still in the layout")
    site.backend.remove(name)
    return {"k": k, "baseline_read": baseline.seconds, "read": reader.seconds,
            "extra": reader.seconds - baseline.seconds, "stall": max(after),
            "failed_at_byte": reader.failed_position,
            "patch_seconds": outcome["patch_seconds"], "recovery_seconds": outcome["seconds"],
            "request_seconds": request["updated"] - request["created"],
            "patched_bytes": outcome["patched_bytes"], "origin": request["origin"]}


def _stats(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "all": values}


def summarise(trials: list[dict], copies: dict, ks: list[int]) -> list[dict]:
    durable = copies["durable"]["median"]
    rows = []
    for k in ks:
        mine = [t for t in trials if t["k"] == k]
        row = {"k": k, "patched_bytes": mine[0]["patched_bytes"]}
        for key in ("stall", "extra", "read", "baseline_read", "patch_seconds",
                    "recovery_seconds", "request_seconds"):
            row[key] = _stats([t[key] for t in mine])
        row["stall_minus_patch"] = _stats([t["stall"] - t["recovery_seconds"] for t in mine])
        row["stall_goal_met"] = all(t["stall"] <= t["recovery_seconds"] + GOAL_MARGIN
                                    for t in mine)
        row["patch_over_durable_copy"] = row["recovery_seconds"]["median"] / durable
        row["patch_over_plain_copy"] = row["recovery_seconds"]["median"] / copies["plain"]["median"]
        rows.append(row)
    return rows


def _range(stats: dict, unit: str = "s") -> str:
    return f"{stats['median']:.3f} ({stats['min']:.3f}–{stats['max']:.3f}){unit}"


def report(results: dict) -> str:
    size = results["file_size"]
    copies = results["copies"]
    lines = [
        "# Transparent recovery through the scratch mount",
        "",
        f"`.venv/bin/python -m benchmarks.mount_recovery{' --quick' if results['quick'] else ''}`"
        f" — {results['when']}, {results['machine']}; {results['repeats']} repeats, medians "
        "with (min–max).",
        "",
        f"A {size / MiB:.0f} MiB file staged from the local cluster's GridFTP server "
        f"(block digests recorded) on k OSTs of {OST_COUNT}, 1 MiB stripes, no mirror, read "
        "cold through `scratchkeeper mount` in 1 MiB `read` calls hashed with SHA-256 (what "
        f"`sha256sum` does); once {FAIL_AT:.0%} of it was read, one of its OSTs fails (1/k of "
        "the file lost). `scratchkeeper recoveryd` runs as its own process on the site's "
        "socket (periodic check off: only the mount's report starts the patch). Caches are "
        "dropped (`sync; echo 3 > /proc/sys/vm/drop_caches`) before every read and copy.",
        "",
        "* **stall**: the longest `read` call after the failure (what the reader sees);",
        "* **extra**: that read's total time minus a cold read of the same file without a "
        "failure, made just before;",
        "* **patch**: recoveryd's own figures from its request record: end to end (OST probe, "
        "rebuild, transfer, verification, sync, layout switch) and `patch_seconds` (after the "
        "probe); *request* is report to close in its state database;",
        "* **copy**: a whole-file `globus-url-copy` of the same source from the same server "
        "into a plain folder on the same disk; durable = followed by `fsync`.",
        "",
        f"Whole-file copy: plain {_range(copies['plain'])}, durable {_range(copies['durable'])}.",
        "",
        "| k | lost | stall | patch end to end | patch (after probe) | request | stall − patch "
        "| extra | cold read without failure | patch / durable copy | 1/k |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in results["rows"]:
        lines.append(
            f"| {row['k']} | {row['patched_bytes'] / MiB:.0f} MiB | {_range(row['stall'])} | "
            f"{_range(row['recovery_seconds'])} | {_range(row['patch_seconds'])} | "
            f"{_range(row['request_seconds'])} | {_range(row['stall_minus_patch'])} | "
            f"{_range(row['extra'])} | {_range(row['baseline_read'])} | "
            f"{row['patch_over_durable_copy']:.3f} | {1 / row['k']:.3f} |")
    lines += ["", "Goals:", ""]
    for row in results["rows"]:
        worst = max(row["stall_minus_patch"]["all"])
        lines.append(
            f"* k = {row['k']}: stall ≤ patch + {GOAL_MARGIN} s — "
            f"{'met' if row['stall_goal_met'] else 'MISSED'} in every repeat (worst: stall − "
            f"patch = {worst:+.3f} s); patch ≈ 1/k of the copy — "
            f"{row['patch_over_durable_copy']:.3f} of the durable copy and "
            f"{row['patch_over_plain_copy']:.3f} of the plain one, against 1/k = "
            f"{1 / row['k']:.3f}.")
    lines += ["", "Every read returned the staged SHA-256; every patch was recoveryd's answer to "
              "the mount's report (request origin `report`).", "",
              "Plot: `stall.png`. Raw figures: `results.json`.", ""]
    return "\n".join(lines)


def plot(results: dict, path: Path) -> None:
    plt = harness.pyplot()
    rows = results["rows"]
    ks = [row["k"] for row in rows]
    x = list(range(len(ks)))
    width = 0.2
    figure, axes = plt.subplots(figsize=(6.4, 4.0))
    series = (("stall", "stall seen by the reader"),
              ("recovery_seconds", "recoveryd's patch, end to end"),
              ("extra", "extra read time"))
    for i, (key, label) in enumerate(series):
        medians = [row[key]["median"] for row in rows]
        low = [row[key]["median"] - row[key]["min"] for row in rows]
        high = [row[key]["max"] - row[key]["median"] for row in rows]
        axes.bar([p + (i - 1) * width for p in x], medians, width, yerr=[low, high],
                 capsize=3, label=label)
    durable = results["copies"]["durable"]["median"]
    axes.scatter([p + 2 * width for p in x], [durable / k for k in ks], marker="_", s=400,
                 color="black", label="durable whole-file copy / k", zorder=3)
    axes.set_xticks(x)
    axes.set_xticklabels([f"k = {k}" for k in ks])
    axes.set_ylabel("seconds")
    axes.set_title(f"OST failing mid-read of a {results['file_size'] / MiB:.0f} MiB file "
                   "through the mount")
    axes.legend(fontsize=8)
    figure.tight_layout()
    harness.save_figure(figure, path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mount_recovery")
    parser.add_argument("--quick", action="store_true", help="a 256 MiB file instead of 1 GiB")
    parser.add_argument("--repeats", type=int, default=3, help="repeats (at least 3)")
    args = parser.parse_args(argv)
    harness.require_root("mount_recovery", "the mount, drop_caches")
    cluster = harness.local_cluster("mount_recovery")
    repeats = max(3, args.repeats)
    size = (256 if args.quick else 1024) * MiB
    ks = [4, 8]
    workdir = Path(tempfile.mkdtemp(prefix="sk-mount-recovery-bench-"))
    os.chmod(workdir, 0o755)
    site = Site(cluster, workdir)
    trials: list[dict] = []
    plain: list[float] = []
    durable: list[float] = []
    try:
        source, data = site.source(size)
        expected = hashlib.sha256(data).hexdigest()
        site.start()
        for repeat in range(repeats):
            print(f"repeat {repeat + 1} of {repeats}", flush=True)
            plain.append(copy_once(site, source, False))
            durable.append(copy_once(site, source, True))
            for k in ks:
                result = trial(site, source, data, expected, k)
                print(f"  k = {k}: stall {result['stall']:.3f} s, recoveryd "
                      f"{result['recovery_seconds']:.3f} s (patch {result['patch_seconds']:.3f}"
                      f" s), extra {result['extra']:.3f} s", flush=True)
                trials.append(result)
        del data
    finally:
        site.stop()
        site.cleanup()
        if not mounted(site.scratch):
            shutil.rmtree(workdir, ignore_errors=True)
    copies = {"plain": _stats(plain), "durable": _stats(durable)}
    results = {"quick": args.quick, "repeats": repeats, "file_size": size, "ost_count": OST_COUNT,
               "fail_at": FAIL_AT, "when": harness.utc_now(),
               "machine": f"{platform.node()}, {os.cpu_count()} cores", "copies": copies,
               "rows": summarise(trials, copies, ks), "trials": trials}
    harness.write_json(REPORT_DIR / "results.json", results, indent=2)
    text = report(results)
    (REPORT_DIR / "report.md").write_text(text)
    plot(results, REPORT_DIR / "stall.png")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
