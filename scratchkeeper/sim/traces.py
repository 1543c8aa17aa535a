"""Readers of job and failure traces, each turning text into plain dataclasses.

Four formats here (a site's Slurm and PBS/Torque accounting are read by
:mod:`scratchkeeper.sim.accounting`): the Standard Workload Format of the Parallel Workloads
Archive (18 fields and the ``; Key: value`` header), the LANL failure CSV (LA-UR-05-7318
columns), the LANL system-20 job log (LA-UR-06-0803, ``job_end_time user_id nprocs submit_time
... / node ranges /``) and a simple CSV for a site's own job log. A corrupt line raises
:class:`TraceError` naming file and line, or, with ``strict=False``, is skipped and counted in
the :class:`ReadReport` (``nan``, ``inf`` and numbers beyond 2**53 are corrupt values). A
compressed trace that is truncated or corrupt, a device or a FIFO, or a line longer than
:data:`MAX_LINE` (a decompression bomb: 45 KB of ``.xz`` that is one 600 MB line) is one
:class:`TraceError` naming the file, whatever ``strict`` says.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import lzma
import os
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import cast

from ..errors import TraceError
from ..inputfiles import open_regular

#: SWF field names in file order (Feitelson's definition, version 2.2).
SWF_FIELDS = (
    "job_id", "submit_time", "wait_time", "run_time", "allocated_procs", "average_cpu_time",
    "used_memory", "requested_procs", "requested_time", "requested_memory", "status", "user_id",
    "group_id", "executable", "queue", "partition", "preceding_job", "think_time",
)
# Fields 6 (average CPU time) and 7 (used memory) may be fractional in real traces (HPC2N).
_SWF_FLOAT_FIELDS = {5, 6}
#: Largest magnitude of a trace value: beyond it times in seconds are no longer exact doubles.
VALUE_LIMIT = 2 ** 53
#: Skipped lines quoted in a report (the rest are counted).
FIRST_ERRORS = 5
#: Longest line of a trace, in characters: a record of any of the formats is a few hundred
#: (a LANL job's node list a few thousand); a line is never held longer than this.
MAX_LINE = 1 << 20
#: Largest node number or node count of a failure record (and of a system id).
NODE_LIMIT = 2 ** 31 - 1


@dataclass(slots=True)
class SwfJob:
    """One SWF record; ``-1`` means unknown, as in the format. Memory fields are KB per processor."""

    job_id: int
    submit_time: int
    wait_time: int
    run_time: int
    allocated_procs: int
    average_cpu_time: float
    used_memory: float
    requested_procs: int
    requested_time: int
    requested_memory: int
    status: int
    user_id: int
    group_id: int
    executable: int
    queue: int
    partition: int
    preceding_job: int
    think_time: int


@dataclass
class SwfHeader:
    """The ``; Key: value`` header comments; repeated keys (``Queue``, ``Partition``) keep all values."""

    fields: dict[str, list[str]] = field(default_factory=dict)

    def get(self, key: str, default: str | None = None) -> str | None:
        values = self.fields.get(key)
        return values[0] if values else default

    def get_int(self, key: str) -> int | None:
        value = self.get(key)
        try:
            return int(value.split()[0]) if value else None
        except ValueError:
            return None

    def get_count(self, key: str) -> int | None:
        """A size of the machine (``MaxNodes``, ``MaxProcs``): None unless 1..2**31-1 (a
        header saying 0, -5 or 10**30 is treated as absent)."""
        value = self.get_int(key)
        return value if value is not None and 1 <= value < 2 ** 31 else None

    @property
    def max_nodes(self) -> int | None:
        return self.get_count("MaxNodes")

    @property
    def max_procs(self) -> int | None:
        return self.get_count("MaxProcs")

    @property
    def unix_start_time(self) -> int | None:
        return self.get_int("UnixStartTime")


@dataclass
class ReadReport:
    """What a reader kept and skipped, with the first skipped lines for the user to look at."""

    path: str
    records: int = 0
    skipped: Counter = field(default_factory=Counter)
    first_errors: list[str] = field(default_factory=list)
    #: what the reader did besides skipping (heterogeneous components merged), for the user
    notes: list[str] = field(default_factory=list)

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())

    def skip(self, err: TraceError, reason: str) -> None:
        self.skipped[reason] += 1
        if len(self.first_errors) < FIRST_ERRORS:
            self.first_errors.append(str(err))


@dataclass
class SwfTrace:
    header: SwfHeader
    jobs: list[SwfJob]
    report: ReadReport


class TraceText(io.TextIOWrapper):
    """A trace's text, uncompressed on the fly; :meth:`consumed` says how many bytes of the file
    itself have been read so far (of ``os.fstat`` size ``size``), for progress."""

    def __init__(self, binary, raw):
        super().__init__(binary, encoding="utf-8", errors="replace", newline="")
        self._raw = raw
        self.size = os.fstat(raw.fileno()).st_size

    def consumed(self) -> int:
        return self._raw.tell()

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()   # the decompressors do not close a file object they were given


#: compressions a trace may come in: its name's suffix, its first bytes, how to uncompress it
COMPRESSIONS = ((".gz", b"\x1f\x8b", "gzip"), (".xz", b"\xfd7zXZ\x00", "xz"),
                (".bz2", b"BZh", "bzip2"))
#: bytes of the file's start that tell plain text from compressed data
_SNIFF_BYTES = 4096


def compression_of(name: str, start: bytes) -> str | None:
    """``gzip``, ``xz``, ``bzip2`` or None (plain text), told by the first bytes of the file.

    Archives' files often come without their extension, and a plain file is sometimes named
    ``.gz``: the content decides. A file named as compressed that is neither compressed nor
    text (a corrupt download) is a TraceError saying so, not a failed read "after line 0"."""
    for _, magic, kind in COMPRESSIONS:
        if start.startswith(magic):
            return kind
    named = next(((s, k) for s, _, k in COMPRESSIONS if name.endswith(s)), None)
    if named is not None and start and not _looks_like_text(start):
        raise TraceError(f"named {named[0]} but not {named[1]}-compressed (its first bytes are "
                         f"{start[:6].hex(' ')}) nor plain text: a corrupt or mislabelled file",
                         path=name)
    return None


def _looks_like_text(start: bytes) -> bool:
    if b"\0" in start:
        return False
    try:
        start.decode("utf-8")
    except UnicodeDecodeError as err:
        return err.start >= len(start) - 3     # a character cut at the block's end
    return True


def open_text(path: str | os.PathLike) -> TraceText:
    """Open a trace, uncompressing gzip, xz and bzip2 (told by the first bytes, see
    :func:`compression_of`) on the fly; a regular file only.

    Iterate over it with :func:`read_lines`, which turns a truncated or corrupt compressed file
    into one :class:`TraceError`."""
    name = os.fspath(path)
    try:
        raw = open_regular(name, "rb", buffering=0)
    except OSError as err:
        raise TraceError(f"cannot open trace: {err.strerror or err}", path=name) from err
    try:
        start = raw.read(_SNIFF_BYTES) or b""
        raw.seek(0)
        kind = compression_of(name, start)
        if kind == "gzip":
            binary = gzip.GzipFile(fileobj=raw, mode="rb")
        elif kind == "xz":
            binary = lzma.LZMAFile(raw)
        elif kind == "bzip2":
            binary = bz2.BZ2File(raw)
        else:
            binary = io.BufferedReader(cast(io.RawIOBase, raw))  # buffering=0: a raw file
        return TraceText(binary, raw)
    except BaseException:
        raw.close()
        raise


_READ_ERRORS = (EOFError, OSError, lzma.LZMAError, zlib.error)


#: lines between two progress reports while a trace is read
PROGRESS_LINES = 1 << 16


def read_lines(stream: TraceText, name: str,
               progress: Callable[[int, int], None] | None = None) -> Iterator[str]:
    """The lines of an opened trace; a truncated or corrupt compressed file (or a failing read)
    raises one TraceError naming the file and how far it was read. ``progress(bytes read, file
    size)`` is called as the file is read, and once at its end."""
    count = 0
    try:
        while line := stream.readline(MAX_LINE + 1):
            count += 1
            if len(line) > MAX_LINE:
                raise TraceError(f"a line longer than {MAX_LINE:,} characters: not a trace "
                                 "(or a corrupt one)", path=name, line=count)
            if progress is not None and count % PROGRESS_LINES == 0:
                progress(stream.consumed(), stream.size)
            yield line
        if progress is not None:
            progress(stream.size, stream.size)
    except GeneratorExit:
        # The reader stopped early (a --limit): reading is over all the same.
        if progress is not None:
            progress(stream.size, stream.size)
        raise
    except _READ_ERRORS as err:
        what = ("truncated: the compressed data ends early" if isinstance(err, EOFError)
                else f"corrupt or unreadable ({err})")
        raise TraceError(f"cannot read trace: {what}, after line {count}", path=name) from err


def require_content(path: str | os.PathLike) -> None:
    """A TraceError ``empty`` unless the trace (uncompressed) has a line that is not blank:
    an empty file is said to be empty, not to "match no format" or to hold "no job"."""
    name = os.fspath(path)
    with open_text(name) as stream:
        for line in read_lines(stream, name):
            if line.strip():
                return
    compressed = " once uncompressed" if compression_of(name, _start_of(name)) else ""
    raise TraceError(f"empty trace: the file has no line to read{compressed}", path=name)


def _start_of(name: str) -> bytes:
    with open_regular(name, "rb") as stream:
        return stream.read(_SNIFF_BYTES)


def finite_number(text: str) -> float:
    """``float(text)`` for a finite value within ±2**53; ValueError naming the text otherwise
    (``nan``, ``inf``, ``1e999``, ``1e300``)."""
    value = float(text)
    if not -VALUE_LIMIT <= value <= VALUE_LIMIT:  # false for nan too
        raise ValueError(f"{text.strip()!r} is not a finite number within ±2**53")
    return value


def fail_or_skip(report: ReadReport, strict: bool, message: str, path: str, line: int,
                 reason: str) -> None:
    """A corrupt line: raise its TraceError with ``strict``, else count it under ``reason``."""
    err = TraceError(message, path=path, line=line)
    if strict:
        raise err
    report.skip(err, reason)


def _is_float(text: str) -> bool:
    try:
        finite_number(text)
        return True
    except ValueError:
        return False


def _swf_values_leniently(parts: list[str]) -> list | int:
    """The record's values accepting integral fields written as ``12.0`` (some converters do);
    else the index of the first field that is not a number."""
    values: list = []
    for index, text in enumerate(parts):
        try:
            number = finite_number(text)
        except ValueError:
            return index
        if index in _SWF_FLOAT_FIELDS:
            values.append(number)
        elif number.is_integer():
            values.append(int(number))
        else:
            return index
    return values


def read_swf(path: str | os.PathLike, *, strict: bool = True, limit: int | None = None,
             progress: Callable[[int, int], None] | None = None) -> SwfTrace:
    """Read a Standard Workload Format file: header comments and all 18 fields of each job.

    ``limit`` stops after that many job records (the first part of a trace); ``progress`` as
    for :func:`read_lines`.
    """
    name = os.fspath(path)
    header = SwfHeader()
    report = ReadReport(name)
    jobs: list[SwfJob] = []
    ints = [i not in _SWF_FLOAT_FIELDS for i in range(18)]
    with open_text(name) as stream:
        for number, line in enumerate(read_lines(stream, name, progress), 1):
            text = line.strip()
            if not text:
                continue
            if text[0] == ";":
                key, sep, value = text[1:].partition(":")
                if sep and key.strip():
                    header.fields.setdefault(key.strip(), []).append(value.strip())
                continue
            parts = text.split()
            if len(parts) != 18:
                fail_or_skip(report, strict, f"SWF record has {len(parts)} fields, expected 18",
                             name, number, "field count")
                continue
            try:
                values = [int(p) if is_int else float(p) for p, is_int in zip(parts, ints)]
                # x - x == 0 is false for nan and inf; the bounds catch what overflows a double
                if not (values[5] - values[5] == 0 and values[6] - values[6] == 0
                        and max(values) <= VALUE_LIMIT and min(values) >= -VALUE_LIMIT):
                    raise ValueError("not finite or out of range")
            except ValueError:
                values = _swf_values_leniently(parts)
                if isinstance(values, int):
                    field_text = parts[values]
                    what = ("an integer" if _is_float(field_text)
                            else "a finite number within ±2**53")
                    fail_or_skip(report, strict,
                                 f"SWF field {values + 1} ({SWF_FIELDS[values]}) is not "
                                 f"{what}: {field_text!r}", name, number, "not a number")
                    continue
            job = SwfJob(*values)
            if job.submit_time < 0:
                fail_or_skip(report, strict, f"SWF job {job.job_id} has a negative submit time",
                             name, number, "negative submit time")
                continue
            jobs.append(job)
            report.records += 1
            if limit is not None and report.records >= limit:
                break
    return SwfTrace(header, jobs, report)


# ---------------------------------------------------------------------------------------------
# LANL failure data (LA-UR-05-7318)

LANL_FAILURE_COLUMNS = (
    "System", "machine type", "nodes", "procstot", "procsinnode", "nodenum", "nodenumz",
    "node install", "node prod", "node decom", "fru type", "mem", "cputype", "memtype",
    "num intercon", "purpose", "Prob Started", "Prob Fixed", "Down Time", "Facilities",
    "Hardware", "Human Error", "Network", "Undetermined", "Software", "Same Event",
)
_BLAME_COLUMNS = ("Facilities", "Hardware", "Human Error", "Network", "Undetermined", "Software")


@dataclass(slots=True)
class FailureRecord:
    """One node failure: when it started, how long the node was down, and what was blamed."""

    system: int
    system_nodes: int
    node: int
    started: float          # Unix seconds, UTC
    down_seconds: float
    cause: str
    same_event: bool


@dataclass
class FailureTrace:
    records: list[FailureRecord]
    report: ReadReport

    def for_system(self, system: int) -> list[FailureRecord]:
        return [r for r in self.records if r.system == system]


def _whole_number(text: str, column: str, low: int) -> int:
    """A count or a node number of a failure record: decimal digits, ``low``..NODE_LIMIT;
    ValueError naming the column otherwise (``-3``, ``0`` nodes, 500 digits)."""
    digits = text.strip()
    if not (digits.isascii() and digits.isdigit() and len(digits) <= 10
            and low <= int(digits) <= NODE_LIMIT):
        shown = digits if len(digits) <= 20 else digits[:20] + "..."
        raise ValueError(f"{column} {shown!r} is not a whole number from {low} to {NODE_LIMIT}")
    return int(digits)


def _lanl_time(text: str) -> float:
    """``m/d/YYYY H:MM`` as Unix seconds; the source gives no zone, UTC is assumed."""
    moment = datetime.strptime(text.strip(), "%m/%d/%Y %H:%M")
    return moment.replace(tzinfo=UTC).timestamp()


def read_lanl_failures(path: str | os.PathLike, *, strict: bool = True,
                       system: int | None = None,
                       progress: Callable[[int, int], None] | None = None) -> FailureTrace:
    """Read the LANL failure CSV; ``system`` keeps only that system's records."""
    name = os.fspath(path)
    report = ReadReport(name)
    records: list[FailureRecord] = []
    with open_text(name) as stream:
        reader = csv.reader(read_lines(stream, name, progress))
        try:
            head = next(reader)
        except StopIteration:
            raise TraceError("empty failure trace (no header line)", path=name, line=1) from None
        except csv.Error as err:
            raise TraceError(f"not a LANL failure CSV: {err}", path=name, line=1) from err
        head = [h.strip() for h in head]
        missing = [c for c in ("System", "nodes", "nodenum", "Prob Started", "Down Time")
                   if c not in head]
        if missing:
            raise TraceError(f"not a LANL failure CSV: missing column(s) {', '.join(missing)}",
                             path=name, line=1)
        col = {c: i for i, c in enumerate(head)}
        blame = [(c, col[c]) for c in _BLAME_COLUMNS if c in col]
        for number, row in _csv_rows(reader, report, strict, name):
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) < len(head):
                fail_or_skip(report, strict, f"failure record has {len(row)} columns, expected "
                             f"{len(head)}", name, number, "column count")
                continue
            try:
                sys_id = _whole_number(row[col["System"]], "System", 0)
            except ValueError as err:
                fail_or_skip(report, strict, f"bad failure record: {err}", name, number,
                             "not a number")
                continue
            if system is not None and sys_id != system:
                continue
            try:
                # a system of 0 nodes would divide the failure rate by zero
                nodes = _whole_number(row[col["nodes"]], "nodes", 1)
                node = _whole_number(row[col["nodenum"]], "nodenum", 0)
                started = _lanl_time(row[col["Prob Started"]])
                down = finite_number(row[col["Down Time"]]) * 60.0
            except ValueError as err:
                fail_or_skip(report, strict, f"bad failure record: {err}", name, number,
                             "bad value")
                continue
            if down < 0:
                fail_or_skip(report, strict, f"negative Down Time {down / 60:g} minutes", name,
                             number, "negative down time")
                continue
            cause = next((f"{c}: {row[i].strip()}" for c, i in blame if row[i].strip()), "")
            same = col.get("Same Event") is not None and row[col["Same Event"]].strip() == "Yes"
            records.append(FailureRecord(sys_id, nodes, node, started, down, cause, same))
            report.records += 1
    records.sort(key=lambda r: r.started)
    return FailureTrace(records, report)


