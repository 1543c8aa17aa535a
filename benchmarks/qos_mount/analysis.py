"""What the qos_mount benchmark's results say: per M and scheme the response times in accesses,
the intervals past M accesses, the busiest OST against the optimum retrieval, the mount's own
admission counters; the same under interval retrieval, with admission off, and the mount's
overhead. Also the simulation's rows (``benchmarks.qos``) to set beside them."""

from __future__ import annotations

import json
import statistics
from collections import Counter

from benchmarks.qos_mount.params import (
    ACCESSES,
    OSTS,
    SCHEMES,
    SIM_RESULTS,
    START_OFFSET,
    guarantee,
    summary,
)


def best_accesses(results: dict, ids: list[int]) -> int:
    """The fewest accesses any retrieval of these pieces needs (design-theoretic retrieval,
    an augmenting-path b-matching: the optimum on equal devices)."""
    from scratchkeeper.qos.retrieval import design_theoretic_retrieval
    return design_theoretic_retrieval([results["piece_osts"][i] for i in ids], OSTS).accesses


def analyse(results: dict) -> dict:
    tau = results["tau"]
    table = online(results, tau)
    device_reads = sum(row["device_reads"] for t in table.values()
                       for s, row in t["rows"].items() if s in SCHEMES)
    requests = sum(row["requests"] for t in table.values()
                   for s, row in t["rows"].items() if s in SCHEMES)
    return {"table": table, "offered": offered(results, tau), "overhead": overhead(results),
            "device_reads": device_reads, "requests": requests,
            "interval": interval(results, tau)}


def online(results: dict, tau: float) -> dict:
    """Per M: each scheme's intervals under deterministic admission and online retrieval, and
    the design offered 2S every second interval."""
    table = {}
    for m_key, out in results["qos"].items():
        m = int(m_key)
        threshold = (m - 0.5) * tau
        rows = {}
        for scheme in SCHEMES:
            ivs = [iv for iv in out["runs"][0]["intervals"] if iv["tag"] == scheme]
            resp = [d for iv in ivs for d in iv["done"]]
            loads = [max(iv["ost_reads"].values()) for iv in ivs]
            best = [best_accesses(results, iv["pieces"]) for iv in ivs]
            dev = sum(sum(iv["device_reads"].values()) for iv in ivs)
            rows[scheme] = dict(
                summary(resp), intervals=len(ivs), requests=len(resp),
                accesses_mean=1 + statistics.fmean(resp) / tau,
                accesses_max=1 + max(resp) / tau,
                late_intervals=sum(max(iv["done"]) > threshold for iv in ivs),
                late_requests=sum(d > threshold for d in resp),
                after_t=sum(max(iv["done"]) > out["T"] for iv in ivs),
                over_m_load=sum(x > m for x in loads),
                best_over_m=sum(b > m for b in best),
                mount_worse=sum(x > b for x, b in zip(loads, best)),
                max_load=max(loads), load_hist=dict(Counter(loads)),
                admitted=sum(iv["qos"].get("admitted", 0) for iv in ivs),
                delayed=sum(iv["qos"].get("delayed", 0) for iv in ivs),
                violations=sum(iv["qos"].get("violations", 0) for iv in ivs),
                device_reads=dev, ok=all(all(iv["ok"]) for iv in ivs),
                issue_spread_max=max(max(iv["issued"]) - min(iv["issued"]) for iv in ivs),
                issue_late_max=max(max(iv["issued"]) for iv in ivs))
        extra = out["runs"][1]["intervals"]
        resp = [d for iv in extra for d in iv["done"]]
        rows["admitted_2s"] = dict(
            summary(resp), intervals=len(extra), requests=len(resp),
            admitted=sum(iv["qos"].get("admitted", 0) for iv in extra),
            delayed=sum(iv["qos"].get("delayed", 0) for iv in extra),
            violations=sum(iv["qos"].get("violations", 0) for iv in extra),
            ok=all(all(iv["ok"]) for iv in extra),
            served_within_2t=sum(d <= 2 * out["T"] for d in resp))
        table[m] = {"k": guarantee(m), "T": out["T"], "threshold": threshold, "rows": rows,
                    "memory": out["memory"], "qos_end": out["runs"][0]["qos_end"]}
    return table


def interval(results: dict, tau: float) -> dict:
    """Per M: each scheme's intervals under interval retrieval, timed from the retrieval's
    start (the next interval boundary)."""
    table = {}
    for m_key, out in results.get("interval", {}).items():
        m = int(m_key)
        shift = out["T"] - START_OFFSET
        rows = {}
        for scheme in SCHEMES:
            ivs = [iv for iv in out["runs"][0]["intervals"] if iv["tag"] == scheme]
            resp = [d - shift for iv in ivs for d in iv["done"]]
            loads = [max(iv["ost_reads"].values()) for iv in ivs]
            best = [best_accesses(results, iv["pieces"]) for iv in ivs]
            rows[scheme] = dict(
                summary(resp), intervals=len(ivs), requests=len(resp),
                before_start=sum(d < 0 for d in resp),
                accesses_max=1 + max(resp) / tau,
                late_intervals=sum(max(iv["done"]) - shift > (m - 0.5) * tau for iv in ivs),
                after_t=sum(max(iv["done"]) - shift > out["T"] for iv in ivs),
                over_m_load=sum(x > m for x in loads), best_over_m=sum(b > m for b in best),
                mount_worse=sum(x > b for x, b in zip(loads, best)), max_load=max(loads),
                violations=sum(iv["qos"].get("violations", 0) for iv in ivs),
                ok=all(all(iv["ok"]) for iv in ivs),
                arrival_to_end_max=max(d for iv in ivs for d in iv["done"]))
        table[m] = {"T": out["T"], "rows": rows}
    return table


def offered(results: dict, tau: float) -> dict:
    """Per M: the design offered 2S with admission off."""
    table = {}
    for r in results["offered"]["runs"]:
        m = r["label"]
        ivs = r["intervals"]
        resp = [d for iv in ivs for d in iv["done"]]
        loads = [max(iv["ost_reads"].values()) for iv in ivs]
        mm = [mm for mm in ACCESSES if f"k={2 * guarantee(mm)}" in m][0]
        table[mm] = dict(summary(resp), k=2 * guarantee(mm), intervals=len(ivs),
                         accesses_max=1 + max(resp) / tau,
                         late_intervals=sum(max(iv["done"]) > (mm - 0.5) * tau for iv in ivs),
                         max_load=max(loads), mean_max_load=statistics.fmean(loads),
                         ok=all(all(iv["ok"]) for iv in ivs))
    return table


def overhead(results: dict) -> dict:
    """Per batch size: the mount's time, admission off and no throttle."""
    table = {}
    for r in results["overhead"]["runs"]:
        resp = [d for iv in r["intervals"] for d in iv["done"]]
        spread = [max(iv["issued"]) for iv in r["intervals"]]
        table[r["label"]] = dict(summary(resp), issue_late_max=max(spread))
    return table


def sim_rows() -> dict:
    try:
        sim = json.loads(SIM_RESULTS.read_text())
    except (OSError, ValueError):
        return {}
    return {row["size"]: row for row in sim["synthetic"]["rows"]}
