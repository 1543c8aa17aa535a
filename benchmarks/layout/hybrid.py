"""Hybrid replicas against the best single layout on a mixed workload (the layout paper §6.3).

``.venv/bin/python -m benchmarks.layout.hybrid [--quick]`` (root: FUSE, loop devices, the
cgroup-v1 blkio throttle, tmpfs)

The layout paper ran IOR / mpi-tile-io instances one after another with different parameters on one
big file kept in three stripe sizes, and compared the hybrid choice per request with each
single layout. Here, on :class:`benchmarks.layout.LayoutRig` (8 OSTs, each throttled on its
own as in the Table 4 run):

* **Files** (one shared file each, the same bytes): ``hybrid``: a primary of 4 stripes of
  64 KiB on OSTs 0-3 (a 1 MiB request spans all 4: 1-DH) and a mirror of 4 stripes of 4 MiB on
  OSTs 4-7 (a request on one OST: 1-DV); the single layouts with the same storage spent: two
  mirrors of the same layout on the same OSTs (``1-DH x2``, ``1-DV x2``), read by the mount's
  read dispatch (the replica-selection paper's solver over the mirrors, docs/mount.rst). The store keeps a
  file's mirrors on distinct OSTs, so each layout here has 4 OSTs per copy.
* **Workload**: phases run one after another, as the layout paper's instances: one process reading
  the file front to back in 1 MiB requests; 16 processes each reading its region in 1 MiB
  requests; 16 processes reading 64 KiB at random; 4 processes reading 256 KiB at random. All
  ``O_DIRECT`` through the mount, the objects' pages dropped before each phase.
* **The model**: the mount's constants are calibrated on the rig as the Table 4 run does
  (``calibrate_rig``, ``fuse_hop``), written to the site config's ``[layout]`` and the mount
  restarted, so the hybrid file's choice per request uses them. Which mirror served each phase
  is read from the mount's ``user.scratchkeeper.hybrid`` counters and the devices' counters.

Time per phase is the wall time of its processes; the median of the repeats, the files
interleaved. It reports; it never fails on a speed goal. Results:
docs/benchmarks/layout/hybrid.md, hybrid.json, hybrid.png (``--quick``: hybrid-quick.*).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import harness
from benchmarks.layout import LayoutRig, ReadJob, say

REPORT_DIR = harness.report_dir("layout")
K, MiB = 1 << 10, 1 << 20
OSTS = 8
FILES = {  # name -> [(stripe count, stripe size, OSTs) per mirror]
    "hybrid": [(4, 64 * K, (0, 1, 2, 3)), (4, 4 * MiB, (4, 5, 6, 7))],
    "1-DH x2": [(4, 64 * K, (0, 1, 2, 3)), (4, 64 * K, (4, 5, 6, 7))],
    "1-DV x2": [(4, 4 * MiB, (0, 1, 2, 3)), (4, 4 * MiB, (4, 5, 6, 7))],
}
#: (name, processes, request size, pattern)
PHASES = (("1 reader, 1 MiB sequential", 1, MiB, "sequential"),
          ("16 readers, 1 MiB sequential", 16, MiB, "sequential"),
          ("16 readers, 64 KiB random", 16, 64 * K, "random"),
          ("4 readers, 256 KiB random", 4, 256 * K, "random"))


def plan(quick: bool) -> dict:
    return {"osts": OSTS, "file_size": (16 if quick else 32) * MiB,
            "phase_bytes": (4 if quick else 8) * MiB, "repeats": 1 if quick else 5,
            "read_bps": 8 * MiB, "read_iops": 80, "settle": 0.2,
            "calibration_size": 16 * MiB, "seed": 2011}


def phase_jobs(path: str, phase: tuple, p: dict, rep: int) -> list[ReadJob]:
    """Each process's reads: its own region of the file, front to back or at distinct random
    aligned offsets in it, ``phase_bytes`` in all."""
    _, procs, size, pattern = phase
    region = p["file_size"] // procs
    count = max(1, min(region // size, p["phase_bytes"] // procs // size))
    rng = random.Random(f"{p['seed']}/{phase[0]}/{rep}")
    jobs = []
    for i in range(procs):
        first = i * region // size
        slots = region // size
        picks = range(count) if pattern == "sequential" else rng.sample(range(slots), count)
        jobs.append(ReadJob(path, tuple((first + j) * size for j in picks), size))
    return jobs


def make_files(rig: LayoutRig, p: dict) -> dict[str, str]:
    from scratchkeeper.storage.layout import LayoutRequest

    paths = {}
    for name, mirrors in FILES.items():
        file_name = name.replace(" ", "").replace("-", "") + ".dat"
        (count, size, osts), rest = mirrors[0], mirrors[1:]
        paths[name] = rig.make_file(file_name, p["file_size"], count, size, osts)
        for count, size, osts in rest:
            rig.backend.add_mirror(paths[name], LayoutRequest(stripe_count=count,
                                                              stripe_size=size, ost_list=osts))
    return paths


def set_model(rig: LayoutRig, params) -> None:
    """The calibrated constants as the site config's ``[layout]``; the mount restarted."""
    text = rig.config.read_text().split("\n[layout]\n")[0]
    rig.config.write_text(text + "\n[layout]\n"
                          f"connect_seconds = {params.e!r}\n"
                          f"network_bandwidth = {min(1 / params.v, 1e13) if params.v else 1e13!r}\n"
                          f"startup_sequential_seconds = {params.alpha_sequential!r}\n"
                          f"startup_random_seconds = {params.alpha_random!r}\n"
                          f"read_bandwidth = {1 / params.beta_read!r}\n"
                          f"write_bandwidth = {1 / params.beta_write!r}\n"
                          f"calibrated = \"benchmarks.layout.hybrid: calibrate_rig, fuse_hop\"\n")
    rig.stop()
    rig.start()


