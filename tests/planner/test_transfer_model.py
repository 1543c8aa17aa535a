"""The JIT transfer model (issue 34): the robust fit of fixed cost + bytes / bandwidth on
synthetic timings, its fallbacks, the changed-host rule, the timings a data job reports and
the check they pass before they are learned from, and the data job's own clock."""

from __future__ import annotations

import math
import os
import random
import statistics
import subprocess

import pytest

from scratchkeeper.config import SiteConfig, StagingConfig
from scratchkeeper.errors import InputError
from scratchkeeper.planner import records
from scratchkeeper.planner.jit import decide
from scratchkeeper.planner.predict import host_model, predict, source_client
from scratchkeeper.planner.transfer_fit import fit_history, fit_line, fit_samples
from scratchkeeper.planner.transfer_timing import check_timings, parse_timings, timing_rows
from scratchkeeper.state import StateStore

MB = 1_000_000
FIXED, BANDWIDTH = 0.8, 200 * MB          # a GridFTP server: 0.8 s per file, 200 MB/s


def _timings(count: int, *, seed: int = 1, noise: float = 0.05, fixed: float = FIXED,
             bandwidth: float = BANDWIDTH) -> list[tuple[int, float]]:
    """(bytes, seconds) of ``count`` transfers of 1 MB..1 GB (log-uniform), ±noise."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        size = int(10 ** rng.uniform(6, 9))
        out.append((size, (fixed + size / bandwidth) * (1 + rng.uniform(-noise, noise))))
    return out


def _config(**staging) -> SiteConfig:
    return SiteConfig(staging=StagingConfig(**staging))


# -- the fit ----------------------------------------------------------------------------------
def test_fixed_cost_and_bandwidth_are_recovered():
    samples = _timings(40)
    fixed, per_byte = fit_line([b for b, _ in samples], [s for _, s in samples])
    assert fixed == pytest.approx(FIXED, rel=0.05)
    assert 1 / per_byte == pytest.approx(BANDWIDTH, rel=0.05)


def test_outliers_do_not_move_the_fit():
    samples = _timings(40)
    # 6 of 40 transfers 5-20x slower (a busy server, a stalled connection), small and large
    slowed = [(b, s * (5 + 3 * i)) if i % 7 == 0 else (b, s) for i, (b, s) in enumerate(samples)]
    assert sum(1 for a, b in zip(samples, slowed) if a != b) == 6
    fixed, per_byte = fit_line([b for b, _ in slowed], [s for _, s in slowed])
    assert fixed == pytest.approx(FIXED, rel=0.1)
    assert 1 / per_byte == pytest.approx(BANDWIDTH, rel=0.1)


def test_the_bound_is_a_high_quantile_of_the_relative_residuals():
    samples = _timings(200, noise=0.2)
    fit = fit_samples([b for b, _ in samples], [s for _, s in samples], q=0.9,
                      min_spread=0.0, basis="test")
    covered = sum(s <= fit.pessimistic(b) for b, s in samples) / len(samples)
    assert 0.85 <= covered <= 0.95
    assert 0.1 < fit.spread < 0.25               # noise ±20 %: the 90th percentile near +16 %
    # never below the floor, however tight the history
    exact = fit_samples([MB, 10 * MB], [0.1, 0.2], q=0.9, min_spread=0.1, basis="test")
    assert exact.spread == pytest.approx(0.1)


def test_one_size_only_goes_through_the_origin():
    fixed, per_byte = fit_line([64 * MB] * 3, [1.0, 2.0, 1.5])
    assert fixed == 0 and per_byte == pytest.approx(1.5 / (64 * MB))


def test_a_changed_host_is_refitted_on_its_newest_transfers():
    before = _timings(30, seed=2)
    # the link is 4x slower now: seen in files whose bytes outweigh the fixed cost
    after = [(size, FIXED + size / (BANDWIDTH / 4)) for size in (50 * MB, 1000 * MB, 20 * MB,
                                                                  300 * MB, 2 * MB)]
    history = after + before                                  # newest first
    fit = fit_history(history, q=0.9, min_spread=0.1, change_window=5, min_samples=5,
                      basis="test")
    assert "changed" in fit.basis and fit.samples == 5
    assert 1 / fit.per_byte == pytest.approx(BANDWIDTH / 4, rel=0.15)
    # an unchanged host: the whole history
    same = fit_history(_timings(5, seed=4) + before, q=0.9, min_spread=0.1, change_window=5,
                       min_samples=5, basis="test")
    assert same.samples == 35 and "changed" not in same.basis


# -- the history, its fallbacks ----------------------------------------------------------------
def _store(tmp_path) -> StateStore:
    return records.open_staging(StateStore(str(tmp_path / "state.db")))


def _record(store, host: str, client: str, samples, *, start: int = 0) -> None:
    records.record_timings(store, [
        {"chain_id": f"sk{start + i}", "job_key": "stage-in", "line": 1, "host": host,
         "client": client, "bytes": b, "files": 1, "seconds": s, "finished": 1000.0 + start + i,
         "owner_uid": 0} for i, (b, s) in enumerate(samples)])


def test_small_history_falls_back_to_the_pooled_fit_then_to_none(tmp_path):
    store = _store(tmp_path)
    config = _config(min_samples=5)
    assert host_model(store, "new.example:2811", "gridftp", config).fit is None
    _record(store, "old.example:2811", "gridftp", _timings(20))
    _record(store, "new.example:2811", "gridftp", _timings(2, seed=9), start=100)
    model = host_model(store, "new.example:2811", "gridftp", config)
    assert model.samples == 2 and model.fit is not None and model.fit.basis.startswith("pooled")
    assert model.fit.samples == 22
    # another client's history is not pooled
    none = host_model(store, "new.example:2811", "http", config)
    assert none.fit is None and "fewer than staging.min_samples = 5" in none.reason
    _record(store, "new.example:2811", "gridftp", _timings(5, seed=10), start=200)
    assert host_model(store, "new.example:2811", "gridftp", config).fit.basis.startswith("host")


def test_small_transfers_no_longer_blow_up_the_bound_of_a_large_file(tmp_path):
    """Issue 34: 64 MiB in 1-2 s, predicted 15-18 s and 850-957 s at worst by a log-normal
    rate learned mostly from small transfers (all latency)."""
    store = _store(tmp_path)
    rng = random.Random(5)
    # 40 small files (1-4 MB: 0.3 s of set-up, a few hundredths of bytes), 4 of 64 MiB (1.5 s):
    # ±10 %. Their rates spread from 3 to 45 MB/s, the old model's geometric mean near 8.
    sizes = [int(rng.uniform(1, 4) * MB) for _ in range(40)]
    sizes[5::10] = [64 << 20] * 4
    samples = [(size, (0.3 + size / (56 * MB)) * rng.uniform(0.9, 1.1)) for size in sizes]
    logs = [math.log(b / s) for b, s in samples]
    old = (64 << 20) / math.exp(statistics.fmean(logs) - 2 * statistics.stdev(logs))
    assert old > 15                          # the old bound: 10x the transfer and more
    source = tmp_path / "in.dat"
    with open(source, "wb") as out:
        out.truncate(64 << 20)                       # sparse: its size is what is asked
    _record(store, "localhost", "file", samples)
    result = predict([(str(source), False)], store, _config())
    actual = 0.3 + (64 << 20) / (56 * MB)                 # 1.5 s
    assert result.seconds == pytest.approx(actual, rel=0.1)
    assert actual <= result.pessimistic <= 2 * actual
    # JIT: a 3-minute wait holds it back (the case: not held at all)
    decision = decide(0.0, 180.0, "will-run", result, _config(jit_margin=120))
    assert decision.release_at is not None and decision.reason.startswith("held back")
    assert decision.release_at == pytest.approx(180.0 - result.pessimistic - 120)


def test_prediction_sums_files_each_with_its_fixed_cost(tmp_path):
    store = _store(tmp_path)
    _record(store, "localhost", "file", _timings(20, noise=0.0))
    paths = []
    for name, size in (("a", 10 * MB), ("b", 100 * MB)):
        path = tmp_path / name
        with open(path, "wb") as out:
            out.truncate(size)
        paths.append((str(path), False))
    result = predict(paths, store, _config(jit_min_spread=0.1))
    assert result.seconds == pytest.approx(2 * FIXED + 110 * MB / BANDWIDTH, rel=0.01)
    assert result.pessimistic == pytest.approx(result.seconds * 1.1, rel=0.01)


def test_clients_by_scheme():
    assert source_client("gsiftp://dtn.example.org/x") == "gridftp"
    assert source_client("ftp://127.0.0.1:2811/x") == "gridftp"
    assert source_client("https://www.example.org/x") == "http"
    assert source_client("/scratch/x") == "file"
    assert source_client("nosuch://x/y") == ""


# -- what a data job reports, and what is believed -----------------------------------------------
def test_timings_are_parsed_strictly():
    assert parse_timings(["12:3.41", "3:0.07"]) == {12: 3.41, 3: 0.07}
    for bad in ("12", "0:1.0", "x:1", "12:-1", "12:1e9", "12:nan", "12:1.0:2"):
        with pytest.raises(InputError, match="LINE:SECONDS"):
            parse_timings([bad])
    assert check_timings([[4, 1.5]]) == {4: 1.5}
    for bad in ("4:1.5", [[4]], [[True, 1.0]], [[4, float("inf")]], [[0, 1.0]], [[4, "1"]]):
        with pytest.raises(InputError):
            check_timings(bad)


LINES = {4: ("127.0.0.1:2811", "gridftp", 64 << 20, 1), 5: ("127.0.0.1:8080", "http", MB, 1)}


def _rows(timings, job_seconds, slack=10.0):
    return timing_rows(LINES, timings, chain_id="c", job_key="stage-in", owner_uid=1000,
                       job_seconds=job_seconds, slack=slack, finished=5.0)


def test_timings_that_account_for_the_job_are_recorded():
    rows, why = _rows({4: 1.3, 5: 0.0, 99: 7.0}, job_seconds=4.0)
    assert why == "" and [(r["line"], r["client"], r["seconds"]) for r in rows] == [
        (4, "gridftp", 1.3), (5, "http", 0.005)]          # a 0.00 s reading: half a clock tick


@pytest.mark.parametrize("timings, job_seconds, words", [
    ({4: 0.01}, 60.0, "unaccounted for"),                 # a job claiming a fast host
    ({4: 30.0}, 10.0, "exceed the job's"),
    ({4: 1.0}, None, "no start time"),
    ({7: 1.0}, 5.0, "no timing of a line"),
])
def test_timings_that_do_not_fit_the_schedulers_figure_are_not_learned(timings, job_seconds,
                                                                       words):
    rows, why = _rows(timings, job_seconds)
    assert rows == [] and words in why


def test_the_data_jobs_clock_times_a_transfer_to_the_centisecond(tmp_path):
    """sk_clock and sk_retry of the rendered data job, run by bash: a 0.3 s 'transfer' is
    timed as such (the data job's own clock, not the scheduler's whole seconds)."""
    # the rendered stage-in (the golden file test_render checks against the templates)
    golden = os.path.join(os.path.dirname(__file__), "golden", "structured.sbatch.slurm.stage-in.sh")
    body = open(golden).read()
    functions = body[body.index("sk_clock() {"):body.index("sk_fail() {")]
    script = tmp_path / "clock.sh"
    script.write_text("set -u\nSK_SOURCE_WAIT=0\nSK_DENIED=x\nSK_MISSING=x\nSK_PERMANENT=x\n"
                      "SK_RETRY_MISSING=0\nSK_LAST_ERROR=''\nSK_SECONDS=''\nSK_TIMINGS=()\n" +
                      functions + "sk_retry 1 0 1 1 7 -- sleep 0.3 2>/dev/null\n"
                      "echo \"${SK_TIMINGS[*]}\"\n")
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30,
                         env={**os.environ, "LC_ALL": "C"})
    assert out.returncode == 0, out.stderr
    option, timing = out.stdout.split()
    line, seconds = timing.split(":")
    assert option == "--timing" and line == "7" and 0.29 <= float(seconds) <= 1.0
