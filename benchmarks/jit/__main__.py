"""Just-in-time stage-in and offload at close in the replay (issue 18): RICC jobs at 70 %
utilisation with OST outages extrapolated from the LANL failure data. What is replayed is the
planner's ``-start jit`` (scratchkeeper/planner/jit.py, predict.py) and the chain service's
offload at close, as :mod:`scratchkeeper.sim.staging` models them.

    .venv/bin/python -m benchmarks.jit [--quick] [--days N] [--measured PREDICTION.json]

One schedule is replayed (:func:`scratchkeeper.sim.run.replay_schedule`); on it the staging of
every job is replayed with ``-start now`` and with ``-start jit`` for prediction (and start
estimate) errors of 0, 25 and 50 % drawn uniform (:mod:`scratchkeeper.sim.staging`), then
with the prediction errors measured on real transfers (issue 34: the pairs of predicted time
and bound against actual time in ``--measured``, by default the record
``python -m benchmarks.jit.prediction`` wrote, docs/benchmarks/jit/prediction.json) and start
estimate errors of 0, 25 and 50 %, same schedule and seed; and the results' offload with
``-when close`` and ``-when end``. Writes docs/benchmarks/replay/staging.md, its JSON and two
plots (``--quick``: under benchmarks/results/staging/).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from benchmarks import harness
from scratchkeeper.errors import ScratchkeeperError
from scratchkeeper.sim.run import ReplayConfig, replay_schedule
from scratchkeeper.sim.staging import (
    MeasuredPredictions,
    StagingParams,
    load_measured,
    replay_offload,
    replay_staging,
)

OUT = harness.report_dir("replay")
ERRORS = (0.0, 0.25, 0.5)
MEASURED = harness.report_dir("jit") / "prediction.json"
#: the measured rows drawn from the larger transfers only: the replay's run minutes to hours
LARGE = 128 << 20
GB = 1e9


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.jit",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 days of the trace")
    parser.add_argument("--days", type=float, default=0.0,
                        help="days of the trace replayed (default 60, quick 10)")
    parser.add_argument("--measured", type=Path, default=MEASURED,
                        help="prediction record whose errors the measured rows draw "
                        "(default docs/benchmarks/jit/prediction.json)")
    args = parser.parse_args(argv)
    days = args.days or (10.0 if args.quick else 60.0)
    try:
        measured = load_measured(args.measured)
        large = load_measured(args.measured, min_bytes=LARGE)
    except ScratchkeeperError as err:
        print(f"python -m benchmarks.jit: {err}", file=sys.stderr)
        return 2
    config = ReplayConfig(trace=str(harness.TRACES / "RICC-2010-2.swf.gz"),
                          failures=str(harness.TRACES
                                       / "LA-UR-05-7318-failure-data-1996-2005.csv.xz"),
                          failure_mode="extrapolated", failure_system=20, ost_count=64,
                          load_factor=0.8572437929611473, days=days)
    started = time.monotonic()

    def progress(phase: str, done: int, total: int) -> None:
        if total and (done == total or done % max(1, total // 10) == 0):
            print(f"  {phase}: {done}/{total}", file=sys.stderr, flush=True)

    replayed = replay_schedule(config, progress)
    jobs = replayed.workload.jobs
    print(f"replayed {len(jobs)} jobs over {days:g} days, {len(replayed.outages)} OST outages "
          f"({time.monotonic() - started:.0f}s)", flush=True)
    base = StagingParams()
    rows = _staging_rows(jobs, replayed.outages, base, measured, large)
    offload = [replay_offload(jobs, mode, base).__dict__ for mode in ("end", "close")]
    params = {key: value for key, value in base.__dict__.items() if key != "measured"}
    result = {"days": days, "jobs": len(jobs), "outages": len(replayed.outages),
              "params": params, "measured": _measured_summary(measured),
              "measured_large": {"min_bytes": LARGE, **_measured_summary(large)},
              "staging": rows, "offload": offload}
    global OUT
    if args.quick:
        OUT = harness.results_dir("staging")   # a quick run is not the report
    suffix = harness.suffix(args.quick)
    harness.write_json(OUT / f"staging{suffix}.json", result, indent=2)
    _plots(rows, offload, suffix)
    (OUT / f"staging{suffix}.md").write_text(_report(result, suffix))
    print((OUT / f"staging{suffix}.md").read_text())
    return 0


def _staging_rows(jobs, outages, base: StagingParams,
                  measured: MeasuredPredictions, large: MeasuredPredictions) -> list[dict]:
    """``now``, then ``jit`` with each error model; every row on the same jobs and seed."""
    rows = [{"error": None, "prediction": None, "estimate_error": None,
             **replay_staging(jobs, outages, "now", base).row()}]

    def jit(prediction: str, estimate: float, min_bytes: int = 0, **changes) -> dict:
        params = replace(base, estimate_error=estimate, **changes)
        return {"error": params.prediction_error if prediction == "uniform" else None,
                "prediction": prediction, "estimate_error": estimate,
                **({"measured_min_bytes": min_bytes} if min_bytes else {}),
                **({"unbounded": True} if "jit_max_delay" in changes else {}),
                **replay_staging(jobs, outages, "jit", params).row()}

    rows += [jit("uniform", error, prediction_error=error) for error in ERRORS]
    rows += [jit("measured", error, measured=measured.pairs) for error in ERRORS]
    rows += [jit("measured", error, LARGE, measured=large.pairs) for error in ERRORS[:2]]
    # the trade-off jit_max_delay makes: every stage-in held back, however long its transfer
    unbounded = {"jit_max_delay": 7 * 86400, "delay_bound": base.jit_max_delay}
    rows.append(jit("uniform", 0.25, prediction_error=0.25, **unbounded))
    rows.append(jit("measured", 0.25, measured=measured.pairs, **unbounded))
    return rows


def _measured_summary(measured: MeasuredPredictions) -> dict:
    """What the report says of the measured pairs: where from, and their distribution."""
    errors = [error for error, _ in measured.pairs]
    ratios = [ratio for _, ratio in measured.pairs]
    n = len(ratios)
    try:
        source = str(Path(measured.path).resolve().relative_to(harness.REPO))
    except ValueError:
        source = measured.path
    return {"source": source, "date": measured.date, "load": measured.load,
            "machine": measured.machine, "transfers": n,
            "actual_seconds": [min(measured.actual), statistics.median(measured.actual),
                               max(measured.actual)],
            "median_abs_error": statistics.median(abs(e) for e in errors),
            "p90_abs_error": statistics.quantiles([abs(e) for e in errors], n=10)[-1]
            if n > 1 else abs(errors[0]),
            "bound_below_actual": sum(r < 1 for r in ratios) / n,
            "bound_within_2x": sum(1 <= r <= 2 for r in ratios) / n,
            "bound_over_2x": sum(r > 2 for r in ratios) / n,
            "median_bound_ratio": statistics.median(ratios)}


def _label(row) -> str:
    if row["mode"] == "now":
        return "now"
    estimate = f"±{row['estimate_error']:.0%}"
    if row["prediction"] == "measured":
        subset = f" ≥{row['measured_min_bytes'] >> 20} MiB" if "measured_min_bytes" in row else ""
        label = f"jit measured{subset}, estimate {estimate}"
    else:
        label = f"jit uniform {estimate}"
    return label + (", no max delay" if row.get("unbounded") else "")


def _plots(rows, offload, suffix) -> None:
    plt = harness.pyplot()
    labels = [_label(r).replace(", ", "\n").replace("measured ", "measured\n")
              .replace("uniform ", "uniform\n") for r in rows]
    # the measured error model's rows hatched, so the two models read apart
    hatches = ["//" if r["prediction"] == "measured" else "" for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.6))
    axes[0].bar(labels, [r["input_byte_hours"] / GB for r in rows], color="tab:blue",
                hatch=hatches, edgecolor="white")
    axes[0].set_title("staged input on scratch before start\n(GB-hours)")
    axes[1].bar(labels, [r["at_risk"] for r in rows], color="tab:red", hatch=hatches,
                edgecolor="white")
    axes[1].set_title("jobs whose input had an OST down\nbefore they started")
    axes[2].bar(labels, [r["delay_mean"] / 60 for r in rows], color="tab:orange",
                hatch=hatches, edgecolor="white", label="mean of delayed jobs")
    axes[2].plot(labels, [r["delay_p95"] / 60 for r in rows], "k^", label="95th percentile")
    axes[2].set_title("compute start delay from late data\n(minutes)")
    axes[2].legend(fontsize=8)
    for ax in axes:
        ax.tick_params(axis="x", labelsize=7, labelrotation=90)
    fig.tight_layout()
    harness.save_figure(fig, OUT / f"staging-jit{suffix}.png")
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    ax.bar([o["mode"] for o in offload], [o["scratch_seconds_mean"] / 3600 for o in offload],
           color=["tab:gray", "tab:green"])
    ax.set_ylabel("hours on scratch, close to offloaded")
    ax.set_title("results: offload at close vs at job end\n(mean per result)")
    fig.tight_layout()
    harness.save_figure(fig, OUT / f"staging-offload{suffix}.png")


def _error_models(p: dict, m: dict, big: dict) -> list[str]:
    """The report's lines on the error model each row uses and where the measured one came from."""
    seconds, big_seconds = m["actual_seconds"], big["actual_seconds"]
    return [
        "Error models, per row:",
        "",
        "- **uniform ±e** (assumed): the predicted transfer time P is off by e·u of the actual "
        "one T, u uniform on [-1, 1]; the bound is P_hi = P (1 + "
        f"{p['jit_sigmas']:g} e / √3) ({p['jit_sigmas']:g} sigmas of that error).",
        f"- **measured** (issue 34): each job draws one of the {m['transfers']} held-out "
        f"transfers of `{m['source']}` (`python -m benchmarks.jit.prediction`, run of "
        f"{m['date'] or 'an unknown date'} on {m['machine'] or 'an unknown machine'}, load "
        f"averages {m['load'] or 'unknown'} (1, 5, 15 min) when it ended) and takes its P/T "
        "and P_hi/T together (the model of planner/predict.py: fixed cost plus bytes over "
        "bandwidth, bound from the 0.9 quantile of the fit's residuals). Those transfers: "
        f"median |P - T| / T {m['median_abs_error']:.1%}, p90 {m['p90_abs_error']:.0%}; bound "
        f"below the actual time {m['bound_below_actual']:.1%} (the data comes late unless the "
        f"margin covers it), within [T, 2T] {m['bound_within_2x']:.1%}, above 2T "
        f"{m['bound_over_2x']:.1%}. They took {seconds[0]:.2g} to {seconds[2]:.3g} s (median "
        f"{seconds[1]:.2g} s); here their relative errors are applied to the replay's "
        "transfers of minutes to hours (an assumption: that the relative error does not "
        "depend on the transfer's length).",
        f"- **measured ≥{big['min_bytes'] >> 20} MiB**: the same, drawn from the "
        f"{big['transfers']} of those transfers of {big['min_bytes'] >> 20} MiB or more only "
        f"({big_seconds[0]:.2g} to {big_seconds[2]:.3g} s, median {big_seconds[1]:.2g} s): "
        f"median |P - T| / T {big['median_abs_error']:.1%}, bound below the actual time "
        f"{big['bound_below_actual']:.1%}, within [T, 2T] {big['bound_within_2x']:.1%}, above "
        f"2T {big['bound_over_2x']:.1%}.",
        "- The start estimate error is not measured: uniform ± the row's estimate error in "
        "every model (relative to the wait).",
        "",
    ]


