"""Replay block requests on simulated devices: fixed service time per bucket, one queue each.

This is the simulation behind benchmarks/qos (the flash QoS paper, §V, without DiskSim): a device
reads one bucket at a time in ``service_time``; requests wait in its queue first come first
served. Every function returns one :class:`Outcome` per request, in the order given.

* :func:`replay_single_copy`: the "original stand", each block read from the one device the
  trace's striping puts it on;
* :func:`replay_online`: admission per interval, then online retrieval as requests arrive;
* :func:`replay_interval`: admission per interval, requests of an interval retrieved together at
  the start of the next one by design-theoretic retrieval (the flash QoS paper's interval model);
* :func:`run_intervals`: synthetic workloads, a set of buckets at the start of every interval,
  with the retrieval given (design-theoretic, per-request shortest queue, or the optimum).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import groupby

from scratchkeeper.errors import QosError
from scratchkeeper.qos.admission import (
    AdmissionCounters,
    AdmissionQueue,
    DeterministicAdmission,
    StatisticalAdmission,
)
from scratchkeeper.qos.placement import Allocation, DataBlockMap
from scratchkeeper.qos.retrieval import OnlineRetrieval, design_theoretic_retrieval, optimal_retrieval
from scratchkeeper.qos.traces import BlockRequest


@dataclass(frozen=True)
class Outcome:
    """One request: when it arrived, was admitted, and its read ended, and on which device."""

    arrival: float
    admitted: float
    finish: float
    device: int

    @property
    def response(self) -> float:
        """From arrival to the end of the read, waiting for admission included."""
        return self.finish - self.arrival

    @property
    def delay(self) -> float:
        """Time spent waiting for admission or for the interval to start."""
        return self.admitted - self.arrival

    @property
    def served_in(self) -> float:
        """From admission to the end of the read: what the guarantee bounds."""
        return self.finish - self.admitted


@dataclass(frozen=True)
class Replay:
    """Outcomes of a replay and what its admission did; ``late_requests`` are the admitted
    requests not served within the guarantee (``served_in`` above it)."""

    outcomes: list[Outcome]
    counters: AdmissionCounters
    late_requests: int


def _serve_queue(busy_until: list[float], device: int, now: float, service: float) -> float:
    finish = max(busy_until[device], now) + service
    busy_until[device] = finish
    return finish


def replay_single_copy(requests: Sequence[BlockRequest], devices: int, service_time: float,
                       device_of: Callable[[BlockRequest], int]) -> list[Outcome]:
    """Every request to its one device, first come first served, no admission control."""
    busy_until = [0.0] * devices
    return [Outcome(r.arrival, r.arrival, _serve_queue(busy_until, device_of(r), r.arrival,
                                                       service_time), device_of(r))
            for r in requests]


def _interval_index(arrival: float, interval: float) -> int:
    return math.floor(arrival / interval)


def _check_times(requests: Sequence[BlockRequest], interval: float) -> None:
    if not interval > 0:
        raise QosError(f"interval must be > 0, got {interval}")
    for before, after in zip(requests, requests[1:]):
        if after.arrival < before.arrival:
            raise QosError("requests must be sorted by arrival time")


def _placement(block_map: DataBlockMap | Callable[[BlockRequest], DataBlockMap]
               ) -> Callable[[BlockRequest], tuple[int, ...]]:
    if isinstance(block_map, DataBlockMap):
        return lambda request: block_map.devices_of(request.data_block)
    return lambda request: block_map(request).devices_of(request.data_block)


def replay_online(requests: Sequence[BlockRequest], allocation: Allocation,
                  block_map: DataBlockMap | Callable[[BlockRequest], DataBlockMap],
                  service_time: float, interval: float,
                  policy: DeterministicAdmission | StatisticalAdmission | None) -> Replay:
    """Admit per interval (all when ``policy`` is None), serve the admitted ones as they arrive.

    ``block_map`` places data blocks on ``allocation``'s buckets, one map for the whole replay
    or one chosen per request (a map mined from the previous part of the trace). A request
    delayed by admission is let in at the start of a later interval. The guarantee is
    ``policy.accesses`` service times from admission (one when there is no policy).
    """
    _check_times(requests, interval)
    devices_of = _placement(block_map)
    guarantee = (policy.accesses if policy else 1) * service_time
    # No policy: a limit no interval reaches ((1-1)M^2 + 1M = M).
    queue: AdmissionQueue[int] = AdmissionQueue(
        policy or DeterministicAdmission(1, len(requests) + 1))
    online = OnlineRetrieval(allocation.devices, service_time)
    outcomes: list[Outcome | None] = [None] * len(requests)
    late = 0
    position = 0
    index = _interval_index(requests[0].arrival, interval) if requests else 0
    while position < len(requests) or queue.waiting:
        arrivals = []
        while position < len(requests) and _interval_index(requests[position].arrival, interval) == index:
            arrivals.append(position)
            position += 1
        if not arrivals and not queue.waiting:
            index = _interval_index(requests[position].arrival, interval)
            continue
        admitted = queue.interval(index, arrivals)
        start = index * interval
        timed = sorted(((requests[r].arrival if offered == index else start), r)
                       for r, offered in admitted)
        interval_late = False
        for now, group in groupby(timed, key=lambda item: item[0]):
            members = [r for _, r in group]
            served = online.serve(now, [devices_of(requests[r]) for r in members])
            for r, read in zip(members, served):
                outcomes[r] = Outcome(requests[r].arrival, now, read.finish, read.device)
                if read.finish - now > guarantee * (1 + 1e-9):
                    late += 1
                    interval_late = True
        if interval_late:
            queue.record_violation()
        index += 1
    return Replay([o for o in outcomes if o is not None], queue.counters, late)


def replay_interval(requests: Sequence[BlockRequest], allocation: Allocation,
                    block_map: DataBlockMap | Callable[[BlockRequest], DataBlockMap],
                    service_time: float, interval: float,
                    policy: DeterministicAdmission | StatisticalAdmission) -> Replay:
    """Requests arriving in interval j are offered at the start of j+1 and retrieved together
    there by design-theoretic retrieval; the guarantee is ``policy.accesses`` service times."""
    _check_times(requests, interval)
    devices_of = _placement(block_map)
    guarantee = policy.accesses * service_time
    queue: AdmissionQueue[int] = AdmissionQueue(policy)
    busy_until = [0.0] * allocation.devices
    outcomes: list[Outcome | None] = [None] * len(requests)
    late = 0
    position = 0
    index = _interval_index(requests[0].arrival, interval) + 1 if requests else 0
    while position < len(requests) or queue.waiting:
        arrivals = []
        while (position < len(requests)
               and _interval_index(requests[position].arrival, interval) < index):
            arrivals.append(position)
            position += 1
        if not arrivals and not queue.waiting:
            index = _interval_index(requests[position].arrival, interval) + 1
            continue
        admitted = [r for r, _ in queue.interval(index, arrivals)]
        start = index * interval
        retrieval = design_theoretic_retrieval(
            [devices_of(requests[r]) for r in admitted], allocation.devices)
        interval_late = False
        for r, device in zip(admitted, retrieval.devices):
            finish = _serve_queue(busy_until, device, start, service_time)
            outcomes[r] = Outcome(requests[r].arrival, start, finish, device)
            if finish - start > guarantee * (1 + 1e-9):
                late += 1
                interval_late = True
        if interval_late:
            queue.record_violation()
        index += 1
    return Replay([o for o in outcomes if o is not None], queue.counters, late)


def run_intervals(allocation: Allocation, interval_buckets: Sequence[Sequence[int]],
                  interval: float, service_time: float, retrieval: str) -> list[Outcome]:
    """Synthetic workload: interval i's buckets all arrive at ``i * interval``.

    ``retrieval``: ``design`` (design-theoretic, the interval's buckets together), ``queue``
    (each request in turn to the copy whose device finishes first, as a RAID-1 controller
    balances reads) or ``optimal`` (the solver, with the devices' backlog).
    """
    if retrieval not in ("design", "queue", "optimal"):
        raise QosError(f"retrieval must be design, queue or optimal, got {retrieval!r}")
    busy_until = [0.0] * allocation.devices
    outcomes = []
    for number, buckets in enumerate(interval_buckets):
        now = number * interval
        replicas = [allocation.replicas[b] for b in buckets]
        if retrieval == "design":
            chosen = design_theoretic_retrieval(replicas, allocation.devices).devices
        elif retrieval == "optimal":
            backlog = [max(0.0, busy - now) for busy in busy_until]
            chosen = optimal_retrieval(replicas, allocation.devices, service_time, backlog)[0].devices
        else:
            chosen = []
            planned = list(busy_until)
            for copies in replicas:
                device = min(copies, key=lambda d: max(planned[d], now))
                planned[device] = max(planned[device], now) + service_time
                chosen.append(device)
        for device in chosen:
            outcomes.append(Outcome(now, now, _serve_queue(busy_until, device, now, service_time),
                                    device))
    return outcomes
