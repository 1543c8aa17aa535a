"""SUORA placement: segments (eq. 1), determinism, shares, replicas, skipped targets, movement."""

from __future__ import annotations

import random
from array import array
from collections import Counter

import pytest

from scratchkeeper.errors import PlacementError, PlacementInputError
from scratchkeeper.placement import suora
from scratchkeeper.placement.suora import PlacementMap, Segment, TargetState, levels_for

OBJECTS = array("Q", range(200_000))


def _counts(placement: PlacementMap, objects=OBJECTS) -> Counter:
    return Counter(placement.targets[d].index for d in placement.place_dense(objects))


def _indices(placement: PlacementMap, objects=OBJECTS) -> list[int]:
    return [placement.targets[d].index for d in placement.place_dense(objects)]


def test_segments_of_table_2():
    # the SUORA paper's Table 2: p = 1 TB in b0 and 0.6 TB in b1
    placement = PlacementMap.build([("b0", [(0, 1.0), (1, 1.5), (2, 0.8)]),
                                    ("b1", [(3, 0.6), (4, 0.3), (5, 0.8)])], units=[1.0, 0.6])
    segments = {t.index: t.segments for t in placement.targets}
    assert segments[0] == (Segment(0, 1.0),)
    assert segments[1] == (Segment(1, 1.0), Segment(2, 0.5))
    assert segments[2] == (Segment(3, 0.8),)
    assert segments[3] == (Segment(0, 1.0),)
    assert segments[4] == (Segment(1, 0.5),)
    assert segments[5][0] == Segment(2, 1.0)
    assert segments[5][1].slot == 3 and segments[5][1].length == pytest.approx(1 / 3)


def test_default_unit_is_the_mean_capacity():
    placement = PlacementMap.build([("disk", [(0, 2.0), (1, 4.0), (2, 6.0)])])
    assert placement.buckets[0].unit == 4.0
    assert [t.share for t in placement.targets] == [0.5, 1.0, 1.5]


@pytest.mark.parametrize("slots,levels", [(0, 0), (1, 0), (2, 1), (3, 2), (16, 4), (17, 5),
                                          (100_000, 17)])
def test_levels_cover_the_line(slots, levels):
    assert levels_for(slots) == levels


def test_placement_is_deterministic_and_seeded():
    pools = [("disk", [(i, 1.0 + i % 3) for i in range(30)])]
    first, again = PlacementMap.build(pools), PlacementMap.build(pools)
    other_seed = PlacementMap.build(pools, seed=7)
    assert [first.place(x, 2) for x in range(500)] == [again.place(x, 2) for x in range(500)]
    assert _indices(first) == _indices(again)
    differing = sum(first.place(x) != other_seed.place(x) for x in range(500))
    assert differing > 400  # 29 of 30 expected to differ


