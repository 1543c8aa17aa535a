"""Every quantitative claim of the thesis's §4.7, graded by one rule: ``reproduction.rst``.

Each :class:`Claim` names the thesis's words, the kind of claim (trend, ratio, band, equal; see
:mod:`scratchkeeper.sim.grading` for the rule of each), the interval measured over the seeds
under the closest conditions the data allow, and the verdict the rule gives. Conditions the
reproduction sets by searching the load factor are :class:`Condition` rows, not claims. The
values come from the ``results-*.csv`` files of :mod:`scratchkeeper.sim.reproduce`; nothing
here is typed in but the thesis's own words and numbers.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, replace

from . import grading as g
from .grading import MISSING, YES, Grade
from .report import Row, read_results

__all__ = ["YES", "MISSING", "Claim", "Condition", "Results", "all_claims"]


@dataclass
class Claim:
    section: str
    claim: str
    thesis: str
    kind: str                   # trend, ratio, band, equal
    grade: Grade
    conditions: str = ""
    why: str = ""

    @property
    def shape(self) -> str:
        return self.grade.shown


@dataclass
class Condition:
    """A condition the reproduction set by construction: the target and what it reached."""

    section: str
    what: str
    thesis: str
    reached: str
    how: str


@dataclass
class Ungraded:
    section: str
    claim: str
    reason: str


_DEFAULTS = {"input_model": "requested-memory", "schedule": "model"}


class Results:
    """The rows of every sweep, by sweep name, with per-seed selections."""

    def __init__(self, paths: dict[str, str]):
        self.rows = {name: read_results(path) for name, path in paths.items()}

    def pick(self, sweep: str, **match) -> list[Row]:
        def equal(row: Row, key: str, value) -> bool:
            if isinstance(value, str):
                return (row.text(key) or _DEFAULTS.get(key, "")) == value
            return row.num(key) == value
        return [r for r in self.rows.get(sweep, []) if all(equal(r, k, v) for k, v in match.items())]

    def seeds(self, sweep: str, key: str, **match) -> dict[int, float]:
        """``key`` per seed, averaged over the matching rows of that seed."""
        by_seed: dict[int, list[float]] = {}
        for r in self.pick(sweep, **match):
            seed = int(r.num("seed")) if not math.isnan(r.num("seed")) else 1
            by_seed.setdefault(seed, []).append(r.num(key))
        return {s: mean(v) for s, v in sorted(by_seed.items())}

    def curves(self, sweep: str, key: str, x_key: str, **match) -> dict[int, dict[float, float]]:
        """``key`` against ``x_key``, one curve per seed."""
        out: dict[int, dict[float, list[float]]] = {}
        for r in self.pick(sweep, **match):
            seed = int(r.num("seed")) if not math.isnan(r.num("seed")) else 1
            out.setdefault(seed, {}).setdefault(r.num(x_key), []).append(r.num(key))
        return {s: {x: mean(v) for x, v in sorted(c.items())} for s, c in sorted(out.items())}

    def value(self, sweep: str, key: str, **match) -> float:
        return mean(self.seeds(sweep, key, **match).values())

    def xs(self, sweep: str, x_key: str, **match) -> list[float]:
        return sorted({r.num(x_key) for r in self.pick(sweep, **match)})

    def seed_count(self, sweep: str) -> int:
        return len({r.text("seed") for r in self.rows.get(sweep, [])})


def mean(values) -> float:
    values = [v for v in values if not math.isnan(v)]
    return math.fsum(values) / len(values) if values else math.nan


def fmt(value: float, digits: int = 0) -> str:
    if value is None or math.isnan(value):
        return "-"
    if math.isinf(value):
        return "inf"
    return f"{value:,.{digits}f}"


def pct(value: float, digits: int = 2) -> str:
    return "-" if math.isnan(value) else f"{value:.{digits}f} %"


def _only(curves: dict[int, dict[float, float]], keep: Callable[[float], bool]):
    return {s: {x: v for x, v in c.items() if keep(x)} for s, c in curves.items()}


def _diff_curves(a, b):
    """Per seed and x: a - b (paired by seed)."""
    return {s: {x: a[s][x] - b[s][x] for x in a[s] if x in b.get(s, {})}
            for s in a if s in b}


def _at(curves, x: float) -> dict[int, float]:
    return {s: c[x] for s, c in curves.items() if x in c}


def _mean_curve(curves) -> str:
    xs = sorted({x for c in curves.values() for x in c})
    return ", ".join(f"{x:g}: {fmt(mean([c.get(x, math.nan) for c in curves.values()]))}"
                     for x in xs)


# ---------------------------------------------------------------------------------------------
# §4.7.2 and §4.7.4: recovery


def _stripe_claims(res: Results, where: str, sweep: str, policy: str, section: str,
                   figure: str) -> list[Claim]:
    """All jobs' wait against the stripe count: rising without recovery, on the ideal with."""
    out = []
    for stat, label in (("filtered_wait_mean", "mean"), ("filtered_wait_sd", "SD")):
        none = res.curves(sweep, stat, "stripe_count", policy="none")
        out.append(Claim(
            section, f"{figure}: without recovery the {label} of all jobs' wait (zero waits left "
                     "out) rises with the stripe count", "rises", "trend",
            g.trend(none, 1, log2_x=True, unit=" s"), where,
            f"mean curve {_mean_curve(none)} s"))
    ideal = res.seeds(sweep, "filtered_wait_mean", policy="ideal")
    ideal_sd = res.seeds(sweep, "filtered_wait_sd", policy="ideal")
    for stat, label, reference in (("filtered_wait_mean", "mean", ideal),
                                   ("filtered_wait_sd", "SD", ideal_sd)):
        rec = res.curves(sweep, stat, "stripe_count", policy=policy)
        # The ideal run has no failure: the same for every seed and stripe count.
        level = mean(reference.values())
        per_x = [g.equal(_at(rec, x), dict.fromkeys(_at(rec, x), level))
                 for x in res.xs(sweep, "stripe_count", policy=policy)]
        worst = max(per_x, key=lambda gr: _apart(gr.measured), default=None)
        grade = g.every(per_x, f"largest gap to the ideal: {worst.measured if worst else '-'}")
        out.append(Claim(
            section, f"{figure}: with {policy} recovery the {label} of all jobs' wait equals "
                     "the ideal (no failure) at every stripe count", "on the ideal curve",
            "equal", grade, where,
            f"ideal {fmt(level)} s; mean curve {_mean_curve(rec)} s; kills per run "
            f"{fmt(res.value(sweep, 'kills', policy='none'))} without, "
            f"{fmt(res.value(sweep, 'kills', policy=policy))} with recovery"
            + ("" if grade.verdict == YES else "; " + _why_not_ideal(policy))))
    return out


