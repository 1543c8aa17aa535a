"""The C path of reading a trace and building its workload, equal job for job to the Python one.

The reference is :func:`traces.read_swf` → :func:`workload.from_swf` → :func:`build_workload`:
a Python object per record at each step, about 6 s on the full RICC trace (447,794 jobs). Here
the uncompressed text goes to ``native/workload.c`` whole, which parses the plain records into
columns; the per-job random sizes and stripes are drawn in C from the seeded
``random.Random``'s state, as Python draws them; the rest of :func:`build_workload` runs over
the columns, and the :class:`SimJob` objects are made last. A file the C parser does not read
exactly as the reference would (a corrupt line, a value written ``12.0``, CR line ends, ...)
gives None and is read by the reference, which names the problem.

tests/sim/test_trace_columns.py checks the two paths give the same jobs, field for field.
"""

from __future__ import annotations

import contextlib
import gc
import math
import random
from array import array
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..errors import InputError, TraceError
from . import traces, workload as _workload
from .workload import DAY, KIB, SimJob, Workload, WorkloadParams, input_scale

try:
    from . import _native
except ImportError:     # the extension is not built: the Python path only
    _native = None

#: the uncompressed text read whole; a larger one (a decompression bomb) is left to the
#: reference reader, which streams it line by line
TEXT_LIMIT = 1 << 31


@dataclass
class SwfColumns:
    """An SWF trace's records as columns (Python ints and floats, as the reference reads them)
    and its header; ``report`` as :func:`traces.read_swf` gives it."""

    header: traces.SwfHeader
    columns: dict[str, list]
    report: traces.ReadReport

    def __len__(self) -> int:
        return len(self.columns["job_id"])


def read_swf_columns(path: str, *, limit: int | None = None,
                     progress: Callable[[int, int], None] | None = None) -> SwfColumns | None:
    """The trace read by the C parser, or None when it cannot be (no extension, a line that is
    not plain SWF, a failed read): the caller reads it with :func:`traces.read_swf`."""
    if _native is None:
        return None
    text = _read_text(path, progress)
    if text is None:
        return None
    parsed = _native.parse_swf(text, limit or 0)
    if parsed is None:
        return None
    ints_bytes, floats_bytes, header_bytes, records = parsed
    ints, floats, spans = array("q"), array("d"), array("q")
    ints.frombytes(ints_bytes)
    floats.frombytes(floats_bytes)
    spans.frombytes(header_bytes)
    header = traces.SwfHeader()
    for offset, length in zip(spans[::2], spans[1::2]):
        line = text[offset:offset + length].decode("utf-8", errors="replace").strip()
        key, sep, value = line[1:].partition(":")
        if sep and key.strip():
            header.fields.setdefault(key.strip(), []).append(value.strip())
    columns = {}
    width = len(traces.SWF_FIELDS)
    for index, name in enumerate(traces.SWF_FIELDS):
        if index in (5, 6):
            columns[name] = floats[index - 5::2].tolist()
        else:
            columns[name] = ints[index::width].tolist()
    return SwfColumns(header, columns, traces.ReadReport(path, records=records))


def _read_text(path: str, progress: Callable[[int, int], None] | None) -> bytes | None:
    """The trace's text uncompressed, read in chunks with ``progress(bytes of the file read,
    file size)`` after each (about as often as the reference reports); None for what the
    reference must read: a failed read (it names the problem), a line past
    :data:`traces.MAX_LINE` (a decompression bomb), more than :data:`TEXT_LIMIT` bytes."""
    chunk_size = traces.PROGRESS_LINES * 64     # a line of a trace is 60-200 bytes
    parts: list[bytes] = []
    total = since_newline = 0
    try:
        with traces.open_text(path) as stream:
            while chunk := bytes(stream.buffer.read(chunk_size)):
                last = chunk.rfind(b"\n")
                since_newline = since_newline + len(chunk) if last < 0 else len(chunk) - last - 1
                total += len(chunk)
                if since_newline > traces.MAX_LINE or total > TEXT_LIMIT:
                    return None
                parts.append(chunk)
                if progress is not None:
                    progress(stream.consumed(), stream.size)
            if progress is not None:
                progress(stream.size, stream.size)
    except (TraceError, MemoryError, *traces._READ_ERRORS):
        return None
    return b"".join(parts)


@dataclass
class TraceColumns:
    """What :func:`workload.from_swf` makes of each record, as columns."""

    job_id: list
    submit: list
    run_time: list
    procs: list
    requested_time: list
    memory_bytes: list
    wait_time: list


def swf_trace_columns(swf: SwfColumns) -> TraceColumns:
    """:func:`workload.from_swf` over columns: allocated processors (else requested), used
    memory (else requested) in bytes for the whole job, -1 when unknown."""
    c = swf.columns
    procs = [a if a > 0 else r for a, r in zip(c["allocated_procs"], c["requested_procs"])]
    memory = []
    for used, asked, count in zip(c["used_memory"], c["requested_memory"], procs):
        per_proc = used if used > 0 else asked
        memory.append(per_proc * KIB * count if per_proc > 0 and count > 0 else -1)
    return TraceColumns(c["job_id"], c["submit_time"], c["run_time"], procs,
                        c["requested_time"], memory, c["wait_time"])


