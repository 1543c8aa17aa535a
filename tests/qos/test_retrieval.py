"""Retrieval: the paper's worked examples, the (c-1)M^2 + cM guarantee, the solver's optimum."""

import random
from itertools import combinations, product

import pytest
from hypothesis import given, settings, strategies as st

from scratchkeeper.errors import QosError
from scratchkeeper.qos.designs import NAMED, PAPER_9_3_1
from scratchkeeper.qos.placement import design_allocation
from scratchkeeper.qos.retrieval import OnlineRetrieval, design_theoretic_retrieval, optimal_retrieval

ALLOCATIONS = {key: design_allocation(design) for key, design in NAMED.items()}


def test_table_1_period_t3_is_remapped_as_in_figure_5():
    # Initial mapping to first copies needs 2 accesses (devices 0 and 1 twice); the paper
    # remaps (1,3,8) to device 3 and (0,1,2) to device 2.
    requests = [(1, 4, 7), (1, 3, 8), (0, 5, 7), (0, 1, 2)]
    retrieval = design_theoretic_retrieval(requests, 9)
    assert retrieval == type(retrieval)((1, 3, 0, 2), 1)


def test_figure_3_nine_buckets_in_one_access():
    requests = [(0, 1, 2), (1, 2, 0), (2, 0, 1), (3, 8, 1), (4, 8, 0), (5, 7, 0), (6, 0, 3),
                (7, 0, 5), (8, 1, 3)]
    retrieval = design_theoretic_retrieval(requests, 9)
    assert retrieval.accesses == 1
    assert sorted(retrieval.devices) == list(range(9))
    for copies, device in zip(requests, retrieval.devices):
        assert device in copies


def test_remapping_needs_a_path_of_two_moves():
    # b0, b1 fill devices 0 and 1; b2 can only go to 0 or 1: b0 moves to 3, b2 takes 0.
    retrieval = design_theoretic_retrieval([(0, 3), (1, 2), (0, 1)], 4)
    assert retrieval.accesses == 1 and retrieval.devices == (3, 1, 0)
    # a chain: b2 takes 0, b0 moves to 1, b1 moves to 2
    retrieval = design_theoretic_retrieval([(0, 1), (1, 2), (0,)], 3)
    assert retrieval.devices == (1, 2, 0) and retrieval.accesses == 1


def test_guarantee_exhaustive_7_3_1_one_access():
    """Every 5 distinct buckets of (7,3,1) with rotations are read in 1 access; some 6 are not."""
    replicas = ALLOCATIONS[7, 3].replicas
    assert len(replicas) == 21
    for chosen in combinations(range(21), 5):
        assert design_theoretic_retrieval([replicas[b] for b in chosen], 7).accesses == 1, chosen
    assert any(design_theoretic_retrieval([replicas[b] for b in chosen], 7).accesses == 2
               for chosen in combinations(range(21), 6))


def test_guarantee_exhaustive_9_3_1_two_accesses_without_rotations():
    """The 12 blocks plus a rotation of any two of them (14 distinct buckets, S for M = 2):
    always 2 accesses."""
    blocks = PAPER_9_3_1.blocks
    for twice in combinations(range(12), 2):
        requests = list(blocks) + [blocks[t][1:] + blocks[t][:1] for t in twice]
        assert design_theoretic_retrieval(requests, 9).accesses <= 2


@settings(deadline=None)
@given(key=st.sampled_from(sorted(ALLOCATIONS)), accesses=st.integers(1, 3),
       seed=st.integers(0, 2 ** 32 - 1))
def test_guarantee_by_sampling(key, accesses, seed):
    allocation = ALLOCATIONS[key]
    size = min(NAMED[key].guarantee(accesses), allocation.buckets)
    chosen = random.Random(seed).sample(range(allocation.buckets), size)
    replicas = [allocation.replicas[b] for b in chosen]
    retrieval = design_theoretic_retrieval(replicas, allocation.devices)
    assert retrieval.accesses <= accesses
    optimum, response = optimal_retrieval(replicas, allocation.devices)
    assert optimum.accesses <= accesses and response == optimum.accesses


