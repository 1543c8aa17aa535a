"""The reader of the qos_mount benchmark, run as ``python -m benchmarks.qos_mount --worker PLAN
OUT`` in a process of its own inside the rig's memory cgroup: each interval's reads, concurrent,
at the start of the mount's interval, with the mount's and the devices' counters around them."""

from __future__ import annotations

import json
import math
import mmap
import os
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.mount_rig import device_reads, throttle_reads
from benchmarks.qos_mount.params import DISPATCH_XATTR, PIECE, QOS_XATTR, START_OFFSET, sleep_until


def worker(plan_path: str, out_path: str) -> int:
    job = json.loads(Path(plan_path).read_text())
    pieces = {p["id"]: p for p in job["pieces"]}
    rules = job["rules"]
    root = job["mount"]
    fds = {name: os.open(os.path.join(root, name), os.O_RDONLY | os.O_DIRECT)
           for name in sorted({p["file"] for p in job["pieces"]})}
    objects: dict[str, int] = {}

    def object_fd(path: str) -> int:
        if path not in objects:
            objects[path] = os.open(path, os.O_RDONLY)
        return objects[path]

    def dontneed(ids) -> None:
        for pid in ids:
            for path in pieces[pid]["objects"]:
                os.posix_fadvise(object_fd(path), 0, 0, os.POSIX_FADV_DONTNEED)

    local = threading.local()

    def read(pid: int) -> tuple:
        buf = getattr(local, "buf", None)
        if buf is None:
            buf = local.buf = mmap.mmap(-1, PIECE)
        piece = pieces[pid]
        issued = time.monotonic()
        try:
            got = os.preadv(fds[piece["file"]], [buf], piece["offset"])
            error = None
        except OSError as err:
            got, error = -1, str(err)
        done = time.monotonic()
        ok = got == PIECE and zlib.crc32(buf) == piece["crc"]
        return issued, done, ok, error

    def counters() -> tuple[dict, dict, dict]:
        qos = json.loads(os.getxattr(root, QOS_XATTR))
        dispatch = json.loads(os.getxattr(root, DISPATCH_XATTR))
        reads = {int(o["ost"]): int(o["reads"]) for o in dispatch["osts"]}
        return qos, reads, device_reads({r: int(o) for r, o in rules.items()})

    def delta(after: dict, before: dict) -> dict:
        return {k: after[k] - before.get(k, 0) for k in after
                if isinstance(after[k], (int, float)) and not isinstance(after[k], bool)}

    pool = ThreadPoolExecutor(max_workers=job["threads"])
    barrier = threading.Barrier(job["threads"])
    list(pool.map(lambda _: barrier.wait(), range(job["threads"])))  # every thread started
    # every piece's objects out of the page cache, every object opened (metadata read) first
    dontneed(pieces)
    if job.get("throttle"):
        throttle_reads(rules, iops=job["throttle"])
        time.sleep(0.3)
    out = {"runs": []}
    for run in job["runs"]:
        period = run.get("T")
        before = counters()
        intervals = []
        last_done = time.monotonic()
        for iv in run["intervals"]:
            if run["mode"] == "aligned":
                # the next boundary at which every device is idle and its throttle fresh
                ready = max(time.monotonic(), last_done + run.get("fresh", 0))
                start = (math.floor(ready / period) + 1) * period + START_OFFSET
            else:
                start = max(time.monotonic(), last_done + run["gap"])
            sleep_until(start)
            futures = [pool.submit(read, pid) for pid in iv["pieces"]]
            results = [f.result() for f in futures]
            last_done = max(r[1] for r in results)
            after = counters()
            dontneed(iv["pieces"])
            intervals.append({
                "tag": iv["tag"], "pieces": iv["pieces"], "buckets": iv.get("buckets"),
                "start": start, "interval_index": math.floor(start / period) if period else None,
                "issued": [r[0] - start for r in results], "done": [r[1] - start for r in results],
                "ok": [r[2] for r in results], "errors": [r[3] for r in results if r[3]],
                "qos": delta(after[0], before[0]),
                "ost_reads": {o: after[1][o] - before[1].get(o, 0) for o in after[1]},
                "device_reads": {o: after[2][o] - before[2].get(o, 0) for o in after[2]}})
            before = counters()
            if iv.get("skip"):
                sleep_until(start - START_OFFSET + 2 * period - 0.001)
        out["runs"].append({"label": run["label"], "intervals": intervals,
                            "qos_end": before[0]})
    if job.get("throttle"):
        throttle_reads(rules, iops=0)
    pool.shutdown()
    Path(out_path).write_text(json.dumps(out))
    return 0
