"""Replica operations: create (worker or replica-queue data job), verify, remove, reconcile.

A replica is one extra mirror of the file on OSTs distinct from every OST of the primary
(local store: a mirror with its own objects; Lustre: ``lfs mirror extend -N -o``). The backend's
``add_mirror`` verifies the data it copied (local: read-back SHA-256; Lustre: ``lfs mirror
verify``); :meth:`ReplicaOperations.verify` then checks what the daemon relies on before the
replica counts as ready: the new mirror is there, covers the whole file, shares no OST with the
primary, and the file is still the one the planner staged (size, ``user.scratchkeeper.sha256``).

Crash safety: the ``replicas`` row is written before the storage is touched, naming the mirror
id the storage will give the replica, so :meth:`ReplicaOperations.reconcile` can tell after a
kill -9 whether the mirror was committed (adopt it once verified) or not (forget the row; the
local store collects the objects of an uncommitted mirror itself). The primary is recognised by
the mirror ids recorded before creation and is never removed.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
import time
import uuid
from pathlib import Path

from ..config import SiteConfig
from ..errors import InputError, ReplicationError, ScratchkeeperError, TargetUnavailable
from ..schedulers import Scheduler, SubmitSpec
from ..storage import FileLayout, LayoutRequest, StorageBackend
from .state import ReplicaRow, ReplicationState

log = logging.getLogger(__name__)

SHA256_XATTR = "user.scratchkeeper.sha256"
#: the stage-in's layout record (``planner.layout_directive``), with its workload for hybrid replicas
LAYOUT_XATTR = "user.scratchkeeper.layout"
DATA_JOB_PREFIX = "skrep-"


def primary_mirror_ids(recorded: tuple[int, ...]) -> set[int]:
    """The primary's mirror ids now: a plain file's mirror 0 becomes mirror 1 once mirrored."""
    return {1} if tuple(recorded) == (0,) else set(recorded)


def expected_mirror_id(layout: FileLayout) -> int:
    """The id ``add_mirror`` gives the next mirror (local store and Lustre alike)."""
    return max(layout.mirror_ids + [1]) + 1


class ReplicaOperations:
    """Creates, verifies and removes the daemon's replicas; every step recorded first."""

    def __init__(self, backend: StorageBackend, state: ReplicationState, config: SiteConfig, *,
                 scheduler: Scheduler | None = None, job_dir: str | None = None):
        self.backend = backend
        self.state = state
        self.config = config
        self.scheduler = scheduler
        self.replica_queue = config.scheduler.replica_queue
        self.job_dir = Path(job_dir or Path(config.state.spool_root) / "replica-jobs")

    # -- placement -----------------------------------------------------------------------------
    def choose_osts(self, layout: FileLayout, size: int = 0,
                    count: int | None = None) -> tuple[int, ...]:
        """The storage layer's OSTs for a temporal replica (``StorageBackend.replica_osts``:
        least used outside the primary's; with SUORA, the fastest class with room)."""
        try:
            return self.backend.replica_osts(layout, size, count)
        except TargetUnavailable as err:
            raise ReplicationError(str(err)) from None

    def replica_shape(self, path: str, layout: FileLayout) -> tuple[int | None, int]:
        """(stripe count, stripe size) of the replica: the primary's (count None: as wide as
        the primary), or with ``replication.hybrid`` the layout that serves the requests of the
        file's recorded workload the primary serves worst (``advisor.hybrid``, the layout paper's §5.1)."""
        plain = (None, layout.stripe_size)
        if not self.config.replication.hybrid:
            return plain
        from ..advisor import params_from_config
        from ..advisor.hybrid import hybrid_replica, parse_workload

        record = self.backend.get_xattr(path, LAYOUT_XATTR)
        try:
            workload = parse_workload(record.decode("utf-8", "replace")) if record else None
        except InputError as err:
            log.warning("%s: %s: %s; a replica in the primary's layout", path, LAYOUT_XATTR, err)
            return plain
        if workload is None:
            log.info("%s: hybrid: no workload recorded (the stage-in had no -layout auto); a "
                     "replica in the primary's layout", path)
            return plain
        room, total = self.backend.replica_room(layout)
        if room < 1:
            return plain  # choose_osts says why
        choice = hybrid_replica(workload, (layout.stripe_count, layout.stripe_size), room,
                                total, params_from_config(self.config.layout))
        log.info("%s: hybrid: %s", path, choice.reason)
        return (choice.stripe_count, choice.stripe_size) if choice.differs else plain

    # -- creation ------------------------------------------------------------------------------
    def create(self, path: str, *, job_id: str, reason: str, owner_uid: int | None,
               checksum: str | None) -> str:
        """Make (or, in replica-queue mode, submit) the replica of ``path``; returns the outcome."""
        existing = self.state.replica(path)
        if existing is not None and existing.state != "failed":
            return "exists"
        give_up = self.config.replication.create_attempts
        try:
            info = self.backend.stat(path)
            layout = self.backend.layout(path)
        except InputError as err:
            self.state.record_refusal(path, job_id=job_id, reason=reason, error=str(err),
                                      attempts=give_up)
            raise ReplicationError(f"{path}: cannot be replicated: {err}") from err
        if owner_uid is not None and info.uid != owner_uid:
            # a root daemon acts on a user's file only for the user who owns it
            message = (f"{path}: owned by uid {info.uid}, not by uid {owner_uid} who owns job "
                       f"{job_id}; not replicated")
            self.state.record_refusal(path, job_id=job_id, reason=reason, error=message,
                                      attempts=give_up)
            raise ReplicationError(message)
        primary = tuple(layout.mirror_ids)
        if len(primary) > 1:
            message = (f"{path}: already has {len(primary)} mirrors made outside the daemon; "
                       "not replicated again")
            self.state.record_refusal(path, job_id=job_id, reason=reason, error=message,
                                      attempts=give_up)
            raise ReplicationError(message)
        token = uuid.uuid4().hex
        try:
            count, stripe_size = self.replica_shape(path, layout)
            osts = self.choose_osts(layout, info.size, count)
        except ReplicationError as err:
            self.state.record_refusal(path, job_id=job_id, reason=reason, error=str(err),
                                      attempts=(existing.attempts if existing else 0) + 1)
            raise
        attempt = self.state.begin_create(path, job_id=job_id, reason=reason,
                                          expected_mirror_id=expected_mirror_id(layout),
                                          primary_mirrors=primary, primary_osts=layout.osts(),
                                          size=info.size, checksum=checksum, token=token)
        if attempt is None:
            return "exists"
        try:
            if self.replica_queue and self.scheduler is not None:
                data_job = self._submit_data_job(path, token, osts, stripe_size)
                self.state.set_data_job(path, token, data_job)
                log.info("%s: replica for job %s submitted as data job %s (OSTs %s)", path,
                         job_id, data_job, ",".join(map(str, osts)))
                return "submitted"
            log.info("%s: copying %d bytes for job %s (%s) to OSTs %s", path, info.size, job_id,
                     reason, ",".join(map(str, osts)))
            started = time.monotonic()
            self.backend.add_mirror(path, LayoutRequest(ost_list=osts, stripe_size=stripe_size))
            row = self.state.replica(path)
            mirror_id, mirror_osts = self.verify(row)
            self.state.mark_ready(path, token, mirror_id, mirror_osts)
            log.info("%s: replica ready for job %s (%s, attempt %d): mirror %d on OSTs %s, "
                     "%.1fs", path, job_id, reason, attempt, mirror_id,
                     ",".join(map(str, sorted(mirror_osts))), time.monotonic() - started)
            return "ready"
        except ScratchkeeperError as err:
            self.fail(path, token, str(err))
            raise

    def fail(self, path: str, token: str, error: str) -> None:
        """A creation failed: drop any mirror it committed, keep the row failed until retry."""
        row = self.state.replica(path)
        if row is not None and row.token == token:
            self._drop_new_mirror(row)
        self.state.mark_failed(path, token, error,
                               time.time() + self.config.replication.retry_delay)
        log.warning("%s: replica failed: %s", path, error)

    def _submit_data_job(self, path: str, token: str, osts: tuple[int, ...],
                         stripe_size: int) -> str:
        """A job in the replica queue that adds the mirror; the daemon verifies it afterwards."""
        self.job_dir.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "scratchkeeper"]
        if self.config.source != "(defaults)":
            argv += ["--config", str(Path(self.config.source).resolve())]
        argv += ["store", "mirror", path, "--ost-list", ",".join(map(str, osts)),
                 "--stripe-size", str(stripe_size)]
        script = self.job_dir / f"{DATA_JOB_PREFIX}{token}.sh"
        script.write_text("#!/bin/bash\n# replica of " + shlex.quote(path) + " (scratchkeeper "
                          "replicad)\nexec " + shlex.join(argv) + "\n")
        os.chmod(script, 0o700)
        spec = SubmitSpec(script_path=str(script), queue=self.replica_queue,
                          job_name=DATA_JOB_PREFIX + token[:16], workdir=str(self.job_dir),
                          output_path=str(self.job_dir / f"{DATA_JOB_PREFIX}{token}.out"))
        return self.scheduler.submit(spec)

    def finish_data_job(self, row: ReplicaRow, succeeded: bool, detail: str) -> None:
        """The replica's data job ended: verify what it made, or record the failure."""
        if not succeeded:
            self.fail(row.path, row.token, f"data job {row.data_job_id} {detail}")
            return
        try:
            mirror_id, osts = self.verify(row)
        except ScratchkeeperError as err:
            self.fail(row.path, row.token, str(err))
            return
        self.state.mark_ready(row.path, row.token, mirror_id, osts)
        log.info("%s: replica ready (data job %s): mirror %d", row.path, row.data_job_id,
                 mirror_id)
        for suffix in (".sh", ".out"):
            try:
                (self.job_dir / f"{DATA_JOB_PREFIX}{row.token}{suffix}").unlink()
            except FileNotFoundError:
                pass

    # -- verification --------------------------------------------------------------------------
    def new_mirror_id(self, row: ReplicaRow, layout: FileLayout) -> int | None:
        """The mirror this row's creation committed, if any."""
        primary = primary_mirror_ids(row.primary_mirrors)
        fresh = [m for m in layout.mirror_ids if m not in primary and m >= row.expected_mirror_id]
        if row.expected_mirror_id in fresh:
            return row.expected_mirror_id
        return fresh[0] if len(fresh) == 1 else None

    def verify(self, row: ReplicaRow) -> tuple[int, set[int]]:
        """Check the committed mirror before it counts: present, whole, distinct, same file."""
        layout = self.backend.layout(row.path)
        mirror_id = self.new_mirror_id(row, layout)
        if mirror_id is None:
            raise ReplicationError(f"{row.path}: no new mirror in layout (mirrors "
                                   f"{layout.mirror_ids})")
        components = sorted(layout.mirror(mirror_id), key=lambda c: c.extent_start)
        covered = 0
        for comp in components:
            if comp.extent_start > covered or not comp.instantiated:
                raise ReplicationError(f"{row.path}: mirror {mirror_id} does not cover byte "
                                       f"{covered}")
            covered = comp.extent_end if comp.extent_end is not None else -1
            if covered == -1:
                break
        if covered != -1:
            raise ReplicationError(f"{row.path}: mirror {mirror_id} stops at byte {covered}")
        osts = layout.osts(mirror_id)
        primary = primary_mirror_ids(row.primary_mirrors)
        primary_osts = set().union(*(layout.osts(m) for m in primary))
        if osts & primary_osts:
            raise ReplicationError(f"{row.path}: mirror {mirror_id} shares OSTs "
                                   f"{sorted(osts & primary_osts)} with the primary")
        info = self.backend.stat(row.path)
        if info.size != row.size:
            raise ReplicationError(f"{row.path}: size changed from {row.size} to {info.size} "
                                   "while it was replicated")
        if row.checksum:
            stored = self.backend.get_xattr(row.path, SHA256_XATTR)
            expected = row.checksum.removeprefix("sha256:")
            if stored is not None and stored.decode(errors="replace") != expected:
                raise ReplicationError(f"{row.path}: sha256 xattr {stored.decode()[:12]}... is not "
                                       f"the staged {expected[:12]}...; the file was replaced")
        return mirror_id, osts

    def invalidated(self, row: ReplicaRow) -> bool:
        """A ready replica a write made stale: the mount writes a hybrid file's data to one
        mirror and marks the others stale (Lustre FLR does the same), so this copy no longer
        holds the file and is never read."""
        if row.mirror_id is None:
            return False
        try:
            layout = self.backend.layout(row.path)
        except ScratchkeeperError:
            return False
        return any("stale" in c.flags.split(",") for c in layout.mirror(row.mirror_id))

    # -- removal -------------------------------------------------------------------------------
    def remove(self, row: ReplicaRow, why: str) -> None:
        """Drop the replica (never the primary) and its row.

        Not while an OST of the primary is down: the replica may then be the only whole copy
        (reads are served from it and recovery rebuilds the primary from it), so removal waits.
        """
        self._check_primary_whole(row)
        self.state.begin_remove(row.path, row.token)
        self._drop_new_mirror(row)
        self.state.forget_replica(row.path, row.token)
        log.info("%s: replica of job %s removed (%s)", row.path, row.job_id, why)

    def _check_primary_whole(self, row: ReplicaRow) -> None:
        if row.mirror_id is None:
            return
        try:
            layout = self.backend.layout(row.path)
        except InputError:
            return
        primary = set().union(*(layout.osts(m) for m in layout.mirror_ids if m != row.mirror_id))
        down = sorted(o.ost_index for o in self.backend.list_osts()
                      if o.ost_index in primary and not o.healthy)
        if down:
            raise ReplicationError(f"{row.path}: replica kept: the primary has stripes on "
                                   f"unavailable OST{'s' if len(down) > 1 else ''} "
                                   f"{','.join(map(str, down))}")

    def _drop_new_mirror(self, row: ReplicaRow) -> None:
        try:
            layout = self.backend.layout(row.path)
        except InputError:
            return  # the file itself is gone: nothing left to drop
        mirror_id = row.mirror_id if row.mirror_id is not None else self.new_mirror_id(row, layout)
        primary = primary_mirror_ids(row.primary_mirrors)
        if mirror_id is None or mirror_id not in layout.mirror_ids or mirror_id in primary:
            return
        if not set(layout.mirror_ids) - {mirror_id}:
            raise ReplicationError(f"{row.path}: mirror {mirror_id} is the only copy left; "
                                   "not removed")
        self.backend.remove_mirror(row.path, mirror_id)

    # -- after a restart -----------------------------------------------------------------------
    def reconcile(self, row: ReplicaRow, queued_names: dict[str, str]) -> str:
        """Finish or undo what a killed daemon left in ``row``; returns what was done.

        ``queued_names`` maps job names in the queue to job ids (replica-queue data jobs).
        """
        if row.state == "removing":
            try:
                self.remove(row, "removal interrupted by a restart")
            except ReplicationError as err:
                self.state.cancel_remove(row.path, row.token)   # kept: the next cycle decides
                log.warning("%s", err)
                return "kept"
            return "removed"
        if row.state == "failed":
            return "failed"
        if row.state == "ready":
            try:
                layout = self.backend.layout(row.path)
            except InputError:
                self.state.forget_replica(row.path, row.token)
                return "file gone"
            if row.mirror_id not in layout.mirror_ids:
                self.state.forget_replica(row.path, row.token)
                return "mirror gone"
            return "ready"
        # creating
        name = DATA_JOB_PREFIX + row.token[:16]
        if row.data_job_id is None and name in queued_names:
            self.state.set_data_job(row.path, row.token, queued_names[name])
            return "data job adopted"
        if row.data_job_id is not None:
            return "data job pending"  # the cycle follows it like any other
        try:
            mirror_id, osts = self.verify(row)
        except InputError:
            self.state.forget_replica(row.path, row.token)
            return "file gone"
        except ReplicationError as err:
            # not committed (the store collects its objects) or not usable: undo
            self._drop_new_mirror(row)
            self.state.forget_replica(row.path, row.token)
            log.info("%s: interrupted replica undone: %s", row.path, err)
            return "undone"
        self.state.mark_ready(row.path, row.token, mirror_id, osts)
        return "adopted"
