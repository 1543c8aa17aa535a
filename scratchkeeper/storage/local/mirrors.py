"""The local store's mirrors: adding one (filled, read back, synced, then switched in with one
``setxattr``) and removing one (switched out, then its objects doomed). Both name the file's
MDT inode in their objects' intents before the switch, so that a crash between the switch and
the namespace's commit is settled by the collector from the inode's layout (docs/storage.rst).
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import replace

from ...errors import InputError, StorageError
from ..layout import LOV_XATTR, FileLayout, LayoutRequest
from .mdt import Inode
from .objects import COPY_CHUNK
from .processes import process_owner

log = logging.getLogger(__name__)


class MirrorsMixin:
    """The mirror side of :class:`~scratchkeeper.storage.local.LocalStripedStore`."""

    def add_mirror(self, path: str, request: LayoutRequest = LayoutRequest()) -> FileLayout:
        self._check_writable()
        node = self._inode(path)
        layout = node.layout
        if layout.mirror_ids == [0]:
            # as in Lustre, the first mirror of a plain file becomes mirror 1
            layout = replace(layout, components=tuple(
                replace(c, mirror_id=1, comp_id=1 << 16 | 1) for c in layout.components))
        mirror_id = max(layout.mirror_ids) + 1
        if request.stripe_size is None:
            request = replace(request, stripe_size=layout.stripe_size)
        if request.stripe_count is None and request.ost_list is None:
            request = replace(request, stripe_count=layout.stripe_count)
        component, _ = self._new_component(request, mirror_id=mirror_id, exclude=layout.osts(),
                                           of_layout=layout)
        claim = process_owner()
        self._claim_objects(component.objects, claim)
        switched = False
        try:
            self._create_objects(component.objects, uid=node.st.st_uid, gid=node.st.st_gid)
            source_digest, copy_digest = hashlib.sha256(), hashlib.sha256()

            def digested():
                for offset, chunk in self._chunks(layout.path, node.size):
                    source_digest.update(chunk)
                    yield offset, chunk
            self._fill_objects(component, digested(), layout.path)
            check = FileLayout((component,), 0, layout.path)
            for offset in range(0, node.size, COPY_CHUNK):
                copy_digest.update(self._read_layout(check, offset,
                                                     min(COPY_CHUNK, node.size - offset)))
            if copy_digest.digest() != source_digest.digest():
                raise StorageError(f"{layout.path}: new mirror {mirror_id} does not read back "
                                   "what was written")
            self._sync_objects(list(component.objects), layout.path)
            new_layout = FileLayout(layout.components + (component,), layout.layout_gen + 1,
                                    layout.path)
            self._mark_committing(component.objects, claim, node.path, node.st.st_ino)
            with self.db.transaction() as conn:
                with self._opened(path) as now:
                    _check_unchanged(node, now)
                    self._set_layout(now, new_layout)
                    switched = True
                self._release_claim(conn, component.objects, claim)
        except BaseException as err:
            if not switched:
                self._drop_objects(component.objects, claim)
                raise
            if not isinstance(err, Exception):
                raise
            log.warning("store: %s: mirror %d added; its intents are left for the collector "
                        "(%s)", layout.path, mirror_id, err)
        return new_layout

    def _set_layout(self, node: Inode, layout: FileLayout) -> None:
        """Switch the inode to ``layout``: one ``setxattr``, atomic for readers."""
        try:
            os.setxattr(node.proc, LOV_XATTR, layout.to_lov())
        except OSError as err:
            raise StorageError(f"{node.path}: cannot change its layout: {err.strerror}") \
                from None

    def _chunks(self, path: str, size: int):
        for offset in range(0, size, COPY_CHUNK):
            yield offset, self.read(path, offset, min(COPY_CHUNK, size - offset))

    def remove_mirror(self, path: str, mirror_id: int) -> FileLayout:
        self._check_writable()
        node = self._inode(path)
        layout = node.layout
        if mirror_id not in layout.mirror_ids:
            raise InputError(f"{layout.path}: no mirror {mirror_id} (mirrors: "
                             f"{', '.join(map(str, layout.mirror_ids))})")
        if len(layout.mirror_ids) == 1:
            raise InputError(f"{layout.path}: mirror {mirror_id} is the last copy of the file")
        kept = tuple(c for c in layout.components if c.mirror_id != mirror_id)
        dropped = [o for c in layout.components if c.mirror_id == mirror_id for o in c.objects]
        new_layout = FileLayout(kept, layout.layout_gen + 1, layout.path)
        claim = process_owner()
        # a crash after the switch and before the doom commits leaves these intents, which
        # the collector settles by the inode's layout (no longer holding them: deleted)
        self._claim_dropped(dropped, claim, node.path, node.st.st_ino)
        switched = False
        try:
            with self.db.transaction() as conn:
                with self._opened(path) as now:
                    _check_unchanged(node, now)
                    self._set_layout(now, new_layout)
                    switched = True
                self._doom(conn, dropped)  # replaces the intents above
        except BaseException:
            if switched:
                self._doom_quietly(dropped)
            else:
                self._release_quietly(dropped, claim)
            raise
        self._collect_garbage()
        return new_layout


def _check_unchanged(before: Inode, now: Inode) -> None:
    if (now.st.st_dev, now.st.st_ino) != (before.st.st_dev, before.st.st_ino) \
            or now.layout.layout_gen != before.layout.layout_gen or now.size != before.size:
        raise StorageError(f"{before.path}: the file changed during the operation; retry")
