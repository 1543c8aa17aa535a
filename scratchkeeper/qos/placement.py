"""Replica placement of buckets on devices: design-theoretic declustering and the RAID-1 peers.

An :class:`Allocation` says, for each bucket (a stripe object or a group of them), on which
devices its c copies live, first copy first. Three schemes, as in the flash QoS paper's Figure 7:

* :func:`design_allocation`: bucket -> a rotated block of an (N, c, 1) design;
* :func:`mirrored_allocation`: RAID-1 mirrored, the devices in groups of c that hold the same
  buckets (bucket i on group i mod N/c);
* :func:`chained_allocation`: RAID-1 chained, bucket i on devices i, i+1, ..., i+c-1 (mod N).

Data blocks (stripe objects of files) are many more than buckets; :class:`DataBlockMap` maps a
data block to a bucket, by default ``data_block % buckets`` (the paper's rule for blocks that
frequent itemset mining did not place), with explicit entries from :mod:`scratchkeeper.qos.fim`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scratchkeeper.errors import QosError
from scratchkeeper.qos.designs import BlockDesign


@dataclass(frozen=True)
class Allocation:
    """Bucket -> the devices of its copies (first copy first), on ``devices`` devices."""

    scheme: str
    devices: int
    copies: int
    replicas: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        for bucket, copies in enumerate(self.replicas):
            if len(copies) != self.copies or len(set(copies)) != self.copies:
                raise QosError(f"allocation {self.scheme}: bucket {bucket} has copies {copies}, "
                               f"expected {self.copies} distinct devices")
            if not all(0 <= d < self.devices for d in copies):
                raise QosError(f"allocation {self.scheme}: bucket {bucket} has a device out of "
                               f"range 0..{self.devices - 1}: {copies}")

    @property
    def buckets(self) -> int:
        return len(self.replicas)

    def buckets_on(self, device: int) -> list[int]:
        """The buckets with a copy on ``device`` (the right-hand charts of Figure 7)."""
        return [b for b, copies in enumerate(self.replicas) if device in copies]


def design_allocation(design: BlockDesign, rotations: bool = True) -> Allocation:
    """One bucket per design block, or per block rotation (N(N-1)/(c-1) buckets)."""
    replicas = design.rotations() if rotations else design.blocks
    return Allocation(f"design {design.name}", design.devices, design.copies, replicas)


def mirrored_allocation(devices: int, copies: int, buckets: int) -> Allocation:
    """RAID-1 mirrored: groups of ``copies`` devices holding the same data.

    Bucket i lives on group i mod (N/c); its first copy rotates within the group with
    i div (N/c), as the design's rotations do, so no device is every bucket's primary.
    """
    if devices % copies:
        raise QosError(f"mirrored allocation: {devices} devices do not split into groups of "
                       f"{copies}")
    groups = devices // copies
    replicas = []
    for bucket in range(buckets):
        base = (bucket % groups) * copies
        shift = (bucket // groups) % copies
        members = [base + k for k in range(copies)]
        replicas.append(tuple(members[shift:] + members[:shift]))
    return Allocation("RAID-1 mirrored", devices, copies, tuple(replicas))


def chained_allocation(devices: int, copies: int, buckets: int) -> Allocation:
    """RAID-1 chained: bucket i on devices i, i+1, ..., i+c-1 (mod N)."""
    if copies > devices:
        raise QosError(f"chained allocation: {copies} copies need at least as many devices, "
                       f"got {devices}")
    replicas = tuple(tuple((bucket + k) % devices for k in range(copies))
                     for bucket in range(buckets))
    return Allocation("RAID-1 chained", devices, copies, replicas)


@dataclass
class DataBlockMap:
    """Data block (stripe object id) -> bucket of an allocation.

    ``assigned`` holds the blocks placed on purpose (frequent itemset mining); any other block
    goes to ``block % buckets``.
    """

    allocation: Allocation
    assigned: dict[int, int] = field(default_factory=dict)

    def bucket_of(self, data_block: int) -> int:
        bucket = self.assigned.get(data_block)
        return data_block % self.allocation.buckets if bucket is None else bucket

    def devices_of(self, data_block: int) -> tuple[int, ...]:
        """The devices of the data block's copies, first copy first."""
        return self.allocation.replicas[self.bucket_of(data_block)]


def file_copies(allocation: Allocation, primary: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The devices of a striped file's other c-1 copies, one tuple per copy (a mirror, stripe
    positions in order), given the devices ``primary`` its stripes are on: stripe k's copies
    are the other devices of a bucket of ``allocation`` whose copies include ``primary[k]``,
    and the buckets of the stripes are disjoint, so every mirror's stripes are on distinct
    devices and no two mirrors share one (Lustre's rule for a file's components). QosError
    when no such choice exists (too many stripes for the devices, or primary devices no
    disjoint buckets cover)."""
    if len(set(primary)) != len(primary):
        raise QosError(f"primary devices {list(primary)} repeat a device")
    if len(primary) * allocation.copies > allocation.devices:
        raise QosError(f"{len(primary)} stripes x {allocation.copies} copies need "
                       f"{len(primary) * allocation.copies} devices; {allocation.scheme} has "
                       f"{allocation.devices}")
    candidates = [[b for b in dict.fromkeys(allocation.replicas) if device in b]
                  for device in primary]
    chosen: list[tuple[int, ...]] = []
    used: set[int] = set(primary)

    def search(k: int) -> bool:
        if k == len(primary):
            return True
        for bucket in candidates[k]:
            others = [d for d in bucket if d != primary[k]]
            if used & set(others):
                continue
            chosen.append(tuple(others))
            used.update(others)
            if search(k + 1):
                return True
            chosen.pop()
            used.difference_update(others)
        return False

    if not search(0):
        raise QosError(f"{allocation.scheme}: no disjoint buckets cover the primary devices "
                       f"{list(primary)}")
    return [tuple(chosen[k][j] for k in range(len(primary)))
            for j in range(allocation.copies - 1)]
