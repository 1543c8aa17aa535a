"""The C cores of the replay (scratchkeeper/sim/native) against the Python model, bit for bit.

Every comparison runs both cores on fresh copies of the same jobs and asserts the same state
for every job (start, end, first start, ready time, recovery seconds, kills, version, affected),
the same log, the same totals and the same replication results, floats compared by their bits.
"""

from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from scratchkeeper.errors import InputError
from scratchkeeper.sim import DATA_DIR
from scratchkeeper.sim.outages import OstOutage, extrapolated_outages, failure_stats
from scratchkeeper.sim.replication import STRATEGIES, ReplicationParams, replay_replication
from scratchkeeper.sim.run import ReplayConfig, _failure_records, load_trace
from scratchkeeper.sim.scheduler import POLICIES, RecoveryParams, default_core, recorded_schedule, simulate
from scratchkeeper.sim.workload import SimJob, build_workload

from .easy_reference import easy_start_times
from .helpers import make_jobs

pytest.importorskip("scratchkeeper.sim._native")

REPO = Path(__file__).resolve().parents[2]
SHARED_TRACES = REPO.parent / "shared" / "traces"
RICC_SAMPLE = Path(DATA_DIR) / "RICC-2010-2-first5000.swf.gz"
SYSTEM20 = Path(DATA_DIR) / "LA-UR-05-7318-system20.csv.xz"
CASES = [(policy, backfill) for policy in POLICIES for backfill in (True, False)]


def _bits(value: float) -> str:
    return float(value).hex()


def _job_state(job: SimJob) -> tuple:
    return (_bits(job.start), _bits(job.end), _bits(job.first_start), _bits(job.ready_at),
            _bits(job.recovery_seconds), job.kills, job.version, job.affected)


def _schedule_state(schedule) -> tuple:
    return (schedule.log_time.tobytes(), schedule.log_kind.tobytes(), schedule.log_job.tobytes(),
            _bits(schedule.busy_node_seconds), _bits(schedule.first_submit),
            _bits(schedule.last_end), schedule.failures, schedule.system_nodes)


def _replication_state(result) -> tuple:
    assert len(result.at_risk) == result.jobs and sum(result.at_risk) == result.jobs_at_risk
    return (result.jobs, result.jobs_at_risk, result.replicated_jobs,
            [_bits(s) for s in result.space_samples], result.at_risk)


def _assert_same(make_jobs_fresh, system_nodes: int, *, replications=(), **kwargs) -> list:
    """Run both cores on fresh jobs; assert identical results; return the native schedule's jobs."""
    runs = {}
    for core in ("python", "native"):
        jobs = make_jobs_fresh()
        progress: list[tuple[int, int]] = []
        schedule = simulate(jobs, system_nodes, core=core,
                            progress=lambda done, total: progress.append((done, total)), **kwargs)
        results = [_replication_state(replay_replication(schedule, params, core=core))
                   for params in replications]
        runs[core] = ([_job_state(job) for job in jobs], _schedule_state(schedule), progress,
                      results, jobs)
    python, native = runs["python"], runs["native"]
    differ = [(i, p, n) for i, (p, n) in enumerate(zip(python[0], native[0])) if p != n]
    assert not differ, f"{len(differ)} of {len(python[0])} jobs differ, e.g. {differ[:3]}"
    assert python[1] == native[1], "the log or the totals differ"
    assert python[2] == native[2], "progress reported differently"
    for params, p, n in zip(replications, python[3], native[3]):
        assert p == n, f"replication {params} differs: {p[:3]} vs {n[:3]}"
    return native[4]


def _replications(scratch_bytes: float = 1e13) -> list[ReplicationParams]:
    return [ReplicationParams(strategy, alpha, threshold, 250e6, scratch_bytes, samples=50)
            for strategy in STRATEGIES for alpha in (0.1, 0.5, 2.0, math.inf)
            for threshold in ((0.01, 0.1) if strategy == "shortcut" else (0.1,))]


# ------------------------------------------------------------------ real trace slices


def _trace_jobs(trace: Path, limit: int = 0, ost_count: int = 64):
    if not trace.exists():
        pytest.skip(f"{trace} is not here (shared/ beside the checkout)")
    config = ReplayConfig(trace=str(trace), limit=limit, ost_count=ost_count)
    trace_jobs, header_nodes, _, _ = load_trace(config)
    params = config.workload_params()

    def fresh():
        return build_workload(trace_jobs, params, header_nodes).jobs

    return fresh, build_workload(trace_jobs, params, header_nodes).system_nodes


def _frequent_outages(jobs, ost_count: int, rate_factor: float, seed: int = 1):
    """System 20's repair times with its node failure rate raised: many hits on a short slice."""
    stats = failure_stats(_failure_records(str(SYSTEM20), 20, False))
    stats = dataclasses.replace(stats, node_failure_rate=stats.node_failure_rate * rate_factor)
    return extrapolated_outages(stats, ost_count, jobs[-1].submit + 10 * 86400, seed=seed)


@pytest.mark.parametrize(("policy", "backfill"), CASES)
def test_ricc_first_5000_with_failures_alike(policy, backfill):
    fresh, system_nodes = _trace_jobs(RICC_SAMPLE, ost_count=16)
    outages = _frequent_outages(fresh(), 16, rate_factor=60)
    assert len(outages) >= 40
    jobs = _assert_same(fresh, system_nodes, backfill=backfill, outages=outages,
                        recovery=RecoveryParams(policy), replications=_replications()[::3])
    assert sum(job.affected for job in jobs) > 1000     # the failures did hit jobs


def test_ricc_first_5000_without_failures_alike_with_every_replication():
    fresh, system_nodes = _trace_jobs(RICC_SAMPLE)
    _assert_same(fresh, system_nodes, replications=_replications())


