"""A site's own job history: Slurm ``sacct --parsable2`` output and PBS/Torque accounting logs,
and the detection of a job trace's format from its first lines.

Each reader turns text into :class:`AccountingJob` records (Unix seconds) with the same skipped-
line accounting as the SWF reader (:class:`~scratchkeeper.sim.traces.ReadReport`): a line that
is not a finished job is counted under its reason (``job step``, ``never started``, ...), a
corrupt one raises :class:`TraceError` naming file and line with ``strict``.

Slurm, ``sacct -a -X -P -o JobID,Submit,Start,End,Elapsed,Timelimit,NNodes,NCPUS,State``
    A header line names the fields, ``|`` between them (``--parsable2``; ``--parsable`` adds a
    trailing ``|``, also read). Needed: ``JobID``, ``Submit``, ``Start``, ``End`` and one of
    ``NCPUS``/``AllocCPUS`` (processors) or ``NNodes`` (nodes, for ``--procs-per-node 1``);
    ``Elapsed`` (else end - start), ``Timelimit`` and ``State`` are optional. Dates are sacct's
    default ISO form (``2026-11-28T05:07:27``, no zone): they are read as UTC, so run sacct with
    ``TZ=UTC`` or a change of daylight saving time inside the history shifts the jobs across it
    by an hour. A time limit is ``[D-]HH:MM:SS`` (``1-00:00:00``, ``365-00:00:00``);
    ``UNLIMITED``, ``Partition_Limit`` and ``INVALID`` are an unknown limit (the job's run time
    is its limit). Job steps (``123.batch``, ``123.0``, present without ``-X``) and jobs that
    never started (``Start`` ``None``/``Unknown``, e.g. cancelled while pending) or have not
    ended (``End`` ``Unknown``) are skipped and counted.
PBS/Torque, ``server_priv/accounting/YYYYMMDD``
    ``MM/DD/YYYY HH:MM:SS;E;JOBID;key=value ...``: only the ``E`` (exit) records are jobs;
    ``Q``, ``S``, ``D``, ``A``... records are counted as ``not an exit record``. Times are the
    record's ``qtime`` (else ``ctime``), ``start`` and ``end`` (Unix seconds, as Torque writes
    them); the limit is ``Resource_List.walltime`` (``HH:MM:SS`` or seconds); processors are
    ``total_execution_slots``, else counted from ``exec_host`` (``n1/0-3+n2/0`` is 5), else
    ``Resource_List.ncpus``, else ``Resource_List.nodect``. An exit record without a ``start``
    (a job deleted while queued) is ``never started``. A ``YYYYMMDD:`` prefix, as ``grep``
    over the daily files writes it, is allowed.

Records come back sorted by submit time (an accounting log is in end order).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from ..config import slurm_time_seconds
from ..errors import TraceError
from .traces import VALUE_LIMIT, ReadReport, fail_or_skip, open_text, read_lines

#: Formats :func:`sniff_format` tells apart.
SNIFFED = ("swf", "sacct", "pbs", "site-csv", "lanl-jobs")
#: Lines :func:`sniff_format` looks at before giving up.
SNIFF_LINES = 64


@dataclass(slots=True)
class AccountingJob:
    """A finished job of a site's accounting: Unix seconds, ``-1`` for an unknown limit."""

    job_id: str
    submit_time: float
    start_time: float
    end_time: float
    run_time: float
    procs: int
    requested_time: float = -1

    @property
    def wait_time(self) -> float:
        return self.start_time - self.submit_time


# ---------------------------------------------------------------------------------------------
# Slurm sacct --parsable2

_SACCT_NOT_STARTED = {"", "none", "unknown"}
_SACCT_NO_LIMIT = {"", "unlimited", "partition_limit", "invalid", "none"}
_SACCT_PROCS = ("ncpus", "alloccpus", "nnodes")


def _sacct_time(text: str, what: str) -> float:
    try:
        moment = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        raise ValueError(f"{what} {text!r} is not a date like 2024-01-31T23:59:00") from None
    return moment.replace(tzinfo=UTC).timestamp()


def _slurm_duration(text: str, what: str) -> float:
    seconds = slurm_time_seconds(text)
    if seconds is None:
        raise ValueError(f"{what} {text!r} is not [D-]HH:MM:SS")
    return float(seconds)


def _sacct_columns(header: list[str], name: str) -> dict[str, int]:
    columns = {field.strip().lower(): index for index, field in enumerate(header)}
    missing = [f for f in ("JobID", "Submit", "Start", "End") if f.lower() not in columns]
    if not any(p in columns for p in _SACCT_PROCS):
        missing.append("NCPUS or NNodes")
    if missing:
        raise TraceError(f"sacct header lacks field(s) {', '.join(missing)} (run sacct -P -o "
                         "JobID,Submit,Start,End,Elapsed,Timelimit,NNodes,NCPUS,State)",
                         path=name, line=1)
    return columns


