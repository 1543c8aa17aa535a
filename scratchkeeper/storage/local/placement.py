"""Where the local store puts a new file's stripes and mirrors: SUORA or the least-loaded OSTs
(``storage.placement``; docs/placement.rst "In the store", docs/storage.rst "Allocation").

SUORA (:mod:`scratchkeeper.placement.suora`) needs an object id per file: the store uses 64 bits
of a hash of the file's first object id. That id is drawn at random when the file is created,
before its OSTs are chosen (the MDT inode, the other stable identity, exists only after the
objects), and it is kept in the inode as ``security.scratchkeeper.placement``, which also marks
the file as placed by SUORA, so ``store rebalance`` looks only at files SUORA placed.

The map: one bucket per performance class of ``storage.pool_tiers`` (slowest first), else one
bucket of every OST; a request naming a pool gets a one-bucket map of that pool's OSTs. An
OST's capacity is the size of the file system its directory lives on divided by the number of
the store's OSTs on that file system: OSTs sharing one file system weigh the same, a tmpfs OST
weighs its tmpfs. A bucket's unit (eq. 1's p) is its lowest-numbered OST's capacity, not the
mean, so raising ``storage.ost_count`` only appends segments and moves only the objects SUORA
moves onto the new OSTs. Failed OSTs stay in the map as failed: skipped, their slots kept.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from ...errors import InputError, PlacementError, ScratchkeeperError, StorageError, TargetUnavailable
from ...placement import PlacementMap, TargetState
from ..base import OST_ACTIVE
from ..layout import LOV_XATTR, FileLayout, LayoutComponent, LayoutRequest, StripeObject
from .objects import directory_bytes

log = logging.getLogger(__name__)

#: marks a file placed by SUORA and names the object id its placement key comes from
PLACEMENT_XATTR = "security.scratchkeeper.placement"
PLACEMENTS = ("least-loaded", "suora")
#: seconds a SUORA map built for the mount's new files is kept while no OST changes state
MAP_REFRESH = 10.0
#: bytes a rebalance copies at a time
MOVE_CHUNK = 8 << 20


def placement_key(object_id: str) -> int:
    """SUORA's 64-bit object id of the file whose first object is ``object_id``."""
    return int.from_bytes(hashlib.blake2b(object_id.encode(), digest_size=8).digest(), "big")


@dataclass(frozen=True)
class FileMove:
    """A SUORA-placed file whose primary stripes SUORA would now put elsewhere."""

    path: str
    current_osts: tuple[int, ...]
    placed_osts: tuple[int, ...]
    objects: int  # objects on OSTs the new placement leaves
    bytes: int    # their bytes (the file's data on them, holes not counted)

    def to_dict(self) -> dict:
        return {"path": self.path, "current_osts": list(self.current_osts),
                "placed_osts": list(self.placed_osts), "objects": self.objects,
                "bytes": self.bytes}


@dataclass
class RebalancePlan:
    """What ``store rebalance`` would move: files SUORA placed whose placement changed."""

    moves: list[FileMove] = field(default_factory=list)
    files_checked: int = 0       # files placed by SUORA
    files_not_suora: int = 0     # files placed otherwise (least-loaded, explicit OSTs)

    def to_dict(self) -> dict:
        return {"files_checked": self.files_checked, "files_not_suora": self.files_not_suora,
                "files_to_move": len(self.moves),
                "objects_to_move": sum(m.objects for m in self.moves),
                "bytes_to_move": sum(m.bytes for m in self.moves),
                "moves": [m.to_dict() for m in self.moves]}


