"""The hotness table: multi-hash counters, decay, thresholds, up and down moves (the SUORA paper)."""

from __future__ import annotations

import pytest

from scratchkeeper.errors import PlacementInputError
from scratchkeeper.placement.hotness import COUNTER_MAX, HotnessTable, Move, ReadCounters


def test_counters_count_reads_and_decay():
    counters = ReadCounters(width=1 << 16, hashes=4)
    for _ in range(5):
        counters.record(42)
    counters.record(7, reads=3)
    assert counters.hotness(42) == 5 and counters.hotness(7) == 3
    assert counters.hotness(99) == 0
    counters.decay()
    assert counters.hotness(42) == 2 and counters.hotness(7) == 1
    counters.decrease(42, 5)
    assert counters.hotness(42) == 0


def test_collisions_only_make_an_object_hotter():
    # one counter for everything: every object shows the reads of all
    counters = ReadCounters(width=1, hashes=3)
    counters.record(1, 2)
    counters.record(2, 3)
    assert counters.hotness(1) == counters.hotness(2) == 5
    assert counters.average(1) == 5.0


def test_counters_saturate():
    counters = ReadCounters(width=8, hashes=2)
    counters.record(1, COUNTER_MAX)
    counters.record(1, 10)
    assert counters.hotness(1) == COUNTER_MAX


def test_bucket_for_thresholds():
    # the Sheepdog setting of the SUORA paper's §4.4: thresholds {0, 1, 30}
    table = HotnessTable((0, 1, 30), (100, 100, 100))
    assert [table.bucket_for(h) for h in (0, 1, 29, 30, 500)] == [0, 1, 1, 2, 2]


def _table(thresholds=(0, 3, 10), capacities=(1000, 1000, 1000), **kwargs):
    return HotnessTable(thresholds, capacities, width=1 << 16, **kwargs)


def test_hot_objects_move_up_hottest_first_within_budget():
    table = _table()
    for object_id, reads in ((1, 12), (2, 4), (3, 1)):
        table.track(object_id, [0], 10)
        table.record(object_id, reads)
    moves = table.moves(budget=10)
    assert moves == [Move(1, 0, 2, 10, 12), Move(2, 0, 1, 10, 4)]
    assert moves[0].direction == "up"
    assert table.moves(budget=1) == [Move(1, 0, 2, 10, 12)]
    assert table.moves(budget=0) == []


def test_no_move_when_the_target_bucket_holds_a_replica():
    table = _table()
    table.track(1, [0, 2], 10)
    table.record(1, 50)
    assert table.moves(10) == []


def test_replicas_move_up_as_in_section_3_6():
    # three replicas on five buckets: first the copy on b2 goes to b3, then the one on b1 to b4
    table = _table(thresholds=(0, 0, 0, 5, 20), capacities=(1e6,) * 5, home_buckets=3)
    table.track(9, [0, 1, 2], 100)
    table.record(9, 6)
    first = table.moves(5)
    assert first == [Move(9, 2, 3, 100, 6)]
    table.commit(first[0])
    assert table.replicas(9) == {0, 1, 3}
    table.record(9, 20)
    second = table.moves(5)
    assert second == [Move(9, 1, 4, 100, 26)]
    table.commit(second[0])
    assert table.replicas(9) == {0, 3, 4}
    assert table.used(4) == 100 and table.used(1) == 0


def test_cold_replicas_leave_a_full_bucket_down_to_the_lower_watermark():
    table = _table(thresholds=(0, 2, 10), capacities=(10_000, 100, 100),
                   upper_watermark=0.9, lower_watermark=0.5)
    for object_id in range(10):  # bucket 1 at 100 %
        table.track(object_id, [1], 10)
        table.record(object_id, object_id + 2)
    moves = table.moves(budget=20)
    # the five coldest (fewest reads) go down to bucket 0 first, leaving 50 %; then objects 8
    # and 9 (hotness 10 and 11 >= v_2) go up to bucket 2, which has room, hottest first
    assert [(m.object_id, m.source, m.target) for m in moves] == (
        [(i, 1, 0) for i in range(5)] + [(9, 1, 2), (8, 1, 2)])
    assert [m.direction for m in moves] == ["down"] * 5 + ["up"] * 2


def test_a_cold_move_lowers_the_counters_by_the_destination_threshold():
    table = _table(thresholds=(0, 4, 10), capacities=(1000, 1000, 10))
    table.track(5, [2], 10)  # bucket 2 at 100 % of 10
    table.record(5, 12)
    (move,) = table.moves(3)
    assert (move.source, move.target) == (2, 1)
    table.commit(move)
    assert table.hotness(5) == 8  # 12 - v_1
    assert table.replicas(5) == {1}


def test_moves_do_not_fill_a_bucket_past_the_upper_watermark():
    table = _table(thresholds=(0, 1), capacities=(1000, 100), upper_watermark=0.5,
                   lower_watermark=0.4)
    for object_id in range(10):
        table.track(object_id, [0], 20)
        table.record(object_id, 5 + object_id)
    moves = table.moves(10)
    # 50 bytes of room in bucket 1: two objects of 20, the hottest
    assert [m.object_id for m in moves] == [9, 8]


def test_commit_checks_the_move():
    table = _table()
    table.track(1, [0], 10)
    with pytest.raises(PlacementInputError, match="no replica on bucket 1"):
        table.commit(Move(1, 1, 2, 10, 0))


@pytest.mark.parametrize("thresholds,capacities,message", [
    ((1, 2), (1, 1), "start with v_0 = 0"),
    ((0, 5, 3), (1, 1, 1), "non-decreasing"),
    ((0, 1), (1,), "2 thresholds but 1"),
    ((0, 1), (1, 0), "capacities must be > 0"),
])
def test_bad_settings_are_refused(thresholds, capacities, message):
    with pytest.raises(PlacementInputError, match=message):
        HotnessTable(thresholds, capacities)


def test_bad_watermarks_and_tracking_are_refused():
    with pytest.raises(PlacementInputError, match="watermarks"):
        HotnessTable((0, 1), (1, 1), upper_watermark=0.5, lower_watermark=0.6)
    table = _table()
    with pytest.raises(PlacementInputError, match="not in 0..2"):
        table.track(1, [3], 10)
    with pytest.raises(PlacementInputError, match="budget"):
        table.moves(-1)


def test_decay_by_other_factors_and_bad_counter_settings():
    counters = ReadCounters(width=1 << 12, hashes=2)
    counters.record(3, 10)
    counters.decay(0.25)
    assert counters.hotness(3) == 2
    counters.decay(0)
    assert counters.hotness(3) == 0
    with pytest.raises(PlacementInputError, match="decay factor"):
        counters.decay(1.5)
    with pytest.raises(PlacementInputError, match="width"):
        ReadCounters(width=0)
    with pytest.raises(PlacementInputError, match="hashes"):
        ReadCounters(hashes=0)
