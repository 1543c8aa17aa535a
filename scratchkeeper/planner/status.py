"""``scratchkeeper status``: a chain's jobs with the scheduler's state and the reason, merged."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..config import SiteConfig
from ..errors import PermissionDenied, ScratchkeeperError, UnknownJobError
from ..schedulers import JobRecord, JobState, get_scheduler, slurm
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
    another job: the chain's own is then unknown, and the other one is never cancelled. Nor
    was any job submitted before the chain was made: accounting keeps the record of an
    earlier job that had the same id, ended long ago (never the chain's job's end)."""
    latest = chain["updated"] + _CLOCK_SLACK
    earliest = chain["created"] - _CLOCK_SLACK
    return {job_id: record for job_id, record in live.items()
            if record.submit_time is None or earliest <= record.submit_time <= latest}


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
    #: the chain that took over this one's compute job (the chain service chained it again
    #: after this chaining failed or was interrupted); ``state`` is then that chain's
    replaced_by: str | None = None
    #: the state recorded for this chain itself (``state`` says what its job became)
    recorded_state: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class ChainSummary:
    """One line of ``status`` without a chain: the state a user expects (``completed`` once
    every job completed), not only the one recorded at submission."""

    chain_id: str
    script: str
    created: float
    state: str
    reason: str
    recorded_state: str
    replaced_by: str | None = None

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
    """The chain's jobs, files and offloads; for a chain another replaced (re-chained by the
    chain service), its own jobs with the state of the chain that replaced it."""
    chain = records.chain(store, chain_id)
    if caller_uid not in (None, 0) and chain["owner_uid"] != caller_uid:
        raise PermissionDenied(f"chain {chain_id} belongs to another user")
    replaced_by = records.replacements(store, [chain_id]).get(chain_id)
    ids = [r["job_id"] for r in records.chain_jobs(store, chain_id) if r["job_id"]]
    live, scheduler_note = _look_up(config, chain["scheduler"], ids)
    live = records_of_chain(live, chain)  # an id handed out again since is not the chain's
    # The records are read (again) after the scheduler answered: a data job records its end
    # (stage fail, stage commit) before it exits, so a job the scheduler shows ended has its
    # record in this read. Read only before, a failure recorded during the lookup would be
    # missed and the scheduler's bare "ended FAILED" shown in place of the recorded cause.
    chain = records.chain(store, chain_id)
    rows = records.chain_jobs(store, chain_id)
    state, reason, jobs = _derive(chain, rows, live, scheduler_note)
    staged_rows = records.staged_files(store, chain_id)
    staged = [{"path": r["path"], "source": r["source"], "state": r["state"], "size": r["size"],
               "checksum": r["checksum"]} for r in staged_rows]
    _add_timing(store, chain_id, jobs, live, staged_rows)
    offloads = []
    if records.made(store, "offloads"):
        offloads = [{k: r[k] for k in ("path", "state", "job_id", "destination", "closed",
                                       "submitted", "ended", "digest", "reason")}
                    for r in records.offloads(store, chain_id=chain_id)]
    status = ChainStatus(chain_id, chain["script_path"], state, reason, jobs, staged, offloads,
                         recorded_state=chain["state"])
    if replaced_by is not None:
        successor = chain_status(store, config, replaced_by)
        status.replaced_by = replaced_by
        status.state = successor.state
        status.reason = f"replaced by chain {replaced_by} ({chain['reason'] or 'chaining failed'})"
    return status


def chain_summaries(store: StateStore, config: SiteConfig, rows) -> list[ChainSummary]:
    """``status``'s list: each chain of ``rows`` (records' chain rows) with the state its jobs
    say, found with one scheduler lookup per scheduler kind for all of them; a chain another
    replaced shows that chain's state. A scheduler that cannot be reached leaves the recorded
    states, with the reason."""
    replaced = records.replacements(store, [row["chain_id"] for row in rows])
    chains = {row["chain_id"]: row for row in rows}
    for successor in set(replaced.values()) - set(chains):
        chains[successor] = records.chain(store, successor)
    jobs_of = {chain_id: records.chain_jobs(store, chain_id) for chain_id in chains}
    by_kind: dict[str, list[str]] = {}
    for chain_id, chain in chains.items():
        by_kind.setdefault(chain["scheduler"], []).extend(
            r["job_id"] for r in jobs_of[chain_id] if r["job_id"])
    looked_up = {kind: _look_up(config, kind, ids) for kind, ids in by_kind.items()}
    derived = {}
    for chain_id, before in chains.items():
        live, note = looked_up[before["scheduler"]]
        # read again after the lookup, for the reason chain_status gives
        derived[chain_id] = _derive(records.chain(store, chain_id),
                                    records.chain_jobs(store, chain_id),
                                    records_of_chain(live, before), note)[:2]
    out = []
    for row in rows:
        chain_id = row["chain_id"]
        successor = replaced.get(chain_id)
        state, reason = derived[successor or chain_id]
        if successor is not None:
            reason = f"replaced by chain {successor}"
        out.append(ChainSummary(chain_id, row["script_path"], row["created"], state, reason,
                                row["state"], successor))
    return out