def _apart(measured: str) -> float:
    try:
        return abs(float(measured.split(" ")[0].replace(",", "").replace("+", "")))
    except ValueError:
        return 0.0


def _why_not_ideal(policy: str) -> str:
    if policy == "pre-execution":
        return ("pre-execution recovery patches queued jobs only: an affected running job is "
                "still killed and requeued (the thesis's §4.7.2 too: 'they will be "
                "rescheduled'), so the curve keeps most of the rise")
    return ("no run is lost, so the excess comes from how EASY backfilling reacts to jobs "
            "held or ending later by their patch time")


def _affected_claims(res: Results, where: str, sweep: str, policy: str, section: str,
                     figure: str, before: tuple[float, float], after: tuple[float, float],
                     thesis: str) -> list[Claim]:
    none = res.seeds(sweep, "affected_wait_mean", policy="none")
    rec = res.seeds(sweep, "affected_wait_mean", policy=policy)
    return [
        Claim(section, f"{figure}: affected jobs' mean wait without recovery (mean over stripe "
                       "counts)", thesis.split(" -> ")[0], "band",
              g.band(none, *before, unit=" s"), where),
        Claim(section, f"{figure}: affected jobs' mean wait with {policy} recovery (mean over "
                       "stripe counts)", thesis.split(" -> ")[1], "band",
              g.band(rec, *after, unit=" s"), where,
              "the recovered jobs still wait in RICC's long queue (mean queue "
              f"{fmt(res.value(sweep, 'queue_length_mean', policy='ideal'))} jobs); "
              + ("affected running jobs are still killed and requeued"
                 if policy == "pre-execution" else "recovery removes the requeue, not the queue")),
    ]


