"""Patching a rebuild (step 5 of :mod:`.reconstruct`): its missing ranges cut into chunks, a
source picked for each (:mod:`.plan`, sources measured when there is a choice), and lanes that
fetch the chunks with ranged transfers into the rebuild's writer, transient failures retried
with backoff and jitter, permanent ones falling back to another source of every chunk left.
With block digests recorded at stage-in each block is checked as it arrives; without them the
sources are asked for their whole SHA-256 (:meth:`PatchingMixin._usable_sources`).

Connections to the sources are pooled, the primary one opened ahead, and every one is opened
through the site's source policy (:meth:`PatchingMixin._open_reader`).
"""

from __future__ import annotations

import concurrent.futures
import logging
import random
import threading
import time
from collections.abc import Callable

from .. import digests as block_digests
from ..config import SiteConfig
from ..errors import (
    RecoveryError,
    ScratchkeeperError,
    StorageError,
    TargetUnavailable,
    TransferError,
)
from ..ownership import Owner
from ..state import StateStore
from ..storage import Extent, FileLayout, Rebuild, StorageBackend, subtract_extents
from ..transfer.buffers import BufferPool
from ..transfer.ranged import RangedReader, ReaderPool, measure, open_ranged
from . import plan as planning, records, trust
from .gather import PatchBudget, PatchSlots, RecoveryInterrupted
from .outcome import Outcome
from .trust import FileHints
from .writer import RebuildWriter

# the name recovery's log lines have always carried (recoveryd's log shows it), whichever
# module of the three writes them
log = logging.getLogger("scratchkeeper.recovery.reconstruct")

LANE_BYTES = 16 << 20  # least work worth its own connection
BATCH_CHUNKS = 16  # chunks read from a surviving mirror at a time (readers say their own)


class PatchFailed(RecoveryError):
    """Every source of some chunk failed: the file cannot be recovered now."""


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


