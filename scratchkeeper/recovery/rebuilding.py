"""One attempt at a file's rebuild (steps 1-4 and 6 of :mod:`.reconstruct`): probe its OSTs
(one probe shared by the recoveries that start together), pick a substitute per failed OST,
begin the rebuild, have its lost ranges patched (:mod:`.patching`), verify it and switch the
layout; or abort it and report the file lost, or leave it to another attempt (another
substitute, or once more from scratch).

Also what a file's attempts share (:class:`_FileRecovery`); what recovering it hands back is
:class:`.outcome.Outcome`.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .. import digests as block_digests
from ..config import SiteConfig
from ..errors import RecoveryError, StorageError, TargetUnavailable, TransferError
from ..storage import Extent, FileLayout, OstStatus, Rebuild, StorageBackend
from .gather import Gathered, PatchSlots, ProbeGroup
from .outcome import LOST, PATCHED, Outcome
from .patching import PatchFailed, _BlockChecker
from .trust import FileHints

# the name recovery's log lines have always carried (recoveryd's log shows it), whichever
# module of the three writes them
log = logging.getLogger("scratchkeeper.recovery.reconstruct")

VERIFY_CHUNK = 4 << 20

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


class RebuildingMixin:
    """The rebuild side of :class:`~scratchkeeper.recovery.reconstruct.Recoverer`."""

    # set by Recoverer.__init__
    backend: StorageBackend
    config: SiteConfig
    slots: PatchSlots
    probes: ProbeGroup
    commits: Gathered
    begins: Gathered
    _last_probe: tuple[float, list[OstStatus]] | None

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