def recovery_claims(res: Results, load_of: Callable[[str], str]) -> list[Claim]:
    """Sections 4.7.2 (pre-execution recovery, 35 % utilisation) and 4.7.4 (on-the-fly, 70 %)."""
    low, high = "recovery-35", "recovery-70"
    w_low = f"RICC, {load_of(low)}, EASY, extrapolated failures"
    w_high = f"RICC, {load_of(high)}, EASY, extrapolated failures"
    out = _stripe_claims(res, w_low, low, "pre-execution", "4.7.2", "fig. 4.5")
    out += _affected_claims(res, w_low, low, "pre-execution", "4.7.2", "fig. 4.5",
                            (1e5, 1e6), (10, 100), "hundreds of thousands of s -> tens of s")
    none35 = res.seeds(low, "affected_wait_mean", policy="none")
    pre35 = res.seeds(low, "affected_wait_mean", policy="pre-execution")
    out.append(Claim("4.7.2", "fig. 4.5: recovery cuts the affected jobs' mean wait",
                     "hundreds of thousands -> tens of s (x 1,000 or more)", "ratio",
                     g.ratio(none35, pre35, 1000), w_low))
    for stat, label in (("affected_wait_mean", "mean"), ("affected_wait_sd", "SD")):
        curve = _only(res.curves(low, stat, "stripe_count", policy="pre-execution"),
                      lambda x: x >= 4)
        out.append(Claim("4.7.2", f"fig. 4.5: the {label} of the affected jobs' wait rises as "
                                  "the stripe count goes from 4 to 32", "rises", "trend",
                         g.trend(curve, 1, log2_x=True, unit=" s"), w_low + ", pre-execution",
                         f"mean curve {_mean_curve(curve)} s"))
    every = res.seeds(low, "filtered_wait_mean", policy="pre-execution")
    out.append(Claim("4.7.2", "fig. 4.5: the affected jobs wait much less than all jobs (the "
                              "thesis calls this an artefact of its logs)", "affected << all",
                     "ratio", g.ratio(every, pre35, g.WORD_RATIO), w_low + ", pre-execution",
                     "as the thesis itself argues, an affected job waits at least as long as "
                     "any job plus its recovery; the independent failure model here has no "
                     "link between failures and quiet periods of the job log"))
    out += _load_claims(res)
    out += _stripe_claims(res, w_high, high, "on-the-fly", "4.7.4", "figs. 4.9, 4.10")
    out += _on_the_fly_claims(res, w_high, high)
    return out


def _on_the_fly_claims(res: Results, where: str, high: str) -> list[Claim]:
    out = []
    share = res.curves(high, "affected_pct", "stripe_count", policy="none")
    xs = res.xs(high, "stripe_count", policy="none")
    if xs:
        for x, stated in ((xs[0], 0.14), (xs[-1], 2.09)):
            out.append(Claim("4.7.4", f"share of jobs affected by a failure at stripe count "
                                      f"{x:g}", f"{stated} % (stripe count {2 if stated < 1 else 32})",
                             "band", g.band(_at(share, x), *g.about(stated), 2, " %"),
                             where + ", without recovery, 64 OSTs"))
    out.append(Claim("4.7.4", "the share of affected jobs grows with the stripe count",
                     "0.14 % -> 2.09 %", "trend",
                     g.trend(share, 1, log2_x=True, digits=2, unit=" points"), where))
    none = res.seeds(high, "affected_wait_mean", policy="none")
    otf = res.seeds(high, "affected_wait_mean", policy="on-the-fly")
    out.append(Claim("4.7.4", "figs. 4.11, 4.12: on-the-fly recovery cuts the affected jobs' "
                              "mean wait by more than an order of magnitude",
                     "more than x 10", "ratio", g.ratio(none, otf, 10), where))
    out += _affected_claims(res, where, high, "on-the-fly", "4.7.4", "figs. 4.11, 4.12",
                            (1e5, math.inf), (1e3, 1e4), "> 100,000 s -> thousands of s")
    for stat, label in (("affected_wait_mean", "mean"), ("affected_wait_sd", "SD")):
        curve = res.curves(high, stat, "stripe_count", policy="on-the-fly")
        out.append(Claim("4.7.4", f"figs. 4.11, 4.12: with on-the-fly recovery the {label} of the "
                                  "affected jobs' wait falls as the stripe count grows",
                         "falling trend (small on the log axis)" if label == "mean" else
                         "falls (fig. 4.12)", "trend",
                         g.trend(curve, -1, log2_x=True, unit=" s"), where,
                         f"mean curve {_mean_curve(curve)} s"))
    u_none = res.seeds(high, "utilisation_pct", policy="none")
    u_otf = res.seeds(high, "utilisation_pct", policy="on-the-fly")
    out.append(Claim("4.7.4", "CPU utilisation with on-the-fly recovery is the same as without "
                              "(+0.04 points)", "70.50 % / 70.54 %", "equal",
                     g.equal(u_otf, u_none), where + " (mean over stripe counts)",
                     f"{pct(mean(u_none.values()))} without, {pct(mean(u_otf.values()))} with: "
                     "without recovery a killed job's lost run is run again and counted as work"))
    return out


