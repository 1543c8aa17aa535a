"""Every quantitative claim of the thesis's §4.7 and §4.8, graded by one rule: ``reproduction.rst``.

Each :class:`Claim` names the thesis's words, the kind of claim (trend, ratio, value, band,
equal; see :mod:`scratchkeeper.sim.grading` for the rule of each), the interval measured over
the seeds under the closest conditions the data allow, and the verdict the rule gives. This
module holds the recovery claims (§4.7.2, §4.7.4), the per-job ones (§4.5.1, §4.8) and the
list of all; :mod:`scratchkeeper.sim.replication_claims` the replication ones (§4.7.3).
Conditions the reproduction sets by searching the load factor are :class:`Condition` rows, not
claims. The values come from the ``results-*.csv`` files of :mod:`scratchkeeper.sim.reproduce`;
nothing here is typed in but the thesis's own words and numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from . import grading as g
from .evidence import (
    Claim,
    Condition,
    Results,
    Ungraded,
    apart,
    at,
    diff_curves,
    fmt,
    mean,
    mean_curve,
    only,
    pct,
)
from .grading import MISSING, YES
from .replication_claims import Shares, replication_claims

__all__ = ["YES", "MISSING", "Claim", "Condition", "Results", "all_claims"]

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
            f"mean curve {mean_curve(none)} s"))
    ideal = res.seeds(sweep, "filtered_wait_mean", policy="ideal")
    ideal_sd = res.seeds(sweep, "filtered_wait_sd", policy="ideal")
    for stat, label, reference in (("filtered_wait_mean", "mean", ideal),
                                   ("filtered_wait_sd", "SD", ideal_sd)):
        rec = res.curves(sweep, stat, "stripe_count", policy=policy)
        # The ideal run has no failure: the same for every seed and stripe count.
        level = mean(reference.values())
        per_x = [g.equal(at(rec, x), dict.fromkeys(at(rec, x), level))
                 for x in res.xs(sweep, "stripe_count", policy=policy)]
        worst = max(per_x, key=lambda gr: apart(gr.measured), default=None)
        grade = g.every(per_x, f"largest gap to the ideal: {worst.measured if worst else '-'}")
        out.append(Claim(
            section, f"{figure}: with {policy} recovery the {label} of all jobs' wait equals "
                     "the ideal (no failure) at every stripe count", "on the ideal curve",
            "equal", grade, where,
            f"ideal {fmt(level)} s; mean curve {mean_curve(rec)} s; kills per run "
            f"{fmt(res.value(sweep, 'kills', policy='none'))} without, "
            f"{fmt(res.value(sweep, 'kills', policy=policy))} with recovery"
            + ("" if grade.verdict == YES else "; " + _why_not_ideal(policy))))
    return out


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
        curve = only(res.curves(low, stat, "stripe_count", policy="pre-execution"),
                      lambda x: x >= 4)
        out.append(Claim("4.7.2", f"fig. 4.5: the {label} of the affected jobs' wait rises as "
                                  "the stripe count goes from 4 to 32", "rises", "trend",
                         g.trend(curve, 1, log2_x=True, unit=" s"), w_low + ", pre-execution",
                         f"mean curve {mean_curve(curve)} s"))
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
                             "value", g.value(at(share, x), stated, 0.005, 2, " %"),
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
                         f"mean curve {mean_curve(curve)} s"))
    u_none = res.seeds(high, "utilisation_pct", policy="none")
    u_otf = res.seeds(high, "utilisation_pct", policy="on-the-fly")
    out.append(Claim("4.7.4", "CPU utilisation with on-the-fly recovery is the same as without "
                              "(+0.04 points)", "70.50 % / 70.54 %", "equal",
                     g.equal(u_otf, u_none, "+0.06 %"), where + " (mean over stripe counts)",
                     f"{pct(mean(u_none.values()))} without, {pct(mean(u_otf.values()))} with: "
                     "without recovery a killed job's lost run is run again and counted as work"))
    return out


def _load_claims(res: Results) -> list[Claim]:
    sweep, out = "load", []
    where = "RICC, submissions spread or packed, stripe count 4, pre-execution recovery"
    for stat, label in (("filtered_wait_mean", "mean"), ("filtered_wait_sd", "SD")):
        gap = diff_curves(res.curves(sweep, stat, "load_factor", policy="none"),
                           res.curves(sweep, stat, "load_factor", policy="pre-execution"))
        signs = {x: sorted({v[x] > 0 for v in gap.values() if x in v}) for x in
                 res.xs(sweep, "load_factor")}
        changes = [f"{x:g}" for x, s in signs.items() if len(s) > 1]
        out.append(Claim(
            "4.7.2", f"fig. 4.6 ({'a' if label == 'mean' else 'b'}): as the load grows, all jobs' "
                     f"wait {label} grows more slowly with recovery than without",
            "the gap without - with recovery grows with the load", "trend",
            g.trend(gap, 1, unit=" s"), where,
            f"mean gap {mean_curve(gap)} s" + (f"; the gap changes sign across seeds at load "
                                                f"{', '.join(changes)}" if changes else "")))
    pre = res.curves(sweep, "affected_wait_mean", "load_factor", policy="pre-execution")
    none = res.curves(sweep, "affected_wait_mean", "load_factor", policy="none")
    loads = res.xs(sweep, "load_factor")
    out.append(Claim("4.7.2", "fig. 4.6 (c): with recovery the affected jobs' mean wait grows "
                              "with the load", "tens -> hundreds of s", "trend",
                     g.trend(pre, 1, unit=" s"), where, f"mean curve {mean_curve(pre)} s"))
    if loads:
        out.append(Claim("4.7.2", "fig. 4.6 (c): with recovery the affected jobs' mean wait at "
                                  "the lightest and the heaviest load", "tens of s; hundreds of s",
                         "band", g.every([g.band(at(pre, loads[0]), 10, 100),
                                          g.band(at(pre, loads[-1]), 100, 1000)],
                                         f"{g.interval(at(pre, loads[0]).values()).text(0, ' s')}"
                                         f"; {g.interval(at(pre, loads[-1]).values()).text(0, ' s')}"),
                         where, "affected running jobs are killed and requeued at the tail of "
                                "RICC's long queue"))
        around = [g.value(at(none, x), 1e5, 5e4, 0, " s") for x in loads]
        out.append(Claim("4.7.2", "fig. 4.6 (c): without recovery the affected jobs' mean wait "
                                  "stays around 100,000 s (one significant digit: 50,000 to "
                                  "150,000 s)", "~100,000 s at every load", "value",
                         g.every(around, "; ".join(f"{x:g}: {gr.measured}" for x, gr in
                                                   zip(loads, around))), where))
    kills = res.curves(sweep, "kills", "load_factor", policy="none")
    per_failure = {s: {x: c[x] / f for x in c if (f := res.value(sweep, "ost_failures",
                                                                 policy="none", load_factor=x,
                                                                 seed=float(s)))}
                   for s, c in kills.items()}
    out.append(Claim("4.7.2", "fig. 4.6 (d): with heavier load more running jobs are "
                              "interrupted by the failures", "more interrupted jobs", "trend",
                     g.trend(kills, 1, digits=0, unit=" kills"),
                     "RICC, submissions spread or packed, stripe count 4, without recovery",
                     f"kills per run {mean_curve(kills)}; per OST failure "
                     f"{mean_curve(per_failure)}: packing the submissions shortens the span, "
                     "so fewer failures fall in it (the thesis's concatenated traces too)"))
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
    """§4.8: recovery cuts the wait of affected long jobs by more than that of short ones.

    Graded on the queue wait (a killed job's discarded run is not wait: long jobs are the ones
    a failure kills, so counting it makes the claim true by how wait is counted); the wait
    with the discarded run in it is shown beside it.
    """
    if not long_jobs:
        return []
    seeds = {int(seed): m for seed, m in long_jobs["seeds"].items()}

    def benefit(group: str, stat: str) -> dict[int, float]:
        return {s: m[group].get(stat, math.nan) for s, m in seeds.items()}

    def positive(stat: str) -> tuple[dict[int, float], dict[int, float], list[int]]:
        long, short = benefit("long", stat), benefit("short", stat)
        both = g.paired(long, short)
        return long, short, [s for s in both if not (long[s] > 0 and short[s] > 0)]

    long, short, dropped = positive("queue_wait_benefit_s")
    counted = g.ratio(benefit("long", "wait_benefit_s"), benefit("short", "wait_benefit_s"),
                      g.WORD_RATIO)
    turnaround = g.ratio(benefit("long", "turnaround_benefit_s"),
                         benefit("short", "turnaround_benefit_s"), g.WORD_RATIO)
    killed = {k: g.interval(benefit(k, "killed_pct").values()).text(0, " %")
              for k in ("long", "short")}
    where = (f"RICC, load factor {long_jobs['load_factor']:.4g} "
             f"({long_jobs['utilisation_target']:g} % set), EASY, extrapolated failures, "
             f"stripe count {long_jobs['stripe_count']}, {long_jobs['policy']} recovery against "
             "none (figs. 4.9-4.12); the jobs a failure affected without recovery, matched by "
             "id; long = run time above the median of those jobs in the seed, short = at or "
             "below it")
    why = ("a job's benefit is its queue wait without recovery minus its queue wait with it; "
           "the queue wait leaves out the run a kill threw away, which is run time, not wait. "
           f"Killed without recovery: long {killed['long']}, short {killed['short']} of the "
           f"jobs. Counting the discarded run as wait gives {counted.measured} "
           f"({counted.verdict} by the same rule): the thesis's 'more significant benefits' "
           "would then follow from which jobs are killed. Over the seeds, long jobs gain "
           f"{fmt(mean(long.values()))} s of queue wait and short ones "
           f"{fmt(mean(short.values()))} s, of "
           f"{fmt(mean([m['affected'] for m in seeds.values()]))} affected jobs per seed split "
           f"at {fmt(mean([m['median_run_time_s'] for m in seeds.values()]))} s of run time; "
           f"turnaround instead: {turnaround.measured}; 'more significant' has no number: K = 2")
    if dropped:
        why += (f"; seed(s) {', '.join(map(str, dropped))} left out of the ratio: a group "
                "without a positive mean benefit")
    return [Claim("4.8", "recovery cuts the affected long jobs' queue wait by more than the "
                         "short ones' (mean benefit of long / of short jobs; discarded run "
                         "time not counted as wait)",
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
               measures: dict | None = None, shares: Shares | None = None) -> list[Claim]:
    """Every graded claim; ``shares`` (sweep -> {T: share of jobs}) marks the shortcut claims
    a trace's job sizes decide (see :func:`scratchkeeper.sim.replication_claims.by_shortcut`)."""
    res = Results(results)
    return (recovery_claims(res, load_of) + replication_claims(res, trace_sweeps or {}, shares)
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