@pytest.mark.parametrize("policy", ["none", "on-the-fly"])
def test_ricc_first_30000_with_failures_alike(policy):
    fresh, system_nodes = _trace_jobs(SHARED_TRACES / "RICC-2010-2.swf.gz", limit=30_000)
    outages = _frequent_outages(fresh(), 64, rate_factor=20)
    _assert_same(fresh, system_nodes, outages=outages, recovery=RecoveryParams(policy),
                 replications=_replications()[:4])


def test_hpc2n_sample_alike():
    fresh, system_nodes = _trace_jobs(SHARED_TRACES / "HPC2N-2002-sample-3171.swf.gz")
    _assert_same(fresh, system_nodes, replications=_replications())


def test_recorded_schedule_replication_alike():
    fresh, system_nodes = _trace_jobs(RICC_SAMPLE)
    schedule = recorded_schedule(fresh(), system_nodes)
    for params in _replications():
        assert (_replication_state(replay_replication(schedule, params, core="python"))
                == _replication_state(replay_replication(schedule, params, core="native")))


def test_the_native_core_is_the_default_and_is_textbook_easy():
    assert default_core() == "native"
    fresh, system_nodes = _trace_jobs(RICC_SAMPLE)
    jobs = fresh()
    simulate(jobs, system_nodes, backfill=True)
    assert [job.start for job in jobs] == easy_start_times(jobs, system_nodes)


# ------------------------------------------------------------------ random workloads


def _random_case(rng: random.Random):
    """A small workload with ties, short limits, OSTs shared by many jobs and outages."""
    system_nodes = rng.randint(1, 8)
    count = rng.randint(1, 40)
    submits = sorted(rng.choice((rng.randint(0, 60), rng.randint(0, 240) / 4))
                     for _ in range(count))
    specs = []
    for submit in submits:
        run_time = rng.choice((0, rng.randint(1, 40), rng.randint(1, 160) / 8))
        limit = rng.choice((None, run_time + rng.randint(0, 30), max(1, run_time - 5)))
        osts = tuple(rng.sample(range(5), rng.randint(0, 3)))
        specs.append((submit, rng.randint(1, system_nodes), run_time, limit, osts,
                      rng.choice((1e9, 3.3e8, 7e10))))
    outages = [OstOutage(rng.randrange(6), down, down + rng.choice((0, rng.randint(1, 60))))
               for down in (rng.randint(0, 120) for _ in range(rng.randint(0, 8)))]
    recovery = RecoveryParams(rng.choice(POLICIES), rng.choice((1e8, 3e7)),
                              rng.choice((0.0, 30.0, 2.5)))
    return specs, system_nodes, outages, recovery, rng.random() < 0.7


def test_a_thousand_random_workloads_with_failures_alike():
    rng = random.Random(34)
    seen = set()
    for _ in range(1000):
        specs, system_nodes, outages, recovery, backfill = _random_case(rng)
        _assert_same(lambda: make_jobs(*specs), system_nodes, backfill=backfill,
                     outages=outages, recovery=recovery,
                     replications=_replications(scratch_bytes=1e11)[::5])
        seen.add((recovery.policy, backfill, bool(outages)))
    assert len(seen) == 12      # every policy, FCFS and EASY, with and without outages


_job = st.tuples(st.integers(0, 50), st.integers(1, 6), st.integers(0, 30),
                 st.one_of(st.none(), st.integers(1, 60)),
                 st.lists(st.integers(0, 3), max_size=3, unique=True).map(tuple),
                 st.sampled_from([1e9, 2.5e8]))
_outage = st.tuples(st.integers(0, 4), st.integers(0, 80), st.integers(0, 50))


@given(specs=st.lists(_job, min_size=1, max_size=30), outages=st.lists(_outage, max_size=6),
       policy=st.sampled_from(POLICIES), backfill=st.booleans())
def test_random_workloads_alike(specs, outages, policy, backfill):
    specs = sorted(specs, key=lambda spec: spec[0])
    _assert_same(lambda: make_jobs(*specs), 6, backfill=backfill,
                 outages=[OstOutage(ost, down, down + length) for ost, down, length in outages],
                 recovery=RecoveryParams(policy), replications=_replications(1e10)[::7])


# ------------------------------------------------------------------ odd inputs


def test_odd_ost_numbers_are_renumbered_alike():
    # negative, huge and non-integer OST names: the Python model only compares them
    specs = [(0, 1, 50, None, (-3, 1 << 40)), (5, 1, 50, None, ("a",)), (6, 2, 10, None, (7,))]
    outages = [OstOutage(1 << 40, 10, 30), OstOutage("a", 12, 14), OstOutage(-3, 40, 45)]
    jobs = _assert_same(lambda: make_jobs(*specs), 2, outages=outages,
                        recovery=RecoveryParams("pre-execution"))
    assert [job.affected for job in jobs] == [True, True, False]


def test_progress_errors_reach_the_caller_from_the_native_core():
    fresh, system_nodes = _trace_jobs(RICC_SAMPLE)

    def stop(done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        simulate(fresh(), system_nodes, progress=stop, core="native")
    schedule = simulate(fresh(), system_nodes, core="native")
    with pytest.raises(KeyboardInterrupt):
        replay_replication(schedule, ReplicationParams(), progress=stop, core="native")


def test_unknown_core_is_an_input_error():
    with pytest.raises(InputError, match="scheduler core"):
        simulate(make_jobs((0, 1, 1)), 1, core="fortran")
    schedule = simulate(make_jobs((0, 1, 1)), 1)
    with pytest.raises(InputError, match="replication core"):
        replay_replication(schedule, ReplicationParams(), core="fortran")