@dataclass
class Backlog:
    """What the chain service has still to do, and the data jobs it left behind
    (``status --backlog``). Times are epoch seconds."""

    #: compute jobs job_submit.lua held, not chained yet: job_id, submitted
    to_chain: list[dict] = field(default_factory=list)
    #: compute jobs chained but still held (the release is due): job_id, chain_id, submitted
    to_release: list[dict] = field(default_factory=list)
    #: chains still being planned or submitted (or left so by a crash): state, count, oldest
    submitting: list[dict] = field(default_factory=list)
    #: just-in-time stage-ins held back: count, next_release (None: no chain asked for one)
    jit_waiting: dict | None = None
    #: data jobs still in the queue whose chain ended, was settled or was replaced
    orphans: list[dict] = field(default_factory=list)
    #: jobs in the data queue that no chain and no offload records (a submission a crash cut
    #: between sbatch and its record, or jobs not scratchkeeper's)
    unrecorded: list[dict] = field(default_factory=list)
    #: compute jobs whose dependency names a data job of a chaining the chain service
    #: abandoned (it cancelled that chain's jobs): Slurm would keep them pending for ever.
    #: job_id, chain_id (the job's chain now), dead (job ids), why, fix (the scontrol command
    #: that leaves only live data jobs), submitted
    stranded: list[dict] = field(default_factory=list)
    #: what could not be asked (the scheduler unreachable, the chain service's queue)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def backlog(store: StateStore, config: SiteConfig,
            held: list[tuple[str, str | None]] | None = None) -> Backlog:
    """The chain service's backlog and the orphaned data jobs, from the chain records and one
    look at the whole queue of the site's scheduler.

    ``held``: (job id, chain id once chained) of the compute jobs job_submit.lua holds, as the
    chain service reads them from the queue (None: not asked, PBS has no such jobs).
    """
    report = Backlog()
    report.submitting = [dict(row) for row in records.chains_unfinished_submission(store)]
    jit = records.jit_backlog(store)
    report.jit_waiting = dict(jit) if jit is not None else None
    try:
        queued = {r.job_id: r for r in get_scheduler(config).query(None)}
    except ScratchkeeperError as err:
        report.notes.append(f"scheduler unreachable, queue not read: {err}")
        return report
    for job_id, chain_id in held or ():
        job = queued.get(job_id)
        entry = {"job_id": job_id, "submitted": job.submit_time if job else None}
        if chain_id is None:
            report.to_chain.append(entry)
        else:
            report.to_release.append({**entry, "chain_id": chain_id})
    rows = [r for r in records.jobs_by_id(store, queued) if not queued[r["job_id"]].state.is_final]
    replaced = records.replacements(store, {r["chain_id"] for r in rows})
    for row in rows:
        job = queued[row["job_id"]]
        if row["role"] == "compute" or not _same_job(job, row):
            continue
        why = _orphaned(row, replaced.get(row["chain_id"]))
        if why:
            report.orphans.append({"job_id": row["job_id"], "chain_id": row["chain_id"],
                                   "job_key": row["job_key"], "state": job.state.value,
                                   "submitted": job.submit_time, "why": why})
    if config.scheduler.kind == "slurm":  # the chain service's compute jobs are Slurm's
        report.stranded = _stranded(store, queued, rows)
    known = ({r["job_id"] for r in rows} | {r["job_id"] for r in records.offload_jobs_by_id(
        store, queued)} | {job_id for job_id, _ in held or ()})
    report.unrecorded = [{"job_id": job.job_id, "name": job.name, "user": job.user,
                          "state": job.state.value, "submitted": job.submit_time}
                         for job in queued.values()
                         if job.queue == config.scheduler.data_queue and not job.state.is_final
                         and job.job_id not in known]
    for found in (report.to_chain, report.to_release, report.orphans, report.unrecorded,
                  report.stranded):
        found.sort(key=lambda entry: entry["submitted"] or 0.0)
    return report


