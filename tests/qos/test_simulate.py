"""The request simulator: admission delays, guarantee checks, the single-copy baseline."""

from scratchkeeper.qos.admission import DeterministicAdmission
from scratchkeeper.qos.designs import PAPER_9_3_1
from scratchkeeper.qos.placement import DataBlockMap, chained_allocation, design_allocation
from scratchkeeper.qos.simulate import replay_interval, replay_online, replay_single_copy, run_intervals
from scratchkeeper.qos.traces import BlockRequest

ALLOCATION = design_allocation(PAPER_9_3_1)
MAP = DataBlockMap(ALLOCATION)


def at(time, *blocks):
    return [BlockRequest(time, b, 0, b) for b in blocks]


def test_single_copy_queues_on_one_device():
    outcomes = replay_single_copy(at(0.0, 0, 9) + at(0.5, 1), 9, 1.0, lambda r: r.data_block % 9)
    assert [(o.device, o.finish) for o in outcomes] == [(0, 1.0), (0, 2.0), (1, 1.5)]


def test_online_deterministic_delays_beyond_five():
    replay = replay_online(at(0.0, *range(7)), ALLOCATION, MAP, 1.0, 1.0, DeterministicAdmission(3, 1))
    assert [(o.admitted, o.finish) for o in replay.outcomes] == [(0.0, 1.0)] * 5 + [(1.0, 2.0)] * 2
    counters = replay.counters
    assert (counters.admitted, counters.delayed, counters.violations, replay.late_requests) == (7, 2, 0, 0)


def test_online_counts_a_violation_when_blocks_share_a_bucket():
    # data blocks 0, 36, 72, 108 all map to bucket 0 (devices 0, 1, 2): 4 reads, 3 devices
    replay = replay_online(at(0.0, 0, 36, 72, 108), ALLOCATION, MAP, 1.0, 1.0, DeterministicAdmission(3, 1))
    assert replay.late_requests == 1 and replay.counters.violations == 1
    assert max(o.finish for o in replay.outcomes) == 2.0


def test_online_without_policy_admits_everything():
    replay = replay_online(at(0.0, *range(12)), ALLOCATION, MAP, 1.0, 1.0, None)
    assert replay.counters.delayed == 0 and all(o.admitted == 0.0 for o in replay.outcomes)


def test_online_with_a_map_per_request():
    # requests after t = 1 use a map that sends block 0 to bucket 10 = (3, 4, 5)
    later = DataBlockMap(ALLOCATION, {0: 10})
    replay = replay_online(at(0.0, 0) + at(1.5, 0), ALLOCATION,
                           lambda r: MAP if r.arrival < 1 else later, 1.0, 1.0, None)
    assert replay.outcomes[0].device in (0, 1, 2) and replay.outcomes[1].device in (3, 4, 5)


def test_interval_retrieval_waits_for_the_next_interval():
    replay = replay_interval(at(0.3, 0, 1) + at(2.5, 2), ALLOCATION, MAP, 1.0, 1.0,
                             DeterministicAdmission(3, 1))
    assert [(o.admitted, o.finish) for o in replay.outcomes] == [(1.0, 2.0), (1.0, 2.0), (3.0, 4.0)]
    assert replay.outcomes[0].delay == 0.7 and replay.late_requests == 0


def test_run_intervals_guarantee_holds_on_the_design_not_on_chained():
    buckets = [[0, 1, 2, 3, 4]] * 3
    design = run_intervals(design_allocation(PAPER_9_3_1), buckets, 1.0, 1.0, "design")
    assert max(o.response for o in design) == 1.0
    chained = run_intervals(chained_allocation(9, 3, 36), [[0, 9, 18, 27, 1]], 1.0, 1.0, "optimal")
    # buckets 0, 9, 18, 27 are all on devices 0, 1, 2: 4 reads on 3 devices
    assert max(o.response for o in chained) == 2.0
