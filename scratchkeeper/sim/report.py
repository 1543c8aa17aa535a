"""Plots with the shapes of the thesis's figures 4.5-4.12 and a table beside its numbers.

Input is a sweep's ``results.csv``. A figure is drawn when the results vary its x axis:
jobs at risk and replica space vs alpha per strategy (fig. 4.7), wait mean/SD vs stripe count
per recovery policy for all and for affected jobs (figs. 4.5, 4.9-4.12), the same vs load
factor (fig. 4.6). Needs matplotlib (the ``plots`` extra).
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections import defaultdict
from dataclasses import dataclass

from ..errors import InputError, ScratchkeeperError
from ..inputfiles import read_text
from .grading import Interval, interval

POLICY_LABELS = {"ideal": "ideal (no failure)", "none": "without recovery",
                 "pre-execution": "pre-execution recovery", "on-the-fly": "on-the-fly recovery"}
# Fixed per policy, so a policy has one colour in every panel (the ideal is absent from some).
POLICY_COLORS = {"ideal": "black", "none": "tab:red", "pre-execution": "tab:orange",
                 "on-the-fly": "tab:green"}

#: What the thesis's §4.7 reports, for the table beside ours.
SEED_NUMBERS = [
    ("affected_pct", "jobs affected by failures, stripe count 2 -> 32 (%)", "0.14 -> 2.09 (4.7.4)"),
    ("utilisation_pct", "utilisation without / with recovery (%)", "70.50 / 70.54 (4.7.4)"),
    ("affected_wait_mean", "mean wait of affected jobs, without -> with recovery (s)",
     "> 100,000 -> thousands (4.7.4); hundreds of thousands -> tens (4.7.2)"),
    ("filtered_wait_mean", "mean wait of all jobs (filtered), with recovery vs ideal",
     "equal for every stripe count (4.7.2, 4.7.4)"),
    ("at_risk_fcfs", "jobs at risk, FCFS window, alpha = 2 (%)", "> 60 (4.7.3)"),
    ("at_risk_shortcut", "jobs at risk, T = 0.1 vs dispatch-aware", "virtually identical (4.7.3)"),
    ("space_inf", "replica space, alpha = inf, mean of 300 samples (% of scratch)", "< 1.8 (4.7.3)"),
    ("space_small", "replica space, T = 0.1, alpha 0.2 and 0.5 (% of scratch)", "< 0.5 (4.7.3)"),
]


@dataclass
class Row:
    values: dict
    source: str = ""

    def num(self, key: str) -> float:
        text = self.values.get(key, "")
        try:
            return float(text) if text not in ("", None) else math.nan
        except ValueError:
            return math.nan

    def text(self, key: str) -> str:
        return self.values.get(key, "") or ""


#: Largest results.csv read: a row is a few hundred bytes, a sweep of 100,000 runs ~50 MB.
RESULTS_SIZE_MAX = 256 << 20


def read_results(path: str) -> list[Row]:
    """The rows of a sweep's results.csv: a regular file of at most RESULTS_SIZE_MAX bytes of
    UTF-8 CSV; every problem is one InputError naming the file and, where there is one, the
    line."""
    text = read_text(path, RESULTS_SIZE_MAX, what="sweep results.csv")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        needed = {"policy", "stripe_count", "wait_mean"}
        if not reader.fieldnames or not needed <= set(reader.fieldnames):
            raise InputError("not a sweep results.csv (missing policy/stripe_count/wait_mean)",
                             path=path, line=1)
        rows = [Row(dict(r), path) for r in reader]
    except csv.Error as err:
        # DictReader.line_num is set only after a row is read whole: the csv reader's, not it
        raise InputError(f"not a CSV record: {err}", path=path,
                         line=reader.reader.line_num) from err
    if not rows:
        raise InputError("no result row", path=path)
    return rows


def _strategy_label(row: Row) -> str:
    strategy = row.text("strategy")
    if strategy == "shortcut":
        return f"FCFS + shortcut T={row.num('threshold'):g}"
    if strategy == "fcfs":
        return "FCFS"
    return "dispatch-aware (offline)"


def _one_sweep(rows: list[Row], x_key: str) -> list[Row]:
    """The rows of the results file (one sweep) with the most distinct values of ``x_key``."""
    by_source: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        by_source[r.source].append(r)
    return max(by_source.values(), key=lambda group: len({r.num(x_key) for r in group}))


def _fixed_load(rows: list[Row], vary: bool) -> list[Row]:
    """The rows of the results files whose replication rows vary (or do not vary) the load."""
    by_source: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        by_source[r.source].append(r)
    kept = []
    for group in by_source.values():
        loads = {r.num("load_factor") for r in group if r.text("strategy")}
        if (len(loads) > 1) == vary:
            kept += group
    return kept


def _most_common(rows: list[Row], key: str) -> str:
    counts: dict[str, int] = defaultdict(int)
    for r in rows:
        counts[r.text(key)] += 1
    return max(counts, key=counts.get)


def _pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise ScratchkeeperError("scratchkeeper report needs matplotlib: pip install "
                                 "'scratchkeeper[plots]'") from err
    return plt


INPUT_LABELS = {"requested-memory": "input = requested memory",
                "peak-memory": "input = peak memory (calibrated, the thesis's §4.5.1)"}


def conditions(rows: list[Row], *, load: bool = True, inputs: bool = True) -> str:
    """The trace, the load and the input-size model of ``rows``, for a figure's title."""
    parts = [", ".join(sorted({os.path.basename(r.text("trace")) for r in rows}))]
    days = {(r.num("start_day"), r.num("days")) for r in rows}
    if len(days) == 1:
        start, length = days.pop()
        if length > 0:
            parts.append(f"days {start:g}-{start + length:g}")
    if load:
        factors = sorted({r.num("load_factor") for r in rows})
        if len(factors) == 1:
            used = _avg(rows, "utilisation_pct")
            parts.append(f"load factor {factors[0]:.3g} ({used:.1f} % utilisation)")
    if inputs:
        models = sorted({r.text("input_model") or "requested-memory" for r in rows})
        parts.append(" / ".join(INPUT_LABELS.get(m, m) for m in models))
    return "; ".join(parts)


