"""Read QoS on the mount with real reads (issue 21; the flash QoS paper §V.C; docs/qos.rst).

``.venv/bin/python -m benchmarks.qos_mount [--quick]`` (root: FUSE, loop devices, the cgroup-v1
blkio throttle and memory controller, ``drop_caches``)

The simulated Table III of ``benchmarks.qos`` measured on ``scratchkeeper mount``:

* **Rig.** A store of 9 OSTs, each an ext4 file system on its own loop device whose reads the
  blkio controller throttles on their own (``blkio.throttle.read_iops_device``), so every OST has
  an independent speed. The throttle releases bios per 100 ms slice: at 100-200 IOPS it lets
  10-20 reads through at once and then none (measured here, on one device, and reported); only
  at 10 IOPS is it a queue that serves one 64 KiB read per ~107 ms, the first read of a burst on
  an idle device at once. That time, tau, is measured per device alone, as the completion times
  of bursts of 1-3 reads on the raw device. The mount and the reader process run in a cgroup-v1
  memory cgroup with a small limit; after every interval the pieces' objects are dropped from
  the page cache (``POSIX_FADV_DONTNEED``), and the devices' ``blkio.throttle.io_serviced`` counts
  show that the reads reach them.
* **Data.** For each scheme (design, mirrored, chained; one set of files each, in one store) 3-
  stripe files (64 KiB stripes) whose primaries are chosen so that ``store replicate --scheme
  S`` gives them, between them, every bucket of the simulation's allocation (the 36 rotations of
  the (9,3,1) design's blocks; the 9 device triples of RAID-1 mirrored and chained, each 4 times,
  as ``mirrored_allocation(9, 3, 36)`` and ``chained_allocation(9, 3, 36)``) with its first copy
  the primary.
* **Workload.** A request is one O_DIRECT read of one 64 KiB stripe piece through the mount (one
  bucket). Per interval k distinct buckets (k = S = 5, 14, 27 for M = 1, 2, 3, c = 3) are drawn
  (the same draws for every scheme), one piece of each, and read concurrently by a thread pool
  at the start of the mount's own interval (``[qos] admission = "deterministic"``, ``copies =
  3``, ``accesses = M``, ``interval = T = M tau + 0.3 tau``; ``mount.dispatch_min_bytes = 0``),
  the schemes interleaved interval by interval.
* **Also.** The mount's overhead (admission off, no throttle: k concurrent reads); the design
  with admission off at 2S (what admission prevents); the design with deterministic admission
  offered 2S every second interval (what admission costs: the delay).

Response time = end of the read - start of its interval (the simulation's definition). A device
serves its j-th read of an interval at about (j - 1) tau, so a read "needed more than M accesses"
when it ended after (M - 1/2) tau (halfway between the M-th and the (M+1)-th release). It
reports; it never fails on a speed goal. Results: docs/benchmarks/qos_mount/report.md,
results.json, response.png (``--quick``: report-quick.md, results-quick.json,
response-quick.png).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from benchmarks import harness
from benchmarks.mount_rig import BLKIO, MEMCG, say
from benchmarks.qos_mount.analysis import analyse
from benchmarks.qos_mount.measure import run
from benchmarks.qos_mount.params import OSTS, plan
from benchmarks.qos_mount.reader import worker
from benchmarks.qos_mount.report import plot, report

REPORT_DIR = harness.report_dir("qos_mount")


def write(results: dict, json_path: Path) -> Path:
    """Analyse, then write the results (``json_path``), the plot and the report; the report's
    path."""
    analysis = analyse(results)
    results["analysis"] = analysis
    suffix = harness.suffix(results["quick"])
    harness.write_json(json_path, results, default=str)
    plot(results, analysis, REPORT_DIR / f"response{suffix}.png")
    path = REPORT_DIR / f"report{suffix}.md"
    path.write_text(report(results, analysis))
    return path


def render(path: Path) -> int:
    """Write the report and the plot again from a results JSON (no measuring)."""
    results = json.loads(path.read_text())
    results["qos"] = {int(k): v for k, v in results["qos"].items()}
    cal = results["calibration"]
    cal["slice_demo"] = {int(k): v for k, v in cal["slice_demo"].items()}
    cal["per_device"] = {int(i): {(int(j) if j.isdigit() else j): v for j, v in row.items()}
                         for i, row in cal["per_device"].items()}
    write(results, path)
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker(argv[1], argv[2])
    if argv[:1] == ["--render"]:
        return render(Path(argv[1]))
    parser = argparse.ArgumentParser(prog="python -m benchmarks.qos_mount",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="10 intervals per scheme and M (60), fewer calibration bursts")
    args = parser.parse_args(argv)
    harness.require_root("qos_mount", "FUSE, loop devices, cgroups")
    harness.require_paths("qos_mount", [BLKIO / "blkio.throttle.read_iops_device",
                                        MEMCG / "cgroup.procs"])
    p = plan(args.quick)
    started = time.monotonic()
    with harness.work_folder("qos_mount", "sk-qos-mount-bench-", "/var/tmp", mounts=lambda work: [
            work / "scratch"] + [work / "store" / f"ost{i:04d}" for i in range(OSTS)]) as work:
        results = run(work, p)
    suffix = harness.suffix(args.quick)
    results.update({"quick": args.quick, "plan": p, "seconds": time.monotonic() - started,
                    "date": harness.utc_now(),
                    "plot": f"response{suffix}.png", "json": f"results{suffix}.json"})
    path = write(results, REPORT_DIR / f"results{suffix}.json")
    say(f"report {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
