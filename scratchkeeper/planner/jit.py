"""Just-in-time stage-in: when a held-back stage-in job should start, decided at submission and
again at every sweep of the chain service as the queue moves.

A stage-in with ``-start jit`` starts at ``E - P - margin``: ``E`` the compute job's expected
start (the backfill scheduler's own estimate, or for a job waiting on its stage-in, which the
backfill scheduler does not estimate, the scheduler's will-run answer for the same resources:
``sbatch --test-only``), ``P`` the pessimistic predicted transfer time (:mod:`.predict`) and the
margin ``staging.jit_margin``: it is held back whenever the compute job's wait ``E - now``
exceeds ``P + margin``. It starts at once when any of these is unknown, when that moment
has come, or when ``P`` plus one sweep exceeds ``staging.jit_max_delay``: a compute job whose
estimate comes forward all at once (a running job ends early) waits up to ``P`` for data it
would have had with ``-start now``, so only a stage-in short enough for that wait to be
acceptable is held back. The hold is the scheduler's own begin time (Slurm ``StartTime``, PBS
``qalter -a``), so a stage-in still starts on time if the chain service is down.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from ..config import SiteConfig
from ..errors import ScratchkeeperError
from ..schedulers import JobState, Scheduler, get_scheduler
from ..state import StateStore
from . import records
from .predict import Prediction

log = logging.getLogger(__name__)

#: a new begin time within this many seconds of the current one is not worth a scheduler call
RESCHEDULE_SLACK = 30.0


@dataclass(frozen=True)
class Decision:
    """When to start one stage-in job: ``release_at`` None means now."""

    release_at: float | None
    expected_start: float | None
    estimate_source: str
    reason: str


def decide(now: float, expected_start: float | None, estimate_source: str,
           prediction: Prediction | None, config: SiteConfig, *,
           sweep_interval: float = 0.0) -> Decision:
    """The start of a JIT stage-in given the compute job's expected start and the prediction."""
    staging = config.staging
    if prediction is None or prediction.pessimistic is None:
        why = prediction.reason if prediction is not None else "no prediction"
        return Decision(None, expected_start, estimate_source, f"start now: {why}")
    if prediction.pessimistic + sweep_interval > staging.jit_max_delay:
        return Decision(None, expected_start, estimate_source,
                        f"start now: the transfer may take {prediction.pessimistic:.0f}s, longer "
                        f"than staging.jit_max_delay = {staging.jit_max_delay:g}s")
    if expected_start is None:
        return Decision(None, None, estimate_source,
                        "start now: the scheduler does not estimate the compute job's start")
    # held back whenever the compute job's wait exceeds the bound plus the margin
    wait = expected_start - now
    lead = prediction.pessimistic + staging.jit_margin
    figures = (f"{_seconds(prediction.pessimistic)} at worst ({_seconds(prediction.seconds)} "
               f"predicted) + {staging.jit_margin:g}s margin")
    if wait <= lead:
        return Decision(None, expected_start, estimate_source,
                        f"start now: the compute job's wait, {wait:.0f}s, is within {figures}: "
                        f"the moment has come")
    return Decision(expected_start - lead, expected_start, estimate_source,
                    f"held back: the compute job waits {wait:.0f}s, more than {figures}; "
                    f"starts {figures} before its expected start")


def _seconds(value: float | None) -> str:
    """A transfer time as a reader wants it: tenths below 10 s (the fits are sub-second)."""
    if value is None:
        return "?"
    return f"{value:.1f}s" if value < 10 else f"{value:.0f}s"


def hold_back(scheduler: Scheduler, store: StateStore, config: SiteConfig, *, chain_id: str,
              job_key: str, job_id: str, compute_id: str, prediction: Prediction,
              now: float | None = None) -> Decision:
    """At submission, before the stage-in job is released: ask for the compute job's expected
    start, decide, set the stage-in's begin time if it is held back, record the decision."""
    now = time.time() if now is None else now
    expected, source = _expected_start(scheduler, compute_id)
    decision = decide(now, expected, source, prediction, config)
    if decision.release_at is not None:
        try:
            scheduler.set_begin(job_id, decision.release_at)
        except ScratchkeeperError as err:
            # holding back is an optimisation: a stage-in that cannot be held starts now
            decision = Decision(None, expected, source, f"start now: cannot hold it back: {err}")
    records.save_decision(store, {
        "chain_id": chain_id, "job_key": job_key, "job_id": job_id, "compute_id": compute_id,
        "scheduler": scheduler.name, "bytes": prediction.bytes, "predicted": prediction.seconds,
        "pessimistic": prediction.pessimistic, "expected_start": decision.expected_start,
        "estimate_source": decision.estimate_source, "release_at": decision.release_at,
        "state": records.WAITING if decision.release_at is not None else records.RELEASED,
        "reason": decision.reason, "decided": now,
        "released": None if decision.release_at is not None else now})
    log.info("chain %s: %s (job %s): %s", chain_id, job_key, job_id, decision.reason)
    return decision


