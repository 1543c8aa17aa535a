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
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .. import digests as block_digests
from ..config import SiteConfig
from ..errors import (
    InputError,
    RecoveryError,
    ScratchkeeperError,
    StorageError,
    TargetUnavailable,
    TransferError,
)
from ..ownership import Owner
from ..planner import records as planner_records
from ..state import StateStore
from ..storage import Extent, FileLayout, OstStatus, Rebuild, StorageBackend, subtract_extents
from ..transfer.buffers import BufferPool
from ..transfer.ranged import RangedReader, ReaderPool, measure, open_ranged
from . import plan as planning, records, trust
from .gather import Gathered, PatchSlots, ProbeGroup, RecoveryInterrupted
from .safety import check_inside_scratch
from .trust import FileHints
from .writer import WRITE_GROUP_BYTES, WRITE_QUEUE_BYTES, RebuildWriter

log = logging.getLogger(__name__)

VERIFY_CHUNK = 4 << 20
LANE_BYTES = 16 << 20  # least work worth its own connection
BATCH_CHUNKS = 16  # chunks read from a surviving mirror at a time (readers say their own)

# outcome states
WHOLE, PATCHED, LOST = "whole", "patched", "lost"


@dataclass
class Outcome:
    """What recovering one file did."""

    path: str
    state: str
    failed_osts: list[int] = field(default_factory=list)
    substitutes: dict[int, int] = field(default_factory=dict)
    patched_bytes: int = 0
    seconds: float = 0.0
    # of ``seconds``, what follows detection (the OST probe): substitute objects, connecting,
    # fetching, checking, writing, syncing, switching
    patch_seconds: float = 0.0
    verified: str = ""          # "blocks", "ranges", "file", or "" when nothing was patched
    reason: str = ""
    plan: planning.PatchPlan | None = None
    attempts: int = 0

    def to_dict(self) -> dict:
        return {"path": self.path, "state": self.state, "failed_osts": self.failed_osts,
                "substitutes": {str(k): v for k, v in self.substitutes.items()},
                "patched_bytes": self.patched_bytes, "seconds": round(self.seconds, 6),
                "patch_seconds": round(self.patch_seconds, 6),
                "verified": self.verified, "reason": self.reason, "attempts": self.attempts,
                "plan": self.plan.to_dict() if self.plan else None,
                "explain": self.plan.explain() if self.plan else ""}


class PatchFailed(RecoveryError):
    """Every source of some chunk failed: the file cannot be recovered now."""


class ChecksumMismatch(RecoveryError):
    """The rebuilt file's SHA-256 is not the one recorded at stage-in."""


@dataclass
class _FileRecovery:
    """One file's recovery (:meth:`Recoverer._recover`): what its attempts share and what each
    leaves to the next."""

    full: str
    size: int
    hints: FileHints
    reported_osts: tuple[int, ...]
    started: float
    blocks: block_digests.BlockDigests | None  # recorded at stage-in (None: not checked by block)
    on_rebuild: Callable[[str | None], None]
    progress: Callable[[int, int], None] | None
    measure_sources: bool
    outcome: Outcome
    max_attempts: int  # recovery.substitute_attempts
    rebuild: Rebuild | None = None
    resumed: bool = False  # bytes patched before a crash: verify them again
    bad_substitutes: set[int] = field(default_factory=set)
    mismatches: int = 0
    fresh: bool = False  # the first look may reuse a recent probe; a retry always probes again


