"""The cases of the layout paper's Table 4 on the scratch mount and how the model's choices
are scored (``python -m benchmarks.layout``; docs/benchmarks/layout/report.md): the plan of a
run, the three layouts of each case as made on the OSTs, the files they need, and the pure
summaries of measured times (correct, tie, wrong; time lost; the noise of identical layouts).

Pure functions, no rig: shared by the benchmark and its test (tests/advisor/test_layout_bench.py),
which may not import ``benchmarks/``.
"""

from __future__ import annotations

import statistics

K, MiB = 1 << 10, 1 << 20
OSTS = 4
GROUPS = 2
LAYOUT_NAMES = ("1-DV", "2-D", "1-DH")
PATTERNS = ("sequential", "random")
MODES = ("shared", "fpp")


def plan(quick: bool) -> dict:
    return {"osts": OSTS, "groups": GROUPS,
            "processes": [1, 4, 16] if quick else [1, 2, 4, 8, 16],
            "sizes": [4 * K, 256 * K, 4 * MiB] if quick else
                     [4 * K, 16 * K, 64 * K, 256 * K, 1 * MiB, 4 * MiB],
            "patterns": list(PATTERNS), "modes": list(MODES),
            "repeats": 1 if quick else 3,
            # per OST: 8 MiB/s and 80 reads/s (the two limits meet at 100 KiB); low, so that a
            # run of about a second spans many of the throttle's 100 ms slices
            "read_bps": 8 * MiB, "read_iops": 80,
            # one run's nominal seconds if every OST were busy all the time (see budget())
            "target": 0.5, "readahead": 128 * K, "calibration_size": 16 * MiB,
            "settle": 0.2, "seed": 2}


def budget(p: dict, processes: int, size: int, pattern: str) -> int:
    """Requests per process: the run's requests, N = target * n / (c/iops + s/bps) (every OST
    busy for ``target`` seconds at the throttle's nominal rates; c = 1 device read per request,
    or s/readahead for sequential requests smaller than the OSTs' readahead), shared by the
    processes; at least one each."""
    reads = 1.0 if pattern == "random" else min(1.0, size / p["readahead"])
    per_request = reads / p["read_iops"] + size / p["read_bps"]
    total = p["target"] * p["osts"] / per_request
    return max(1, round(total / processes))


# ---------------------------------------------------------------- layouts and files

def physical(p: dict, layout: str, size: int, shared: bool) -> tuple:
    """The layout as made: (mode, stripe count, stripe size) by advise.stripe_settings."""
    from scratchkeeper.advisor.advise import stripe_settings
    count, stripe, _ = stripe_settings(layout, size, p["osts"], shared,
                                       p["groups"] if layout == "2-D" else None)
    return ("shared" if shared else "fpp", count, stripe)