def _load_claims(res: Results) -> list[Claim]:
    sweep, out = "load", []
    where = "RICC, submissions spread or packed, stripe count 4, pre-execution recovery"
    for stat, label in (("filtered_wait_mean", "mean"), ("filtered_wait_sd", "SD")):
        gap = _diff_curves(res.curves(sweep, stat, "load_factor", policy="none"),
                           res.curves(sweep, stat, "load_factor", policy="pre-execution"))
        signs = {x: sorted({v[x] > 0 for v in gap.values() if x in v}) for x in
                 res.xs(sweep, "load_factor")}
        changes = [f"{x:g}" for x, s in signs.items() if len(s) > 1]
        out.append(Claim(
            "4.7.2", f"fig. 4.6 ({'a' if label == 'mean' else 'b'}): as the load grows, all jobs' "
                     f"wait {label} grows more slowly with recovery than without",
            "the gap without - with recovery grows with the load", "trend",
            g.trend(gap, 1, unit=" s"), where,
            f"mean gap {_mean_curve(gap)} s" + (f"; the gap changes sign across seeds at load "
                                                f"{', '.join(changes)}" if changes else "")))
    pre = res.curves(sweep, "affected_wait_mean", "load_factor", policy="pre-execution")
    none = res.curves(sweep, "affected_wait_mean", "load_factor", policy="none")
    loads = res.xs(sweep, "load_factor")
    out.append(Claim("4.7.2", "fig. 4.6 (c): with recovery the affected jobs' mean wait grows "
                              "with the load", "tens -> hundreds of s", "trend",
                     g.trend(pre, 1, unit=" s"), where, f"mean curve {_mean_curve(pre)} s"))
    if loads:
        out.append(Claim("4.7.2", "fig. 4.6 (c): with recovery the affected jobs' mean wait at "
                                  "the lightest and the heaviest load", "tens of s; hundreds of s",
                         "band", g.every([g.band(_at(pre, loads[0]), 10, 100),
                                          g.band(_at(pre, loads[-1]), 100, 1000)],
                                         f"{g.interval(_at(pre, loads[0]).values()).text(0, ' s')}"
                                         f"; {g.interval(_at(pre, loads[-1]).values()).text(0, ' s')}"),
                         where, "affected running jobs are killed and requeued at the tail of "
                                "RICC's long queue"))
        out.append(Claim("4.7.2", "fig. 4.6 (c): without recovery the affected jobs' mean wait "
                                  "stays around 100,000 s", "~100,000 s at every load", "band",
                         g.every([g.band(_at(none, x), *g.about(1e5)) for x in loads],
                                 "mean curve " + _mean_curve(none) + " s"), where))
    kills = res.curves(sweep, "kills", "load_factor", policy="none")
    per_failure = {s: {x: c[x] / f for x in c if (f := res.value(sweep, "ost_failures",
                                                                 policy="none", load_factor=x,
                                                                 seed=float(s)))}
                   for s, c in kills.items()}
    out.append(Claim("4.7.2", "fig. 4.6 (d): with heavier load more running jobs are "
                              "interrupted by the failures", "more interrupted jobs", "trend",
                     g.trend(kills, 1, digits=0, unit=" kills"),
                     "RICC, submissions spread or packed, stripe count 4, without recovery",
                     f"kills per run {_mean_curve(kills)}; per OST failure "
                     f"{_mean_curve(per_failure)}: packing the submissions shortens the span, "
                     "so fewer failures fall in it (the thesis's concatenated traces too)"))
    return out


# ---------------------------------------------------------------------------------------------
# §4.7.3: temporal replication

_RECORDED, _MODEL = "replication-recorded", "replication"
_CLOSEST = dict(input_model="peak-memory")
_WHERE = "RICC's recorded schedule, peak-memory inputs"


def replication_claims(res: Results, trace_sweeps: dict[str, str]) -> list[Claim]:
    """Section 4.7.3 (figs. 4.7, 4.8) on RICC's recorded schedule, and the T claims again on
    every other trace's sweep (``trace_sweeps``: sweep name -> where)."""
    out = _at_risk_claims(res, _RECORDED, _WHERE, _CLOSEST)
    for sweep, where in trace_sweeps.items():
        out += [replace(c, claim=f"{c.claim} ({where.split(',')[0]})")
                for c in _at_risk_claims(res, sweep, where, {})
                if "T = 0.1" in c.claim or "T = 0.01" in c.claim]
    return out + _space_claims(res) + _queue_claims(res)


