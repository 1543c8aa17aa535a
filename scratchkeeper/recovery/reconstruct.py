"""Reconstruction of one file (the thesis, §4.6.3): lost ranges -> plan -> ranged patches -> switch.

1. Probe the OSTs (one timeout for all) and find the file's failed ones.
2. The lost ranges follow from stripe size, stripe count, each failed OST's position in the
   stripe list and the file size (:meth:`FileLayout.extents_on_ost`); bytes a surviving mirror
   still holds are not lost.
3. A substitute per failed OST: healthy, not in the file's stripe set, least loaded.
4. ``begin_rebuild`` allocates the substitute objects; nothing is visible to readers yet.
5. The ranges are cut into chunks and each chunk is fetched from the source the plan picks
   (the URI recorded at stage-in, other URIs, a surviving mirror) with ranged transfers,
   transient failures retried with backoff and jitter, permanent ones not.
6. Verification. With block digests recorded at stage-in (:mod:`scratchkeeper.digests`), every
   block is checked on arrival against the CRC-32C of the bytes that were staged (a block the
   patch covers only in part is read back and checked once its bytes are all in place); that
   catches corruption in transit and a changed source alike, with no server-side hashing.
   Without them, a range the server vouched for (GridFTP ``CKSM``) is checked as it arrives,
   the server is asked for the whole source's SHA-256, and if any range was not vouched for the
   whole rebuilt file is read back and compared with the SHA-256 recorded at stage-in. Then
   ``commit_rebuild`` switches the layout atomically.

If the source cannot deliver, the rebuild is aborted and the file is reported lost: its
layout is left as it was (bytes on the failed OST unreadable), never half patched.

The work is split along those steps, one layer each: :class:`Recoverer` here takes a request
(a path, the OSTs reported, a rebuild to resume) and holds what recoveries share;
:mod:`.rebuilding` makes one attempt at the file (steps 1-4 and 6, the abort and the report of
a lost file); :mod:`.patching` fetches the lost ranges into the rebuild (step 5). The names
callers use are all importable from here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from .. import digests as block_digests
from ..config import SiteConfig
from ..errors import InputError, RecoveryError
from ..ownership import Owner
from ..planner import records as planner_records
from ..state import StateStore
from ..storage import Extent, OstStatus, StorageBackend
from ..transfer.buffers import BufferPool
from ..transfer.ranged import ReaderPool
from . import records, trust
from .gather import Gathered, PatchSlots, ProbeGroup
from .outcome import WHOLE, Outcome
from .patching import PatchingMixin, SourceLoad
from .rebuilding import RebuildingMixin, _FileRecovery
from .safety import check_inside_scratch
from .trust import FileHints
from .writer import WRITE_GROUP_BYTES, WRITE_QUEUE_BYTES


class Recoverer(RebuildingMixin, PatchingMixin):
    """Recovers files of one storage backend from their sources; safe to share across threads."""

    def __init__(self, backend: StorageBackend, config: SiteConfig, *,
                 load: SourceLoad | None = None, stop: threading.Event | None = None,
                 store: StateStore | None = None):
        self.backend = backend
        self.config = config
        self.store = store  # where stage-in recorded block digests (None: verify without them)
        if store is not None:
            planner_records.open_records(store)  # staged files and their sources' endpoints
            records.open_records(store)  # the requests whose progress the patch records
        # where recovery may fetch from; every reader is opened through it (_open_reader)
        self.policy = trust.SourcePolicy(config.recovery, store)
        self.load = load or SourceLoad()
        # GridFTP connections cost tens of ms (the server forks and logs in): reuse them
        self.readers = ReaderPool(self._open_reader)
        # receive buffers, reused while recoveries are in flight and dropped when none is
        self.buffers = BufferPool(keep_bytes=WRITE_QUEUE_BYTES + WRITE_GROUP_BYTES)
        self._lock = threading.Lock()  # guards the two below
        self._warming: dict[str, threading.Thread] = {}  # connections opened ahead, by URI
        self._recovering = 0  # recover() calls in flight
        # the last probe of every OST (when it ended, what it found), shared by the recoveries
        # that follow it within recovery.probe_reuse (and by recoveryd's periodic check); the
        # probes asked for while one runs are made as one, once it ended (ProbeGroup)
        self._last_probe: tuple[float, list[OstStatus]] | None = None
        self.probes = ProbeGroup(self._run_probe)
        # layout switches asked for while one runs are made together (one sync of the
        # namespace for all the files of a failure that finish at about the same time)
        self.commits = Gathered(lambda items: self.backend.commit_rebuilds(items))
        # and so are their starts (one sync of the namespace for the rebuilds begun together)
        self.begins = Gathered(lambda items: self.backend.begin_rebuilds(items))
        self.stop = stop or threading.Event()
        # the files in recovery at once (recovery.file_workers) patch a few at a time
        self.slots = PatchSlots(config.recovery.patch_streams, self.stop)

    # -- entry point ---------------------------------------------------------------------------
    def recover(self, path: str, *, reported_osts: tuple[int, ...] = (),
                resume_rebuild_id: str | None = None,
                on_rebuild: Callable[[str | None], None] = lambda rebuild_id: None,
                progress: Callable[[int, int], None] | None = None,
                measure_sources: bool = True) -> Outcome:
        """Make ``path`` whole again if it lost bytes; returns what was done (lost included).

        ``on_rebuild`` is told the rebuild id as soon as one exists (None once it is gone), so
        the caller can persist it and a restart resumes instead of starting over.
        """
        with self._lock:
            self._recovering += 1
        try:
            return self._recover(path, reported_osts, resume_rebuild_id, on_rebuild, progress,
                                 measure_sources)
        finally:
            with self._lock:
                self._recovering -= 1
                if not self._recovering:
                    self.buffers.release()  # after the switch: unmapping is off the patch's path

    def _recover(self, path: str, reported_osts: tuple[int, ...],
                 resume_rebuild_id: str | None, on_rebuild: Callable[[str | None], None],
                 progress: Callable[[int, int], None] | None,
                 measure_sources: bool) -> Outcome:
        started = time.monotonic()
        full = self.backend.paths.resolve(path)
        check_inside_scratch(full, self.backend.scratch_root)
        stat = self.backend.stat(full)
        # a daemon acting for the file's owner reads its sources with no more rights than theirs;
        # the sources are root's record of the stage-in, those the site allows
        hints = self.policy.filter(full, FileHints.read(
            self.backend, full, Owner.of(stat.uid, stat.gid), size=stat.size, store=self.store))
        if hints.size is not None and hints.size != stat.size:
            raise RecoveryError(f"{full}: is {stat.size} bytes, {hints.size} were staged in: the "
                                "file changed since, its source no longer describes it")
        layout = self.backend.layout(full)  # read again before each retry below
        if hints.sources and set(reported_osts) & layout.osts():
            # the report names a failed OST of the file (recoveryd's check, a reader's error):
            # its bytes are most likely lost, so the source's connection opens while the OSTs
            # are probed and the rebuild begun (the probe still decides what is rebuilt)
            self._warm(hints.sources[0], hints.owner)
        rebuild = self._resumable(full, resume_rebuild_id)
        blocks = (block_digests.lookup(self.store, full, hints.sha256, stat.size)
                  if self.store is not None else None)
        run = _FileRecovery(full, stat.size, hints, tuple(reported_osts), started, blocks,
                            on_rebuild, progress, measure_sources, Outcome(full, WHOLE),
                            self.config.recovery.substitute_attempts, rebuild=rebuild,
                            resumed=rebuild is not None)
        while True:
            run.outcome.attempts += 1
            if run.outcome.attempts > 1:
                layout = self.backend.layout(full)
            done = self._attempt(run, layout)
            if done is not None:
                return done


def lost_ranges(stripe_size: int, stripe_count: int, position: int, file_size: int) -> list[Extent]:
    """The thesis's formula on its own: bytes stripe ``position`` holds in a plain RAID-0 file."""
    if not 0 <= position < stripe_count:
        raise InputError(f"stripe position {position} outside 0..{stripe_count - 1}")
    round_size = stripe_size * stripe_count
    return [Extent(start, min(stripe_size, file_size - start))
            for start in range(position * stripe_size, file_size, round_size)]