def plot_replication(rows: list[Row], output: str, schedule: str = "model") -> str | None:
    """Fig. 4.7: jobs at risk and replica space vs alpha, one line per strategy.

    One column per input-size model (risk depends on it too: a larger input takes longer to
    copy), so fig. 4.7b with calibrated peak memory stands beside the requested-memory one.
    """
    # Fig. 4.8's sweep (several loads) is not part of this figure.
    rows = [r for r in _fixed_load(rows, vary=False) if r.text("strategy")
            and (r.text("schedule") or "model") == schedule]
    alphas = sorted({r.num("alpha") for r in rows})
    if len(alphas) < 2:
        return None
    plt = _pyplot()
    models = [m for m in INPUT_LABELS if any((r.text("input_model") or "requested-memory") == m
                                             for r in rows)]
    fig, axes = plt.subplots(2, len(models), figsize=(5.6 * len(models), 7.6), squeeze=False)
    positions = {a: i for i, a in enumerate(alphas)}
    ticks = ["inf" if math.isinf(a) else f"{a:g}" for a in alphas]
    for column, model in enumerate(models):
        ax_risk, ax_space = axes[0][column], axes[1][column]
        lines: dict[str, dict[float, list[Row]]] = defaultdict(lambda: defaultdict(list))
        for r in rows:
            if (r.text("input_model") or "requested-memory") == model:
                lines[_strategy_label(r)][r.num("alpha")].append(r)
        for label, points in sorted(lines.items()):
            xs = [positions[a] for a in sorted(points)]
            for ax, key in ((ax_risk, "at_risk_pct"), (ax_space, "space_mean_pct")):
                ivs = [_per_seed(points[a], key) for a in sorted(points)]
                ax.errorbar(xs, [iv.mean for iv in ivs], yerr=_errors(ivs), marker="o",
                            capsize=3, label=label)
        for ax, title, ylabel in ((ax_risk, "(a) jobs at risk", "jobs at risk (%)"),
                                  (ax_space, "(b) replica space (mean of 300 samples)",
                                   "replica space (% of scratch)")):
            ax.set_xticks(range(len(alphas)), ticks)
            ax.set_xlabel("alpha")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{title}\n{INPUT_LABELS.get(model, model)}", fontsize=9)
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
        ax_risk.legend(fontsize=8)
    fig.suptitle(f"Temporal replication on the {schedule} schedule: "
                 f"{conditions(rows, inputs=False)}", fontsize=9)
    fig.tight_layout()
    suffix = "" if schedule == "model" else f"_{schedule}"
    path = os.path.join(output, f"replication_vs_alpha{suffix}.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_queue_length(rows: list[Row], output: str, alpha: float = 0.5) -> str | None:
    """Fig. 4.8: jobs at risk per strategy for one period at three loads (its queue lengths)."""
    rows = [r for r in _fixed_load(rows, vary=True) if r.text("strategy")
            and r.num("alpha") == alpha]
    loads = sorted({r.num("load_factor") for r in rows})
    if len(loads) < 2:
        return None
    plt = _pyplot()
    labels = sorted({_strategy_label(r) for r in rows})
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / len(labels)
    for k, label in enumerate(labels):
        ivs = [_per_seed([r for r in rows if r.num("load_factor") == load
                          and _strategy_label(r) == label], "at_risk_pct") for load in loads]
        ax.bar([i + (k - (len(labels) - 1) / 2) * width for i in range(len(loads))],
               [iv.mean for iv in ivs], width, yerr=_errors(ivs), capsize=2, label=label)
    names = []
    for load in loads:
        match = [r for r in rows if r.num("load_factor") == load]
        names.append(f"queue {_avg(match, 'queue_length_mean'):.1f}\n(load factor {load:.3g},"
                     f"\n{_avg(match, 'utilisation_pct'):.0f} % used)")
    ax.set_xticks(range(len(loads)), names, fontsize=8)
    ax.set_ylabel("jobs at risk (%)")
    ax.set_ylim(0, 112)         # room above 100 % for the legend
    ax.set_yticks(range(0, 101, 20))
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7, ncol=len(labels), loc="upper center")
    ax.set_title(f"Jobs at risk at alpha = {alpha:g} by average queue length\n"
                 f"{conditions(rows, load=False)}", fontsize=9)
    fig.tight_layout()
    path = os.path.join(output, "at_risk_vs_queue_length.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_waits(rows: list[Row], x_key: str, x_label: str, name: str, output: str,
               hold: tuple[str, ...]) -> str | None:
    """Figs. 4.5/4.9-4.12 (x = stripe count) and 4.6 (x = load factor): wait mean/SD per policy."""
    # Filtered statistics compare the runs of one sweep only: take the sweep (results file)
    # that varies x the most. One schedule per (policy, x): replication variants repeat it.
    rows = _one_sweep(rows, x_key)
    fixed = {key: _most_common(rows, key) for key in hold}
    chosen = [r for r in rows if all(r.text(k) == v for k, v in fixed.items())]
    xs = sorted({r.num(x_key) for r in chosen})
    if len(xs) < 2:
        return None
    plt = _pyplot()
    # Several seeds per point are averaged (one row per seed: replication variants repeat it).
    series: dict[str, dict[float, dict[str, Row]]] = defaultdict(lambda: defaultdict(dict))
    for r in chosen:
        series[r.text("policy")][r.num(x_key)].setdefault(r.text("seed"), r)
    seeds = max(len(per_seed) for points in series.values() for per_seed in points.values())
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    panels = [(axes[0][0], "filtered_wait_mean", "(a) all jobs: mean wait", False),
              (axes[0][1], "filtered_wait_sd", "(b) all jobs: SD of wait", False),
              (axes[1][0], "affected_wait_mean", "(c) affected jobs: mean wait", True),
              (axes[1][1], "affected_wait_sd", "(d) affected jobs: SD of wait", True)]
    order = [p for p in POLICY_LABELS if p in series]
    for ax, key, title, log in panels:
        for policy in order:
            points = sorted(series[policy].items())
            values = [(x, _per_seed(list(per_seed.values()), key)) for x, per_seed in points]
            values = [(x, iv) for x, iv in values if not iv.missing]
            if policy == "ideal" and key.startswith("affected"):
                continue        # no failure, so no affected job
            if not values:
                continue
            style = "--" if policy == "ideal" else "-"
            if len(values) == 1:
                # Run once (the ideal does not depend on stripes): a level line across the plot.
                ax.axhline(values[0][1].mean, linestyle=style, color=POLICY_COLORS[policy],
                           linewidth=1, label=POLICY_LABELS[policy])
                continue
            ivs = [v[1] for v in values]
            ax.errorbar([v[0] for v in values], [iv.mean for iv in ivs], yerr=_errors(ivs),
                        linestyle=style, marker="o", capsize=3, color=POLICY_COLORS[policy],
                        label=POLICY_LABELS[policy])
        ax.set_title(title)
        ax.set_xlabel(x_label)
        ax.set_ylabel("seconds")
        if x_key == "stripe_count":
            ax.set_xscale("log", base=2)
            ax.set_xticks(xs, [f"{x:g}" for x in xs])
        if log and ax.get_lines():
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    held = ", ".join(f"{k}={v}" for k, v in fixed.items() if k != "load_factor")
    averaged = (f"; mean of {seeds} seeds, bars: 95 % interval" if seeds > 1 else
                "; one seed, no interval")
    fig.suptitle(f"Wait time vs {x_label}: {conditions(chosen, load=x_key != 'load_factor')}\n"
                 f"failures of LANL system {_most_common(chosen, 'failure_system')} "
                 f"({held}{averaged}); jobs with zero wait in every run left out of (a), (b)",
                 fontsize=9)
    fig.tight_layout()
    path = os.path.join(output, name)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


