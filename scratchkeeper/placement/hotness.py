"""SUORA's hotness table (the SUORA paper, §3.3) and the moves it decides (Algorithms 2 and 3).

:class:`ReadCounters` is the multi-hash counter table: an object's reads increment the counter at
each of its ``hashes`` positions, and its hotness is the smallest of them (all counters must
reach a bucket's threshold, section 3.3), so a collision can only make an object look hotter.
:class:`HotnessTable` adds the per-bucket thresholds, where each tracked object's replicas are
and how full each bucket is, and answers :meth:`HotnessTable.moves`: cold replicas moved down
out of a bucket filled past its upper watermark until it is at its lower one (Algorithm 2), then
hot replicas moved up to the fastest bucket whose threshold their hotness reaches (Algorithm 3,
lines 14-18), within a move budget. It only decides; whoever copies the data calls
:meth:`HotnessTable.commit` once a move is done.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..errors import PlacementInputError
from .suora import _MASK, _fmix64

COUNTER_MAX = 2 ** 32 - 1


class ReadCounters:
    """``width`` saturating 32-bit counters, ``hashes`` of them per object id."""

    def __init__(self, width: int = 1 << 20, hashes: int = 4, seed: int = 0):
        if width < 1:
            raise PlacementInputError(f"hotness table: width must be >= 1, got {width}")
        if not 1 <= hashes <= 16:
            raise PlacementInputError(f"hotness table: hashes must be 1..16, got {hashes}")
        self.width = width
        self.hashes = hashes
        self.seeds = tuple(_fmix64((seed + 0x9E3779B97F4A7C15 * (k + 1)) & _MASK)
                           for k in range(hashes))
        self.counts = array("I", [0]) * width

    def positions(self, object_id: int) -> tuple[int, ...]:
        object_id &= _MASK
        return tuple(_fmix64(object_id ^ seed) % self.width for seed in self.seeds)

    def record(self, object_id: int, reads: int = 1) -> None:
        """Count ``reads`` reads of the object (saturating)."""
        if reads < 0:
            raise PlacementInputError(f"reads must be >= 0, got {reads}")
        counts = self.counts
        # positions repeat when two hashes collide: count the read once per distinct counter
        for position in set(self.positions(object_id)):
            counts[position] = min(COUNTER_MAX, counts[position] + reads)

    def hotness(self, object_id: int) -> int:
        """The smallest of the object's counters: never below its reads since the last decay."""
        return min(self.counts[p] for p in self.positions(object_id))

    def average(self, object_id: int) -> float:
        """The mean of the object's counters, by which Algorithm 2 sorts cold data."""
        positions = self.positions(object_id)
        return sum(self.counts[p] for p in positions) / len(positions)

    def decrease(self, object_id: int, amount: int) -> None:
        """Lower the object's counters by ``amount`` (Algorithm 2, line 7), not below 0."""
        counts = self.counts
        for position in set(self.positions(object_id)):
            counts[position] = max(0, counts[position] - amount)

    def decay(self, factor: float = 0.5) -> None:
        """Multiply every counter by ``factor`` (rounding down), so hotness follows recent reads."""
        if not 0 <= factor <= 1:
            raise PlacementInputError(f"decay factor must be in [0, 1], got {factor}")
        if factor == 0.5:
            self.counts = array("I", (c >> 1 for c in self.counts))
        else:
            self.counts = array("I", (int(c * factor) for c in self.counts))


@dataclass(frozen=True)
class Move:
    """One replica of ``object_id`` to move from bucket ``source`` to bucket ``target``."""

    object_id: int
    source: int
    target: int
    size: int
    hotness: float

    @property
    def direction(self) -> str:
        return "up" if self.target > self.source else "down"


