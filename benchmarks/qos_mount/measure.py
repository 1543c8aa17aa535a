"""The measurements of the qos_mount benchmark: each device alone (:func:`calibrate`), then the
mount (:func:`run`): the rig set up, its overhead and the design with admission off, and each M
under deterministic admission, online and interval retrieval. The reads themselves are done by
:mod:`benchmarks.qos_mount.reader` in the rig's memory cgroup."""

from __future__ import annotations

import json
import mmap
import os
import random
import statistics
import threading
import time
import zlib
from collections import Counter
from pathlib import Path

from benchmarks.mount_rig import drop_caches, say, throttle_reads
from benchmarks.qos_mount.params import (
    ACCESSES,
    COPIES,
    IOPS,
    LABELS,
    MARGIN,
    OSTS,
    PIECE,
    SCHEMES,
    START_OFFSET,
    MiB,
    guarantee,
    sleep_until,
)
from benchmarks.qos_mount.rig import Rig, make_files

# ---------------------------------------------------------------- device calibration

def calibrate(rig: Rig, p: dict) -> dict:
    """Each device alone (raw loop device, O_DIRECT, 64 KiB at random offsets): bursts of j = 1,
    2, 3 reads at the cadence of the benchmark (every j tau + margin), all 9 devices at once
    (their throttles are independent); unthrottled single reads; and the 100 ms slice shown on
    one device at 100 and 200 IOPS."""
    size = {d: os.stat(d).st_size if os.path.isfile(d) else
            int(Path(f"/sys/block/{Path(d).name}/size").read_text()) * 512 for d in rig.devices}

    def burst(device: str, j: int) -> list[float]:
        done = [0.0] * j

        def one(i: int) -> None:
            fd = os.open(device, os.O_RDONLY | os.O_DIRECT)
            buf = mmap.mmap(-1, PIECE)
            try:
                os.preadv(fd, [buf], random.randrange(size[device] // PIECE) * PIECE)
            finally:
                os.close(fd)
            done[i] = time.monotonic()

        t0 = time.monotonic()
        threads = [threading.Thread(target=one, args=(i,)) for i in range(j)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sorted(x - t0 for x in done)

    out: dict = {"unthrottled": {}, "bursts": {}, "slice_demo": {}}
    rig.throttle(False)
    drop_caches()
    for index, device in enumerate(rig.devices):
        out["unthrottled"][index] = [burst(device, 1)[0] for _ in range(5)]
    for iops in (100, 200):
        throttle_reads([next(iter(rig.rules))], iops=iops)
        time.sleep(0.3)
        out["slice_demo"][iops] = burst(rig.devices[0], 24)
    rig.throttle(True)
    time.sleep(0.3)
    nominal = 0.108
    for j in (1, 2, 3):
        period = j * nominal + MARGIN * nominal
        results = {i: [] for i in range(OSTS)}

        def device_loop(index: int, start: float) -> None:
            for n in range(p["calibration"]):
                sleep_until(start + n * period)
                results[index].append(burst(rig.devices[index], j))

        start = time.monotonic() + 0.2
        threads = [threading.Thread(target=device_loop, args=(i, start)) for i in range(OSTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        out["bursts"][j] = results
        time.sleep(0.3)
    return summarize_bursts(out)


def summarize_bursts(out: dict) -> dict:
    """tau and each device's figures from the bursts :func:`calibrate` measured, added to
    ``out``."""
    # tau: spacing of consecutive completions within bursts; an anomaly: a burst whose i-th
    # read did not end within tau/2 of (i-1) tau (the throttle let two through together, or
    # held the first)
    gaps = [b[i + 1] - b[i] for j in (2, 3) for runs in out["bursts"][j].values()
            for b in runs for i in range(j - 1)]
    clean = [g for g in gaps if g > 0.05]
    tau = statistics.median(clean)
    per_device = {}
    anomalies = total = 0
    for index in range(OSTS):
        row = {}
        for j in (1, 2, 3):
            runs = out["bursts"][j][index]
            row[j] = {"last_median": statistics.median(b[-1] for b in runs),
                      "last_max": max(b[-1] for b in runs)}
            for b in runs:
                total += 1
                anomalies += any(abs(t - i * tau) > tau / 2 for i, t in enumerate(b))
        row["spacing"] = statistics.median(b[i + 1] - b[i] for j in (2, 3)
                                           for b in out["bursts"][j][index] for i in range(j - 1))
        row["unthrottled_median"] = statistics.median(out["unthrottled"][index])
        per_device[index] = row
    out.update(tau=tau, per_device=per_device, anomalies=anomalies, bursts_total=total,
               doubles=sum(1 for g in gaps if g < 0.05), gaps_total=len(gaps))
    return out

# ---------------------------------------------------------------- the measurement

def draws(p: dict, m: int, count: int, k: int) -> list[list[int]]:
    """`count` draws of k buckets of 36: distinct up to 36; beyond (2S = 54 at M = 3) a second
    distinct draw for the rest (those buckets then hold two requests, on different pieces)."""
    rng = random.Random(p["seed"] * 100 + m * 10 + k)
    out = []
    for _ in range(count):
        buckets = rng.sample(range(36), min(k, 36))
        if k > 36:
            buckets += rng.sample(range(36), k - 36)
        out.append(buckets)
    return out


def pick(table: dict, scheme: str, buckets: list[int], rng: random.Random) -> list[int]:
    """One piece per request: a bucket asked twice gets two different pieces."""
    chosen = {b: rng.sample(table["buckets"][scheme][b], n) for b, n in Counter(buckets).items()}
    return [chosen[b].pop() for b in buckets]



def run(work: Path, p: dict) -> dict:
    """The whole measurement on a rig of its own in ``work``: set up, calibrated, admission off,
    then each M under deterministic admission."""
    rig = Rig(work, p)
    results: dict = {"qos": {}}
    try:
        table = set_up(rig, work, p, results)
        tau = calibrate_devices(rig, p, results)
        rig.throttle(False)
        drop_caches()
        results["piece_osts"] = [piece["osts"] for piece in table["pieces"]]
        without_admission(rig, p, table, tau, results)
        for m in ACCESSES:
            with_admission(rig, p, table, tau, m, results)
        results["tau"] = tau
    finally:
        rig.close()
    return results


def set_up(rig: Rig, work: Path, p: dict, results: dict) -> dict:
    """The OSTs, the files and their copies; the piece table (:func:`make_files`)."""
    per_scheme = 12 * p["cover"]
    data = len(SCHEMES) * per_scheme * COPIES * COPIES * p["pieces"] * PIECE
    say(f"building 9 OSTs on loop devices in {work} ({data / MiB:.0f} MiB of data with "
        "its copies)")
    rig.build(data)
    results["devices"] = {str(o): d for d, o in zip(rig.devices, range(OSTS))}
    results["rules"] = rig.rules
    began = time.monotonic()
    table = make_files(rig, p)
    results["setup"] = {"files_per_scheme": table["files_per_scheme"],
                        "pieces": len(table["pieces"]), "seconds": time.monotonic() - began,
                        "replicate_seconds": table["replicate_seconds"],
                        "pieces_per_bucket": {s: [len(b) for b in table["buckets"][s]]
                                              for s in SCHEMES}}
    say(f"{sum(table['files_per_scheme'].values())} files written and replicated "
        f"({table['files_per_scheme']}) in {results['setup']['seconds']:.0f} s")
    return table


def calibrate_devices(rig: Rig, p: dict, results: dict) -> float:
    """:func:`calibrate`, kept in the results; tau."""
    say("calibrating each device alone (throttle 10 IOPS, bursts of 1-3 reads)")
    cal = calibrate(rig, p)
    tau = cal["tau"]
    results["calibration"] = cal
    say(f"tau = {tau * 1000:.1f} ms per access; {cal['anomalies']} of {cal['bursts_total']} "
        f"bursts off the one-per-tau schedule; at 100 IOPS a burst of 24 ends "
        f"{', '.join(f'{x * 1000:.0f}' for x in cal['slice_demo'][100][::4])} ms ...")
    return tau


def without_admission(rig: Rig, p: dict, table: dict, tau: float, results: dict) -> None:
    """Admission off: the mount's overhead (no throttle), then the design at 2S (throttled)."""
    pieces = table["pieces"]
    rig.start("off", 1, 1.0)
    try:
        rng = random.Random(p["seed"])
        runs = []
        for k in (5, 14, 27, 54):
            ivs = []
            for buckets in draws(p, 0, p["overhead"], k):
                ids = pick(table, "design", buckets, rng)
                ivs.append({"tag": f"overhead k={k}", "pieces": ids})
            runs.append({"label": f"overhead k={k}", "mode": "spaced", "gap": 0.03,
                         "intervals": ivs})
        say("mount overhead: admission off, no throttle, k = 5, 14, 27, 54 concurrent reads")
        results["overhead"] = rig.worker({"pieces": pieces, "runs": runs}, "overhead")
        for r in results["overhead"]["runs"]:
            resp = [max(iv["done"]) for iv in r["intervals"]]
            say(f"  {r['label']}: slowest read of a batch mean {statistics.fmean(resp) * 1000:.1f}"
                f" ms, max {max(resp) * 1000:.1f} ms")
        runs = []
        for m in ACCESSES:
            k = 2 * guarantee(m)
            ivs = [{"tag": f"design off k={k}", "buckets": b,
                    "pieces": pick(table, "design", b, rng)}
                   for b in draws(p, m, p["offered"], k)]
            runs.append({"label": f"design, admission off, k={k}", "M": m, "mode": "spaced",
                         "gap": tau + 0.05, "intervals": ivs})
        say(f"design, admission off, k = 2S = 10, 28, 54 ({p['offered']} batches each)")
        results["offered"] = rig.worker({"pieces": pieces, "runs": runs, "throttle": IOPS},
                                        "offered")
    finally:
        rig.stop()


def admission_runs(p: dict, table: dict, m: int, tau: float) -> list[dict]:
    """The reader's runs at M: S buckets per interval, the schemes interleaved after the
    warm-up; then the design offered 2S every second interval."""
    k = guarantee(m)
    period = m * tau + MARGIN * tau
    drawn = draws(p, m, p["warmup"] + p["intervals"], k)
    ivs = []
    for n, buckets in enumerate(drawn):
        order = SCHEMES[n % 3:] + SCHEMES[:n % 3]
        for scheme in (("design",) if n < p["warmup"] else order):
            rng = random.Random(zlib.crc32(f"{p['seed']} {m} {n} {scheme}".encode()))
            ivs.append({"tag": "warmup" if n < p["warmup"] else scheme,
                        "buckets": buckets, "pieces": pick(table, scheme, buckets, rng)})
    runs = [{"label": f"M={m}", "M": m, "mode": "aligned", "T": period,
             "fresh": 1.05 * tau, "intervals": ivs}]
    rng = random.Random(p["seed"] + m)
    extra = [{"tag": "design 2S admitted", "skip": 1,
              "buckets": b, "pieces": pick(table, "design", b, rng)}
             for b in draws(p, m + 10, p["admitted"], 2 * k)]
    runs.append({"label": f"M={m} 2S admitted", "M": m, "mode": "aligned", "T": period,
                 "intervals": extra})
    return runs


def with_admission(rig: Rig, p: dict, table: dict, tau: float, m: int, results: dict) -> None:
    """M under deterministic admission: online retrieval, then the same intervals under
    interval retrieval, each on a mount of its own."""
    pieces = table["pieces"]
    k = guarantee(m)
    period = m * tau + MARGIN * tau
    runs = admission_runs(p, table, m, tau)
    say(f"M = {m}: deterministic admission, S = {k}, T = {period * 1000:.1f} ms, "
        f"{p['intervals']} intervals per scheme, schemes interleaved")
    rig.start("deterministic", m, period)
    try:
        out = rig.worker({"pieces": pieces, "runs": runs, "throttle": IOPS}, f"m{m}")
        out["stats"] = json.loads(rig.cli("store", "stats", "--json").stdout or "{}")
    finally:
        rig.stop()
    out["T"] = period
    results["qos"][m] = out
    # the same intervals under interval retrieval (qos.retrieval = "interval", the
    # flash QoS paper's design-theoretic retrieval): read at the start of the next interval
    say(f"M = {m}: the same, qos.retrieval = \"interval\"")
    rig.start("deterministic", m, period, "interval")
    try:
        late = rig.worker({"pieces": pieces, "runs": runs[:1], "throttle": IOPS},
                          f"m{m}-interval")
    finally:
        rig.stop()
    late["T"] = period
    results.setdefault("interval", {})[m] = late
    say_late(late, m, tau, shift=period - START_OFFSET)  # the retrieval starts at the next boundary
    say_late(out, m, tau)


def say_late(out: dict, m: int, tau: float, shift: float | None = None) -> None:
    """Per scheme, the slowest response and the intervals with a read past M accesses; with
    ``shift``, from the start of interval retrieval (the next boundary)."""
    for scheme in SCHEMES:
        ivs = [iv for iv in out["runs"][0]["intervals"] if iv["tag"] == scheme]
        if shift is not None:
            worst = max(max(iv["done"]) for iv in ivs) - shift
            over = sum(max(iv["done"]) - shift > (m - 0.5) * tau for iv in ivs)
            say(f"  {LABELS[scheme]}: max response from the retrieval's start "
                f"{worst * 1000:.1f} ms, {over} of {len(ivs)} intervals past "
                f"{(m - 0.5) * tau * 1000:.0f} ms")
        else:
            worst = max(max(iv["done"]) for iv in ivs)
            late = sum(max(iv["done"]) > (m - 0.5) * tau for iv in ivs)
            say(f"  {LABELS[scheme]}: max response {worst * 1000:.1f} ms, {late} of "
                f"{len(ivs)} intervals with a read past {(m - 0.5) * tau * 1000:.0f} ms")
