"""The writer of a rebuild: the chunks every patch lane fetched, written as they arrive.

Lanes (:mod:`.patching`) hand pieces over and go on receiving; one thread per rebuild writes
them in groups and journals the progress, so fetching and writing overlap with bounded memory.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ..storage import Extent, Rebuild, StorageBackend
from ..transfer.buffers import BufferPool
from .gather import PatchBudget

WRITE_QUEUE_BYTES = 32 << 20  # most fetched bytes waiting for the writer (then lanes wait)
WRITE_GROUP_BYTES = 8 << 20  # most bytes the writer takes at once (written in one call)


class RebuildWriter:
    """Writes the chunks every lane fetched as they arrive, one writer thread per rebuild.

    Lanes hand their pieces over and go on receiving; the writer takes what has queued up (at
    most :data:`WRITE_GROUP_BYTES`) and writes it in one call while the lanes fetch more. Once
    at least ``sync_bytes`` were written and ``interval`` seconds passed since the last one,
    it records them as patched in one journal update (what a crash makes a resumed rebuild
    fetch again: each update costs a few fsyncs, so a patch that ends sooner is recorded by
    its commit alone); the ones written after the last update are returned by :meth:`drain`
    for the commit to record. A lane waits
    only while ``2 * sync_bytes`` (at most :data:`WRITE_QUEUE_BYTES`) are queued besides the
    group being written: bounded memory, and with a tiny ``sync_bytes`` the lanes keep in step
    with the writer.

    ``budget``: the bytes in flight of every patch (:class:`~.gather.PatchBudget`); each piece
    handed over is given back to it once written (or dropped after a failed write).
    """

    def __init__(self, backend: StorageBackend, rebuild: Rebuild,
                 written: Callable[[Extent, bool], None], *, sync_bytes: int, interval: float,
                 buffers: BufferPool | None = None, budget: PatchBudget | None = None):
        self.backend = backend
        self.buffers = buffers  # where written pieces' buffers go back to
        self.budget = budget
        self.rebuild = rebuild
        self.sync_bytes = sync_bytes
        self.interval = interval
        self.last_record = time.monotonic()
        self.limit = min(WRITE_QUEUE_BYTES, 2 * sync_bytes)
        self.written = written
        self.cond = threading.Condition()
        self.queue: list[tuple[Extent, bytes, bool]] = []
        self.queued_bytes = 0  # handed over, not yet taken by the writer
        self.closing = False
        self.error: BaseException | None = None
        self.unrecorded: list[Extent] = []
        self.unrecorded_bytes = 0
        self.thread = threading.Thread(target=self._run, name="patch-write", daemon=True)
        self.thread.start()

    def add(self, piece: tuple[Extent, bytes, bool]) -> None:
        with self.cond:
            while self.queued_bytes >= self.limit and self.error is None:
                self.cond.wait()
            if self.error is not None:
                raise self.error  # a failed substitute surfaces in the lanes too
            self.queue.append(piece)
            self.queued_bytes += len(piece[1])
            self.cond.notify_all()

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.queue and not self.closing:
                    self.cond.wait()
                if not self.queue:
                    return
                # a group of at most WRITE_GROUP_BYTES, no longer counted as queued: the lanes
                # go on receiving while it is written
                taken, size = 0, 0
                while taken < len(self.queue) and (not taken or size < WRITE_GROUP_BYTES):
                    size += len(self.queue[taken][1])
                    taken += 1
                group, self.queue = self.queue[:taken], self.queue[taken:]
                self.queued_bytes -= size
                self.cond.notify_all()
            try:
                try:
                    self.backend.write_rebuild_batch(
                        self.rebuild, [(extent.offset, data) for extent, data, _ in group],
                        record=False)
                finally:
                    if self.budget is not None:
                        self.budget.give(size)
                for extent, data, was_verified in group:
                    self.written(extent, was_verified)
                    if self.buffers is not None:
                        self.buffers.give(data)
                self.unrecorded += [extent for extent, _, _ in group]
                self.unrecorded_bytes += sum(extent.length for extent, _, _ in group)
                if (self.unrecorded_bytes >= self.sync_bytes
                        and time.monotonic() - self.last_record >= self.interval):
                    self.backend.record_patched(self.rebuild, self.unrecorded)
                    self.unrecorded, self.unrecorded_bytes = [], 0
                    self.last_record = time.monotonic()
            except BaseException as err:
                with self.cond:
                    self.error = err
                    if self.budget is not None:  # dropped: they will never be written
                        self.budget.give(sum(len(data) for _, data, _ in self.queue))
                    self.queue, self.queued_bytes = [], 0
                    self.cond.notify_all()
                return

    def drain(self) -> list[Extent]:
        """Wait until every piece handed over is written; the extents not recorded yet."""
        self.close()
        if self.error is not None:
            raise self.error
        return self.unrecorded

    def close(self) -> None:
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        self.thread.join()
