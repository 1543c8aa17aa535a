"""``scratchkeeper recoveryd``: detection before and during jobs, and the workers that patch.

* Before jobs: every ``recovery.check_interval`` seconds all OSTs are probed at once (one
  ``probe_timeout`` in total) and the files with bytes on a failed OST are queued: the staged
  inputs of queued jobs first (one batched queue query), then, with ``recovery.scope = "all"``,
  every other file carrying a source.
* During jobs: requests on the Unix socket (:mod:`.client`) from the reader, the
  pre-execution hook and users, authorised by peer credentials and admitted per user
  (:mod:`.admission`: threads, requests a minute; :mod:`.records`: recoveries pending).
* Workers take requests from the state store, users in turn (:func:`.records.claim_next`); a
  request is persisted before it is acknowledged and a running one names its worker, so after
  a kill -9 the next start queues it again and resumes the rebuild it had begun (or aborts a
  rebuild no request owns). The periodic check removes the finished requests past
  ``recovery.request_retention`` (and each user's oldest beyond ``requests_kept_per_uid``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import json
import logging
import math
import os
import pwd
import random
import socket
import threading
import time

from .. import stopping
from ..config import SiteConfig, listen_address
from ..errors import (
    InputError,
    PermissionDenied,
    RecoveryError,
    ScratchkeeperError,
    StorageError,
    UnknownJobError,
)
from ..munge import Munge
from ..ownership import Owner
from ..planner import records as planner_records
from ..state import StateStore
from ..storage import StorageBackend, open_backend
from ..storage.base import XATTR_PREFIX
from ..storage.mount_logs import READ_LOG, BoundedLog, reads_record
from ..transfer.ranged import remove_stale_spools
from . import headops, records, trust
from .admission import Admission, Limits, UserLines
from .client import (
    ERROR_KINDS,
    RequestTimeout,
    ServiceBusy,
    decode_message,
    encode,
    peer_owner,
    receive_request,
)
from .gather import RecoveryInterrupted
from .outcome import LOST
from .patching import SourceLoad
from .reconstruct import Recoverer, process_batch
from .remote import RemoteDoor
from .safety import check_inside_scratch, reaches_own_file

log = logging.getLogger(__name__)

MAX_BACKOFF = 300.0
#: lines a minute recoveryd logs of one uid's refused requests (the rest are counted)
REFUSALS_PER_MINUTE = 30
#: lines a minute recoveryd logs of one uid's accepted requests (the rest are counted)
REQUEST_LINES_PER_MINUTE = 30
#: finished requests the periodic check removes at most in one cycle (the rest next time)
PRUNE_PER_CYCLE = 10_000


def process_request(store: StateStore, recoverer: Recoverer, row) -> dict:
    """Run one claimed request to its end and record the outcome (shared by daemon and CLI)."""
    request_id, path = row["request_id"], row["path"]
    try:
        outcome = recoverer.recover(
            path, reported_osts=tuple(json.loads(row["reported_osts"])),
            resume_rebuild_id=row["rebuild_id"],
            on_rebuild=lambda rebuild_id: records.set_rebuild(store, request_id, rebuild_id))
    except RecoveryInterrupted:
        raise  # the request stays running under a dead worker: the next start resumes it
    except ScratchkeeperError as err:
        records.finish(store, request_id, ok=False, path=path, file_state=records.LOST,
                       reason=str(err))
        _mark_lost(recoverer.backend, path, str(err))
        log.error("request %d: %s: %s", request_id, path, err)
        return {"path": path, "state": LOST, "reason": str(err)}
    result = outcome.to_dict()
    if outcome.state == LOST:
        records.finish(store, request_id, ok=False, path=path, file_state=records.LOST,
                       reason=outcome.reason, outcome=result, seconds=outcome.seconds)
        _mark_lost(recoverer.backend, path, outcome.reason)
    else:
        records.finish(store, request_id, ok=True, path=path, file_state=records.WHOLE,
                       reason=outcome.reason, outcome=result, patched_bytes=outcome.patched_bytes,
                       seconds=outcome.seconds)
        with contextlib.suppress(ScratchkeeperError):
            recoverer.backend.remove_xattr(path, XATTR_PREFIX + "lost")
    return result


def _mark_lost(backend: StorageBackend, path: str, reason: str) -> None:
    """Say on the file itself why it is lost (users see it with ``store xattr``)."""
    with contextlib.suppress(ScratchkeeperError):
        backend.set_xattr(path, XATTR_PREFIX + "lost", reason.encode()[:4096])


def resume(store: StateStore, backend: StorageBackend) -> tuple[list[int], list[str]]:
    """After a crash: queue orphaned requests again, abort rebuilds no active request owns,
    remove the ranged readers' spool folders a killed daemon left in the scratch root."""
    remove_stale_spools(backend.scratch_root)
    requeued = records.requeue_orphans(store)
    owned = records.rebuild_ids_in_use(store)
    aborted = []
    for rebuild in backend.open_rebuilds():
        if rebuild.rebuild_id not in owned:
            backend.abort_rebuild(rebuild)
            aborted.append(rebuild.rebuild_id)
    if requeued or aborted:
        log.info("resume: %d request(s) queued again, %d orphaned rebuild(s) aborted",
                 len(requeued), len(aborted))
    return requeued, aborted


