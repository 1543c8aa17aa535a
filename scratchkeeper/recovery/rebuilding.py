"""Attempts at rebuilding files (steps 1-4 and 6 of :mod:`.reconstruct`), made for the files
of a batch together: one probe of their OSTs, a substitute per failed OST of each file, their
rebuilds begun in one call, their lost ranges patched at once (:mod:`.patching`, within the
patch budget), each verified, and their layouts switched in one call; or a file's rebuild
aborted and the file reported lost, or left to another attempt (another substitute, or once
more from scratch), which the files needing one again make together. A single file is a batch
of one.

Also what a file's attempts share (:class:`_FileRecovery`); what recovering it hands back is
:class:`.outcome.Outcome`.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from .. import digests as block_digests
from ..config import SiteConfig
from ..errors import (
    RecoveryError,
    ScratchkeeperError,
    StorageError,
    TargetUnavailable,
    TransferError,
)
from ..state import StateStore
from ..storage import Extent, FileLayout, OstStatus, Rebuild, StorageBackend
from . import records
from .gather import Gathered, PatchBudget, PatchSlots, ProbeGroup, RecoveryInterrupted
from .outcome import LOST, PATCHED, Outcome
from .patching import PatchFailed, _BlockChecker
from .trust import FileHints

# the name recovery's log lines have always carried (recoveryd's log shows it), whichever
# module of the three writes them
log = logging.getLogger("scratchkeeper.recovery.reconstruct")

VERIFY_CHUNK = 4 << 20

#: what an attempt at a file ends with: an outcome (patched, whole or lost), an error that
#: ends its request, or None (to be tried again)
Attempted = Outcome | BaseException | None


class ChecksumMismatch(RecoveryError):
    """The rebuilt file's SHA-256 is not the one recorded at stage-in."""


@dataclass
class _FileRecovery:
    """One file's recovery (:meth:`Recoverer.recover_batch`): what its attempts share and
    what each leaves to the next."""

    index: int  # in its batch
    full: str
    size: int
    hints: FileHints
    reported_osts: tuple[int, ...]
    started: float
    blocks: block_digests.BlockDigests | None  # recorded at stage-in (None: not checked by block)
    on_rebuild: Callable[[Rebuild | None], None]  # told a rebuild aborted (None)
    progress: Callable[[int, int], None] | None
    measure_sources: bool
    outcome: Outcome
    max_attempts: int  # recovery.substitute_attempts
    layout: FileLayout  # read before each attempt
    rebuild: Rebuild | None = None
    resumed: bool = False  # bytes patched before a crash: verify them again
    bad_substitutes: set[int] = field(default_factory=set)
    mismatches: int = 0
    fresh: bool = False  # the first look may reuse a recent probe; a retry always probes again
    # this attempt's: the OSTs found failed, the bytes to patch, when patching began
    failed: list[int] = field(default_factory=list)
    truly_lost: list[Extent] = field(default_factory=list)
    patch_started: float = 0.0


def run_bytes(run: _FileRecovery) -> int:
    """The bytes this attempt at the file is to patch."""
    return sum(e.length for e in run.truly_lost)


