"""Slurm backend: build sbatch/squeue/sacct/scancel/scontrol argv and parse their output.

Parsers are tested on output captured from the real Slurm 22.05 (tests/data/slurm/).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..config import slurm_time_seconds
from ..errors import SchedulerError
from .base import JobRecord, JobState, SubmitSpec

NAME = "slurm"
#: a job squeue shows live is live: slurmctld holds every job until it ends and MinJobAge
#: passes, and accounting only follows it, so a lookup asks sacct only for the ended ones
#: (their exit status) and those gone from the queue, not for every live job at every poll
QUEUE_HOLDS_LIVE_JOBS = True

#: Slurm job states (squeue/sacct spelling) to scheduler-neutral ones
STATES: dict[str, JobState] = {
    "PENDING": JobState.PENDING, "PD": JobState.PENDING,
    "CONFIGURING": JobState.PENDING, "CF": JobState.PENDING,
    "REQUEUE_HOLD": JobState.HELD, "RH": JobState.HELD,
    "REQUEUE_FED": JobState.REQUEUED, "RF": JobState.REQUEUED,
    "REQUEUED": JobState.REQUEUED, "RQ": JobState.REQUEUED,
    "RESIZING": JobState.RUNNING, "RS": JobState.RUNNING,
    "RUNNING": JobState.RUNNING, "R": JobState.RUNNING,
    "SIGNALING": JobState.RUNNING, "SI": JobState.RUNNING,
    "STAGE_OUT": JobState.COMPLETING, "SO": JobState.COMPLETING,
    "COMPLETING": JobState.COMPLETING, "CG": JobState.COMPLETING,
    "SUSPENDED": JobState.SUSPENDED, "S": JobState.SUSPENDED,
    "STOPPED": JobState.SUSPENDED, "ST": JobState.SUSPENDED,
    "COMPLETED": JobState.COMPLETED, "CD": JobState.COMPLETED,
    "FAILED": JobState.FAILED, "F": JobState.FAILED,
    "BOOT_FAIL": JobState.FAILED, "BF": JobState.FAILED,
    "DEADLINE": JobState.TIMEOUT, "DL": JobState.TIMEOUT,
    "CANCELLED": JobState.CANCELLED, "CA": JobState.CANCELLED,
    "REVOKED": JobState.CANCELLED, "RV": JobState.CANCELLED,
    "SPECIAL_EXIT": JobState.FAILED, "SE": JobState.FAILED,
    "TIMEOUT": JobState.TIMEOUT, "TO": JobState.TIMEOUT,
    "NODE_FAIL": JobState.NODE_FAIL, "NF": JobState.NODE_FAIL,
    "OUT_OF_MEMORY": JobState.OUT_OF_MEMORY, "OOM": JobState.OUT_OF_MEMORY,
    "PREEMPTED": JobState.PREEMPTED, "PR": JobState.PREEMPTED,
}

#: pending reasons that mean "held" rather than "waiting its turn"
_HELD_REASONS = {"JobHeldUser", "JobHeldAdmin", "JobHeld"}

HISTORY_FIELDS = ("JobID", "JobName", "Partition", "User", "State", "ExitCode", "NNodes",
                  "Submit", "Start", "End", "Reason")


def build_submit(spec: SubmitSpec) -> list[str]:
    argv = ["sbatch", "--parsable", f"--partition={spec.queue}", f"--job-name={spec.job_name}",
            f"--chdir={spec.workdir}"]
    if spec.output_path:
        argv.append(f"--output={spec.output_path}")
    if spec.dependencies:
        argv.append("--dependency=" + ",".join(f"{kind}:{':'.join(ids)}"
                                                for kind, ids in spec.dependencies))
        if spec.kill_on_invalid_dependency:
            argv.append("--kill-on-invalid-dep=yes")
    if spec.hold:
        argv.append("--hold")
    argv += list(spec.extra_args)
    argv.append(spec.script_path)
    return argv


def parse_submit(stdout: str) -> str:
    """``sbatch --parsable`` prints ``jobid`` or ``jobid;cluster``."""
    text = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    match = re.fullmatch(r"(\d+)(?:;\S+)?", text)
    if not match:
        raise SchedulerError(f"sbatch printed no job id: {stdout.strip()!r}")
    return match.group(1)


def build_query(job_ids: Sequence[str] | None) -> list[str]:
    """The whole queue as ``squeue --json``, finished jobs within MinJobAge included; given
    jobs in the snapshot's fields, which carry no exit status (``lookup`` asks accounting).

    22.05's ``squeue --json`` ignores ``--jobs`` (and every filter): slurmctld packs the whole
    queue under its job lock (229 ms a call with 600 jobs under load, every stage-in's wait
    asking every 5 s), and the client parses 2.5 kB of JSON a job. ``squeue -o`` of one job is
    one job's RPC (REQUEST_JOB_INFO_SINGLE, 0.1 ms). 24.11's keeps to squeue's default states
    (pending, running, completing) unless told ``--states=all`` (tests/schedulers/data/24.11).
    """
    if job_ids:
        return ["squeue", "-a", "-t", "all", "--jobs=" + ",".join(job_ids), "-o",
                SNAPSHOT_FORMAT]
    return ["squeue", "--json", "--states=all"]


def parse_query(stdout: str) -> list[JobRecord]:
    """Parse what :func:`build_query` runs: ``squeue --json`` (Slurm 22.05 data_parser
    v0.0.38 layout, newer ones too), or the snapshot's fields of the jobs asked for."""
    if stdout.startswith(SNAPSHOT_HEADER.split("|", 1)[0] + "|"):
        return parse_snapshot(stdout)
    try:
        document = json.loads(stdout)
    except json.JSONDecodeError as err:
        raise SchedulerError(f"squeue --json printed invalid JSON: {err}") from err
    errors = document.get("errors") or []
    if errors:
        raise SchedulerError("squeue: " + "; ".join(str(e.get("error", e)) for e in errors))
    return [_record_from_json(job) for job in document.get("jobs", [])]


