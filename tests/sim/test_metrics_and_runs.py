"""Cross-run filtering, whole replays on the shipped excerpt, determinism."""

from __future__ import annotations

import dataclasses
import math
import os

import pytest

from scratchkeeper.errors import InputError
from scratchkeeper.sim import DATA_DIR
from scratchkeeper.sim.metrics import filtered_wait_stats, nonzero_somewhere, wait_stats
from scratchkeeper.sim.outages import extrapolated_outages, failure_stats, replayed_outages
from scratchkeeper.sim.run import ReplayConfig, run_replay
from scratchkeeper.sim.traces import read_lanl_failures

RICC_EXCERPT = os.path.join(DATA_DIR, "RICC-2010-2-first5000.swf.gz")
LANL_EXCERPT = os.path.join(DATA_DIR, "LA-UR-05-7318-system20.csv.xz")


def test_jobs_with_zero_wait_in_every_run_are_left_out():
    runs = {"a": [0, 0, 5, 0], "b": [0, 3, 5, 0]}
    assert nonzero_somewhere(runs) == [1, 2]
    stats = filtered_wait_stats(runs)
    assert (stats["a"].jobs, stats["a"].mean, stats["a"].sd) == (2, 2.5, 2.5)
    assert (stats["b"].mean, stats["b"].sd) == (4.0, 1.0)
    assert math.isnan(wait_stats([]).mean)
    with pytest.raises(ValueError, match="different job counts"):
        nonzero_somewhere({"a": [1], "b": [1, 2]})


def test_failure_statistics_of_system_20():
    records = read_lanl_failures(LANL_EXCERPT).records
    stats = failure_stats(records)
    # 2,478 failures of 512 nodes over about 3.8 years: a node fails every ~290 days.
    assert 200 < stats.node_mtbf_days < 400
    outages = extrapolated_outages(stats, 64, 150 * 86400, seed=3)
    assert outages == extrapolated_outages(stats, 64, 150 * 86400, seed=3)
    assert outages != extrapolated_outages(stats, 64, 150 * 86400, seed=4)
    # 64 OSTs x 150 days / 290 days per failure: about 33 outages.
    assert 10 < len(outages) < 80
    replayed = replayed_outages(records, 64, 30 * 86400)
    assert replayed and all(0 <= o.ost_index < 64 and o.down < 30 * 86400 for o in replayed)
    for ost in {o.ost_index for o in replayed}:
        spans = sorted((o.down, o.up) for o in replayed if o.ost_index == ost)
        assert all(a[1] < b[0] for a, b in zip(spans, spans[1:]))    # merged, no overlap


def _config(**kwargs):
    values = dict(trace=RICC_EXCERPT, limit=1500, failures=LANL_EXCERPT, stripe_count=8,
                  ost_count=16)
    values.update(kwargs)
    return ReplayConfig(**values)


def test_same_seed_same_result_other_seed_other_result():
    first = run_replay(_config(policy="none"))
    again = run_replay(_config(policy="none"))
    assert first.waits == again.waits and first.affected == again.affected
    assert first.rows[0].values == again.rows[0].values
    other = run_replay(_config(policy="none", seed=2))
    assert other.waits != first.waits


def test_recovery_policies_on_the_excerpt():
    outcomes = {policy: run_replay(_config(policy=policy))
                for policy in ("ideal", "none", "on-the-fly")}
    ideal, none, on_the_fly = (outcomes[p].rows[0].values for p in ("ideal", "none", "on-the-fly"))
    assert ideal["ost_failures"] == 0 and ideal["affected_jobs"] == 0
    assert none["ost_failures"] > 0 and none["affected_jobs"] > 0 and none["kills"] > 0
    assert on_the_fly["kills"] == 0
    # Requeued at the tail, affected jobs wait far longer without recovery.
    assert none["affected_wait_mean"] > 2 * on_the_fly["affected_wait_mean"]


def test_replication_variants_share_one_schedule():
    base = _config(policy="ideal", failures="")
    variants = [dataclasses.replace(base, strategy=s, alpha=a)
                for s in ("fcfs", "dispatch-aware") for a in (0.2, math.inf)]
    outcome = run_replay(base, variants)
    risk = {(r.config.strategy, r.config.alpha): r.values["at_risk_pct"] for r in outcome.rows}
    assert risk[("fcfs", 0.2)] >= risk[("dispatch-aware", 0.2)]
    # alpha = inf replicates every queued job on submission, whatever the order.
    assert risk[("fcfs", math.inf)] == risk[("dispatch-aware", math.inf)]
    assert all(0 < r.values["space_mean_pct"] for r in outcome.rows)