def hybrid_counters(rig: LayoutRig) -> dict:
    return json.loads(os.getxattr(rig.scratch, "user.scratchkeeper.hybrid"))


def run(work: Path, p: dict) -> dict:
    from benchmarks.layout.__main__ import calibrate_rig, fuse_hop, model_params

    rig = LayoutRig(work, osts=p["osts"], read_bps=p["read_bps"], read_iops=p["read_iops"],
                    readers=16, settle=p["settle"], name="layout.hybrid")
    out: dict = {"plan": p, "files": {k: [list(m[:2]) + [list(m[2])] for m in v]
                                      for k, v in FILES.items()}}
    try:
        rig.build(len(FILES) * 2 * p["file_size"] // 4 + 2 * p["calibration_size"])
        paths = make_files(rig, p)
        hop_file = rig.make_file("hop.dat", 8 * MiB, 1, MiB, (0,))
        os.sync()
        rig.start()
        say("calibrating (fio through the mount, one OST; the FUSE hop)")
        cal = calibrate_rig(rig, {"calibration_size": p["calibration_size"]})
        hop = fuse_hop(rig, hop_file)
        params = model_params(cal, hop, "calibrated")
        out["calibration"] = {k: v for k, v in cal.items() if k != "stock"}
        out["hop"] = hop
        out["params"] = {"e": params.e, "v": params.v, "alpha_sequential":
                         params.alpha_sequential, "alpha_random": params.alpha_random,
                         "beta_read": params.beta_read}
        set_model(rig, params)
        times = {name: {phase[0]: [] for phase in PHASES} for name in FILES}
        choices = {phase[0]: [] for phase in PHASES}
        devices = {name: {phase[0]: [] for phase in PHASES} for name in FILES}
        started = time.monotonic()
        for rep in range(p["repeats"]):
            for phase in PHASES:
                names = list(FILES)
                random.Random(f"{p['seed']}/files/{rep}/{phase[0]}").shuffle(names)
                for name in names:
                    before = hybrid_counters(rig)
                    r = rig.read_case(phase_jobs(paths[name], phase, p, rep))
                    after = hybrid_counters(rig)
                    times[name][phase[0]].append(r["wall"])
                    devices[name][phase[0]].append(r["device_bytes"])
                    if name == "hybrid":
                        choices[phase[0]].append({lay: after["reads"][lay] - before["reads"][lay]
                                                  for lay in after["reads"]})
            say(f"repeat {rep + 1}/{p['repeats']}: {time.monotonic() - started:.0f} s")
        out["times"], out["choices"], out["device_bytes"] = times, choices, devices
    finally:
        rig.close()
        out["leftovers"] = rig.leftovers()
    return out


def analyse(results: dict) -> dict:
    """Median per phase, the workload's total per file, hybrid against the best single."""
    medians = {name: {ph: statistics.median(v) for ph, v in phases.items()}
               for name, phases in results["times"].items()}
    totals = {name: sum(m.values()) for name, m in medians.items()}
    singles = {n: t for n, t in totals.items() if n != "hybrid"}
    best = min(singles, key=singles.get)
    per_phase_best = {ph: min(medians[n][ph] for n in singles) for ph in medians["hybrid"]}
    served = {}
    for ph, rows in results["choices"].items():
        summed = {}
        for row in rows:
            for lay, n in row.items():
                summed[lay] = summed.get(lay, 0) + n
        served[ph] = summed
    return {"medians": medians, "totals": totals, "best_single": best,
            "speedup": singles[best] / totals["hybrid"],
            "oracle": sum(per_phase_best.values()), "served": served}


def plot(results: dict, a: dict, path: Path) -> None:
    plt = harness.pyplot()

    phases = list(a["medians"]["hybrid"])
    names = list(a["medians"])
    fig, ax = plt.subplots(figsize=(9, 4.2))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        ax.bar([x + i * width for x in range(len(phases))],
               [a["medians"][name][ph] * 1e3 for ph in phases], width, label=name)
    ax.set_xticks([x + width * (len(names) - 1) / 2 for x in range(len(phases))])
    ax.set_xticklabels([ph.replace(", ", "\n") for ph in phases], fontsize=8)
    ax.set_ylabel("ms (median)")
    ax.set_title(f"Mixed workload on the mount: hybrid {a['totals']['hybrid']:.2f} s, best single "
                 f"({a['best_single']}) {a['totals'][a['best_single']]:.2f} s")
    ax.legend(fontsize=8)
    fig.tight_layout()
    harness.save_figure(fig, path)


def report(results: dict, a: dict, quick: bool) -> str:
    p = results["plan"]
    prm = results["params"]
    lines = [
        "# Hybrid replicas against the best single layout (the layout paper §6.3)", "",
        f"`python -m benchmarks.layout.hybrid{' --quick' if quick else ''}` on "
        f"{platform.node()} ({os.cpu_count()} cores), {time.strftime('%Y-%m-%d')}. "
        "Module docstring: the rig, files and phases.", "",
        f"Rig: {p['osts']} OSTs, each ext4 on its own loop device (image in a tmpfs), reads "
        f"throttled per device to {p['read_bps'] // MiB} MiB/s and {p['read_iops']} IOPS "
        f"(cgroup-v1 blkio). File: {p['file_size'] // MiB} MiB; each phase reads "
        f"{p['phase_bytes'] // MiB} MiB; median of {p['repeats']} repeats, the files in a "
        "shuffled order each time.", "",
        f"Model constants (calibrated on the rig, the mount's `[layout]`): e "
        f"{prm['e'] * 1e6:.0f} us, v {prm['v'] * 1e9:.3f} ns/B, alpha "
        f"{prm['alpha_sequential'] * 1e3:.3f} ms sequential / {prm['alpha_random'] * 1e3:.3f}"
        f" ms random, read {1 / prm['beta_read'] / MiB:.1f} MiB/s.", "",
        "| phase | " + " | ".join(a["medians"]) + " | hybrid served by |",
        "|---|" + "---:|" * len(a["medians"]) + "---|"]
    for ph in a["medians"]["hybrid"]:
        served = ", ".join(f"{lay} {n}" for lay, n in a["served"][ph].items() if n) or "-"
        lines.append(f"| {ph} | " + " | ".join(f"{a['medians'][n][ph] * 1e3:.0f} ms"
                                               for n in a["medians"]) + f" | {served} |")
    lines.append("| **workload** | " + " | ".join(f"**{a['totals'][n]:.3f} s**"
                                                  for n in a["totals"]) + " | |")
    lines += ["", f"Hybrid against the best single layout ({a['best_single']}): "
              f"**{a['speedup']:.2f}x** (the layout paper: 1.13-1.74x). The best single layout phase by "
              f"phase (an oracle switching layouts between phases) would take {a['oracle']:.3f}"
              " s.", "",
              "\"hybrid served by\": the mount's requests of the phase by the layout class of "
              "the mirror it chose (`user.scratchkeeper.hybrid`; the mount sees requests of at "
              "most 1 MiB).", "", "![phases](" + ("hybrid-quick.png" if quick else "hybrid.png")
              + ")", ""]
    if results.get("leftovers"):
        lines.append(f"Left behind by the rig: {results['leftovers']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.layout.hybrid",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller files, one repeat")
    args = parser.parse_args(argv)
    harness.require_root("layout.hybrid", "FUSE, loop devices, blkio")
    p = plan(args.quick)
    suffix = harness.suffix(args.quick)
    with tempfile.TemporaryDirectory(prefix="sk-hybrid-") as work:
        results = run(Path(work), p)
    a = analyse(results)
    harness.write_json(REPORT_DIR / f"hybrid{suffix}.json", dict(results, analysis=a),
                       newline=True)
    plot(results, a, REPORT_DIR / f"hybrid{suffix}.png")
    text = report(results, a, args.quick)
    (REPORT_DIR / f"hybrid{suffix}.md").write_text(text + "\n")
    print(text)
    return 1 if results.get("leftovers") else 0


if __name__ == "__main__":
    sys.exit(main())
