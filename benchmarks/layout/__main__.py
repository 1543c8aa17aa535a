"""The layout paper's Table 4 on the scratch mount: does the cost model pick the fastest layout?

``.venv/bin/python -m benchmarks.layout [--quick]`` (root: FUSE, loop devices, the cgroup-v1
blkio throttle, tmpfs)

* **Rig** (:class:`benchmarks.layout.LayoutRig`): a store of 4 OSTs, each an ext4 file system
  on its own loop device (its image in a tmpfs), each read-throttled on its own by the blkio
  controller (``read_bps_device`` and ``read_iops_device``), mounted with ``scratchkeeper
  mount``; reader processes read through the mount with ``O_DIRECT``, the objects' pages
  dropped from the page cache before every run, the devices' ``io_service_bytes`` checked.
* **Calibration**: alpha (sequential, random) and the read beta by the functions of
  ``scratchkeeper layout calibrate`` (the same fio jobs and options, the same arithmetic) in the
  mount's root directory (one OST per file), the objects' pages dropped before each read job;
  e and v: the FUSE hop, measured as the latency of 4 KiB ``O_DIRECT`` reads of a file whose
  objects are in the page cache and the per-byte slope between 256 KiB and 1 MiB such reads.
* **Cases**: p processes (all on one node, m = p), request size s, sequential or random, one
  shared file or a file per process; each in the three layouts of ``advise.stripe_settings``
  (1-DV, 2-D with g = 2, 1-DH). Each process reads its own request-size blocks with ``pread``
  (in the shared file process i of p owns blocks i, i + p, ..., IOR's shared-file pattern; else
  its own file): sequentially its first ones, or distinct ones drawn at random. Wall time of
  all processes together, the layouts interleaved, the median of the repeats. The model's
  choice is ``advise(Workload.uniform(p, p, s, ...), calibrated params, 4, groups=2)``.

It reports; it never fails on a speed goal. Results: docs/benchmarks/layout/report.md,
results.json, choices.png (``--quick``: report-quick.md, results-quick.json, choices-quick.png).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path

from benchmarks import harness
from benchmarks.layout import LayoutRig, ReadJob, say
from benchmarks.mount_rig import BLKIO
from testkit.layout_table4 import (
    GROUPS,
    LAYOUT_NAMES,
    MODES,
    OSTS,
    PATTERNS,
    K,
    MiB,
    cases_of,
    correct_table,
    file_sizes,
    key_name,
    loss_summary,
    ost_list,
    outcome,
    plan,
    tie_noise,
)

REPORT_DIR = harness.report_dir("layout")


def jobs_for(case: dict, files: dict, p: dict, rep: int) -> dict[str, list[ReadJob]]:
    """Each process's reads, per layout. In the shared file process i of p owns the blocks of
    s bytes i, i + p, i + 2p, ... (IOR's shared-file pattern with block = transfer size: so a
    1-DV file, striped with the request size, keeps each process on OST i mod n when p is a
    multiple of n); with a file per process it owns its file's blocks. Sequential: its first
    blocks in order; random: distinct blocks drawn at random among its own, in random order
    (the same draw for the three layouts of a case and repeat)."""
    size, procs, count = case["size"], case["processes"], case["requests"]
    out = {}
    for layout, key in case["keys"].items():
        paths = files[key]
        jobs = []
        for i in range(procs):
            if key[0] == "shared":
                path, nbytes = paths[0]
                owned, stride, first = nbytes // size // procs, procs, i
            else:
                path, nbytes = paths[i]
                owned, stride, first = nbytes // size, 1, 0
            if owned < count:
                raise RuntimeError(f"{key_name(key)}: {owned} blocks of process {i} < {count}")
            if case["pattern"] == "sequential":
                picks = range(count)
            else:
                rng = random.Random(f"{p['seed']}/{rep}/{case['mode']}/{size}/{procs}/{i}")
                picks = rng.sample(range(owned), count)
            jobs.append(ReadJob(path, tuple((first + j * stride) * size for j in picks), size))
        out[layout] = jobs
    return out


# ---------------------------------------------------------------- calibration

def calibrate_rig(rig: LayoutRig, p: dict) -> dict:
    """alpha and beta by the project's calibrate with the rig's drop (every object's pages,
    before each read job; the command drops only the test file's: the same here, the rig holds
    no other file yet), in the mount's root directory (site default: 1 stripe)."""
    from scratchkeeper.advisor import calibrate as cal

    path = str(rig.scratch / f".scratchkeeper-calibrate.{os.getpid()}")
    result = cal.calibrate(str(rig.scratch), size=p["calibration_size"],
                           drop=lambda _: rig.drop())
    a_seq, a_rand = result.alpha_sequential, result.alpha_random
    b_read, b_write = 1 / result.read_bandwidth, 1 / result.write_bandwidth
    latency = result.latencies
    prefix = cal.job_argvs("fio", path, p["calibration_size"])[0]
    prefix = prefix[:next(i for i, a in enumerate(prefix) if a.startswith("--name="))]
    out = {"alpha_sequential": a_seq, "alpha_random": a_rand, "beta_read": b_read,
           "beta_write": b_write, "latencies": latency,
           "command": " ".join(prefix) + " [one --name=... job per run, as in JOBS]"}
    # the command as a site runs it, for comparison (it drops the test file's objects' pages
    # before each read job itself: the directory is the scratch root)
    stock = rig.cli("layout", "calibrate", str(rig.scratch), "--size",
                    f"{p['calibration_size'] // MiB}M", "--json")
    try:
        out["stock"] = json.loads(stock.stdout)
    except ValueError:
        out["stock"] = {"error": (stock.stderr or stock.stdout).strip()[:300]}
    return out