def file_status(store: StateStore, backend: StorageBackend, path: str) -> dict:
    """Is the file whole (no byte lost on a failed OST)? Plus its recovery state."""
    full = backend.paths.resolve(path)
    # the request first, the layout after: a request that ends in between has already patched
    # the layout read next, so a waiter never sees "damaged, no request" and asks again
    active = records.active_request(store, full)
    state_row = records.file_state(store, full)
    layout = backend.layout(full)
    size = backend.stat(full).size
    down = {o.ost_index for o in backend.list_osts() if not o.healthy}
    failed = sorted(layout.osts() & down)
    lost = layout.lost_extents(failed, size)
    if active is not None:
        state = records.RECOVERING
    elif not lost:
        state = records.WHOLE
    elif state_row is not None and state_row["state"] == records.LOST:
        state = records.LOST
    else:
        state = "damaged"
    return {"path": full, "whole": not lost, "state": state, "failed_osts": failed,
            "lost_bytes": sum(e.length for e in lost),
            "reason": state_row["reason"] if state_row is not None and lost else "",
            "request_id": active["request_id"] if active is not None else None}


def check_ost_indices(backend: StorageBackend, osts: list[int]) -> None:
    """Refuse OST indices the storage does not have (``recover --ost N``, a report)."""
    if not osts:
        return
    known = {o.ost_index for o in backend.list_osts()}
    unknown = sorted(set(osts) - known)
    if unknown:
        have = f"{min(known)}-{max(known)}" if known else "none"
        raise InputError(f"OST {', '.join(map(str, unknown))}: no such OST (the storage has "
                         f"OSTs {have})")