class SourceLoad:
    """Bytes still to be fetched from each source by all recoveries in flight (``X_d``)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._bytes: dict[str, int] = {}

    def get(self, name: str) -> int:
        with self._lock:
            return self._bytes.get(name, 0)

    def add(self, name: str, amount: int) -> None:
        with self._lock:
            self._bytes[name] = max(0, self._bytes.get(name, 0) + amount)


class Recoverer:
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

    def _attempt(self, run: _FileRecovery, layout: FileLayout) -> Outcome | None:
        """Probe the file's OSTs and, when it lost bytes no mirror serves, begin (or go on with)
        a rebuild and patch it (:meth:`_patch_rebuild`); None: try again."""
        outcome = run.outcome
        statuses = self._probe(layout.osts() | set(run.reported_osts), run.fresh, run.started)
        run.fresh = True
        patch_started = time.monotonic()
        healthy = {o.ost_index for o in statuses if o.healthy}
        failed = sorted(layout.osts() - healthy)
        rebuild = run.rebuild
        if rebuild is not None and (rebuild.base_layout_gen != layout.layout_gen
                                    or set(rebuild.substitutes) != set(failed)
                                    or any(s not in healthy
                                           for s in rebuild.substitutes.values())):
            log.info("%s: rebuild %s no longer fits the failed OSTs; starting again",
                     run.full, rebuild.rebuild_id)
            self._abort(rebuild, run.on_rebuild)
            run.rebuild, run.resumed = None, False
        outcome.failed_osts = failed
        unreported = set(run.reported_osts) - set(failed)
        if unreported:
            log.info("%s: reported OSTs %s answer the probe", run.full, sorted(unreported))
        if run.rebuild is not None:
            truly_lost = layout.lost_extents(run.rebuild.substitutes, run.size)
            if run.hints.sources:
                self._warm(run.hints.sources[0], run.hints.owner)
            return self._patch_rebuild(run, layout, truly_lost, patch_started)
        truly_lost = layout.lost_extents(failed, run.size)
        if not truly_lost:
            outcome.seconds = time.monotonic() - run.started
            outcome.reason = ("a surviving mirror serves every byte" if failed
                              else "no OST of the file has failed")
            return outcome
        if not run.hints.sources:
            raise RecoveryError(f"{run.full}: lost {sum(e.length for e in truly_lost)} bytes "
                                f"on OST {', '.join(map(str, failed))} and has no "
                                f"recovery source {run.hints.why_none()}")
        # connects while the rebuild is begun and planned
        self._warm(run.hints.sources[0], run.hints.owner)
        try:
            run.rebuild = self._begin(run.full, layout, failed, statuses, run.bad_substitutes)
        except TargetUnavailable as err:
            # a substitute the recent probe saw healthy failed since: probe all again
            if err.ost_index is not None:
                run.bad_substitutes.add(err.ost_index)
            if outcome.attempts >= run.max_attempts:
                return self._lost(outcome, run.started, f"no substitute OST: {err}")
            log.warning("%s: %s; picking another substitute", run.full, err)
            return None
        run.on_rebuild(run.rebuild.rebuild_id)
        return self._patch_rebuild(run, layout, truly_lost, patch_started)

    def _patch_rebuild(self, run: _FileRecovery, layout: FileLayout, truly_lost: list[Extent],
                       patch_started: float) -> Outcome | None:
        """Patch ``truly_lost`` into the rebuild's substitute objects, verify the file and switch
        its layout to them; None: try again (another substitute, or once more from scratch)."""
        outcome, rebuild = run.outcome, run.rebuild
        assert rebuild is not None
        outcome.substitutes = dict(rebuild.substitutes)
        checker = _BlockChecker(run.blocks, run.full) if run.blocks is not None else None
        try:
            with self.slots.held():
                verified_ranges, pending = self._patch(rebuild, layout, run.hints, truly_lost,
                                                       outcome, run.progress,
                                                       run.measure_sources, checker)
                if checker is not None:
                    # blocks checked on arrival need nothing more; the rest (covered in
                    # part, or patched before a restart) are read back now they are complete
                    self._verify_blocks(rebuild, checker)
                    outcome.verified = "blocks"
                else:
                    outcome.verified = "ranges" if verified_ranges else "file"
                    if not verified_ranges or run.resumed:
                        self._verify_file(rebuild, run.hints)
                        outcome.verified = "file"
            # the last bytes written are recorded by the switch itself (one journal update)
            self.commits((rebuild, pending))
            outcome.patch_seconds += time.monotonic() - patch_started
            run.on_rebuild(None)
        except TargetUnavailable as err:
            self._abort(rebuild, run.on_rebuild)
            run.rebuild, run.resumed = None, False
            if err.ost_index is not None and err.ost_index in outcome.substitutes.values():
                run.bad_substitutes.add(err.ost_index)
            if outcome.attempts >= run.max_attempts:
                return self._lost(outcome, run.started,
                                  f"storage failed during patching: {err}")
            log.warning("%s: %s; trying again with another substitute", run.full, err)
            return None
        except ChecksumMismatch as err:
            self._abort(rebuild, run.on_rebuild)
            run.rebuild, run.resumed = None, False
            run.mismatches += 1
            if run.mismatches > 1:
                return self._lost(outcome, run.started, str(err))
            log.warning("%s: %s; patching once more from scratch", run.full, err)
            return None
        except (PatchFailed, TransferError) as err:
            self._abort(rebuild, run.on_rebuild)
            return self._lost(outcome, run.started, str(err))
        # anything else (the service stopping, a bug) leaves the rebuild to be resumed
        outcome.state = PATCHED
        outcome.seconds = time.monotonic() - run.started
        log.info("%s: patched %d bytes (OST %s -> %s) in %.2fs, verified by %s", run.full,
                 outcome.patched_bytes, ",".join(map(str, outcome.substitutes)),
                 ",".join(map(str, outcome.substitutes.values())), outcome.seconds,
                 outcome.verified)
        return outcome

    # -- steps ---------------------------------------------------------------------------------
    def probe_all(self) -> list[OstStatus]:
        """Every OST's state, probed now (recoveryd's periodic check): the recoveries it queues
        reuse it for the OSTs outside their files (:meth:`_probe`)."""
        return self.probes.probe(None)

    def _run_probe(self, osts: set[int] | None) -> list[OstStatus]:
        statuses = self.backend.check_osts(self.config.recovery.probe_timeout, only=osts)
        if osts is None:
            self._last_probe = (time.monotonic(), statuses)
        return statuses

    def _probe(self, file_osts: set[int], fresh: bool, since: float) -> list[OstStatus]:
        """Every OST's state, those in ``file_osts`` (the file's and the reported ones) probed now.

        After an OST failure recoveryd patches every file that had bytes on it, one after
        another and in several workers: a probe of every OST (recoveryd's check that found the
        failure, or the first recovery's) serves all that start within ``recovery.probe_reuse``
        seconds of its end, for the OSTs outside the file only (which are healthy, to pick
        substitutes from). It never says what a file lost or that it is whole: OSTs fail and
        come back meanwhile, so the file's own OSTs, whose states decide which ones a rebuild
        replaces, are probed after its recovery began (``since``); the files that start
        together share that probe (:class:`ProbeGroup`). ``fresh``: probe every OST (a retry
        after a substitute failed), in a probe begun now.
        """
        last = self._last_probe
        if fresh or last is None or time.monotonic() - last[0] > self.config.recovery.probe_reuse:
            return self.probes.probe(None, None if fresh else since)
        by_index = {o.ost_index: o for o in last[1]}
        by_index.update((o.ost_index, o) for o in self.probes.probe(file_osts, since)
                        if o.ost_index in file_osts)
        return [by_index[index] for index in sorted(by_index)]

    def _resumable(self, full: str, rebuild_id: str | None) -> Rebuild | None:
        if not rebuild_id:
            return None
        for rebuild in self.backend.open_rebuilds():
            if rebuild.rebuild_id == rebuild_id and rebuild.path == full:
                log.info("%s: resuming rebuild %s (%d bytes still missing)", full, rebuild_id,
                         sum(e.length for e in rebuild.missing))
                return rebuild
        return None

    def _begin(self, full: str, layout: FileLayout, failed: list[int],
               statuses: list[OstStatus], bad: set[int]) -> Rebuild:
        substitutes: dict[int, int] = {}
        for ost in failed:
            substitutes[ost] = self.backend.pick_substitute(
                layout, exclude=set(failed) | set(substitutes.values()) | bad, osts=statuses,
                failed=ost)
        rebuild = self.begins((full, substitutes))  # with the files begun at the same time
        log.info("%s: rebuild %s: %s, %d bytes to patch", full, rebuild.rebuild_id,
                 ", ".join(f"OST {f} -> {s}" for f, s in substitutes.items()),
                 sum(e.length for e in rebuild.lost))
        return rebuild

    def _abort(self, rebuild: Rebuild, on_rebuild: Callable[[str | None], None]) -> None:
        try:
            self.backend.abort_rebuild(rebuild)
        except StorageError as err:
            log.warning("%s: aborting rebuild %s: %s", rebuild.path, rebuild.rebuild_id, err)
        on_rebuild(None)

    def _lost(self, outcome: Outcome, started: float, reason: str) -> Outcome:
        outcome.state = LOST
        outcome.reason = reason
        outcome.seconds = time.monotonic() - started
        log.error("%s: lost: %s", outcome.path, reason)
        return outcome

    def plan_for(self, rebuild: Rebuild, layout: FileLayout, hints: FileHints,
                 truly_lost: list[Extent], measure_sources: bool = True) -> planning.PatchPlan:
        """The patch plan of a rebuild's missing ranges (measuring sources when there is a choice)."""
        chunks = planning.cut_chunks(rebuild.missing, layout.stripe_size,
                                     self.config.recovery.chunk_size)
        sources, candidates = planning.candidate_sources(chunks, hints.sources, truly_lost)
        if not chunks:
            return planning.PatchPlan([], sources, [], [])
        estimates = [planning.SourceEstimate(queued_bytes=self.load.get(s.name)) for s in sources]
        if measure_sources and any(len(c) > 1 for c in candidates):
            probe = Extent(0, min(self.config.recovery.chunk_size, rebuild.file_size))
            estimates = [self._measure(s, rebuild, probe, candidates, chunks, i, hints.owner)
                         for i, s in enumerate(sources)]
        return planning.choose(chunks, sources, candidates, estimates,
                               self.config.recovery.chunk_size)

    def _measure(self, source: planning.PatchSource, rebuild: Rebuild, probe: Extent,
                 candidates: list[list[int]], chunks: list[Extent],
                 index: int, owner: Owner | None = None) -> planning.SourceEstimate:
        queued = self.load.get(source.name)
        try:
            if source.kind == planning.STORE:
                served = next(c for c, cands in zip(chunks, candidates) if index in cands)
                started = time.monotonic()
                self.backend.read(rebuild.path, served.offset, 1)
                latency = time.monotonic() - started
                started = time.monotonic()
                self.backend.read(rebuild.path, served.offset, served.length)
                elapsed = max(time.monotonic() - started, 1e-6)
                return planning.SourceEstimate(latency, served.length / elapsed, queued)
            reader = self._reader(source.name, owner)
            try:
                latency, throughput = measure(reader, probe)
            except BaseException:
                self._done(reader, False)
                raise
            self._done(reader, True)
            return planning.SourceEstimate(latency, throughput, queued)
        except (ScratchkeeperError, OSError) as err:
            return planning.SourceEstimate(queued_bytes=queued, error=str(err))

    def _reader(self, uri: str, owner: Owner | None = None) -> RangedReader:
        """An idle connection to ``uri`` from the pool, or a new one (hand it back with _done).

        A connection being opened ahead (:meth:`_warm`) is waited for rather than opened twice.
        """
        with self._lock:
            warming = self._warming.pop(uri, None)
        if warming is not None:
            warming.join(self.config.transfer.timeout)
        return self.readers.take(uri, owner)

    def _warm(self, uri: str, owner: Owner | None = None) -> None:
        """Open a connection to ``uri`` in the background and pool it for the first lane.

        A file that lost bytes is patched from its primary source in all but the rarest plans,
        and a GridFTP connection costs tens of ms (the server forks and logs in): begun now, it
        overlaps the rebuild's start and planning. Only as many are opened ahead as patch slots
        are free. A failure here is left for the lane to meet (and retry) itself.
        """
        def run() -> None:
            reader = self.readers.take(uri, owner)
            ok = False
            try:
                reader.connect()
                ok = True
            except Exception as err:  # the lane meets it again, and retries
                log.debug("%s: connecting ahead: %s", uri, err)
            finally:
                self._done(reader, ok)

        with self._lock:
            # one per patch slot that will be free: the files waiting for one take the
            # connections the running patches hand back
            if uri not in self._warming and len(self._warming) < self.slots.free():
                thread = self._warming[uri] = threading.Thread(target=run, daemon=True,
                                                               name="patch-connect")
                thread.start()  # under the lock: whoever pops it can join it

    def _done(self, reader: RangedReader, ok: bool) -> None:
        """Keep a reader that worked for the next request; close one that failed."""
        if ok:
            self.readers.give(reader)
        else:
            reader.close()

    def _open_reader(self, uri: str, owner: Owner | None = None) -> RangedReader:
        # every connection recovery opens comes through here (ReaderPool.take asks for a new
        # reader before it reuses an idle one): no source outside the allow-list is reached
        why = self.policy.why_refused(uri)
        if why is not None:
            raise TransferError(why, permanent=True)
        return open_ranged(uri, self.config.transfer, ftp_method=self.config.recovery.ftp_method,
                           spool_dir=self.backend.scratch_root,
                           range_checksum=self.config.recovery.range_checksum, owner=owner)

    def _patch(self, rebuild: Rebuild, layout: FileLayout, hints: FileHints,
               truly_lost: list[Extent], outcome: Outcome,
               progress: Callable[[int, int], None] | None, measure_sources: bool,
               checker: _BlockChecker | None = None) -> tuple[bool, list[Extent]]:
        """Fetch and write every missing chunk.

        Returns whether every range was server-verified, and the extents written but not yet
        recorded as patched (the caller hands them to ``commit_rebuild``).

        With block digests (``checker``) each block is checked as it arrives and the servers
        are asked nothing more. Without them and with one source, its whole-file check (a
        server-side hash of the whole source) runs while the ranges are patched and is awaited
        before the caller commits; with several, it runs first so that a changed source gets no
        chunk.
        """
        if checker is not None:
            return self._patch_from(rebuild, layout, hints, truly_lost, outcome, progress,
                                    measure_sources, checker)
        source_check = None
        checker = concurrent.futures.ThreadPoolExecutor(max_workers=1,
                                                        thread_name_prefix="source-check")
        if len(hints.sources) == 1:
            source_check = checker.submit(self._usable_sources, hints)
        else:
            hints = self._usable_sources(hints)
        try:
            patched = self._patch_from(rebuild, layout, hints, truly_lost, outcome, progress,
                                       measure_sources)
            if source_check is not None:
                source_check.result()  # a changed source: the rebuild is aborted, not committed
        finally:
            checker.shutdown(wait=True)
        return patched

    def _patch_from(self, rebuild: Rebuild, layout: FileLayout, hints: FileHints,
                    truly_lost: list[Extent], outcome: Outcome,
                    progress: Callable[[int, int], None] | None, measure_sources: bool,
                    checker: _BlockChecker | None = None) -> tuple[bool, list[Extent]]:
        patch_plan = self.plan_for(rebuild, layout, hints, truly_lost, measure_sources)
        outcome.plan = patch_plan
        total = patch_plan.total_bytes
        done = [0]
        verified = [True]
        lock = threading.Lock()
        failure = threading.Event()
        # the request's progress counts every byte the rebuild must patch: those a resumed
        # rebuild's journal already holds are done
        rebuild_total = sum(e.length for e in rebuild.lost)
        patched_before = max(0, rebuild_total - sum(e.length for e in rebuild.missing))
        recorder = (records.ProgressRecorder(self.store, rebuild.rebuild_id, rebuild_total)
                    if self.store is not None else None)
        if recorder is not None:
            recorder.update(patched_before, force=True)

        def written(extent: Extent, was_verified: bool) -> None:
            with lock:
                done[0] += extent.length
                outcome.patched_bytes += extent.length
                if not was_verified:
                    verified[0] = False
                now = done[0]
            if progress:
                progress(now, total)
            if recorder is not None:
                recorder.update(patched_before + now)

        lanes = []
        for index, source in enumerate(patch_plan.sources):
            mine = patch_plan.chunks_of(index)
            if not mine:
                continue
            self.load.add(source.name, sum(c.length for c in mine))
            workers = self._lanes(source, mine, hints.owner)
            for lane in range(workers):
                lanes.append((index, mine[lane::workers]))
        if not lanes:
            return True, []
        writer = RebuildWriter(self.backend, rebuild, written,
                                sync_bytes=self.config.recovery.sync_bytes,
                                interval=self.config.recovery.journal_interval,
                                buffers=self.buffers)
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=len(lanes),
                                                     thread_name_prefix="patch")
        errors = []
        try:
            futures = [pool.submit(self._run_lane, rebuild, patch_plan, index, chunks, writer,
                                   failure, checker, hints.owner) for index, chunks in lanes]
            for future in concurrent.futures.as_completed(futures):
                error = future.exception()
                if error is not None:
                    failure.set()
                    errors.append(error)
            try:
                pending = writer.drain()
                if errors:  # what did arrive stays patched for a retry or a resumed rebuild
                    self.backend.record_patched(rebuild, pending)
            except Exception as err:  # a substitute that failed on the last writes
                errors.append(err)
        finally:
            pool.shutdown(wait=True)
            writer.close()
            for index, source in enumerate(patch_plan.sources):
                self.load.add(source.name, -sum(c.length for c in patch_plan.chunks_of(index)))
        if errors:
            for error in errors:
                if isinstance(error, RecoveryInterrupted):
                    raise error
            # a failed storage target outranks a source problem: it is worth another substitute
            for error in errors:
                if isinstance(error, TargetUnavailable):
                    raise error
            raise errors[0]
        missing = subtract_extents(rebuild.missing, pending)
        if missing:
            raise StorageError(f"{rebuild.path}: {sum(e.length for e in missing)} bytes still "
                               "missing after patching")
        if recorder is not None:
            recorder.update(patched_before + done[0], force=True)
        return verified[0], pending

    def _lanes(self, source: planning.PatchSource, chunks: list[Extent],
               owner: Owner | None = None) -> int:
        """How many lanes (connections) fetch ``chunks`` from ``source`` at once.

        A lane costs a connection (tens of ms: the server forks and logs in) and CPU on both
        ends, so one per ``LANE_BYTES`` of work at most, and a second one only when a single
        request cannot carry all the chunks: a GridFTP MODE E transfer brings up to 256 ranges
        in one stream, while curl and ERET take a few per request and gain from overlapping.
        ``recovery.workers`` caps it.
        """
        share = -(-sum(c.length for c in chunks) // LANE_BYTES)
        if source.kind == planning.STORE:
            per_request = BATCH_CHUNKS
        else:
            # no connection yet; the first lane takes it
            reader = self._reader(source.name, owner)
            per_request = reader.batch_limit
            self._done(reader, True)
        requests = -(-len(chunks) // per_request)
        return max(1, min(self.config.recovery.workers, len(chunks), share, requests))

    def _run_lane(self, rebuild: Rebuild, patch_plan: planning.PatchPlan, source_index: int,
                  chunks: list[Extent], writer: RebuildWriter,
                  failure: threading.Event, checker: _BlockChecker | None = None,
                  owner: Owner | None = None) -> None:
        """Fetch ``chunks`` from one source into the writer (falling back to other candidates).

        Fetching and writing overlap: the writer writes what arrived while lanes fetch more.
        """
        unfetched = list(chunks)
        source = patch_plan.sources[source_index]
        tried: set[int] = {source_index}
        while unfetched:
            reader = None if source.kind == planning.STORE else self._reader(source.name, owner)
            ok = False
            try:
                self._fetch_with_retries(reader, rebuild, unfetched, writer, failure, checker)
                ok = True
                return
            except TransferError as err:
                # what did arrive stays with the writer; another source that can serve every chunk left?
                alternatives = [i for i in _common_candidates(patch_plan, unfetched)
                                if i not in tried]
                if not alternatives:
                    raise TransferError(f"{rebuild.path}: cannot fetch "
                                        f"{sum(c.length for c in unfetched)} lost bytes: "
                                        f"{err}", permanent=err.permanent) from err
                source_index = alternatives[0]
                tried.add(source_index)
                source = patch_plan.sources[source_index]
                log.warning("%s: %s; falling back to %s", rebuild.path, err, source.name)
            finally:
                if reader is not None:
                    self._done(reader, ok)

    def _fetch_with_retries(self, reader: RangedReader | None, rebuild: Rebuild,
                            unfetched: list[Extent], writer: RebuildWriter,
                            failure: threading.Event,
                            checker: _BlockChecker | None = None) -> None:
        """Fetch every chunk of ``unfetched`` (removing each as it arrives) into ``writer``.

        With ``checker``, a chunk whose blocks differ from what was staged is not written: it
        counts as a failed try (corrupted in transit, or a source that changed).
        """
        retry = self.config.retry
        attempt = 0
        while unfetched:
            if self.stop.is_set():
                raise RecoveryInterrupted(f"{rebuild.path}: the service is stopping")
            if failure.is_set():
                raise PatchFailed(f"{rebuild.path}: another lane failed")
            try:
                limit = reader.batch_limit if reader is not None else BATCH_CHUNKS
                for piece in self._fetch(reader, rebuild, unfetched[:limit],
                                         server_checksums=checker is None):
                    if checker is not None:
                        checker.check(piece[0], piece[1])
                    unfetched.remove(piece[0])
                    writer.add(piece)
                    if unfetched and self.stop.is_set():  # one transfer may bring a GiB
                        raise RecoveryInterrupted(f"{rebuild.path}: the service is stopping")
                    if unfetched and failure.is_set():
                        raise PatchFailed(f"{rebuild.path}: another lane failed")
                attempt = 0
            except TransferError as err:
                attempt += 1
                if err.permanent or attempt >= retry.attempts:
                    raise
                delay = min(retry.max_delay, retry.delay * retry.backoff ** (attempt - 1))
                delay *= random.uniform(0.5, 1.0)  # jitter: lanes do not retry in step
                log.warning("%s: %s (try %d of %d); retrying in %.1fs", rebuild.path, err,
                            attempt, retry.attempts, delay)
                if reader is not None:
                    reader.close()
                if self.stop.wait(delay):
                    raise RecoveryInterrupted(f"{rebuild.path}: the service is stopping") from err

    def _fetch(self, reader: RangedReader | None, rebuild: Rebuild, batch: list[Extent], *,
               server_checksums: bool = True):
        if reader is None:
            for extent in batch:
                yield extent, self.backend.read(rebuild.path, extent.offset, extent.length), True
            return
        for piece in reader.fetch(batch, server_checksums=server_checksums,
                                  buffers=self.buffers):
            yield piece.extent, piece.data, piece.verified

    def _usable_sources(self, hints: FileHints) -> FileHints:
        """Drop sources a server says no longer hold what was staged (GridFTP whole-file CKSM).

        A source that cannot answer now is kept: patching retries it. If every source is
        known bad, the first reason is raised as a permanent error.
        """
        if not hints.sha256 or not self.config.recovery.verify_source:
            return hints
        kept, reasons = [], []
        for uri in hints.sources:
            try:
                reader = self._reader(uri, hints.owner)
                try:
                    digest = reader.whole_checksum("SHA256")
                except BaseException:
                    self._done(reader, False)
                    raise
                self._done(reader, True)
            except TransferError as err:
                if err.permanent:
                    reasons.append(str(err))
                    continue
                digest = None
            if digest is not None and digest != hints.sha256:
                reasons.append(f"{uri}: the source changed since stage-in (its SHA-256 is "
                               f"{digest[:12]}..., {hints.sha256[:12]}... was staged)")
                continue
            kept.append(uri)
        if not kept:
            raise TransferError(reasons[0], permanent=True)
        for reason in reasons:
            log.warning("%s", reason)
        return FileHints(tuple(kept), hints.sha256, hints.size, hints.owner)

    def _verify_blocks(self, rebuild: Rebuild, checker: _BlockChecker) -> None:
        """Read back and check the patched blocks not checked on arrival."""
        for index in checker.unchecked(rebuild.lost):
            block = checker.blocks.block(index)
            data = self.backend.read_rebuild(rebuild, block.offset, block.length)
            bad, _ = checker.blocks.check(block.offset, data)
            if bad:
                raise ChecksumMismatch(f"{rebuild.path}: bytes {block.offset}+{block.length} "
                                       "differ from what was staged (CRC-32C recorded at "
                                       "stage-in): a corrupted range, or the source changed")

    def _verify_file(self, rebuild: Rebuild, hints: FileHints) -> None:
        """Read the rebuilt file back and compare it with the SHA-256 recorded at stage-in."""
        if not hints.sha256:
            raise ChecksumMismatch(f"{rebuild.path}: some patched ranges could not be verified "
                                   "and no SHA-256 was recorded at stage-in")
        digest = hashlib.sha256()
        for offset in range(0, rebuild.file_size, VERIFY_CHUNK):
            digest.update(self.backend.read_rebuild(
                rebuild, offset, min(VERIFY_CHUNK, rebuild.file_size - offset)))
        if digest.hexdigest() != hints.sha256:
            raise ChecksumMismatch(f"{rebuild.path}: the patched file's SHA-256 differs from the "
                                   "one recorded at stage-in (a corrupted range, or the source "
                                   "changed)")


class _BlockChecker:
    """Checks patched blocks against the digests recorded at stage-in; remembers which it did."""

    def __init__(self, blocks: block_digests.BlockDigests, path: str):
        self.blocks = blocks
        self.path = path
        self.lock = threading.Lock()
        self.checked: set[int] = set()

    def check(self, extent: Extent, data: bytes) -> None:
        """Raise a (transient) TransferError if a block wholly inside ``extent`` differs."""
        bad, partial = self.blocks.check(extent.offset, data)
        if bad:
            block = self.blocks.block(bad[0])
            raise TransferError(f"{self.path}: bytes {block.offset}+{block.length} arrived "
                                "different from what was staged (CRC-32C recorded at stage-in): "
                                "corrupted in transit, or the source changed since")
        with self.lock:
            self.checked.update(i for i in self.blocks.blocks_over(extent) if i not in partial)

    def unchecked(self, extents: list[Extent]) -> list[int]:
        """Blocks touching ``extents`` that were not checked on arrival."""
        with self.lock:
            return sorted({i for e in extents for i in self.blocks.blocks_over(e)}
                          - self.checked)


def _common_candidates(patch_plan: planning.PatchPlan, pending: list[Extent]) -> list[int]:
    index = {c: i for i, c in enumerate(patch_plan.chunks)}
    common: set[int] | None = None
    for chunk in pending:
        options = set(patch_plan.candidates[index[chunk]])
        common = options if common is None else common & options
    return sorted(common or ())


def lost_ranges(stripe_size: int, stripe_count: int, position: int, file_size: int) -> list[Extent]:
    """The thesis's formula on its own: bytes stripe ``position`` holds in a plain RAID-0 file."""
    if not 0 <= position < stripe_count:
        raise InputError(f"stripe position {position} outside 0..{stripe_count - 1}")
    round_size = stripe_size * stripe_count
    return [Extent(start, min(stripe_size, file_size - start))
            for start in range(position * stripe_size, file_size, round_size)]
