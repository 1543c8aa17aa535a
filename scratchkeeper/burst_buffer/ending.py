"""The end of a job whose stage-in failed: cancelled once Slurm has torn its buffer down.

Cancelling a pending job from inside its ``data_in`` races Slurm's own teardown. The cancel makes
slurmctld start the job's teardown and, in the same request, ask its script daemon to kill every
script it runs for the job; both go out on threads of their own, so the kill sometimes reaches
the teardown just started (``teardown for JobId=N terminated by slurmctld``), which Slurm then
never runs again: the job's share of the pool stays counted until slurmctld restarts (seen on
22.05 and on 24.11; burst_buffer/lua's ``_start_teardown`` gives up on a killed teardown).

So ``data_in`` does not cancel. It writes the reason into the job's comment, marks the job's
record (:func:`.records.mark_to_end`) and fails. With ``Flags=TeardownFailure`` in
burst_buffer.conf, Slurm holds a job whose ``data_in`` failed and tears its buffer down itself,
killing no script (``BurstBufferState`` goes ``teardown`` then ``complete``). ``scratchkeeper bb
end``, left running by the failed ``data_in`` in a session of its own, waits for that and then
cancels the held job: its buffer is gone, so the cancel starts no teardown to race.

* One ender runs at a time (a lock in the burst-buffer folder) and ends every marked job: a
  user whose jobs all fail costs one process, not one each. An ender that finds the lock held
  leaves its mark to the one that holds it, which looks at the records again after it lets go.
* Every ``bb teardown`` and every failed ``data_in`` starts one while marks remain, so an
  ender killed (slurmctld stopped with its control group) is replaced by the next.
* A job no longer pending (the user cancelled it, or it is gone) is left as it is.
* A site whose burst_buffer.conf lacks ``Flags=TeardownFailure``: Slurm keeps the job in
  ``staging-in`` and never tears it down; after :data:`GRACE` the job is cancelled anyway, and
  may keep its share of the pool as before (the reason is logged).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..config import SiteConfig
from ..errors import ScratchkeeperError
from ..runner import get_runner
from ..schedulers import Scheduler, slurm
from ..state import StateStore
from . import records
from .lifecycle import state_dir

log = logging.getLogger(__name__)

#: the lock only one ender holds, in the burst-buffer folder
ENDER_LOCK = "ender.lock"
#: seconds a marked job may stay ``staging-in`` (Slurm has not taken the failure yet) before
#: the ender takes it that no teardown will come (burst_buffer.conf without TeardownFailure)
GRACE = 30.0
#: seconds a teardown may take before the job is cancelled all the same (Slurm tries a failing
#: teardown 3 times, each up to OtherTimeout, 3600 s in burst_buffer.conf)
TEARDOWN_LIMIT = 3 * 3600.0 + 60.0
#: seconds between two looks at the queue
PAUSE = 2.0

WAIT, GONE, CANCEL = "wait", "gone", "cancel"
FAILED = "stage-in failed: "

Queued = Callable[[str], "dict[str, Any] | None"]


def decide(job: dict[str, Any] | None, marked_for: float) -> str:
    """What to do with a marked job: :data:`GONE` (not pending: nothing to end), :data:`WAIT`
    (Slurm tears it down, or has not taken its failure yet) or :data:`CANCEL`. ``job`` is its
    ``squeue --json`` record (None: not in the queue); ``marked_for``, seconds since marked."""
    if job is None or slurm.state_name(job) != "PENDING":
        return GONE
    stage = str(job.get("burst_buffer_state") or "").strip().lower()
    if stage == "teardown":
        return WAIT if marked_for < TEARDOWN_LIMIT else CANCEL
    if stage.startswith(("staging", "staged")):
        return WAIT if marked_for < GRACE else CANCEL
    return CANCEL  # "complete": the buffer is gone (or never was)


def queued_job(config: SiteConfig) -> Queued:
    """One job's ``squeue --json`` record, None when the queue has no such job."""
    def ask(job_id: str) -> dict[str, Any] | None:
        return slurm.queued_job(job_id, get_runner(), config.scheduler.command_timeout)
    return ask


