"""The burst-buffer stages as ``scratchkeeper bb`` runs them for burst_buffer.lua: the stages of
:mod:`.lifecycle` with a scheduler that checks what happened before it retries or fails
(:mod:`.confirm`), and a ``data_in`` that never leaves its job pending for ever.

``slurm_bb_job_process`` checks the directives in Lua (slurm-plugins/burst_buffer_check.lua:
slurmctld starts no process at ``sbatch``), so the planner's whole check runs here, in
``data_in``, which Slurm runs outside its locks. Slurm 22.05 never runs a failed ``data_in``
again, and leaves its job held, so whatever makes ``data_in`` fail (a script the planner
refuses, a refused submission, a failure of scratchkeeper itself) ends the job as a failed
stage-in does: its reason on the job's record and in its comment (``sacct -o Comment``), and,
with ``[burst_buffer] stage_in_failure = "cancel"``, the job marked to be cancelled once Slurm
has torn it down and taken back its share of the pool (:mod:`.ending`). A teardown that came
while ``data_in`` ran (the job cancelled, or slurmctld restarted and will stage it again) has
the last word: the job is left as the teardown left it. A failure that is only the scheduler
not answering (or the state database busy) runs ``data_in`` again, which finds in the records
what it did, for up to :data:`.confirm.PATIENCE`.
"""

from __future__ import annotations

import logging
import sqlite3
import time

from ..config import SiteConfig
from ..errors import ScratchkeeperError
from ..planner import records as chains
from ..state import StateStore
from . import lifecycle, records
from .confirm import PATIENCE, ConfirmingScheduler, confirming_scheduler, is_transient

log = logging.getLogger(__name__)


def data_in(config: SiteConfig, store: StateStore, job_id: str, script_path: str, *,
            scheduler: ConfirmingScheduler | None = None, patience: float = PATIENCE) -> str:
    """:func:`.lifecycle.data_in`, run again while its failure is the scheduler's silence; the
    chain id. Any other failure ends the job with its reason and raises
    :class:`.lifecycle.StageFailed` with it."""
    scheduler = scheduler or confirming_scheduler(config)
    deadline = time.monotonic() + patience
    torn_down_at = _record(store, job_id, "teardown_at")
    try:
        while True:
            try:
                return lifecycle.data_in(config, store, job_id, script_path, scheduler=scheduler)
            except Exception as err:  # whatever failed, the job must not stay pending for ever
                if _record(store, job_id, "teardown_at") != torn_down_at:
                    raise  # a teardown came meanwhile: the job is as it left it
                if _again(store, job_id, err) and time.monotonic() < deadline:
                    log.warning("job %s: data_in: %s; running it again (it finds what it did)",
                                job_id, err)
                    time.sleep(scheduler.pause)
                    continue
                raise _ended(config, store, scheduler, job_id, err) from err
    finally:
        _cancel_copies(scheduler, job_id)


def data_out(config: SiteConfig, store: StateStore, job_id: str, *,
             scheduler: ConfirmingScheduler | None = None) -> str:
    """:func:`.lifecycle.data_out` (which answers every failure) with the confirming
    scheduler; what happened."""
    scheduler = scheduler or confirming_scheduler(config)
    try:
        return lifecycle.data_out(config, store, job_id, scheduler=scheduler)
    finally:
        _cancel_copies(scheduler, job_id)


def _again(store: StateStore, job_id: str, err: Exception) -> bool:
    """Whether data_in may run again after ``err``: the scheduler did not answer or the state
    database was busy, and data_in did not already end the job (its stage-in failed)."""
    if not (is_transient(err) or isinstance(err, sqlite3.OperationalError)):
        return False
    return _record(store, job_id, "stage") != records.STAGE_IN_FAILED


def _record(store: StateStore, job_id: str, column: str) -> object:
    """A column of the job's record; None when there is none or it cannot be read."""
    try:
        row = records.job(store, job_id)
    except sqlite3.Error as err:
        log.warning("job %s: its record unreadable: %s", job_id, err)
        return None
    return None if row is None else row[column]


def _ended(config: SiteConfig, store: StateStore, scheduler: ConfirmingScheduler, job_id: str,
           err: Exception) -> ScratchkeeperError:
    """End the job whose data_in failed with ``err``, unless data_in ended it itself (its
    stage-in failed); the error the stage reports."""
    if isinstance(err, lifecycle.StageFailed) and \
            _record(store, job_id, "stage") == records.STAGE_IN_FAILED:
        return err
    text = str(err) if isinstance(err, ScratchkeeperError) else f"internal error: {err!r}"
    reason = text if text.startswith("stage-in failed: ") else f"stage-in failed: {text}"
    log.error("job %s: %s", job_id, reason)
    _record_failure(store, job_id, reason)
    try:
        lifecycle.end_failed_job(config, store, scheduler, job_id, reason)
    except (ScratchkeeperError, sqlite3.Error) as end_err:
        log.error("job %s: not ended: %s", job_id, end_err)
        reason += f" (and ending the job failed: {end_err})"
    try:
        lifecycle.write_held(config, store)
    except (ScratchkeeperError, OSError, sqlite3.Error) as held_err:
        log.error("job %s: the pool's held bytes not rewritten: %s", job_id, held_err)
    return lifecycle.StageFailed(reason)


def _record_failure(store: StateStore, job_id: str, reason: str) -> None:
    """The failure on the job's record and on its chain, where there are; a chain settled here
    is one the chain service's sweep leaves alone (best effort: the log has the reason)."""
    try:
        row = records.job(store, job_id)
        if row is None:
            return
        records.set_stage(store, job_id, records.STAGE_IN_FAILED, reason)
        if row["chain_id"]:
            chains.set_chain_state(store, row["chain_id"], chains.STAGE_IN_FAILED, reason)
            chains.open_chain_ends(store)
            chains.record_chain_end(store, row["chain_id"], "stage-in-failed")
    except sqlite3.Error as err:
        log.error("job %s: stage-in failure not recorded: %s", job_id, err)


def _cancel_copies(scheduler: ConfirmingScheduler, job_id: str) -> None:
    try:
        cancelled = scheduler.cancel_copies()
    except ScratchkeeperError as err:
        log.error("job %s: late copies of its data jobs not cancelled: %s", job_id, err)
        return
    if cancelled:
        log.warning("job %s: cancelled late copies of its data jobs: %s", job_id,
                    ", ".join(cancelled))