class RecoveryService:
    """The daemon: socket server, patch workers and the periodic check, until ``stop`` is set.

    The socket is shared by every user, so no user can starve the others: each connection is
    admitted for its peer (:class:`~.admission.Admission`: ``recovery.connections_per_uid`` at
    once, ``requests_per_minute``; ``request_threads`` threads answer them, a connection beyond
    is refused as busy, not queued) and a request must arrive whole within ``request_timeout``
    seconds.
    """

    request_timeout = 10.0

    def __init__(self, config: SiteConfig, *, backend: StorageBackend | None = None,
                 store: StateStore | None = None, scheduler=None):
        self.config = config
        self.backend = backend or open_backend(config)
        self.store = store or StateStore(config.state.database)
        self._scheduler = scheduler
        self.stop = threading.Event()
        self.changed = threading.Condition()
        # raised by every notification, under ``changed``: a worker that found no request waits
        # only if nothing changed since it looked (no stop, no new request in between)
        self._generation = 0
        # the workers wait apart: a new request wakes one of them, not every waiter and worker
        # (each of which would queue for the write lock to claim it)
        self._work_ready = threading.Condition()
        self._work_generation = 0
        self.load = SourceLoad()
        self.recoverer = Recoverer(self.backend, config, load=self.load, stop=self.stop,
                                   store=self.store)
        self.worker = records.worker_id()
        self._threads: list[threading.Thread] = []
        self._listener: socket.socket | None = None
        self._door: RemoteDoor | None = None
        self._handlers: concurrent.futures.ThreadPoolExecutor | None = None
        hook_uid = _uid_of(config.recovery.hook_user)
        self.admission = Admission(Limits.of(config.recovery),
                                   trusted=frozenset({0} if hook_uid is None else {0, hook_uid}))
        # root's log, a bounded number of lines a minute per user (the rest are counted)
        # (root's requests, the periodic check's among them, are each logged)
        self.request_lines = UserLines(log, logging.INFO, REQUEST_LINES_PER_MINUTE,
                                       exempt_root=True)
        self.refusal_lines = UserLines(log, logging.WARNING, REFUSALS_PER_MINUTE)
        # the read records of 'reads' requests, bounded as the mount bounds its own
        self.read_log = (BoundedLog(self.backend.store_root, READ_LOG,
                                    config.mount.log_max_bytes)
                         if hasattr(self.backend, "store_root") else None)
        self.failures = 0
        # what the metrics endpoint reports: the last probe of every OST (Unix time, states)
        # and the recoveries finished here; both only written by this object
        self.last_probe: tuple[float, list] | None = None
        self.patch_stats = None
        self._metrics = None
        self._replication = None

    # -- life cycle ----------------------------------------------------------------------------
    def start(self) -> None:
        records.open_records(self.store)
        planner_records.open_records(self.store)
        resume(self.store, self.backend)
        self._bind()
        for number in range(self.config.recovery.file_workers):
            self._spawn(self._work, f"recover-{number}")
        self._handlers = concurrent.futures.ThreadPoolExecutor(
            max_workers=self.admission.limits.threads, thread_name_prefix="socket-request")
        self._spawn(self._accept, "socket")
        self._open_door()
        self._serve_metrics()
        self._notify()
        log.info("recoveryd: listening on %s, %d file worker(s), check every %gs",
                 self.config.recovery.socket, self.config.recovery.file_workers,
                 self.config.recovery.check_interval)

    def _serve_metrics(self) -> None:
        """The Prometheus endpoint (metrics.recoveryd): imported here, as only the daemon
        serves it (recoveryd's command-line uses of this module need no prometheus_client)."""
        from ..metrics import serve
        from ..metrics.mount import MountCollector
        from ..metrics.recovery import PatchStats, RecoveryCollector

        self.patch_stats = PatchStats()
        collectors = [RecoveryCollector(functools.partial(records.request_counts, self.store),
                                        self.patch_stats, lambda: self.last_probe)]
        if self.config.storage.backend == "local":
            # the mount of this host (docs/operations.rst: who exports the mount's counters)
            collectors.append(MountCollector(self.config.storage.scratch_root,
                                             ost_count=self.config.storage.ost_count))
        self._metrics = serve(self.config, "recoveryd", collectors)

    def _spawn(self, target, name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _bind(self) -> None:
        path = self.config.recovery.socket
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(path)
                raise RecoveryError(f"{path}: another recoveryd is already listening")
            except ConnectionRefusedError:
                os.unlink(path)  # left by a daemon that died
            finally:
                probe.close()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(path)
            os.chmod(path, 0o666)  # every user may ask; each request is authorised on its own
            listener.listen(64)
            listener.settimeout(0.5)  # the accept loop sees ``stop`` within half a second
        except OSError as err:
            listener.close()
            raise RecoveryError(f"{path}: cannot listen: {err.strerror}") from err
        self._listener = listener

    def run(self) -> None:
        """The periodic check until SIGTERM/SIGINT or ``stop``; backoff with jitter on errors."""
        interval = self.config.recovery.check_interval
        wait = 0.0
        while not stopping.sleep(self.stop, wait):
            try:
                self.check_cycle()
                self.failures = 0
                wait = interval
            except ScratchkeeperError as err:
                self.failures += 1
                wait = min(MAX_BACKOFF, interval * 2 ** min(self.failures, 8))
                wait *= random.uniform(0.5, 1.0)
                log.error("check cycle failed (%d in a row): %s; next in %.0fs", self.failures,
                          err, wait)

    def shutdown(self) -> None:
        self.stop.set()
        self._notify()
        self._wake_workers()
        for thread in self._threads:
            thread.join(timeout=30)
        if self._listener is not None:
            self._listener.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.config.recovery.socket)
        if self._handlers is not None:
            self._handlers.shutdown(wait=True)
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None
        self.recoverer.readers.close_all()

    def install_signal_handlers(self) -> None:
        def on_signal() -> None:
            log.info("recoveryd: stop signal, stopping")
            self.stop.set()
            self._notify()
            self._wake_workers()

        stopping.on_stop_signals(on_signal)

    def _notify(self) -> None:
        """Wake the waiters: a request changed."""
        with self.changed:
            self._generation += 1
            self.changed.notify_all()

    def _wake_workers(self, count: int | None = None) -> None:
        """Wake ``count`` idle workers (None: all of them, to stop)."""
        with self._work_ready:
            self._work_generation += 1
            if count is None:
                self._work_ready.notify_all()
            elif count:
                self._work_ready.notify(count)

    def _generation_now(self) -> int:
        with self.changed:
            return self._generation

    def _wait_change(self, seen: int, timeout: float) -> None:
        """Wait up to ``timeout`` for a notification after generation ``seen`` (none if one
        came already, or the service is stopping)."""
        with self.admission.paused(), self.changed:
            if self._generation == seen and not self.stop.is_set():
                self.changed.wait(timeout=timeout)

    # -- work ----------------------------------------------------------------------------------
    def enqueue(self, path: str, osts: list[int], uid: int, origin: str) -> int:
        return self.enqueue_many([(path, osts)], uid, origin)[0]

    def enqueue_many(self, files: list[tuple[str, list[int]]], uid: int,
                     origin: str) -> list[int]:
        """Queue (path, reported OSTs) requests in one transaction, then wake the workers; a
        user's beyond ``recovery.pending_per_uid`` are refused (ServiceBusy), root's never."""
        ids, new = [], 0
        limit = None if uid == 0 else self.config.recovery.pending_per_uid
        for (path, osts), (request_id, created) in zip(
                files, records.enqueue_many(self.store, files, requested_by=uid, origin=origin,
                                            pending_limit=limit)):
            if created:
                new += 1
                self.request_lines.log(uid, "request %d: %s (%s, uid %d, OSTs %s)", request_id,
                                       path, origin, uid, osts or "-")
            ids.append(request_id)
        self._notify()
        self._wake_workers(new)
        return ids

    def prune(self) -> int:
        """Remove the finished requests past their retention (a bounded number per call)."""
        recovery = self.config.recovery
        removed = records.prune(self.store, before=time.time() - recovery.request_retention,
                                kept_per_uid=recovery.requests_kept_per_uid,
                                limit=PRUNE_PER_CYCLE)
        if removed:
            log.info("check: %d finished request(s) removed", removed)
        return removed

    def _work(self) -> None:
        while not self.stop.is_set():
            with self._work_ready:
                seen = self._work_generation
            try:
                rows = records.claim_batch(self.store, self.worker,
                                           running_per_uid=self.config.recovery.workers_per_uid)
            except ScratchkeeperError as err:
                log.error("claiming a request: %s", err)
                self.stop.wait(5.0)
                continue
            if not rows:
                with self._work_ready:  # a request queued since the claim has woken nobody
                    if self._work_generation == seen and not self.stop.is_set():
                        self._work_ready.wait(timeout=5.0)
                continue
            try:
                for result in process_batch(self.store, self.recoverer, rows):
                    if self.patch_stats is not None:
                        self.patch_stats.observe(result)
            except RecoveryInterrupted:
                log.info("requests %s: left for the next start", [r["request_id"] for r in rows])
                return
            except Exception:  # a bug must not kill the worker; the requests are closed as failed
                log.exception("requests %s", [r["request_id"] for r in rows])
                with contextlib.suppress(ScratchkeeperError):
                    records.finish_many(self.store, [records.Closing(
                        r["request_id"], ok=False, path=r["path"], file_state=records.LOST,
                        reason="internal error; see log") for r in rows])
            self._notify()

    def check_cycle(self) -> list[str]:
        """Probe every OST at once; queue the files with lost bytes. Returns the paths queued.

        The probe is the Recoverer's shared one: the recoveries it queues reuse it for the OSTs
        outside their files (and probe their own anew), rather than probing every OST again.
        """
        self.prune()
        self.request_lines.flush()
        self.refusal_lines.flush()
        statuses = self.recoverer.probe_all()
        self.last_probe = (time.time(), statuses)
        failed = sorted(o.ost_index for o in statuses if not o.healthy)
        if not failed:
            return []
        log.info("check: OST %s not healthy", ", ".join(map(str, failed)))
        affected = {path for ost in failed for path in self.backend.files_on_ost(ost)}
        ordered = [p for p in self._queued_inputs() if p in affected]
        if self.config.recovery.scope == "all":
            ordered += sorted(affected - set(ordered))
        queued: list[tuple[str, list[int]]] = []
        for path in ordered:
            try:
                if records.active_request(self.store, path) is not None:
                    continue
                last = records.file_state(self.store, path)
                if last is not None and last["state"] == records.LOST:
                    continue  # reported lost: only a new report or `recover` tries again
                stat = self.backend.stat(path)
                # root's record of the stage-in, not the user's copy of it
                if not trust.read_record(self.backend, path, stat.uid, stat.size,
                                         self.store).sources:
                    continue
                layout = self.backend.layout(path)
                if not layout.lost_extents(failed, stat.size):
                    continue
            except (InputError, StorageError) as err:
                log.warning("check: %s: %s", path, err)
                continue
            queued.append((path, [o for o in failed if o in layout.osts()]))
        # queued together: the workers find the whole failure's files at once
        if queued:
            self.enqueue_many(queued, 0, "check")
        return [path for path, _ in queued]

    def _queued_inputs(self) -> list[str]:
        """Staged inputs of queued jobs, in the scheduler's priority order (one queue query)."""
        try:
            from ..schedulers import get_scheduler
            scheduler = self._scheduler or get_scheduler(self.config)
            snapshot = scheduler.snapshot()
        except ScratchkeeperError as err:
            log.warning("check: queue not available (%s); checking files without job order", err)
            return []
        paths = []
        for job in snapshot.pending():
            chain_id = planner_records.chain_of_job(self.store, job.job_id)
            if chain_id is None:
                continue
            paths += [row["path"] for row in planner_records.staged_files(self.store, chain_id)
                      if row["state"] == "staged"]
        return list(dict.fromkeys(paths))

    # -- waiting -------------------------------------------------------------------------------
    def wait_for(self, path: str, timeout: float, uid: int = 0) -> dict:
        """Until the file is whole, lost, or ``timeout``; the file's status at that moment
        (a damaged file without a request is queued, requested by ``uid``)."""
        deadline = time.monotonic() + timeout
        while True:
            seen = self._generation_now()
            status = file_status(self.store, self.backend, path)
            if status["state"] in (records.WHOLE, records.LOST) or status["whole"] \
                    and status["request_id"] is None:
                return status
            if status["request_id"] is None:
                self.enqueue(status["path"], status["failed_osts"], uid, "wait")
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.stop.is_set():
                status["timed_out"] = remaining <= 0
                return status
            self._wait_change(seen, min(remaining, 2.0))

    # -- the socket ----------------------------------------------------------------------------
    def _accept(self) -> None:
        """Accept connections until ``stop``; each is admitted or refused at once."""
        while not self.stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError as err:
                if self.stop.is_set():
                    return
                log.error("socket: accept: %s", err)
                self.stop.wait(0.5)
                continue
            self._admit(conn)

    def _admit(self, conn: socket.socket) -> None:
        """Admit the connection for its peer (:class:`~.admission.Admission`) and hand it to
        a request thread, or answer ServiceBusy at once."""
        try:
            owner = peer_owner(conn)
        except OSError:
            conn.close()
            return
        try:
            self.admission.admit(owner)
        except ServiceBusy as busy:
            self._refuse(owner.uid, "-", "-", str(busy))
            self._reply(conn, {"ok": False, "error": str(busy), "kind": "ServiceBusy",
                               "retry_after": busy.retry_after}, 1.0)
            conn.close()
            return
        try:
            self._handlers.submit(self._serve, conn, owner)
        except RuntimeError:  # shutting down
            self.admission.release(owner)
            conn.close()

    def _serve(self, conn: socket.socket, owner: Owner) -> None:
        try:
            reply = self._handle(conn, owner)
            if reply is not None:
                self._reply(conn, reply, 30.0)
        finally:
            conn.close()
            self.admission.release(owner)

    @staticmethod
    def _reply(conn: socket.socket, reply: dict, timeout: float) -> None:
        with contextlib.suppress(OSError):
            conn.settimeout(timeout)
            conn.sendall(encode(reply))

    def _refuse(self, uid: int, op, path, reason: str) -> None:
        # A user sends as many refused requests as they like: the lines are rate-limited per
        # uid (REFUSALS_PER_MINUTE each, the rest counted), so no user fills root's log and
        # one user's flood hides no other user's refusals.
        shown = str(path)[:512] if path is not None else "-"
        self.refusal_lines.log(uid, "refused: uid %d, op %s, path %s: %s", uid, str(op)[:64],
                               shown, reason[:512])

    def _handle(self, conn: socket.socket, owner: Owner) -> dict | None:
        """The reply to one connection's request (None: nothing to answer)."""
        try:
            message = decode_message(receive_request(conn, self.request_timeout))
        except EOFError:
            return None
        except RequestTimeout as err:
            self._refuse(owner.uid, "-", "-", str(err))
            return None  # the client is not listening for an answer
        except ScratchkeeperError as err:
            self._refuse(owner.uid, "-", "-", str(err))
            return _error_reply(err)
        return self.answer(message, owner)

    def answer(self, message: dict, owner: Owner) -> dict:
        """The reply to one request of ``owner``, however it came (this host's Unix socket or
        another host's sealed request, :mod:`.remote`); never raises."""
        uid = owner.uid
        op, path = message.get("op", "-"), message.get("path", "-")
        try:
            with self.admission.working(owner):
                return {**self._dispatch(message, owner), "ok": True}
        except ScratchkeeperError as err:
            self._refuse(uid, op, path, str(err))
            return _error_reply(err)
        except Exception as err:  # answer the client, keep the daemon
            log.exception("uid %d, op %s, path %s: request failed", uid, str(op)[:64],
                          str(path)[:4096])
            return {"ok": False, "error": f"internal error ({type(err).__name__}); see "
                                          "recoveryd's log", "kind": "RecoveryError"}

    def take_slot(self, owner: Owner) -> str | None:
        """Admit one request of ``owner`` (None), or say why not (ServiceBusy's words)."""
        try:
            self.admission.admit(owner)
        except ServiceBusy as busy:
            self._refuse(owner.uid, "-", "-", str(busy))
            return str(busy)
        return None

    def replication_state(self):
        """replicad's tables, for the events other hosts' hooks report (:mod:`.headops`)."""
        from ..replication.state import ReplicationState

        with self.changed:
            if self._replication is None:
                self._replication = ReplicationState(self.store)
            return self._replication

    def _open_door(self) -> None:
        """With ``head.listen``: the TCP door for other hosts' sealed requests (:mod:`.remote`)."""
        address = listen_address(self.config.head.listen)
        if address is None:
            return
        self._door = RemoteDoor(*address, Munge(self.config.head.munge_socket or None),
                                stop=self.stop, take_slot=self.take_slot,
                                release=self.admission.release, answer=self.answer,
                                submit=self._handlers.submit,
                                request_timeout=self.request_timeout)
        self._spawn(self._door.run, "head-door")
        log.info("recoveryd: other hosts' requests on %s:%d (MUNGE)", *self._door.address)

    def _authorise(self, path, caller: Owner) -> str:
        """The scratch path of a request's file, if the caller may ask about it.

        A user may ask only about a file of their own that they can reach: every directory on
        the way searchable by them (mode and ACLs, judged by the kernel in a child running as
        them), no symbolic link. Whatever else is there (nothing, another user's file, a link,
        a directory they may not search) gets one answer, the same words and kind, after the
        same work, so that the socket tells nothing about names inside others' directories.
        """
        if not isinstance(path, str) or not path:
            raise InputError("request without a 'path'")
        full = self.backend.paths.resolve(path)  # lexical: the request's words only
        uid = caller.uid
        if uid == 0:
            check_inside_scratch(full, self.backend)
            return full
        relative = self.backend.paths.relative(full)
        reached = bool(relative) and reaches_own_file(_namespace_root(self.backend), relative,
                                                       caller)
        try:
            # and as root, on the path the store resolves, now (a name swapped since the child
            # looked is still the caller's own file, or refused)
            owner = self.backend.stat(full).uid if reached else None
            if owner == uid:
                check_inside_scratch(full, self.backend)
        except (InputError, StorageError):
            owner = None
        if owner != uid:
            raise PermissionDenied(f"{full}: no file of uid {uid} there; uid {uid} may ask only "
                                   "about its own files")
        return full

    def _dispatch(self, message: dict, caller: Owner) -> dict:
        uid = caller.uid
        op = message.get("op")
        timeout = _number(message.get("timeout", self.config.recovery.wait_timeout), "timeout")
        if uid != 0:  # a user's wait holds one of their threads: no longer than the site says
            timeout = min(timeout, self.config.recovery.wait_timeout)
        if op in ("report", "status", "wait", "recover"):
            full = self._authorise(message.get("path"), caller)
            if op == "status":
                return file_status(self.store, self.backend, full)
            if op == "report":
                ost = message.get("ost_index")
                osts = [] if ost is None else _ost_list([ost], "ost_index")
                check_ost_indices(self.backend, osts)
                return {"request_id": self.enqueue(full, osts, uid, "report"),
                        **file_status(self.store, self.backend, full)}
            if op == "wait":
                return self.wait_for(full, timeout, uid)
            osts = _ost_list(message.get("osts", []), "osts")
            check_ost_indices(self.backend, osts)
            wait = message.get("wait", True)
            if not isinstance(wait, bool):
                raise InputError(f"'wait' must be true or false, got {wait!r}")
            request_id = self.enqueue(full, osts, uid, "recover")
            if not wait:
                return {"request_id": request_id}
            return self._wait_request(request_id, timeout)
        if op == "reads":
            full = self._authorise(message.get("path"), caller)
            return self._record_reads(full, uid, message)
        if op in headops.OPS:
            return headops.answer(self, op, message, caller, authorise=self._authorise,
                                  may_hook=self._may_hook)
        if op == "check-job":
            if not self._may_hook(uid):
                raise PermissionDenied(f"check-job is for the scheduler's hook only (root or "
                                       f"recovery.hook_user {self.config.recovery.hook_user!r})")
            from .hook import check_job
            return check_job(self, str(message.get("job_id", "")), timeout)
        if op in ("stage-commit", "stage-fail"):
            return headops.stage_report(self, op, message, uid)
        if op == "list":
            rows = records.recent_requests(self.store, None if uid == 0 else uid)
            # a user sees their own requests only (recent_requests filters by uid), with the
            # times and progress `recovery list` prints
            return {"requests": [records.request_view(row) for row in rows]}
        if op == "logs":  # as the mount's user.scratchkeeper.logs: a user sees their own line
            return {READ_LOG: self.read_log.stats(uid)} if self.read_log is not None else {}
        raise InputError(f"unknown op {str(op)[:64]!r} (report, status, wait, recover, reads, "
                         f"logs, check-job, list, stage-commit, stage-fail, {', '.join(headops.OPS)})")

    def _may_hook(self, uid: int) -> bool:
        return uid == 0 or uid == _uid_of(self.config.recovery.hook_user)

    def _record_reads(self, full: str, uid: int, message: dict) -> dict:
        """A reader's reads of one of its user's files (``scratchkeeper read``), written to the
        store's read records as the mount writes its own (tierd counts both). The user may not
        write the store's root; recoveryd may, and takes the counts only for the user's own
        files, through the bounded writer (cap, the user's share, free space: a record beyond
        is dropped and counted, ``"dropped"`` says why)."""
        reads, nbytes = message.get("reads"), message.get("bytes")
        for name, value, top in (("reads", reads, 1 << 20), ("bytes", nbytes, 1 << 50)):
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= top:
                raise InputError(f"'{name}' must be a whole number 0..{top}, got "
                                 f"{str(value)[:32]!r}")
        if reads == 0:
            raise InputError("'reads' must be at least 1")
        file_id = getattr(self.backend, "file_id", None)
        if file_id is None or self.read_log is None or self.config.mount.read_log_interval <= 0:
            return {"recorded": False, "why": "reads are counted only for the local store with "
                                              "mount.read_log_interval > 0"}
        dropped = self.read_log.append(uid, reads_record(
            time=time.time(), object_id=file_id(full), uid=uid, reads=reads, nbytes=nbytes,
            path=full))
        if dropped is not None:
            return {"recorded": False, "dropped": dropped,
                    "why": f"{READ_LOG}: record dropped ({_DROPPED[dropped]})"}
        return {"recorded": True}

    def _wait_request(self, request_id: int, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            seen = self._generation_now()
            row = records.request(self.store, request_id)
            if row["state"] in (records.DONE, records.FAILED):
                outcome = json.loads(row["outcome"] or "{}")
                return {"request_id": request_id, "state": row["state"], "reason": row["reason"],
                        "outcome": outcome}
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.stop.is_set():
                return {"request_id": request_id, "state": row["state"], "timed_out": True}
            self._wait_change(seen, min(remaining, 2.0))


_DROPPED = {"cap": "the log is at mount.log_max_bytes",
            "share": "the user's share of the log is spent",
            "space": "the store's file system is nearly full"}


def _namespace_root(backend: StorageBackend) -> str:
    """The directory users see as the scratch root: the local store's MDT, else the root."""
    return str(getattr(backend, "mdt_root", backend.scratch_root))


def _uid_of(user: str) -> int | None:
    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        return None


def _number(value, name: str) -> float:
    """A finite non-negative number of a request (a bool, NaN or 10**400 is refused)."""
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError, OverflowError):
        number = math.nan
    if not isinstance(value, (int, float)) or not math.isfinite(number) or number < 0:
        raise InputError(f"'{name}' must be a non-negative number, got {str(value)[:40]}")
    return number


def _ost_list(value, name: str) -> list[int]:
    if not isinstance(value, list) or not all(
            isinstance(o, int) and not isinstance(o, bool) for o in value):
        raise InputError(f"'{name}' must be OST indices (integers), got {str(value)[:80]}")
    return value


__all__ = ["RecoveryService", "file_status", "process_request", "resume", "UnknownJobError"]


def _error_reply(err: ScratchkeeperError) -> dict:
    """An error as a reply: the nearest class the client knows, so it raises the same kind."""
    kind = next(c.__name__ for c in type(err).__mro__ if c.__name__ in ERROR_KINDS)
    return {"ok": False, "error": str(err), "kind": kind,
            **({"retry_after": err.retry_after} if isinstance(err, ServiceBusy) else {})}
