"""Read QoS benchmark, in simulation (the flash QoS paper, §V; scratchkeeper.qos.simulate).

1. Synthetic workloads (§V.C): 5, 14 and 27 distinct buckets at the start of every
   interval of 0.133, 0.266, 0.399 ms (M = 1, 2, 3) on 9 devices, 3 copies, 36 buckets, a bucket
   read in 0.132507 ms: response time mean, standard deviation and maximum of the (9,3,1)
   design with design-theoretic retrieval beside RAID-1 mirrored and chained (each read sent to
   the copy whose device finishes first, as a RAID-1 controller balances reads), the paper's
   Table III; the same three layouts with the solver's optimal retrieval as a second table.
   Goal: every (9,3,1) interval within its guarantee (exit 1 otherwise).
2. Real request traces: the DXT read traces of ../shared/darshan-logs (PyDarshan) cut into
   data blocks and replayed as recorded, each trace split into 8 parts: the single-copy striping
   ("original"), deterministic admission with online retrieval, with and without frequent
   itemset mining (the map mined on the previous part), design-theoretic interval retrieval for
   the delay comparison, statistical admission for several epsilon (Figures 8-12 shapes).

    .venv/bin/python -m benchmarks.qos [--quick]

Writes docs/benchmarks/qos/report.md (report-quick.md with --quick), results JSON and PNG plots
beside it.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

from benchmarks import harness
from scratchkeeper.qos.admission import (
    DeterministicAdmission,
    StatisticalAdmission,
    sample_retrieval_probabilities,
)
from scratchkeeper.qos.designs import NAMED
from scratchkeeper.qos.fim import fim_block_map, frequent_pairs, transactions
from scratchkeeper.qos.placement import (
    DataBlockMap,
    chained_allocation,
    design_allocation,
    mirrored_allocation,
)
from scratchkeeper.qos.simulate import replay_interval, replay_online, replay_single_copy, run_intervals
from scratchkeeper.qos.traces import block_requests, read_dxt_reads

REPORT_DIR = harness.report_dir("qos")
LOGS = Path(os.environ.get("SK_DARSHAN_LOGS", harness.REPO.parent / "shared" / "darshan-logs"))
SERVICE_8K_MS = 0.132507   # the paper's flash read of one 8 KiB block (DiskSim, §V.A)
PARTS = 8
EPSILONS = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)

#: trace file, DXT module, block size, service time per block (ms), design (N, c), label
TRACES = (
    ("nonmpi_dxt_anonymized.darshan", "DXT_POSIX", 8192, SERVICE_8K_MS, (9, 3),
     "non-MPI application, 1 process (8 KiB blocks, (9,3,1))"),
    ("treddy_mpi-io-test_id4373053_6-2-60198-9815401321915095332_1.darshan", "DXT_POSIX",
     1 << 20, 1.0, (13, 3), "mpi-io-test, 32 ranks (1 MiB stripe objects, (13,3,1))"),
)


def summary(values: list[float]) -> dict:
    return {"mean": statistics.fmean(values) if values else 0.0,
            "std": statistics.pstdev(values) if values else 0.0,
            "max": max(values) if values else 0.0, "count": len(values)}


# ---------------------------------------------------------------- synthetic (Table III)

def synthetic(requests_total: int, seed: int) -> dict:
    design = NAMED[9, 3]
    layouts = {"RAID-1 mirrored": mirrored_allocation(9, 3, 36),
               "RAID-1 chained": chained_allocation(9, 3, 36),
               "(9,3,1) design-theoretic": design_allocation(design)}
    rows = []
    for accesses in (1, 2, 3):
        size = design.guarantee(accesses)
        interval = round(0.133 * accesses, 3)
        rng = random.Random(seed + accesses)
        buckets = [rng.sample(range(36), size) for _ in range(requests_total // size)]
        row = {"size": size, "accesses": accesses, "interval_ms": interval, "schemes": {}}
        for name, allocation in layouts.items():
            for retrieval in ("natural", "optimal"):
                method = retrieval if retrieval == "optimal" else (
                    "design" if name.startswith("(9,3,1)") else "queue")
                outcomes = run_intervals(allocation, buckets, interval, SERVICE_8K_MS, method)
                late_intervals = len({o.arrival for o in outcomes
                                      if o.response > interval * (1 + 1e-9)})
                row["schemes"][f"{name}/{retrieval}"] = dict(
                    summary([o.response for o in outcomes]), method=method,
                    late_intervals=late_intervals, intervals=len(buckets))
        rows.append(row)
    return {"requests_per_trace": requests_total, "rows": rows}


# ---------------------------------------------------------------- real traces

def part_of(arrival: float, start: float, span: float) -> int:
    return min(PARTS - 1, int((arrival - start) / span * PARTS)) if span > 0 else 0


def per_part(requests, outcomes, start, span, value) -> list[dict]:
    groups: list[list] = [[] for _ in range(PARTS)]
    for request, outcome in zip(requests, outcomes):
        groups[part_of(request.arrival, start, span)].append(outcome)
    return [value(group) for group in groups]


def qos_part(group: list, guarantee: float) -> dict:
    served = [o.served_in for o in group]
    delays = [o.delay for o in group if o.delay > 0]
    return {"requests": len(group), "served_mean": statistics.fmean(served) if served else 0.0,
            "served_max": max(served) if served else 0.0,
            "response_mean": statistics.fmean(o.response for o in group) if group else 0.0,
            "delayed_pct": 100.0 * len(delays) / len(group) if group else 0.0,
            "delay_mean": statistics.fmean(delays) if delays else 0.0,
            "late": sum(1 for s in served if s > guarantee * (1 + 1e-9))}


def replay_trace(spec, samples: int) -> dict:
    filename, module, block_size, service_ms, key, label = spec
    reads = read_dxt_reads(LOGS / filename, module)
    # times in ms from here on
    requests = [dataclasses.replace(r, arrival=r.arrival * 1000.0)
                for r in block_requests(reads, block_size)]
    design = NAMED[key]
    allocation = design_allocation(design)
    devices = allocation.devices
    interval = service_ms            # M = 1: one access per interval
    start = requests[0].arrival
    span = requests[-1].arrival - start + 1e-9

    # FIM: map of part j mined on part j-1 (transactions = blocks requested within one interval)
    plain = DataBlockMap(allocation)
    maps = [plain]
    mining = []
    matched = [0.0]
    by_part: list[list] = [[] for _ in range(PARTS)]
    for request in requests:
        by_part[part_of(request.arrival, start, span)].append(request)
    for part in range(1, PARTS):
        began = time.perf_counter()
        pairs = frequent_pairs(transactions(((r.arrival, r.data_block) for r in by_part[part - 1]),
                                            interval), 1)
        mapping = fim_block_map(allocation, pairs)
        mining.append({"part": part, "pairs": len(pairs), "seconds": time.perf_counter() - began})
        maps.append(mapping)
        current = by_part[part]
        matched.append(100.0 * sum(1 for r in current if r.data_block in mapping.assigned)
                       / len(current) if current else 0.0)

    # The same mining on the part itself: what FIM gives when the history matches the future
    # (an upper bound for the previous-part map, not something a store can do).
    oracle = [fim_block_map(allocation, frequent_pairs(transactions(
        ((r.arrival, r.data_block) for r in by_part[part]), interval), 1))
        for part in range(PARTS)]

    def fim_map(request):
        return maps[part_of(request.arrival, start, span)]

    def oracle_map(request):
        return oracle[part_of(request.arrival, start, span)]

    result = {"label": label, "file": filename, "module": module, "block_size": block_size,
              "service_ms": service_ms, "design": design.name, "interval_ms": interval,
              "reads": len(reads), "block_requests": len(requests),
              "distinct_blocks": len({r.data_block for r in requests}),
              "span_ms": span, "guarantee": design.guarantee(1), "fim_matched_pct": matched,
              "fim_mining": mining}

    original = replay_single_copy(requests, devices, service_ms,
                                  lambda r: (r.file_id + r.block_index) % devices)
    result["original"] = {
        "all": summary([o.response for o in original]),
        "parts": per_part(requests, original, start, span,
                          lambda g: summary([o.response for o in g]))}

    runs = {}
    for name, mapping in (("no FIM", plain), ("FIM", fim_map), ("FIM mined on the same part", oracle_map)):
        for mode, replay in (("online", replay_online), ("interval", replay_interval)):
            outcome = replay(requests, allocation, mapping, service_ms, interval,
                             DeterministicAdmission(design.copies, 1))
            runs[f"deterministic {mode}, {name}"] = {
                "counters": dataclasses.asdict(outcome.counters), "late": outcome.late_requests,
                "all": qos_part(outcome.outcomes, service_ms),
                "parts": per_part(requests, outcome.outcomes, start, span,
                                  lambda g: qos_part(g, service_ms))}
    result["deterministic"] = runs

    probabilities = sample_retrieval_probabilities(allocation, 1, devices, samples, seed=11)
    result["probabilities"] = probabilities
    statistical = []
    for epsilon in EPSILONS:
        policy = StatisticalAdmission(design.copies, 1, probabilities, epsilon)
        outcome = replay_online(requests, allocation, fim_map, service_ms, interval, policy)
        statistical.append({"epsilon": epsilon, "counters": dataclasses.asdict(outcome.counters),
                            "late": outcome.late_requests, "risk": policy.risk(),
                            "all": qos_part(outcome.outcomes, service_ms)})
    result["statistical"] = statistical
    return result


# ---------------------------------------------------------------- plots and report

def _gaps(parts: list[dict], key: str) -> list[float]:
    """A part's value, NaN (a gap in the plot) for a part with no request."""
    return [p[key] if p.get("requests", p.get("count")) else math.nan for p in parts]