# ---------------------------------------------------------------------------------------------
# LANL job log (LA-UR-06-0803)

@dataclass(slots=True)
class LanlJob:
    """One LANL job-log line (Unix seconds); ``node_ranges`` are inclusive (first, last) pairs."""

    job_end_time: int
    user_id: int
    nprocs: int
    submit_time: int
    suggested_start: int
    deadline: int
    dispatch_time: int
    cpu_user_s: float
    cpu_sys_s: float
    total_cpu: float
    batch_id: str
    status: str
    node_ranges: tuple[tuple[int, int], ...]

    @property
    def run_time(self) -> int:
        return self.job_end_time - self.dispatch_time


def _node_ranges(text: str) -> tuple[tuple[int, int], ...]:
    ranges = []
    for piece in text.replace(",", " ").split():
        first, sep, last = piece.partition("-")
        a = int(first)
        b = int(last) if sep else a
        if b < a:
            raise ValueError(f"node range {piece!r} runs backwards")
        ranges.append((a, b))
    return tuple(ranges)


def read_lanl_jobs(path: str | os.PathLike, *, strict: bool = True,
                   progress: Callable[[int, int], None] | None = None) -> tuple[list[LanlJob], ReadReport]:
    """Read a LANL job log: 12 fields, then the node ranges between slashes."""
    name = os.fspath(path)
    report = ReadReport(name)
    jobs: list[LanlJob] = []
    with open_text(name) as stream:
        for number, line in enumerate(read_lines(stream, name, progress), 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            head, slash, rest = text.partition("/")
            parts = head.split()
            if len(parts) != 12:
                fail_or_skip(report, strict, f"LANL job line has {len(parts)} fields before the "
                             "node list, expected 12", name, number, "field count")
                continue
            if slash and not rest.rstrip().endswith("/"):
                fail_or_skip(report, strict, "node list is not closed by '/'", name, number,
                             "node list")
                continue
            try:
                ints = [int(p) for p in parts[:7]]
                if max(ints) > VALUE_LIMIT or min(ints) < -VALUE_LIMIT:
                    raise ValueError(f"a time or count beyond ±2**53 in {parts[:7]}")
                cpu = [finite_number(p) for p in parts[7:10]]
                ranges = _node_ranges(rest.rstrip()[:-1]) if slash else ()
            except ValueError as err:
                fail_or_skip(report, strict, f"bad LANL job line: {err}", name, number,
                             "bad value")
                continue
            job = LanlJob(*ints, *cpu, parts[10], parts[11], ranges)
            if job.dispatch_time < job.submit_time or job.job_end_time < job.dispatch_time:
                fail_or_skip(report, strict, f"job {job.batch_id}: times out of order (submit "
                             f"{job.submit_time}, dispatch {job.dispatch_time}, end "
                             f"{job.job_end_time})", name, number, "times out of order")
                continue
            jobs.append(job)
            report.records += 1
    return jobs, report


# ---------------------------------------------------------------------------------------------
# Simple site CSV

SITE_CSV_REQUIRED = ("job_id", "submit_time", "run_time", "procs")
SITE_CSV_OPTIONAL = ("requested_time", "memory_kb_per_proc", "input_bytes")


@dataclass(slots=True)
class SiteJob:
    """A row of a site's own job log; times in seconds, ``-1`` for an unknown optional value."""

    job_id: str
    submit_time: float
    run_time: float
    procs: int
    requested_time: float = -1
    memory_kb_per_proc: float = -1
    input_bytes: float = -1


def read_site_csv(path: str | os.PathLike, *, strict: bool = True,
                  progress: Callable[[int, int], None] | None = None) -> tuple[list[SiteJob], ReadReport]:
    """Read a CSV with a header naming at least ``job_id,submit_time,run_time,procs``."""
    name = os.fspath(path)
    report = ReadReport(name)
    jobs: list[SiteJob] = []
    with open_text(name) as stream:
        reader = csv.DictReader(read_lines(stream, name, progress))
        try:
            fieldnames = reader.fieldnames
        except csv.Error as err:
            raise TraceError(f"not a site CSV: {err}", path=name, line=1) from err
        if fieldnames is None:
            raise TraceError("empty site CSV (no header line)", path=name, line=1)
        missing = [c for c in SITE_CSV_REQUIRED if c not in reader.fieldnames]
        if missing:
            raise TraceError(f"site CSV header lacks column(s) {', '.join(missing)}", path=name,
                             line=1)
        for number, row in _csv_rows(reader, report, strict, name):
            try:
                values = dict(job_id=row["job_id"].strip(),
                              submit_time=finite_number(row["submit_time"]),
                              run_time=finite_number(row["run_time"]), procs=int(row["procs"]))
                if values["procs"] > VALUE_LIMIT:
                    raise ValueError(f"procs {values['procs']} beyond 2**53")
                for key in SITE_CSV_OPTIONAL:
                    if row.get(key) not in (None, ""):
                        values[key] = finite_number(row[key])
            except (ValueError, TypeError, AttributeError) as err:
                fail_or_skip(report, strict, f"bad site CSV row: {err}", name, number,
                             "bad value")
                continue
            if values["procs"] <= 0 or values["run_time"] < 0 or values["submit_time"] < 0:
                fail_or_skip(report, strict, "procs must be > 0, run_time and submit_time >= 0",
                             name, number, "out of range")
                continue
            jobs.append(SiteJob(**values))
            report.records += 1
    return jobs, report


def _csv_rows(reader, report: ReadReport, strict: bool, name: str):
    """``(line number, row)`` of a csv reader; a line the csv module cannot split (a field past
    its size limit) is a corrupt line like any other."""
    # a DictReader's own line_num is set only once a row is read whole: its reader's is current
    lines = getattr(reader, "reader", reader)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            fail_or_skip(report, strict, f"not a CSV record: {err}", name, lines.line_num,
                         "not CSV")
            continue
        yield lines.line_num, row


def iter_records(report: ReadReport) -> Iterator[str]:
    """Lines describing what was read, for the CLI to print: the reader's notes, the count of
    skipped lines by reason, then the first of them (``FILE:LINE: ...``)."""
    for note in report.notes:
        yield f"{report.path}: {note}"
    if not report.skipped_total:
        return
    reasons = ", ".join(f"{count} {reason}" for reason, count in sorted(report.skipped.items()))
    # Lines that are no job (a sacct job step, a PBS queue record) are counted, not quoted.
    first = "; the first:" if report.first_errors else ""
    yield (f"{report.path}: skipped {report.skipped_total:,} of "
           f"{report.records + report.skipped_total:,} line(s) ({reasons}){first}")
    yield from report.first_errors
