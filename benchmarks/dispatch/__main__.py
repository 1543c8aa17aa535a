"""Read dispatch benchmark (issue 15, docs/mount.rst "Read dispatch").

``.venv/bin/python -m benchmarks.dispatch [--quick]`` (root: FUSE, a loop device, the blkio
throttle, ``drop_caches``)

A file with two mirrors on disjoint OSTs (mirror 0 on OSTs 0 and 1, mirror 1 on OSTs 2 and 3,
2 stripes of 256 KiB each) is read cold (``echo 3 > /proc/sys/vm/drop_caches`` before every read)
through ``scratchkeeper mount`` with ``dd`` in 1 MiB and 4 MiB blocks, under each read-dispatch
policy (``SK_MOUNT_DISPATCH=solver|primary|round-robin``, the same build), interleaved, the
order rotated every repeat. OST 1 is slow: its object directory is an ext4 file system on a loop
device whose reads the blkio controller throttles (``blkio.throttle.read_bps_device``). Each
read's bytes are checked once per policy and repeat (sha256 of an untimed read). The mount's
counters (``user.scratchkeeper.dispatch``) give the pieces each OST served.

It reports; it never fails on a speed goal. Results: docs/benchmarks/dispatch/results.json,
report.md and throughput.png.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from benchmarks import harness
from benchmarks.mount_rig import BLKIO, MountRig, drop_caches, loop_ost, sh, sha256, throttle_reads

REPORT_DIR = harness.report_dir("dispatch")
MiB = 1 << 20
STRIPE = 256 * 1024
POLICIES = ("solver", "primary", "round-robin")
SLOW_OST = 1
STATS = "user.scratchkeeper.dispatch"


class Rig(MountRig):
    """A store with 4 OSTs (OST 1 on a throttled loop device) and its mount."""

    name = "dispatch"

    def __init__(self, work: Path, file_size: int, slow_bps: int):
        super().__init__(work)
        self.file_size, self.slow_bps = file_size, slow_bps
        self.rule = None
        os.chmod(work, 0o755)
        self.scratch.mkdir()
        (self.store / f"ost{SLOW_OST:04d}").mkdir(parents=True)
        self.config.write_text(f"""