#: the queue snapshot's ``squeue -o`` fields: those a queue snapshot's readers use (replicad,
#: recoveryd), the job name last; the header line names them and is checked. No ``%M`` (time
#: used): a running job's line stays the same from one cycle to the next. The reason is cut
#: (and padded) to REASON_WIDTH: a job's reason may be a plugin's message (``burst_buffer/lua:
#: slurm_bb_data_in: ...`` with a failure's text, file names included: ``|`` and newlines),
#: whose first characters are the plugin's own; Slurm's reasons (``JobHeldUser``) are shorter.
REASON_WIDTH = 40
SNAPSHOT_FORMAT = f"%A|%P|%u|%T|%{REASON_WIDTH}r|%D|%V|%S|%Q|%j"
SNAPSHOT_HEADER = "JOBID|PARTITION|USER|STATE|REASON|NODES|SUBMIT_TIME|START_TIME|PRIORITY|NAME"
_SNAPSHOT_FIELDS = SNAPSHOT_HEADER.count("|") + 1


def build_snapshot() -> list[str]:
    """The whole queue, finished jobs within MinJobAge included (as ``--json`` gives them).

    About 75 bytes a job against 2.5 kB of ``--json``, which is what a daemon polling 11,000
    jobs pays for, in squeue's time and in parsing. ``%A`` is an array task's own job id.
    """
    return ["squeue", "-a", "-t", "all", "-o", SNAPSHOT_FORMAT]