def _at_risk_claims(res: Results, sweep: str, where: str, closest: dict) -> list[Claim]:
    out = []
    fcfs2 = res.seeds(sweep, "at_risk_pct", strategy="fcfs", alpha=2.0, **closest)
    out.append(Claim("4.7.3", "fig. 4.7a: jobs at risk with the plain FCFS window at alpha = 2",
                     "> 60 %", "band", g.band(fcfs2, 60, 100, 1, " %"), where))
    oracle = _only(res.curves(sweep, "at_risk_pct", "alpha", strategy="dispatch-aware",
                              **closest), math.isfinite)
    out.append(Claim("4.7.3", "fig. 4.7a: the dispatch-aware (offline) window is nearly flat in "
                              "alpha", "almost flat", "equal", g.flat(oracle), where))
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
                     g.every(gaps, "; ".join(f"{a:g}: {gr.measured}" for a, gr in
                                             zip(alphas, gaps))), where))
    close = [g.equal(res.seeds(sweep, "at_risk_pct", strategy="shortcut", threshold=0.1, alpha=a,
                               **closest),
                     res.seeds(sweep, "at_risk_pct", strategy="dispatch-aware", alpha=a,
                               **closest)) for a in res.xs(sweep, "alpha", **closest)]
    worst = max(close, key=lambda gr: _apart(gr.measured), default=None)
    out.append(Claim("4.7.3", "fig. 4.7a: T = 0.1 is virtually identical to the dispatch-aware "
                              "oracle (every alpha)", "virtually identical", "equal",
                     g.every(close, f"largest gap {worst.measured if worst else '-'}"), where))
    at_inf = {s: res.seeds(sweep, "at_risk_pct", alpha=math.inf, strategy=s, **closest)
              for s in ("fcfs", "dispatch-aware")}
    out.append(Claim("4.7.3", "fig. 4.7: at alpha = inf every strategy replicates on submission "
                              "(curves meet)", "convergence", "equal",
                     g.equal(at_inf["fcfs"], at_inf["dispatch-aware"]), where))
    return out


def _space_claims(res: Results) -> list[Claim]:
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
                     "band", g.every(small, " / ".join(gr.measured for gr in small)), where,
                     "as the differences in space: T = 0.1 replicates nearly every RICC job on "
                     "submission"))
    return out


def _queue_claims(res: Results) -> list[Claim]:
    sweep, out = "queue-length", []
    loads = res.xs(sweep, "load_factor")
    where = "RICC August 2010 (days 92-123), model schedule, peak-memory inputs, alpha = 0.5"
    if len(loads) < 2:
        return out

    def risk(lf: float, **match) -> dict[int, float]:
        return res.seeds(sweep, "at_risk_pct", load_factor=lf, alpha=0.5, **match)

    fcfs, orc = risk(loads[0], strategy="fcfs"), risk(loads[0], strategy="dispatch-aware")
    t01 = risk(loads[0], strategy="shortcut", threshold=0.1)
    alike = [g.equal(fcfs, orc), g.equal(t01, orc)]
    out.append(Claim("4.7.3", "fig. 4.8: under light load all strategies leave the same jobs "
                              "at risk", "all strategies alike", "equal",
                     g.every(alike, f"FCFS {alike[0].measured} from the oracle, T = 0.1 "
                                    f"{alike[1].measured}"), where))
    heavy = loads[-1]
    f, o = risk(heavy, strategy="fcfs"), risk(heavy, strategy="dispatch-aware")
    t = risk(heavy, strategy="shortcut", threshold=0.1)
    gap_light = {s: fcfs[s] - orc[s] for s in g.paired(fcfs, orc)}
    gap_heavy = {s: f[s] - o[s] for s in g.paired(f, o)}
    diverge = g.trend({s: {loads[0]: gap_light[s], heavy: gap_heavy[s]}
                       for s in g.paired(gap_light, gap_heavy)}, 1, digits=1, unit=" points")
    out.append(Claim("4.7.3", "fig. 4.8: busier months make FCFS and the oracle diverge (FCFS - "
                              "oracle grows with the load)", "diverge", "trend", diverge, where))
    out.append(Claim("4.7.3", "fig. 4.8: in the busiest month T = 0.1 stays close to the oracle",
                     "T = 0.1 ~ oracle", "equal", g.equal(t, o), where))
    return out


# ---------------------------------------------------------------------------------------------


