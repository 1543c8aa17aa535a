"""The thesis's §4.7.3 (temporal replication, figs. 4.7 and 4.8), graded on RICC and others.

Two claims are true by construction and counted apart: at alpha = inf every window holds every
queued job (the thesis's own definition), and a shortcut of T replicates on submission every job
asking at most T of the machine, so on a trace where nearly every job is that small
(:data:`AUTOMATIC_SHARE`) the shortcut's results are a property of the trace's job sizes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from . import grading as g
from .evidence import Claim, Results, apart, fmt, only

_RECORDED, _MODEL, _QUEUE = "replication-recorded", "replication", "queue-length"
_CLOSEST = dict(input_model="peak-memory")
_WHERE = "RICC's recorded schedule, peak-memory inputs"
#: A shortcut T that replicates on submission at least this share of a trace's jobs decides
#: the result through the trace's job sizes, not through the strategy: by construction.
AUTOMATIC_SHARE = 0.95
#: "most datasets" replicated in time: more than half the jobs, so fewer than half at risk.
MOST = 50.0

#: sweep -> {T: share of the trace's jobs asking at most T of the machine}
Shares = Mapping[str, Mapping[float, float]]


def replication_claims(res: Results, trace_sweeps: dict[str, str],
                       shares: Shares | None = None) -> list[Claim]:
    """Section 4.7.3 (figs. 4.7, 4.8) on RICC's recorded schedule, and the T claims again on
    every other trace's sweep (``trace_sweeps``: sweep name -> where). ``shares`` says, per
    sweep, which share of its jobs each T replicates on submission."""
    shares = shares or {}
    out = _at_risk_claims(res, _RECORDED, _WHERE, _CLOSEST, shares.get(_RECORDED, {}))
    for sweep, where in trace_sweeps.items():
        out += [replace(c, claim=f"{c.claim} ({where.split(',')[0]})")
                for c in _at_risk_claims(res, sweep, where, {}, shares.get(sweep, {}))
                if "T = 0.1" in c.claim or "T = 0.01" in c.claim]
    return (out + _space_claims(res, shares.get(_RECORDED, {}))
            + _queue_claims(res, shares.get(_QUEUE, {})))


def by_shortcut(grade: g.Grade, threshold: float, shares: Mapping[float, float]) -> g.Grade:
    """``grade`` of a claim about the shortcut T = ``threshold``, or *by construction* when T
    replicates on submission nearly every job of the trace."""
    share = shares.get(threshold, math.nan)
    if not share >= AUTOMATIC_SHARE:
        return grade
    return g.constructed(f"T = {threshold:g} replicates on submission every job asking at most "
                         f"{threshold * 100:g} % of the machine: {share * 100:.1f} % of this "
                         "trace's jobs (a property of the trace)", grade.measured, grade.seeds)


def _at_risk_claims(res: Results, sweep: str, where: str, closest: dict,
                    shares: Mapping[float, float]) -> list[Claim]:
    out = []
    fcfs2 = res.seeds(sweep, "at_risk_pct", strategy="fcfs", alpha=2.0, **closest)
    out.append(Claim("4.7.3", "fig. 4.7a: jobs at risk with the plain FCFS window at alpha = 2",
                     "> 60 %", "band", g.band(fcfs2, 60, 100, 1, " %"), where))
    oracle = only(res.curves(sweep, "at_risk_pct", "alpha", strategy="dispatch-aware",
                             **closest), math.isfinite)
    out.append(Claim("4.7.3", "fig. 4.7a: the dispatch-aware (offline) window is nearly flat in "
                              "alpha", "almost flat", "flat", g.flat(oracle), where))
    alphas = [a for a in res.xs(sweep, "alpha", strategy="fcfs", **closest) if math.isfinite(a)]
    gaps = []
    for a in alphas:
        fcfs = res.seeds(sweep, "at_risk_pct", strategy="fcfs", alpha=a, **closest)
        t001 = res.seeds(sweep, "at_risk_pct", strategy="shortcut", threshold=0.01, alpha=a,
                         **closest)
        orc = res.seeds(sweep, "at_risk_pct", strategy="dispatch-aware", alpha=a, **closest)
        # "dramatically": T = 0.01 leaves less than half FCFS's excess over the oracle.
        gaps.append(g.ratio({s: fcfs[s] - orc[s] for s in g.paired(fcfs, orc)},
                            {s: t001[s] - orc[s] for s in g.paired(t001, orc)}, g.WORD_RATIO))
    out.append(Claim("4.7.3", "fig. 4.7a: a shortcut of T = 0.01 dramatically reduces the jobs "
                              "at risk (FCFS's excess over the oracle / T = 0.01's, every finite "
                              "alpha)", "dramatic reduction", "ratio",
                     by_shortcut(g.every(gaps, "; ".join(f"{a:g}: {gr.measured}" for a, gr in
                                                         zip(alphas, gaps))), 0.01, shares),
                     where))
    close = [g.equal(res.seeds(sweep, "at_risk_pct", strategy="shortcut", threshold=0.1, alpha=a,
                               **closest),
                     res.seeds(sweep, "at_risk_pct", strategy="dispatch-aware", alpha=a,
                               **closest)) for a in alphas]
    worst = max(close, key=lambda gr: apart(gr.measured), default=None)
    out.append(Claim("4.7.3", "fig. 4.7a: T = 0.1 is virtually identical to the dispatch-aware "
                              "oracle (every finite alpha)", "virtually identical", "equal",
                     by_shortcut(g.every(close, f"largest gap {worst.measured if worst else '-'}"),
                                 0.1, shares), where))
    at_inf = {s: res.seeds(sweep, "at_risk_pct", alpha=math.inf, strategy=s, **closest)
              for s in ("fcfs", "dispatch-aware")}
    meet = g.equal(at_inf["fcfs"], at_inf["dispatch-aware"])
    out.append(Claim("4.7.3", "fig. 4.7: at alpha = inf every strategy replicates on submission "
                              "(curves meet)", "convergence", "equal",
                     g.constructed("a definition: at alpha = inf the window holds every queued "
                                   "job, so every strategy replicates on submission (the thesis "
                                   "says so)", meet.measured, meet.seeds), where))
    return out


def _space_claims(res: Results, shares: Mapping[float, float]) -> list[Claim]:
    rec, closest, where, out = _RECORDED, _CLOSEST, _WHERE, []
    inf = res.seeds(rec, "space_mean_pct", strategy="fcfs", alpha=math.inf, **closest)
    out.append(Claim("4.7.3", "fig. 4.7b: replica space at alpha = inf (mean of 300 samples)",
                     "< 1.8 %", "band", g.band(inf, 0, 1.8, 2, " %"), where,
                     "the space at alpha = inf is every present job's input: RICC's queue is "
                     f"far longer than Jaguar's (model schedule: "
                     f"{fmt(res.value(_MODEL, 'queue_length_mean', strategy='fcfs'))} jobs on "
                     "average against 1.5-45.5)"))
    alphas = [a for a in res.xs(rec, "alpha", strategy="fcfs", **closest) if math.isfinite(a)]
    if alphas:
        low = res.seeds(rec, "space_mean_pct", strategy="fcfs", alpha=alphas[0], **closest)
        out.append(Claim("4.7.3", f"fig. 4.7b: the space falls significantly as alpha is lowered "
                                  f"(FCFS, inf against {alphas[0]:g})", "significant reduction",
                         "ratio", g.ratio(inf, low, g.WORD_RATIO), where))
    edge = [g.ratio(res.seeds(rec, "space_mean_pct", strategy="fcfs", alpha=a, **closest),
                    res.seeds(rec, "space_mean_pct", strategy="dispatch-aware", alpha=a,
                              **closest), 1.0) for a in alphas]
    out.append(Claim("4.7.3", "fig. 4.7b: the dispatch-aware window has an edge in space (less "
                              "than FCFS: FCFS / dispatch-aware > 1 at every finite alpha)",
                     "an edge due to its optimal job selection", "ratio",
                     g.every(edge, "; ".join(f"{a:g}: {gr.measured}" for a, gr in
                                             zip(alphas, edge))), where,
                     "the oracle replicates the jobs that start next, which on RICC are often "
                     "large jobs FCFS's window has not reached"))
    fcfs = res.seeds(rec, "space_mean_pct", alpha=0.5, strategy="fcfs", **closest)
    others = {"dispatch-aware": res.seeds(rec, "space_mean_pct", alpha=0.5,
                                          strategy="dispatch-aware", **closest),
              "T = 0.1": res.seeds(rec, "space_mean_pct", alpha=0.5, strategy="shortcut",
                                   threshold=0.1, **closest)}
    differ = [g.equal(v, fcfs) for v in others.values()]
    out.append(Claim("4.7.3", "fig. 4.7b: the strategies differ little in space (alpha 0.5, "
                              "against FCFS)", "quite small differences", "equal",
                     g.every(differ, "; ".join(f"{k}: {gr.measured}" for k, gr in
                                               zip(others, differ))), where,
                     "T = 0.1 replicates on submission every job asking at most 10 % of the "
                     "machine: nearly every RICC job (see Disclosures)"))
    small = [g.band(res.seeds(rec, "space_mean_pct", strategy="shortcut", threshold=0.1,
                              alpha=a, **closest), 0, 0.5, 2, " %") for a in (0.2, 0.5)]
    out.append(Claim("4.7.3", "T = 0.1 with alpha 0.2 and 0.5 costs little space", "< 0.5 %",
                     "band", by_shortcut(g.every(small, " / ".join(gr.measured for gr in small)),
                                         0.1, shares), where,
                     "as the differences in space: T = 0.1 replicates nearly every RICC job on "
                     "submission"))
    return out


def _queue_claims(res: Results, shares: Mapping[float, float]) -> list[Claim]:
    sweep, out = _QUEUE, []
    loads = res.xs(sweep, "load_factor")
    where = "RICC August 2010 (days 92-123), model schedule, peak-memory inputs, alpha = 0.5"
    if len(loads) < 2:
        return out

    def risk(lf: float, **match) -> dict[int, float]:
        return res.seeds(sweep, "at_risk_pct", load_factor=lf, alpha=0.5, **match)

    fcfs, orc = risk(loads[0], strategy="fcfs"), risk(loads[0], strategy="dispatch-aware")
    t01 = risk(loads[0], strategy="shortcut", threshold=0.1)
    alike = [g.equal(fcfs, orc), by_shortcut(g.equal(t01, orc), 0.1, shares)]
    out.append(Claim("4.7.3", "fig. 4.8: under light load FCFS leaves the same jobs at risk as "
                              "the oracle", "all strategies alike", "equal", alike[0], where,
                     f"T = 0.1 against the oracle: {alike[1].measured}"))
    # Every load and every seed: FCFS's excess over the oracle against the load factor.
    gap = {}
    for lf in loads:
        f, o = risk(lf, strategy="fcfs"), risk(lf, strategy="dispatch-aware")
        for s in g.paired(f, o):
            gap.setdefault(s, {})[lf] = f[s] - o[s]
    out.append(Claim("4.7.3", "fig. 4.8: busier months make FCFS and the oracle diverge (FCFS - "
                              "oracle grows with the load, every load of every seed)", "diverge",
                     "trend", g.trend(gap, 1, digits=1, unit=" points"), where,
                     "load factors " + ", ".join(f"{lf:.3g}" for lf in loads)))
    heavy = loads[-1]
    o, t = risk(heavy, strategy="dispatch-aware"), risk(heavy, strategy="shortcut", threshold=0.1)
    out.append(Claim("4.7.3", "fig. 4.8: in the busiest month T = 0.1 stays close to the oracle",
                     "T = 0.1 ~ oracle", "equal", by_shortcut(g.equal(t, o), 0.1, shares), where))
    out.append(Claim("4.7.3", "fig. 4.8: in the busiest month T = 0.1 replicates most datasets "
                              f"in time (jobs at risk below {MOST:g} %)",
                     "able to replicate most datasets in time", "limit",
                     g.below(t, MOST, 1, " % at risk"), where,
                     f"the oracle leaves {fmt(g.interval(o.values()).mean, 1)} % at risk in the "
                     "same month: close to the oracle is not in time"))
    return out
