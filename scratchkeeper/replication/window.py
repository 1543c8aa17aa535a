"""The replication window of the thesis's §4.5.2, shared by the daemon and the simulator.

The window is the smallest prefix of the queue, in the scheduler's priority order, whose
requested nodes sum to at least ``max(R, alpha * S)``: R is the node count of the largest running
job and S the node count of the system. Jobs requesting at most ``T * S`` nodes (the shortcut)
are replicated at once wherever they stand. ``alpha = math.inf`` puts the whole queue in the
window.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

WINDOW = "window"
SHORTCUT = "shortcut"


@dataclass(frozen=True)
class WindowParams:
    """alpha (eagerness, > 0, may be ``math.inf``) and the shortcut threshold T (0 <= T <= 1)."""

    alpha: float = 0.5
    threshold: float = 0.1

    def __post_init__(self):
        if not (self.alpha > 0):
            raise ValueError(f"alpha must be > 0, got {self.alpha!r}")
        if not (0 <= self.threshold <= 1):
            raise ValueError(f"threshold must be within [0, 1], got {self.threshold!r}")


def nodes_required(largest_running: int, system_nodes: int, alpha: float) -> float:
    """max(R, alpha * S): how many requested nodes the window must cover."""
    if math.isinf(alpha):
        return math.inf
    return max(float(largest_running), alpha * system_nodes)


def window_length(requested_nodes: Iterable[int], required: float) -> int:
    """Length of the smallest prefix whose node counts sum to at least ``required``.

    The whole queue when it never gets there; 0 when nothing is required.
    """
    if required <= 0:
        return 0
    total = 0
    length = 0
    for nodes in requested_nodes:
        length += 1
        total += nodes
        if total >= required:
            return length
    return length


def is_shortcut(nodes: int, system_nodes: int, threshold: float) -> bool:
    """A job this small is replicated at once: backfilling moves it ahead quickly."""
    return threshold > 0 and nodes <= threshold * system_nodes


def replication_targets(queue: Sequence[tuple[Hashable, int]], largest_running: int,
                        system_nodes: int, params: WindowParams) -> dict[Hashable, str]:
    """The queued jobs that should have a replica now, each with why (``window``/``shortcut``).

    ``queue`` is ``(job_id, requested_nodes)`` in the scheduler's priority order.
    """
    required = nodes_required(largest_running, system_nodes, params.alpha)
    length = window_length((nodes for _, nodes in queue), required)
    targets: dict[Hashable, str] = {job_id: WINDOW for job_id, _ in queue[:length]}
    if params.threshold > 0:
        for job_id, nodes in queue[length:]:
            if is_shortcut(nodes, system_nodes, params.threshold):
                targets[job_id] = SHORTCUT
    return targets


class RankedWindow:
    """Incremental :func:`replication_targets` for a queue whose entries have ranks fixed in advance.

    The trace replay knows every queue entry's place in the priority order before it starts
    (FCFS: the time it entered the queue; the dispatch-aware oracle: the time it was dispatched),
    so a Fenwick tree over those ranks gives the window boundary in O(log n) per decision instead
    of a walk over the queue. :meth:`advance` returns, with the same reason
    :func:`replication_targets` would give, every entry that function would now return and no
    earlier call returned; a replica once made stays, so each entry is returned at most once.
    """

    __slots__ = ("system_nodes", "params", "_tree", "_nodes", "_present", "_targeted",
                 "_unseen", "_pending_shortcuts", "_total", "_size", "_top_bit")

    def __init__(self, ranks: int, system_nodes: int, params: WindowParams):
        self.system_nodes = system_nodes
        self.params = params
        self._size = ranks
        self._tree = [0] * (ranks + 1)
        self._nodes = [0] * ranks
        self._present = bytearray(ranks)
        self._targeted = bytearray(ranks)
        self._unseen: list[int] = []            # min-heap of present, untargeted ranks
        self._pending_shortcuts: list[int] = []
        self._total = 0
        self._top_bit = 1 << max(ranks.bit_length() - 1, 0)

    def enter(self, rank: int, nodes: int) -> None:
        """Entry ``rank`` (requesting ``nodes``) joins the queue."""
        if self._present[rank]:
            raise ValueError(f"rank {rank} is already in the queue")
        self._present[rank] = 1
        self._nodes[rank] = nodes
        self._total += nodes
        i = rank + 1
        tree = self._tree
        while i <= self._size:
            tree[i] += nodes
            i += i & -i
        if not self._targeted[rank]:
            heapq.heappush(self._unseen, rank)
            if is_shortcut(nodes, self.system_nodes, self.params.threshold):
                self._pending_shortcuts.append(rank)

    def leave(self, rank: int) -> None:
        """Entry ``rank`` leaves the queue (dispatched or moved)."""
        if not self._present[rank]:
            raise ValueError(f"rank {rank} is not in the queue")
        self._present[rank] = 0
        nodes = self._nodes[rank]
        self._total -= nodes
        i = rank + 1
        tree = self._tree
        while i <= self._size:
            tree[i] -= nodes
            i += i & -i

    def _boundary(self, required: float) -> int:
        """Highest rank inside the window: the smallest prefix reaching ``required`` nodes."""
        if required <= 0:
            return -1
        if self._total < required:
            return self._size - 1       # never reached: the whole queue
        # Fenwick descent: the largest position whose prefix sum stays below ``required``.
        position = 0
        remaining = required
        tree = self._tree
        bit = self._top_bit
        while bit:
            nxt = position + bit
            if nxt <= self._size and tree[nxt] < remaining:
                position = nxt
                remaining -= tree[nxt]
            bit >>= 1
        return position     # 0-based rank of the entry that reaches ``required``

    def advance(self, largest_running: int) -> dict[int, str]:
        """Entries newly in :func:`replication_targets`, each with ``window`` or ``shortcut``."""
        required = nodes_required(largest_running, self.system_nodes, self.params.alpha)
        boundary = self._boundary(required)
        new: dict[int, str] = {}
        unseen = self._unseen
        present = self._present
        targeted = self._targeted
        while unseen and unseen[0] <= boundary:
            rank = heapq.heappop(unseen)
            if present[rank] and not targeted[rank]:
                targeted[rank] = 1
                new[rank] = WINDOW
        if self._pending_shortcuts:
            for rank in self._pending_shortcuts:
                if present[rank] and not targeted[rank]:
                    targeted[rank] = 1
                    new[rank] = SHORTCUT
            self._pending_shortcuts.clear()
        return new