[storage]
scratch_root = "{self.scratch}"
store_root = "{self.store}"
ost_count = 4
stripe_count = 2
stripe_size = {STRIPE}
[state]
database = "{work / 'state.db'}"
[recovery]
socket = "{work / 'recovery.sock'}"
[mount]
threads = 8
dispatch_min_bytes = {MiB}
[logging]
level = "WARNING"
""")

    def slow_ost(self) -> None:
        # the plain ext4 defaults (lazy init, atime) this benchmark has always measured
        self.rule = loop_ost(self.work / "slow-ost.img", self.file_size // 2 + 256 * MiB,
                             self.ost(SLOW_OST), self.devices, self.mounts, (), ())

    def throttle(self, on: bool) -> None:
        throttle_reads([self.rule], bps=self.slow_bps if on else 0)

    def throttled(self) -> bool:
        return self.rule is not None

    def unthrottle(self) -> None:
        self.throttle(False)

    def start(self, policy: str) -> None:  # type: ignore[override]
        super().start(env=dict(os.environ, SK_MOUNT_DISPATCH=policy))

    def stats(self) -> dict:
        return self.xattr(STATS)

    def make_file(self) -> str:
        """The file through the mount (mirror 0), then mirror 1's objects written as the store
        writes a mirror, then the layout with both; its sha256."""
        from dataclasses import replace

        from scratchkeeper.storage.layout import FileLayout, StripeObject

        path = self.scratch / "data"
        digest = hashlib.sha256()
        block = 8 * MiB
        mirror_objects = [StripeObject(ost, os.urandom(16).hex()) for ost in (2, 3)]
        files = [open(self.store / f"ost{o.ost_index:04d}" / o.object_id, "wb")
                 for o in mirror_objects]
        try:
            with open(path, "wb") as out:
                for at in range(0, self.file_size, block):
                    chunk = os.urandom(min(block, self.file_size - at))
                    out.write(chunk)
                    digest.update(chunk)
                    for s in range(0, len(chunk), STRIPE):
                        stripe = (at + s) // STRIPE
                        files[stripe % 2].seek((stripe // 2) * STRIPE)
                        files[stripe % 2].write(chunk[s:s + STRIPE])
        finally:
            for f in files:
                f.close()
        mdt = self.store / "mdt" / "data"
        lov = "security.scratchkeeper.lov"
        layout = FileLayout.from_lov(os.getxattr(mdt, lov), "data")
        first = layout.first
        if sorted(first.ost_list) != [0, 1]:
            raise RuntimeError(f"mirror 0 is on OSTs {first.ost_list}, not 0 and 1")
        mirror = replace(first, objects=tuple(mirror_objects), comp_id=first.comp_id + 1,
                         mirror_id=1)
        os.setxattr(mdt, lov, FileLayout(layout.components + (mirror,), layout.layout_gen + 1,
                                         "data").to_lov())
        return digest.hexdigest()


def timed_dd(path: Path, block: int) -> float:
    drop_caches()
    started = time.monotonic()
    sh(["timeout", "600", "dd", f"if={path}", "of=/dev/null", f"bs={block}", "status=none"],
       timeout=620)
    return time.monotonic() - started


def run(work: Path, size: int, repeats: int, blocks: list[int], slow_bps: int) -> dict:
    rig = Rig(work, size, slow_bps)
    runs = []
    try:
        rig.slow_ost()
        rig.start("solver")
        expected = rig.make_file()
        rig.stop()
        # the slow OST's speed alone, cold (dd of its object)
        slow_obj = next((rig.store / f"ost{SLOW_OST:04d}").iterdir())
        rig.throttle(True)
        drop_caches()
        t = time.monotonic()
        sh(["dd", f"if={slow_obj}", "of=/dev/null", "bs=1M", "count=64", "status=none"])
        slow_alone = 64 * MiB / (time.monotonic() - t)
        fast_obj = next((rig.store / "ost0002").iterdir())
        drop_caches()
        t = time.monotonic()
        sh(["dd", f"if={fast_obj}", "of=/dev/null", "bs=1M", "count=64", "status=none"])
        fast_alone = 64 * MiB / (time.monotonic() - t)
        passes = [(True, r, block) for r in range(repeats) for block in (None,)]
        passes += [(False, r, None) for r in range(repeats)]
        for throttled, r, _ in passes:
            rig.throttle(throttled)
            order = POLICIES[r % 3:] + POLICIES[:r % 3]
            for policy in order:
                rig.start(policy)
                try:
                    ok = sha256(rig.scratch / "data") == expected
                    for block in (blocks if throttled else blocks[:1]):
                        before = rig.stats()
                        seconds = timed_dd(rig.scratch / "data", block)
                        after = rig.stats()
                        b = {o["ost"]: o for o in before["osts"]}
                        pieces = {o["ost"]: o["pieces"] - b.get(o["ost"], {}).get("pieces", 0)
                                  for o in after["osts"]}
                        runs.append({"repeat": r, "policy": policy, "block": block,
                                     "throttled": throttled,
                                     "seconds": seconds, "bytes_per_s": size / seconds,
                                     "right_bytes": ok, "pieces": pieces,
                                     "requests": after["requests"] - before["requests"],
                                     "fallbacks": after["fallbacks"] - before["fallbacks"],
                                     "figures": {o["ost"]: {"seconds_per_byte":
                                                            o["seconds_per_byte"],
                                                            "latency": o["latency"]}
                                                 for o in after["osts"]}})
                        print(f"  {'slow OST' if throttled else 'all fast'} repeat {r} "
                              f"{policy:12s} bs={block // MiB} MiB: "
                              f"{size / seconds / 1e6:7.1f} MB/s  pieces {pieces}", flush=True)
                finally:
                    rig.stop()
    finally:
        rig.close()
    return {"runs": runs, "slow_ost_alone_bytes_per_s": slow_alone,
            "fast_ost_alone_bytes_per_s": fast_alone}


def summarize(results: dict, throttled: bool = True) -> dict:
    summary = {}
    for block in results["blocks"] if throttled else results["blocks"][:1]:
        per = {}
        for policy in POLICIES:
            chosen = [r for r in results["runs"] if r["policy"] == policy and
                      r["block"] == block and r["throttled"] == throttled]
            rates = [r["bytes_per_s"] for r in chosen]
            slow = [r["pieces"].get(str(SLOW_OST), r["pieces"].get(SLOW_OST, 0)) /
                    max(1, sum(r["pieces"].values())) for r in chosen]
            per[policy] = {"median": statistics.median(rates), "low": min(rates),
                           "high": max(rates), "n": len(rates),
                           "slow_share": statistics.median(slow)}
        per["solver/primary"] = per["solver"]["median"] / per["primary"]["median"]
        per["solver/round-robin"] = per["solver"]["median"] / per["round-robin"]["median"]
        summary[str(block)] = per
    return summary


def plot(results: dict, path: Path) -> None:
    plt = harness.pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.25
    groups = [(results["summary"][str(b)], f"dd bs={b // MiB} MiB, OST {SLOW_OST} slow")
              for b in results["blocks"]]
    groups.append((results["summary_all_fast"][str(results["blocks"][0])],
                   f"dd bs={results['blocks'][0] // MiB} MiB, all fast"))
    for i, policy in enumerate(POLICIES):
        s = [g[policy] for g, _ in groups]
        med = [x["median"] / 1e6 for x in s]
        err = [[(x["median"] - x["low"]) / 1e6 for x in s], [(x["high"] - x["median"]) / 1e6
                                                             for x in s]]
        ax.bar([j + (i - 1) * width for j in range(len(groups))], med, width, yerr=err,
               capsize=4, label=policy)
    ax.set_xticks(range(len(groups)), [label for _, label in groups])
    ax.set_ylabel("cold read through the mount (MB/s)")
    ax.set_title(f"{results['file_size'] // MiB} MiB, 2 mirrors, slow OST throttled to "
                 f"{results['slow_bps'] // MiB} MiB/s (median, range of {results['repeats']})",
                 fontsize=10)
    ax.legend()
    fig.tight_layout()
    harness.save_figure(fig, path, dpi=100)


def report(results: dict) -> str:
    mb = lambda v: f"{v / 1e6:.0f}"  # noqa: E731
    lines = ["# Read dispatch: solver vs primary vs round-robin", "",
             "`.venv/bin/python -m benchmarks.dispatch" + (" --quick`" if results["quick"] else "`"),
             f" on {platform.node()} ({os.cpu_count()} CPUs shared, kernel {platform.release()}),"
             f" {results['date']}.", "",
             f"A {results['file_size'] // MiB} MiB file with two mirrors on disjoint OSTs "
             f"(mirror 0: OSTs 0, 1; mirror 1: OSTs 2, 3; 2 stripes of {STRIPE // 1024} KiB), "
             f"read cold (`drop_caches` before each read) through `scratchkeeper mount` with "
             f"`dd`, {results['repeats']} repeats per policy and block size, policies interleaved "
             f"(order rotated per repeat), each policy a fresh mount of the same build "
             f"(`SK_MOUNT_DISPATCH`), `mount.dispatch_min_bytes` = 1 MiB. OST {SLOW_OST} (in "
             f"mirror 0, the primary) is a real slow device: an ext4 file system on a loop device "
             f"whose reads the blkio controller throttles to {results['slow_bps'] // MiB} MiB/s "
             f"(measured alone, cold: {mb(results['slow_ost_alone_bytes_per_s'])} MB/s; an "
             f"unthrottled OST: {mb(results['fast_ost_alone_bytes_per_s'])} MB/s). Every policy "
             "read the right bytes (sha256 of an untimed read per mount): "
             f"{all(r['right_bytes'] for r in results['runs'])}.", "",
             "| request | policy | median MB/s | range MB/s | share of pieces on the slow OST |",
             "| --- | --- | --- | --- | --- |"]
    for block in results["blocks"]:
        s = results["summary"][str(block)]
        for policy in POLICIES:
            p = s[policy]
            lines.append(f"| {block // MiB} MiB | {policy} | {mb(p['median'])} | "
                         f"{mb(p['low'])}-{mb(p['high'])} | {p['slow_share']:.0%} |")
    lines += ["", "| request | solver / primary | solver / round-robin |", "| --- | --- | --- |"]
    for block in results["blocks"]:
        s = results["summary"][str(block)]
        lines.append(f"| {block // MiB} MiB | {s['solver/primary']:.2f} | "
                     f"{s['solver/round-robin']:.2f} |")
    lines += ["", "The same file with the throttle off (every OST as fast; 1 MiB blocks), to show "
              "what dispatch costs when there is nothing to gain:", "",
              "| policy | median MB/s | range MB/s |", "| --- | --- | --- |"]
    fast = results["summary_all_fast"][str(results["blocks"][0])]
    for policy in POLICIES:
        p = fast[policy]
        lines.append(f"| {policy} | {mb(p['median'])} | {mb(p['low'])}-{mb(p['high'])} |")
    lines += ["", f"solver / primary {fast['solver/primary']:.2f}, solver / round-robin "
              f"{fast['solver/round-robin']:.2f}.", ""]
    lines += ["", "Plot: `throughput.png`. Raw runs (seconds, pieces per OST, the solver's "
              "measured seconds per byte and latency per OST at the end of each read): "
              "`results.json`.", "",
              "How to read it: the kernel sends the mount 1 MiB read requests whatever `dd`'s "
              "block (`max_read`, and the readahead the mount raises to 1 MiB), so the 4 MiB "
              "runs differ from the 1 MiB ones only by how many requests the kernel keeps in "
              "flight. Primary-only reads half the file from the slow OST; round-robin a quarter; "
              "the solver sends the slow OST a piece only when its measured time, queue "
              "included, beats the fast OSTs' queues. Had the slow OST been in mirror 1, "
              "primary-only would not touch it. With every OST fast, round-robin reads every "
              "other stripe of each object from each mirror, which defeats the readahead of the "
              "file system under the OSTs; the solver's answer would do the same, so the mount "
              "takes it only when it beats reading the request in order from the first mirror "
              "by 25 % in the same model (docs/mount.rst, \"Read dispatch\"), and reads in order "
              "otherwise. The solver's own time was not measured apart. One VM with 2 shared "
              "cores whose host caches the disk: a rough picture.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dispatch")
    parser.add_argument("--quick", action="store_true", help="256 MiB, 3 repeats")
    args = parser.parse_args(argv)
    harness.require_root("dispatch", "FUSE, loop device, blkio, drop_caches")
    harness.require_paths("dispatch", [BLKIO / "blkio.throttle.read_bps_device"],
                          "(the blkio throttle) here")
    size = (256 if args.quick else 1024) * MiB
    repeats = 3
    blocks = [MiB, 4 * MiB]
    slow_bps = 64 * MiB
    with harness.work_folder("dispatch", "sk-dispatch-bench-", mounts=lambda work: [
            work / "scratch", work / "store" / f"ost{SLOW_OST:04d}"]) as work:
        results = run(work, size, repeats, blocks, slow_bps)
    results.update({"quick": args.quick, "file_size": size, "repeats": repeats,
                    "blocks": blocks, "slow_bps": slow_bps, "date": harness.utc_now()})
    results["summary"] = summarize(results)
    results["summary_all_fast"] = summarize(results, throttled=False)
    harness.write_json(REPORT_DIR / "results.json", results, indent=2)
    plot(results, REPORT_DIR / "throughput.png")
    text = report(results)
    (REPORT_DIR / "report.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