def fuse_hop(rig: LayoutRig, path: str) -> dict:
    """e and v as the FUSE hop: O_DIRECT reads through the mount of a file whose objects are in
    the page cache (read once before; the devices' counters show no reads meanwhile)."""
    def per_request(size: int, count: int) -> tuple[float, int]:
        offsets = tuple((i * size) % (8 * MiB) for i in range(count))
        r = rig.read_case([ReadJob(path, offsets, size)], drop=False)
        return r["wall"] / count, sum(r["device_reads"])

    per_request(1 * MiB, 8)             # warm: the objects into the page cache
    small = [per_request(4 * K, 400) for _ in range(3)]
    mid = [per_request(256 * K, 64) for _ in range(3)]
    large = [per_request(1 * MiB, 32) for _ in range(3)]
    l4k = statistics.median(x[0] for x in small)
    l256 = statistics.median(x[0] for x in mid)
    l1m = statistics.median(x[0] for x in large)
    return {"e": l4k, "v": max(0.0, (l1m - l256) / (768 * K)),
            "latency_4k": l4k, "latency_256k": l256, "latency_1m": l1m,
            "device_reads_meanwhile": sum(x[1] for x in small + mid + large)}


def model_params(cal: dict, hop: dict, which: str):
    from scratchkeeper.advisor.model import ModelParams
    if which == "paper":
        return ModelParams()
    storage = dict(alpha_sequential=cal["alpha_sequential"], alpha_random=cal["alpha_random"],
                   beta_read=cal["beta_read"], beta_write=cal["beta_write"])
    if which == "storage-only":
        return ModelParams(e=0.0, v=0.0, source="calibrated alpha, beta; e = v = 0", **storage)
    return ModelParams(e=hop["e"], v=hop["v"], source="calibrated alpha, beta; FUSE hop e, v",
                       **storage)


def choose(case: dict, params) -> dict:
    from scratchkeeper.advisor.advise import Workload, advise
    work = Workload.uniform(case["processes"], case["processes"], case["size"],
                            shared_file=case["mode"] == "shared", pattern=case["pattern"])
    advice = advise(work, params, OSTS, groups=GROUPS)
    return {"layout": advice.layout,
            "estimates": {e.layout: e.cost.total for e in advice.estimates}}


# ---------------------------------------------------------------- analysis

