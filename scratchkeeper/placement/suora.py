"""SUORA placement (the SUORA paper, §3, Algorithms 1 and 3): buckets, segments, the sequence R.

A :class:`PlacementMap` holds buckets of one performance class each, slowest first. Every
target of a bucket owns segments on the bucket's number line: ``capacity / unit`` (eq. 1) split
over consecutive integer slots, at most 1 per slot. An object id gives a deterministic
pseudo-random sequence R; the first number of R inside a segment of an eligible target (up, not
full, not already chosen) names the target. Replica ``i`` goes to bucket ``first_bucket + i``
(wrapping round), each bucket starting R afresh, so the replicas of an object sit on consecutive
buckets and an object moved to a faster bucket lands where R says, with no table to consult.

Adding a target gives it the lowest free slots; only objects whose R hits the new segments
before their old hit move, all of them onto the new target. Removing a target frees its slots;
only its objects move. The C core (native/suora.c) and :func:`_place_python` below are the same
algorithm number for number; the map uses C when the extension is built.
"""

from __future__ import annotations

import enum
import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

from ..errors import PlacementError, PlacementInputError

#: the first range of R is [0, 1), doubled per level (the SUORA paper starts at [0, 16); from 1 a bucket
#: of fewer than 16 slots does not miss most draws, and from 16 slots on the ranges are the same)
BASE_RANGE = 1.0
#: numbers drawn in one bucket before a deterministic slot scan takes over (native/suora.h)
MAX_DRAWS = 4096
MAX_LEVELS = 40
_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_LEVEL_STEP = 0xD6E8FEB86659FD93
_UNIT = 2.0 ** -53


class TargetState(str, enum.Enum):
    """Whether a target takes new placements: full and failed targets are skipped."""

    UP = "up"
    FULL = "full"
    FAILED = "failed"


@dataclass(frozen=True)
class Segment:
    """``[slot, slot + length)`` on a bucket's number line, ``0 < length <= 1``."""

    slot: int
    length: float


@dataclass(frozen=True)
class PlacementTarget:
    """One target (an OST): its index, bucket position, capacity and segments."""

    index: int
    bucket: int
    capacity: float
    segments: tuple[Segment, ...]
    state: TargetState = TargetState.UP

    @property
    def eligible(self) -> bool:
        return self.state is TargetState.UP

    @property
    def share(self) -> float:
        """Length of the number line this target owns (its weight in the bucket)."""
        return sum(segment.length for segment in self.segments)


@dataclass(frozen=True)
class Bucket:
    """One performance class (a pool): ``unit`` is eq. 1's capacity parameter p."""

    name: str
    unit: float


def segments_for(length: float, free_slots: Iterable[int]) -> tuple[Segment, ...]:
    """``length`` cut into pieces of at most 1 on the first run of consecutive free slots long
    enough for them."""
    needed = max(1, math.ceil(length))
    run: list[int] = []
    for slot in free_slots:
        if run and slot != run[-1] + 1:
            run = []
        run.append(slot)
        if len(run) == needed:
            break
    pieces = []
    left = length
    for slot in run:
        pieces.append(Segment(slot, min(1.0, left)))
        left -= 1.0
    return tuple(pieces)


def _free_slots(used: set[int]) -> Iterable[int]:
    slot = 0
    while True:
        if slot not in used:
            yield slot
        slot += 1


def levels_for(slot_count: int) -> int:
    """J, the smallest level whose range 2^J covers ``slot_count`` slots."""
    level = 0
    while BASE_RANGE * (1 << level) < slot_count:
        level += 1
    return level


