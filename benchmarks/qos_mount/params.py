"""The fixed parameters of the qos_mount benchmark (9 OSTs, 3 copies, the throttle, the mount's
interval margin), the run's plan, and the small helpers every part of it uses."""

from __future__ import annotations

import statistics
import time

from benchmarks import harness

SIM_RESULTS = harness.report_dir("qos") / "results.json"
QOS_XATTR = "user.scratchkeeper.qos"
DISPATCH_XATTR = "user.scratchkeeper.dispatch"
MiB = 1 << 20
PIECE = 64 * 1024
OSTS = 9
COPIES = 3
SCHEMES = ("mirrored", "chained", "design")
LABELS = {"mirrored": "RAID-1 mirrored", "chained": "RAID-1 chained", "design": "(9,3,1) design"}
SIM_KEYS = {"mirrored": "RAID-1 mirrored/natural", "chained": "RAID-1 chained/natural",
            "design": "(9,3,1) design-theoretic/natural"}
ACCESSES = (1, 2, 3)
IOPS = 10             # the one throttle setting that is a queue (see __main__'s docstring)
MARGIN = 0.3          # T = M tau + MARGIN tau
#: qos.batch: the default
BATCH = 0.002
START_OFFSET = 0.003  # a batch starts this long after the mount's interval boundary


def guarantee(m: int) -> int:
    return (COPIES - 1) * m * m + COPIES * m


def plan(quick: bool) -> dict:
    return {"intervals": 10 if quick else 60, "warmup": 3, "offered": 5 if quick else 20,
            "admitted": 4 if quick else 10, "overhead": 5 if quick else 20,
            "calibration": 4 if quick else 10, "cover": 2, "pieces": 8,
            "memory_limit": 112 * MiB, "threads": 64, "seed": 21}


def summary(values: list[float]) -> dict:
    return {"mean": statistics.fmean(values) if values else 0.0,
            "std": statistics.pstdev(values) if values else 0.0,
            "max": max(values) if values else 0.0, "count": len(values),
            "p99": sorted(values)[min(len(values) - 1, int(0.99 * len(values)))] if values else 0.0}


def sleep_until(when: float) -> None:
    while True:
        left = when - time.monotonic()
        if left <= 0:
            return
        time.sleep(left - 0.001 if left > 0.002 else 0)
