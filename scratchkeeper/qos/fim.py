"""Frequent itemset mining: put data blocks read together on different design blocks.

The flash QoS paper, §IV.A: an allocation has few buckets (36 for (9,3,1) with rotations) and a
store has many data blocks, so data blocks share buckets. Blocks requested within the same
window T that share a bucket, or buckets with a device in common, are read one after another;
mining the pairs of blocks requested together (Apriori, itemsets of size 2) and placing each
pair apart avoids that. Blocks the mining did not see keep ``block % buckets``.

Apriori for pairs is implemented here (two passes: frequent single blocks, then pairs of
frequent blocks counted inside each window); docs/dependencies.rst says why no library.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from itertools import combinations

from scratchkeeper.errors import QosError
from scratchkeeper.qos.placement import Allocation, DataBlockMap


def transactions(requests: Iterable[tuple[float, int]], window: float) -> list[frozenset[int]]:
    """The sets of data blocks requested within each window of length ``window``.

    ``requests`` are (arrival time, data block) pairs; windows with no request are left out.
    """
    if not window > 0 or math.isinf(window):
        raise QosError(f"frequent itemset mining: window must be > 0 and finite, got {window}")
    by_window: dict[int, set[int]] = defaultdict(set)
    for arrival, block in requests:
        by_window[math.floor(arrival / window)].add(block)
    return [frozenset(by_window[key]) for key in sorted(by_window)]


def frequent_pairs(baskets: Iterable[frozenset[int]], min_support: int = 1
                   ) -> dict[tuple[int, int], int]:
    """Apriori for itemsets of size 2: every pair of blocks in at least ``min_support`` baskets.

    Returns {(smaller block, larger block): support}. Pass 1 keeps the blocks that are frequent
    on their own (a pair cannot be more frequent than either block), pass 2 counts the pairs of
    those inside each basket.
    """
    if min_support < 1:
        raise QosError(f"frequent itemset mining: min_support must be >= 1, got {min_support}")
    baskets = list(baskets)
    singles = Counter(block for basket in baskets for block in basket)
    frequent = {block for block, support in singles.items() if support >= min_support}
    pairs: Counter[tuple[int, int]] = Counter()
    for basket in baskets:
        pairs.update(combinations(sorted(basket & frequent), 2))
    return {pair: support for pair, support in pairs.items() if support >= min_support}


def fim_block_map(allocation: Allocation, pairs: dict[tuple[int, int], int]) -> DataBlockMap:
    """Place the mined blocks so that blocks requested together share as few devices as possible.

    Blocks are placed heaviest first (total support of their pairs); each takes the bucket whose
    devices overlap least with the buckets of its already placed partners, weighted by the
    pair's support; ties go to the bucket holding fewest mined blocks, then the lowest number.
    """
    partners: dict[int, dict[int, int]] = defaultdict(dict)
    for (first, second), support in pairs.items():
        partners[first][second] = support
        partners[second][first] = support
    device_sets = [frozenset(copies) for copies in allocation.replicas]
    overlap = [[len(a & b) for b in device_sets] for a in device_sets]
    assigned: dict[int, int] = {}
    used = [0] * allocation.buckets
    order = sorted(partners, key=lambda block: (-sum(partners[block].values()), block))
    for block in order:
        conflict = [0] * allocation.buckets
        for partner, support in partners[block].items():
            bucket = assigned.get(partner)
            if bucket is not None:
                row = overlap[bucket]
                for candidate in range(allocation.buckets):
                    conflict[candidate] += support * row[candidate]
        best = min(range(allocation.buckets), key=lambda b: (conflict[b], used[b], b))
        assigned[block] = best
        used[best] += 1
    return DataBlockMap(allocation, assigned)