def plot_trace(trace: dict, path: Path) -> None:
    plt = harness.pyplot()
    parts = list(range(1, PARTS + 1))
    det = trace["deterministic"]
    online, online_fim = det["deterministic online, no FIM"], det["deterministic online, FIM"]
    interval_fim = det["deterministic interval, FIM"]
    oracle = det["deterministic online, FIM mined on the same part"]
    figure, axes = plt.subplots(2, 3, figsize=(15, 8))
    ax = axes[0][0]
    ax.plot(parts, _gaps(trace["original"]["parts"], "mean"), "o-", label="original (1 copy)")
    ax.plot(parts, _gaps(online_fim["parts"], "served_mean"), "s-", label="deterministic QoS")
    ax.axhline(trace["service_ms"], color="grey", ls=":", label="guarantee")
    ax.set_title("(a) average response (ms)")
    ax.legend(fontsize=8)
    ax = axes[0][1]
    ax.plot(parts, _gaps(trace["original"]["parts"], "max"), "o-", label="original (1 copy)")
    ax.plot(parts, _gaps(online_fim["parts"], "served_max"), "s-", label="deterministic QoS")
    ax.axhline(trace["service_ms"], color="grey", ls=":", label="guarantee")
    ax.set_title("(b) maximum response (ms)")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax = axes[0][2]
    ax.plot(parts, _gaps(online["parts"], "delayed_pct"), "o-", label="no FIM")
    ax.plot(parts, _gaps(online_fim["parts"], "delayed_pct"), "s-", label="FIM")
    ax.plot(parts, _gaps(oracle["parts"], "delayed_pct"), "^-",
            label="FIM mined on the same part")
    ax.set_title("(c) delayed requests (%)")
    ax.legend(fontsize=8)
    ax = axes[1][0]
    ax.plot(parts, _gaps(online_fim["parts"], "delay_mean"), "o-", label="online")
    ax.plot(parts, _gaps(interval_fim["parts"], "delay_mean"), "s-",
            label="design-theoretic (interval)")
    ax.set_title("(d) average delay of delayed requests (ms)")
    ax.legend(fontsize=8)
    ax = axes[1][1]
    ax.bar(parts, trace["fim_matched_pct"])
    ax.set_title("(e) requests on blocks placed by FIM (%)")
    ax = axes[1][2]
    epsilons = [s["epsilon"] for s in trace["statistical"]]
    ax.plot(epsilons, [s["all"]["delayed_pct"] for s in trace["statistical"]], "o-",
            label="delayed (%)")
    ax.plot(epsilons, [100.0 * s["late"] / max(1, s["all"]["requests"])
                       for s in trace["statistical"]], "s-", label="late (%)")
    ax2 = ax.twinx()
    ax2.plot(epsilons, [s["all"]["response_mean"] for s in trace["statistical"]], "^--",
             color="black", label="mean response (ms)")
    ax.set_xscale("symlog", linthresh=0.01)
    ax.set_title("(f) statistical admission vs epsilon")
    ax.legend(fontsize=8, loc="upper left")
    ax2.legend(fontsize=8, loc="upper right")
    for ax in list(axes[0]) + list(axes[1])[:2]:
        ax.set_xlabel("trace part")
    axes[1][2].set_xlabel("epsilon")
    figure.suptitle(trace["label"])
    figure.tight_layout()
    harness.save_figure(figure, path, dpi=90)


