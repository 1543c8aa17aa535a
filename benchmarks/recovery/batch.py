"""Section 2 of the recovery benchmark: an OST failure under many files, recovered as recoveryd
does, against ``globus-url-copy -f`` of the same lost bytes (plain, and durable: then an fsync of
each copy), with the timeline of recoveryd's batch (:mod:`.timeline`) and where the time left
over the durable copy goes."""

from __future__ import annotations

import os
import shutil
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

from benchmarks import harness
from benchmarks.recovery.rig import Bench, MiB, median, spread, summary
from benchmarks.recovery.timeline import STEPS, Timeline
from scratchkeeper.recovery import records
from scratchkeeper.recovery.service import RecoveryService
from scratchkeeper.runner import get_runner

DEFAULT = "recoveryd: its check's probe serves the batch (default)"
NO_REUSE = "recoveryd: every OST probed anew for the batch (probe_reuse = 0)"


class _EmptyQueue:
    """A scheduler with no queued jobs: recoveryd's check orders nothing before the rest."""

    def snapshot(self):
        return SimpleNamespace(pending=list)


def _recoveryd_batch(bench: Bench, config, paths: list[str], failed: int) -> dict:
    """Fail ``failed`` and recover as recoveryd does: its check finds the failure and queues
    the files, its file workers (already waiting, as in the daemon) claim and recover them.
    Seconds to the last request closed from the check's start (``whole``) and from the report
    of the failure (the check's probe of every OST answered), and the batch's timeline."""
    service = RecoveryService(config, backend=bench.backend, store=bench.store,
                              scheduler=_EmptyQueue())
    probed: list[tuple[float, float]] = []
    probe_all = service.recoverer.probe_all

    def timed_probe_all():
        began = time.monotonic()
        statuses = probe_all()
        probed.append((began, time.monotonic()))
        return statuses
    service.recoverer.probe_all = timed_probe_all
    records.open_records(bench.store)
    bench.backend.fail_ost(failed)
    timeline = Timeline()
    timeline.install(service)
    threads = []
    try:
        # the daemon's workers wait for requests before any failure
        for number in range(config.recovery.file_workers):
            thread = threading.Thread(target=service._work, name=f"recover-{number}")
            thread.start()
            threads.append(thread)
        time.sleep(0.05)  # every worker found the queue empty and waits
        started = time.monotonic()
        queued = service.check_cycle()

        def done() -> bool:
            return all(records.active_request(bench.store, path) is None for path in paths)

        with service.changed:
            finished = service.changed.wait_for(done, timeout=600)
        ended = time.monotonic()
    finally:
        service.stop.set()
        service._notify()
        service._wake_workers()
        for thread in threads:
            thread.join()
        timeline.remove()
        bench.backend.restore_ost(failed)
        service.recoverer.readers.close_all()
    states = {path: (records.file_state(bench.store, path) or {"state": "-"})["state"]
              for path in paths}
    if not finished or sorted(queued) != sorted(paths) or set(states.values()) != {"whole"}:
        raise SystemExit(f"benchmarks.recovery: recoveryd's batch: queued {len(queued)} of "
                         f"{len(paths)}, states {sorted(set(states.values()))}")
    began, reported = probed[0]
    return {"whole": ended - started, "from_report": ended - reported,
            "timeline": timeline.offsets(reported, began)}


def _copy_files(listing: Path, targets: list[Path], durable: bool) -> tuple[float, float]:
    """One ``globus-url-copy -f`` of every line of ``listing`` (then an fsync of each target):
    the seconds in all, and those of the fsyncs."""
    for target in targets:
        target.unlink(missing_ok=True)
    started = time.monotonic()
    get_runner().run(["globus-url-copy", "-f", str(listing)], timeout=600, mutating=False)
    copied = time.monotonic()
    if durable:
        for target in targets:
            harness.fsync_file(target)
    ended = time.monotonic()
    return ended - started, ended - copied


