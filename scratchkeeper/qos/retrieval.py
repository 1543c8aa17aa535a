"""Which copy of each requested bucket to read: per interval, online, and optimal.

* :func:`design_theoretic_retrieval` (the flash QoS paper, §III.C): the requests of one interval,
  all present at its start; each bucket first goes to its first copy, and when a device would
  need more accesses than ``ceil(b/N)`` the excess is remapped to other copies. Remapping follows
  alternating paths (move a bucket to another of its copies, which may move another, ...), so
  the number of accesses it ends with is the least possible on equal devices; any
  ``(c-1)M^2 + cM`` buckets of an (N, c, 1) allocation therefore end in at most M accesses.
* :class:`OnlineRetrieval` (section IV.B): requests are served as they arrive, first come first
  served; one request goes to the copy whose device finishes earliest (an idle one if any),
  requests arriving at the same instant are placed together with the solver so their batch
  ends as early as the devices' backlogs allow.
* :func:`optimal_retrieval`: scratchkeeper.solver.select_replicas (max-flow, the replica-selection paper), the
  optimum for devices with their own service time and backlog, the reference for both above.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from scratchkeeper.errors import QosError


@dataclass(frozen=True)
class Retrieval:
    """The device chosen for each requested bucket (in request order) and the accesses needed."""

    devices: tuple[int, ...]
    accesses: int


def _check(replicas: Sequence[Sequence[int]], devices: int) -> None:
    for index, copies in enumerate(replicas):
        if not copies:
            raise QosError(f"request {index}: bucket has no copy")
        for device in copies:
            if not 0 <= device < devices:
                raise QosError(f"request {index}: device {device} out of range 0..{devices - 1}")


def design_theoretic_retrieval(replicas: Sequence[Sequence[int]], devices: int) -> Retrieval:
    """Retrieve one interval's buckets (each given by its copies' devices, first copy first).

    Returns the device per bucket and the number of parallel accesses (the most buckets read
    from one device).
    """
    _check(replicas, devices)
    count = len(replicas)
    if count == 0:
        return Retrieval((), 0)
    limit = math.ceil(count / devices)
    chosen = [-1] * count
    load = [0] * devices
    on_device: list[list[int]] = [[] for _ in range(devices)]
    for bucket, copies in enumerate(replicas):
        # Initial mapping: the first copy with room, in copy order.
        target = next((d for d in copies if load[d] < limit), None)
        if target is None:
            path = _alternating_path(bucket, replicas, chosen, on_device, load, limit)
            while path is None:
                # No remapping fits in `limit` accesses: the whole set needs one more access.
                limit += 1
                target = next((d for d in copies if load[d] < limit), None)
                path = [] if target is not None else _alternating_path(
                    bucket, replicas, chosen, on_device, load, limit)
            if path:
                # Shift every bucket on the path one step: each moved bucket leaves the device
                # the one before it takes, the last lands on a device with room.
                for moved, new_device in path[1:]:
                    on_device[chosen[moved]].remove(moved)
                    load[chosen[moved]] -= 1
                    chosen[moved] = new_device
                    on_device[new_device].append(moved)
                    load[new_device] += 1
                target = path[0][1]
        chosen[bucket] = target
        on_device[target].append(bucket)
        load[target] += 1
    return Retrieval(tuple(chosen), max(load))


def _alternating_path(bucket: int, replicas: Sequence[Sequence[int]], chosen: list[int],
                      on_device: list[list[int]], load: list[int], limit: int
                      ) -> list[tuple[int, int]] | None:
    """Breadth-first search for a remapping that frees a slot for ``bucket``.

    Returns [(bucket, device it takes), (moved bucket, device it moves to), ...] ending on a
    device with fewer than ``limit`` buckets, or None when there is none.
    """
    parent: dict[int, tuple[int, int] | None] = {}
    queue: deque[int] = deque()
    for device in replicas[bucket]:
        if device not in parent:
            parent[device] = None
            queue.append(device)
    while queue:
        device = queue.popleft()
        for moved in on_device[device]:
            for other in replicas[moved]:
                if other in parent:
                    continue
                parent[other] = (moved, device)
                if load[other] < limit:
                    # Walk back: `moved` goes to `other`, whoever held its slot moves there, ...
                    steps: list[tuple[int, int]] = []
                    node = other
                    while parent[node] is not None:
                        moved_bucket, came_from = parent[node]
                        steps.append((moved_bucket, node))
                        node = came_from
                    steps.append((bucket, node))
                    steps.reverse()
                    return steps
                queue.append(other)
    return None


def optimal_retrieval(replicas: Sequence[Sequence[int]], devices: int,
                      service_time: float | Sequence[float] = 1.0,
                      backlog: Sequence[float] | None = None) -> tuple[Retrieval, float]:
    """The optimal choice by the solver (the replica-selection paper): least time until the last
    bucket is read.

    ``service_time`` per bucket (one value or one per device) and ``backlog``, the time each
    device is still busy, are the solver's cost and initial load. Returns the retrieval and
    its response time.
    """
    from scratchkeeper.solver import select_replicas

    _check(replicas, devices)
    if not replicas:
        return Retrieval((), 0), 0.0
    costs = _per_device(service_time, devices, "service time")
    loads = list(backlog) if backlog is not None else [0.0] * devices
    selection = select_replicas([list(c) for c in replicas], costs, [0.0] * devices, loads)
    return Retrieval(tuple(selection.assignment), max(selection.counts)), selection.response_time


def _per_device(value: float | Sequence[float], devices: int, what: str) -> list[float]:
    values = [float(value)] * devices if isinstance(value, (int, float)) else [float(v) for v in value]
    if len(values) != devices:
        raise QosError(f"{what}: expected one value per device ({devices}), got {len(values)}")
    for device, item in enumerate(values):
        if not item > 0 or math.isinf(item):
            raise QosError(f"{what}: device {device} must be > 0 and finite, got {item}")
    return values


@dataclass(frozen=True)
class ServedRequest:
    """One request read by :class:`OnlineRetrieval`: where, and when it started and ended."""

    device: int
    start: float
    finish: float


class OnlineRetrieval:
    """Serve requests as they arrive (first come, first served) on devices with a queue each.

    A device serves one bucket at a time, ``service_time`` each (one value or one per device).
    """

    def __init__(self, devices: int, service_time: float | Sequence[float]):
        self.devices = devices
        self.service = _per_device(service_time, devices, "service time")
        self.busy_until = [0.0] * devices

    def serve(self, now: float, replicas: Sequence[Sequence[int]]) -> list[ServedRequest]:
        """Serve the buckets that arrive together at ``now``; returns them in the same order."""
        _check(replicas, self.devices)
        if len(replicas) == 1:
            # Earliest finish time: an idle device if there is one, else the shortest wait.
            device = min(replicas[0], key=lambda d: (max(self.busy_until[d], now) + self.service[d]))
            chosen = [device]
        elif replicas:
            backlog = [max(0.0, busy - now) for busy in self.busy_until]
            retrieval, _ = optimal_retrieval(replicas, self.devices, self.service, backlog)
            chosen = list(retrieval.devices)
        else:
            return []
        served = []
        for device in chosen:
            start = max(self.busy_until[device], now)
            finish = start + self.service[device]
            self.busy_until[device] = finish
            served.append(ServedRequest(device, start, finish))
        return served