def write_report(results: dict, path: Path) -> None:
    lines = ["# Read QoS benchmark (simulation)", "",
             f"Generated by `python -m benchmarks.qos{' --quick' if results['quick'] else ''}` on "
             f"{results['when']} ({results['machine']}, Python {platform.python_version()}), "
             f"{results['seconds']:.0f} s. Everything here is simulated "
             "(`scratchkeeper.qos.simulate`): a device reads one bucket in a fixed service time, "
             "one queue per device, first come first served. Nothing was read from a mount.", "",
             "## Synthetic workloads (the paper's Table III)", "",
             f"{results['synthetic']['requests_per_trace']} block requests per workload, "
             "distinct buckets drawn at random from 36 in every interval, 9 devices, 3 copies, "
             f"{SERVICE_8K_MS} ms per bucket. RAID-1 layouts send each read to the copy whose device "
             "finishes first; the design uses design-theoretic retrieval. Response time = end of "
             "the read - start of its interval (ms).", "",
             "| blocks | interval (ms) | mirrored avg | std | max | chained avg | std | max | "
             "(9,3,1) avg | std | max |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    names = ("RAID-1 mirrored", "RAID-1 chained", "(9,3,1) design-theoretic")
    for retrieval in ("natural", "optimal"):
        if retrieval == "optimal":
            lines += ["", "The same intervals with the solver's optimal retrieval for every layout "
                      "(`select_replicas` with each device's backlog), so only the placement "
                      "differs:", "",
                      "| blocks | interval (ms) | mirrored avg | std | max | chained avg | std | "
                      "max | (9,3,1) avg | std | max |",
                      "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for row in results["synthetic"]["rows"]:
            cells = [str(row["size"]), f"{row['interval_ms']:.3f}"]
            for name in names:
                s = row["schemes"][f"{name}/{retrieval}"]
                cells += [f"{s['mean']:.3f}", f"{s['std']:.3f}", f"{s['max']:.3f}"]
            lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Intervals in which some read ended after the interval (guarantee missed):", ""]
    for row in results["synthetic"]["rows"]:
        parts = [f"{name}: {row['schemes'][f'{name}/natural']['late_intervals']} "
                 f"(optimal retrieval {row['schemes'][f'{name}/optimal']['late_intervals']})"
                 for name in names]
        lines.append(f"- {row['size']} blocks / {row['interval_ms']:.3f} ms, "
                     f"{row['schemes'][f'{names[0]}/natural']['intervals']} intervals: "
                     + "; ".join(parts))
    lines += ["", f"**Goal: the (9,3,1) guarantee holds in every interval: "
              f"{'met' if results['guarantee_met'] else 'NOT met'}.**", ""]

    lines += ["## Real request traces (DXT, replayed as recorded)", "",
              "Each read of the trace becomes one request per data block it touches, at the read's "
              "start time. Original = the file striped over all devices with one copy, block i of "
              "a file on device (file + i) mod N. QoS = 3 copies placed by the design, "
              "deterministic admission of at most 5 requests per interval T = one service time "
              "(M = 1), the rest wait for the next interval; online retrieval serves admitted "
              "requests as they arrive. *Served in* = end of the read - admission, what the "
              "guarantee bounds; *late* = admitted requests served in more than T; *delayed by "
              "admission* = requests that waited at least one interval for admission; *waited* "
              "= requests that started after they arrived (online: delayed by admission; "
              "interval: every request waits for the next interval's start). FIM: the map "
              "of part j is mined from part j-1 (pairs of blocks requested within one interval, "
              "support >= 1); part 1 has none.", ""]
    for trace in results["traces"]:
        lines += [f"### {trace['label']}", "",
                  f"`{trace['file']}`, {trace['module']}: {trace['reads']} reads, "
                  f"{trace['block_requests']} block requests on {trace['distinct_blocks']} distinct "
                  f"blocks over {trace['span_ms'] / 1000:.1f} s; {trace['service_ms']} ms per "
                  f"block, T = {trace['interval_ms']} ms, design {trace['design']}.", "",
                  f"Original: response mean {trace['original']['all']['mean']:.3f} ms, max "
                  f"{trace['original']['all']['max']:.3f} ms.", "",
                  "| run | admitted | delayed by admission | waited (%) | mean wait of those (ms) "
                  "| served in, mean | served in, max | late requests | late intervals "
                  "| response mean (ms) |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for name, run in trace["deterministic"].items():
            a = run["all"]
            lines.append(f"| {name} | {run['counters']['admitted']} | "
                         f"{run['counters']['delayed']} | {a['delayed_pct']:.1f} | "
                         f"{a['delay_mean']:.3f} | {a['served_mean']:.3f} | {a['served_max']:.3f} | "
                         f"{run['late']} | {run['counters']['violations']} | "
                         f"{a['response_mean']:.3f} |")
        lines += ["", "Statistical admission (online retrieval, FIM), P_k sampled with repetition "
                  "(" + ", ".join(f"P_{k} = {p:.3f}" for k, p in trace["probabilities"].items()
                                  if k > trace["guarantee"]) + "):", "",
                  "| epsilon | waited (%) | mean wait of those (ms) | response mean (ms) | late requests "
                  "| late intervals | Q at the end |", "|---:|---:|---:|---:|---:|---:|---:|"]
        for s in trace["statistical"]:
            lines.append(f"| {s['epsilon']} | {s['all']['delayed_pct']:.1f} | "
                         f"{s['all']['delay_mean']:.3f} | {s['all']['response_mean']:.3f} | "
                         f"{s['late']} | {s['counters']['violations']} | {s['risk']:.4f} |")
        mining = trace["fim_mining"]
        lines += ["", "FIM: requests on blocks placed by the mined map, per part: "
                  + ", ".join(f"{m:.1f}%" for m in trace["fim_matched_pct"])
                  + f"; mining a part took at most {max(m['seconds'] for m in mining):.3f} s "
                  f"({max(m['pairs'] for m in mining)} pairs at most).", "",
                  f"![{trace['label']}]({trace['plot']})", ""]
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.qos", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="2,000 synthetic requests per workload (10,000), 500 samples per P_k (3,000)")
    args = parser.parse_args(argv)
    began = time.monotonic()
    REPORT_DIR.mkdir(parents=True, exist_ok=True)
    suffix = harness.suffix(args.quick)
    results = {"quick": args.quick, "when": harness.utc_now(),
               "machine": f"{platform.machine()}, {os.cpu_count()} CPUs"}
    results["synthetic"] = synthetic(2000 if args.quick else 10000, seed=1)
    design_key = "(9,3,1) design-theoretic/natural"
    results["guarantee_met"] = all(row["schemes"][design_key]["late_intervals"] == 0
                                   for row in results["synthetic"]["rows"])
    results["traces"] = []
    for spec in TRACES:
        trace = replay_trace(spec, 500 if args.quick else 3000)
        trace["plot"] = f"trace-{spec[0].split('_')[0]}{suffix}.png"
        plot_trace(trace, REPORT_DIR / trace["plot"])
        results["traces"].append(trace)
        print(f"qos: {trace['label']}: done", flush=True)
    results["seconds"] = time.monotonic() - began
    harness.write_json(REPORT_DIR / f"results{suffix}.json", results, default=str)
    write_report(results, REPORT_DIR / f"report{suffix}.md")
    print(f"qos: guarantee of the (9,3,1) design in every interval: "
          f"{'met' if results['guarantee_met'] else 'NOT met'}; report "
          f"{REPORT_DIR / f'report{suffix}.md'}")
    return 0 if results["guarantee_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
