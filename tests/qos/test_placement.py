"""Allocation schemes: the rows of the paper's Figure 7."""

import pytest

from scratchkeeper.errors import QosError
from scratchkeeper.qos.designs import PAPER_9_3_1
from scratchkeeper.qos.placement import (
    Allocation,
    DataBlockMap,
    chained_allocation,
    design_allocation,
    mirrored_allocation,
)


def test_design_allocation_figure_7():
    allocation = design_allocation(PAPER_9_3_1)
    assert allocation.buckets == 36
    assert allocation.replicas[:12] == PAPER_9_3_1.blocks
    assert allocation.buckets_on(0)[:4] == [0, 1, 2, 3]
    assert design_allocation(PAPER_9_3_1, rotations=False).buckets == 12


def test_mirrored_allocation_figure_7():
    allocation = mirrored_allocation(9, 3, 36)
    assert allocation.replicas[:3] == ((0, 1, 2), (3, 4, 5), (6, 7, 8))
    # b3 is on b0's group again, its first copy rotated
    assert sorted(allocation.replicas[3]) == [0, 1, 2] and allocation.replicas[3][0] == 1
    assert allocation.buckets_on(0) == list(range(0, 36, 3))
    with pytest.raises(QosError, match="do not split into groups of 3"):
        mirrored_allocation(10, 3, 36)


def test_chained_allocation_figure_7():
    allocation = chained_allocation(9, 3, 36)
    assert allocation.replicas[0] == (0, 1, 2)
    assert allocation.replicas[7] == (7, 8, 0)
    assert allocation.replicas[9] == (0, 1, 2)
    assert allocation.buckets_on(0)[:4] == [0, 7, 8, 9]


def test_allocation_checks_copies():
    with pytest.raises(QosError, match="bucket 1 has copies"):
        Allocation("x", 4, 2, ((0, 1), (2, 2)))
    with pytest.raises(QosError, match="device out of range"):
        Allocation("x", 4, 2, ((0, 4),))


def test_data_block_map_defaults_to_modulo():
    mapping = DataBlockMap(design_allocation(PAPER_9_3_1), {100: 5})
    assert mapping.bucket_of(37) == 1
    assert mapping.bucket_of(100) == 5
    assert mapping.devices_of(100) == (1, 4, 7)