def analyse(results: dict) -> dict:
    rows = []
    for case in results["cases"]:
        times = {lay: statistics.median(w) for lay, w in case["walls"].items()}
        keys = {lay: tuple(k) for lay, k in case["keys"].items()}
        row = {"mode": case["mode"], "pattern": case["pattern"], "size": case["size"],
               "processes": case["processes"], "times": times, "keys": keys,
               "chosen": case["choice"]["calibrated"]["layout"]}
        row.update(outcome(row["chosen"], times, keys))
        est = sorted(case["choice"]["calibrated"]["estimates"].values())
        row["model_margin"] = est[1] / est[0] - 1 if len(est) > 1 and est[0] > 0 else None
        rows.append(row)
    alt = {}
    rules = [(w, lambda case, w=w: case["choice"][w]["layout"])
             for w in results["cases"][0]["choice"]]
    rules += [(f"always {lay}", lambda case, lay=lay: lay) for lay in LAYOUT_NAMES]
    for which, rule in rules:
        alt_rows = []
        for r, case in zip(rows, results["cases"]):
            chosen = rule(case)
            alt_rows.append(dict(r, chosen=chosen, **outcome(chosen, r["times"], r["keys"])))
        alt[which] = dict(correct_table(alt_rows, "pattern")["all"],
                          loss_total=loss_summary(alt_rows)["total"])
    slice_ = 0.1
    by_processes: dict[int, set] = {}
    for r in rows:
        by_processes.setdefault(r["processes"], set()).add(r["chosen"])
    return {"rows": rows, "by_pattern": correct_table(rows, "pattern"),
            "by_mode": correct_table(rows, "mode"), "loss": loss_summary(rows),
            "noise": tie_noise(rows), "alternatives": alt,
            "wrong_within_slice": sum(r["outcome"] == "wrong" and
                                      r["times"][r["chosen"]] - r["times"][r["best"]] < slice_
                                      for r in rows),
            "choice_by_processes": {p: sorted(c) for p, c in sorted(by_processes.items())},
            "close_calls": sum(r["model_margin"] is not None and r["model_margin"] < 0.05
                               for r in rows),
            "wrong_close_calls": sum(r["outcome"] == "wrong" and r["model_margin"] is not None
                                     and r["model_margin"] < 0.05 for r in rows)}


# ---------------------------------------------------------------- the run

def make_files(rig: LayoutRig, p: dict, cases: list[dict]) -> dict[tuple, list]:
    """Every layout key's files (a physically identical layout is the same file): key ->
    [(path on the mount, bytes)], made through the store before the mount starts."""
    files = {}
    for key, sizes in sorted(file_sizes(cases).items()):
        _, count, stripe = key
        files[key] = [(rig.make_file(f"{key_name(key)}-{i:02d}.dat", size, count, stripe,
                                     ost_list(key, i, p["osts"], p["groups"])), size)
                      for i, size in enumerate(sizes)]
    return files