def extra_claims(measures: dict) -> list[Claim]:
    """Claims graded from the per-job measures of :func:`scratchkeeper.sim.reproduce.job_measures`."""
    out = []
    for name, m in sorted(measures.get("memory", {}).items()):
        queued, running = {1: m["queued_bytes"]}, {1: m["running_bytes"]}
        out.append(Claim("4.5.1", f"fig. 4.4: queued jobs' aggregate input is larger than running "
                                  f"jobs' ({name})", "49.5 GB queued vs 31.8 GB running (x 1.56)",
                         "ratio", g.ratio(queued, running, 1.0, 2),
                         f"RICC, {name} schedule, peak-memory inputs, time averages (Little's "
                         "law)", f"queued {m['queued_bytes'] / 1e12:.2f} TB, running "
                                 f"{m['running_bytes'] / 1e12:.2f} TB"))
    bandwidth = measures.get("bandwidth")
    if bandwidth:
        share = {1: bandwidth["bytes_per_s"] / bandwidth["file_system_bytes_per_s"] * 100}
        out.append(Claim("4.5.1", "replicating every job's input once uses less than 0.1 % of "
                                  "the file system's bandwidth", "< 0.1 % of 284 GB/s", "band",
                         g.band(share, 0, 0.1, 3, " %"),
                         "RICC, model schedule, peak-memory inputs, every job replicated once",
                         f"{bandwidth['bytes_per_s'] / 1e6:.1f} MB/s against "
                         f"{bandwidth['file_system_bytes_per_s'] / 1e9:.0f} GB/s (Jaguar's 284 "
                         "GB/s scaled by aggregate memory, as the scratch size)"))
    out += _long_job_claims(measures.get("long_jobs"))
    return out


def _long_job_claims(long_jobs: dict | None) -> list[Claim]:
    """§4.8: recovery cuts the wait of affected long jobs by more than that of short ones."""
    if not long_jobs:
        return []
    seeds = {int(seed): m for seed, m in long_jobs["seeds"].items()}

    def benefit(group: str, stat: str = "wait_benefit_s") -> dict[int, float]:
        return {s: m[group][stat] for s, m in seeds.items()}

    long, short = benefit("long"), benefit("short")
    dropped = [s for s in g.paired(long, short) if not (long[s] > 0 and short[s] > 0)]
    turnaround = g.ratio(benefit("long", "turnaround_benefit_s"),
                         benefit("short", "turnaround_benefit_s"), g.WORD_RATIO)
    where = (f"RICC, load factor {long_jobs['load_factor']:.4g} "
             f"({long_jobs['utilisation_target']:g} % set), EASY, extrapolated failures, "
             f"stripe count {long_jobs['stripe_count']}, {long_jobs['policy']} recovery against "
             "none (figs. 4.9-4.12); the jobs a failure affected without recovery, matched by "
             "id; long = run time above the median of those jobs in the seed, short = at or "
             "below it")
    why = ("a job's benefit is its wait without recovery minus its wait with it (the thesis: "
           "'reduces the average wait time'; a killed job's lost run counts as wait); over the "
           f"seeds, long jobs gain {fmt(mean(long.values()))} s and short ones "
           f"{fmt(mean(short.values()))} s on average, of "
           f"{fmt(mean([m['affected'] for m in seeds.values()]))} affected jobs per seed split "
           f"at {fmt(mean([m['median_run_time_s'] for m in seeds.values()]))} s of run time; "
           f"turnaround instead of wait: {turnaround.measured}; 'more significant' has no "
           "number: K = 2")
    if dropped:
        why += (f"; seed(s) {', '.join(map(str, dropped))} left out of the ratio: a group "
                "without a positive mean benefit")
    return [Claim("4.8", "recovery cuts the affected long jobs' wait by more than the short "
                         "ones' (mean benefit of long / of short jobs)",
                  "more significant benefits are seen for long jobs", "ratio",
                  g.ratio(long, short, g.WORD_RATIO), where, why)]


UNGRADED = [
    Ungraded("4.7.3", "fig. 4.7 on Jaguar's own log (32 months)",
             "the Jaguar job logs are not available: RICC stands in for them"),
    Ungraded("4.7.2", "fig. 4.5's affected jobs wait less because failures and job "
                      "submissions are correlated in the LANL logs",
             "the LANL system-20 job log is not available; the failures here are placed "
             "independently of the jobs"),
]


def all_claims(results: dict[str, str], load_of: Callable[[str], str],
               trace_sweeps: dict[str, str] | None = None,
               measures: dict | None = None) -> list[Claim]:
    res = Results(results)
    return (recovery_claims(res, load_of) + replication_claims(res, trace_sweeps or {})
            + extra_claims(measures or {}))