def _stranded(store: StateStore, queued: dict[str, JobRecord], rows) -> list[dict]:
    """The queued compute jobs whose dependency names a data job of one of their own chains
    other than their newest: a chaining the chain service abandoned (killed after it set the
    dependency; it cancelled that chain's jobs and chained the job again). ``afterok`` on a
    cancelled job is never met, so Slurm keeps such a job ``DependencyNeverSatisfied``."""
    compute = {r["job_id"]: queued[r["job_id"]] for r in rows
               if r["role"] == "compute" and _same_job(queued[r["job_id"]], r)}
    parsed = {job_id: slurm.parse_dependency(job.dependency)[0]
              for job_id, job in compute.items()}
    named = {e.job_id for entries in parsed.values() for e in entries if e.job_id}
    data_rows = {r["job_id"]: r for r in records.jobs_by_id(store, named) if r["role"] != "compute"}
    found = []
    for job_id, entries in parsed.items():
        if not any(e.job_id in data_rows for e in entries):
            continue  # it waits on no data job (none left, or never chained)
        newest = records.chain_of_job(store, job_id)
        dead = [e for e in entries if e.job_id in data_rows
                and data_rows[e.job_id]["chain_id"] != newest
                and _chain_of_compute(store, data_rows[e.job_id]["chain_id"], job_id)]
        if not dead:
            continue
        found.append({"job_id": job_id, "chain_id": newest,
                      "dead": [e.job_id for e in dead],
                      "why": "; ".join(_dead_entry(e, data_rows[e.job_id], newest) for e in dead)
                      + ": Slurm will never start it",
                      "fix": _live_dependency(store, job_id, entries, dead, newest),
                      "submitted": compute[job_id].submit_time})
    return found


def _chain_of_compute(store: StateStore, chain_id: str, job_id: str) -> bool:
    return any(r["role"] == "compute" and r["job_id"] == job_id
               for r in records.chain_jobs(store, chain_id))


def _dead_entry(entry: slurm.DependencyEntry, row, newest: str | None) -> str:
    state = f", Slurm says {entry.state}" if entry.state else ""
    return (f"its dependency names {row['job_key']} job {entry.job_id} of chain "
            f"{row['chain_id']}, an abandoned chaining (the job's chain is now {newest}{state})")


def _live_dependency(store: StateStore, job_id: str, entries, dead, newest: str | None) -> str:
    """``scontrol update`` giving the job its dependency without the dead entries and with
    its newest chain's stage-in jobs (Slurm replaces the whole list)."""
    live = [e for e in entries if e not in dead]
    named = {e.job_id for e in live}
    missing = [r["job_id"] for r in (records.chain_jobs(store, newest) if newest else [])
               if r["role"] == "stage-in" and r["job_id"] and r["job_id"] not in named]
    value = ",".join(filter(None, (slurm.format_dependency(live),
                                   "afterok:" + ":".join(missing) if missing else "")))
    return f"scontrol update JobId={job_id} Dependency={value}"


def _same_job(job: JobRecord, row) -> bool:
    """Whether the queue's job is the one the chain recorded, not one with an id the
    scheduler handed out again since (see :func:`records_of_chain`)."""
    return job.submit_time is None or job.submit_time <= row["chain_updated"] + _CLOCK_SLACK


def _orphaned(row, replaced_by: str | None) -> str:
    """Why a queued data job has no chain left to serve ('' when it has one)."""
    if replaced_by is not None:
        return f"its chain was replaced by {replaced_by}"
    if row["chain_state"] in records.ENDED_STATES:
        return f"its chain ended ({row['chain_state']})"
    if row["settled"] is not None:
        return "its chain's end was settled by the chain service"
    return ""


def _look_up(config: SiteConfig, kind: str, ids: list[str]) -> tuple[dict[str, JobRecord], str]:
    """The scheduler's records of ``ids`` (a forgotten job hides no other), and a note saying
    why there are none when the scheduler could not be asked."""
    if not ids:
        return {}, ""
    try:
        return get_scheduler(config, kind).lookup(ids, missing_ok=True), ""
    except ScratchkeeperError as err:
        return {}, f"scheduler unreachable: {err}"


def _derive(chain, rows, live: dict[str, JobRecord],
            scheduler_note: str) -> tuple[str, str, list[JobStatus]]:
    """The chain's state and reason and its jobs' statuses, from its records and the
    scheduler's (``live``, already limited to the chain's own jobs)."""
    # Only a scheduler that answered can say a stage-in is gone; an unreachable one says nothing.
    failures = [] if scheduler_note else [
        f for f in (stage_in_failure(r, live.get(r["job_id"])) for r in rows) if f]
    jobs = [_job_status(row, live.get(row["job_id"]) if row["job_id"] else None,
                        "; ".join(failures)) for row in rows]
    state, reason = chain["state"], chain["reason"]
    if state == records.SUBMITTED and failures:
        # the chain service records this at its next sweep; say it now
        state, reason = records.STAGE_IN_FAILED, "; ".join(failures)
    return _chain_state(state, jobs), reason or scheduler_note, jobs


def _add_timing(store: StateStore, chain_id: str, jobs: list[JobStatus],
                live: dict[str, JobRecord], staged_rows) -> None:
    decisions = {d["job_key"]: d for d in records.decisions(store, chain_id=chain_id)} \
        if records.made(store) else {}
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
    if any(s in ("running", "completing") for s in states):  # completing: its epilog runs
        return "running"
    if states and all(s in ("completed", "done", "cancelled", "failed", "ended") for s in states):
        return "ended"
    return recorded