def run(work: Path, p: dict) -> dict:
    cases = cases_of(p)
    sizes = file_sizes(cases)
    total = sum(sum(v) for v in sizes.values())
    say(f"{len(cases)} cases x 3 layouts x {p['repeats']} repeats; {len(sizes)} layouts made, "
        f"{total / MiB:.0f} MiB of files")
    rig = LayoutRig(work, osts=p["osts"], read_bps=p["read_bps"], read_iops=p["read_iops"],
                    readers=max(p["processes"]), settle=p["settle"])
    out: dict = {"plan": p}
    try:
        rig.build(total // p["osts"] + 2 * p["calibration_size"])
        files = make_files(rig, p, cases)
        hop_file = rig.make_file("hop.dat", 8 * MiB, 1, MiB, (0,))
        os.sync()
        rig.start()
        say("calibrating (fio through the mount, one OST)")
        out["calibration"] = calibrate_rig(rig, p)
        out["hop"] = fuse_hop(rig, hop_file)
        cal, hop = out["calibration"], out["hop"]
        say(f"alpha seq {cal['alpha_sequential'] * 1e3:.3f} ms, rand "
            f"{cal['alpha_random'] * 1e3:.3f} ms, read {1 / cal['beta_read'] / MiB:.1f} MiB/s;"
            f" FUSE hop e {hop['e'] * 1e6:.0f} us, v {hop['v'] * 1e9:.3f} ns/B")
        params = {w: model_params(cal, hop, w) for w in ("calibrated", "storage-only", "paper")}
        out["params"] = {w: asdict(v) for w, v in params.items()}
        for case in cases:
            case["choice"] = {w: choose(case, v) for w, v in params.items()}
            case["walls"] = {lay: [] for lay in LAYOUT_NAMES}
            case["device_ratio"] = {lay: [] for lay in LAYOUT_NAMES}
        order = list(range(len(cases)))
        started = time.monotonic()
        for rep in range(p["repeats"]):
            random.Random(f"{p['seed']}/order/{rep}").shuffle(order)
            for done, index in enumerate(order, 1):
                case = cases[index]
                jobs = jobs_for(case, files, p, rep)
                rotation = (rep + index) % 3
                for layout in LAYOUT_NAMES[rotation:] + LAYOUT_NAMES[:rotation]:
                    r = rig.read_case(jobs[layout])
                    case["walls"][layout].append(r["wall"])
                    case["device_ratio"][layout].append(sum(r["device_bytes"]) / r["bytes"])
                if done % 10 == 0 or done == len(cases):
                    say(f"repeat {rep + 1}/{p['repeats']}: {done}/{len(cases)} cases, "
                        f"{time.monotonic() - started:.0f} s")
        out["cases"] = [dict(c, keys={k: list(v) for k, v in c["keys"].items()})
                        for c in cases]
        out["files"] = {key_name(k): {"stripe_count": k[1], "stripe_size": k[2],
                                      "files": len(v), "bytes": sum(s for _, s in v),
                                      "ost_lists": [list(ost_list(k, i, p["osts"], p["groups"]))
                                                    for i in range(len(v))]}
                        for k, v in files.items()}
        stats = rig.cli("store", "stats", "--json")
        out["mount_log_tail"] = rig.log.read_text()[-2000:] if rig.log.exists() else ""
        out["store_stats_ok"] = stats.returncode == 0
    finally:
        rig.close()
        out["leftovers"] = rig.leftovers()
    return out


# ---------------------------------------------------------------- plot and report

COLOURS = {"1-DV": "#4c72b0", "2-D": "#55a868", "1-DH": "#c44e52"}
MARKS = {"1-DV": "V", "2-D": "2", "1-DH": "H"}


def fmt_size(size: int) -> str:
    return f"{size // MiB}M" if size >= MiB else f"{size // K}K"


def plot(results: dict, a: dict, path: Path) -> None:
    plt = harness.pyplot()
    from matplotlib.patches import Patch

    p = results["plan"]
    fig, axes = plt.subplots(2, 2, figsize=(12, 7.5))
    for ax, (mode, pattern) in zip(axes.flat, [(m, t) for m in MODES for t in PATTERNS]):
        for r in a["rows"]:
            if r["mode"] != mode or r["pattern"] != pattern:
                continue
            x, y = p["sizes"].index(r["size"]), p["processes"].index(r["processes"])
            shared_best = any(r["keys"][o] == r["keys"][r["best"]] for o in r["keys"]
                              if o != r["best"])
            ax.add_patch(plt.Rectangle((x - 0.5, y - 0.5), 1, 1, facecolor=COLOURS[r["best"]],
                                       alpha=0.85, hatch="//" if shared_best else None,
                                       edgecolor="white"))
            text = MARKS[r["chosen"]] + {"correct": "", "tie": " =", "wrong": " x"}[r["outcome"]]
            ax.text(x, y, text, ha="center", va="center", color="white", fontsize=11,
                    fontweight="bold")
        ax.set_xlim(-0.5, len(p["sizes"]) - 0.5)
        ax.set_ylim(-0.5, len(p["processes"]) - 0.5)
        ax.set_xticks(range(len(p["sizes"])), [fmt_size(s) for s in p["sizes"]])
        ax.set_yticks(range(len(p["processes"])), p["processes"])
        ax.set_xlabel("request size")
        ax.set_ylabel("processes")
        ax.set_title(f"{pattern}, {'one shared file' if mode == 'shared' else 'file per process'}")
    handles = [Patch(color=c, label=f"measured best {lay}") for lay, c in COLOURS.items()]
    fig.legend(handles=handles, loc="lower center", ncol=3)
    fig.suptitle("Measured-best layout (colour; hatched: another layout is physically the same) "
                 "and the model's choice\n(letter: V 1-DV, 2 2-D, H 1-DH; x wrong, = physically "
                 "the same layout as the best: a tie)", fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 0.96))
    harness.save_figure(fig, path)


def pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def device_ratio_text(results: dict) -> str:
    """Median bytes served / bytes read per layout and file mode, requests of 256 KiB and more
    (runs of an older results file did not keep the layout: nothing then)."""
    if not isinstance(results["cases"][0]["device_ratio"], dict):
        return ""
    parts = []
    for mode in MODES:
        for lay in LAYOUT_NAMES:
            values = [x for c in results["cases"] if c["mode"] == mode and c["size"] >= 256 * K
                      for x in c["device_ratio"][lay]]
            if values:
                parts.append(f"{mode} {lay} {statistics.median(values):.2f}")
    return "; for requests of 256 KiB and more, median per layout: " + ", ".join(parts)


def report(results: dict, a: dict) -> str:
    """The report (markdown) of ``results`` and their analysis ``a``, one section after another."""
    lines = (choices_section(results, a) + time_lost_section(a) + constants_section(results)
             + rig_section(results) + cases_section(results, a))
    lines += ["", "## Doubts", "", *results.get("doubts", []), ""]
    return "\n".join(lines)


def choices_section(results: dict, a: dict) -> list[str]:
    """The title, the run, and the correct choices per pattern and file mode (Table 4's shape)."""
    suffix = harness.suffix(results["quick"])
    lines = [
        "# Layout model verification on the scratch mount (the layout paper, Table 4)", "",
        f"`{results['command']}`, {results['date']}, {results['seconds'] / 60:.1f} min. "
        "It reports; it never fails on a speed goal. Data: "
        f"[results{suffix}.json](results{suffix}.json), plot: [{results['plot']}]"
        f"({results['plot']}).", "",
        "## Correct choices (Table 4's shape)", "",
        "A case is *correct* when the layout the model chose had the lowest median wall time; "
        "*tie* when the chosen layout is physically the same file layout (stripe count and "
        "size, after Lustre's 64 KiB minimum stripe) as the measured best under another name, "
        "so the measurement cannot tell them apart; *wrong* otherwise. A case is *tied* when "
        "the chosen layout is the same as another layout, whichever was fastest.", "",
        "| group | cases | correct | tie | wrong | rate, tied cases excluded | "
        "rate, tie counted correct | paper |", "|---|---|---|---|---|---|---|---|"]
    paper = {"random": "84.9 % (IB), 91.0 % (Eth.)", "sequential": "80.1 % (IB), 88.1 % (Eth.)"}
    for table in (a["by_pattern"], a["by_mode"]):
        for name, t in table.items():
            if table is a["by_mode"] and name == "all":
                continue
            label = {"shared": "one shared file", "fpp": "file per process"}.get(name, name)
            lines.append(f"| {label} | {t['cases']} | {t['correct']} | {t['ties']} | "
                         f"{t['wrong']} | {pct(t['rate_excluding_ties'])} "
                         f"({t['correct']}/{t['untied_cases']}) | "
                         f"{pct(t['rate_tie_as_correct'])} | {paper.get(name, '')} |")
    return lines


