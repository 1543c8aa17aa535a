"""``reproduction.rst``: the grading rule, the conditions, the counts and every claim's row.

Written from a :class:`scratchkeeper.sim.reproduce.Reproduction`; the claims come from
:func:`scratchkeeper.sim.claims.all_claims` and are counted by :data:`grading.TALLY`:
reproduced, partly, not reproduced, by construction, not measurable.
"""

from __future__ import annotations

import os
from collections import Counter

from . import grading as g
from .claims import UNGRADED, Claim, all_claims, conditions
from .evidence import Results

RULE = [
    "How every claim is graded (one rule, :mod:`scratchkeeper.sim.grading`)",
    "-----------------------------------------------------------------------", "",
    "A sweep runs every setting with several seeds only where the seed draws something that "
    "changes the result on that trace (see *Seeds* below); otherwise it runs once. A value is "
    "the mean over the seeds with its 95 % interval (Student's t, n - 1 degrees of freedom), "
    "written ``mean [low, high]``; paired values (with and without recovery, one strategy "
    "against another) are differenced or divided within a seed first. A value from one run "
    "has no interval and its grade says *(one run)*. Every claim is of one kind and gets that "
    "kind's test:", "",
    "* **trend** (rises, falls, grows with the load): per seed the least-squares slope over "
    "every point (stripe counts on a log2 axis); *yes* when the slopes' interval excludes 0 in "
    "the claimed direction, *no* when it excludes 0 in the other, *not shown* when it "
    "contains 0 (the change is within the spread across seeds).",
    "* **ratio** (more than xK, much less, dramatically, significantly): the per-seed ratio's "
    "interval (log scale); *yes* above K, *partly* above 1 but not above K, *no* otherwise. "
    "Words without a number read as K = 2.",
    "* **value** (a number the thesis states): *yes* when the interval, widened by the "
    "thesis's rounding (half a unit of its last digit), holds the thesis's value, *no* "
    "otherwise, with how far it missed in the thesis's units.",
    "* **band** (a range the thesis states: tens to hundreds of s, < 1.8 %, > 60 %): *yes* "
    "when the interval lies in the range, *partly* when it lies in the range widened tenfold "
    "at each end (one order of magnitude), *no* otherwise.",
    "* **limit** (most datasets in time: fewer than half at risk): *yes* when the interval "
    "lies below the limit, *no* when above it, *not shown* when it straddles it.",
    "* **equal** (the same, virtually identical, on the ideal curve): the per-seed relative "
    "difference; *yes* when its interval includes 0 and stays within ±20 %, *not shown* when "
    "it includes 0 but is wider, *partly* when it excludes 0 but stays within ±5 %, *no* "
    "otherwise. With one run the difference must be 0 at 0.1 %.",
    "* **flat** (almost flat): per seed the curve's range over its mean; *yes* within 5 %, "
    "*partly* within 20 %.",
    "* a claim about *every* point (every stripe count, every alpha) takes its worst point's "
    "grade.",
    "* **by construction**: a claim that a definition or a property of the trace makes true "
    "is shown with what the replay measured but counted apart, never as reproduced.", "",
    "Conditions that the reproduction reaches by searching the load factor are listed as "
    "conditions, not graded.", ""]


def seed_lines(res: Results, draws: dict[str, list[str]]) -> list[str]:
    """What the seed draws in each sweep, and which sweeps ran (or count as) one run."""
    lines = ["Seeds", "-----", ""]
    for sweep in res.rows:
        seeds = res.seed_count(sweep)
        drawn = draws.get(sweep)
        text = f"* ``{sweep}``: "
        if sweep in res.duplicates:
            text += (f"{res.duplicates[sweep]} seeds gave identical results for every setting: "
                     "graded as one run, without an interval")
        elif seeds == 1:
            text += "one run"
        else:
            text += f"{seeds} seeds"
        if drawn is not None:
            text += ("; the seed draws " + ", ".join(drawn) if drawn else
                     "; the seed draws nothing that changes the result on this trace")
        lines.append(text + ".")
    return lines + [""]


def tally(claims: list[Claim]) -> list[str]:
    """The counts: reproduced, partly, not, by construction, not measurable."""
    counts = Counter(g.TALLY[c.grade.verdict] for c in claims)
    counts["not measurable"] += len(UNGRADED)
    one_run = sum(1 for c in claims if c.grade.seeds == 1
                  and c.grade.verdict in (g.YES, g.PARTLY, g.NO))
    order = ["reproduced", "partly", "not reproduced", "by construction", "not measurable"]
    lines = ["Counts", "------", "",
             f"{len(claims) + len(UNGRADED)} claims: "
             + ", ".join(f"{counts[k]} {k}" for k in order) + ".",
             f"{one_run} of the graded ones rest on one run (no interval); *not measurable* "
             "counts the claims without data here and those not graded (listed below).", ""]
    return lines


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

    claims = all_claims(outcome.results, load_of, outcome.trace_sweeps, outcome.measures,
                        shortcut_shares(outcome))
    res = Results(outcome.results)
    task_seconds = sum(v for k, v in outcome.timings.items() if not k.startswith("calibration"))
    calibration_seconds = sum(s.seconds for s in searches.values())
    title = "The thesis's §4.7, reproduced" + (" (quick: shipped excerpt)" if setup.quick else "")
    lines = [title, "=" * len(title), "",
             "Written by ``scratchkeeper reproduce`` (``make reproduce``). Job trace "
             f"``{os.path.basename(setup.trace)}``, failures ``{os.path.basename(setup.failures)}``"
             " (LANL system 20). Every value below is read from the ``results-*.csv`` files next "
             "to this report; the sweep files are in ``sweeps/``.", ""]
    lines += tally(claims) + RULE + seed_lines(res, outcome.draws)
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
    for title, picked in (("Claims true by construction (counted apart)",
                           [c for c in claims if c.grade.verdict == g.BY_CONSTRUCTION]),
                          ("Claims not reproduced (grade other than yes)",
                           [c for c in claims if c.grade.verdict not in (g.YES,
                                                                         g.BY_CONSTRUCTION)])):
        lines += [title, "-" * len(title), ""]
        lines += [f"* {c.claim} ({c.section}; {c.shape}): {c.grade.measured}"
                  + (f"; {c.why}" if c.why else "") for c in picked] or ["* none"]
        lines += [""]
    lines += ["Time taken", "----------", "",
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


def shortcut_shares(outcome) -> dict[str, dict[float, float]]:
    """Per replication sweep, the share of its trace's jobs each shortcut T replicates on
    submission (from the trace facts: jobs asking at most 1 % and 10 % of the machine)."""
    traces = outcome.facts.get("traces", {})
    trace_of = dict.fromkeys(outcome.results, outcome.setup.trace)
    trace_of.update({f"replication-{name}": path for name, path in outcome.setup.other_traces})
    out = {}
    for sweep, path in trace_of.items():
        facts = traces.get(os.path.basename(path))
        if facts:
            out[sweep] = {0.01: facts["le1"], 0.1: facts["le10"]}
    return out


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"