def _report(result, suffix) -> str:
    p, m, big = result["params"], result["measured"], result["measured_large"]
    lines = [
        "# Just-in-time stage-in and offload at close in the replay",
        "",
        f"RICC, {result['days']:g} days at 70 % utilisation ({result['jobs']} jobs), "
        f"{result['outages']} OST outages extrapolated from the LANL failure data over 64 OSTs; "
        "`python -m benchmarks.jit" + (" --quick" if suffix else "") + "` "
        "(scratchkeeper/sim/staging.py says how each mode is replayed).",
        f"Transfers at {p['transfer_bandwidth'] / 1e6:g} MB/s, margin {p['jit_margin']:g} s, "
        f"jit_max_delay {p['jit_max_delay']:g} s, sweep every {p['sweep_interval']:g} s, "
        f"seed {p['seed']} (every row draws the same start estimate error for the same job).",
        "",
        *_error_models(p, m, big),
        "The rows marked *no max delay* hold back every stage-in, however long its transfer "
        "(jit_max_delay of 7 days): what the bound costs.",
        "",
        "| mode | prediction error | start estimate error | held back | staged input before "
        "start (GB-h) | jobs at risk | delayed jobs | mean delay (s) | p95 (s) | max (s) | "
        "> jit_max_delay |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["staging"]:
        if r["mode"] == "now":
            model, estimate = "-", "-"
        else:
            model = (_label(r)[4:].split(",")[0] if r["prediction"] == "measured"
                     else f"uniform ±{r['error']:.0%}")
            estimate = f"±{r['estimate_error']:.0%}"
        lines.append(f"| {_label(r)} | {model} | {estimate} | {r['held_back']} | "
                     f"{r['input_byte_hours'] / GB:,.0f} | {r['at_risk']} | {r['delayed']} | "
                     f"{r['delay_mean']:.0f} | {r['delay_p95']:.0f} | {r['delay_max']:.0f} | "
                     f"{r['over_max_delay']} |")
    now = result["staging"][0]
    lines += ["", "For `now` the delayed jobs are those whose wait was shorter than their "
              "transfer; for `jit` the delay is counted beyond that (what holding back cost).", ""]
    for r in result["staging"][1:]:
        saved = 1 - r["input_byte_hours"] / now["input_byte_hours"] if now["input_byte_hours"] else 0
        lines.append(f"- {_label(r)}: {saved:.1%} less staged input on scratch before "
                     f"start, {now['at_risk'] - r['at_risk']} fewer jobs at risk.")
    lines += ["", f"![jit](staging-jit{suffix}.png)", "",
              "| results offloaded | results | mean hours on scratch | p95 hours | GB-h |",
              "|---|---|---|---|---|"]
    for o in result["offload"]:
        lines.append(f"| at {o['mode']} | {o['results']} | {o['scratch_seconds_mean'] / 3600:.2f} "
                     f"| {o['scratch_seconds_p95'] / 3600:.2f} | {o['byte_hours'] / GB:,.0f} |")
    lines += ["", f"![offload](staging-offload{suffix}.png)", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