def test_config_from_mapping_names_the_bad_key():
    with pytest.raises(InputError, match="unknown replay setting 'stripes'"):
        ReplayConfig.from_mapping({"trace": "t", "stripes": 4}, where="s.toml")
    with pytest.raises(InputError, match="'stripe_count' expects int"):
        ReplayConfig.from_mapping({"trace": "t", "stripe_count": "four"}, where="s.toml")
    with pytest.raises(InputError, match="stripe count must be within 2..32"):
        ReplayConfig.from_mapping({"trace": "t", "stripe_count": 64})


def test_replayed_failures_and_other_trace_formats_run_end_to_end():
    replayed = run_replay(_config(policy="on-the-fly", failure_mode="replayed"))
    assert replayed.rows[0].values["ost_failures"] > 0
    here = os.path.join(os.path.dirname(__file__), "data")
    lanl = run_replay(ReplayConfig(trace=os.path.join(here, "lanl-system20-jobs.txt"),
                                   procs_per_node=4, policy="ideal"))
    assert lanl.rows[0].values["jobs"] == 4 and lanl.rows[0].values["model_system_nodes"] == 16
    site = run_replay(ReplayConfig(trace=os.path.join(here, "site-jobs.csv"), policy="ideal",
                                   system_nodes=64))
    # a1 (16 procs) and a2 (4) start on submission; a3 (64) waits for both.
    assert list(site.waits) == [0.0, 0.0, 3600.0 - 90.0]


def test_results_columns_are_unique_and_no_metric_overwrites_a_setting():
    from scratchkeeper.sim.sweep import CONFIG_FIELDS, METRIC_FIELDS

    columns = CONFIG_FIELDS + METRIC_FIELDS + ["seconds"]
    assert len(columns) == len(set(columns)), sorted(c for c in columns if columns.count(c) > 1)
    config = _config(policy="on-the-fly", failure_mode="replayed", strategy="fcfs",
                     scratch_bytes=5e15, system_nodes=1024)
    values = run_replay(config).rows[0].values
    assert not set(values) & set(CONFIG_FIELDS)
    assert set(values) <= set(METRIC_FIELDS)
    assert values["model_scratch_bytes"] == 5e15 and values["model_system_nodes"] == 1024


def _site_trace(tmp_path, lines):
    path = tmp_path / "jobs.csv"
    path.write_text("job_id,submit_time,run_time,procs,requested_time,memory_kb_per_proc,"
                    "input_bytes\n" + "".join(line + "\n" for line in lines))
    return str(path)


def test_queue_length_is_the_time_average_of_queued_jobs(tmp_path):
    # One node: b waits 100 s behind a, c 150 s behind b; span 0-300 s.
    trace = _site_trace(tmp_path, ["a,0,100,1,100,1,1", "b,0,100,1,100,1,1",
                                   "c,50,100,1,100,1,1"])
    values = run_replay(ReplayConfig(trace=trace, policy="ideal", system_nodes=1)).rows[0].values
    assert values["makespan_s"] == 300
    assert values["queue_length_mean"] == pytest.approx((100 + 150) / 300)


def test_peak_memory_inputs_are_calibrated_on_jaguars_running_jobs(tmp_path):
    from scratchkeeper.sim.workload import (
        JAGUAR_MEMORY,
        JAGUAR_PEAK_PER_JOB,
        TraceJob,
        WorkloadParams,
        build_workload,
    )

    gib = 1024 ** 3
    jobs = [TraceJob("short", 0, 100, 2, memory_bytes=4 * gib),
            TraceJob("long", 10, 900, 4, memory_bytes=8 * gib),
            TraceJob("known", 20, 1000, 1, memory_bytes=gib, input_bytes=123.0)]
    requested = build_workload(jobs, WorkloadParams(system_nodes=16))
    assert [j.input_bytes for j in requested.jobs] == [4 * gib, 8 * gib, 123.0]
    params = WorkloadParams(system_nodes=16, input_model="peak-memory", machine_nodes=10,
                            node_memory_bytes=2 * gib)
    peak = build_workload(jobs, params)
    scale = peak.jobs[0].input_bytes / (4 * gib)
    assert peak.jobs[1].input_bytes == pytest.approx(8 * gib * scale)
    assert peak.jobs[2].input_bytes == 123.0      # a known input size is not a model's
    # The run-time-weighted mean (what running jobs average over time) is Jaguar's share.
    weighted = (4 * gib * 100 + 8 * gib * 900 + gib * 1000) * scale / 2000
    assert weighted == pytest.approx(JAGUAR_PEAK_PER_JOB * 10 * 2 * gib / JAGUAR_MEMORY)
    # Smaller inputs use fewer stripes when they are below stripe_count stripes.
    assert all(len(j.osts) <= params.stripe_count for j in peak.jobs)
    with pytest.raises(InputError, match="unknown input model"):
        WorkloadParams(input_model="guess")