def time_lost_section(a: dict) -> list[str]:
    """What the wrong choices cost, the noise, and the choices other constants make."""
    loss, noise = a["loss"], a["noise"]
    lines = [
        "", "## Time lost by the model's choice", "",
        f"Over the {loss['wrong_cases']} wrong cases, t_chosen / t_best - 1: median "
        f"{pct(loss['median'])}, mean {pct(loss['mean'])}, max {pct(loss['max'])}; "
        f"{loss['within_5_percent']} of them within 5 %, {a['wrong_within_slice']} within one "
        "throttle slice (t_chosen - t_best < 100 ms). Over all cases together, "
        f"sum(t_chosen) / sum(t_best) - 1 = {pct(loss['total'])}.", "",
        "With the calibrated constants the model's choice depends on p alone here: "
        + ", ".join(f"p = {k}: {', '.join(v)}" for k, v in a["choice_by_processes"].items())
        + " (e and v are small beside alpha and s beta, and at m = p the Table 2 terms of "
        "alpha and s beta order the layouts the same way for every s). In "
        f"{a['close_calls']} cases the model's second-cheapest layout is within 5 % of its "
        f"choice ({a['wrong_close_calls']} of them wrong): for p >= 4 the three costs differ "
        "only in their alpha terms, which the sequential alpha makes small.", "",
        f"Noise: two names of the same physical layout (the same file, read in separate runs) "
        f"differed by a median {pct(noise['median'])}, at most {pct(noise['max'])} "
        f"({noise['pairs']} pairs); a wrong case whose loss is of that size is a coin toss.", "",
        "With other constants, and fixed rules for comparison (same measurements, only the "
        "choice changes):", "",
        "| choice by | correct | tie | wrong | rate, ties excluded | rate, tie correct | "
        "time lost, all cases |", "|---|---|---|---|---|---|---|"]
    for which, t in a["alternatives"].items():
        lines.append(f"| {which} | {t['correct']} | {t['ties']} | {t['wrong']} | "
                     f"{pct(t['rate_excluding_ties'])} | {pct(t['rate_tie_as_correct'])} | "
                     f"{pct(t['loss_total'])} |")
    return lines


def constants_section(results: dict) -> list[str]:
    """The constants calibrated on the rig (alpha, beta, e, v), and the site's command's."""
    p, cal, hop = results["plan"], results["calibration"], results["hop"]
    stock = results["calibration"].get("stock", {})
    lines = [
        "", "## Calibrated constants", "",
        f"- alpha sequential {cal['alpha_sequential'] * 1e3:.3f} ms, alpha random "
        f"{cal['alpha_random'] * 1e3:.3f} ms, read beta 1/({1 / cal['beta_read'] / MiB:.1f} "
        f"MiB/s) (write beta 1/({1 / cal['beta_write'] / MiB:.0f} MiB/s), writes are not "
        "throttled and not used). Mean fio latencies: " + ", ".join(
            f"{k} {v * 1e3:.3f} ms" for k, v in cal["latencies"].items()) + ".",
        "- How: `scratchkeeper.advisor.calibrate`'s fio jobs and options (`fio_argv`: psync, "
        f"O_DIRECT, one job at a time, {p['calibration_size'] // MiB} MiB file in the mount's "
        "root, whose default layout is one stripe: one OST, as the paper measured one storage "
        "node), one fio run per job with the objects' pages dropped before each read job, and "
        "its `latencies_of` and `constants`.",
        "- The command as a site runs it, `scratchkeeper layout calibrate SCRATCH` (it drops "
        "the test file's objects' pages before each read job itself: SCRATCH is in the "
        "scratch root), gave "
        + (f"alpha seq {stock['startup_sequential_seconds'] * 1e3:.3f} ms, alpha rand "
           f"{stock['startup_random_seconds'] * 1e3:.3f} ms, read "
           f"{stock['read_bandwidth'] / MiB:.0f} MiB/s" if "read_bandwidth" in stock
           else f"no result ({stock})")
        + " (a run of its own: the throttle's 100 ms slices make single runs differ).",
        f"- e = {hop['e'] * 1e6:.1f} us, v = {hop['v'] * 1e9:.3f} ns/B "
        f"({1 / hop['v'] / MiB if hop['v'] else float('inf'):.0f} MiB/s): there is no network; "
        "the client-to-store hop here is FUSE, measured as the mean latency of a 4 KiB O_DIRECT "
        "read through the mount of a file whose objects are in the page cache (e) and the "
        "per-byte slope between 256 KiB and 1 MiB such reads (v) "
        f"({hop['device_reads_meanwhile']} device reads meanwhile). The table above also gives "
        "the choices with e = v = 0 and with the paper's Table 3 (InfiniBand) constants.", "",
    ]
    return lines


