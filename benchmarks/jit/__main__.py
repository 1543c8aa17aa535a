"""Just-in-time stage-in and offload at close in the replay (issue 18): RICC jobs at 70 %
utilisation with OST outages extrapolated from the LANL failure data. What is replayed is the
planner's ``-start jit`` (scratchkeeper/planner/jit.py, predict.py) and the chain service's
offload at close, as :mod:`scratchkeeper.sim.staging` models them.

    .venv/bin/python -m benchmarks.jit [--quick] [--days N]

One schedule is replayed (:func:`scratchkeeper.sim.run.replay_schedule`); on it the staging of
every job is replayed with ``-start now`` and with ``-start jit`` for prediction (and start
estimate) errors of 0, 25 and 50 % (:mod:`scratchkeeper.sim.staging`), and the results'
offload with ``-when close`` and ``-when end``. Writes docs/benchmarks/replay/staging.md, its
JSON and two plots (``--quick``: under benchmarks/results/staging/).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace

from benchmarks import harness
from scratchkeeper.sim.run import ReplayConfig, replay_schedule
from scratchkeeper.sim.staging import StagingParams, replay_offload, replay_staging

OUT = harness.report_dir("replay")
ERRORS = (0.0, 0.25, 0.5)
GB = 1e9


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.jit",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 days of the trace")
    parser.add_argument("--days", type=float, default=0.0,
                        help="days of the trace replayed (default 60, quick 10)")
    args = parser.parse_args(argv)
    days = args.days or (10.0 if args.quick else 60.0)
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
    now = replay_staging(jobs, replayed.outages, "now", base)
    rows = [{"error": None, **now.row()}]
    for error in ERRORS:
        params = replace(base, prediction_error=error, estimate_error=error)
        rows.append({"error": error, **replay_staging(jobs, replayed.outages, "jit", params).row()})
    # the trade-off jit_max_delay makes: every stage-in held back, however long its transfer
    unbounded = replace(base, prediction_error=0.25, estimate_error=0.25, jit_max_delay=7 * 86400,
                        delay_bound=base.jit_max_delay)
    rows.append({"error": 0.25, "unbounded": True,
                 **replay_staging(jobs, replayed.outages, "jit", unbounded).row()})
    offload = [replay_offload(jobs, mode, base).__dict__ for mode in ("end", "close")]
    result = {"days": days, "jobs": len(jobs), "outages": len(replayed.outages),
              "params": base.__dict__, "staging": rows, "offload": offload}
    global OUT
    if args.quick:
        OUT = harness.results_dir("staging")   # a quick run is not the report
    suffix = harness.suffix(args.quick)
    harness.write_json(OUT / f"staging{suffix}.json", result, indent=2)
    _plots(rows, offload, suffix)
    (OUT / f"staging{suffix}.md").write_text(_report(result, suffix))
    print((OUT / f"staging{suffix}.md").read_text())
    return 0


def _label(row) -> str:
    if row["mode"] == "now":
        return "now"
    return f"jit ±{row['error']:.0%}" + (", no max delay" if row.get("unbounded") else "")


def _plots(rows, offload, suffix) -> None:
    plt = harness.pyplot()
    labels = [_label(r).replace(", ", "\n") for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    axes[0].bar(labels, [r["input_byte_hours"] / GB for r in rows], color="tab:blue")
    axes[0].set_title("staged input on scratch before start\n(GB-hours)")
    axes[1].bar(labels, [r["at_risk"] for r in rows], color="tab:red")
    axes[1].set_title("jobs whose input had an OST down\nbefore they started")
    axes[2].bar(labels, [r["delay_mean"] / 60 for r in rows], color="tab:orange",
                label="mean of delayed jobs")
    axes[2].plot(labels, [r["delay_p95"] / 60 for r in rows], "k^", label="95th percentile")
    axes[2].set_title("compute start delay from late data\n(minutes)")
    axes[2].legend(fontsize=8)
    for ax in axes:
        ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    harness.save_figure(fig, OUT / f"staging-jit{suffix}.png")
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    ax.bar([o["mode"] for o in offload], [o["scratch_seconds_mean"] / 3600 for o in offload],
           color=["tab:gray", "tab:green"])
    ax.set_ylabel("hours on scratch, close to offloaded")
    ax.set_title("results: offload at close vs at job end\n(mean per result)")
    fig.tight_layout()
    harness.save_figure(fig, OUT / f"staging-offload{suffix}.png")


def _report(result, suffix) -> str:
    p = result["params"]
    lines = [
        "# Just-in-time stage-in and offload at close in the replay",
        "",
        f"RICC, {result['days']:g} days at 70 % utilisation ({result['jobs']} jobs), "
        f"{result['outages']} OST outages extrapolated from the LANL failure data over 64 OSTs; "
        "`python -m benchmarks.jit" + (" --quick" if suffix else "") + "` "
        "(scratchkeeper/sim/staging.py says how each mode is replayed).",
        f"Transfers at {p['transfer_bandwidth'] / 1e6:g} MB/s, margin {p['jit_margin']:g} s, "
        f"jit_max_delay {p['jit_max_delay']:g} s, {p['jit_sigmas']:g} sigmas, sweep every "
        f"{p['sweep_interval']:g} s; the error is applied to the predicted transfer time and to "
        "the start estimate (relative to the wait), uniform ±. The last row holds back every "
        "stage-in, however long its transfer (jit_max_delay of 7 days): what the bound costs.",
        "",
        "| mode | held back | staged input before start (GB-h) | jobs at risk | delayed jobs | "
        "mean delay (s) | p95 (s) | max (s) | > jit_max_delay |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["staging"]:
        lines.append(f"| {_label(r)} | {r['held_back']} | {r['input_byte_hours'] / GB:,.0f} | "
                     f"{r['at_risk']} | {r['delayed']} | {r['delay_mean']:.0f} | "
                     f"{r['delay_p95']:.0f} | {r['delay_max']:.0f} | {r['over_max_delay']} |")
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