def test_peak_memory_on_the_excerpt_uses_the_swf_machine_nodes():
    requested = run_replay(_config(policy="ideal", failures="", limit=0))
    peak = run_replay(_config(policy="ideal", failures="", limit=0, input_model="peak-memory"))
    ratio = peak.rows[0].values["input_mean_bytes"] / requested.rows[0].values["input_mean_bytes"]
    # RICC asks about 1.2 GB per processor; Jaguar's running jobs peaked far below that share.
    assert 0.05 < ratio < 1
    assert list(peak.waits) == list(requested.waits)    # no failure: the schedule is the same


def test_a_period_of_the_trace_is_replayed_from_its_own_start(tmp_path):
    day = 86400
    trace = _site_trace(tmp_path, [f"j{k},{k * day // 2},60,1,60,1,1" for k in range(10)])
    whole = run_replay(ReplayConfig(trace=trace, policy="ideal", system_nodes=4))
    assert whole.rows[0].values["jobs"] == 10
    part = run_replay(ReplayConfig(trace=trace, policy="ideal", system_nodes=4, start_day=1,
                                   days=2))
    # Jobs submitted at days 1, 1.5, 2 and 2.5; the first one is the replay's time zero.
    assert part.rows[0].values["jobs"] == 4
    config = ReplayConfig(trace=trace, policy="ideal", system_nodes=4, start_day=1, days=2)
    assert config.workload_key() != ReplayConfig(trace=trace, policy="ideal",
                                                 system_nodes=4).workload_key()
    with pytest.raises(InputError, match="no job submitted in days 20 to 21"):
        run_replay(ReplayConfig(trace=trace, policy="ideal", system_nodes=4, start_day=20,
                                days=1))
    with pytest.raises(InputError, match="must be >= 0"):
        ReplayConfig(trace=trace, start_day=-1)


def test_a_replay_reports_progress_for_every_phase_each_ending_at_its_total(monkeypatch):
    from scratchkeeper.sim import replication, run, traces

    monkeypatch.setattr(run, "_last_read", {})       # read here, not kept from another test
    monkeypatch.setattr(run, "_last_columns", {})
    monkeypatch.setattr(traces, "PROGRESS_LINES", 256)
    monkeypatch.setattr(replication, "PROGRESS_EVENTS", 512)
    seen: dict[str, list[tuple[int, int]]] = {}
    base = _config(policy="on-the-fly")
    variants = [dataclasses.replace(base, strategy=s, alpha=0.5)
                for s in ("fcfs", "dispatch-aware")]
    run_replay(base, variants, progress=lambda phase, done, total:
               seen.setdefault(phase, []).append((done, total)))
    assert list(seen) == ["reading trace", "building workload", "reading failures", "scheduling",
                          "replication fcfs alpha=0.5", "replication dispatch-aware alpha=0.5"]
    for phase, calls in seen.items():
        dones = [done for done, _ in calls]
        assert dones == sorted(dones) and calls[-1][0] == calls[-1][1] > 0, (phase, calls)
    assert seen["reading trace"][-1][1] == os.path.getsize(RICC_EXCERPT)
    # Reports on the way, not only at the end (the trace stops at --limit 1500 here).
    assert len(seen["reading trace"]) >= 3 and len(seen["replication fcfs alpha=0.5"]) >= 2


def descriptors_on(path) -> list[str]:
    """This process's open descriptors on ``path``."""
    target = os.path.realpath(path)
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == target:
                found.append(fd)
        except OSError:  # closed since the listing
            continue
    return found


def test_reading_a_compressed_trace_reports_file_bytes_and_closes_the_file(monkeypatch):
    from scratchkeeper.sim import traces

    monkeypatch.setattr(traces, "PROGRESS_LINES", 100)
    assert not descriptors_on(RICC_EXCERPT)
    calls = []
    trace = traces.read_swf(RICC_EXCERPT, limit=2000, progress=lambda d, t: calls.append((d, t)))
    assert len(trace.jobs) == 2000
    # the trace's own descriptors, not the process's count (another thread of the test worker
    # may open or close a file meanwhile)
    assert not descriptors_on(RICC_EXCERPT)
    size = os.path.getsize(RICC_EXCERPT)
    assert calls and all(total == size for _, total in calls)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls) and 0 < calls[0][0] <= size