def conditions(results: dict[str, str], searches: dict) -> list[Condition]:
    """What the load-factor searches set: conditions of the results, not results."""
    res = Results(results)
    out = []
    for name, search in searches.items():
        if name.startswith("utilisation"):
            sweep = f"recovery-{name.split('-')[1]}"
            u = res.seeds(sweep, "utilisation_pct", policy="ideal")
            out.append(Condition("4.7.2" if search.target < 50 else "4.7.4",
                                 f"CPU utilisation of the {sweep} sweep (ideal run)",
                                 f"{search.target:g} %",
                                 pct(mean(u.values())) + " (no failure: the seed does not "
                                 "enter)",
                                 f"load factor {search.load_factor:.4g} searched"))
    queue_searches = [s for n, s in searches.items() if n.startswith("queue")]
    if queue_searches:
        q = Results.seeds
        reached = [fmt(mean(q(res, "queue-length", "queue_length_mean",
                              load_factor=s.load_factor, strategy="fcfs", alpha=0.5).values()), 1)
                   for s in queue_searches]
        out.append(Condition("4.7.3", "fig. 4.8: average queue length of the three months",
                             ", ".join(f"{s.target:g}" for s in queue_searches) + " jobs",
                             ", ".join(reached),
                             "load factors " + ", ".join(f"{s.load_factor:.3g}"
                                                         for s in queue_searches)
                             + " searched"))
    return out


# ---------------------------------------------------------------------------------------------
# reproduction.rst

RULE = [
    "How every claim is graded (one rule, :mod:`scratchkeeper.sim.grading`)",
    "-----------------------------------------------------------------------", "",
    "Each sweep runs every setting with several seeds (the seed draws the stripes, the sizes "
    "of jobs without recorded memory, and where and when OSTs fail). A value is the mean over "
    "the seeds with its 95 % interval (Student's t, n - 1 degrees of freedom), written "
    "``mean [low, high]``; paired values (with and without recovery, one strategy against "
    "another) are differenced or divided within a seed first. Every claim is of one of five "
    "kinds and gets that kind's test:", "",
    "* **trend** (rises, falls, grows with the load): per seed the least-squares slope over "
    "every point (stripe counts on a log2 axis); *yes* when the slopes' interval excludes 0 in "
    "the claimed direction, *no* when it excludes 0 in the other, *not shown* when it "
    "contains 0 (the change is within the spread across seeds).",
    "* **ratio** (more than xK, much less, dramatically, significantly): the per-seed ratio's "
    "interval (log scale); *yes* above K, *partly* above 1 but not above K, *no* otherwise. "
    "Words without a number read as K = 2.",
    "* **band** (tens to hundreds of s, < 1.8 %, > 60 %, about 100,000 s, a stated value): "
    "*yes* when the interval lies in the band, *partly* when it lies in the band widened "
    "tenfold at each end (one order of magnitude), *no* otherwise. A stated value X is the "
    "band X/sqrt(10) .. X*sqrt(10).",
    "* **equal** (the same, virtually identical, almost flat, on the ideal curve): the "
    "per-seed relative difference (or range/mean); *yes* within ±5 %, *partly* within ±20 %, "
    "*no* otherwise.",
    "* a claim about *every* point (every stripe count, every alpha) takes its worst point's "
    "grade.", "",
    "With one seed there is no interval: the point is graded and marked *(1 seed)*. Conditions "
    "that the reproduction reaches by searching the load factor are listed as conditions, "
    "not graded.", ""]


def _list_table(header: list[str], rows: list[list[str]], widths: str) -> list[str]:
    lines = [".. list-table::", "   :header-rows: 1", f"   :widths: {widths}", ""]
    for row in [header] + rows:
        for k, cell in enumerate(row):
            lines.append(("   * - " if k == 0 else "     - ") + (cell or "(none)"))
    return lines + [""]


def disclosures(facts: dict) -> list[str]:
    """The conditions a reader must know, each measured from the shipped files."""
    lines = ["Disclosures", "-----------", ""]
    failures = facts.get("failures")
    if failures:
        extra = failures["records"] / 2049 * 100 - 100
        lines.append(
            f"* The LANL failure file shipped here has {failures['records']:,} records for "
            f"system 20 over {failures['days']:,.0f} days (first to last failure); the thesis "
            f"(§4.7.2) used 2,049 over 1,349 days: {extra:.0f} % more failures here, over "
            f"nearly the same period, so every failure effect is larger by about as much.")
    lines.append(
        "* The thesis reports 35 % utilisation for the LANL system-20 trace (§4.7.2) and "
        "70.50 % / 70.54 % (§4.7.4) for what it describes as the same traces; it does not say "
        "how the second load was reached. Here both are load factors searched on RICC.")
    for name, t in sorted(facts.get("traces", {}).items()):
        lines.append(
            f"* ``{name}``: {t['jobs']:,} jobs on {t['max_procs']:,} processors; "
            f"{t['le1'] * 100:.1f} % ask for at most 1 % of the machine and "
            f"{t['le10'] * 100:.1f} % for at most 10 %: the shortcut T = 0.01 (T = 0.1) "
            "replicates those on submission, so where the share is near 100 % its result "
            "is nearly automatic.")
    lines.append(
        "* The failures are extrapolated from system 20's records (node MTBF, repair times) "
        "and placed on the 64 OSTs at random, independently of the jobs; the job logs the "
        "thesis used (LANL system 20, ORNL Jaguar) are not available.")
    return lines + [""]


