"""The plan and the summarizing functions of the layout benchmark (``benchmarks.layout``: the
layout paper's Table 4 on the mount), in testkit/layout_table4.py (no rig, no timing)."""

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # testkit/ is not installed: the repository is its home
    sys.path.insert(0, str(REPO))

from testkit import layout_table4 as bench  # noqa: E402

K, M = 1 << 10, 1 << 20
SAME = {"1-DV": ("shared", 4, 64 * K), "2-D": ("shared", 4, 64 * K), "1-DH": ("shared", 4, 64 * K)}
DISTINCT = {"1-DV": ("shared", 4, 4 * M), "2-D": ("shared", 4, 2 * M),
            "1-DH": ("shared", 4, M)}


def test_outcome_correct_wrong_and_tie():
    times = {"1-DV": 1.0, "2-D": 0.5, "1-DH": 2.0}
    assert bench.outcome("2-D", times, DISTINCT) == {"best": "2-D", "tied": False,
                                                     "outcome": "correct", "loss": 0.0}
    wrong = bench.outcome("1-DH", times, DISTINCT)
    assert wrong["outcome"] == "wrong" and wrong["loss"] == pytest.approx(3.0)
    tie = bench.outcome("1-DH", times, SAME)
    assert tie["outcome"] == "tie" and tie["tied"] and tie["best"] == "2-D"


def test_outcome_tied_choice_that_lost_is_wrong():
    keys = dict(DISTINCT, **{"2-D": DISTINCT["1-DH"]})   # 2-D and 1-DH the same file
    out = bench.outcome("2-D", {"1-DV": 1.0, "2-D": 2.0, "1-DH": 2.1}, keys)
    assert out["tied"] and out["outcome"] == "wrong"


def row(pattern, outcome, tied, times, chosen):
    return {"pattern": pattern, "outcome": outcome, "tied": tied, "times": times,
            "chosen": chosen, "loss": times[chosen] / min(times.values()) - 1}


def test_correct_table_and_losses():
    rows = [row("random", "correct", False, {"1-DV": 1.0, "2-D": 2.0, "1-DH": 3.0}, "1-DV"),
            row("random", "wrong", False, {"1-DV": 1.0, "2-D": 1.5, "1-DH": 3.0}, "2-D"),
            row("random", "tie", True, {"1-DV": 1.0, "2-D": 1.01, "1-DH": 1.02}, "2-D"),
            row("sequential", "wrong", False, {"1-DV": 1.0, "2-D": 1.02, "1-DH": 3.0}, "2-D")]
    table = bench.correct_table(rows, "pattern")
    assert table["random"]["cases"] == 3 and table["random"]["correct"] == 1
    assert table["random"]["ties"] == 1 and table["random"]["wrong"] == 1
    assert table["random"]["rate_excluding_ties"] == pytest.approx(1 / 2)
    assert table["random"]["rate_tie_as_correct"] == pytest.approx(2 / 3)
    assert table["all"]["cases"] == 4 and table["sequential"]["rate_excluding_ties"] == 0
    loss = bench.loss_summary(rows)
    assert loss["wrong_cases"] == 2 and loss["max"] == pytest.approx(0.5)
    assert loss["within_5_percent"] == 1
    assert loss["total"] == pytest.approx((1.0 + 1.5 + 1.01 + 1.02) / 4.0 - 1)


def test_tie_noise_pairs_identical_layouts_only():
    rows = [{"times": {"1-DV": 1.0, "2-D": 1.1, "1-DH": 2.0}, "keys": SAME},
            {"times": {"1-DV": 1.0, "2-D": 5.0, "1-DH": 2.0}, "keys": DISTINCT}]
    noise = bench.tie_noise(rows)
    assert noise["pairs"] == 3 and noise["max"] == pytest.approx(1.0)


def test_layout_keys_files_and_ost_lists():
    p = bench.plan(quick=True)
    cases = bench.cases_of(p)
    assert len(cases) == 3 * 3 * 2 * 2
    small = next(c for c in cases if c["mode"] == "shared" and c["size"] == 4 * K)
    assert len(set(small["keys"].values())) == 1          # Lustre's 64 KiB minimum stripe
    sizes = bench.file_sizes(cases)
    for case in cases:
        for key in case["keys"].values():
            need = case["requests"] * case["size"]
            if key[0] == "shared":
                assert sizes[key][0] // case["processes"] >= need
            else:
                assert all(s >= need for s in sizes[key][:case["processes"]])
    assert bench.ost_list(("fpp", 1, M), 5, 4, 2) == (1,)
    assert bench.ost_list(("fpp", 2, 64 * K), 3, 4, 2) == (3, 2)
    assert bench.ost_list(("fpp", 4, 64 * K), 1, 4, 2) == (1, 2, 3, 0)
    assert bench.ost_list(("shared", 4, M), 0, 4, 2) == (0, 1, 2, 3)


def test_budget_more_requests_for_small_sequential():
    p = bench.plan(quick=False)
    assert bench.budget(p, 1, 4 * K, "sequential") > bench.budget(p, 1, 4 * K, "random")
    assert bench.budget(p, 16, 4 * M, "random") == 1
