"""Every algorithm returns the optimum of an independent reference, with a valid assignment."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from solver_reference import brute_force, flow_reference, random_instance, response_time

from scratchkeeper.solver import ALGORITHMS, select_replicas

RUNS = [(name, threads) for name in ALGORITHMS
        for threads in ((1, 2, 3) if name == "parallel" else (1,))]


def _check_all(buckets, cost, delay, load, optimum):
    for algorithm, threads in RUNS:
        selection = select_replicas(buckets, cost, delay, load, algorithm=algorithm,
                                    threads=threads)
        assert len(selection.assignment) == len(buckets)
        for disk, replicas in zip(selection.assignment, buckets):
            assert disk in replicas, (algorithm, buckets)
        counts = [0] * len(cost)
        for disk in selection.assignment:
            counts[disk] += 1
        assert list(selection.counts) == counts
        achieved = response_time(selection.assignment, cost, delay, load)
        assert achieved == optimum, (algorithm, threads, buckets, cost, delay, load)
        assert selection.response_time == float(optimum), (algorithm, threads)


@pytest.mark.parametrize("kind", ["homogeneous", "heterogeneous", "floats"])
def test_tiny_instances_match_brute_force(kind):
    rng = random.Random(f"tiny-{kind}")
    for _ in range(700):
        instance = random_instance(rng, disks=rng.randint(1, 5), buckets=rng.randint(1, 6),
                                   kind=kind)
        _check_all(*instance, brute_force(*instance))


@pytest.mark.parametrize("kind", ["homogeneous", "heterogeneous", "floats"])
def test_larger_instances_match_flow_reference(kind):
    rng = random.Random(f"flow-{kind}")
    for _ in range(40):
        disks = rng.randint(2, 25)
        instance = random_instance(rng, disks=disks, buckets=rng.randint(1, 80), kind=kind,
                                   max_replicas=rng.choice([1, 2, 3, 4]))
        _check_all(*instance, flow_reference(*instance))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["homogeneous", "heterogeneous", "floats"])
def test_many_larger_instances_match_flow_reference(kind):
    rng = random.Random(f"flow-slow-{kind}")
    for _ in range(300):
        instance = random_instance(rng, disks=rng.randint(2, 60), buckets=rng.randint(1, 300),
                                   kind=kind)
        _check_all(*instance, flow_reference(*instance))


_times = st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0, 13.2, 6.1])


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 4).flatmap(lambda disks: st.tuples(
    st.lists(st.lists(st.integers(0, disks - 1), min_size=1, max_size=4), max_size=6),
    st.lists(st.sampled_from([0.5, 1.0, 2.0, 6.1, 13.2]), min_size=disks, max_size=disks),
    st.lists(_times, min_size=disks, max_size=disks),
    st.lists(_times, min_size=disks, max_size=disks))))
def test_hypothesis_instances_match_brute_force(instance):
    _check_all(*instance, brute_force(*instance))


@pytest.mark.parametrize("kind", ["homogeneous", "heterogeneous", "floats"])
def test_paper_sized_requests_agree(kind):
    # S in the thousands exercises the gap/global relabelling, the thread pool and the
    # saturated-set jumps far more than the small instances; the algorithms check each other
    rng = random.Random(f"big-{kind}")
    for _ in range(3):
        request, cost, delay, load = random_instance(rng, disks=100, buckets=3000, kind=kind)
        optima = set()
        for algorithm, threads in RUNS + [("parallel", 4)]:
            selection = select_replicas(request, cost, delay, load, algorithm=algorithm,
                                        threads=threads)
            assert all(disk in replicas for disk, replicas in zip(selection.assignment, request))
            assert float(response_time(selection.assignment, cost, delay, load)) \
                == selection.response_time
            optima.add(selection.response_time)
        assert len(optima) == 1, (kind, optima)
