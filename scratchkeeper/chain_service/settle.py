"""End the chains whose stage-in ended any way but success (a sweep of the chain service).

A compute job waits on ``afterok`` of its stage-in jobs. A stage-in job that ends without having
staged its files (scancel, walltime, a failed node, killed before its own ``stage fail`` could
report) leaves the compute job PENDING with DependencyNeverSatisfied for ever, unless it carries
Slurm's kill-on-invalid-dependency flag: ``scratchkeeper submit`` sets it, but the chain
service's compute jobs were submitted by their user with plain sbatch (``scontrol update`` sets
their dependency and cannot set that flag), and the Torque wrappers never pass it.

:func:`settle_chains` looks at every chain whose stage-in has not recorded its files yet, with
one scheduler lookup per cycle (queue, then accounting for the jobs gone from it: a job missing
from the queue is never taken for ended without it), cancels the compute and stage-out jobs of
a chain whose stage-in ended that way and records why, as the chain's state and on each job.
Cancel first, record after: a kill -9 in between leaves the stage-in's end to be found again
by the next cycle. A chain stays watched until its dependents are confirmed ended; then a row in
``chain_ends`` (:func:`scratchkeeper.planner.records.record_chain_end`) drops it from the
sweep. A chain whose stage-in recorded its files (``stage commit``) is never looked at again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ..config import SiteConfig
from ..errors import ScratchkeeperError
from ..planner import records
from ..planner.status import records_of_chain, stage_in_failure
from ..schedulers import JobRecord, JobState, get_scheduler
from ..state import StateStore

log = logging.getLogger(__name__)

_DEPENDENT_ROLES = ("compute", "stage-out")


@dataclass
class ChainEnd:
    """What one sweep did to one chain."""

    chain_id: str
    reason: str
    cancelled: list[str] = field(default_factory=list)
    settled: bool = False


def watched_chains(store: StateStore, job_ids: set[str] | None = None) -> list[str]:
    """Chains whose stage-in has not recorded its files, or that ended and whose dependents
    are not yet confirmed ended (all of them, or those holding one of ``job_ids``)."""
    chains = records.watched_chains(store)
    if job_ids is not None:
        chains = [c for c in chains if any(r["job_id"] in job_ids
                                           for r in records.chain_jobs(store, c))]
    return chains


def settle_chains(config: SiteConfig, store: StateStore, *,
                  job_ids: set[str] | None = None) -> list[ChainEnd]:
    """One sweep: end the chains whose stage-in ended without staging its files.

    One scheduler lookup per scheduler kind for all watched chains. A scheduler that cannot be
    reached raises (the caller backs off); nothing is decided without its answer.
    """
    records.open_chain_ends(store)
    by_kind: dict[str, list[str]] = {}
    for chain_id in watched_chains(store, job_ids):
        by_kind.setdefault(records.chain(store, chain_id)["scheduler"], []).append(chain_id)
    ends = []
    for kind, chain_ids in by_kind.items():
        scheduler = get_scheduler(config, kind)
        live = _look_up(store, scheduler, chain_ids)
        decided = []
        for chain_id in chain_ids:
            # read after the lookup: a `stage fail` that ran meanwhile has recorded its reason
            chain = records.chain(store, chain_id)
            decision = _decide(store, chain, records.chain_jobs(store, chain_id),
                               records_of_chain(live, chain))
            if decision is not None:
                decided.append(decision)
        cancel = [job_id for end, _, _ in decided for job_id in end.cancelled]
        if cancel:
            for end, _, _ in decided:  # each chain's reason on its own jobs
                if end.cancelled:
                    scheduler.annotate(end.cancelled, f"chain {end.chain_id}: {end.reason}")
            try:
                scheduler.cancel(cancel)  # one command for the whole cycle
            except ScratchkeeperError as err:
                # recorded all the same; the next sweep finds them still queued and tries again
                log.warning("chain sweep: cancelling %s failed: %s", ", ".join(cancel), err)
        for end, failures, dependents in decided:
            if end.cancelled:
                log.info("chain %s: %s; cancelled %s", end.chain_id, end.reason,
                         ", ".join(end.cancelled))
            if failures:
                _record(store, end.chain_id, failures, dependents, end.reason)
            elif not end.cancelled:
                records.record_chain_end(store, end.chain_id, end.reason)
                end.settled = True
        ends += [end for end, _, _ in decided]
    return ends


def _look_up(store: StateStore, scheduler, chain_ids: list[str]) -> dict[str, JobRecord]:
    """The scheduler's records of the jobs the decisions need: the stage-in jobs, and the
    dependents only of the chains that ended (most cycles: one lookup of the stage-ins)."""
    chains = {c: (records.chain(store, c), records.chain_jobs(store, c)) for c in chain_ids}

    def ids(wanted) -> list[str]:
        return [r["job_id"] for c in wanted for r in chains[c][1]
                if r["job_id"] and (r["role"] == "stage-in" or c in ended)]
    ended = {c for c, (chain, _) in chains.items() if chain["state"] == records.STAGE_IN_FAILED}
    live = scheduler.lookup(ids(chains), missing_ok=True)
    newly = {c for c, (chain, rows) in chains.items() if c not in ended and any(
        stage_in_failure(r, records_of_chain(live, chain).get(r["job_id"])) for r in rows)}
    if newly:
        ended |= newly
        live.update(scheduler.lookup([j for j in ids(newly) if j not in live], missing_ok=True))
    return live


def _decide(store: StateStore, chain, rows, live: dict[str, JobRecord]):
    """(what to do, the stage-in failures to record, the dependents) of one chain, or None."""
    chain_id = chain["chain_id"]
    failures = []
    for row in rows:
        record = live.get(row["job_id"]) if row["job_id"] else None
        failure = stage_in_failure(row, record)
        if failure:
            failures.append((row, failure))
        elif (row["role"] == "stage-in" and row["state"] == records.JOB_SUBMITTED
              and record is not None and record.state is JobState.COMPLETED):
            # its `stage commit` ran (the job's last command), in another database maybe
            records.set_jobs_state(store, chain_id, [row["job_key"]], records.JOB_DONE)
    recorded = chain["state"] == records.STAGE_IN_FAILED
    if not recorded and not failures:
        return None  # still staging, or staged: the compute job's afterok decides
    if recorded:
        failures = []  # `stage fail` or an earlier sweep recorded the end; its reason stays
    dependents = [r for r in rows if r["role"] in _DEPENDENT_ROLES and r["job_id"]]
    waiting = [r["job_id"] for r in dependents
               if r["job_id"] in live and not live[r["job_id"]].state.is_final]
    reason = chain["reason"] if recorded else "; ".join(failure for _, failure in failures)
    return ChainEnd(chain_id, reason, waiting), failures, dependents


def _record(store: StateStore, chain_id: str, failures, dependents, reason: str) -> None:
    """The stage-in's end and the cancellation of its dependents, in one transaction (unless a
    `stage fail` recorded the chain's end first: its reason is the better one)."""
    records.record_stage_in_failed(
        store, chain_id, {row["job_key"]: failure for row, failure in failures},
        [r["job_key"] for r in dependents if r["state"] != records.JOB_DONE], reason)