def ost_list(key: tuple, index: int, osts: int, groups: int) -> tuple[int, ...]:
    """OSTs of file ``index`` of a layout key: a shared file on all of them in order; a file
    per process: one OST round-robin (1-DV), the OSTs of group index % g rotated (2-D), all
    of them rotated (1-DH)."""
    mode, count, _ = key
    if mode == "shared":
        return tuple(range(osts))
    if count == 1:
        return (index % osts,)
    if count == osts:
        return tuple((index + k) % osts for k in range(osts))
    group, width = index % groups, osts // groups
    first = (index // groups) % width
    return tuple(group * width + (first + k) % width for k in range(width))


def cases_of(p: dict) -> list[dict]:
    out = []
    for mode in p["modes"]:
        for pattern in p["patterns"]:
            for size in p["sizes"]:
                for procs in p["processes"]:
                    shared = mode == "shared"
                    out.append({"mode": mode, "pattern": pattern, "size": size,
                                "processes": procs, "requests": budget(p, procs, size, pattern),
                                "keys": {lay: physical(p, lay, size, shared)
                                         for lay in LAYOUT_NAMES}})
    return out


def file_sizes(cases: list[dict]) -> dict[tuple, list[int]]:
    """Bytes each file of each layout key needs: a shared file p * requests * s; file i of a
    file-per-process key, requests * s of every case with more than i processes."""
    need: dict[tuple, list[int]] = {}
    for case in cases:
        per_process = case["requests"] * case["size"]
        for key in case["keys"].values():
            if key[0] == "shared":
                sizes = need.setdefault(key, [0])
                sizes[0] = max(sizes[0], case["processes"] * per_process)
            else:
                sizes = need.setdefault(key, [])
                sizes.extend([0] * (case["processes"] - len(sizes)))
                for i in range(case["processes"]):
                    sizes[i] = max(sizes[i], per_process)
    return {k: [-(-s // (4 * MiB)) * 4 * MiB for s in v] for k, v in need.items()}


def key_name(key: tuple) -> str:
    return f"{key[0]}-c{key[1]}-S{key[2] // K}k"


# ---------------------------------------------------------------- analysis (pure)

def outcome(chosen: str, times: dict[str, float], keys: dict[str, tuple]) -> dict:
    """One case: the measured best (lowest median), whether the chosen layout is physically
    the same as another one (``tied``: same stripe count and size), and ``correct`` (chosen is
    the best and no other layout is the same), ``tie`` (chosen is the same layout as the best
    one, so the measurement cannot tell them apart) or ``wrong``; ``loss`` = t_chosen/t_best-1."""
    best = min(times, key=lambda lay: (times[lay], LAYOUT_NAMES.index(lay)))
    tied = any(keys[o] == keys[chosen] for o in keys if o != chosen)
    if keys[chosen] == keys[best]:
        result = "tie" if tied else "correct"
    else:
        result = "wrong"
    return {"best": best, "tied": tied, "outcome": result,
            "loss": times[chosen] / times[best] - 1}


def correct_table(rows: list[dict], by: str) -> dict[str, dict]:
    """Table 4's shape per value of ``by`` (and "all"): cases, correct, ties, wrong; the
    correct rate excluding the tied cases and counting a tie as correct."""
    groups: dict[str, list[dict]] = {"all": rows}
    for row in rows:
        groups.setdefault(row[by], []).append(row)
    out = {}
    for name, group in groups.items():
        correct = sum(r["outcome"] == "correct" for r in group)
        ties = sum(r["outcome"] == "tie" for r in group)
        untied = sum(not r["tied"] for r in group)
        out[name] = {"cases": len(group), "correct": correct, "ties": ties,
                     "tied_cases": sum(r["tied"] for r in group),
                     "wrong": sum(r["outcome"] == "wrong" for r in group),
                     "untied_cases": untied,
                     "rate_excluding_ties": correct / untied if untied else None,
                     "rate_tie_as_correct": (correct + ties) / len(group) if group else None}
    return out


def loss_summary(rows: list[dict], times_key: str = "times") -> dict:
    """Time lost where the chosen layout was not the best: t_chosen/t_best - 1 over the wrong
    cases (median, mean, max), how many within 5 %, and over all cases together
    sum(t_chosen)/sum(t_best) - 1."""
    wrong = [r["loss"] for r in rows if r["outcome"] == "wrong"]
    chosen = sum(r[times_key][r["chosen"]] for r in rows)
    best = sum(min(r[times_key].values()) for r in rows)
    return {"wrong_cases": len(wrong),
            "median": statistics.median(wrong) if wrong else 0.0,
            "mean": statistics.fmean(wrong) if wrong else 0.0,
            "max": max(wrong) if wrong else 0.0,
            "within_5_percent": sum(x < 0.05 for x in wrong),
            "total": chosen / best - 1 if best else 0.0}


def tie_noise(rows: list[dict]) -> dict:
    """How far apart two physically identical layouts measured (the same file, run
    separately): the slower / the faster - 1 over every such pair; the measurement's noise."""
    gaps = []
    for r in rows:
        names = list(r["times"])
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                if r["keys"][a] == r["keys"][b]:
                    ta, tb = r["times"][a], r["times"][b]
                    gaps.append(max(ta, tb) / min(ta, tb) - 1)
    return {"pairs": len(gaps), "median": statistics.median(gaps) if gaps else 0.0,
            "max": max(gaps) if gaps else 0.0}
