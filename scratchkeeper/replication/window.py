"""The replication window of seed 004, section 4.5.2, shared by the daemon and the simulator.

The window is the smallest prefix of the queue, in the scheduler's priority order, whose
requested nodes sum to at least ``max(R, alpha * S)``: R is the node count of the largest running
job and S the node count of the system. Jobs requesting at most ``T * S`` nodes (the shortcut)
are replicated at once wherever they stand. ``alpha = math.inf`` puts the whole queue in the
window.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Hashable

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