@dataclass(frozen=True)
class PlacementMap:
    """Buckets (slowest first) and their targets; :meth:`place` is pure and deterministic."""

    buckets: tuple[Bucket, ...]
    targets: tuple[PlacementTarget, ...]
    seed: int = 0
    _by_index: dict[int, int] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not self.buckets:
            raise PlacementInputError("placement map: no bucket")
        names = [bucket.name for bucket in self.buckets]
        if len(set(names)) != len(names):
            raise PlacementInputError(f"placement map: bucket names repeat: {names}")
        for bucket in self.buckets:
            if not (math.isfinite(bucket.unit) and bucket.unit > 0):
                raise PlacementInputError(f"bucket {bucket.name}: unit must be > 0, "
                                          f"got {bucket.unit}")
        by_index: dict[int, int] = {}
        used: set[tuple[int, int]] = set()
        for position, target in enumerate(self.targets):
            where = f"target {target.index}"
            if target.index < 0 or target.index in by_index:
                raise PlacementInputError(f"{where}: index negative or repeated")
            if not 0 <= target.bucket < len(self.buckets):
                raise PlacementInputError(f"{where}: bucket {target.bucket} out of range")
            if not (math.isfinite(target.capacity) and target.capacity > 0):
                raise PlacementInputError(f"{where}: capacity must be > 0, got {target.capacity}")
            if not target.segments:
                raise PlacementInputError(f"{where}: no segment")
            for segment in target.segments:
                if segment.slot < 0 or not 0 < segment.length <= 1:
                    raise PlacementInputError(f"{where}: bad segment {segment}")
                if (target.bucket, segment.slot) in used:
                    raise PlacementInputError(f"{where}: slot {segment.slot} already taken")
                used.add((target.bucket, segment.slot))
            by_index[target.index] = position
        object.__setattr__(self, "_by_index", by_index)
        if not 0 <= self.seed <= _MASK:
            raise PlacementInputError("placement map: seed must be a 64-bit unsigned, "
                                      f"got {self.seed}")

    # ------------------------------------------------------------------ building

    @classmethod
    def build(cls, pools: Sequence[tuple[str, Sequence[tuple[int, float]]]], *, seed: int = 0,
              units: Sequence[float] | None = None) -> PlacementMap:
        """A map from ``[(pool name, [(target index, capacity), ...]), ...]``, slowest pool first.

        Each pool's unit p is its mean capacity unless ``units`` gives it (eq. 1); targets are
        laid on consecutive slots in the order given.
        """
        buckets, targets = [], []
        for position, (name, members) in enumerate(pools):
            capacities = [float(capacity) for _, capacity in members]
            if units is not None:
                unit = float(units[position])
            elif capacities and all(math.isfinite(c) and c > 0 for c in capacities):
                unit = math.fsum(capacities) / len(capacities)
            else:
                unit = 1.0  # __post_init__ names the bad capacity
            buckets.append(Bucket(str(name), unit))
            slot = 0
            for index, capacity in members:
                capacity = float(capacity)
                length = capacity / unit if capacity > 0 and math.isfinite(capacity) else 0.0
                pieces = segments_for(length, range(slot, slot + max(1, math.ceil(length))))
                if length <= 0:
                    pieces = (Segment(slot, 1.0),)
                slot = pieces[-1].slot + 1
                targets.append(PlacementTarget(int(index), position, capacity, pieces))
        return cls(tuple(buckets), tuple(targets), seed)

    @classmethod
    def for_tiers(cls, storage, capacities: Mapping[int, float], *, seed: int = 0) -> PlacementMap:
        """The map of a site's tiered pools (``storage.pool_tiers`` and ``storage.tier_order``
        of a :class:`~scratchkeeper.config.StorageConfig`), one bucket per performance class,
        slowest first; ``capacities`` gives each OST index its capacity in bytes. An OST in two
        pools of one class counts once; in pools of two classes it is refused."""
        from ..config import parse_ost_ranges, tier_pools

        pools, seen = [], {}
        for tier, names in tier_pools(storage):
            members = []
            for name in names:
                for index in parse_ost_ranges(storage.pools[name]):
                    if seen.setdefault(index, tier) != tier:
                        raise PlacementInputError(f"OST {index}: in classes {seen[index]} and "
                                                  f"{tier} (storage.pool_tiers)")
                    if index not in members:
                        members.append(index)
            missing = [index for index in members if index not in capacities]
            if missing:
                raise PlacementInputError(f"class {tier}: no capacity for OSTs {missing}")
            pools.append((tier, [(index, capacities[index]) for index in members]))
        if not pools:
            raise PlacementInputError("no tiered pool: storage.pool_tiers is empty")
        return cls.build(pools, seed=seed)

    def target(self, index: int) -> PlacementTarget:
        try:
            return self.targets[self._by_index[index]]
        except KeyError:
            raise PlacementInputError(f"target {index}: not in the placement map") from None

    def bucket_position(self, name: str) -> int:
        for position, bucket in enumerate(self.buckets):
            if bucket.name == name:
                return position
        raise PlacementInputError(f"bucket {name}: not in the placement map")

    def add_target(self, bucket: int, index: int, capacity: float) -> PlacementMap:
        """This map with one more target in ``bucket``, on the lowest free slots (section 3.2)."""
        if not 0 <= bucket < len(self.buckets):
            raise PlacementInputError(f"bucket {bucket} out of range")
        if index in self._by_index:
            raise PlacementInputError(f"target {index}: already in the placement map")
        if not (math.isfinite(capacity) and capacity > 0):
            raise PlacementInputError(f"target {index}: capacity must be > 0, got {capacity}")
        used = {segment.slot for target in self.targets if target.bucket == bucket
                for segment in target.segments}
        pieces = segments_for(capacity / self.buckets[bucket].unit, _free_slots(used))
        new = PlacementTarget(index, bucket, float(capacity), pieces)
        return replace(self, targets=self.targets + (new,))

    def remove_target(self, index: int) -> PlacementMap:
        """This map without target ``index``; its slots become gaps (section 3.4.2)."""
        self.target(index)
        return replace(self, targets=tuple(t for t in self.targets if t.index != index))

    def with_state(self, index: int, state: TargetState) -> PlacementMap:
        """This map with target ``index`` up, full or failed."""
        position = self._by_index.get(index)
        if position is None:
            raise PlacementInputError(f"target {index}: not in the placement map")
        targets = list(self.targets)
        targets[position] = replace(targets[position], state=TargetState(state))
        return replace(self, targets=tuple(targets))

    # ------------------------------------------------------------------ tables

    @cached_property
    def _tables(self) -> tuple[tuple[array, array, int, int, int], ...]:
        """Per bucket: slot → dense target number (-1 gap), slot → segment length, levels J,
        eligible targets, and the sole eligible one when there is one (else -1)."""
        tables = []
        for position in range(len(self.buckets)):
            pieces = [(segment.slot, dense, segment.length)
                      for dense, target in enumerate(self.targets) if target.bucket == position
                      for segment in target.segments]
            slot_count = max((slot for slot, _, _ in pieces), default=-1) + 1
            slot_target = array("i", [-1]) * slot_count
            slot_length = array("d", [0.0]) * slot_count
            for slot, dense, length in pieces:
                slot_target[slot] = dense
                slot_length[slot] = length
            eligible = [dense for dense, target in enumerate(self.targets)
                        if target.bucket == position and target.eligible]
            tables.append((slot_target, slot_length, levels_for(slot_count), len(eligible),
                           eligible[0] if len(eligible) == 1 else -1))
        return tuple(tables)

    @cached_property
    def _eligible(self) -> bytes:
        return bytes(1 if target.eligible else 0 for target in self.targets)

    @cached_property
    def _eligible_count(self) -> int:
        return sum(self._eligible)

    @cached_property
    def _native(self):
        try:
            from . import _native
        except ImportError:
            return None
        return _native.Map(self.seed, self._eligible,
                           [(t.tobytes(), lengths.tobytes(), levels, count, sole)
                            for t, lengths, levels, count, sole in self._tables])

    # ------------------------------------------------------------------ placing

    def _check(self, replicas: int, first_bucket: int) -> None:
        if replicas < 1:
            raise PlacementInputError(f"replicas must be >= 1, got {replicas}")
        if not 0 <= first_bucket < len(self.buckets):
            raise PlacementInputError(f"first bucket {first_bucket} out of range")
        eligible = self._eligible_count
        if eligible < replicas:
            raise PlacementError(f"{replicas} replicas asked, {eligible} eligible targets "
                                 f"(up and not full) in the placement map")

    def place(self, object_id: int, replicas: int = 1, first_bucket: int = 0) -> tuple[int, ...]:
        """The target indices of ``object_id``'s replicas, replica i in bucket first_bucket + i."""
        self._check(replicas, first_bucket)
        object_id &= _MASK
        native = self._native
        if native is not None and replicas <= 64:
            dense = native.place(object_id, replicas, first_bucket)
        else:
            dense = _place_python(self, object_id, replicas, first_bucket)
        return tuple(self.targets[d].index for d in dense)

    def place_dense(self, object_ids: array | bytes | memoryview, replicas: int = 1,
                    first_bucket: int = 0) -> array:
        """Dense target numbers (positions in :attr:`targets`) for many uint64 ids, row by row.

        The batch form for benchmarks and rebalancing: one C call, no tuple per object.
        """
        self._check(replicas, first_bucket)
        native = self._native
        if native is not None:
            out = array("i")
            out.frombytes(native.place_many(object_ids, replicas, first_bucket))
            return out
        ids = array("Q")
        ids.frombytes(bytes(object_ids))
        out = array("i")
        for object_id in ids:
            out.extend(_place_python(self, object_id, replicas, first_bucket))
        return out

    def place_in(self, object_id: int, bucket: int, exclude: Iterable[int] = ()) -> int:
        """The target ``object_id``'s R hits first in ``bucket`` (a replica moved there), skipping
        the targets in ``exclude`` (indices)."""
        if not 0 <= bucket < len(self.buckets):
            raise PlacementInputError(f"bucket {bucket} out of range")
        chosen = [self._by_index[index] for index in exclude if index in self._by_index]
        key = _key(self.seed, object_id & _MASK)
        dense = _place_in_bucket(self, bucket, key, chosen)
        if dense < 0:
            raise PlacementError(f"bucket {self.buckets[bucket].name}: no eligible target left")
        return self.targets[dense].index

    def place_distinct(self, object_id: int, bucket: int, count: int,
                       exclude: Iterable[int] = ()) -> tuple[int, ...]:
        """The first ``count`` distinct eligible targets ``object_id``'s R hits in ``bucket``,
        skipping ``exclude`` (indices): the stripes of one file in one tier.

        Each is :meth:`place_in` with the ones before it excluded, so a membership change
        moves a stripe only when R now hits an added target before it, or its target left.
        Fewer eligible targets than ``count`` is a :class:`PlacementError`.
        """
        if count < 1:
            raise PlacementInputError(f"count must be >= 1, got {count}")
        chosen = list(exclude)
        picked: list[int] = []
        for _ in range(count):
            picked.append(self.place_in(object_id, bucket, chosen))
            chosen.append(picked[-1])
        return tuple(picked)


