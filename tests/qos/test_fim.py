"""Frequent itemset mining on a hand trace, and the mapping that puts mined pairs apart."""

import pytest

from scratchkeeper.errors import QosError
from scratchkeeper.qos.designs import PAPER_9_3_1
from scratchkeeper.qos.fim import fim_block_map, frequent_pairs, transactions
from scratchkeeper.qos.placement import DataBlockMap, design_allocation
from scratchkeeper.qos.retrieval import design_theoretic_retrieval

TRACE = [(0.1, 1), (0.2, 2), (0.3, 3), (1.1, 1), (1.5, 2), (2.0, 1), (2.4, 3), (2.5, 9), (3.2, 4)]


def test_transactions_by_window():
    assert transactions(TRACE, 1.0) == [frozenset({1, 2, 3}), frozenset({1, 2}),
                                        frozenset({1, 3, 9}), frozenset({4})]
    assert transactions(TRACE, 10.0) == [frozenset({1, 2, 3, 4, 9})]
    with pytest.raises(QosError, match="window must be > 0"):
        transactions(TRACE, 0)


def test_frequent_pairs_hand_counted():
    baskets = transactions(TRACE, 1.0)
    assert frequent_pairs(baskets, 2) == {(1, 2): 2, (1, 3): 2}
    assert frequent_pairs(baskets, 1) == {(1, 2): 2, (1, 3): 2, (2, 3): 1, (1, 9): 1, (3, 9): 1}
    assert frequent_pairs(baskets, 3) == {}
    with pytest.raises(QosError, match="min_support must be >= 1"):
        frequent_pairs(baskets, 0)


def test_mined_pairs_go_to_buckets_without_a_common_device():
    allocation = design_allocation(PAPER_9_3_1)
    mapping = fim_block_map(allocation, {(1, 2): 2, (1, 3): 2})
    # block 1 (support 4) first, bucket 0 = (0,1,2); blocks 2 and 3 each take a block disjoint
    # from it: (3,4,5) is bucket 10, (6,7,8) bucket 11 (10 already holds one mined block)
    assert mapping.assigned == {1: 0, 2: 10, 3: 11}
    assert mapping.bucket_of(4) == 4   # not mined: block % 36
    # without mining, blocks 1, 2, 3 sit on (0,3,6), (0,4,8), (0,5,7): device 0 in common
    plain = DataBlockMap(allocation)
    for window in transactions(TRACE, 1.0):
        blocks = sorted(window)
        mined = design_theoretic_retrieval([mapping.devices_of(b) for b in blocks], 9)
        unmined = design_theoretic_retrieval([plain.devices_of(b) for b in blocks], 9)
        assert mined.accesses <= unmined.accesses
    assert set(mapping.devices_of(1)).isdisjoint(mapping.devices_of(2))
    assert set(mapping.devices_of(1)).isdisjoint(mapping.devices_of(3))