def parse_snapshot(stdout: str, reuse: dict[str, JobRecord] | None = None) -> list[JobRecord]:
    """Parse ``build_snapshot``'s output into records: no exit status, end time nor dependency
    (``lookup`` gives those).

    squeue prints a job name raw: the name is the last field, so a ``|`` in it stays in it, and
    a line that does not start a record (a job id, then the fields) continues the previous
    job's name after a newline. ``reuse`` maps a job's text to its record: a job whose text the
    previous snapshot held is not parsed again (most of a queue does not change between two
    cycles); it is left holding this output's jobs.
    """
    lines = stdout.split("\n")
    if "|".join(field.strip() for field in lines[0].split("|")) != SNAPSHOT_HEADER:
        raise SchedulerError(f"squeue line 1: expected the header {SNAPSHOT_HEADER!r}, "
                             f"got {lines[0][:120]!r}")
    if lines[-1] == "":
        lines.pop()                                  # the newline ending the last line
    # one text per job: a record's line and the lines that continue its name
    texts: list[str] = []
    last = _SNAPSHOT_FIELDS - 1
    for number in range(1, len(lines)):
        line = lines[number]
        head = line.split("|", 4)                    # the job id and the state suffice
        if len(head) == 5 and head[0].isdigit() and head[3].isupper() \
                and line.count("|") >= last:
            texts.append(line)
        elif texts:
            texts[-1] += "\n" + line
        else:
            raise SchedulerError(f"squeue line {number + 1}: expected a job's "
                                 f"{_SNAPSHOT_FIELDS} fields, got {line[:120]!r}")
    previous = reuse if reuse is not None else {}
    seen: dict[str, JobRecord] = {}
    records = []
    times: dict[str, float | None] = {"N/A": None, "Unknown": None, "None": None, "": None}
    states, held_reasons, make = STATES, _HELD_REASONS, JobRecord.from_fields
    pending, held, unknown = JobState.PENDING, JobState.HELD, JobState.UNKNOWN
    for text in texts:
        record = previous.get(text)
        if record is None:
            (job_id, partition, user, native, reason, nodes, submit, start, priority,
             name) = text.split("|", last)
            state = states.get(native, unknown)
            reason = reason.strip()
            if state is pending and reason in held_reasons:
                state = held
            submit_time = times[submit] if submit in times else _squeue_time(submit, times)
            start_time = times[start] if start in times else _squeue_time(start, times)
            record = make(  # JobRecord's fields in order; exit status, dependency, end unknown
                job_id, state, native, "" if reason == "None" else reason, name, partition,
                user, int(nodes) if nodes.isdigit() else 0,
                int(priority) if priority.isdigit() else None, None, None, "", submit_time,
                start_time, None)
        records.append(record)
        seen[text] = record
    if reuse is not None:
        reuse.clear()
        reuse.update(seen)
    return records


def _squeue_time(text: str, seen: dict[str, float | None]) -> float | None:
    """squeue's ``YYYY-MM-DDTHH:MM:SS`` (local time) as epoch seconds, memoised in ``seen``.

    The hour is converted once and the minutes and seconds added, unless the local offset
    changes within that hour (a DST change): then each time is converted whole.
    """
    import datetime

    value: float | None = None
    hour = text[:13]
    if len(text) == 19 and text[13] == ":" and text[16] == ":" and text[14:16].isdigit() \
            and text[17:19].isdigit() and text[14:16] < "60" and text[17:19] < "60":
        base = seen.get(hour, False)
        if base is False:
            try:
                base = datetime.datetime.fromisoformat(hour + ":00:00").timestamp()
                end = datetime.datetime.fromisoformat(hour + ":59:59").timestamp()
            except ValueError:
                base = end = None
            if base is not None and end - base != 3599:
                base = True                              # the offset changes in this hour
            seen[hour] = base
        if base is True:
            value = datetime.datetime.fromisoformat(text).timestamp()
        elif base is not None:
            value = base + int(text[14:16]) * 60 + int(text[17:19])
    seen[text] = value
    return value


def _record_from_json(job: dict) -> JobRecord:
    native = _first_state(job.get("job_state"))
    reason = str(job.get("state_reason") or "")
    state = STATES.get(native, JobState.UNKNOWN)
    if state is JobState.PENDING and reason in _HELD_REASONS:
        state = JobState.HELD
    priority = job_priority(job)
    exit_code, exit_signal = _exit_status(job.get("exit_code"))
    return JobRecord(
        job_id=str(job.get("job_id")), state=state, native_state=native,
        reason="" if reason == "None" else reason, name=str(job.get("name") or ""),
        queue=str(job.get("partition") or ""), user=str(job.get("user_name") or ""),
        nodes=int(_number(job.get("node_count")) or 0),
        priority=priority,
        exit_code=exit_code, exit_signal=exit_signal,
        dependency=str(job.get("dependency") or ""),
        submit_time=_time(job.get("submit_time")), start_time=_time(job.get("start_time")),
        end_time=_time(job.get("end_time")))


def job_priority(job: dict) -> int | None:
    """A ``squeue --json`` job's priority (22.05: a number; 23.02 and later: ``{"set",
    "infinite", "number"}``), None when unset."""
    priority = _number(job.get("priority"))
    return int(priority) if priority is not None else None


def submit_time_of(job: dict) -> float | None:
    """A ``squeue --json`` record's submission time (epoch seconds), on every release."""
    return _time(job.get("submit_time"))


def state_name(job: dict) -> str:
    """A ``squeue --json`` record's base state (``PENDING``), on 22.05 and 23.02+ alike."""
    return _first_state(job.get("job_state"))


def _first_state(value) -> str:
    # 22.05: "PENDING"; 23.02+: ["PENDING"] (flags may follow)
    if isinstance(value, list):
        return str(value[0]) if value else "UNKNOWN"
    return str(value or "UNKNOWN")