def bench_batch(bench: Bench, count: int, size: int, repeats: int) -> dict:
    """An OST failure under ``count`` files: recovered as recoveryd does, vs copies of them all.

    The files share their four OSTs; one of them fails. recoveryd's periodic check (its probe
    of every OST) finds it and queues the files; its ``recovery.file_workers`` workers wait for
    them, one claims the batch, as configured and with ``probe_reuse = 0`` (every OST probed
    anew). The peers copy files of the same byte counts from the same server with one
    ``globus-url-copy -f`` (one connection for all, as the Recoverer keeps its connections):
    into the page cache (plain), and followed by an fsync of each copy (durable: the patch's
    bytes are on disk before its layout switch). Each repeat runs every variant and both
    copies once. Throughput is lost bytes over the wall time from the report of the failure
    (the end of the check's probe of every OST) to the last request closed; the rows "from the
    check's start" include that probe.
    """
    osts = (0, 1, 2, 3)
    files = [bench.source(f"batch-{i}.bin", size) for i in range(count)]
    lost = size // 4
    copies = [bench.source(f"batch-copy-{i}.bin", lost)[0] for i in range(count)]
    listing = bench.workdir / "batch.list"
    target_dir = bench.workdir / "scratch" / "batch-copies"
    target_dir.mkdir(exist_ok=True)
    targets = [target_dir / path.name for path in copies]
    listing.write_text("".join(f"{bench.uri(path, 'ftp')} file://{target}\n"
                               for path, target in zip(copies, targets)))
    variants = ((DEFAULT, bench.config),
                (NO_REUSE, replace(bench.config,
                                   recovery=replace(bench.config.recovery, probe_reuse=0.0))))
    times: dict[str, list[float]] = {label: [] for label, _ in variants}
    from_check: dict[str, list[float]] = {label: [] for label, _ in variants}
    timelines: list[dict] = []
    copy_times: dict[str, list[float]] = {"plain": [], "durable": [], "fsync": []}
    for repeat in range(repeats):
        print(f"  {count} files, repeat {repeat + 1} of {repeats}", flush=True)
        for label, config in variants:
            paths = [bench.stage(f"batch-{i}.bin", data, bench.uri(source, "ftp"), 4, MiB,
                                 osts=osts) for i, (source, data) in enumerate(files)]
            os.sync()
            run = _recoveryd_batch(bench, config, paths, osts[1])
            times[label].append(run["from_report"])
            from_check[label].append(run["whole"])
            if label == DEFAULT:
                timelines.append(run["timeline"])
        for key in ("plain", "durable"):
            os.sync()
            seconds, synced = _copy_files(listing, targets, key == "durable")
            copy_times[key].append(seconds)
            if key == "durable":
                copy_times["fsync"].append(synced)
    shutil.rmtree(target_dir, ignore_errors=True)
    for path in [source for source, _ in files] + copies:
        os.unlink(path)
    total = count * lost
    return {"files": count, "file_size": size, "lost_per_file": lost,
            "workers": bench.config.recovery.file_workers,
            "patch_budget": getattr(bench.config.recovery, "patch_budget", None),
            "rows": {label: summary(times[label], total) for label, _ in variants},
            "rows_from_check": {label: summary(from_check[label], total)
                                for label, _ in variants},
            "copy": summary(copy_times["plain"], total),
            "durable": summary(copy_times["durable"], total),
            "durable_fsync": median(copy_times["fsync"]),
            "timelines": timelines}