@settings(deadline=None)
@given(size=st.integers(1, 40), seed=st.integers(0, 2 ** 32 - 1))
def test_design_theoretic_matches_the_solver(size, seed):
    rng = random.Random(seed)
    allocation = ALLOCATIONS[9, 3]
    replicas = [allocation.replicas[rng.randrange(36)] for _ in range(size)]
    retrieval = design_theoretic_retrieval(replicas, 9)
    optimum, _ = optimal_retrieval(replicas, 9)
    assert retrieval.accesses == optimum.accesses
    loads = [retrieval.devices.count(d) for d in range(9)]
    assert max(loads) == retrieval.accesses
    for copies, device in zip(replicas, retrieval.devices):
        assert device in copies


def test_optimal_retrieval_with_backlog_and_speeds_by_brute_force():
    rng = random.Random(7)
    for _ in range(50):
        replicas = [tuple(rng.sample(range(4), 2)) for _ in range(5)]
        service = [rng.choice([1.0, 2.0, 3.0]) for _ in range(4)]
        backlog = [rng.choice([0.0, 1.0, 2.5]) for _ in range(4)]
        best = min(max((backlog[d] + choice.count(d) * service[d]) for d in set(choice))
                   for choice in product(*replicas))
        _, response = optimal_retrieval(replicas, 4, service, backlog)
        assert response == pytest.approx(best)


def test_online_picks_the_earliest_finish():
    online = OnlineRetrieval(3, [1.0, 1.0, 5.0])
    assert online.serve(0.0, [(0, 1)])[0].device == 0
    # device 0 busy until 1.0, device 1 idle: the idle one
    second = online.serve(0.5, [(0, 1)])[0]
    assert (second.device, second.start, second.finish) == (1, 0.5, 1.5)
    # both busy; 0 frees first. Device 2 is idle but slow (finishes at 5.6 > 2.0)
    third = online.serve(0.6, [(0, 2)])[0]
    assert (third.device, third.start, third.finish) == (0, 1.0, 2.0)


def test_online_batch_is_the_optimum_for_the_backlog():
    online = OnlineRetrieval(9, 1.0)
    online.serve(0.0, [(0, 1, 2)])
    served = online.serve(0.0, [(0, 3, 6), (0, 4, 8), (0, 5, 7)])
    assert max(s.finish for s in served) == 1.0
    assert 0 not in [s.device for s in served]


def test_theorem_1_online_no_later_than_interval_retrieval():
    """Requests arriving in [0, T) with no backlog: when online needs as many accesses as the
    design-theoretic retrieval at T, it ends no later."""
    rng = random.Random(3)
    allocation = ALLOCATIONS[9, 3]
    compared = 0
    for _ in range(500):
        size = rng.randint(1, 14)
        arrivals = sorted(rng.uniform(0, 1.0) for _ in range(size))
        replicas = [allocation.replicas[b] for b in rng.sample(range(36), size)]
        online = OnlineRetrieval(9, 1.0)
        served = [online.serve(t, [r])[0] for t, r in zip(arrivals, replicas)]
        online_accesses = max([s.device for s in served].count(d) for d in range(9))
        interval = design_theoretic_retrieval(replicas, 9)
        if online_accesses == interval.accesses:
            compared += 1
            assert max(s.finish for s in served) <= 1.0 + interval.accesses
    assert compared > 100


def test_bad_requests():
    with pytest.raises(QosError, match="request 1: device 9 out of range"):
        design_theoretic_retrieval([(0, 1), (2, 9)], 9)
    with pytest.raises(QosError, match="request 0: bucket has no copy"):
        design_theoretic_retrieval([()], 9)
    with pytest.raises(QosError, match="device 1 must be > 0"):
        OnlineRetrieval(2, [1.0, 0.0])
    assert design_theoretic_retrieval([], 9).accesses == 0