class HotnessTable:
    """Read counters, bucket thresholds and replica residency; decides up and down moves.

    ``thresholds[i]`` is bucket i's v_i (v_0 = 0, non-decreasing, buckets slowest first):
    an object whose hotness reaches v_k belongs in bucket k. ``capacities[i]`` is bucket i's size
    in bytes; a bucket filled past ``upper_watermark`` of it sheds its coldest replicas down to
    ``lower_watermark`` (W_u and W_l, section 3.4.1), and no move fills a bucket past W_u.
    ``home_buckets`` is the replica count rep: replicas start on buckets 0 .. rep-1 and the
    topmost of those still held moves up first (section 3.6).
    """

    def __init__(self, thresholds: Sequence[int], capacities: Sequence[float], *,
                 home_buckets: int = 1, upper_watermark: float = 0.9,
                 lower_watermark: float = 0.8, width: int = 1 << 20, hashes: int = 4,
                 seed: int = 0):
        thresholds = tuple(thresholds)
        if not thresholds or thresholds[0] != 0:
            raise PlacementInputError(f"thresholds must start with v_0 = 0, got {list(thresholds)}")
        if any(b < a for a, b in zip(thresholds, thresholds[1:])) or any(
                not isinstance(v, int) or v < 0 for v in thresholds):
            raise PlacementInputError(
                f"thresholds must be non-decreasing whole read counts, got {list(thresholds)}")
        if len(capacities) != len(thresholds):
            raise PlacementInputError(f"{len(thresholds)} thresholds but {len(capacities)} "
                                      "bucket capacities")
        if any(not (math.isfinite(c) and c > 0) for c in capacities):
            raise PlacementInputError(f"bucket capacities must be > 0, got {list(capacities)}")
        if not 0 < lower_watermark <= upper_watermark <= 1:
            raise PlacementInputError("watermarks must satisfy 0 < lower <= upper <= 1, got "
                                      f"{lower_watermark} and {upper_watermark}")
        if not 1 <= home_buckets <= len(thresholds):
            raise PlacementInputError(f"home buckets must be 1..{len(thresholds)}, "
                                      f"got {home_buckets}")
        self.thresholds = thresholds
        self.capacities = tuple(float(c) for c in capacities)
        self.home_buckets = home_buckets
        self.upper_watermark = upper_watermark
        self.lower_watermark = lower_watermark
        self.counters = ReadCounters(width, hashes, seed)
        self._residency: dict[int, tuple[frozenset[int], int]] = {}
        self._used = [0.0] * len(thresholds)

    # ------------------------------------------------------------------ counting

    def record(self, object_id: int, reads: int = 1) -> None:
        self.counters.record(object_id, reads)

    def hotness(self, object_id: int) -> int:
        return self.counters.hotness(object_id)

    def decay(self, factor: float = 0.5) -> None:
        self.counters.decay(factor)

    def bucket_for(self, hotness: float) -> int:
        """The fastest bucket whose threshold ``hotness`` reaches."""
        bucket = 0
        for position, threshold in enumerate(self.thresholds):
            if hotness >= threshold:
                bucket = position
        return bucket

    # ------------------------------------------------------------------ residency

    def track(self, object_id: int, buckets: Iterable[int], size: int) -> None:
        """Where the object's replicas are now (bucket positions) and its size in bytes."""
        held = frozenset(buckets)
        if not held or any(not 0 <= b < len(self.thresholds) for b in held):
            raise PlacementInputError(f"object {object_id}: replica buckets {sorted(held)} not "
                                      f"in 0..{len(self.thresholds) - 1}")
        if size < 0:
            raise PlacementInputError(f"object {object_id}: size must be >= 0, got {size}")
        self.forget(object_id)
        self._residency[object_id] = (held, size)
        for bucket in held:
            self._used[bucket] += size

    def forget(self, object_id: int) -> None:
        held = self._residency.pop(object_id, None)
        if held is not None:
            for bucket in held[0]:
                self._used[bucket] -= held[1]

    def replicas(self, object_id: int) -> frozenset[int]:
        return self._residency[object_id][0]

    def used(self, bucket: int) -> float:
        return self._used[bucket]

    def commit(self, move: Move) -> None:
        """Record a move as done: the replica is on ``move.target``; a down move lowers the
        object's counters by the destination's threshold (Algorithm 2, line 7)."""
        held, size = self._residency[move.object_id]
        if move.source not in held or move.target in held:
            raise PlacementInputError(f"object {move.object_id}: no replica on bucket "
                                      f"{move.source} or one already on {move.target}")
        self.track(move.object_id, (held - {move.source}) | {move.target}, size)
        if move.target < move.source:
            self.counters.decrease(move.object_id, self.thresholds[move.target])

    # ------------------------------------------------------------------ deciding

    def moves(self, budget: int) -> list[Move]:
        """At most ``budget`` moves: cold ones first (they make room), then hot ones, hottest
        first."""
        if budget < 0:
            raise PlacementInputError(f"move budget must be >= 0, got {budget}")
        used = list(self._used)
        held = {object_id: set(buckets) for object_id, (buckets, _) in self._residency.items()}
        planned: list[Move] = []
        self._cold_moves(budget, used, held, planned)
        self._hot_moves(budget, used, held, planned)
        return planned

    def _room(self, bucket: int, used: list[float], size: int) -> bool:
        return used[bucket] + size <= self.upper_watermark * self.capacities[bucket]

    def _cold_moves(self, budget: int, used: list[float], held: dict[int, set[int]],
                    planned: list[Move]) -> None:
        """Algorithm 2: from the fastest bucket down, a bucket past W_u sheds its coldest
        replicas (lowest mean counter) to the next slower bucket without one, until at W_l."""
        for bucket in range(len(self.thresholds) - 1, 0, -1):
            capacity = self.capacities[bucket]
            if used[bucket] <= self.upper_watermark * capacity:
                continue
            coldest = sorted((self.counters.average(object_id), object_id)
                             for object_id, buckets in held.items() if bucket in buckets)
            for average, object_id in coldest:
                if used[bucket] <= self.lower_watermark * capacity or len(planned) >= budget:
                    break
                size = self._residency[object_id][1]
                target = next((b for b in range(bucket - 1, -1, -1)
                               if b not in held[object_id] and self._room(b, used, size)), None)
                if target is None:
                    continue
                planned.append(Move(object_id, bucket, target, size, average))
                self._apply(planned[-1], used, held)

    def _hot_moves(self, budget: int, used: list[float], held: dict[int, set[int]],
                   planned: list[Move]) -> None:
        """Algorithm 3, lines 14-18: an object whose hotness reaches v_k for a bucket k above
        all its replicas moves one replica up to k (bypassing buckets between), the topmost of
        its home buckets first, then its highest one below k."""
        moved = {move.object_id for move in planned}
        candidates = []
        for object_id, buckets in held.items():
            if object_id in moved:
                continue
            hotness = self.counters.hotness(object_id)
            if self.bucket_for(hotness) > max(buckets):
                candidates.append((-hotness, object_id))
        for negative_hotness, object_id in sorted(candidates):
            if len(planned) >= budget:
                break
            buckets = held[object_id]
            size = self._residency[object_id][1]
            top = max(buckets)
            target = next((b for b in range(self.bucket_for(-negative_hotness), top, -1)
                           if self._room(b, used, size)), None)
            if target is None:
                continue
            home = [b for b in buckets if b < self.home_buckets]
            source = max(home) if home else top
            planned.append(Move(object_id, source, target, size, -negative_hotness))
            self._apply(planned[-1], used, held)

    @staticmethod
    def _apply(move: Move, used: list[float], held: dict[int, set[int]]) -> None:
        used[move.source] -= move.size
        used[move.target] += move.size
        held[move.object_id].discard(move.source)
        held[move.object_id].add(move.target)
