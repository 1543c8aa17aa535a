"""``scratchkeeper reproduce``: load factors found by measurement, every claim with both values."""

from __future__ import annotations

import math
import re

import pytest

from scratchkeeper.cli import main
from scratchkeeper.sim import reproduce as rp
from scratchkeeper.sim.claims import YES
from scratchkeeper.sim.report import conditions, read_results
from scratchkeeper.sim.run import ReplayConfig


def _fake_measure(curve):
    calls = []

    def measure(config: ReplayConfig, metric: str) -> float:
        calls.append(config.load_factor)
        return curve(config.load_factor)
    return measure, calls


@pytest.mark.parametrize("metric, curve, target, start", [
    ("utilisation_pct", lambda lf: min(95.0, 82.0 * lf), 35.0, 35 / 80),
    ("utilisation_pct", lambda lf: min(95.0, 82.0 * lf), 70.0, 70 / 80),
    # Queue length: flat, then steep (a queue that only builds near saturation).
    ("queue_length_mean", lambda lf: 0.2 + 400 * lf ** 6, 1.5, 0.5),
    ("queue_length_mean", lambda lf: 0.2 + 400 * lf ** 6, 45.5, 0.5),
])
def test_the_load_factor_search_reaches_the_target(monkeypatch, metric, curve, target, start):
    measure, calls = _fake_measure(curve)
    monkeypatch.setattr(rp, "_measure", measure)
    search = rp.find_load_factor(ReplayConfig(trace="t"), metric, target, start)
    assert search.close_enough(search.value) and search.value == curve(search.load_factor)
    assert len(calls) <= 8 and search.probes[0][0] == start


def test_an_unreachable_target_gives_the_closest_probe(monkeypatch):
    measure, calls = _fake_measure(lambda lf: min(50.0, 60 * lf))
    monkeypatch.setattr(rp, "_measure", measure)
    search = rp.find_load_factor(ReplayConfig(trace="t"), "utilisation_pct", 70.0, 1.0)
    assert len(calls) == rp.MAX_PROBES and search.value == 50.0


def _cells(report: str) -> list[list[str]]:
    """The rows of the claims list-table (header first)."""
    table = report.split("Claims\n------", 1)[1].split("Claims not graded", 1)[0]
    rows = []
    for line in table.splitlines():
        if line.startswith("   * - "):
            rows.append([line[7:]])
        elif line.startswith("     - ") and rows:
            rows[-1].append(line[7:])
    return rows


def test_quick_reproduction_lists_every_claim_with_both_values(tmp_path, capsys):
    output = tmp_path / "out"
    assert main(["reproduce", "--quick", "--output", str(output), "--workers", "2"]) == 0
    err = capsys.readouterr().err
    # A line per finished task with the count and the time left.
    done = re.findall(r"\[(\d+)/(\d+)\] \S+ task \d+ done in [\d.]+ s; about .* left", err)
    assert done and done[-1][0] == done[-1][1]
    report = (output / "reproduction.rst").read_text()
    rows = _cells(report)
    assert rows[0] == ["§", "claim", "the thesis", "kind", "measured", "conditions", "grade",
                       "notes"]
    claims = rows[1:]
    # Every quantitative claim of section 4.7, by the thesis's value.
    seed_values = [c[2] for c in claims]
    for value in ("0.14 % (stripe count 2)", "70.50 % / 70.54 %", "> 60 %", "< 1.8 %",
                  "< 0.5 %", "more than x 10", "> 100,000 s", "thousands of s",
                  "hundreds of thousands of s", "tens of s", "almost flat", "virtually identical",
                  "an edge due to its optimal job selection", "more interrupted jobs",
                  "< 0.1 % of 284 GB/s"):
        assert value in seed_values, value
    assert {c[0] for c in claims} == {"4.5.1", "4.7.2", "4.7.3", "4.7.4", "4.8"}
    assert len(claims) >= 40
    # Conditions set by the load-factor search are not claims.
    assert "35 %" not in seed_values and "1.5, 27.5, 45.5 jobs" not in seed_values
    conditions_table = report.split("Conditions (set by construction", 1)[1].split("Claims", 1)[0]
    assert "1.5, 27.5, 45.5 jobs" in conditions_table and "35 %" in conditions_table
    for cells in claims:
        assert len(cells) == 8, cells
        # Both values there: ours has a number, and the grade is one of the rule's.
        assert re.search(r"\d", cells[4]) or cells[6] == "no data", cells
        assert cells[6].removesuffix(" (one run)") in ("yes", "no", "partly", "not shown",
                                                       "no data", "by construction"), cells
    constructed = report.split("Claims true by construction", 1)[1].split("Claims not repro", 1)[0]
    differing = report.split("Claims not reproduced", 1)[1].split("Figures", 1)[0]
    for cells in claims:
        if cells[6] == "by construction":
            assert cells[1] in constructed and cells[1] not in differing
        elif cells[6].removesuffix(" (one run)") != YES:
            assert cells[1] in differing
    # RICC records every job's memory: without failures the seed draws nothing, one run.
    seeds = report.split("Seeds\n-----", 1)[1].split("Conditions", 1)[0]
    assert "``replication``: one run; the seed draws nothing" in seeds
    assert "``recovery-70``: 2 seeds; the seed draws where and when each OST fails" in seeds
    assert len({r.text("seed") for r in read_results(str(output / "results-replication.csv"))}) == 1
    # The definition at alpha = inf is never counted as reproduced.
    assert any(c[6] == "by construction" and "alpha = inf" in c[1] for c in claims)
    counts = report.split("Counts\n------", 1)[1].split("How every claim", 1)[0]
    assert re.search(r"\d+ claims: \d+ reproduced, \d+ partly, \d+ not reproduced, "
                     r"\d+ by construction, \d+ not measurable\.", counts), counts
    for name in ("replication_vs_alpha.png", "replication_vs_alpha_recorded.png",
                 "at_risk_vs_queue_length.png", "wait_vs_load_factor.png"):
        assert (output / name).stat().st_size > 10000
        assert f".. image:: {name}" in report
    assert len(list(output.glob("wait_vs_stripe_count_util*.png"))) == 2
    # Figure titles name the trace, the load and the input-size model.
    rows = read_results(str(output / "results-recovery-70.csv"))
    title = conditions(rows)
    assert title.startswith("RICC-2010-2-first5000.swf.gz; load factor ")
    assert "% utilisation" in title and title.endswith("input = requested memory")
    rows = read_results(str(output / "results-queue-length.csv"))
    assert "peak memory (calibrated" in conditions(rows, load=False)
    assert "Time taken" in report and "load factor" in report
    for sweep in ("replication", "replication-recorded", "load", "recovery-35", "recovery-70",
                  "queue-length"):
        assert (output / "sweeps" / f"{sweep}.toml").exists()
        assert (output / f"results-{sweep}.csv").exists()
    # Run again: every task is reused, the report is the same apart from the time taken.
    assert main(["reproduce", "--quick", "--output", str(output), "--workers", "1"]) == 0
    err = capsys.readouterr().err
    assert "reused" in err and " done in " not in err
    again = (output / "reproduction.rst").read_text()
    assert _cells(again) == _cells(report)


