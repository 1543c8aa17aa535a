"""``scratchkeeper status``: a chain's jobs with the scheduler's state and the reason, merged."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..config import SiteConfig
from ..errors import PermissionDenied, ScratchkeeperError, UnknownJobError
from ..schedulers import JobRecord, get_scheduler
from ..state import StateStore
from . import records


@dataclass
class JobStatus:
    role: str
    key: str
    job_id: str | None
    queue: str
    state: str
    reason: str
    exit_code: int | None
    log_path: str | None


@dataclass
class ChainStatus:
    chain_id: str
    script: str
    state: str
    reason: str
    jobs: list[JobStatus]
    staged_files: list[dict]

    def to_dict(self) -> dict:
        return asdict(self)


def resolve_chain(store: StateStore, ident: str) -> str:
    """A chain id, or the chain of a job id; unknown ones raise UnknownJobError."""
    if records.chain(store, ident):
        return ident
    chain_id = records.chain_of_job(store, ident)
    if chain_id is None:
        raise UnknownJobError(f"unknown job id or chain: {ident} (scratchkeeper did not submit it)")
    return chain_id


def chain_status(store: StateStore, config: SiteConfig, chain_id: str, *,
                 caller_uid: int | None = None) -> ChainStatus:
    chain = records.chain(store, chain_id)
    if caller_uid not in (None, 0) and chain["owner_uid"] != caller_uid:
        raise PermissionDenied(f"chain {chain_id} belongs to another user")
    rows = records.chain_jobs(store, chain_id)
    ids = [r["job_id"] for r in rows if r["job_id"]]
    live: dict[str, JobRecord] = {}
    scheduler_note = ""
    if ids:
        scheduler = get_scheduler(config, chain["scheduler"])
        try:
            live = scheduler.lookup(ids)
        except UnknownJobError:
            live = {}
            for job_id in ids:  # one at a time, so one forgotten job does not hide the others
                try:
                    live.update(scheduler.lookup([job_id]))
                except UnknownJobError:
                    pass
        except ScratchkeeperError as err:
            scheduler_note = f"scheduler unreachable: {err}"
    jobs = []
    for row in rows:
        record = live.get(row["job_id"]) if row["job_id"] else None
        jobs.append(_job_status(row, record))
    staged = [{"path": r["path"], "source": r["source"], "state": r["state"], "size": r["size"],
               "checksum": r["checksum"]} for r in records.staged_files(store, chain_id)]
    return ChainStatus(chain_id, chain["script_path"], _chain_state(chain, jobs),
                       chain["reason"] or scheduler_note, jobs, staged)


def _job_status(row, record: JobRecord | None) -> JobStatus:
    reason = row["reason"] or ""
    if record is None:
        state = row["state"] if row["job_id"] is None else (
            row["state"] if row["state"] in (records.JOB_DONE, records.JOB_FAILED,
                                             records.JOB_CANCELLED) else "unknown")
        exit_code = None
    else:
        state = record.state.value
        exit_code = record.exit_code
        if row["state"] == records.JOB_FAILED and record.state.value in ("completed", "ended"):
            state = "failed"
        elif record.state.value == "ended" and row["state"] in _DB_FINAL:
            state = _DB_FINAL[row["state"]]  # the Torque wrappers say only "C"; we know more
        if not reason and record.reason:
            reason = _explain(record.reason)
    log_path = row["log_path"].replace("%j", row["job_id"]) if row["log_path"] and row["job_id"] else row["log_path"]
    return JobStatus(row["role"], row["job_key"], row["job_id"], row["queue"], state, reason,
                     exit_code, log_path)


_DB_FINAL = {records.JOB_DONE: "completed", records.JOB_CANCELLED: "cancelled",
             records.JOB_FAILED: "failed"}

_REASONS = {
    "Dependency": "waiting for the jobs before it in the chain",
    "DependencyNeverSatisfied": "a job it depends on failed; it will not run",
    "JobHeldUser": "held",
    "Priority": "waiting for higher-priority jobs",
    "Resources": "waiting for resources",
}


def _explain(reason: str) -> str:
    return f"{reason}: {_REASONS[reason]}" if reason in _REASONS else reason


def _chain_state(chain, jobs: list[JobStatus]) -> str:
    if chain["state"] in (records.SUBMIT_FAILED, records.STAGE_IN_FAILED, records.STAGE_OUT_FAILED):
        return chain["state"]
    states = [j.state for j in jobs]
    if states and all(s in ("completed", "done") for s in states):
        return "completed"
    if any(s in ("failed", "timeout", "node_fail", "out_of_memory") for s in states):
        return "failed"
    if any(s == "running" for s in states):
        return "running"
    if states and all(s in ("completed", "done", "cancelled", "failed", "ended") for s in states):
        return "ended"
    return chain["state"]
