"""Rebuilding lost stripes in the local store: new objects on substitute OSTs, patched in
place, and one ``setxattr`` of the file's layout attribute that switches it (the surviving
objects stay), under the namespace's lock after checking the file did not change.

A crash between that ``setxattr`` and the database's commit leaves a rebuild recorded whose
switch happened (the file's layout references its new objects): :meth:`open_rebuilds`,
:meth:`commit_rebuild` and :meth:`abort_rebuild` notice and finish it, never deleting objects
the file holds."""

from __future__ import annotations

import json
import logging
import mmap
import uuid
from dataclasses import replace

from ...errors import InputError, ScratchkeeperError, StorageError, TargetUnavailable
from ..base import Rebuild, substitute_layout
from ..layout import Extent, FileLayout, StripeObject, merge_extents
from .objects import DIRECT_ALIGN, PatchWriter, fsync_dir, span

log = logging.getLogger(__name__)


class RebuildMixin:
    """The rebuild side of :class:`~scratchkeeper.storage.local.LocalStripedStore`."""

    def begin_rebuild(self, path: str, substitutes: dict[int, int], *,
                      same_ids: bool = False) -> Rebuild:
        """``same_ids``: each new object keeps the id of the one it replaces (objects are named
        by OST and id, so no two collide): a move by ``store rebalance`` keeps the file's first
        object id, from which SUORA's key comes."""
        result, = self._begin_rebuilds([(path, substitutes)], same_ids)
        if isinstance(result, BaseException):
            raise result
        return result

    def begin_rebuilds(self, items: list[tuple[str, dict[int, int]]]
                       ) -> list[Rebuild | ScratchkeeperError]:
        """Begin several rebuilds in one namespace transaction (one journal sync for all the
        files of a failure); a file that cannot be begun gets its error in its place."""
        return self._begin_rebuilds(items, False)

    def _begin_rebuilds(self, items: list[tuple[str, dict[int, int]]], same_ids: bool
                        ) -> list[Rebuild | ScratchkeeperError]:
        self._check_writable()
        results: list[Rebuild | ScratchkeeperError | None] = [None] * len(items)
        ready = []
        healthy = self._healthy()
        for index, (path, substitutes) in enumerate(items):
            try:
                ready.append((index, *self._plan_rebuild(path, substitutes, same_ids, healthy)))
            except ScratchkeeperError as err:
                results[index] = err
        if ready:
            with self.db.transaction() as conn:
                for _, rebuild, base, new_objects, _ in ready:
                    conn.execute("INSERT INTO rebuilds(rebuild_id, path, record, base_layout) "
                                 "VALUES (?, ?, ?, ?)",
                                 (rebuild.rebuild_id, base.path, json.dumps(rebuild.to_dict()),
                                  json.dumps(base.to_dict())))
                    owner = f"rebuild:{rebuild.rebuild_id}"
                    conn.executemany("INSERT INTO object_intents(ost_index, object_id, owner) "
                                     "VALUES (?, ?, ?)",
                                     [(o.ost_index, o.object_id, owner) for o in new_objects])
        for index, rebuild, _, new_objects, st in ready:
            try:
                self._create_objects(new_objects, uid=st.st_uid, gid=st.st_gid)
            except OSError as err:  # nothing left behind: the objects made so far go too
                self.abort_rebuild(rebuild)
                results[index] = StorageError(f"{rebuild.path}: rebuild: creating the "
                                              f"substitute objects: {err.strerror or err}")
                continue
            results[index] = rebuild
            log.info("store: rebuild %s of %s begun: %s", rebuild.rebuild_id, rebuild.path,
                     ", ".join(f"OST {f} -> {s}" for f, s in rebuild.substitutes.items()))
        return results

    def _plan_rebuild(self, path: str, substitutes: dict[int, int], same_ids: bool,
                      healthy: set[int]):
        """A rebuild of ``path`` (not recorded yet), its base layout, new objects and stat."""
        node = self._inode(path)
        layout = node.layout
        for substitute in substitutes.values():
            self._check_ost_index(substitute)
            if substitute not in healthy:
                raise TargetUnavailable(f"{layout.path}: substitute OST {substitute} is not "
                                        "available", ost_index=substitute, path=layout.path)
        lost = self._rebuild_plan(layout, node.size, substitutes)
        new_layout = substitute_layout(
            layout, substitutes, (lambda c, p: layout.components[c].objects[p].object_id)
            if same_ids else (lambda c, p: uuid.uuid4().hex))
        rebuild = Rebuild(uuid.uuid4().hex, layout.path, dict(substitutes), node.size,
                          layout.layout_gen, new_layout, lost)
        return rebuild, layout, added_objects(layout, new_layout), node.st

    def _load_rebuild(self, conn, rebuild_id: str) -> Rebuild:
        found = conn.execute("SELECT record FROM rebuilds WHERE rebuild_id = ?",
                             (rebuild_id,)).fetchone()
        if found is None:
            raise StorageError(f"rebuild {rebuild_id}: no such rebuild (committed or aborted)")
        return Rebuild.from_dict(json.loads(found["record"]))

    def write_rebuild_batch(self, rebuild: Rebuild, pieces: list[tuple[int, bytes]], *,
                            record: bool = True) -> None:
        """Patch several lost ranges (with ``record``, one journal update for all of them).

        The bytes go to the disk with ``O_DIRECT`` where they can (:class:`PatchWriter`);
        the rest is not synced here, only its writeback started, and :meth:`commit_rebuild`
        syncs before the layout switch. The journal's "patched" therefore says "written",
        not "on disk": a rebuild resumed after a crash re-verifies what it patched before
        (recovery does), so bytes a power loss took are fetched again.
        """
        self._check_writable()
        extents = [self._check_patch(rebuild, offset, data) for offset, data in pieces]
        writers: dict[StripeObject, PatchWriter] = {}
        try:
            for (offset, data), extent in zip(pieces, extents):
                for comp in rebuild.new_layout.components:
                    lo, hi = span(comp, offset, extent.end)
                    if hi <= lo:
                        continue
                    view = memoryview(data)
                    aligned = isinstance(data, mmap.mmap)  # starts on a page (a BufferPool's)
                    for piece in comp.pieces(lo, hi - lo):
                        obj = comp.objects[piece.position]
                        # only the substitute objects: the surviving ones hold their bytes
                        if obj.ost_index not in rebuild.substitutes.values():
                            continue
                        writer = writers.get(obj)
                        if writer is None:
                            writer = writers[obj] = PatchWriter(
                                lambda flags, obj=obj: self._open_object(obj, flags,
                                                                         rebuild.path))
                        start = piece.file_offset - offset
                        writer.write(view[start:start + piece.length], piece.object_offset,
                                     aligned=aligned and start % DIRECT_ALIGN == 0)
            for writer in writers.values():
                writer.start_writeback()
        finally:
            for writer in writers.values():
                writer.close()
        if record:
            self.record_patched(rebuild, extents)

    def record_patched(self, rebuild: Rebuild, extents: list[Extent]) -> None:
        self._check_writable()
        extents = self._check_recorded(rebuild, extents)
        if not extents:
            return
        with self.db.transaction() as conn:
            current = self._load_rebuild(conn, rebuild.rebuild_id)
            current.patched = merge_extents(current.patched + extents)
            conn.execute("UPDATE rebuilds SET record = ? WHERE rebuild_id = ?",
                         (json.dumps(current.to_dict()), rebuild.rebuild_id))
        rebuild.patched = current.patched

    def read_rebuild(self, rebuild: Rebuild, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise InputError(f"{rebuild.path}: negative offset or length")
        layout = replace(rebuild.new_layout, path=rebuild.path)
        return self._read_through(layout, rebuild.file_size, offset, length, self._healthy())

    def commit_rebuild(self, rebuild: Rebuild, patched: list[Extent] = ()) -> FileLayout:
        result, = self.commit_rebuilds([(rebuild, patched)])
        if isinstance(result, BaseException):
            raise result
        return result

    def commit_rebuilds(self, items: list[tuple[Rebuild, list[Extent]]]
                        ) -> list[FileLayout | ScratchkeeperError]:
        """Switch several rebuilds' files at once: their substitute objects synced (each
        directory once), then one namespace transaction for every switch, one collection.

        A rebuild that cannot be committed (bytes missing, a substitute failed, the file
        changed) gets its error in its place and leaves the others to commit.
        """
        self._check_writable()
        results: list[FileLayout | ScratchkeeperError | None] = [None] * len(items)
        ready, directories = [], set()
        conn = self.db.connection()
        for index, (rebuild, patched) in enumerate(items):
            try:
                patched = self._check_recorded(rebuild, patched)
                current = self._load_rebuild(conn, rebuild.rebuild_id)
                current.patched = merge_extents(current.patched + patched)
                layout = self._inode(current.path).layout
                if not _switched(current, layout):  # else: finished by _switch
                    self._check_complete(current)
                    # the new layout may only point at objects whose bytes are on disk
                    directories |= self._sync_objects(added_objects(layout, current.new_layout),
                                                      current.path, sync_directories=False)
                ready.append((index, rebuild, patched))
            except ScratchkeeperError as err:
                results[index] = err
        for directory in sorted(directories):
            fsync_dir(directory)  # and the objects' names
        if ready:
            with self.db.transaction() as conn:
                for index, rebuild, patched in ready:
                    try:
                        results[index] = self._switch(conn, rebuild, patched)
                    except StorageError as err:  # raised before this switch wrote anything
                        results[index] = err
            self._collect_garbage()
        for (rebuild, _), result in zip(items, results):
            if not isinstance(result, BaseException):
                log.info("store: rebuild %s of %s committed", rebuild.rebuild_id, rebuild.path)
        return results

    def _switch(self, conn, rebuild: Rebuild, patched: list[Extent]) -> FileLayout:
        """One rebuild's layout switch, in the caller's transaction (the store's lock)."""
        current = self._load_rebuild(conn, rebuild.rebuild_id)
        current.patched = merge_extents(current.patched + patched)
        if not self.exists(current.path):
            raise StorageError(f"{current.path}: changed since rebuild {current.rebuild_id} "
                               "began (it is gone); abort it")
        with self._opened(current.path) as node:
            if _switched(current, node.layout):
                self._finish(conn, current)  # an earlier commit switched it, then died
                return replace(node.layout, path=current.path)
            self._check_complete(current)
            if node.layout.layout_gen != current.base_layout_gen \
                    or node.size != current.file_size:
                raise StorageError(f"{current.path}: changed since rebuild {current.rebuild_id} "
                                   "began; abort it and start again")
            self._set_layout(node, current.new_layout)
        self._finish(conn, current, node.layout)
        return replace(current.new_layout, path=current.path)

    def _finish(self, conn, rebuild: Rebuild, base: FileLayout | None = None) -> None:
        """Forget a switched rebuild: its objects now the file's, the replaced ones doomed."""
        if base is None:
            found = conn.execute("SELECT base_layout FROM rebuilds WHERE rebuild_id = ?",
                                 (rebuild.rebuild_id,)).fetchone()
            if found is not None and found["base_layout"]:
                base = FileLayout.from_dict(json.loads(found["base_layout"]))
        conn.execute("DELETE FROM rebuilds WHERE rebuild_id = ?", (rebuild.rebuild_id,))
        conn.execute("DELETE FROM object_intents WHERE owner = ?",
                     (f"rebuild:{rebuild.rebuild_id}",))
        if base is None:
            log.warning("store: rebuild %s of %s: the layout it replaced is unknown; its "
                        "objects are left", rebuild.rebuild_id, rebuild.path)
            return
        self._doom(conn, added_objects(rebuild.new_layout, base))

    def _switched_already(self, conn, rebuild: Rebuild) -> bool:
        """Whether the file's current layout holds the rebuild's new objects; then the
        rebuild is finished here."""
        try:
            layout = self._inode(rebuild.path).layout
        except (InputError, StorageError):
            return False
        if not _switched(rebuild, layout):
            return False
        self._finish(conn, rebuild)
        log.info("store: rebuild %s of %s had switched the layout before a crash; finished",
                 rebuild.rebuild_id, rebuild.path)
        return True

    def abort_rebuild(self, rebuild: Rebuild) -> None:
        """Drop the rebuild's objects, unless its switch happened already (a crash before the
        journal's commit): then the file holds them, and the rebuild is finished instead."""
        self._check_writable()
        with self.db.transaction() as conn:
            found = conn.execute("SELECT record FROM rebuilds WHERE rebuild_id = ?",
                                 (rebuild.rebuild_id,)).fetchone()
            if found is not None and not self._switched_already(
                    conn, Rebuild.from_dict(json.loads(found["record"]))):
                self._abort_in(conn, rebuild.rebuild_id)
        self._collect_garbage()

    def open_rebuilds(self) -> list[Rebuild]:
        """Rebuilds neither committed nor aborted; one whose switch happened before a crash
        is finished on the way (a writer's open only) and not returned."""
        rebuilds = [Rebuild.from_dict(json.loads(row["record"]))
                    for row in self.db.query("SELECT record FROM rebuilds ORDER BY rebuild_id")]
        if self.read_only:
            return rebuilds
        finished = set()
        for rebuild in rebuilds:
            if _switched(rebuild, self._current_layout(rebuild.path)):
                with self.db.transaction() as conn:
                    if self._switched_already(conn, rebuild):
                        finished.add(rebuild.rebuild_id)
        return [r for r in rebuilds if r.rebuild_id not in finished]

    def _current_layout(self, path: str) -> FileLayout | None:
        try:
            return self._inode(path).layout
        except (InputError, StorageError):
            return None


def _switched(rebuild: Rebuild, layout: FileLayout | None) -> bool:
    """Whether ``layout`` references the objects the rebuild made (on its substitute OSTs)."""
    if layout is None:
        return False
    substitutes = set(rebuild.substitutes.values())
    new = {o for c in rebuild.new_layout.components for o in c.objects
           if o.ost_index in substitutes}
    return bool(new & {o for c in layout.components for o in c.objects})


def added_objects(before: FileLayout, after: FileLayout) -> list[StripeObject]:
    """Objects ``after`` has that ``before`` does not."""
    known = {o for c in before.components for o in c.objects}
    return [o for c in after.components for o in c.objects if o not in known]