def test_full_reproduction_without_the_traces_is_a_clear_error(tmp_path, capsys):
    assert main(["reproduce", "--output", str(tmp_path), "--traces", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{tmp_path}: no RICC-2010-2.swf.gz here")
    assert len(err.strip().splitlines()) == 1


def _searches() -> dict:
    """A load search per utilisation and queue-length target, each found at its first try."""
    searches = {f"utilisation-{t:g}": rp.Search("utilisation_pct", t, [(t / 80, t)], t / 80, t)
                for t in rp.UTILISATION_TARGETS}
    searches.update({f"queue-{t:g}": rp.Search("queue_length_mean", t, [(t / 50, t)], t / 50, t)
                     for t in rp.QUEUE_TARGETS})
    return searches


def test_sweep_files_name_the_measured_load_factors(tmp_path):
    setup = rp.Setup.quick_setup()
    searches = _searches()
    files = rp.sweep_files(setup, searches, str(tmp_path))
    for name, text in files.items():
        (tmp_path / f"{name}.toml").write_text(text)
        plan = rp.sweep.load_sweep(str(tmp_path / f"{name}.toml"))
        assert plan.runs > 0
    recovery = rp.sweep.load_sweep(str(tmp_path / "recovery-70.toml"))
    assert {c.load_factor for t in recovery.tasks for c in t} == {70 / 80}
    queue = rp.sweep.load_sweep(str(tmp_path / "queue-length.toml"))
    assert {c.load_factor for t in queue.tasks for c in t} == {t / 50 for t in rp.QUEUE_TARGETS}
    assert all(c.input_model == "peak-memory" for t in queue.tasks for c in t)
    replication = rp.sweep.load_sweep(str(tmp_path / "replication.toml"))
    assert {c.input_model for t in replication.tasks for c in t} == {"requested-memory",
                                                                     "peak-memory"}
    assert any(math.isinf(c.alpha) for t in replication.tasks for c in t)
    assert {c.seed for t in replication.tasks for c in t} == set(setup.seeds)


def test_a_sweep_whose_seed_draws_nothing_runs_once(tmp_path):
    setup = rp.Setup.quick_setup()
    searches = _searches()
    # Every job's memory recorded: without failures the seed draws nothing.
    draws = rp.sweep_draws(setup, {"traces": {"RICC-2010-2-first5000.swf.gz":
                                              {"memory_recorded": 1.0}}})
    assert draws["replication"] == [] and draws["queue-length"] == []
    assert draws["recovery-70"] and "OST fails" in draws["recovery-70"][0]
    files = rp.sweep_files(setup, searches, str(tmp_path), draws)
    for name, seeds in (("replication", {1}), ("queue-length", {1}),
                        ("recovery-70", set(setup.seeds))):
        (tmp_path / f"{name}.toml").write_text(files[name])
        plan = rp.sweep.load_sweep(str(tmp_path / f"{name}.toml"))
        ran = {c.seed for t in plan.tasks for c in t}
        assert ran == seeds, name
    assert "# The seed draws: nothing that changes the result: one run." in files["replication"]
    # Memory missing for some jobs: the seed draws their sizes, so every seed runs.
    assert rp.seed_draws(False, 0.9) == ["the input size of the 10.0 % of jobs without "
                                         "recorded memory"]
