"""The replay's JIT stage-in with the transfer model's measured errors (issue 34):
scratchkeeper.sim.staging's empirical error model, its loader, and the uniform model kept as it was."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from scratchkeeper.errors import InputError
from scratchkeeper.sim.outages import OstOutage
from scratchkeeper.sim.staging import (
    StagingParams,
    load_measured,
    predicted_transfer,
    replay_staging,
)
from scratchkeeper.sim.workload import SimJob

#: the held-out transfers of benchmarks/jit/prediction.py's run of 2026-11-28 on the local
#: cluster (docs/benchmarks/jit/prediction.json without its summary)
RECORD = Path(__file__).parent / "data" / "jit-prediction-2026-11-28.json"


def _job(index: int, submit: float, wait: float, input_bytes: float,
         osts: tuple[int, ...] = (0,)) -> SimJob:
    job = SimJob(index, f"j{index}", submit, 3600.0, 3600.0, 1, input_bytes, osts)
    job.start = submit + wait
    job.end = job.start + 3600.0
    return job


def _workload() -> tuple[list[SimJob], list[OstOutage]]:
    """400 jobs of four sizes and six waits, two OSTs each, every OST down once."""
    draw = random.Random(7)
    jobs = []
    for i in range(400):
        size = draw.choice((1e9, 2e10, 1e11, 4e11))
        wait = draw.choice((0.0, 60.0, 900.0, 3600.0, 7200.0, 86400.0))
        jobs.append(_job(i, i * 600.0, wait, size, (i % 8, (i + 3) % 8)))
    outages = [OstOutage(o, 3000.0 * o + 5000.0, 3000.0 * o + 20000.0) for o in range(8)]
    return jobs, outages


def test_record_gives_each_transfers_error_and_bound_ratio():
    record = json.loads(RECORD.read_text())["transfers"]
    measured = load_measured(RECORD)
    assert len(measured.pairs) == len(record) == 160
    first = record[0]
    assert measured.pairs[0] == ((first["predicted"] - first["actual"]) / first["actual"],
                                 first["bound"] / first["actual"])
    assert measured.actual[0] == first["actual"]
    assert measured.date == "2026-11-28 11:08 UTC" and measured.load == "6.04 3.32 2.23"
    # docs/benchmarks/jit/report.md: bound below the actual time for 15.0 % of the transfers
    assert sum(ratio < 1 for _, ratio in measured.pairs) == 24


def test_record_of_the_larger_transfers_only():
    record = json.loads(RECORD.read_text())["transfers"]
    large = load_measured(RECORD, min_bytes=128 << 20)
    kept = [t for t in record if t["bytes"] >= 128 << 20]
    assert 0 < len(kept) < len(record)
    assert large.actual == tuple(t["actual"] for t in kept)


@pytest.mark.parametrize("transfers,expected", [
    ('[{"predicted": 1, "bound": 2, "actual": 1}]', r"transfers\[0\]: 'bytes' is None"),
    ('[{"predicted": 1, "bound": 2, "actual": 1, "bytes": 1.5e9}]', r"'bytes' is 1500000000.0"),
    ('[{"predicted": 1, "bound": 2, "actual": 1, "bytes": 1024}]', r"no transfer of 2,048 bytes"),
])
def test_record_without_sizes_refused_for_a_size_subset(tmp_path, transfers, expected):
    path = tmp_path / "prediction.json"
    path.write_text('{"transfers": %s}' % transfers)
    assert load_measured(path).pairs == ((0.0, 2.0),)
    with pytest.raises(InputError, match=expected):
        load_measured(path, min_bytes=2048)


def test_empirical_draw_reproduces_the_measured_pairs():
    pairs = load_measured(RECORD).pairs
    params = StagingParams(measured=pairs, seed=5)
    transfer = 1000.0
    rounds = 200
    draw = random.Random(params.seed)
    drawn = [predicted_transfer(transfer, draw.uniform(-1, 1), params)
             for _ in range(rounds * len(pairs))]
    # each draw is one measured transfer's error and bound together (the joint distribution)
    by_pair = {(round(transfer * (1 + e), 6), round(transfer * r, 6)): i
               for i, (e, r) in enumerate(pairs)}
    counts = Counter(by_pair[round(p, 6), round(p_hi, 6)] for p, p_hi in drawn)
    assert set(counts) == set(range(len(pairs)))
    # every pair equally likely: chi-square over 159 degrees of freedom, far below its
    # 99.9 % quantile (~221); a draw skewed to a tenth of the pairs gives thousands
    chi2 = sum((c - rounds) ** 2 / rounds for c in counts.values())
    assert chi2 < 221
    late = sum(p_hi < transfer for _, p_hi in drawn) / len(drawn)
    assert late == pytest.approx(24 / 160, abs=0.01)
    # seeded: the same seed draws the same predictions
    again = random.Random(params.seed)
    assert drawn[:50] == [predicted_transfer(transfer, again.uniform(-1, 1), params)
                          for _ in range(50)]


def test_bound_below_the_actual_time_gives_late_data():
    # 100 GB at 100 MB/s: 1000 s; the job starts 10000 s after its submission, estimated exactly
    jobs = [_job(0, 0.0, 10000.0, 1e11)]
    margin = StagingParams().jit_margin

    def replay(ratio: float):
        return replay_staging(jobs, [], "jit", StagingParams(measured=((0.0, ratio),)))

    late = replay(0.5)     # the bound is 500 s: the stage-in begins 620 s before the start
    assert (late.held_back, late.delayed) == (1, 1)
    assert late.delay_max == pytest.approx(1000.0 - 500.0 - margin)
    assert replay(0.9).delayed == 0        # 100 s short: the margin covers it
    assert replay(1.2).delayed == 0


def test_measured_rows_keep_the_uniform_rows_start_estimates():
    """Both models take the same draws per job: a measured error of 0 with a bound of the
    actual time is the uniform model at 0 %, whatever the start estimate error."""
    jobs, outages = _workload()
    for estimate in (0.25, 0.5):
        uniform = StagingParams(prediction_error=0.0, estimate_error=estimate)
        measured = StagingParams(measured=((0.0, 1.0),), estimate_error=estimate)
        assert (replay_staging(jobs, outages, "jit", uniform)
                == replay_staging(jobs, outages, "jit", measured))


def test_one_error_model_at_a_time():
    jobs, outages = _workload()
    with pytest.raises(ValueError, match="one error model"):
        replay_staging(jobs, outages, "jit",
                       StagingParams(prediction_error=0.25, measured=((0.0, 1.0),)))


# What replay_staging gave before the measured model was added (the code of commit d18dd84),
# on _workload(): the uniform model must give it bit for bit.
UNIFORM_BEFORE = {
    ("now", 0.0): (0, 175703852777777.5, 23, 182, 1307.3076923076924, 4000.0, 4000.0, 49),
    ("jit", 0.0): (174, 134779377777777.73, 19, 0, 0.0, 0.0, 0.0, 0),
    ("jit", 0.25): (174, 136365190334843.25, 14, 73, 284.95077709971866, 1030.0, 1030.0, 0),
    ("jit", 0.5): (153, 148929458970474.94, 15, 70, 272.3114061913461, 1030.0, 1030.0, 0),
}


@pytest.mark.parametrize("mode,error", sorted(UNIFORM_BEFORE))
def test_uniform_model_unchanged(mode, error):
    jobs, outages = _workload()
    result = replay_staging(jobs, outages, mode,
                            StagingParams(prediction_error=error, estimate_error=error))
    assert (result.held_back, result.input_byte_hours, result.at_risk, result.delayed,
            result.delay_mean, result.delay_p95, result.delay_max,
            result.over_max_delay) == UNIFORM_BEFORE[mode, error]


@pytest.mark.parametrize("text,expected", [
    ('{"transfers": [\n{"predicted": 1, "bound": 2, "actual": 1},\n', r":3: not JSON"),
    ("[1, 2]", r": not a prediction record"),
    ('{"transfers": []}', r": not a prediction record"),
    ('{"runs": [{"predicted": 1, "bound": 2, "actual": 1}]}', r": not a prediction record"),
    ('{"transfers": [{"predicted": 1, "bound": 2, "actual": 1}, {"predicted": 1, "bound": 2}]}',
     r": transfers\[1\]: 'actual' is None"),
    ('{"transfers": [{"predicted": 1, "bound": 2, "actual": -3}]}', r"'actual' is -3"),
    ('{"transfers": [{"predicted": 1, "bound": NaN, "actual": 1}]}', r"'bound' is nan"),
    ('{"transfers": [{"predicted": true, "bound": 2, "actual": 1}]}', r"'predicted' is True"),
    ('{"transfers": [{"predicted": "1", "bound": 2, "actual": 1}]}', r"'predicted' is '1'"),
    ('{"transfers": ["1 2 1"]}', r"transfers\[0\]: 'predicted' is None"),
    ('{"transfers": [{"predicted": 1, "bound": 2, "actual": 1}], "date": 2026}',
     r"'date' is 2026"),
    ("[" * 100000 + "]" * 100000, r": not JSON"),
])
def test_bad_record_refused_in_one_line_naming_it(tmp_path, text, expected):
    path = tmp_path / "prediction.json"
    path.write_text(text)
    with pytest.raises(InputError, match=expected) as caught:
        load_measured(path)
    message = str(caught.value)
    assert message.startswith(str(path)) and "\n" not in message


def test_record_that_is_not_a_file_or_too_large_refused(tmp_path):
    with pytest.raises(InputError, match="not a regular file"):
        load_measured("/dev/zero")
    big = tmp_path / "big.json"
    with big.open("wb") as stream:
        stream.truncate((16 << 20) + 1)
    with pytest.raises(InputError) as caught:
        load_measured(big)
    assert str(caught.value).startswith(str(big)) and "\n" not in str(caught.value)