def rig_section(results: dict) -> list[str]:
    """The OSTs, their throttle, the files, the readers and the machine."""
    p = results["plan"]
    lines = [
        "## Rig", "",
        f"- {p['osts']} OSTs, each an ext4 file system on its own loop device whose image is a "
        "file in a tmpfs (no disk under it), mounted `noatime`; the store on them, "
        "`scratchkeeper mount` of it (`mount.threads` = 64, other mount settings default: "
        "`max_request` 1 MiB, so the kernel sends an O_DIRECT read of 4 MiB as 4 requests).",
        f"- Every device throttled on its own by the cgroup-v1 blkio controller of the root "
        f"cgroup: `blkio.throttle.read_bps_device` = {p['read_bps'] // MiB} MiB/s and "
        f"`read_iops_device` = {p['read_iops']} reads/s (the two meet at "
        f"{p['read_bps'] // p['read_iops'] // K} KiB). The throttle delays a read until both "
        "budgets allow it, so a read costs about the larger of 1/iops and s/bps, not their sum "
        "as the model's alpha + s beta; and it releases reads per 100 ms slice, so an idle "
        "device serves a burst at once.",
        "- Files made through the store (`create` with stripe count, size and OST list, as "
        "`store put -c -S -o`), the three layouts by `advise.stripe_settings` (the layout paper's §4): "
        "shared file on all OSTs in order; a file per process on one OST round-robin (1-DV), "
        "the 2 OSTs of group i mod 2 (2-D), all 4 rotated (1-DH). A physically identical "
        "layout is the same file. Files: " + ", ".join(
            f"{n} ({f['files']} x, {f['bytes'] / MiB:.0f} MiB)"
            for n, f in results["files"].items()) + ".",
        "- Reads: reader processes (forked once, one per process of the case), each `pread` "
        "with O_DIRECT of the request size into an mmap buffer; started together (each opens "
        "its file, then all are told to go); wall time = last end - first start. Before every "
        "run the objects' pages are dropped (`fdatasync` and `POSIX_FADV_DONTNEED` on every "
        f"object file) and the devices left idle {p['settle']} s, so that every run starts on "
        "fresh throttle slices. "
        f"Bytes the devices served / bytes read: min {min(results['device_ratios']):.2f}, "
        f"median {statistics.median(results['device_ratios']):.2f} over all runs "
        "(`blkio.throttle.io_service_bytes`; above 1 is the OSTs' readahead)"
        + device_ratio_text(results) + ".",
        f"- Requests per process: the run's N = {p['target']} s x {p['osts']} OSTs / "
        "(c/iops + s/bps) (c = 1, or s / 128 KiB for sequential requests below the OSTs' "
        "readahead), shared by the processes, at least 1 each; a process reads its region "
        "(in the shared file, process i of p owns the request-size blocks i, i + p, i + 2p, "
        "..., IOR's shared-file pattern; with a file per process, its file): its first blocks "
        "in order (sequential), or distinct blocks of its own drawn at random (random). "
        f"{p['repeats']} repeat(s), the three layouts of a case one after another, their order "
        "rotated, the cases shuffled per repeat; the median per layout.",
        f"- Machine: {results['machine']}. All processes on this one node (m = p): 16 reader "
        "processes and the mount's threads share 2 cores, and the machine is shared with "
        "another engineer's tests.", "",
    ]
    return lines