class PatchingMixin:
    """The patch side of :class:`~scratchkeeper.recovery.reconstruct.Recoverer`."""

    # set by Recoverer.__init__
    backend: StorageBackend
    config: SiteConfig
    store: StateStore | None
    policy: trust.SourcePolicy
    load: SourceLoad
    readers: ReaderPool
    buffers: BufferPool
    stop: threading.Event
    slots: PatchSlots
    budget: PatchBudget
    _lock: threading.Lock
    _warming: dict[str, tuple[threading.Thread, float]]

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
            warming[0].join(self.config.transfer.timeout)
        return self.readers.take(uri, owner)

    def _warm(self, uri: str, owner: Owner | None = None) -> None:
        """Open a connection to ``uri`` in the background and pool it for the first lane.

        A file that lost bytes is patched from its primary source in all but the rarest plans,
        and a GridFTP connection costs tens of ms (the server forks and logs in): begun now, it
        overlaps the rebuild's start and planning. Only as many are opened ahead as the batches
        that a free patch slot lets patch next have files (every file of a batch patches at
        once), and one per URI until a lane takes it. A failure here is left for the lane to
        meet (and retry) itself.
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
            now = time.monotonic()
            # one opened ahead that no lane took (its file needed none) is the pool's to close
            # once idle too long: forgotten here after as long
            for key, (thread, began) in list(self._warming.items()):
                if not thread.is_alive() and now - began > self.readers.max_idle:
                    del self._warming[key]
            opening = sum(thread.is_alive() for thread, _ in self._warming.values())
            # the files waiting for a slot take the connections the running patches hand back
            if uri not in self._warming and \
                    opening < self.slots.free() * records.BATCH_REQUESTS:
                thread = threading.Thread(target=run, daemon=True, name="patch-connect")
                self._warming[uri] = (thread, now)
                thread.start()  # under the lock: whoever pops it can join it

    def _done(self, reader: RangedReader, ok: bool) -> None:
        """Keep a reader that worked for the next request; close one that failed."""
        if ok:
            self.readers.give(reader)
        else:
            reader.close()

    def _open_reader(self, uri: str, owner: Owner | None = None) -> RangedReader:
        # every connection recovery opens comes through here (ReaderPool.take asks for a new
        # reader before it reuses an idle one): no source outside the allow-list is reached,
        # and an HTTP redirect is followed only to a URL the same list allows
        why = self.policy.why_refused(uri)
        if why is not None:
            raise TransferError(why, permanent=True)
        return open_ranged(uri, self.config.transfer, ftp_method=self.config.recovery.ftp_method,
                           spool_dir=self.backend.scratch_root,
                           range_checksum=self.config.recovery.range_checksum, owner=owner,
                           redirects=self.policy.why_endpoint_refused)

    def _patch(self, rebuild: Rebuild, layout: FileLayout, hints: FileHints,
               truly_lost: list[Extent], outcome: Outcome,
               progress: Callable[[int, int], None] | None, measure_sources: bool,
               checker: _BlockChecker | None = None,
               recorder: records.ProgressRecorder | None = None) -> tuple[bool, list[Extent]]:
        """Fetch and write every missing chunk.

        Returns whether every range was server-verified, and the extents written but not yet
        recorded as patched (the caller hands them to ``commit_rebuild``). ``recorder``: where
        the request's progress goes (shared by the files of a batch); by default one of its own.

        With block digests (``checker``) each block is checked as it arrives and the servers
        are asked nothing more. Without them and with one source, its whole-file check (a
        server-side hash of the whole source) runs while the ranges are patched and is awaited
        before the caller commits; with several, it runs first so that a changed source gets no
        chunk.
        """
        if checker is not None:
            return self._patch_from(rebuild, layout, hints, truly_lost, outcome, progress,
                                    measure_sources, checker, recorder)
        source_check = None
        checker = concurrent.futures.ThreadPoolExecutor(max_workers=1,
                                                        thread_name_prefix="source-check")
        if len(hints.sources) == 1:
            source_check = checker.submit(self._usable_sources, hints)
        else:
            hints = self._usable_sources(hints)
        try:
            patched = self._patch_from(rebuild, layout, hints, truly_lost, outcome, progress,
                                       measure_sources, recorder=recorder)
            if source_check is not None:
                source_check.result()  # a changed source: the rebuild is aborted, not committed
        finally:
            checker.shutdown(wait=True)
        return patched

    def _patch_from(self, rebuild: Rebuild, layout: FileLayout, hints: FileHints,
                    truly_lost: list[Extent], outcome: Outcome,
                    progress: Callable[[int, int], None] | None, measure_sources: bool,
                    checker: _BlockChecker | None = None,
                    recorder: records.ProgressRecorder | None = None
                    ) -> tuple[bool, list[Extent]]:
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
        if recorder is None and self.store is not None:
            recorder = records.ProgressRecorder(self.store)
        if recorder is not None:  # written with the first group of writes
            recorder.track(rebuild.rebuild_id, rebuild_total, patched_before)

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
                recorder.update(patched_before + now, rebuild_id=rebuild.rebuild_id)

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
                               buffers=self.buffers, budget=self.budget)
        try:
            errors = self._run_lanes(rebuild, patch_plan, lanes, writer, failure, checker,
                                     hints.owner)
            try:
                pending = writer.drain()
                if errors:  # what did arrive stays patched for a retry or a resumed rebuild
                    self.backend.record_patched(rebuild, pending)
            except Exception as err:  # a substitute that failed on the last writes
                errors.append(err)
        finally:
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
        return verified[0], pending

    def _run_lanes(self, rebuild: Rebuild, patch_plan: planning.PatchPlan,
                   lanes: list[tuple[int, list[Extent]]], writer: RebuildWriter,
                   failure: threading.Event, checker: _BlockChecker | None,
                   owner: Owner | None) -> list[BaseException]:
        """Run every lane (one in this thread, several in threads of their own) to its end;
        the errors they met (the first sets ``failure``, which stops the others)."""
        if len(lanes) == 1:  # most patches: one MODE E transfer carries every range
            (index, chunks), = lanes
            try:
                self._run_lane(rebuild, patch_plan, index, chunks, writer, failure, checker,
                               owner)
            except Exception as err:  # noqa: BLE001 - reported as the threads' errors are
                return [err]
            return []
        errors: list[BaseException] = []
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(lanes),
                                                   thread_name_prefix="patch") as pool:
            futures = [pool.submit(self._run_lane, rebuild, patch_plan, index, chunks, writer,
                                   failure, checker, owner) for index, chunks in lanes]
            for future in concurrent.futures.as_completed(futures):
                error = future.exception()
                if error is not None:
                    failure.set()
                    errors.append(error)
        return errors

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
        requests = -(-len(chunks) // self._batch_limit(source, owner))
        return max(1, min(self.config.recovery.workers, len(chunks), share, requests))

    def _batch_limit(self, source: planning.PatchSource, owner: Owner | None) -> int:
        """Ranges one request to ``source`` carries (a reader's own figure: nothing connects)."""
        if source.kind == planning.STORE:
            return BATCH_CHUNKS
        reader = self._open_reader(source.name, owner)
        try:
            return reader.batch_limit
        finally:
            reader.close()

    def _run_lane(self, rebuild: Rebuild, patch_plan: planning.PatchPlan, source_index: int,
                  chunks: list[Extent], writer: RebuildWriter,
                  failure: threading.Event, checker: _BlockChecker | None = None,
                  owner: Owner | None = None) -> None:
        """Fetch ``chunks`` from one source into the writer (falling back to other candidates).

        Fetching and writing overlap: the writer writes what arrived while lanes fetch more.
        """
        with self.budget.lane():
            self._run_lane_within(rebuild, patch_plan, source_index, chunks, writer, failure,
                                  checker, owner)

    def _run_lane_within(self, rebuild: Rebuild, patch_plan: planning.PatchPlan,
                         source_index: int, chunks: list[Extent], writer: RebuildWriter,
                         failure: threading.Event, checker: _BlockChecker | None,
                         owner: Owner | None) -> None:
        unfetched = list(chunks)
        source = patch_plan.sources[source_index]
        tried: set[int] = {source_index}
        while unfetched:
            connection = _LaneConnection(self, source, owner)
            ok = False
            try:
                self._fetch_with_retries(connection, rebuild, unfetched, writer, failure,
                                         checker)
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
                connection.done(ok)

    def _fetch_with_retries(self, connection: _LaneConnection, rebuild: Rebuild,
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
                self._fetch_request(connection, rebuild, unfetched, writer, failure, checker)
                attempt = 0
            except TransferError as err:
                attempt += 1
                if err.permanent or attempt >= retry.attempts:
                    raise
                delay = min(retry.max_delay, retry.delay * retry.backoff ** (attempt - 1))
                delay *= random.uniform(0.5, 1.0)  # jitter: lanes do not retry in step
                log.warning("%s: %s (try %d of %d); retrying in %.1fs", rebuild.path, err,
                            attempt, retry.attempts, delay)
                connection.close()
                if self.stop.wait(delay):
                    raise RecoveryInterrupted(f"{rebuild.path}: the service is stopping") from err

    def _fetch_request(self, connection: _LaneConnection, rebuild: Rebuild,
                       unfetched: list[Extent], writer: RebuildWriter, failure: threading.Event,
                       checker: _BlockChecker | None) -> None:
        """One request of the first chunks of ``unfetched`` (as many as the source takes at
        once and the patch budget lets in flight), each written as it arrives and removed.

        A request asks for its bytes of the budget first, and at least ``LANE_BYTES`` of them
        (or what it has left, or the whole budget if smaller): a lane is worth its connection
        only for that much, so a smaller budget patches fewer files at once instead of every
        file in slivers. The connection is taken once the bytes are granted.
        """
        batch = unfetched[:connection.batch_limit]
        wanted = sum(c.length for c in batch)
        least = min(wanted, max(batch[0].length, min(LANE_BYTES, self.budget.total)))
        granted = self.budget.take(wanted, least,
                                   lambda: self.stop.is_set() or failure.is_set())
        if not granted:
            if self.stop.is_set():
                raise RecoveryInterrupted(f"{rebuild.path}: the service is stopping")
            raise PatchFailed(f"{rebuild.path}: another lane failed")
        fits, taken = 1, batch[0].length
        while fits < len(batch) and taken + batch[fits].length <= granted:
            taken += batch[fits].length
            fits += 1
        handed = 0  # the writer gives these back once written
        try:
            for piece in self._fetch(connection.reader(), rebuild, batch[:fits],
                                     server_checksums=checker is None):
                if checker is not None:
                    checker.check(piece[0], piece[1])
                unfetched.remove(piece[0])
                writer.add(piece)
                handed += piece[0].length
                if unfetched and self.stop.is_set():  # one transfer may bring a GiB
                    raise RecoveryInterrupted(f"{rebuild.path}: the service is stopping")
                if unfetched and failure.is_set():
                    raise PatchFailed(f"{rebuild.path}: another lane failed")
        finally:
            self.budget.give(granted - handed)

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


class _LaneConnection:
    """A lane's connection to its source, taken from the pool at its first request: a lane
    waiting for the patch budget holds none another file could use. None for the store's own
    mirrors (read through the backend)."""

    def __init__(self, patcher: PatchingMixin, source: planning.PatchSource,
                 owner: Owner | None):
        self.patcher = patcher
        self.source = source
        self.owner = owner
        self.batch_limit = patcher._batch_limit(source, owner)
        self._reader: RangedReader | None = None

    def reader(self) -> RangedReader | None:
        if self._reader is None and self.source.kind != planning.STORE:
            self._reader = self.patcher._reader(self.source.name, self.owner)
        return self._reader

    def close(self) -> None:
        """After a failed request: the next one connects anew."""
        if self._reader is not None:
            self._reader.close()

    def done(self, ok: bool) -> None:
        if self._reader is not None:
            self.patcher._done(self._reader, ok)


def _common_candidates(patch_plan: planning.PatchPlan, pending: list[Extent]) -> list[int]:
    index = {c: i for i, c in enumerate(patch_plan.chunks)}
    common: set[int] | None = None
    for chunk in pending:
        options = set(patch_plan.candidates[index[chunk]])
        common = options if common is None else common & options
    return sorted(common or ())
