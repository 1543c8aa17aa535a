"""``scratchkeeper replicad``: the head-node replication daemon (the thesis, §4.5.4).

Each cycle: one batched queue query (``Scheduler.snapshot``), the jobs with claims that left the
queue confirmed through accounting (``Scheduler.lookup``), the known inputs from the planner,
then :func:`~.decisions.decide` and the operations it asks for: claims in one transaction,
removals at once, creations on a bounded worker pool (or as data jobs in the replica queue).
Job-end events sent by scheduler hooks wake the loop early; file closes come from the
:mod:`.closes` watcher.

When the scheduler cannot be asked, nothing is decided and nothing removed: the cycle is
skipped, the consecutive-failure counter grows and the next try waits
``min(backoff_max, interval * 2**(failures-1))`` with +-50 % jitter. A restart (after a kill -9
too) first reconciles every row left ``creating``/``removing`` with the store.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .. import stopping
from ..config import SiteConfig
from ..errors import ScratchkeeperError, StateError, UnknownJobError
from ..schedulers import Scheduler, get_scheduler
from ..schedulers.base import JobState, QueueSnapshot
from ..state import StateStore, daemon_lock
from ..storage import StorageBackend, open_backend
from .closes import ChangelogReader, CloseTracker, InotifyWatcher
from .decisions import CycleInput, Decisions, InputFile, JobInputs, RemoveReplica, decide
from .inputs import KnownInputs
from .replicas import DATA_JOB_PREFIX, ReplicaOperations
from .state import FILE_CLOSED, ReplicationState, active_claim_count, daemon_status, replica_counts
from .window import WindowParams

log = logging.getLogger(__name__)

SYSTEM_NODES_REFRESH = 600.0   # seconds between sinfo/pbsnodes calls for S
EVENT_POLL = 0.5               # seconds between looks at the event inbox


@dataclass
class CycleReport:
    """What one cycle did, for logs, ``replicas --json`` and tests."""

    started: float
    ok: bool
    decisions: Decisions | None = None
    error: str = ""
    created: int = 0
    removed: int = 0
    confirmed_ended: list[str] = field(default_factory=list)


def window_params(config: SiteConfig) -> tuple[WindowParams, dict[str, WindowParams]]:
    """The site's alpha/T and each partition's override (unset keys inherit the site's)."""
    replication = config.replication
    base = WindowParams(replication.alpha, replication.threshold)
    per_partition = {
        name: WindowParams(override.alpha if override.alpha is not None else base.alpha,
                           override.threshold if override.threshold is not None
                           else base.threshold)
        for name, override in replication.partitions.items()}
    return base, per_partition


def scratch_bytes(backend: StorageBackend) -> int | None:
    """Size of the scratch file system: the local store's OSTs share one file system."""
    totals = [o.total_bytes for o in backend.list_osts() if o.total_bytes]
    if not totals:
        return None
    return max(totals) if backend.name == "local" else sum(totals)


class ReplicationDaemon:
    """The decision loop; ``run()`` until ``stop()`` or SIGTERM."""

    def __init__(self, config: SiteConfig, *, scheduler: Scheduler | None = None,
                 backend: StorageBackend | None = None, store: StateStore | None = None,
                 clock: Callable[[], float] = time.time):
        self.config = config
        self.scheduler = scheduler or get_scheduler(config)
        self.backend = backend or open_backend(config)
        self.store = store or StateStore(config.state.database)
        self.state = ReplicationState(self.store)
        self.operations = ReplicaOperations(self.backend, self.state, config,
                                            scheduler=self.scheduler)
        self.clock = clock
        self.params, self.partition_params = window_params(config)
        self.ignored_queues = frozenset(q for q in (config.scheduler.data_queue,
                                                    config.scheduler.replica_queue) if q)
        self.stop_event = threading.Event()
        self.wake_event = threading.Event()
        self.failures = 0
        self.cycles = 0
        self._system_nodes: tuple[float, int] | None = None
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=config.replication.workers, thread_name_prefix="replica")
        self._in_flight: dict[str, None] = {}
        self._running_since: dict[str, float] = {}
        self._sizes: dict[str, int] = {}
        self._sized: tuple[dict | None, dict] = (None, {})
        self._known_inputs = KnownInputs(self.store, self.backend.scratch_root)
        self._tracker = CloseTracker(quiet=config.replication.close_quiet)
        self._watcher: InotifyWatcher | None = None
        self._changelog: ChangelogReader | None = None
        self._changelog_closed: dict[str, float] = {}     # path -> last CLOSE record time
        self._lock_handle = None
        self._metrics = None

    # -- life cycle ----------------------------------------------------------------------------
    def acquire_lock(self) -> None:
        """One daemon per state database: a second one would double every replica."""
        self._lock_handle = daemon_lock(self.config.state.database, "replicad")

    def install_signal_handlers(self) -> None:
        stopping.on_stop_signals(self.stop)

    def stop(self) -> None:
        self.stop_event.set()
        self.wake_event.set()

    def start_close_events(self) -> None:
        mode = self.config.replication.close_events
        storage = self.config.storage
        if mode == "none":
            return
        if storage.backend == "local" and mode in ("auto", "inotify"):
            directories = [str(self.backend.store_root / f"ost{o.ost_index:04d}")
                           for o in self.backend.list_osts()]
            directories = [d if os.path.isdir(d) else d + ".failed" for d in directories]
            self._watcher = InotifyWatcher([d for d in directories if os.path.isdir(d)],
                                           self._tracker)
            self._watcher.start()
            log.info("replicad: watching closes on %d OST directories (inotify)",
                     len(directories))
        elif storage.backend == "lustre" and (mode == "changelog" or
                                              (mode == "auto" and
                                               self.config.replication.changelog_mdt)):
            self._changelog = ChangelogReader(storage.lfs, self.config.replication.changelog_mdt,
                                              self.config.replication.changelog_user,
                                              timeout=self.config.scheduler.command_timeout)
            log.info("replicad: reading CLOSE records of %s", self.config.replication.changelog_mdt)
        else:
            log.info("replicad: no close events (%s backend, close_events=%s): replicas are "
                     "removed at job end", storage.backend, mode)

    def run(self, *, max_cycles: int | None = None) -> int:
        """Loop until stopped: reconcile once, then a cycle every ``interval`` (or on an event).

        Returns the exit code: 1 when ``max_cycles`` ran out on a failed cycle, else 0.
        """
        report: CycleReport | None = None
        self.acquire_lock()
        self._serve_metrics()
        try:
            self.start_close_events()
        except ScratchkeeperError as err:
            self._watcher = self._changelog = None
            log.warning("replicad: no close events (%s): replicas are removed at job end", err)
        try:
            self.reconcile()
            while not self.stop_event.is_set():
                report = self.cycle()
                self.cycles += 1
                if max_cycles is not None and self.cycles >= max_cycles:
                    self._pool.shutdown(wait=True)   # --once: every decided creation is made
                    break
                self._sleep(self._pause(report))
        finally:
            self.shutdown()
        if max_cycles is not None and report is not None and not report.ok:
            log.error("replicad: last cycle failed: %s", report.error)
            return 1
        return 0

    def _serve_metrics(self) -> None:
        """The Prometheus endpoint (metrics.replicad), once the lock says this is the one
        replicad of the state database; imported here: only the daemon serves it."""
        from ..metrics import serve
        from ..metrics.replication import ReplicationCollector

        self._metrics = serve(self.config, "replicad", [ReplicationCollector(
            replica_counts=functools.partial(replica_counts, self.store),
            active_claims=functools.partial(active_claim_count, self.store),
            daemon_status=functools.partial(daemon_status, self.store),
            max_space_fraction=self.config.replication.max_space_fraction)])

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Wait until no creation is in flight; False when ``timeout`` passed first."""
        deadline = time.monotonic() + timeout
        while self._in_flight:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def shutdown(self) -> None:
        # a creation in progress finishes its storage step (the row tells a restart otherwise)
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self._watcher is not None:
            self._watcher.stop()
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None
        if self._lock_handle is not None:
            self._lock_handle.close()
            self._lock_handle = None

    def _pause(self, report: CycleReport) -> float:
        interval = self.config.replication.interval
        if report.ok or self.failures == 0:
            return interval
        delay = min(self.config.replication.backoff_max, interval * 2 ** (self.failures - 1))
        return delay * random.uniform(0.5, 1.5)

    def _sleep(self, seconds: float) -> None:
        """Wait for the next cycle; an event (job end, close) or SIGTERM wakes the loop early."""
        deadline = time.monotonic() + seconds
        self.wake_event.clear()
        while not self.stop_event.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if self.wake_event.wait(min(left, EVENT_POLL)):
                return
            stopping.poll()  # a stop signal's action runs here, never inside its handler
            if self.stop_event.is_set():
                return
            try:
                if self.failures == 0 and self.state.has_events():
                    return
            except StateError:
                continue

    def forget_kept(self) -> None:
        """Drop what is kept between cycles: the next cycle reads the planner, the claims and
        the replicas whole and writes every status key, as the first cycle after a start does."""
        self._known_inputs.forget()
        self._sized = (None, {})
        self.state.forget_kept()

    # -- restart -------------------------------------------------------------------------------
    def reconcile(self) -> dict[str, int]:
        """Finish or undo what the previous daemon left half-done (kill -9 at any line)."""
        rows = [r for r in self.state.replicas().values() if r.state in ("creating", "removing",
                                                                          "ready")]
        if not rows:
            return {}
        queued_names: dict[str, str] = {}
        if any(r.state == "creating" for r in rows) and self.config.scheduler.replica_queue:
            try:
                queued_names = {j.name: j.job_id for j in self.scheduler.snapshot().jobs
                                if j.name.startswith(DATA_JOB_PREFIX)}
            except ScratchkeeperError as err:
                log.warning("replicad: queue unavailable during reconcile (%s); replica data "
                            "jobs are matched next cycle", err)
                rows = [r for r in rows if not (r.state == "creating" and r.data_job_id is None)]
        outcome: dict[str, int] = {}
        for row in rows:
            try:
                result = self.operations.reconcile(row, queued_names)
            except ScratchkeeperError as err:
                result = "error"
                log.warning("%s: reconcile failed: %s", row.path, err)
            outcome[result] = outcome.get(result, 0) + 1
        log.info("replicad: reconciled %s", ", ".join(f"{n} {k}" for k, n in outcome.items()))
        return outcome

    # -- one cycle -----------------------------------------------------------------------------
    def system_nodes(self) -> int:
        if self.config.replication.system_nodes:
            return self.config.replication.system_nodes
        now = time.monotonic()
        if self._system_nodes is None or now - self._system_nodes[0] > SYSTEM_NODES_REFRESH:
            self._system_nodes = (now, self.scheduler.system_nodes(
                self.config.scheduler.batch_queue))
        return self._system_nodes[1]

    def cycle(self) -> CycleReport:
        """One decision cycle; a scheduler failure skips it (no action on stale data)."""
        started = self.clock()
        events = self.state.pending_events()
        try:
            snapshot = self.scheduler.snapshot()
            system_nodes = self.system_nodes()
        except ScratchkeeperError as err:
            self.failures += 1
            log.warning("replicad: scheduler unavailable (%d consecutive failures): %s",
                        self.failures, err)
            self.state.set_status({"consecutive_failures": self.failures,
                                   "last_error": str(err), "last_failure": started})
            return CycleReport(started, False, error=str(err))
        if self.failures:
            log.info("replicad: scheduler answers again after %d failures", self.failures)
        self.failures = 0
        report = CycleReport(started, True)
        try:
            self._decide_and_act(snapshot, system_nodes, events, report)
        except StateError:
            raise
        except ScratchkeeperError as err:
            report.ok = False
            report.error = str(err)
            log.warning("replicad: cycle failed: %s", err)
        return report

    def _decide_and_act(self, snapshot: QueueSnapshot, system_nodes: int, events,
                        report: CycleReport) -> None:
        present = {job.job_id: job for job in snapshot.jobs}
        claims = self.state.claims()
        rows = self.state.statuses()
        if any(r.state in ("creating", "removing") for r in rows.values()):
            self._repair_stuck(self.state.replicas_in("creating", "removing"), present)
            rows = self.state.statuses()

        # jobs with claims that left the queue: ask accounting (an end event only wakes the
        # loop early; the scheduler's word is what counts, as the epilog also runs on requeue)
        vanished = sorted({c.job_id for c in claims} - set(present))
        ended, unconfirmed = self._confirm_ended(vanished, claims)
        report.confirmed_ended = sorted(ended)

        job_ids = set(present) | {c.job_id for c in claims}
        inputs, checksums = self._known_inputs.get(job_ids)
        inputs = self._fill_sizes(inputs)
        closed = self._closed_pairs(snapshot, claims, events, rows)
        total = scratch_bytes(self.backend)
        budget = int(total * self.config.replication.max_space_fraction) if total else None
        decisions = decide(CycleInput(
            snapshot=snapshot, system_nodes=system_nodes, inputs=inputs, claims=claims,
            replicas=rows, ended=ended,
            closed=frozenset(closed), params=self.params, partition_params=self.partition_params,
            ignored_queues=self.ignored_queues, space_budget=budget))
        report.decisions = decisions
        self.state.apply_claims(decisions.claim, decisions.release, decisions.forget)
        if events:
            self.state.drop_events(max(e["event_id"] for e in events))

        removals = list(decisions.remove)
        if self.config.replication.hybrid:
            leaving = {r.path for r in removals}
            removals += [RemoveReplica(row.path, "invalidated: a write made the replica stale")
                         for row in self.state.replicas_in("ready").values()
                         if row.path not in leaving and self.operations.invalidated(row)]
        for removal in removals:
            row = self.state.replica(removal.path)
            if row is None:
                continue
            try:
                self.operations.remove(row, removal.why)
                self._tracker.unwatch(removal.path)
                report.removed += 1
            except ScratchkeeperError as err:
                log.warning("%s: removal failed (kept for the next cycle): %s", removal.path, err)
        owners = {job_id: item.owner_uid for job_id, item in inputs.items()}
        for creation in decisions.create:
            if self._start_creation(creation.path, creation.job_id, creation.reason,
                                    owners.get(creation.job_id), checksums.get(creation.path)):
                report.created += 1
        if any(r.state == "failed" for r in rows.values()):
            report.created += self._retry_failed(self.state.replicas_in("failed"), owners)
        if self._watcher is not None:
            self._watch_replicas(self.state.replicas_in("ready"))
        self._publish(snapshot, system_nodes, decisions, report, total, unconfirmed)

    def _fill_sizes(self, inputs: dict) -> dict:
        """Declared inputs (``-input``) have no recorded size: ask the store once, then cache."""
        if inputs is self._sized[0]:
            return self._sized[1]           # the planner's answer did not change
        filled = {}
        for job_id, item in inputs.items():
            if all(f.size is not None for f in item.files):
                filled[job_id] = item
                continue
            files = []
            for f in item.files:
                if f.size is None:
                    if f.path not in self._sizes:
                        try:
                            self._sizes[f.path] = self.backend.stat(f.path).size
                        except ScratchkeeperError:
                            continue      # not in the store (yet): nothing to replicate
                    f = InputFile(f.path, self._sizes[f.path])
                files.append(f)
            filled[job_id] = JobInputs(job_id, item.owner_uid, tuple(files))
        if all(f.path in self._sizes for item in inputs.values() for f in item.files
               if f.size is None):
            self._sized = (inputs, filled)   # every size known: the same answer next time
        return filled

    def _start_creation(self, path: str, job_id: str, reason: str, owner_uid: int | None,
                        checksum: str | None) -> bool:
        if path in self._in_flight:
            return False
        self._in_flight[path] = None   # before submit: a fast worker pops it when done
        try:
            self._pool.submit(self._create, path, job_id, reason, owner_uid, checksum)
        except RuntimeError:            # the pool is shutting down
            self._in_flight.pop(path, None)
            return False
        return True

    def _create(self, path: str, job_id: str, reason: str, owner_uid: int | None,
                checksum: str | None) -> None:
        try:
            outcome = self.operations.create(path, job_id=job_id, reason=reason,
                                             owner_uid=owner_uid, checksum=checksum)
            if outcome == "ready" and self._watcher is not None:
                row = self.state.replica(path)
                if row is not None and row.state == "ready":
                    self._watch_one(row)   # at once: the job may read it the second it starts
        except ScratchkeeperError as err:
            log.warning("%s: replica for job %s not made: %s", path, job_id, err)
        except Exception:  # a worker must never die silently
            log.exception("%s: replica for job %s: unexpected error", path, job_id)
        finally:
            # no wake-up here: a burst of copies must not turn into a burst of queue queries
            self._in_flight.pop(path, None)

    def _retry_failed(self, rows: dict, owners: dict[str, int]) -> int:
        """Failed creations whose retry time came, for files still wanted: try again."""
        now = self.clock()
        due = [r for r in rows.values() if r.state == "failed" and (r.retry_after or 0) <= now
               and r.attempts < self.config.replication.create_attempts
               and r.path not in self._in_flight]
        if not due:
            return 0
        wanting: dict[str, list[str]] = {}
        for claim in self.state.claims():
            if claim.active:
                wanting.setdefault(claim.path, []).append(claim.job_id)
        started = 0
        for row in due:
            # the owner check is made again: never act for a user on a file not theirs
            for job_id in wanting.get(row.path, []):
                if job_id in owners:
                    started += self._start_creation(row.path, job_id, row.reason,
                                                    owners[job_id], row.checksum)
                    break
        return started

    def _repair_stuck(self, rows: dict, present: dict) -> None:
        """Rows no worker is on: a removal that failed half-way, a creation whose data job was
        not matched at start; replica data jobs that ended are verified."""
        names = {j.name: j.job_id for j in present.values() if j.name.startswith(DATA_JOB_PREFIX)}
        for path, row in rows.items():
            if path in self._in_flight or (row.state == "creating" and row.data_job_id):
                continue
            try:
                self.operations.reconcile(row, names)
            except ScratchkeeperError as err:
                log.warning("%s: %s row not repaired yet: %s", path, row.state, err)
        self._follow_data_jobs({p: r for p, r in rows.items() if r.data_job_id}, present)

    def _follow_data_jobs(self, rows: dict, present: dict) -> None:
        """Replica-queue mode: verify the mirror a finished data job made."""
        waiting = [r for r in rows.values() if r.state == "creating" and r.data_job_id
                   and r.path not in self._in_flight]
        gone = [r for r in waiting if r.data_job_id not in present
                or present[r.data_job_id].state.is_final]
        if not gone:
            return
        try:
            records = self.scheduler.lookup([r.data_job_id for r in gone])
        except ScratchkeeperError as err:
            log.warning("replicad: cannot confirm replica data jobs: %s", err)
            return
        for row in gone:
            record = records.get(row.data_job_id)
            if record is None or not record.state.is_final:
                continue
            ok = record.state is JobState.COMPLETED or (record.state is JobState.ENDED
                                                        and record.exit_code in (0, None))
            self.operations.finish_data_job(row, ok, record.state.value)

    def _confirm_ended(self, vanished: list[str], claims) -> tuple[dict[str, JobState], list[str]]:
        """Final states of jobs gone from the queue, from accounting; the rest stay unconfirmed."""
        if not vanished:
            return {}, []
        ended: dict[str, JobState] = {}
        try:
            found = self._lookup_known(vanished)
        except ScratchkeeperError as err:
            log.warning("replicad: cannot confirm %d vanished jobs (%s); their replicas stay",
                        len(vanished), err)
            return {}, vanished
        unknown = [j for j in vanished if j not in found]
        for job_id, record in found.items():
            if record.state.is_final:
                ended[job_id] = record.state
        if unknown:
            now = self.clock()
            since = self.state.mark_missing(unknown, now)
            for job_id in unknown:
                if now - since.get(job_id, now) >= self.config.replication.unknown_grace:
                    ended[job_id] = JobState.ENDED
        known = [j for j in vanished if j in found]
        if known:
            self.state.clear_missing(known)
        return ended, [j for j in vanished if j not in ended]

    def _lookup_known(self, job_ids: list[str]) -> dict:
        """``Scheduler.lookup`` that leaves out ids neither queue nor accounting knows."""
        try:
            return self.scheduler.lookup(job_ids)
        except UnknownJobError:
            # some are unknown: one accounting query tells which of them it does know (they
            # are not in the queue: the snapshot of this very cycle said so)
            wanted = set(job_ids)
            return {r.job_id: r for r in self.scheduler.history(job_ids) if r.job_id in wanted}

    def _closed_pairs(self, snapshot: QueueSnapshot, claims, events, rows) -> set[tuple[str, str]]:
        """(job, path) pairs whose running job has closed the replicated file."""
        now = time.time()
        if self._changelog is not None:
            try:
                ready = {p for p, r in rows.items() if r.state == "ready"}
                closes, last = self._changelog.closes(ready)
                # a record is cleared once read: keep its close until the claim is released
                kept = {p: t for p, t in self._changelog_closed.items() if p in ready}
                for path, when in closes.items():
                    kept[path] = max(kept.get(path, 0.0), when)
                self._changelog_closed = kept
                if last is not None:
                    self._changelog.clear(last)
            except ScratchkeeperError as err:
                log.warning("replicad: changelog unavailable, removal at job end only: %s", err)
        event_closes: dict[tuple[str, str], float] = {}
        for e in events:
            if e["kind"] == FILE_CLOSED:
                event_closes[(e["job_id"], e["path"])] = e["received"]
        running = {j.job_id: j for j in snapshot.jobs if j.state is JobState.RUNNING}
        for job_id in list(self._running_since):
            if job_id not in running:
                del self._running_since[job_id]
        pairs = set()
        for claim in claims:
            job = running.get(claim.job_id)
            row = rows.get(claim.path)
            if not claim.active or job is None or row is None or row.state != "ready":
                continue
            seen = self._running_since.setdefault(claim.job_id, now)
            started = job.start_time - 1.0 if job.start_time else seen
            reported = max(event_closes.get((claim.job_id, claim.path), 0.0),
                           event_closes.get(("", claim.path), 0.0),
                           self._changelog_closed.get(claim.path, 0.0))
            if reported >= started or self._tracker.closed_since(claim.path, started, now):
                pairs.add((claim.job_id, claim.path))
        for _, path in pairs:
            self._changelog_closed.pop(path, None)
        return pairs

    def _watch_replicas(self, rows) -> None:
        """Follow opens and closes of every file with a ready replica (local store, inotify)."""
        if self._watcher is None:
            return
        watched = self._tracker.watched()
        ready = {path: row for path, row in rows.items() if row.state == "ready"}
        for path, row in ready.items():
            if path not in watched:
                self._watch_one(row)
        for path in watched - set(ready):
            self._tracker.unwatch(path)

    def _watch_one(self, row) -> None:
        try:
            layout = self.backend.layout(row.path)
        except ScratchkeeperError:
            return
        objects = [o.object_id for c in layout.components if c.mirror_id != row.mirror_id
                   for o in c.objects]
        self._tracker.watch(row.path, objects)

    def _publish(self, snapshot, system_nodes, decisions: Decisions, report: CycleReport,
                 total: int | None, unconfirmed: list[str]) -> None:
        targets = {job_id: {"reason": t.reason, "position": t.position, "group": t.group,
                            "nodes": t.nodes}
                   for job_id, t in decisions.targets.items()}
        self.state.set_status({
            "last_cycle": report.started, "last_cycle_seconds": self.clock() - report.started,
            "consecutive_failures": 0, "queued": len(snapshot.pending()),
            "running": len(snapshot.running()), "system_nodes": system_nodes,
            "windows": [{"group": w.group, "queued": w.queued, "required_nodes": w.required,
                         "length": w.length, "alpha": w.params.alpha,
                         "threshold": w.params.threshold} for w in decisions.windows],
            "targets": targets,
            "at_risk": [{"job_id": a.job_id, "paths": list(a.paths)} for a in decisions.at_risk],
            "queued_without_inputs": decisions.queued_without_inputs,
            "deferred_for_space": decisions.deferred_for_space,
            "unconfirmed": unconfirmed, "scratch_bytes": total,
            "creations_in_flight": sorted(self._in_flight), "pid": os.getpid(),
        })
        if decisions.create or decisions.remove or decisions.release:
            log.info("replicad: cycle: %d queued, %d running, %d targets, +%d claims, -%d "
                     "released, %d to create, %d removed, %d at risk",
                     len(snapshot.pending()), len(snapshot.running()), len(decisions.targets),
                     len(decisions.claim), len(decisions.release) + len(decisions.forget),
                     len(decisions.create), report.removed, len(decisions.at_risk))
