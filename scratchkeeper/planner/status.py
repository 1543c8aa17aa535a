"""``scratchkeeper status``: a chain's jobs with the scheduler's state and the reason, merged."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..config import SiteConfig
from ..errors import PermissionDenied, ScratchkeeperError, UnknownJobError
from ..schedulers import JobRecord, JobState, get_scheduler
from ..state import StateStore
from . import records

#: what a final state means for a data job that could not report it itself
_CAUSES = {
    JobState.CANCELLED: "cancelled",
    JobState.TIMEOUT: "its walltime ran out",
    JobState.NODE_FAIL: "its node failed",
    JobState.OUT_OF_MEMORY: "out of memory",
    JobState.PREEMPTED: "preempted",
    JobState.FAILED: "failed",
}

#: seconds the scheduler's clock may run ahead of the state database's
_CLOCK_SLACK = 300.0


def stage_in_failure(row, record: JobRecord | None) -> str | None:
    """Why the stage-in job of ``row`` ended without staging its files; None while it is queued
    or running, or once it staged them.

    ``record`` is the scheduler's (None: neither the queue nor accounting knows the job).
    """
    if row["role"] != "stage-in" or not row["job_id"] or row["state"] == records.JOB_DONE:
        return None
    job = f"stage-in job {row['job_id']}"
    if record is None:
        return f"{job} is known neither to the queue nor to accounting and never recorded its files"
    if not record.state.is_final or record.state is JobState.COMPLETED:
        return None
    if record.state is JobState.ENDED:  # the Torque wrappers' "C": how it ended is not said
        return f"{job} ended (state {record.native_state}, exit status not reported) without " \
               "recording its staged files"
    cause = _CAUSES.get(record.state, record.state.value)
    if record.state is JobState.FAILED and record.exit_signal:
        cause = f"killed by signal {record.exit_signal}"
    return f"{job} ended {record.outcome()} ({cause}) before its files were staged"


def records_of_chain(live: dict[str, JobRecord], chain) -> dict[str, JobRecord]:
    """The records that can be the chain's jobs: every job of a chain was submitted before the
    chain's last change of state (SUBMITTED is set after the last submission). A job id that
    the scheduler handed out again since (a reset of slurmctld's state restarts them at 1) is
    another job: the chain's own is then unknown, and the other one is never cancelled."""
    latest = chain["updated"] + _CLOCK_SLACK
    return {job_id: record for job_id, record in live.items()
            if record.submit_time is None or record.submit_time <= latest}


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
    #: the scheduler's own word for the state (TIMEOUT, CANCELLED, C...) and the signal
    native_state: str = ""
    exit_signal: int | None = None
    #: per stage: when queued, started, ended (epoch seconds), bytes, rate (bytes/s) and, for a
    #: just-in-time stage-in, the prediction it was held back with and that prediction's error
    timing: dict | None = None


@dataclass
class ChainStatus:
    chain_id: str
    script: str
    state: str
    reason: str
    jobs: list[JobStatus]
    staged_files: list[dict]
    #: results offloaded at close (#STAGEOUT -when close): path, state, job, times, digest
    offloads: list[dict] = field(default_factory=list)

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
            # a forgotten job hides no other; an id handed out again since is not the chain's
            live = records_of_chain(scheduler.lookup(ids, missing_ok=True), chain)
        except ScratchkeeperError as err:
            scheduler_note = f"scheduler unreachable: {err}"
    # The records are read (again) after the scheduler answered: a data job records its end
    # (stage fail, stage commit) before it exits, so a job the scheduler shows ended has its
    # record in this read. Read only before, a failure recorded during the lookup would be
    # missed and the scheduler's bare "ended FAILED" shown in place of the recorded cause.
    chain = records.chain(store, chain_id)
    rows = records.chain_jobs(store, chain_id)
    # Only a scheduler that answered can say a stage-in is gone; an unreachable one says nothing.
    failures = [] if scheduler_note else [
        f for f in (stage_in_failure(r, live.get(r["job_id"])) for r in rows) if f]
    jobs = [_job_status(row, live.get(row["job_id"]) if row["job_id"] else None,
                        "; ".join(failures)) for row in rows]
    staged_rows = records.staged_files(store, chain_id)
    staged = [{"path": r["path"], "source": r["source"], "state": r["state"], "size": r["size"],
               "checksum": r["checksum"]} for r in staged_rows]
    _add_timing(store, chain_id, jobs, live, staged_rows)
    state, reason = chain["state"], chain["reason"]
    if state == records.SUBMITTED and failures:
        # the chain service records this at its next sweep; say it now
        state, reason = records.STAGE_IN_FAILED, "; ".join(failures)
    offloads = []
    if staging_made(store, "offloads"):
        offloads = [{k: r[k] for k in ("path", "state", "job_id", "destination", "closed",
                                       "submitted", "ended", "digest", "reason")}
                    for r in records.offloads(store, chain_id=chain_id)]
    return ChainStatus(chain_id, chain["script_path"], _chain_state(state, jobs),
                       reason or scheduler_note, jobs, staged, offloads)


def staging_made(store: StateStore, table: str = "jit_schedule") -> bool:
    return records.made(store, table)


def _add_timing(store: StateStore, chain_id: str, jobs: list[JobStatus],
                live: dict[str, JobRecord], staged_rows) -> None:
    decisions = {d["job_key"]: d for d in records.decisions(store, chain_id=chain_id)} \
        if staging_made(store) else {}
    for job in jobs:
        record = live.get(job.job_id) if job.job_id else None
        queued, started, ended = ((record.submit_time, record.start_time, record.end_time)
                                  if record is not None else (None, None, None))
        if record is not None and not record.state.is_final:
            ended = None
        if record is not None and record.state in (JobState.PENDING, JobState.HELD):
            started = None  # a pending job's start time is the scheduler's expectation
        size = None
        if job.role == "stage-in":
            sizes = [r["size"] for r in staged_rows if r["job_key"] == job.key]
            size = sum(sizes) if sizes and None not in sizes else None
        seconds = ended - started if started is not None and ended is not None else None
        timing = {"queued": queued, "started": started, "ended": ended, "seconds": seconds,
                  "bytes": size, "rate": size / seconds if size and seconds else None}
        decision = decisions.get(job.key)
        if decision is not None:
            predicted = decision["predicted"]
            timing["jit"] = {
                "predicted_seconds": predicted, "pessimistic_seconds": decision["pessimistic"],
                "expected_compute_start": decision["expected_start"],
                "estimate_source": decision["estimate_source"],
                "release_at": decision["release_at"], "released": decision["released"],
                "state": decision["state"], "reason": decision["reason"],
                "prediction_error": (seconds - predicted) / predicted
                if seconds is not None and predicted else None}
        job.timing = timing


def _job_status(row, record: JobRecord | None, stage_in_failed: str) -> JobStatus:
    """A job's state and reason: what scratchkeeper recorded wins over the scheduler's words,
    and a finished job never shows the pending reason it had before it ended."""
    reason = row["reason"] or ""
    native, exit_code, exit_signal = "", None, None
    if record is None:
        state = row["state"] if row["job_id"] is None else (
            row["state"] if row["state"] in (records.JOB_DONE, records.JOB_FAILED,
                                             records.JOB_CANCELLED) else "unknown")
    else:
        state = record.state.value
        native, exit_code, exit_signal = record.native_state, record.exit_code, record.exit_signal
        if row["state"] == records.JOB_FAILED and record.state.value in ("completed", "ended"):
            state = "failed"
        elif record.state.value == "ended" and row["state"] in _DB_FINAL:
            state = _DB_FINAL[row["state"]]  # the Torque wrappers say only "C"; we know more
        if not reason:
            reason = _scheduler_reason(row, record, stage_in_failed)
    log_path = row["log_path"]
    if log_path and row["job_id"]:
        log_path = log_path.replace("%j", row["job_id"])
    return JobStatus(row["role"], row["job_key"], row["job_id"], row["queue"], state, reason,
                     exit_code, log_path, native, exit_signal)


def _scheduler_reason(row, record: JobRecord, stage_in_failed: str) -> str:
    waits_on_stage_in = row["role"] in ("compute", "stage-out") and stage_in_failed
    if record.state.is_final:
        if waits_on_stage_in and record.state is not JobState.COMPLETED:
            return f"{record.native_state}: never ran, {stage_in_failed}"
        if record.state in (JobState.COMPLETED, JobState.ENDED):
            return ""
        return f"ended {record.outcome()}"  # sacct keeps the pending reason it had: not shown
    if waits_on_stage_in:
        return f"{record.reason or record.native_state}: will not run, {stage_in_failed}"
    return _explain(record.reason) if record.reason else ""


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


def _chain_state(recorded: str, jobs: list[JobStatus]) -> str:
    if recorded in (records.SUBMIT_FAILED, records.STAGE_IN_FAILED, records.STAGE_OUT_FAILED):
        return recorded
    states = [j.state for j in jobs]
    if states and all(s in ("completed", "done") for s in states):
        return "completed"
    if any(s in ("failed", "timeout", "node_fail", "out_of_memory") for s in states):
        return "failed"
    if any(s == "running" for s in states):
        return "running"
    if states and all(s in ("completed", "done", "cancelled", "failed", "ended") for s in states):
        return "ended"
    return recorded
