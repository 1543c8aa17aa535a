"""Temporal replication replayed over hand-made schedules."""

from __future__ import annotations

import math

import pytest

from scratchkeeper.errors import InputError
from scratchkeeper.sim.replication import ReplicationParams, replay_replication
from scratchkeeper.sim.scheduler import simulate

from .helpers import make_jobs


def _jobs():
    # 4 nodes; j0 runs 0-100 on all of them; j1..j3 (1 node, 1e9 bytes) queue behind it.
    return make_jobs((0, 4, 100), (10, 1, 10), (20, 1, 10), (30, 1, 10))


def _run(jobs, **kwargs):
    params = dict(copy_bandwidth=1e8, scratch_bytes=4e9, samples=10)
    params.update(kwargs)
    return replay_replication(simulate(jobs, 4), ReplicationParams(**params))


def test_a_job_dispatched_on_submission_is_always_at_risk():
    result = _run(_jobs(), strategy="fcfs", alpha=math.inf)
    # j0 starts at its submission and never sits in the queue; j1..j3 wait 70+ s for a 10 s copy.
    assert (result.jobs_at_risk, result.replicated_jobs) == (1, 3)


def test_a_narrow_fcfs_window_leaves_queued_jobs_at_risk():
    # alpha 0.25 of 4 nodes, but R = 4 (j0 runs): the window covers 4 nodes -> the whole queue.
    assert _run(_jobs(), strategy="fcfs", alpha=0.25).jobs_at_risk == 1
    # j1 (4 nodes) fills the window while j0 runs; j2 and j3 enter it only when j1 is
    # dispatched at 100 and run at 110, before their 20 s copies end.
    def jobs():
        return make_jobs((0, 4, 100), (10, 4, 10), (20, 1, 10), (30, 1, 10))
    assert _run(jobs(), strategy="fcfs", alpha=0.25, copy_bandwidth=5e7).jobs_at_risk == 3
    assert _run(jobs(), strategy="fcfs", alpha=math.inf, copy_bandwidth=5e7).jobs_at_risk == 1


def test_replica_copy_time_decides_the_risk():
    # A copy slower than the wait: 1e9 bytes at 1e6 B/s is 1000 s, longer than any wait here.
    result = _run(_jobs(), strategy="fcfs", alpha=math.inf, copy_bandwidth=1e6)
    assert result.jobs_at_risk == 4


def test_dispatch_aware_orders_the_window_by_actual_dispatch():
    # j1 (4 nodes) heads the queue but j2 (1 node) is backfilled first, at 30 when ja ends.
    # The FCFS window (R = 3 nodes) holds j1 only; the oracle's holds j2 from its submission.
    def jobs():
        return make_jobs((0, 3, 100), (0, 1, 30), (1, 4, 10), (2, 1, 50))
    fcfs = _run(jobs(), strategy="fcfs", alpha=0.25)
    oracle = _run(jobs(), strategy="dispatch-aware", alpha=0.25)
    assert (fcfs.jobs_at_risk, oracle.jobs_at_risk) == (3, 2)


def test_replica_space_is_sampled_over_the_replay():
    result = _run(_jobs(), strategy="fcfs", alpha=math.inf, samples=300)
    assert len(result.space_samples) == 300
    assert max(result.space_samples) == pytest.approx(3e9 / 4e9)    # 3 queued 1e9 inputs
    assert 0 < result.space_mean_pct < 100


def test_bad_parameters_are_input_errors():
    with pytest.raises(InputError, match="strategy"):
        ReplicationParams(strategy="lifo")
    with pytest.raises(InputError, match="alpha"):
        ReplicationParams(alpha=0)