def end_marked(store: StateStore, scheduler: Scheduler, queued: Queued, *,
               sleep: Callable[[float], None] = time.sleep,
               now: Callable[[], float] = time.time) -> list[str]:
    """End every marked job as :func:`decide` says, waiting while any waits; the jobs cancelled."""
    cancelled: list[str] = []
    while rows := records.to_end(store):
        waiting = False
        for row in rows:
            job_id = row["job_id"]
            marked_for = now() - float(row["end_after_teardown"])
            try:
                decision = decide(queued(job_id), marked_for)
            except ScratchkeeperError as err:
                decision = WAIT if marked_for < TEARDOWN_LIMIT else CANCEL
                log.warning("job %s: its state not known: %s", job_id, err)
            if decision == WAIT:
                waiting = True
            elif decision == GONE:
                records.ended(store, job_id)
            else:
                cancelled += _cancel(store, scheduler, row, marked_for)
        if waiting:
            sleep(PAUSE)
    return cancelled


def _cancel(store: StateStore, scheduler: Scheduler, row: sqlite3.Row, marked_for: float) -> list[str]:
    job_id = row["job_id"]
    if marked_for >= GRACE and row["stage"] != records.TORN_DOWN:
        log.warning("job %s: not torn down by Slurm %.0f s after its stage-in failed "
                    "(burst_buffer.conf without Flags=TeardownFailure?): cancelled all the "
                    "same; its share of the pool may stay until slurmctld restarts", job_id,
                    marked_for)
    reason = row["reason"] or ""
    if not reason.startswith(FAILED):
        reason = FAILED + reason  # as data_in wrote it into the job's comment
    try:
        scheduler.cancel([job_id], reason=reason)
    except ScratchkeeperError as err:
        log.error("job %s: not cancelled: %s", job_id, err)
        records.ended(store, job_id, f"not cancelled: {err}")
        return []
    records.ended(store, job_id)
    log.info("job %s: cancelled after its teardown: %s", job_id, reason)
    return [job_id]


def run_ender(config: SiteConfig, store: StateStore, scheduler: Scheduler,
              queued: Queued | None = None, *,
              sleep: Callable[[float], None] = time.sleep) -> list[str]:
    """:func:`end_marked` under the ender's lock, until no mark is left; nothing when another
    ender holds the lock (it sees this one's marks after it lets go)."""
    queued = queued or queued_job(config)
    cancelled: list[str] = []
    while True:
        with _lock(state_dir(config) / ENDER_LOCK) as held:
            if not held:
                return cancelled
            cancelled += end_marked(store, scheduler, queued, sleep=sleep)
        if not records.to_end(store, 1):  # a mark made while the lock was let go
            return cancelled


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[bool]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def marked(store: StateStore, job_id: str) -> bool:
    """Whether the job is marked to be ended (False when its record cannot be read: the next
    teardown starts an ender for every mark left)."""
    try:
        row = records.job(store, job_id)
    except sqlite3.Error as err:
        log.error("job %s: its record unreadable: %s", job_id, err)
        return False
    return row is not None and row["end_after_teardown"] is not None


def leave_ender(config: SiteConfig) -> None:
    """Start ``scratchkeeper bb end`` in a session of its own, its output to the daemons' log
    (``logging.file``) or nowhere: Slurm's script daemon kills the stage's process group and
    waits for its output to close, so it must keep neither."""
    argv = [sys.executable, "-m", "scratchkeeper"]
    if config.source and os.path.isabs(config.source):
        argv += ["-c", config.source]
    output = subprocess.DEVNULL
    try:
        subprocess.Popen(argv + ["bb", "end"], stdin=subprocess.DEVNULL, stdout=output,
                         stderr=output, start_new_session=True, close_fds=True, cwd="/")
    except OSError as err:
        log.error("the ender of failed stage-ins not started: %s", err)
