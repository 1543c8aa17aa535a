"""A site's own job history: Slurm ``sacct --parsable2`` output and PBS/Torque accounting logs,
and the detection of a job trace's format from its first lines.

Each reader turns text into :class:`AccountingJob` records (Unix seconds) with the same skipped-
line accounting as the SWF reader (:class:`~scratchkeeper.sim.traces.ReadReport`): a line that
is not a finished job is counted under its reason (``job step``, ``never started``, ...), a
corrupt one raises :class:`TraceError` naming file and line with ``strict``.

Slurm, ``TZ=UTC sacct -a -X -P -S START -E END -o JobID,Submit,Start,End,Elapsed,...`` (:data:`SACCT_COMMAND`)
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
    ended (``End`` ``Unknown``) are skipped and counted. The components of a heterogeneous job
    (``123+0``, ``123+1``) are one job ``123``: the processors summed, from the first
    submission and start to the last end, the longest limit (unknown if one is).
PBS/Torque, ``server_priv/accounting/YYYYMMDD``
    ``MM/DD/YYYY HH:MM:SS;E;JOBID;key=value ...``: only the ``E`` (exit) records are jobs;
    ``Q``, ``S``, ``D``, ``A``... records are counted as ``not an exit record``. Times are the
    record's ``qtime`` (else ``ctime``), ``start`` and ``end`` (Unix seconds, as Torque writes
    them); the limit is ``Resource_List.walltime`` (``HH:MM:SS`` or seconds); processors are
    ``total_execution_slots``, else counted from ``exec_host`` (``n1/0-3+n2/0`` is 5), else
    ``Resource_List.nodes`` with ``ppn`` (``2:ppn=8`` is 16, ``2:ppn=8+n7:ppn=4`` 20), else
    ``Resource_List.ncpus``, else ``Resource_List.nodes`` as a count, else
    ``Resource_List.nodect``. An exit record without a ``start``
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

#: The history the Slurm reader expects, every job of every user (``-a``), one line a job
#: (``-X``: no steps), dates in UTC (``TZ=UTC``: no daylight-saving shift).
SACCT_COMMAND = ("TZ=UTC sacct -a -X -P -S START -E END "
                 "-o JobID,Submit,Start,End,Elapsed,Timelimit,NNodes,NCPUS,State")
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
        raise TraceError(f"sacct header lacks field(s) {', '.join(missing)} (run "
                         f"{SACCT_COMMAND})", path=name, line=1)
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
    jobs = merge_heterogeneous(jobs, report)
    jobs.sort(key=lambda j: j.submit_time)
    return jobs, report


#: a heterogeneous job's component: ``123+0`` (an array task's component ``123_4+1`` too)
_HET_COMPONENT = re.compile(r"(.+)\+(\d+)")


def merge_heterogeneous(jobs: list[AccountingJob], report: ReadReport) -> list[AccountingJob]:
    """Each heterogeneous job's components (``123+0``, ``123+1``, one sacct line each) as one
    job ``123``: Slurm starts them together, so the scheduler model places them together.
    Processors are summed; submit and start are the earliest, end the latest (run time end -
    start); the limit is the longest, unknown when one component's is. The count of merged
    lines goes to the report's notes."""
    groups: dict[str, list[AccountingJob]] = {}
    out: list[AccountingJob | str] = []
    for job in jobs:
        match = _HET_COMPONENT.fullmatch(job.job_id)
        if match is None:
            out.append(job)
            continue
        base = match.group(1)
        if base not in groups:
            groups[base] = []
            out.append(base)        # the merged job takes its first component's place
        groups[base].append(job)
    if not groups:
        return jobs
    merged: list[AccountingJob] = []
    for item in out:
        if isinstance(item, AccountingJob):
            merged.append(item)
            continue
        parts = groups[item]
        start, end = min(p.start_time for p in parts), max(p.end_time for p in parts)
        limits = [p.requested_time for p in parts]
        merged.append(AccountingJob(item, min(p.submit_time for p in parts), start, end,
                                    end - start, sum(p.procs for p in parts),
                                    -1.0 if min(limits) < 0 else max(limits)))
    components = sum(len(parts) for parts in groups.values())
    report.records -= components - len(groups)
    report.notes.append(f"{components:,} heterogeneous job component(s) (JOBID+N) read as "
                        f"{len(groups):,} job(s)")
    return merged


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


def nodes_spec_processors(text: str) -> int:
    """Processors of a Torque ``Resource_List.nodes`` request: ``2:ppn=8`` is 16,
    ``n1:ppn=4+2:ppn=2`` 8 (a host name is one node), ``3`` 3, ``2:gpus=1`` 2."""
    total = 0
    for part in text.split("+"):
        first, *properties = part.split(":")
        if first.isascii() and first.isdigit():
            count = int(first)
        elif first and first[0].isalpha():
            count = 1                       # a named host
        else:
            raise ValueError(f"Resource_List.nodes {text[:40]!r} is not N[:ppn=M][+...]")
        per_node = 1
        for prop in properties:
            key, equals, value = prop.partition("=")
            if key == "ppn":
                if not (equals and value.isascii() and value.isdigit() and int(value) > 0):
                    raise ValueError(f"Resource_List.nodes {text[:40]!r}: ppn={value!r} is not "
                                     "a count >= 1")
                per_node = int(value)
        total += count * per_node
    if not 0 < total <= VALUE_LIMIT:
        raise ValueError(f"Resource_List.nodes {text[:40]!r} asks for no processor")
    return total