class RebuildingMixin:
    """The rebuild side of :class:`~scratchkeeper.recovery.reconstruct.Recoverer`."""

    # set by Recoverer.__init__
    backend: StorageBackend
    config: SiteConfig
    store: StateStore | None
    slots: PatchSlots
    probes: ProbeGroup
    commits: Gathered
    begins: Gathered
    budget: PatchBudget
    _last_probe: tuple[float, list[OstStatus]] | None

    def _recover_together(self, runs: list[_FileRecovery],
                          on_begun: Callable[[list[_FileRecovery]], None]
                          ) -> list[Outcome | BaseException]:
        """Attempt every file of ``runs`` together until each is done; its outcome or error.
        ``on_begun`` is told, once per attempt, the files whose rebuilds were just begun."""
        results: list[Outcome | BaseException | None] = [None] * len(runs)
        pending = list(range(len(runs)))
        while pending:
            trying = []
            for index in pending:
                run = runs[index]
                run.outcome.attempts += 1
                if run.outcome.attempts > 1:
                    try:
                        run.layout = self.backend.layout(run.full)
                    except ScratchkeeperError as err:
                        results[index] = err
                        continue
                trying.append(index)
            answers = self._attempt_together([runs[i] for i in trying], on_begun)
            pending = []
            for index, answer in zip(trying, answers):
                if answer is None:
                    pending.append(index)
                else:
                    results[index] = answer
        return [r if r is not None else RecoveryError("no attempt made") for r in results]

    def _attempt_together(self, runs: list[_FileRecovery],
                          on_begun: Callable[[list[_FileRecovery]], None]) -> list[Attempted]:
        """One attempt at each file: one probe for all, then for each file that lost bytes no
        mirror serves, its rebuild begun (all in one call) or gone on with, and patched."""
        if not runs:
            return []
        answers: list[Attempted] = [None] * len(runs)
        wanted = set().union(*(run.layout.osts() | set(run.reported_osts) for run in runs))
        try:
            statuses = self._probe(wanted, runs[0].fresh, min(run.started for run in runs))
        except ScratchkeeperError as err:
            return [err] * len(runs)
        to_begin: list[int] = []
        to_patch: list[int] = []
        for index, run in enumerate(runs):
            run.fresh = True
            try:
                answers[index] = self._decide(run, statuses)
            except ScratchkeeperError as err:
                answers[index] = err
                continue
            if answers[index] is None:
                (to_patch if run.rebuild is not None else to_begin).append(index)
        # connects while the rebuilds are begun and planned
        self._warm_ahead([(runs[i], run_bytes(runs[i])) for i in sorted(to_patch + to_begin)])
        begun = []
        for index, rebuild in zip(to_begin, self._begin_together(
                [runs[i] for i in to_begin], statuses)):
            run = runs[index]
            if isinstance(rebuild, TargetUnavailable):
                answers[index] = self._no_substitute(run, rebuild)
            elif isinstance(rebuild, BaseException):
                answers[index] = rebuild
            else:
                run.rebuild = rebuild
                begun.append(index)
        if begun:
            try:
                on_begun([runs[i] for i in begun])
            except ScratchkeeperError as err:  # not recorded: nothing may go on with them
                for index in begun:
                    self._abort(runs[index])
                    answers[index] = err
                begun = []
        to_patch = sorted(to_patch + begun)
        for index, answer in zip(to_patch, self._patch_together([runs[i] for i in to_patch])):
            answers[index] = answer
        return answers

    def _decide(self, run: _FileRecovery, statuses: list[OstStatus]) -> Outcome | None:
        """What the probe says of the file: an outcome if it is done (nothing lost, or every
        lost byte served by a mirror); None if it is to be patched (``run.truly_lost``), with
        its rebuild gone on with (``run.rebuild``) or to begin (``run.failed``)."""
        outcome, layout = run.outcome, run.layout
        run.patch_started = time.monotonic()
        healthy = {o.ost_index for o in statuses if o.healthy}
        failed = sorted(layout.osts() - healthy)
        rebuild = run.rebuild
        if rebuild is not None and (rebuild.base_layout_gen != layout.layout_gen
                                    or set(rebuild.substitutes) != set(failed)
                                    or any(s not in healthy
                                           for s in rebuild.substitutes.values())):
            log.info("%s: rebuild %s no longer fits the failed OSTs; starting again",
                     run.full, rebuild.rebuild_id)
            self._abort(run)
        outcome.failed_osts = run.failed = failed
        unreported = set(run.reported_osts) - set(failed)
        if unreported:
            log.info("%s: reported OSTs %s answer the probe", run.full, sorted(unreported))
        if run.rebuild is not None:
            run.truly_lost = layout.lost_extents(run.rebuild.substitutes, run.size)
            return None
        run.truly_lost = layout.lost_extents(failed, run.size)
        if not run.truly_lost:
            outcome.seconds = time.monotonic() - run.started
            outcome.reason = ("a surviving mirror serves every byte" if failed
                              else "no OST of the file has failed")
            return outcome
        if not run.hints.sources:
            raise RecoveryError(f"{run.full}: lost {sum(e.length for e in run.truly_lost)} "
                                f"bytes on OST {', '.join(map(str, failed))} and has no "
                                f"recovery source {run.hints.why_none()}")
        return None

    def _warm_ahead(self, files: list[tuple[_FileRecovery, int]]) -> None:
        """Open the connections of the files that the patch budget lets patch first (in
        order, ``(file, bytes it is to patch)``): each costs the source a fork and a login, so
        none is opened for a file that would wait for the budget anyway."""
        room = self.budget.total
        for run, nbytes in files:
            if not run.hints.sources:
                continue
            self._warm(run.hints.sources[0], run.hints.owner)
            room -= nbytes
            if room <= 0:
                return

    def _begin_together(self, runs: list[_FileRecovery], statuses: list[OstStatus]
                        ) -> list[Rebuild | BaseException]:
        """A substitute per failed OST of each file, and their rebuilds begun in one call
        (with any begun by other recoveries at the same time): one namespace transaction."""
        results: list[Rebuild | BaseException | None] = [None] * len(runs)
        items = []
        # the substitutes the batch picked count as used by the bytes they will take, so that
        # the files of one failure spread over the healthy OSTs instead of all taking one
        taken: dict[int, int] = {}
        for index, run in enumerate(runs):
            try:
                substitutes = self._substitutes(run, statuses, taken)
            except ScratchkeeperError as err:
                results[index] = err
                continue
            items.append((index, (run.full, substitutes)))
        for (index, _), rebuild in zip(items, self.begins.many([item for _, item in items])):
            results[index] = rebuild
            if not isinstance(rebuild, BaseException):
                log.info("%s: rebuild %s: %s, %d bytes to patch", rebuild.path,
                         rebuild.rebuild_id,
                         ", ".join(f"OST {f} -> {s}" for f, s in rebuild.substitutes.items()),
                         sum(e.length for e in rebuild.lost))
        return [r if r is not None else RecoveryError("not begun") for r in results]

    def _substitutes(self, run: _FileRecovery, statuses: list[OstStatus],
                     taken: dict[int, int]) -> dict[int, int]:
        layout = run.layout
        seen = [replace(o, used_bytes=(o.used_bytes or 0) + taken.get(o.ost_index, 0))
                for o in statuses]
        substitutes: dict[int, int] = {}
        for ost in run.failed:
            substitutes[ost] = self.backend.pick_substitute(
                layout, exclude=set(run.failed) | set(substitutes.values()) | run.bad_substitutes,
                osts=seen, failed=ost)
            lost = sum(e.length for e in layout.extents_on_ost(ost, run.size))
            taken[substitutes[ost]] = taken.get(substitutes[ost], 0) + lost
        return substitutes

    def _no_substitute(self, run: _FileRecovery, err: TargetUnavailable) -> Outcome | None:
        """A substitute the recent probe saw healthy failed since: probe all again (None), or
        the file is lost once it ran out of attempts."""
        if err.ost_index is not None:
            run.bad_substitutes.add(err.ost_index)
        if run.outcome.attempts >= run.max_attempts:
            return self._lost(run.outcome, run.started, f"no substitute OST: {err}")
        log.warning("%s: %s; picking another substitute", run.full, err)
        return None

    def _patch_together(self, runs: list[_FileRecovery]) -> list[Attempted]:
        """Patch every file's lost ranges at once into its rebuild (the patch budget bounds the
        bytes in flight), verify each, and switch every layout patched in one call."""
        if not runs:
            return []
        recorder = records.ProgressRecorder(self.store) if self.store is not None else None
        done: list[list[Extent] | BaseException]
        try:
            with self.slots.held():
                if len(runs) == 1:
                    done = [self._patch_file(runs[0], recorder)]
                else:
                    with concurrent.futures.ThreadPoolExecutor(
                            max_workers=len(runs), thread_name_prefix="patch-file") as pool:
                        done = list(pool.map(lambda run: self._patch_file(run, recorder), runs))
        except RecoveryInterrupted as err:  # stopping while waiting for a slot
            return [err] * len(runs)
        patched = [i for i, pending in enumerate(done) if not isinstance(pending, BaseException)]
        # the last bytes written are recorded by the switch itself (one journal update)
        switched = self.commits.many([(runs[i].rebuild, done[i]) for i in patched])
        errors: list[BaseException | None] = [p if isinstance(p, BaseException) else None
                                              for p in done]
        for index, result in zip(patched, switched):
            errors[index] = result if isinstance(result, BaseException) else None
        return [self._after_patch(run, error) for run, error in zip(runs, errors)]

    def _patch_file(self, run: _FileRecovery, recorder: records.ProgressRecorder | None
                    ) -> list[Extent] | BaseException:
        """Patch one file's rebuild and verify it: the extents its switch is to record, or
        what went wrong."""
        outcome, rebuild = run.outcome, run.rebuild
        assert rebuild is not None
        outcome.substitutes = dict(rebuild.substitutes)
        checker = _BlockChecker(run.blocks, run.full) if run.blocks is not None else None
        try:
            verified_ranges, pending = self._patch(rebuild, run.layout, run.hints,
                                                   run.truly_lost, outcome, run.progress,
                                                   run.measure_sources, checker, recorder)
            if checker is not None:
                # blocks checked on arrival need nothing more; the rest (covered in part,
                # or patched before a restart) are read back now they are complete
                self._verify_blocks(rebuild, checker)
                outcome.verified = "blocks"
            else:
                outcome.verified = "ranges" if verified_ranges else "file"
                if not verified_ranges or run.resumed:
                    self._verify_file(rebuild, run.hints)
                    outcome.verified = "file"
        except BaseException as err:  # the caller decides, with the other files' answers
            return err
        return pending

    def _after_patch(self, run: _FileRecovery, error: BaseException | None) -> Attempted:
        """The file's attempt after its patch and switch: patched, lost, to be tried again
        (None), or an error that ends its request."""
        outcome, rebuild = run.outcome, run.rebuild
        assert rebuild is not None
        if error is None:
            outcome.patch_seconds += time.monotonic() - run.patch_started
            outcome.state = PATCHED
            outcome.seconds = time.monotonic() - run.started
            log.info("%s: patched %d bytes (OST %s -> %s) in %.2fs, verified by %s", run.full,
                     outcome.patched_bytes, ",".join(map(str, outcome.substitutes)),
                     ",".join(map(str, outcome.substitutes.values())), outcome.seconds,
                     outcome.verified)
            return outcome
        if isinstance(error, TargetUnavailable):
            self._abort(run)
            if error.ost_index is not None and error.ost_index in outcome.substitutes.values():
                run.bad_substitutes.add(error.ost_index)
            if outcome.attempts >= run.max_attempts:
                return self._lost(outcome, run.started,
                                  f"storage failed during patching: {error}")
            log.warning("%s: %s; trying again with another substitute", run.full, error)
            return None
        if isinstance(error, ChecksumMismatch):
            self._abort(run)
            run.mismatches += 1
            if run.mismatches > 1:
                return self._lost(outcome, run.started, str(error))
            log.warning("%s: %s; patching once more from scratch", run.full, error)
            return None
        if isinstance(error, (PatchFailed, TransferError)):
            self._abort(run)
            return self._lost(outcome, run.started, str(error))
        # anything else (the service stopping, a bug) leaves the rebuild to be resumed
        return error

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
        """Every OST's state, those in ``file_osts`` (the files' and the reported ones) probed
        now.

        After an OST failure recoveryd patches every file that had bytes on it: a probe of every
        OST (recoveryd's check that found the failure, or the first recovery's) serves all that
        start within ``recovery.probe_reuse`` seconds of its end, for the OSTs outside the
        files only (which are healthy, to pick substitutes from). It never says what a file
        lost or that it is whole: OSTs fail and come back meanwhile, so the files' own OSTs,
        whose states decide which ones a rebuild replaces, are probed after their recovery
        began (``since``): once for a batch, and the recoveries that start together share
        that probe (:class:`ProbeGroup`). ``fresh``: probe every OST (a retry after a
        substitute failed), in a probe begun now.
        """
        last = self._last_probe
        if fresh or last is None or time.monotonic() - last[0] > self.config.recovery.probe_reuse:
            return self.probes.probe(None, None if fresh else since)
        by_index = {o.ost_index: o for o in last[1]}
        by_index.update((o.ost_index, o) for o in self.probes.probe(file_osts, since)
                        if o.ost_index in file_osts)
        return [by_index[index] for index in sorted(by_index)]

    def _resumable(self, full: str, rebuild_id: str | None,
                   open_rebuilds: list[Rebuild]) -> Rebuild | None:
        if not rebuild_id:
            return None
        for rebuild in open_rebuilds:
            if rebuild.rebuild_id == rebuild_id and rebuild.path == full:
                log.info("%s: resuming rebuild %s (%d bytes still missing)", full, rebuild_id,
                         sum(e.length for e in rebuild.missing))
                return rebuild
        return None

    def _abort(self, run: _FileRecovery) -> None:
        """Abort the file's rebuild (its objects dropped, the file left as it was)."""
        rebuild = run.rebuild
        run.rebuild, run.resumed = None, False
        if rebuild is None:
            return
        try:
            self.backend.abort_rebuild(rebuild)
        except StorageError as err:
            log.warning("%s: aborting rebuild %s: %s", rebuild.path, rebuild.rebuild_id, err)
        run.on_rebuild(None)

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