def _number(value):
    # 23.02+ wraps numbers as {"set": true, "infinite": false, "number": N}
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, (int, float)):
        return value
    return None


def _time(value) -> float | None:
    number = _number(value)
    return float(number) if number else None


def _exit_status(value) -> tuple[int | None, int | None]:
    """(exit code, signal) as sacct's ``ExitCode`` shows them (``code:signal``)."""
    # 23.02+: {"status": ..., "return_code": N, "signal": {"signal_id": S}}; 22.05: the raw
    # wait(2) status as an integer (a job killed by SIGTERM: 15, one that exited 3: 768)
    if isinstance(value, dict):
        signal = value.get("signal")
        signal_id = _number(signal.get("signal_id")) if isinstance(signal, dict) else None
        if "return_code" in value:
            return _number(value["return_code"]), signal_id or 0
        value = _number(value)
    if isinstance(value, int):
        return (value >> 8) & 0xFF, value & 0x7F
    return None, None


def build_history(job_ids: Sequence[str]) -> list[str]:
    return ["sacct", "--parsable2", "--noheader", "--allocations", "--duplicates",
            "--format=" + ",".join(HISTORY_FIELDS), "--jobs=" + ",".join(job_ids)]


def parse_history(stdout: str) -> list[JobRecord]:
    """Parse ``sacct --parsable2 --noheader --format=HISTORY_FIELDS``. Of the lines of one id
    the latest submitted wins (the last line of those): an id handed out again (slurmctld's
    state reset) has the earlier job's line too, and ``--duplicates`` shows a requeued job's
    earlier runs."""
    records: dict[str, JobRecord] = {}
    for number, line in enumerate(stdout.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) != len(HISTORY_FIELDS):
            raise SchedulerError(f"sacct line {number}: expected {len(HISTORY_FIELDS)} fields, "
                                 f"got {len(parts)}: {line!r}")
        row = dict(zip(HISTORY_FIELDS, parts))
        native = row["State"].split()[0] if row["State"] else "UNKNOWN"
        code, _, signal = row["ExitCode"].partition(":")
        record = JobRecord(
            job_id=row["JobID"], state=STATES.get(native, JobState.UNKNOWN), native_state=native,
            reason="" if row["Reason"] == "None" else row["Reason"], name=row["JobName"],
            queue=row["Partition"], user=row["User"],
            nodes=int(row["NNodes"]) if row["NNodes"].isdigit() else 0,
            exit_code=int(code) if code.isdigit() else None,
            exit_signal=int(signal) if signal.isdigit() else None,
            submit_time=_sacct_time(row["Submit"]), start_time=_sacct_time(row["Start"]),
            end_time=_sacct_time(row["End"]))
        earlier = records.get(record.job_id)
        if earlier is None or (record.submit_time or 0) >= (earlier.submit_time or 0):
            records[record.job_id] = record
    return list(records.values())


def _sacct_time(text: str) -> float | None:
    import datetime

    if not text or text in ("Unknown", "None"):
        return None
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def build_cancel(job_ids: Sequence[str]) -> list[str]:
    return ["scancel", *job_ids]


def build_scripts_query() -> list[str] | None:
    """Every queued job with the path of its batch script (``%o``), all users'."""
    return ["squeue", "--noheader", "--all", "--format=%i|%o"]


def parse_scripts_query(stdout: str) -> list[tuple[str, str]]:
    found = []
    for line in stdout.splitlines():
        job_id, sep, script = line.strip().partition("|")
        if sep and job_id.isdigit():
            found.append((job_id, script))
    return found


def build_annotate(job_ids: Sequence[str], comment: str) -> list[str] | None:
    """Set the jobs' comment (one ``scontrol update`` for a list of jobs). ``sacct`` keeps it
    when slurm.conf has ``AccountingStoreFlags=job_comment``. scontrol takes the value as one
    argument (no shell), so quotes and blanks in it are data."""
    return ["scontrol", "update", f"JobId={','.join(job_ids)}", f"Comment={comment}"]


def build_hold(job_ids: Sequence[str]) -> list[str]:
    return ["scontrol", "hold", ",".join(job_ids)]


def build_release(job_ids: Sequence[str]) -> list[str]:
    return ["scontrol", "release", ",".join(job_ids)]