def write_reproduction(outcome) -> str:
    """``OUTPUT/reproduction.rst`` for a :class:`scratchkeeper.sim.reproduce.Reproduction`."""
    setup, searches = outcome.setup, outcome.searches
    factor_of = {f"recovery-{name.split('-')[1]}": s for name, s in searches.items()
                 if name.startswith("utilisation")}

    def load_of(sweep: str) -> str:
        search = factor_of.get(sweep)
        if search is None:
            return "load factor 1"
        return f"load factor {search.load_factor:.4g} ({search.target:g} % set)"

    claims = all_claims(outcome.results, load_of, outcome.trace_sweeps, outcome.measures)
    res = Results(outcome.results)
    task_seconds = sum(v for k, v in outcome.timings.items() if not k.startswith("calibration"))
    calibration_seconds = sum(s.seconds for s in searches.values())
    title = "The thesis's §4.7, reproduced" + (" (quick: shipped excerpt)" if setup.quick else "")
    lines = [title, "=" * len(title), "",
             "Written by ``scratchkeeper reproduce`` (``make reproduce``). Job trace "
             f"``{os.path.basename(setup.trace)}``, failures ``{os.path.basename(setup.failures)}``"
             " (LANL system 20). Every value below is read from the ``results-*.csv`` files next "
             "to this report; the sweep files are in ``sweeps/``. Seeds per sweep: "
             + ", ".join(f"{name} {res.seed_count(name)}" for name in outcome.results) + ".",
             ""]
    lines += RULE
    lines += ["Conditions (set by construction, not results)",
              "----------------------------------------------", "",
              "``load_factor`` < 1 spreads the submissions out. Each is searched with ideal "
              "replays (no failure) until the measured value is within 0.5 points "
              "(utilisation) or 10 % (queue length) of the thesis's; reaching it is what the "
              "search does, so it says nothing about the model.", ""]
    rows = [[c.section, c.what, c.thesis, c.reached, c.how]
            for c in conditions(outcome.results, searches)]
    lines += _list_table(["§", "condition", "the thesis", "reached here", "how"], rows,
                         "6 34 14 26 20")
    lines += disclosures(outcome.facts)
    lines += ["Claims", "------", "",
              "*measured* is the interval the grade rests on; *notes* give the curve and, where "
              "the grade is not *yes*, what differs in the conditions.", ""]
    rows = [[c.section, c.claim, c.thesis, c.kind, c.grade.measured, c.conditions, c.shape,
             c.why] for c in claims]
    lines += _list_table(["§", "claim", "the thesis", "kind", "measured", "conditions",
                          "grade", "notes"], rows, "5 20 11 6 18 12 7 21")
    lines += ["Claims not graded", "-----------------", ""]
    lines += [f"* {u.claim} ({u.section}): {u.reason}" for u in UNGRADED] + [""]
    differing = [c for c in claims if c.grade.verdict != YES]
    lines += ["Claims not reproduced (grade other than yes)",
              "--------------------------------------------", ""]
    lines += [f"* {c.claim} ({c.section}; {c.shape}): {c.grade.measured}"
              + (f"; {c.why}" if c.why else "") for c in differing] or ["* none"]
    lines += ["", "Time taken", "----------", "",
              f"* load-factor searches: {_minutes(calibration_seconds)} of replays",
              f"* sweep tasks: {_minutes(task_seconds)} of replays "
              f"({len([k for k in outcome.timings if not k.startswith('calibration')])} tasks)",
              f"* this call, start to report: {_minutes(outcome.wall_seconds)} (tasks finished "
              "by an earlier call with the same settings are reused, not rerun)", "",
              "Figures", "-------", "",
              "Points are the mean over the seeds, bars the 95 % interval.", ""]
    for path in outcome.figures:
        name = os.path.basename(path)
        if name.endswith(".png"):
            lines += [f".. image:: {name}", ""]
    path = os.path.join(outcome.output, "reproduction.rst")
    with open(path, "w") as stream:
        stream.write("\n".join(lines))
    return path


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"