# ---------------------------------------------------------------------- the Python twin


def _fmix64(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & _MASK
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & _MASK
    k ^= k >> 33
    return k


def _key(seed: int, object_id: int) -> int:
    return _fmix64(object_id ^ _fmix64((seed + _GOLDEN) & _MASK))


def _next(key: int, top: int, counters: list[int]) -> float:
    """The next number of R at level ``top`` (section 3.5): a level-j number inside level j-1's
    range is replaced by level j-1's next number, so growing the range keeps old hits."""
    level = top
    while True:
        raw = _fmix64((key + (level + 1) * _LEVEL_STEP + counters[level] * _GOLDEN) & _MASK)
        counters[level] += 1
        value = (raw >> 11) * _UNIT * (BASE_RANGE * (1 << level))
        if level == 0 or value >= BASE_RANGE * (1 << (level - 1)):
            return value
        level -= 1


def _place_in_bucket(placement: PlacementMap, bucket: int, key: int, chosen: Sequence[int]) -> int:
    slot_target, slot_length, levels, eligible_count, sole_target = placement._tables[bucket]
    slot_count = len(slot_target)
    if slot_count == 0 or eligible_count == 0:
        return -1
    if eligible_count == 1:  # every sequence ends on it: no number drawn
        return -1 if sole_target in chosen else sole_target
    eligible = placement._eligible
    counters = [0] * (levels + 1)
    value = 0.0
    for _ in range(MAX_DRAWS):
        value = _next(key, levels, counters)
        slot = int(value)
        if slot >= slot_count:
            continue
        target = slot_target[slot]
        if target < 0 or value - slot >= slot_length[slot]:
            continue
        if eligible[target] and target not in chosen:
            return target
    start = int(value) % slot_count
    for step in range(slot_count):
        target = slot_target[(start + step) % slot_count]
        if target >= 0 and eligible[target] and target not in chosen:
            return target
    return -1


def _place_python(placement: PlacementMap, object_id: int, replicas: int,
                  first_bucket: int) -> tuple[int, ...]:
    """Algorithm 3's initial distribution in Python, number for number as native/suora.c."""
    key = _key(placement.seed, object_id)
    bucket_count = len(placement.buckets)
    chosen: list[int] = []
    bucket = first_bucket
    for _ in range(replicas):
        target = -1
        for _ in range(bucket_count):
            target = _place_in_bucket(placement, bucket, key, chosen)
            bucket = (bucket + 1) % bucket_count
            if target >= 0:
                break
        if target < 0:
            raise PlacementError(f"{replicas} replicas asked, fewer eligible targets")
        chosen.append(target)
    return tuple(chosen)