# -- start estimates (just-in-time stage-in) ---------------------------------------------------
def build_start_estimate(job_ids: Sequence[str]) -> list[str]:
    """The backfill scheduler's expected start of pending jobs (``N/A`` when it has none, as
    for a job waiting on a dependency)."""
    return ["squeue", "--start", "--noheader", "--jobs=" + ",".join(job_ids), "-o", "%i|%S"]


def parse_start_estimate(stdout: str) -> dict[str, float | None]:
    """``squeue --start -o %i|%S`` lines: job id -> expected start (epoch), None if unknown."""
    found: dict[str, float | None] = {}
    seen: dict[str, float | None] = {"N/A": None, "Unknown": None, "None": None, "": None}
    for number, line in enumerate(stdout.splitlines(), 1):
        if not line.strip():
            continue
        job_id, sep, start = line.strip().partition("|")
        if not sep or not job_id.isdigit():
            raise SchedulerError(f"squeue --start line {number}: expected 'JOBID|START', "
                                 f"got {line[:120]!r}")
        found[job_id] = seen[start] if start in seen else _squeue_time(start, seen)
    return found


#: what ``sbatch --test-only`` needs to ask for the same resources as a queued job
REQUEST_FORMAT = "%i|%P|%D|%C|%l|%a|%q|%h"


def build_queued_job(job_id: str) -> list[str]:
    """One queued job's whole record (``scontrol show job`` cuts multi-line fields)."""
    return ["squeue", "--json", "-j", job_id]


def parse_queued_job(stdout: str, job_id: str) -> dict | None:
    """The record of ``job_id`` in ``squeue --json`` output, None when the queue has no such job."""
    try:
        jobs = json.loads(stdout).get("jobs", [])
    except (json.JSONDecodeError, AttributeError) as err:
        raise SchedulerError(f"squeue --json: unreadable output: {err}") from err
    return next((job for job in jobs if str(job.get("job_id")) == job_id), None)


def queued_job(job_id: str, runner, timeout: float) -> dict | None:
    """One job's ``squeue --json -j`` record through ``runner`` (the one runner of external
    commands): None when Slurm does not know the job (never did, or finished and purged);
    SchedulerError for any other failure of squeue, with its own words."""
    result = runner.run(build_queued_job(job_id), timeout=timeout, mutating=False, check=False)
    if result.returncode != 0:
        message = (result.stderr or result.stdout or "").strip()
        if is_unknown_job_error(message):
            return None
        raise SchedulerError(f"squeue --json -j {job_id}: {message or f'exit {result.returncode}'}")
    return parse_queued_job(result.stdout, job_id)


def build_request(job_id: str) -> list[str]:
    return ["squeue", "--noheader", f"--jobs={job_id}", "-o", REQUEST_FORMAT]


def parse_request(stdout: str) -> dict[str, str] | None:
    """A queued job's partition, nodes, CPUs, time limit, account, QOS and whether it shares
    its nodes (None: not queued).

    squeue prints fields raw: a partition name holds no ``|``, and the job id comes first."""
    for line in stdout.splitlines():
        fields = line.strip().split("|")
        if len(fields) == 8 and fields[0].isdigit():
            return dict(zip(("job_id", "queue", "nodes", "cpus", "time_limit", "account", "qos",
                             "oversubscribe"), fields))
    return None


def build_will_run(request: dict[str, str]) -> list[str]:
    """``sbatch --test-only`` for the resources of ``request``: Slurm's will-run estimate of
    when a job asking for them would start, for a job whose own estimate the backfill
    scheduler does not make (one waiting on its stage-in)."""
    if not re.fullmatch(r"[A-Za-z0-9._,-]+", request["queue"]):
        return []
    argv = ["sbatch", "--test-only", f"--partition={request['queue']}"]
    if request["nodes"].isdigit():
        argv.append(f"--nodes={request['nodes']}")
    if request["cpus"].isdigit():
        argv.append(f"--ntasks={request['cpus']}")
    if slurm_time_seconds(request["time_limit"]) is not None:
        argv.append(f"--time={request['time_limit']}")
    if request["oversubscribe"] == "NO":
        argv.append("--exclusive")  # squeue's %h: NO for a job that shares no node
    # not the job's account or QOS: the asker (root's chain service) may not be in them, and
    # what they limit is the job's own turn, which no will-run answer gives anyway
    return argv + ["--output=/dev/null", "--wrap", "true"]


_WILL_RUN_RE = re.compile(r"to start at (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)")


