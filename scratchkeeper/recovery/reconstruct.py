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

The files of an OST failure are recovered as one batch (:meth:`Recoverer.recover_batch`,
:func:`process_batch`): their requests claimed in one transaction, one probe of their OSTs (the
periodic check's probe of every OST serving the choice of substitutes), their rebuilds begun in
one namespace transaction, every file's lost ranges in flight at once within
``recovery.patch_budget`` bytes, their layouts switched in one namespace transaction and their
requests closed in one. A single file is a batch of one.

The work is split along those steps, one layer each: :class:`Recoverer` here takes requests
(a path, the OSTs reported, a rebuild to resume) and holds what recoveries share;
:mod:`.rebuilding` makes the attempts at the files of a batch (steps 1-4 and 6, the aborts and
the reports of lost files); :mod:`.patching` fetches one file's lost ranges into its rebuild
(step 5).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from .. import digests as block_digests
from ..config import SiteConfig
from ..errors import InputError, RecoveryError, ScratchkeeperError
from ..ownership import Owner
from ..planner import records as planner_records
from ..state import StateStore
from ..storage import Extent, OstStatus, Rebuild, StorageBackend
from ..storage.base import XATTR_PREFIX
from ..transfer.buffers import BufferPool
from ..transfer.ranged import ReaderPool
from . import records, trust
from .gather import Gathered, PatchBudget, PatchSlots, ProbeGroup, RecoveryInterrupted
from .outcome import LOST, WHOLE, Outcome
from .patching import PatchingMixin, SourceLoad
from .rebuilding import RebuildingMixin, _FileRecovery
from .safety import check_inside_scratch
from .trust import FileHints

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FileRequest:
    """One file to recover: its path, the OSTs its request names, the rebuild to resume."""

    path: str
    reported_osts: tuple[int, ...] = ()
    resume_rebuild_id: str | None = None


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
        # the bytes in flight of every patch, and the receive buffers that hold them: reused
        # while recoveries are in flight and dropped when none is
        self.budget = PatchBudget(config.recovery.patch_budget)
        self.buffers = BufferPool(keep_bytes=config.recovery.patch_budget)
        self._lock = threading.Lock()  # guards the two below
        # connections opened ahead, by URI: the thread opening one, and when it began
        self._warming: dict[str, tuple[threading.Thread, float]] = {}
        self._recovering = 0  # recover() calls in flight
        # the last probe of every OST (when it ended, what it found), shared by the recoveries
        # that follow it within recovery.probe_reuse (and by recoveryd's periodic check); the
        # probes asked for while one runs are made as one, once it ended (ProbeGroup)
        self._last_probe: tuple[float, list[OstStatus]] | None = None
        self.probes = ProbeGroup(self._run_probe)
        # a batch's layout switches are one call (one sync of the namespace for all its files),
        # and those other recoveries ask for while one runs are made together with the next
        self.commits = Gathered(lambda items: self.backend.commit_rebuilds(items))
        # and so are their starts
        self.begins = Gathered(lambda items: self.backend.begin_rebuilds(items))
        self.stop = stop or threading.Event()
        # recoveries (a batch, or a file) patching at once (recovery.patch_streams)
        self.slots = PatchSlots(config.recovery.patch_streams, self.stop)

    # -- entry points --------------------------------------------------------------------------
    def recover(self, path: str, *, reported_osts: tuple[int, ...] = (),
                resume_rebuild_id: str | None = None,
                on_rebuild: Callable[[str | None], None] = lambda rebuild_id: None,
                progress: Callable[[int, int], None] | None = None,
                measure_sources: bool = True) -> Outcome:
        """Make ``path`` whole again if it lost bytes; returns what was done (lost included).

        ``on_rebuild`` is told the rebuild id as soon as one exists (None once it is aborted;
        the caller closing the request forgets a committed one), so the caller can persist it
        and a restart resumes instead of starting over.
        """
        def named(rebuilds: dict[int, Rebuild | None]) -> None:
            rebuild = rebuilds[0]
            on_rebuild(rebuild.rebuild_id if rebuild is not None else None)

        result, = self.recover_batch([FileRequest(path, tuple(reported_osts), resume_rebuild_id)],
                                     on_rebuilds=named, progress=progress,
                                     measure_sources=measure_sources)
        if isinstance(result, BaseException):
            raise result
        return result

    def recover_batch(self, requests: list[FileRequest], *,
                      on_rebuilds: Callable[[dict[int, Rebuild | None]], None] | None = None,
                      progress: Callable[[int, int], None] | None = None,
                      measure_sources: bool = True) -> list[Outcome | BaseException]:
        """Recover the files of ``requests`` together: what each came to, in order (an
        exception in a file's place ended its recovery; :class:`RecoveryInterrupted`: the
        service is stopping and its rebuild is left to resume).

        One probe of their OSTs, their rebuilds begun in one call, every file's lost ranges
        patched at once within ``recovery.patch_budget``, and their layouts switched in one
        call; a file that needs another attempt (a substitute failed, a checksum differed)
        makes it with the others that do. ``on_rebuilds`` is told the rebuilds begun (by the
        index of their request), all those of one attempt at once, and a rebuild aborted
        (None), so that the caller records them and a restart resumes them.
        """
        started = time.monotonic()
        with self._lock:
            self._recovering += 1
        try:
            results: list[Outcome | BaseException | None] = [None] * len(requests)
            open_rebuilds = (self.backend.open_rebuilds()
                             if any(r.resume_rebuild_id for r in requests) else [])
            runs = []
            room = self.budget.total
            for index, request in enumerate(requests):
                try:
                    run = self._prepare(index, request, started, open_rebuilds, on_rebuilds,
                                        progress, measure_sources)
                except Exception as err:  # noqa: BLE001 - the file's own end, not the batch's
                    results[index] = err
                    continue
                runs.append(run)
                # a report naming a failed OST of the file (recoveryd's check, a reader's
                # error) says its bytes there are most likely lost: the source's connection
                # opens while the OSTs are probed and the rebuild begun (the probe still
                # decides what is rebuilt), for the files the patch budget lets in first
                layout = run.layout
                reported = set(run.reported_osts) & layout.osts()
                if reported and room > 0 and run.hints.sources:
                    self._warm(run.hints.sources[0], run.hints.owner)
                    room -= sum(e.length for e in layout.lost_extents(reported, run.size))

            def begun(files: list[_FileRecovery]) -> None:
                if on_rebuilds is not None:
                    on_rebuilds({run.index: run.rebuild for run in files})

            for run, result in zip(runs, self._recover_together(runs, begun)):
                results[run.index] = result
            return [r if r is not None else RecoveryError("not recovered") for r in results]
        finally:
            with self._lock:
                self._recovering -= 1
                if not self._recovering:
                    self.buffers.release()  # after the switch: unmapping is off the patch's path

    def _prepare(self, index: int, request: FileRequest, started: float,
                 open_rebuilds: list[Rebuild],
                 on_rebuilds: Callable[[dict[int, Rebuild | None]], None] | None,
                 progress: Callable[[int, int], None] | None,
                 measure_sources: bool) -> _FileRecovery:
        """What one file's attempts start from: its record, layout and block digests."""
        full = self.backend.paths.resolve(request.path)
        check_inside_scratch(full, self.backend)
        stat = self.backend.stat(full)
        # a daemon acting for the file's owner reads its sources with no more rights than theirs;
        # the sources are root's record of the stage-in, those the site allows
        hints = self.policy.filter(full, FileHints.read(
            self.backend, full, Owner.of(stat.uid, stat.gid), size=stat.size, store=self.store))
        if hints.size is not None and hints.size != stat.size:
            raise RecoveryError(f"{full}: is {stat.size} bytes, {hints.size} were staged in: the "
                                "file changed since, its source no longer describes it")
        layout = self.backend.layout(full)  # read again before each retry
        rebuild = self._resumable(full, request.resume_rebuild_id, open_rebuilds)
        blocks = (block_digests.lookup(self.store, full, hints.sha256, stat.size)
                  if self.store is not None else None)

        def aborted(rebuild: Rebuild | None) -> None:
            if on_rebuilds is not None:
                on_rebuilds({index: rebuild})

        return _FileRecovery(index, full, stat.size, hints, tuple(request.reported_osts),
                             started, blocks, aborted, progress, measure_sources,
                             Outcome(full, WHOLE), self.config.recovery.substitute_attempts,
                             layout, rebuild=rebuild, resumed=rebuild is not None)


def process_batch(store: StateStore, recoverer: Recoverer, rows: list) -> list[dict]:
    """Run claimed requests (:func:`.records.claim_batch`) to their end as one batch and close
    them in one transaction; their results, in order (recoveryd's workers).

    A file whose recovery fails is closed as lost, and says why on the file itself. Raises
    :class:`RecoveryInterrupted` (the others closed first) when the service stopped: those
    requests stay running under a dead worker and the next start resumes their rebuilds.
    """
    def named(rebuilds: dict[int, Rebuild | None]) -> None:
        records.set_rebuilds(store, [
            (rows[index]["request_id"], rebuild.rebuild_id if rebuild else None,
             *_progress_of(rebuild)) for index, rebuild in rebuilds.items()])

    requests = [FileRequest(row["path"], tuple(json.loads(row["reported_osts"])),
                            row["rebuild_id"]) for row in rows]
    outcomes = recoverer.recover_batch(requests, on_rebuilds=named)
    closings, results, marks, interrupted = [], [], [], None
    for row, outcome in zip(rows, outcomes):
        if isinstance(outcome, RecoveryInterrupted):
            interrupted = outcome
            continue
        closing, result = _closing(row, outcome)
        closings.append(closing)
        results.append(result)
        if not isinstance(outcome, Exception) or isinstance(outcome, ScratchkeeperError):
            marks.append(closing)  # a bug's reason says nothing about the file
    records.finish_many(store, closings)
    for closing in marks:  # on the file itself, what users see with `store xattr`
        with contextlib.suppress(ScratchkeeperError):
            if closing.ok:
                recoverer.backend.remove_xattr(closing.path, XATTR_PREFIX + "lost")
            else:
                recoverer.backend.set_xattr(closing.path, XATTR_PREFIX + "lost",
                                            closing.reason.encode()[:4096])
    if interrupted is not None:
        raise interrupted
    return results


def _progress_of(rebuild: Rebuild | None) -> tuple[int, int]:
    """(bytes the rebuild must patch, bytes its journal holds already)."""
    if rebuild is None:
        return 0, 0
    total = sum(e.length for e in rebuild.lost)
    return total, max(0, total - sum(e.length for e in rebuild.missing))


def _closing(row, outcome: Outcome | BaseException) -> tuple[records.Closing, dict]:
    """How a request ends, and the result recoveryd reports, from what its file came to."""
    request_id, path = row["request_id"], row["path"]
    if isinstance(outcome, ScratchkeeperError):
        log.error("request %d: %s: %s", request_id, path, outcome)
        return (records.Closing(request_id, ok=False, path=path, file_state=records.LOST,
                                reason=str(outcome)),
                {"path": path, "state": LOST, "reason": str(outcome)})
    if isinstance(outcome, BaseException):  # a bug: the request is closed as failed
        log.error("request %d: %s", request_id, path, exc_info=outcome)
        reason = "internal error; see log"
        return (records.Closing(request_id, ok=False, path=path, file_state=records.LOST,
                                reason=reason),
                {"path": path, "state": LOST, "reason": reason})
    result = outcome.to_dict()
    lost = outcome.state == LOST
    return (records.Closing(request_id, ok=not lost, path=path,
                            file_state=records.LOST if lost else records.WHOLE,
                            reason=outcome.reason, outcome=result,
                            patched_bytes=0 if lost else outcome.patched_bytes,
                            seconds=outcome.seconds),
            result)


def lost_ranges(stripe_size: int, stripe_count: int, position: int, file_size: int) -> list[Extent]:
    """The thesis's formula on its own: bytes stripe ``position`` holds in a plain RAID-0 file."""
    if not 0 <= position < stripe_count:
        raise InputError(f"stripe position {position} outside 0..{stripe_count - 1}")
    round_size = stripe_size * stripe_count
    return [Extent(start, min(stripe_size, file_size - start))
            for start in range(position * stripe_size, file_size, round_size)]