def cases_section(results: dict, a: dict) -> list[str]:
    """Every case's median wall time per layout, the best, the chosen, the outcome."""
    lines = [
        "## Cases", "",
        "Median wall ms per layout; (=) marks a layout physically the same as another.", "",
        "| mode | pattern | s | p | req/proc | 1-DV | 2-D | 1-DH | best | chosen | outcome | "
        "loss |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r, case in zip(a["rows"], results["cases"]):
        cells = []
        for lay in LAYOUT_NAMES:
            same = any(r["keys"][o] == r["keys"][lay] for o in LAYOUT_NAMES if o != lay)
            cells.append(f"{r['times'][lay] * 1e3:.0f}{' (=)' if same else ''}")
        lines.append(f"| {r['mode']} | {r['pattern']} | {fmt_size(r['size'])} | "
                     f"{r['processes']} | {case['requests']} | " + " | ".join(cells)
                     + f" | {r['best']} | {r['chosen']} | {r['outcome']} | {pct(r['loss'])} |")
    return lines


def doubts(results: dict, a: dict) -> list[str]:
    out = [
        "- The mount reads a request that spans several objects of an unmirrored file in "
        "parallel, one `preadv` per object (`dispatch_striped`, docs/mount.rst), as the model's "
        "1-DH and 2-D terms (s beta / n) assume; its read pool has 8 threads for all the "
        "mount's requests, so with many readers the parallelism is the pool's, not the "
        "OSTs'. The previous report (before cfdc164) read the pieces one after another.",
        "- The OSTs are throttled loop devices, not disks: no seek (random costs more only "
        "through lost readahead), a per-slice burst, max(1/iops, s/bps) per read.",
        "- The blkio throttle grants its budget in 100 ms slices, so the wall times move in "
        "steps of about 100 ms on runs of 0.3 to 3 s: two layouts within a step of each other "
        "are not told apart reliably (see the noise of identical layouts above). Lower rates "
        "(longer runs) would shrink the steps at the cost of the 20-minute budget.",
        "- With a shared file and requests of 256 KiB or more, 1-DV (stripe = request size, "
        "process i on OST i mod 4) measured slower than 2-D or 1-DH at p >= 4 in most cases, "
        "though every OST serves the same bytes in each layout; the devices did not serve more "
        "bytes for it (readahead is not the cause). Not explained here; one request's bytes "
        "all on one throttled device (against 2-4 devices sharing it) is the suspect.",
        "- 16 reader processes and the mount's threads run on 2 cores shared with another "
        "engineer's tests; the sequential small-request cases are partly CPU-bound.",
    ]
    if any(results["leftovers"]):
        out.append(f"- Left behind after teardown: {results['leftovers']}")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.layout",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="p in 1, 4, 16; s in 4K, 256K, 4M; 1 repeat")
    parser.add_argument("--render", metavar="RESULTS_JSON", type=Path,
                        help="write the report and plot again from a results JSON (no rig)")
    args = parser.parse_args(argv)
    if args.render:
        return finish(json.loads(args.render.read_text()))
    harness.require_root("layout", "FUSE, loop devices, blkio, tmpfs")
    harness.require_paths("layout", [BLKIO / "blkio.throttle.read_iops_device"])
    harness.require_tools("layout", ["fio"], "needed for the calibration")
    p = plan(args.quick)
    started = time.monotonic()
    with harness.work_folder("layout", "sk-layout-bench-", "/var/tmp", mounts=lambda work: [
            work / "scratch", work / "images"] + [work / "store" / f"ost{i:04d}"
                                                  for i in range(p["osts"])]) as work:
        results = run(work, p)
    suffix = harness.suffix(args.quick)
    results.update({
        "quick": args.quick, "seconds": time.monotonic() - started,
        "date": harness.utc_now(),
        "command": "python -m benchmarks.layout" + (" --quick" if args.quick else ""),
        "machine": f"{platform.node()}, Linux {platform.release()}, {os.cpu_count()} cores, "
                   f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB",
        "plot": f"choices{suffix}.png",
        "device_ratios": [x for c in results["cases"] for v in c["device_ratio"].values()
                          for x in v]})
    return finish(results)


def finish(results: dict) -> int:
    """Analyse, write results, report and plot (also ``--render``: again from the JSON)."""
    suffix = harness.suffix(results["quick"])
    analysis = analyse(results)
    results["doubts"] = doubts(results, analysis)
    results["analysis"] = {k: v for k, v in analysis.items() if k != "rows"}
    results["rows"] = [dict(r, keys={k: list(v) for k, v in r["keys"].items()})
                       for r in analysis["rows"]]
    harness.write_json(REPORT_DIR / f"results{suffix}.json", results, default=str)
    plot(results, analysis, REPORT_DIR / results["plot"])
    (REPORT_DIR / f"report{suffix}.md").write_text(report(results, analysis))
    for name, t in analysis["by_pattern"].items():
        say(f"{name}: {t['correct']} correct, {t['ties']} ties, {t['wrong']} wrong of "
            f"{t['cases']}: {pct(t['rate_excluding_ties'])} excluding ties, "
            f"{pct(t['rate_tie_as_correct'])} tie as correct")
    say(f"report {REPORT_DIR / f'report{suffix}.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