def _pbs_procs(fields: dict[str, str]) -> int:
    """Processors of an exit record, from the most direct field the record has: what ran
    (slots, ``exec_host``), else what was asked (``nodes=N:ppn=M``, ``ncpus``, a node count)."""
    if fields.get("total_execution_slots"):
        return _pbs_count(fields, "total_execution_slots")
    if fields.get("exec_host"):
        return exec_host_slots(fields["exec_host"])
    nodes = fields.get("Resource_List.nodes", "")
    if "ppn=" in nodes:
        return nodes_spec_processors(nodes)
    if fields.get("Resource_List.ncpus"):
        return _pbs_count(fields, "Resource_List.ncpus")
    if nodes:
        return nodes_spec_processors(nodes)
    if fields.get("Resource_List.nodect"):
        return _pbs_count(fields, "Resource_List.nodect")
    raise ValueError("no total_execution_slots, exec_host, Resource_List.nodes, "
                     "Resource_List.ncpus or Resource_List.nodect: the job's processors are "
                     "unknown")


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
# The machine's size, from its own configuration saved beside the history

#: what to save beside a history, per format: (the file's suffix, the command that writes it)
MACHINE_FILES = {
    "sacct": (".sinfo", "sinfo -N -h -o '%N %c'"),
    "pbs": (".pbsnodes", "pbsnodes -a"),
}
#: longest machine description read, in bytes (a node is a line or a few dozen)
MACHINE_FILE_LIMIT = 64 << 20


@dataclass(frozen=True)
class MachineSize:
    """A machine's nodes and processors, and the file they were read from."""

    nodes: int
    processors: int
    source: str


def machine_file(trace: str, kind: str) -> str | None:
    """The name of the machine description of a ``kind`` history (``TRACE.sinfo`` for sacct,
    ``TRACE.pbsnodes`` for PBS), None for a format that has none."""
    suffix = MACHINE_FILES.get(kind)
    return trace + suffix[0] if suffix else None


def read_machine_size(trace: str, kind: str) -> MachineSize | None:
    """The machine of a site history from its configuration saved beside it, if it is there.

    sacct: ``TRACE.sinfo``, the output of ``sinfo -N -h -o '%N %c'`` (node name, CPUs; a node
    listed in several partitions counts once). PBS/Torque: ``TRACE.pbsnodes``, the output of
    ``pbsnodes -a`` (blocks of ``name`` then ``attribute = value`` lines; Torque's ``np`` or PBS
    Pro's ``resources_available.ncpus`` is the node's processors). A file that says no node
    is a TraceError naming it."""
    path = machine_file(trace, kind)
    if path is None or not os.path.exists(path):
        return None
    with open_text(path) as stream:
        lines = list(read_lines(stream, path))
    cpus = _sinfo_cpus(lines, path) if kind == "sacct" else _pbsnodes_cpus(lines, path)
    if not cpus:
        raise TraceError(f"no node in the machine description (expected the output of "
                         f"{MACHINE_FILES[kind][1]})", path=path)
    return MachineSize(len(cpus), sum(cpus.values()), path)


def _sinfo_cpus(lines: list[str], path: str) -> dict[str, int]:
    cpus: dict[str, int] = {}
    for number, line in enumerate(lines, 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2 or not (parts[1].isascii() and parts[1].isdigit()
                                   and 0 < int(parts[1]) <= NODE_CPU_LIMIT):
            raise TraceError("not a line of sinfo -N -h -o '%N %c' (a node name and its CPUs)",
                             path=path, line=number)
        cpus[parts[0]] = int(parts[1])
    return cpus


def _pbsnodes_cpus(lines: list[str], path: str) -> dict[str, int]:
    cpus: dict[str, int] = {}
    node = None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if not line[0].isspace():
            node = line.strip()
            cpus.setdefault(node, 0)
            continue
        key, equals, value = line.strip().partition("=")
        if not equals or key.strip() not in ("np", "resources_available.ncpus"):
            continue
        value = value.strip()
        if node is None or not (value.isascii() and value.isdigit()
                                and 0 < int(value) <= NODE_CPU_LIMIT):
            raise TraceError(f"not pbsnodes -a output: {key.strip()} {value!r} outside a node "
                             "or not a count >= 1", path=path, line=number)
        cpus[node] = int(value)
    empty = [name for name, count in cpus.items() if not count]
    if empty:
        raise TraceError(f"node {empty[0]} has no np or resources_available.ncpus: not pbsnodes "
                         "-a output", path=path)
    return cpus


#: most processors of one node a machine description may give
NODE_CPU_LIMIT = 1 << 20


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