def _sacct_job(values: list[str], col: dict[str, int]) -> AccountingJob | str:
    """The job of a sacct line, or the reason to skip it (ValueError for a corrupt value)."""
    job_id = values[col["jobid"]].strip()
    if "." in job_id:
        return "job step"
    start_text = values[col["start"]].strip()
    end_text = values[col["end"]].strip()
    if start_text.lower() in _SACCT_NOT_STARTED:
        return "never started"
    if end_text.lower() in _SACCT_NOT_STARTED:
        return "not ended"
    submit = _sacct_time(values[col["submit"]].strip(), "Submit")
    start = _sacct_time(start_text, "Start")
    end = _sacct_time(end_text, "End")
    run_time = end - start
    if "elapsed" in col and values[col["elapsed"]].strip():
        run_time = _slurm_duration(values[col["elapsed"]].strip(), "Elapsed")
    limit = -1.0
    if "timelimit" in col and values[col["timelimit"]].strip().lower() not in _SACCT_NO_LIMIT:
        limit = _slurm_duration(values[col["timelimit"]].strip(), "Timelimit")
    procs_field = next(p for p in _SACCT_PROCS if p in col)
    procs_text = values[col[procs_field]].strip()
    if not (procs_text.isascii() and procs_text.isdigit() and 0 < int(procs_text) <= VALUE_LIMIT):
        raise ValueError(f"{procs_field.upper()} {procs_text!r} is not a count >= 1")
    return AccountingJob(job_id, submit, start, end, run_time, int(procs_text), limit)


def read_sacct(path: str | os.PathLike, *, strict: bool = True,
               progress: Callable[[int, int], None] | None = None
               ) -> tuple[list[AccountingJob], ReadReport]:
    """Read ``sacct --parsable2`` (or ``--parsable``) output with its header line."""
    name = os.fspath(path)
    report = ReadReport(name)
    jobs: list[AccountingJob] = []
    col: dict[str, int] | None = None
    width = 0
    with open_text(name) as stream:
        for number, line in enumerate(read_lines(stream, name, progress), 1):
            text = line.rstrip("\r\n")
            if not text.strip():
                continue
            values = text.split("|")
            if text.endswith("|"):
                values.pop()        # --parsable ends every line with a separator
            if col is None:
                col = _sacct_columns(values, name)
                width = len(values)
                continue
            if len(values) != width:
                fail_or_skip(report, strict, f"sacct line has {len(values)} fields, the header "
                             f"{width}", name, number, "field count")
                continue
            try:
                job = _sacct_job(values, col)
            except ValueError as err:
                fail_or_skip(report, strict, f"bad sacct line: {err}", name, number,
                             "bad value")
                continue
            if isinstance(job, str):
                report.skipped[job] += 1
                continue
            if not job.submit_time <= job.start_time <= job.end_time:
                fail_or_skip(report, strict, f"job {job.job_id}: times out of order (submit, "
                             "start, end)", name, number, "times out of order")
                continue
            jobs.append(job)
            report.records += 1
    if col is None:
        raise TraceError("empty sacct output (no header line)", path=name, line=1)
    jobs.sort(key=lambda j: j.submit_time)
    return jobs, report


# ---------------------------------------------------------------------------------------------
# PBS/Torque accounting log

#: ``[YYYYMMDD:]MM/DD/YYYY HH:MM:SS;TYPE;JOBID;MESSAGE``
PBS_RECORD = re.compile(r"(?:\d{8}:)?(\d\d/\d\d/\d{4} \d\d:\d\d:\d\d);([A-Za-z]);([^;]*);(.*)")


def _pbs_epoch(fields: dict[str, str], key: str) -> float:
    text = fields[key]
    if not (text.isascii() and text.isdigit() and int(text) <= VALUE_LIMIT):
        raise ValueError(f"{key} {text!r} is not Unix seconds")
    return float(text)


def _pbs_duration(text: str, key: str) -> float:
    """``HH:MM:SS`` (hours past 24 allowed), ``MM:SS`` or seconds (Torque 5.1.2 and later)."""
    parts = text.split(":")
    if len(parts) <= 3 and all(p.isascii() and p.isdigit() and len(p) <= 12 for p in parts):
        seconds = 0
        for part in parts:
            seconds = seconds * 60 + int(part)
        return float(seconds)
    raise ValueError(f"{key} {text!r} is not HH:MM:SS or seconds")


def exec_host_slots(text: str) -> int:
    """Processors named by an ``exec_host``: ``n1/0+n1/1`` is 2, ``b391/0-3`` 4, ``b1/0-1,5`` 3."""
    slots = 0
    for host in text.split("+"):
        _, slash, cpus = host.partition("/")
        if not slash:
            slots += 1
            continue
        for piece in cpus.split(","):
            first, dash, last = piece.partition("-")
            if not (first.isdigit() and (not dash or last.isdigit())):
                raise ValueError(f"exec_host {text[:40]!r} is not host/cpu[+host/cpu...]")
            slots += int(last) - int(first) + 1 if dash else 1
    return slots


def _pbs_count(fields: dict[str, str], key: str) -> int:
    text = fields[key]
    if not (text.isascii() and text.isdigit() and 0 < int(text) <= VALUE_LIMIT):
        raise ValueError(f"{key} {text!r} is not a count >= 1")
    return int(text)