def test_native_and_python_place_alike():
    pytest.importorskip("scratchkeeper.placement._native")
    rng = random.Random(3)
    for _ in range(20):
        pools, index = [], 0
        for bucket in range(rng.randint(1, 4)):
            count = rng.choice([1, 2, 3, 7, 40, 300])
            pools.append((f"p{bucket}", [(index + i, rng.choice([0.3, 1, 2, 5]))
                                         for i in range(count)]))
            index += count
        placement = PlacementMap.build(pools, seed=rng.randrange(2 ** 64))
        for target in rng.sample(range(index), max(0, min(index - 4, rng.randint(0, index // 2)))):
            placement = placement.with_state(target, rng.choice([TargetState.FULL,
                                                                 TargetState.FAILED]))
        for _ in range(200):
            object_id = rng.randrange(2 ** 64)
            replicas = rng.randint(1, min(4, sum(placement._eligible)))
            first = rng.randrange(len(placement.buckets))
            native = placement.place(object_id, replicas, first)
            python = tuple(placement.targets[d].index
                           for d in suora._place_python(placement, object_id, replicas, first))
            assert native == python


def test_shares_follow_capacity():
    capacities = {0: 1.0, 1: 2.0, 2: 3.0, 3: 4.0, 4: 0.25, 5: 7.5}
    placement = PlacementMap.build([("disk", list(capacities.items()))])
    counts = _counts(placement)
    total = sum(capacities.values())
    for index, capacity in capacities.items():
        expected = len(OBJECTS) * capacity / total
        assert counts[index] == pytest.approx(expected, rel=0.04)


def test_homogeneous_pool_is_uniform():
    placement = PlacementMap.build([("disk", [(i, 1.0) for i in range(100)])])
    counts = _counts(placement)
    # 2,000 objects per target: max/mean of a fair multinomial is about 1 + 3.3 / sqrt(2000)
    assert max(counts.values()) / (len(OBJECTS) / 100) < 1.1


def test_replicas_on_consecutive_buckets_and_distinct():
    placement = PlacementMap.build([("hdd", [(i, 1.0) for i in range(5)]),
                                    ("ssd", [(10 + i, 1.0) for i in range(4)]),
                                    ("nvme", [(20 + i, 1.0) for i in range(3)])])
    bucket_of = {t.index: t.bucket for t in placement.targets}
    for x in range(300):
        assert [bucket_of[t] for t in placement.place(x, 3)] == [0, 1, 2]
        assert [bucket_of[t] for t in placement.place(x, 3, first_bucket=1)] == [1, 2, 0]
        wrapped = placement.place(x, 5)
        assert [bucket_of[t] for t in wrapped] == [0, 1, 2, 0, 1]
        assert len(set(wrapped)) == 5
        # the same sequence R in every bucket: replica 0 of an object started in bucket 1 is
        # where the object's replica 1 went, and place_in() says the same
        assert placement.place(x, 3)[1] == placement.place(x, 1, first_bucket=1)[0]
        assert placement.place_in(x, 2) == placement.place(x, 3)[2]


def test_replicas_in_one_bucket_are_distinct():
    placement = PlacementMap.build([("disk", [(i, 1.0) for i in range(4)])])
    for x in range(500):
        assert sorted(placement.place(x, 4)) == [0, 1, 2, 3]
        assert len(set(placement.place(x, 3))) == 3


def test_failed_and_full_targets_are_skipped_and_nothing_else_moves():
    placement = PlacementMap.build([("disk", [(i, 1.0) for i in range(10)])])
    before = _indices(placement)
    degraded = placement.with_state(3, TargetState.FAILED).with_state(7, TargetState.FULL)
    after = _indices(degraded)
    assert 3 not in after and 7 not in after
    for old, new in zip(before, after):
        assert old == new or old in (3, 7)
    for x in range(200):
        assert not {3, 7} & set(degraded.place(x, 8))


def test_bucket_with_nothing_eligible_is_passed_over():
    placement = PlacementMap.build([("hdd", [(0, 1.0), (1, 1.0)]), ("ssd", [(2, 1.0)]),
                                    ("nvme", [(3, 1.0), (4, 1.0)])])
    placement = placement.with_state(2, TargetState.FAILED)
    for x in range(100):
        first, second = placement.place(x, 2)
        assert first in (0, 1) and second in (3, 4)


def test_too_few_eligible_targets():
    placement = PlacementMap.build([("disk", [(0, 1.0), (1, 1.0), (2, 1.0)])])
    placement = placement.with_state(1, TargetState.FAILED)
    assert len(set(placement.place(5, 2))) == 2
    with pytest.raises(PlacementError, match="3 replicas asked, 2 eligible"):
        placement.place(5, 3)
    with pytest.raises(PlacementError):
        placement.place_dense(array("Q", [1, 2]), 3)


def _moved(before: list[int], after: list[int]) -> list[tuple[int, int]]:
    return [(old, new) for old, new in zip(before, after) if old != new]


@pytest.mark.parametrize("count", [16, 37, 100])
@pytest.mark.parametrize("added", [1, 10])
def test_adding_targets_moves_only_onto_them(count, added):
    placement = PlacementMap.build([("disk", [(i, 1.0) for i in range(count)])])
    before = _indices(placement)
    grown = placement
    for k in range(added):
        grown = grown.add_target(0, 1000 + k, 1.0)
    moved = _moved(before, _indices(grown))
    assert all(new >= 1000 for _, new in moved)
    # the minimum: the new targets' share of the objects
    assert len(moved) == pytest.approx(len(OBJECTS) * added / (count + added), rel=0.06)


@pytest.mark.parametrize("removed", [1, 10])
def test_removing_targets_moves_only_their_objects(removed):
    placement = PlacementMap.build([("disk", [(i, 1.0 + i % 2) for i in range(40)])])
    before = _indices(placement)
    shrunk = placement
    for index in range(removed):
        shrunk = shrunk.remove_target(index * 3)
    gone = {index * 3 for index in range(removed)}
    moved = _moved(before, _indices(shrunk))
    assert {old for old, _ in moved} == gone
    assert len(moved) == sum(1 for old in before if old in gone)


def test_added_target_takes_a_removed_targets_slot():
    placement = PlacementMap.build([("disk", [(i, 1.0) for i in range(5)])])
    replaced = placement.remove_target(2).add_target(0, 9, 1.0)
    assert replaced.target(9).segments == (Segment(2, 1.0),)
    # the replacement takes exactly the removed target's objects
    assert [9 if t == 2 else t for t in _indices(placement)] == _indices(replaced)


def test_larger_target_gets_consecutive_free_slots():
    placement = PlacementMap.build([("disk", [(i, 1.0) for i in range(4)])])
    grown = placement.remove_target(1).add_target(0, 7, 2.5)
    # slot 1 alone is too short for 3 pieces: the first run of 3 free slots is 4, 5, 6
    assert [s.slot for s in grown.target(7).segments] == [4, 5, 6]
    assert grown.target(7).share == pytest.approx(2.5)


def test_bad_maps_are_refused():
    with pytest.raises(PlacementInputError, match="target 1: capacity must be > 0"):
        PlacementMap.build([("disk", [(0, 1.0), (1, 0.0)])])
    with pytest.raises(PlacementInputError, match="index negative or repeated"):
        PlacementMap.build([("disk", [(0, 1.0), (0, 1.0)])])
    with pytest.raises(PlacementInputError, match="bucket names repeat"):
        PlacementMap.build([("disk", [(0, 1.0)]), ("disk", [(1, 1.0)])])
    placement = PlacementMap.build([("disk", [(0, 1.0)])])
    with pytest.raises(PlacementInputError, match="already in the placement map"):
        placement.add_target(0, 0, 1.0)
    with pytest.raises(PlacementInputError, match="not in the placement map"):
        placement.remove_target(5)
    with pytest.raises(PlacementInputError, match="replicas must be >= 1"):
        placement.place(1, 0)
    with pytest.raises(PlacementInputError, match="first bucket 1 out of range"):
        placement.place(1, 1, first_bucket=1)


def test_map_of_a_sites_tiered_pools():
    from scratchkeeper.config import parse_config

    storage = parse_config('[storage]\nost_count = 8\ntier_order = ["flash", "disk"]\n'
                           '[storage.pools]\nssd = "0-1"\nhdd = "2-5"\nmore = "5-7"\n'
                           '[storage.pool_tiers]\nssd = "flash"\nhdd = "disk"\nmore = "disk"\n',
                           "site.toml").storage
    capacities = {i: (1e12 if i < 2 else 4e12) for i in range(8)}
    placement = PlacementMap.for_tiers(storage, capacities)
    assert [b.name for b in placement.buckets] == ["disk", "flash"]
    assert [(t.index, t.bucket) for t in placement.targets] == (
        [(i, 0) for i in range(2, 8)] + [(0, 1), (1, 1)])
    first, second = placement.place(11, 2)
    assert 2 <= first <= 7 and second in (0, 1)
    with pytest.raises(PlacementInputError, match=r"class disk: no capacity for OSTs \[7\]"):
        PlacementMap.for_tiers(storage, dict.fromkeys(range(7), 1.0))


def test_a_failed_target_is_replaced_and_the_other_replicas_stay():
    rng = random.Random(11)
    for _ in range(30):
        pools, index = [], 0
        for bucket in range(rng.randint(1, 3)):
            count = rng.choice([1, 2, 3, 6])
            pools.append((f"p{bucket}", [(index + i, rng.choice([0.5, 1, 3]))
                                         for i in range(count)]))
            index += count
        if index < 2:
            continue
        placement = PlacementMap.build(pools, seed=rng.randrange(2 ** 64))
        replicas = rng.randint(1, index - 1)
        lost = rng.randrange(index)
        degraded = placement.with_state(lost, TargetState.FAILED)
        bucket_of = {t.index: t.bucket for t in placement.targets}
        for object_id in range(100):
            before = placement.place(object_id, replicas)
            after = degraded.place(object_id, replicas)
            if lost not in before:
                assert after == before
                continue
            kept = set(before) - {lost}
            assert kept <= set(after) and lost not in after
            (replacement,) = set(after) - kept
            left_in_bucket = [t.index for t in degraded.targets
                              if t.bucket == bucket_of[lost] and t.eligible and t.index not in kept]
            if left_in_bucket:
                assert bucket_of[replacement] == bucket_of[lost]


def test_place_distinct_gives_distinct_targets_in_r_order():
    placement = PlacementMap.build([("disk", [(i, 1.0) for i in range(10)]),
                                    ("flash", [(20, 1.0), (21, 1.0)])])
    for object_id in range(200):
        picked = placement.place_distinct(object_id, 0, 4, exclude=(3,))
        assert len(set(picked)) == 4 and 3 not in picked and max(picked) < 10
        assert picked[0] == placement.place_in(object_id, 0, exclude=(3,))
        assert picked[1] == placement.place_in(object_id, 0, exclude=(3, picked[0]))
    assert set(placement.place_distinct(7, 1, 2)) == {20, 21}
    with pytest.raises(PlacementError):
        placement.place_distinct(7, 1, 3)
    with pytest.raises(PlacementInputError):
        placement.place_distinct(7, 0, 0)