def draw_inputs(params: WorkloadParams, count: int) -> tuple[array, array] | None:
    """The log-normal fallback sizes and the stripes' OSTs of ``count`` jobs, drawn in C as
    :func:`build_workload` draws them with ``random.Random(params.seed)``; None when the C
    core cannot (not built, an OST count past 2**31)."""
    if _native is None or params.ost_count >= 2 ** 31:
        return None
    version, state, _ = random.Random(params.seed).getstate()
    words = array("I", state[:-1])
    if version != 3 or words.itemsize != 4:
        return None
    k = params.stripe_count
    setsize = 21 + (4 ** math.ceil(math.log(k * 3, 4)) if k > 5 else 0)   # random.sample's
    fallback_bytes, ost_bytes = _native.draw_inputs(
        words.tobytes(), state[-1], count, math.log(params.input_median_bytes),
        params.input_sigma, params.ost_count, k, setsize)
    fallback, osts = array("d"), array("i")
    fallback.frombytes(fallback_bytes)
    osts.frombytes(ost_bytes)
    return fallback, osts


def build_workload_columns(trace: TraceColumns, params: WorkloadParams,
                           header_nodes: int | None = None,
                           progress: Callable[[int, int], None] | None = None) -> Workload | None:
    """:func:`workload.build_workload` over columns, the same jobs; None when the draws cannot
    be made in C (the caller builds with the reference)."""
    dropped: Counter = Counter()
    usable = []
    for index, (run_time, procs) in enumerate(zip(trace.run_time, trace.procs)):
        if run_time < 0:
            dropped["unknown run time"] += 1
        elif procs <= 0:
            dropped["unknown processor count"] += 1
        else:
            usable.append(index)
    if not usable:
        raise InputError("the trace has no job the scheduler model can run")
    submit_of = trace.submit
    usable.sort(key=submit_of.__getitem__)          # stable, as list.sort by submit
    if progress is not None:
        progress(0, len(usable))
    draws = draw_inputs(params, len(usable))
    if draws is None:
        return None
    fallback, osts = draws
    ppn = params.procs_per_node
    nodes_of = [-(-trace.procs[i] // ppn) for i in usable]
    system_nodes = params.system_nodes or header_nodes or max(nodes_of)
    window_start = submit_of[usable[0]] + params.start_day * DAY
    window_end = window_start + params.days * DAY if params.days else math.inf
    k = params.stripe_count
    kept: list[tuple[int, int, int]] = []           # (trace index, nodes, draw index)
    for draw, (index, nodes) in enumerate(zip(usable, nodes_of)):
        if not window_start <= submit_of[index] < window_end:
            continue
        if nodes > system_nodes:
            dropped["larger than the system"] += 1
            continue
        kept.append((index, nodes, draw))
    if not kept:
        raise InputError(f"no job submitted in days {params.start_day:g} to "
                         f"{params.start_day + params.days:g} of the trace")
    with gc_paused():
        jobs, memory = _sim_jobs(trace, params, kept, fallback, osts, k,
                                 progress, len(usable))
    machine_memory = (params.machine_nodes or system_nodes) * params.node_memory_bytes
    scale = input_scale(jobs, memory, params, machine_memory)
    stripe_size = params.stripe_size
    for job, size in zip(jobs, memory):
        job.input_bytes = size * scale
        used = max(1, min(k, math.ceil(job.input_bytes / stripe_size)))
        job.osts = job.osts[:used]
    if progress is not None:
        progress(len(usable), len(usable))
    return Workload(jobs, system_nodes, params, dropped, jobs[-1].submit - jobs[0].submit)


def _sim_jobs(trace: TraceColumns, params: WorkloadParams, kept, fallback, osts, k,
              progress: Callable[[int, int], None] | None, total: int):
    """The kept jobs as SimJobs (input sizes still to be scaled) and their recorded memory or
    drawn size; ``progress(trace jobs done, total)`` on the way, as the reference reports."""
    origin = trace.submit[kept[0][0]]
    load = params.load_factor
    jobs: list[SimJob] = []
    memory: list[float] = []
    step = _workload.PROGRESS_JOBS
    report_at = step
    for number, (index, nodes, draw) in enumerate(kept):
        if progress is not None and draw >= report_at:
            report_at = (draw // step + 1) * step
            progress(draw // step * step, total)
        run_time = float(trace.run_time[index])
        asked = trace.requested_time[index]
        limit = float(asked) if asked > 0 else run_time
        jobs.append(SimJob(number, trace.job_id[index], (trace.submit[index] - origin) / load,
                           min(run_time, limit), limit, nodes, 0.0,
                           tuple(osts[draw * k:(draw + 1) * k]), trace.wait_time[index]))
        recorded = trace.memory_bytes[index]
        memory.append(recorded if recorded > 0 else fallback[draw])
    return jobs, memory



#: the SimJob arguments a kept workload is copied from, in SimJob's order
_JOB_ARGUMENTS = ("index", "job_id", "submit", "run_time", "limit", "nodes", "input_bytes",
                  "osts", "recorded_wait")


@dataclass
class KeptWorkload:
    """A built workload kept as its jobs' columns, handed out as fresh copies: a replay writes
    its state into its jobs, so the kept jobs are never handed out themselves."""

    columns: tuple[list, ...]
    workload: Workload

    @classmethod
    def keep(cls, workload: Workload) -> KeptWorkload:
        jobs = workload.jobs
        columns = tuple([getattr(j, name) for j in jobs] for name in _JOB_ARGUMENTS)
        return cls(columns, workload)

    def fresh_copy(self) -> Workload:
        """The same jobs as new SimJobs in their initial state."""
        kept = self.workload
        with gc_paused():
            jobs = list(map(SimJob, *self.columns))
        return Workload(jobs, kept.system_nodes, kept.params, Counter(kept.dropped), kept.span)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection in the block: making a job object at a time for hundreds of
    thousands of jobs sets off a full collection again and again, each walking every object
    already made (SimJobs hold no cycles; the collector runs again after the block)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