def _pbs_procs(fields: dict[str, str]) -> int:
    """Processors of an exit record, from the most direct field the record has."""
    if fields.get("total_execution_slots"):
        return _pbs_count(fields, "total_execution_slots")
    if fields.get("exec_host"):
        return exec_host_slots(fields["exec_host"])
    for key in ("Resource_List.ncpus", "Resource_List.nodect"):
        if fields.get(key):
            return _pbs_count(fields, key)
    raise ValueError("no total_execution_slots, exec_host, Resource_List.ncpus or "
                     "Resource_List.nodect: the job's processors are unknown")


def _pbs_job(job_id: str, message: str) -> AccountingJob | str:
    """The job of an exit record's ``key=value`` list, or the reason to skip it."""
    fields = dict(item.partition("=")[::2] for item in message.split())
    if not fields.get("start") or fields["start"] == "0":
        return "never started"
    missing = [] if fields.get("end") else ["end"]
    if not (fields.get("qtime") or fields.get("ctime")):
        missing.append("qtime or ctime")
    if missing:
        raise ValueError(f"exit record lacks {', '.join(missing)}")
    submit = _pbs_epoch(fields, "qtime" if fields.get("qtime") else "ctime")
    start, end = _pbs_epoch(fields, "start"), _pbs_epoch(fields, "end")
    limit = -1.0
    if fields.get("Resource_List.walltime"):
        limit = _pbs_duration(fields["Resource_List.walltime"], "Resource_List.walltime")
    return AccountingJob(job_id, submit, start, end, end - start, _pbs_procs(fields), limit)


def read_pbs_accounting(path: str | os.PathLike, *, strict: bool = True,
                        progress: Callable[[int, int], None] | None = None
                        ) -> tuple[list[AccountingJob], ReadReport]:
    """Read a PBS/Torque accounting log (one or several daily files concatenated)."""
    name = os.fspath(path)
    report = ReadReport(name)
    jobs: list[AccountingJob] = []
    with open_text(name) as stream:
        for number, line in enumerate(read_lines(stream, name, progress), 1):
            text = line.strip()
            if not text:
                continue
            record = PBS_RECORD.fullmatch(text)
            if record is None:
                fail_or_skip(report, strict, "not a PBS accounting record (MM/DD/YYYY "
                             "HH:MM:SS;TYPE;JOBID;key=value ...)", name, number, "not a record")
                continue
            if record.group(2) != "E":
                report.skipped["not an exit record"] += 1
                continue
            try:
                job = _pbs_job(record.group(3), record.group(4))
            except ValueError as err:
                fail_or_skip(report, strict, f"bad exit record of {record.group(3)}: {err}",
                             name, number, "bad value")
                continue
            if isinstance(job, str):
                report.skipped[job] += 1
                continue
            if not job.submit_time <= job.start_time <= job.end_time:
                fail_or_skip(report, strict, f"job {job.job_id}: times out of order (qtime "
                             f"{job.submit_time:.0f}, start {job.start_time:.0f}, end "
                             f"{job.end_time:.0f})", name, number, "times out of order")
                continue
            jobs.append(job)
            report.records += 1
    jobs.sort(key=lambda j: j.submit_time)
    return jobs, report


# ---------------------------------------------------------------------------------------------
# Format by content

def _line_format(text: str, first: bool) -> str | None:
    """The format one non-empty line shows, if it shows one."""
    if text.startswith(";"):
        return "swf"                                    # an SWF header comment
    if PBS_RECORD.fullmatch(text):
        return "pbs"
    if first and "|" in text and "jobid" in (f.strip().lower() for f in text.split("|")):
        return "sacct"
    if first and {"job_id", "submit_time"} <= {f.strip() for f in text.split(",")}:
        return "site-csv"
    if first and "Prob Started" in text:
        raise ValueError("a LANL failure CSV, not a job trace: give it with --failures")
    head, slash, _ = text.partition("/")
    parts = head.split()
    if slash and len(parts) == 12 and all(p.lstrip("-").isdigit() for p in parts[:7]):
        return "lanl-jobs"
    if not slash and len(text.split()) == 18:
        try:
            [float(p) for p in text.split()]
            return "swf"
        except ValueError:
            return None
    return None


def sniff_format(path: str | os.PathLike) -> tuple[str | None, str]:
    """The format of a job trace from its first lines, and why (for messages).

    ``(None, why)`` when the first :data:`SNIFF_LINES` lines show none; a LANL failure CSV
    given as a job trace is a TraceError."""
    name = os.fspath(path)
    first = True
    with open_text(name) as stream:
        for number, line in enumerate(read_lines(stream, name), 1):
            if number > SNIFF_LINES:
                break
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            try:
                kind = _line_format(text, first)
            except ValueError as err:
                raise TraceError(str(err), path=name, line=number) from None
            first = False
            if kind is not None:
                return kind, f"line {number} reads as {kind}"
    return None, f"its first {SNIFF_LINES} lines match no format"