def batch_report(batch: dict) -> list[str]:
    """Section 2: the table, the goal, the timeline and where the gap is."""
    copy, durable = batch["copy"], batch["durable"]
    budget = batch.get("patch_budget")
    lines = ["## 2. An OST failure under many files", "",
             f"{batch['files']} files of {batch['file_size'] / MiB:.0f} MiB on the same four "
             f"OSTs (stripes of 1 MiB), one of them failed: {batch['lost_per_file'] / MiB:.0f} "
             "MiB lost per file. Recovered as recoveryd does: its periodic check probes every "
             "OST, finds the failure and queues the files; of its "
             f"{batch['workers']} file workers, waiting before the failure as the daemon's "
             "do, one claims the whole batch (one transaction), the files' own OSTs are probed "
             "once for all, their rebuilds begun together, every file's lost ranges fetched "
             "and written at once"
             + (f" within `recovery.patch_budget` = {budget / MiB:.0f} MiB in flight"
                if budget else "")
             + ", their layouts switched in one namespace transaction and the requests "
             "closed in one. Timed from the "
             "report of the failure (the check's probe of every OST answered: the moment "
             "recoveryd knows of it, as the issue's goal reads) to the last request closed; "
             "the rows marked so are timed from the check's start, its probe (detection, "
             "section 4) included. The peers copy files of the same byte counts "
             "from the same server with one `globus-url-copy -f` (one connection for all, as "
             "the Recoverer keeps its connections): into the page cache (plain), and followed "
             "by an fsync of each copy (durable, the fair peer: a patch's bytes are on disk "
             "before its layout switch). Each repeat runs every row once.", "",
             "| how | batch s (min-max) | MB/s | vs durable copy | vs plain copy |",
             "|---|---|---|---|---|"]
    for label, row in ((f"`globus-url-copy -f`, {batch['files']} files, then fsync of each "
                        "(durable)", durable),
                       (f"`globus-url-copy -f`, {batch['files']} files (plain)", copy),
                       *batch["rows"].items(),
                       *((f"{label}, from the check's start", row)
                         for label, row in batch.get("rows_from_check", {}).items())):
        lines.append(f"| {label} | {spread(row['seconds'], row['min'], row['max'])} | "
                     f"{row['bytes_per_s'] / 1e6:.0f} | "
                     f"{row['bytes_per_s'] / durable['bytes_per_s']:.2f} | "
                     f"{row['bytes_per_s'] / copy['bytes_per_s']:.2f} |")
    row = next(iter(batch["rows"].values()))
    ratio = row["bytes_per_s"] / durable["bytes_per_s"]
    lines += ["", f"Goal >= 0.9x the durable copies, medians, from the report of the failure: "
              f"{ratio:.2f}x (**{'meets' if ratio >= 0.9 else 'misses'}**)"]
    if batch.get("rows_from_check"):
        whole = next(iter(batch["rows_from_check"].values()))
        lines[-1] += (f"; from the check's start: "
                      f"{whole['bytes_per_s'] / durable['bytes_per_s']:.2f}x")
    lines[-1] += "."
    lines.append("")
    if batch.get("timelines"):
        lines += _timeline_report(batch)
    return lines


def _timeline_report(batch: dict) -> list[str]:
    """The default row's batch step by step (medians over the repeats), and the gap."""
    timelines = batch["timelines"]
    steps = {step: median([t["steps"][step] for t in timelines if step in t["steps"]])
             for step, _ in STEPS if any(step in t["steps"] for t in timelines)}
    lines = ["The default row's batch, step by step (medians of the repeats; seconds from the "
             "report of the failure, each step's end):", "", "| step | s |", "|---|---|"]
    for step, words in STEPS:
        if step in steps:
            shown = (f"{steps[step]:.3f} (its start)" if step == "probe"
                     else f"{steps[step]:.3f}")
            lines.append(f"| {words} | {shown} |")
    counts: dict[str, float] = {}
    for name in sorted({name for t in timelines for name in t["counts"]}):
        counts[name] = median([t["counts"].get(name, 0) for t in timelines])
    wide = median([t["files_at_once"] for t in timelines])
    lines += ["", "Per batch (medians): " + ", ".join(f"{value:g} {name}"
                                                       for name, value in counts.items())
              + f"; {wide:.1f} of {batch['files']} files patching at once on average "
              "(between the first byte and the last)."]
    lines += ["", _where_the_gap_is(batch, steps), ""]
    return lines


def _where_the_gap_is(batch: dict, steps: dict[str, float]) -> str:
    """The default row against the durable copy, split as both spend their time."""
    row = next(iter(batch["rows"].values()))
    durable = batch["durable"]["seconds"]
    fsync = batch.get("durable_fsync", 0.0)
    start = steps.get("first_byte", 0.0)
    patch = steps.get("last_byte", start) - start
    end = row["seconds"] - steps.get("last_byte", row["seconds"])
    gap = row["seconds"] - durable
    words = (f"Where the time goes: recoveryd takes {row['seconds']:.3f} s, the durable copy "
             f"{durable:.3f} s ({durable - fsync:.3f} s transfer and write, {fsync:.3f} s "
             f"fsync). recoveryd's {start:.3f} s to the first byte (claim, probe of the files' "
             f"OSTs, rebuilds begun, connections), {patch:.3f} s from the first byte to the "
             f"last written, {end:.3f} s from there to the last request closed (substitute "
             "objects synced, layouts switched, requests closed).")
    if gap <= 0:
        return words + f" It is {-gap:.3f} s faster than the durable copy."
    parts = {"the start": start, "the transfer and writes": patch - (durable - fsync),
             "the end": end - fsync}
    worst = max(parts, key=lambda name: parts[name])
    return words + (f" The gap of {gap:.3f} s is mostly in {worst} ("
                    + ", ".join(f"{name} {seconds:+.3f} s against the copy"
                                for name, seconds in parts.items()) + ").")
