"""Block designs: every construction passes an independent pair count; broken ones are refused."""

from collections import Counter
from itertools import combinations

import pytest

from scratchkeeper.errors import DesignError
from scratchkeeper.qos.designs import (
    NAMED,
    PAPER_9_3_1,
    BlockDesign,
    affine_plane,
    cyclic_design,
    design_for,
    projective_plane,
    retrieval_guarantee,
    steiner_triple_system,
)


def pair_counts(design: BlockDesign) -> Counter:
    return Counter(pair for block in design.blocks for pair in combinations(sorted(block), 2))


def assert_pairwise_balanced(design: BlockDesign) -> None:
    counts = pair_counts(design)
    assert set(counts) == set(combinations(range(design.devices), 2))
    assert set(counts.values()) == {1}
    # b = N(N-1) / (c(c-1)) blocks in a design with lambda = 1
    assert len(design.blocks) * design.copies * (design.copies - 1) == design.devices * (design.devices - 1)


@pytest.mark.parametrize("key, blocks", [((7, 3), 7), ((9, 3), 12), ((13, 3), 26)])
def test_named_designs(key, blocks):
    design = NAMED[key]
    assert (design.devices, design.copies, len(design.blocks)) == (key[0], key[1], blocks)
    assert_pairwise_balanced(design)


def test_paper_9_3_1_is_figure_2():
    columns = ["000011122236", "134534534547", "268787676858"]
    assert PAPER_9_3_1.blocks == tuple(tuple(int(row[i]) for row in columns) for i in range(12))


@pytest.mark.parametrize("devices", [7, 9, 13, 15, 19, 21, 25, 27, 31, 33, 37, 39])
def test_steiner_triple_systems(devices):
    assert_pairwise_balanced(steiner_triple_system(devices))


@pytest.mark.parametrize("q", [2, 3, 5])
def test_projective_planes(q):
    design = projective_plane(q)
    assert (design.devices, design.copies) == (q * q + q + 1, q + 1)
    assert_pairwise_balanced(design)


@pytest.mark.parametrize("q", [3, 5, 7])
def test_affine_planes(q):
    design = affine_plane(q)
    assert (design.devices, design.copies) == (q * q, q)
    assert_pairwise_balanced(design)


def test_design_for_picks_a_construction():
    assert design_for(9, 3) is PAPER_9_3_1
    assert design_for(19, 3).devices == 19
    assert design_for(13, 4).copies == 4
    assert design_for(25, 5).copies == 5
    with pytest.raises(DesignError, match=r"no \(11,3,1\) design"):
        design_for(11, 3)
    with pytest.raises(DesignError, match="N = 1 or 3"):
        steiner_triple_system(11)
    with pytest.raises(DesignError, match="q must be a prime"):
        projective_plane(4)


def test_cyclic_difference_family():
    assert_pairwise_balanced(cyclic_design(19, [(0, 1, 4), (0, 2, 9), (0, 5, 11)]))
    # {0, 1, 2} mod 7 is not a difference set: difference 1 appears twice
    with pytest.raises(DesignError, match="share more than one block"):
        cyclic_design(7, [(0, 1, 2)])


def test_broken_designs_name_the_pair():
    blocks = list(PAPER_9_3_1.blocks)
    with pytest.raises(DesignError, match=r"devices 6 and 7 share no block"):
        BlockDesign("bad", 9, 3, tuple(blocks[:-1]))
    with pytest.raises(DesignError, match=r"devices 0 and 1 share more than one block \(0 and 12\)"):
        BlockDesign("bad", 9, 3, tuple(blocks + [(0, 1, 8)]))
    with pytest.raises(DesignError, match="repeats a device"):
        BlockDesign("bad", 9, 3, ((0, 0, 1),))
    with pytest.raises(DesignError, match="device 9 out of range"):
        BlockDesign("bad", 9, 3, ((0, 1, 9),))
    with pytest.raises(DesignError, match="has 2 devices, expected 3"):
        BlockDesign("bad", 9, 3, ((0, 1),))


def test_guarantee_formula():
    # the paper's figures: c = 2 gives 3, 8, 15 and c = 3 gives 5, 14, 27 for M = 1, 2, 3
    assert [retrieval_guarantee(2, m) for m in (1, 2, 3)] == [3, 8, 15]
    assert [PAPER_9_3_1.guarantee(m) for m in (1, 2, 3)] == [5, 14, 27]
    with pytest.raises(DesignError):
        retrieval_guarantee(3, 0)


def test_rotations_spread_first_copies():
    rotations = PAPER_9_3_1.rotations()
    assert len(rotations) == 36 == 9 * 8 // 2
    assert Counter(r[0] for r in rotations) == dict.fromkeys(range(9), 4)
    assert rotations[12] == (1, 2, 0)
