"""Admission control per interval T (the flash QoS paper, §III.A and §III.B).

Time is cut into intervals of length T; a guarantee of M accesses per interval means every
admitted request is read within M service times of the interval's start. Two policies decide
how many of the requests offered in an interval are admitted:

* :class:`DeterministicAdmission`: at most ``S = (c-1)M^2 + cM`` (any S buckets of an (N, c, 1)
  allocation are retrievable in M accesses, so the guarantee always holds);
* :class:`StatisticalAdmission`: more than S when the estimated probability that an interval's
  admitted set is not retrievable in M accesses, ``Q = sum_k (1 - P_k) R_k``, stays below
  epsilon; ``P_k`` is sampled from the allocation (:func:`sample_retrieval_probabilities`),
  ``R_k`` is the observed share of busy intervals with k admitted requests.

:class:`AdmissionQueue` applies a policy interval by interval: requests beyond the limit wait,
oldest first, for the next interval; it counts admitted, delayed and violations.
"""

from __future__ import annotations

import random
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from scratchkeeper.errors import QosError
from scratchkeeper.qos.designs import retrieval_guarantee
from scratchkeeper.qos.placement import Allocation
from scratchkeeper.qos.retrieval import design_theoretic_retrieval

Request = TypeVar("Request")


class DeterministicAdmission:
    """Admit at most ``(c-1)M^2 + cM`` requests per interval."""

    def __init__(self, copies: int, accesses: int):
        self.accesses = accesses
        self.limit = retrieval_guarantee(copies, accesses)

    def admit_count(self, offered: int) -> int:
        """How many of ``offered`` requests this interval takes."""
        return min(offered, self.limit)


class StatisticalAdmission:
    """Admit beyond S while ``Q = sum_k (1 - P_k) R_k`` stays below ``epsilon``.

    ``probabilities[k]`` is P_k, the chance that k requested buckets are retrievable in M
    accesses; a size with no estimate counts as never retrievable. Only intervals with at least
    one request count in R_k (idle intervals would dilute Q without carrying any risk).
    """

    def __init__(self, copies: int, accesses: int, probabilities: Mapping[int, float],
                 epsilon: float):
        if not 0 <= epsilon <= 1:
            raise QosError(f"statistical admission: epsilon must be in [0, 1], got {epsilon}")
        for size, probability in probabilities.items():
            if not 0 <= probability <= 1:
                raise QosError(f"statistical admission: P_{size} must be in [0, 1], "
                               f"got {probability}")
        self.accesses = accesses
        self.limit = retrieval_guarantee(copies, accesses)
        self.probabilities = dict(probabilities)
        self.epsilon = epsilon
        self.intervals_by_size: Counter[int] = Counter()   # N_k
        self.intervals = 0                                   # N_t
        self._failure_mass = 0.0                             # sum_k (1 - P_k) N_k

    def _failure(self, size: int) -> float:
        if size <= self.limit:
            return 0.0
        return 1.0 - self.probabilities.get(size, 0.0)

    def risk(self) -> float:
        """Q over the intervals admitted so far."""
        return self._failure_mass / self.intervals if self.intervals else 0.0

    def admit_count(self, offered: int) -> int:
        """The largest k <= offered whose interval keeps Q below epsilon (at least min(offered, S))."""
        if offered == 0:
            return 0
        admitted = min(offered, self.limit)
        for size in range(offered, self.limit, -1):
            if (self._failure_mass + self._failure(size)) / (self.intervals + 1) < self.epsilon:
                admitted = size
                break
        self.intervals_by_size[admitted] += 1
        self.intervals += 1
        self._failure_mass += self._failure(admitted)
        return admitted


def sample_retrieval_probabilities(allocation: Allocation, accesses: int, max_requests: int,
                                   samples: int, seed: int = 0, repetition: bool = True
                                   ) -> dict[int, float]:
    """P_k for k = 1..max_requests: share of ``samples`` random sets of k buckets that
    design-theoretic retrieval reads in ``accesses`` accesses.

    With ``repetition`` (the paper's sampling) a bucket may be drawn twice, as two data blocks
    mapped to one bucket are in a real trace; then even k <= (c-1)M^2 + cM can fail. Without
    it the draws are distinct buckets and P_k = 1 up to the guarantee.
    """
    if samples < 1:
        raise QosError(f"sampling: samples must be >= 1, got {samples}")
    if not repetition and max_requests > allocation.buckets:
        raise QosError(f"sampling: {max_requests} distinct buckets asked of an allocation of "
                       f"{allocation.buckets}")
    rng = random.Random(seed)
    probabilities = {}
    for size in range(1, max_requests + 1):
        if size > allocation.devices * accesses:
            probabilities[size] = 0.0
            continue
        hits = 0
        for _ in range(samples):
            if repetition:
                drawn = [rng.randrange(allocation.buckets) for _ in range(size)]
            else:
                drawn = rng.sample(range(allocation.buckets), size)
            chosen = [allocation.replicas[bucket] for bucket in drawn]
            if design_theoretic_retrieval(chosen, allocation.devices).accesses <= accesses:
                hits += 1
        probabilities[size] = hits / samples
    return probabilities


@dataclass
class AdmissionCounters:
    """What an :class:`AdmissionQueue` did: requests admitted, requests that waited at least one
    interval, and intervals whose admitted requests were not served within the guarantee."""

    admitted: int = 0
    delayed: int = 0
    violations: int = 0
    intervals: int = 0


class AdmissionQueue(Generic[Request]):
    """Apply an admission policy interval by interval; the rest wait, oldest first."""

    def __init__(self, policy: DeterministicAdmission | StatisticalAdmission):
        self.policy = policy
        self.waiting: deque[tuple[Request, int]] = deque()
        self.counters = AdmissionCounters()

    def interval(self, index: int, arrivals: Iterable[Request]) -> list[tuple[Request, int]]:
        """Admit for interval ``index``; returns (request, interval it was offered in) pairs.

        Waiting requests go before this interval's arrivals.
        """
        for request in arrivals:
            self.waiting.append((request, index))
        take = self.policy.admit_count(len(self.waiting))
        admitted = [self.waiting.popleft() for _ in range(take)]
        self.counters.admitted += take
        self.counters.delayed += sum(1 for _, offered in admitted if offered < index)
        if admitted:
            self.counters.intervals += 1
        return admitted

    def record_violation(self) -> None:
        """An admitted interval was not served within its guarantee."""
        self.counters.violations += 1