#: Settings that, when they vary within one results file, split a metric into one row each.
SETTING_KEYS = ("trace", "schedule", "input_model", "load_factor", "start_day", "days")


def _seed_of(row: Row) -> str:
    return row.text("seed") or "1"


def _per_seed(rows: list[Row], key: str) -> Interval:
    """``key`` averaged within each seed, then the 95 % interval across seeds."""
    by_seed: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        by_seed[_seed_of(r)].append(r.num(key))
    return interval([_avg_values(v) for v in by_seed.values()])


def _avg(rows: list[Row], key: str) -> float:
    values = [r.num(key) for r in rows if not math.isnan(r.num(key))]
    return sum(values) / len(values) if values else math.nan


def _errors(intervals: list[Interval]) -> list[list[float]]:
    """matplotlib's yerr (below, above) for the 95 % intervals; 0 where one seed gives none."""
    return [[iv.mean - iv.low for iv in intervals], [iv.high - iv.mean for iv in intervals]]


def _avg_values(values: list[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return sum(values) / len(values) if values else math.nan


def _cell(iv: Interval, digits: int = 2) -> str:
    # One seed: the section's title says so; the cell is the plain value.
    return f"{iv.mean:,.{digits}f}" if iv.n == 1 else iv.text(digits)


def _recovery_policy(rows: list[Row]) -> str | None:
    policies = {r.text("policy") for r in rows}
    return next((p for p in ("on-the-fly", "pre-execution") if p in policies), None)


def _metric(key: str, rows: list[Row]) -> str:
    """One metric of SEED_NUMBERS for ``rows`` (one results file, one setting): its value, or
    a stated blank naming what the rows lack. Never averaged across files or settings."""
    def where(**match) -> list[Row]:
        return [r for r in rows if all((r.text(k) if isinstance(v, str) else r.num(k)) == v
                                       for k, v in match.items())]
    recovery = _recovery_policy(rows)
    none = where(policy="none")
    if key == "affected_pct":
        counts = sorted({r.num("stripe_count") for r in none})
        if len(counts) < 2:
            return "not in this sweep (needs policy none at two or more stripe counts)"
        lo, hi = (_per_seed([r for r in none if r.num("stripe_count") == c], key)
                  for c in (counts[0], counts[-1]))
        return f"{_cell(lo)} -> {_cell(hi)} (stripe {counts[0]:g} -> {counts[-1]:g})"
    if key in ("utilisation_pct", "affected_wait_mean"):
        if not none or recovery is None:
            return "not in this sweep (needs policy none and a recovery policy)"
        digits = 2 if key == "utilisation_pct" else 0
        rec = _per_seed(where(policy=recovery), key)
        arrow = " / " if key == "utilisation_pct" else " -> "
        return f"{_cell(_per_seed(none, key), digits)}{arrow}{_cell(rec, digits)} ({recovery})"
    if key == "filtered_wait_mean":
        ideal = where(policy="ideal")
        if not ideal or recovery is None:
            return "not in this sweep (needs policy ideal and a recovery policy)"
        return (f"{_cell(_per_seed(where(policy=recovery), key), 0)} ({recovery}) vs "
                f"{_cell(_per_seed(ideal, key), 0)} (ideal)")
    if key == "at_risk_fcfs":
        fcfs2 = where(strategy="fcfs", alpha=2.0)
        return _cell(_per_seed(fcfs2, "at_risk_pct")) if fcfs2 else \
            "not in this sweep (needs strategy fcfs at alpha 2)"
    if key == "at_risk_shortcut":
        short = where(strategy="shortcut", threshold=0.1)
        oracle = where(strategy="dispatch-aware")
        alphas = sorted({r.num("alpha") for r in short} & {r.num("alpha") for r in oracle})
        if not alphas:
            return "not in this sweep (needs shortcut T = 0.1 and dispatch-aware at one alpha)"
        gaps = [abs(_per_seed([r for r in short if r.num("alpha") == a], "at_risk_pct").mean
                    - _per_seed([r for r in oracle if r.num("alpha") == a], "at_risk_pct").mean)
                for a in alphas]
        return (f"at most {max(gaps):.2f} points apart over alpha "
                + ", ".join("inf" if math.isinf(a) else f"{a:g}" for a in alphas))
    if key == "space_inf":
        inf = [r for r in where(strategy="fcfs") if math.isinf(r.num("alpha"))]
        return f"{_cell(_per_seed(inf, 'space_mean_pct'))} (FCFS)" if inf else \
            "not in this sweep (needs strategy fcfs at alpha inf)"
    if key == "space_small":
        short = where(strategy="shortcut", threshold=0.1)
        parts = [f"alpha {a:g}: {_cell(_per_seed(match, 'space_mean_pct'))}" for a in (0.2, 0.5)
                 if (match := [r for r in short if r.num("alpha") == a])]
        return " / ".join(parts) if parts else \
            "not in this sweep (needs shortcut T = 0.1 at alpha 0.2 or 0.5)"
    raise ValueError(key)


def one_run(rows: list[Row]) -> list[Row]:
    """``rows`` with one seed only when every setting gave the same metrics under every seed
    (the seed drew nothing that mattered); ``rows`` unchanged otherwise."""
    from .sweep import CONFIG_FIELDS, METRIC_FIELDS
    settings = [f for f in CONFIG_FIELDS if f != "seed"]
    by_setting: dict[tuple, set[tuple]] = {}
    for r in rows:
        key = tuple(r.text(f) for f in settings)
        by_setting.setdefault(key, set()).add(tuple(r.text(f) for f in METRIC_FIELDS))
    seeds = {r.text("seed") for r in rows}
    if len(seeds) < 2 or any(len(metrics) > 1 for metrics in by_setting.values()):
        return rows
    first = min(seeds, key=lambda s: float(s) if s else 1.0)
    return [r for r in rows if r.text("seed") == first]


def summary_sections(rows: list[Row]) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """Per results file and per setting that varies in it: (metric, this replay, the thesis's).

    A cell holds the value of that file at that setting (the mean over its seeds, with the
    95 % interval when there are several) or a stated blank; files are never mixed.
    """
    by_source: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        by_source[r.source].append(r)
    sections = []
    for source, rows_of_source in by_source.items():
        # Seeds that drew nothing different are one run: their copies make no interval.
        group = one_run(rows_of_source)
        copies = len({_seed_of(r) for r in rows_of_source}) if len(group) < len(rows_of_source) \
            else 0
        varying = [k for k in SETTING_KEYS if len({r.text(k) for r in group}) > 1]
        settings: dict[tuple, list[Row]] = defaultdict(list)
        for r in group:
            settings[tuple(r.text(k) for k in varying)].append(r)
        for values, members in sorted(settings.items()):
            label = os.path.basename(source)
            if varying:
                label += ": " + ", ".join(f"{k} {os.path.basename(v) or '(default)'}"
                                          for k, v in zip(varying, values))
            seeds = len({_seed_of(r) for r in members})
            label += (f" (one run: its {copies} seeds gave identical results)" if copies else
                      f" ({seeds} seeds)" if seeds > 1 else " (one run)")
            sections.append((label, [(text, _metric(key, members), thesis)
                                     for key, text, thesis in SEED_NUMBERS]))
    return sections


def write_table(rows: list[Row], path: str) -> str:
    """The summary as reStructuredText: one table per results file and setting."""
    lines = ["Summary beside the thesis's §4.7", "================================", "",
             "One table per results file and per setting that varies within it; a value is "
             "the mean over the seeds, with the 95 % interval in brackets when there are "
             "several (``mean [low, high]``).", ""]
    for label, table in summary_sections(rows):
        lines += [label, "-" * len(label), "", ".. list-table::", "   :header-rows: 1",
                  "   :widths: 34 40 26", ""]
        for cells in [("metric", "this replay", "the thesis's §4.7"), *table]:
            lines += [f"   * - {cells[0]}", f"     - {cells[1]}", f"     - {cells[2]}"]
        lines.append("")
    with open(path, "w") as stream:
        stream.write("\n".join(lines))
    return path


def make_report(results: list[str], output: str) -> list[str]:
    """Every figure the results allow, plus ``summary.rst``; returns the files written.

    A results file that varies the stripe count gets its own figs. 4.5/4.9-4.12, named by its
    ideal run's utilisation when several files do (``wait_vs_stripe_count_util35.png``).
    """
    # Seeds that drew nothing different are one run: drawn without bars, not as n seeds.
    rows = [row for path in results for row in one_run(read_results(path))]
    os.makedirs(output, exist_ok=True)
    by_source: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        by_source[r.source].append(r)
    stripe_sweeps = [group for group in by_source.values()
                     if len({r.num("stripe_count") for r in group}) > 1]
    paths = [plot_replication(rows, output), plot_replication(rows, output, "recorded"),
             plot_queue_length(rows, output)]
    for group in stripe_sweeps:
        name = "wait_vs_stripe_count.png"
        if len(stripe_sweeps) > 1:
            # Named by the load without failures (failures and requeues change the span).
            ideal = [r for r in group if r.text("policy") == "ideal"] or group
            name = f"wait_vs_stripe_count_util{_avg(ideal, 'utilisation_pct'):.0f}.png"
        paths.append(plot_waits(group, "stripe_count", "stripe count", name, output,
                                hold=("load_factor", "backfill", "failure_mode")))
    # Fig. 4.6 comes from a recovery sweep: replication rows (fig. 4.8's loads) are no part of it.
    recovery_rows = [r for r in rows if not r.text("strategy")]
    paths.append(plot_waits(recovery_rows, "load_factor", "load factor",
                            "wait_vs_load_factor.png", output,
                            hold=("stripe_count", "backfill", "failure_mode")))
    written = [path for path in paths if path]
    written.append(write_table(rows, os.path.join(output, "summary.rst")))
    return written