def _expected_start(scheduler: Scheduler, compute_id: str) -> tuple[float | None, str]:
    try:
        return scheduler.expected_start(compute_id)
    except ScratchkeeperError as err:
        log.warning("job %s: no start estimate: %s", compute_id, err)
        return None, "unknown"


@dataclass(frozen=True)
class Move:
    chain_id: str
    job_key: str
    job_id: str
    release_at: float | None
    reason: str


def reevaluate(config: SiteConfig, store: StateStore, *, now: float | None = None,
               sweep_interval: float = 0.0, schedulers: dict | None = None) -> list[Move]:
    """Every held-back stage-in: start it now if its moment came or its compute job's estimate
    came forward (or is gone), else move its begin time with the estimate. One decision row per
    stage-in is kept up to date; returns what was moved."""
    waiting = records.decisions(records.open_staging(store), state=records.WAITING)
    moves: list[Move] = []
    schedulers = schedulers if schedulers is not None else {}
    for row in waiting:
        now_ = time.time() if now is None else now
        scheduler = schedulers.get(row["scheduler"])
        if scheduler is None:
            scheduler = schedulers[row["scheduler"]] = get_scheduler(config, row["scheduler"])
        try:
            live = scheduler.lookup([row["job_id"]], missing_ok=True).get(row["job_id"])
        except ScratchkeeperError as err:
            log.warning("chain %s: %s: cannot look up job %s: %s", row["chain_id"],
                        row["job_key"], row["job_id"], err)
            continue
        if live is None or live.state not in (JobState.PENDING, JobState.HELD):
            # started, ended or cancelled: nothing is held back any more
            records.set_decision_state(store, row["chain_id"], row["job_key"], records.RELEASED,
                                       reason=f"{row['reason']}; left the queue's wait "
                                              f"({live.state.value if live else 'gone'})")
            continue
        prediction = Prediction((), (), row["bytes"], row["predicted"], row["pessimistic"],
                                "recorded at submission")
        expected, source = _expected_start(scheduler, row["compute_id"])
        decision = decide(now_, expected, source, prediction, config,
                          sweep_interval=sweep_interval)
        if decision.release_at is None:
            try:
                scheduler.set_begin(row["job_id"], None)
            except ScratchkeeperError as err:
                log.warning("chain %s: cannot start %s now: %s", row["chain_id"], row["job_id"],
                            err)
                continue
            records.set_decision_state(store, row["chain_id"], row["job_key"], records.RELEASED,
                                       expected_start=expected, estimate_source=source,
                                       reason=decision.reason)
            moves.append(Move(row["chain_id"], row["job_key"], row["job_id"], None,
                              decision.reason))
            log.info("chain %s: %s (job %s): %s", row["chain_id"], row["job_key"],
                     row["job_id"], decision.reason)
        elif abs(decision.release_at - (row["release_at"] or 0)) > RESCHEDULE_SLACK:
            try:
                scheduler.set_begin(row["job_id"], decision.release_at)
            except ScratchkeeperError as err:
                log.warning("chain %s: cannot move %s: %s", row["chain_id"], row["job_id"], err)
                continue
            records.set_decision_state(store, row["chain_id"], row["job_key"], records.WAITING,
                                       release_at=decision.release_at, expected_start=expected,
                                       estimate_source=source, reason=decision.reason)
            moves.append(Move(row["chain_id"], row["job_key"], row["job_id"],
                              decision.release_at, decision.reason))
            log.info("chain %s: %s (job %s): moved to %s", row["chain_id"], row["job_key"],
                     row["job_id"], time.strftime("%Y-%m-%dT%H:%M:%S",
                                                   time.localtime(decision.release_at)))
    return moves