def parse_will_run(text: str) -> float | None:
    """``sbatch: Job 12 to start at 2026-11-24T19:01:05 using 1 processors on nodes ...``."""
    match = _WILL_RUN_RE.search(text)
    return _squeue_time(match.group(1), {}) if match else None


# -- dependencies --------------------------------------------------------------------------------
@dataclass(frozen=True)
class DependencyEntry:
    """One job a dependency names, as ``squeue --json`` (``dependency``) and ``scontrol show
    job`` (``Dependency=``) print it: ``afterok:979(failed)``."""

    kind: str
    #: the job's number ("" for ``singleton``); ``text`` keeps an array's ``_*``, a ``+time``
    job_id: str
    #: the entry as ``scontrol update Dependency=`` takes it (no state word)
    text: str
    #: Slurm's word for where it stands (``unfulfilled``, ``failed``...), "" when none shown
    state: str = ""


_DEPENDENCY_STATE_RE = re.compile(r"^(.*)\(([^()]*)\)$")
_DEPENDENCY_ID_RE = re.compile(r"^([0-9]+)")


def parse_dependency(text: str) -> tuple[list[DependencyEntry], str]:
    """A job's dependency as Slurm prints it: its entries, one per job named, and the
    separator (``,``: all of them; ``?``: any of them; Slurm takes one per dependency)."""
    text = (text or "").strip()
    if text in ("", "(null)"):
        return [], ","
    separator = "?" if "?" in text else ","
    entries = []
    for part in filter(None, (p.strip() for p in text.split(separator))):
        state = ""
        match = _DEPENDENCY_STATE_RE.match(part)
        if match:
            part, state = match.group(1), match.group(2)
        kind, _, named = part.partition(":")
        if not named:
            entries.append(DependencyEntry(kind, "", kind, state))
            continue
        for token in named.split(":"):
            number = _DEPENDENCY_ID_RE.match(token)
            entries.append(DependencyEntry(kind, number.group(1) if number else "",
                                           f"{kind}:{token}", state))
    return entries, separator


def format_dependency(entries: Sequence[DependencyEntry], separator: str = ",") -> str:
    """The value of ``scontrol update JobId=N Dependency=...``, which replaces the job's whole
    list ("" clears it)."""
    return separator.join(entry.text for entry in entries)


def build_set_begin(job_id: str, when: float | None) -> list[str]:
    """Hold a pending job back until ``when`` (epoch), or let it start now (``None``)."""
    import datetime

    value = "now" if when is None else \
        datetime.datetime.fromtimestamp(round(when)).strftime("%Y-%m-%dT%H:%M:%S")
    return ["scontrol", "update", f"JobId={job_id}", f"StartTime={value}"]


def build_find_by_name(name: str) -> list[list[str]]:
    """The queries that find every job of any user named ``name``: the controller's queue
    (which knows a job the moment it is submitted; finished ones for MinJobAge) and
    accounting (the last week; it learns of a job a moment later)."""
    return [["squeue", "--noheader", "--all", "--states=all", f"--name={name}", "--format=%i"],
            ["sacct", "--noheader", "--parsable2", "--allocations", "--allusers",
             "--starttime=now-7days", f"--name={name}", "--format=JobID"]]


def parse_find_by_name(stdout: str) -> list[str]:
    return [line.strip() for line in stdout.splitlines() if line.strip().isdigit()]


def build_nodes(queue: str | None = None) -> list[str]:
    """The nodes of ``queue`` (the batch partition: the system S of the replication window,
    without the data-transfer nodes), or of every partition."""
    return ["sinfo", "--noheader", "--Node", "--format=%N",
            *([f"--partition={queue}"] if queue else [])]


def parse_nodes(stdout: str) -> int:
    """Distinct node names (sinfo --Node lists a node once per partition)."""
    return len({line.strip() for line in stdout.splitlines() if line.strip()})


def order_by_priority(records: list[JobRecord]) -> list[JobRecord]:
    """Running jobs first, then pending ones by descending priority, then by submit time."""
    queued = _QUEUED_STATES

    def key(record: JobRecord):
        return (record.state in queued, -(record.priority or 0), record.submit_time or 0,
                int(record.job_id) if record.job_id.isdigit() else 0)
    return sorted(records, key=key)


_QUEUED_STATES = frozenset(state for state in JobState if state.is_queued)


def is_unknown_job_error(message: str) -> bool:
    return "Invalid job id" in message