class PlacementMixin:
    """Allocation of the local store's OSTs; expects ``pools``, ``tiers``, ``placement``,
    ``ost_count`` and the namespace and object helpers of :class:`LocalStripedStore`."""

    # -- choosing OSTs -------------------------------------------------------------------------
    def _new_component(self, request: LayoutRequest, *, mirror_id: int = 0,
                       exclude: set[int] = frozenset(), of_layout: FileLayout | None = None
                       ) -> tuple[LayoutComponent, dict[str, bytes]]:
        """A new component's objects on the chosen OSTs, and the inode attributes that record
        how they were chosen (only a new file's first component is marked). ``of_layout``: the
        file a mirror is added to."""
        stripe_size = request.stripe_size or self.default_stripe_size
        first_id = uuid.uuid4().hex
        marks: dict[str, bytes] = {}
        if self.placement == "suora" and request.ost_list is None:
            if of_layout is None:
                osts = self._suora_osts(request, placement_key(first_id), set(exclude))
                marks = {PLACEMENT_XATTR: f"suora {first_id}".encode()}
            else:
                key = placement_key(of_layout.components[0].objects[0].object_id)
                osts = self._suora_osts(request, key, set(exclude),
                                        start=self._mirror_bucket(of_layout, request.pool))
        else:
            osts = self._choose_osts(request, set(exclude))
        objects = tuple(StripeObject(i, first_id if n == 0 else uuid.uuid4().hex)
                        for n, i in enumerate(osts))
        return LayoutComponent(stripe_size=stripe_size, objects=objects, mirror_id=mirror_id,
                               comp_id=mirror_id << 16 | 1 if mirror_id else 1,
                               pool=request.pool,
                               flags="init,prefer" if request.prefer and mirror_id else "init"
                               ), marks

    def _checked_candidates(self, request: LayoutRequest, exclude: set[int]) -> set[int]:
        healthy = self._healthy()
        candidates = healthy - exclude
        if request.pool is not None:
            if request.pool not in self.pools:
                raise InputError(f"pool {request.pool!r}: no such pool (known: "
                                 f"{', '.join(sorted(self.pools)) or 'none'})")
            candidates &= set(self.pools[request.pool])
        if not candidates:
            raise TargetUnavailable("no healthy OST to place the file on")
        return candidates

    def _stripe_count_for(self, request: LayoutRequest, available: int) -> int:
        count = request.stripe_count if request.stripe_count is not None else \
            self.default_stripe_count
        # like Lustre, a count larger than the OSTs available is reduced, -1 means all
        return available if count == -1 else min(count, available)

    def _choose_osts(self, request: LayoutRequest, exclude: set[int]) -> tuple[int, ...]:
        """An explicit list as given (checked), else the least-loaded healthy OSTs (by object
        count) of the pool or of the store."""
        request.check()
        if request.ost_list is not None:
            healthy = self._healthy()
            for index in request.ost_list:
                self._check_ost_index(index)
                if index not in healthy:
                    raise TargetUnavailable(f"OST {index} is not available", ost_index=index)
                if index in exclude:
                    raise InputError(f"OST {index} already holds a copy of this file")
            return tuple(request.ost_list)
        candidates = self._checked_candidates(request, exclude)
        count = self._stripe_count_for(request, len(candidates))
        load = {i: self._object_count(i) for i in candidates}
        ordered = sorted(candidates, key=lambda i: (load.get(i, 0), i))
        return tuple(sorted(ordered[:count], key=lambda i: (load.get(i, 0), i)))

    def _suora_osts(self, request: LayoutRequest, key: int, exclude: set[int], *,
                    start: int = 0, placement: PlacementMap | None = None) -> tuple[int, ...]:
        """``stripe_count`` distinct OSTs SUORA gives ``key`` in bucket ``start`` (or the next
        one with an eligible OST left), none of them in ``exclude``."""
        request.check()
        self._checked_candidates(request, exclude)  # the same refusals as least-loaded
        placement = placement or self._placement_map(request.pool)
        buckets = len(placement.buckets)
        for step in range(buckets):
            bucket = (start + step) % buckets
            eligible = sum(1 for t in placement.targets
                           if t.bucket == bucket and t.eligible and t.index not in exclude)
            if eligible:
                count = self._stripe_count_for(request, eligible)
                return placement.place_distinct(key, bucket, count, exclude)
        raise TargetUnavailable("no healthy OST left in any placement bucket")

    def place_new_file(self, first_id: str, stripe_count: int,
                       pool: str | None) -> tuple[int, ...]:
        """SUORA's OSTs for a new file whose first object id is ``first_id`` (what the scratch
        mount asks for the files created through it): the map is built again when an OST's
        state changed or after :data:`MAP_REFRESH` seconds (capacities)."""
        request = LayoutRequest(stripe_count=stripe_count, pool=pool)
        states = self._ost_states()
        cached = self._map_cache.get(pool)
        if cached is None or cached[1] != states or time.monotonic() - cached[0] > MAP_REFRESH:
            cached = self._map_cache[pool] = (time.monotonic(), states,
                                              self._placement_map(pool))
        return self._suora_osts(request, placement_key(first_id), set(), placement=cached[2])

    def replica_osts(self, layout: FileLayout, size: int,
                     count: int | None = None) -> tuple[int, ...]:
        """With SUORA: the file's key in the fastest class whose free space takes the replica
        (a job about to run reads it from the fastest pool with room), the slower ones in turn;
        least used otherwise."""
        if self.placement != "suora":
            return super().replica_osts(layout, size, count)
        placement = self._placement_map(None)
        key = placement_key(layout.components[0].objects[0].object_id)
        request = LayoutRequest(stripe_count=count or layout.stripe_count)
        taken = set(layout.osts())
        free = self._bucket_free(placement)
        for bucket in range(len(placement.buckets) - 1, -1, -1):
            eligible = [t.index for t in placement.targets
                        if t.bucket == bucket and t.eligible and t.index not in taken]
            if eligible and free[bucket] >= size:
                count = self._stripe_count_for(request, len(eligible))
                return tuple(sorted(placement.place_distinct(key, bucket, count, taken)))
        raise TargetUnavailable(f"{layout.path}: no class with a healthy OST outside the "
                                f"primary's {sorted(taken)} and {size} bytes free for a replica",
                                path=layout.path)

    def pick_substitute(self, layout: FileLayout, *, exclude: set[int] = frozenset(),
                        osts=None, failed: int | None = None) -> int:
        """With SUORA: the OST the file's key maps to next in the failed OST's class (the
        paper's remapping of a failed target's objects), outside the file's OSTs and the
        unhealthy ones of ``osts``; least loaded otherwise, or when that class has none left."""
        if self.placement == "suora" and failed is not None:
            placement = self._placement_map(None)
            bucket = next((t.bucket for t in placement.targets if t.index == failed), None)
            unhealthy = {o.ost_index for o in osts or () if not o.healthy}
            if bucket is not None:
                try:
                    return placement.place_in(
                        placement_key(layout.components[0].objects[0].object_id), bucket,
                        set(layout.osts()) | set(exclude) | unhealthy)
                except PlacementError:
                    pass
        return super().pick_substitute(layout, exclude=exclude, osts=osts)

    def _bucket_free(self, placement: PlacementMap) -> list[int]:
        """Free bytes of each bucket's OST file systems, each file system counted once."""
        free = [0] * len(placement.buckets)
        seen: set[tuple[int, int]] = set()
        for target in placement.targets:
            directory = self._ost_dir(target.index)
            try:
                device = os.stat(directory).st_dev
                if (target.bucket, device) in seen:
                    continue
                seen.add((target.bucket, device))
                vfs = os.statvfs(directory)
            except OSError:
                continue
            free[target.bucket] += vfs.f_bavail * vfs.f_frsize
        return free

    def _mirror_bucket(self, layout: FileLayout, pool: str | None) -> int:
        """The bucket a new mirror starts in: the one after the primary's, one further per
        mirror the file has (replicas on consecutive buckets, the SUORA paper's Algorithm 3)."""
        if pool is not None:
            return 0
        primary = layout.components[0].objects[0].ost_index
        for position, (_, members) in enumerate(self._placement_buckets(None)):
            if primary in members:
                return position + len(layout.mirror_ids)
        return 0

    def _object_count(self, ost_index: int) -> int:
        """Objects on an OST: the load the least-loaded rule balances."""
        return _entry_count(self._ost_dir(ost_index))

    # -- the map -------------------------------------------------------------------------------
    def _placement_buckets(self, pool: str | None) -> list[tuple[str, list[int]]]:
        """``[(bucket name, [OST index, ...]), ...]`` slowest first."""
        if pool is not None:
            return [(f"pool:{pool}", sorted(self.pools[pool]))]
        if self.tiers:
            return [(tier, sorted({i for name in names for i in self.pools[name]}))
                    for tier, names in self.tiers]
        return [("all", list(range(self.ost_count)))]

    def _ost_capacities(self, indices) -> dict[int, float]:
        """Each OST's share of the file system its directory is on (module docstring)."""
        sizes: dict[int, tuple[int, int]] = {}
        for index in indices:
            directory = self._ost_dir(index)
            if not directory.exists():
                directory = self._failed_dir(index)
            try:
                vfs, device = os.statvfs(directory), os.stat(directory).st_dev
            except OSError:  # a directory gone under us: count it on the store's file system
                vfs, device = os.statvfs(self.store_root), os.stat(self.store_root).st_dev
            sizes[index] = (device, max(1, vfs.f_blocks * vfs.f_frsize))
        sharing = Counter(device for device, _ in sizes.values())
        return {index: size / sharing[device] for index, (device, size) in sizes.items()}

    def _placement_map(self, pool: str | None) -> PlacementMap:
        """SUORA's map of the store's OSTs as they are now (failed ones failed)."""
        states = self._ost_states()
        capacities = self._ost_capacities(states)
        pools, units = [], []
        for name, members in self._placement_buckets(pool):
            members = [i for i in members if i in states]
            pools.append((name, [(i, capacities[i]) for i in members]))
            units.append(capacities[members[0]] if members else 1.0)
        placement = PlacementMap.build(pools, units=units)
        placed = {t.index for t in placement.targets}
        for index, state in states.items():
            if state != OST_ACTIVE and index in placed:
                placement = placement.with_state(index, TargetState.FAILED)
        return placement

    # -- reports -------------------------------------------------------------------------------
    def placement_report(self) -> list[dict]:
        """Per OST: state, pools, performance class, objects and bytes on it. Hot objects are
        ``None``: nothing feeds the hotness table yet."""
        self._owner_only("counting the objects on each OST")
        tier_of = {pool: tier for tier, names in self.tiers for pool in names}
        rows = []
        for index, state in sorted(self._ost_states().items()):
            directory = self._ost_dir(index)
            if not directory.exists():
                directory = self._failed_dir(index)
            pools = sorted(name for name, members in self.pools.items() if index in members)
            rows.append({"ost_index": index, "name": f"ost{index:04d}", "state": state,
                         "pools": pools,
                         "tier": next((tier_of[p] for p in pools if p in tier_of), None),
                         "objects": _entry_count(directory),
                         "bytes": directory_bytes(directory), "hot_objects": None})
        return rows

    def rebalance_plan(self) -> RebalancePlan:
        """The files SUORA placed whose primary stripes it would now place on other OSTs
        (OSTs added, an OST failed): by SUORA's construction, only those of the segments the
        change touched."""
        # every file's placement: a user's walk would see only the files it may reach
        self._owner_only("planning the moves of every file")
        plan = RebalancePlan()
        maps: dict[str | None, PlacementMap] = {}
        for path, mdt_path in self._walk_files():
            try:
                mark = os.getxattr(mdt_path, PLACEMENT_XATTR, follow_symlinks=False)
                lov = os.getxattr(mdt_path, LOV_XATTR, follow_symlinks=False)
                size = os.stat(mdt_path, follow_symlinks=False).st_size
            except FileNotFoundError:
                continue  # removed while we walked
            except OSError as err:
                if err.errno == errno.ENODATA:
                    plan.files_not_suora += 1
                    continue
                raise StorageError(f"{path}: cannot read its layout: {err.strerror}") from None
            layout = FileLayout.from_lov(lov, path)
            kind, _, first_id = mark.decode("ascii", "replace").partition(" ")
            primary = next((c for c in layout.components
                            if c.objects and c.objects[0].object_id == first_id), None)
            if kind != "suora" or primary is None:
                plan.files_not_suora += 1  # its first mirror was removed: no longer SUORA's
                continue
            plan.files_checked += 1
            if primary.pool not in maps:
                maps[primary.pool] = self._placement_map(primary.pool)
            request = LayoutRequest(stripe_count=primary.stripe_count, pool=primary.pool)
            try:
                placed = self._suora_osts(request, placement_key(first_id), set(),
                                          placement=maps[primary.pool])
            except (PlacementError, TargetUnavailable, InputError) as err:
                raise StorageError(f"{path}: SUORA cannot place it now: {err}") from None
            current = primary.ost_list
            if set(placed) == set(current):
                continue
            leaving = [n for n, obj in enumerate(primary.objects) if obj.ost_index not in placed]
            plan.moves.append(FileMove(path, current, placed, len(leaving),
                                       sum(primary.object_size(n, size) for n in leaving)))
        return plan


    def rebalance(self, plan: RebalancePlan, *, quiet: float = 60.0,
                  progress: Callable[[FileMove, str], None] | None = None) -> list[dict]:
        """Carry out ``plan``: each file's objects on OSTs SUORA no longer gives it are copied
        to the OSTs it gives instead (same stripe positions, same object ids) and the layout
        switched as a rebuild's is (``begin_rebuild``/``commit_rebuild``: the new objects synced
        first, the file unchanged checked under the store's lock). A file written less than
        ``quiet`` seconds ago is left (in use), and one that changed during its copy (size,
        mtime, ctime, layout) is left as it was, its copy dropped. One result per move."""
        self._check_writable()
        self._abort_stale_moves()
        results = []
        for move in plan.moves:
            try:
                state, detail = self._move_file(move, quiet)
            except (ScratchkeeperError, FileNotFoundError) as err:
                state, detail = "failed", str(err)
            results.append({**move.to_dict(), "state": state, "detail": detail})
            if progress is not None:
                progress(move, state)
        return results

    def _abort_stale_moves(self) -> None:
        """Rebuilds a killed rebalance left: those replacing only healthy OSTs (recovery
        replaces failed ones)."""
        healthy = self._healthy()
        for rebuild in self.open_rebuilds():
            if rebuild.substitutes and all(o in healthy for o in rebuild.substitutes):
                log.info("store: aborting rebuild %s of %s (a move a stopped rebalance left)",
                         rebuild.rebuild_id, rebuild.path)
                self.abort_rebuild(rebuild)

    def _move_file(self, move: FileMove, quiet: float) -> tuple[str, str]:
        node = self._inode(move.path)
        age = time.time() - node.st.st_mtime
        if age < quiet:
            return "skipped", f"written {age:.0f} s ago (in use; --quiet {quiet:g} s)"
        if not any(c.ost_list == tuple(move.current_osts) for c in node.layout.components):
            return "skipped", "its layout changed since the plan"
        leaving = [o for o in move.current_osts if o not in move.placed_osts]
        arriving = [o for o in move.placed_osts if o not in move.current_osts]
        taken = node.layout.osts() & set(arriving)
        if taken:
            return "skipped", f"another mirror of the file holds OSTs {sorted(taken)}"
        before = (node.st.st_mtime_ns, node.st.st_ctime_ns, node.size, node.layout.layout_gen)
        rebuild = self.begin_rebuild(move.path, dict(zip(leaving, arriving)), same_ids=True)
        try:
            for extent in rebuild.lost:
                for offset in range(extent.offset, extent.end, MOVE_CHUNK):
                    length = min(MOVE_CHUNK, extent.end - offset)
                    self.write_rebuild(rebuild, offset, self.read(move.path, offset, length))
            now = self._inode(move.path)
            if (now.st.st_mtime_ns, now.st.st_ctime_ns, now.size,
                    now.layout.layout_gen) != before:
                raise StorageError(f"{move.path}: written during its move; left where it was")
            self.commit_rebuild(rebuild)
        except BaseException:
            self.abort_rebuild(rebuild)
            raise
        return "moved", ", ".join(f"OST {a} -> {b}" for a, b in zip(leaving, arriving))


def _entry_count(directory) -> int:
    """Objects in an OST directory (probe files, named with a leading dot, not counted)."""
    try:
        with os.scandir(directory) as entries:
            return sum(1 for e in entries if not e.name.startswith("."))
    except OSError:
        return 0
