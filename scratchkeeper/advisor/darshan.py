"""A workload for the layout model from a Darshan log of an earlier run (PyDarshan).

What is taken from the log, and how:

* processes: the job's ``nprocs`` when a file was opened by all ranks (a shared record, rank
  -1), else the number of ranks that read or wrote;
* processes per node: the most ranks on one host of the DXT traces, when the log has them
  (Darshan records no node count otherwise; the caller then has to say);
* shared file or a file per process: whether more bytes went to files that several ranks
  accessed (a shared record, or the same file in the records of several ranks) than to files
  of one rank;
* requests: the POSIX module's size histograms (``POSIX_SIZE_READ_*``/``WRITE_*``), each bin
  represented by the most frequent of the files' four common access sizes
  (``POSIX_ACCESS1..4_ACCESS``) that falls into it, or by the bin's geometric middle when none
  does; split into sequential and random by each file's ``POSIX_SEQ_READS`` /
  ``POSIX_SEQ_WRITES`` (a request at a higher offset than the one before; the first request of
  a file counts as random, as it needs a seek);
* the stripe settings the run had, from the LUSTRE module, when recorded.

PyDarshan reads the log in a child process (:mod:`.darshan_extract`): its C library can crash
the interpreter on a truncated log. The analysis here is plain Python over the counters.

The POSIX layer is what reaches the file system (MPI-IO's collective buffering has already
merged requests there). Files under ``/dev``, ``/proc``, ``/sys`` and the standard streams are
left out.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..inputfiles import open_regular
from .advise import AccessClass, Workload
from .model import RANDOM, READ, SEQUENTIAL, WRITE

#: Darshan's size bins: name suffix -> (smallest, largest) bytes; a size belongs to the first
#: bin whose largest it does not exceed (darshan-common's DARSHAN_BUCKET_INC).
SIZE_BINS = (
    ("0_100", 0, 100), ("100_1K", 101, 1 << 10), ("1K_10K", (1 << 10) + 1, 10 << 10),
    ("10K_100K", (10 << 10) + 1, 100 << 10), ("100K_1M", (100 << 10) + 1, 1 << 20),
    ("1M_4M", (1 << 20) + 1, 4 << 20), ("4M_10M", (4 << 20) + 1, 10 << 20),
    ("10M_100M", (10 << 20) + 1, 100 << 20), ("100M_1G", (100 << 20) + 1, 1 << 30),
    ("1G_PLUS", (1 << 30) + 1, 4 << 30),
)
NOT_DATA = ("/dev/", "/proc/", "/sys/", "<STDIN>", "<STDOUT>", "<STDERR>")


@dataclass(frozen=True)
class DarshanWorkload:
    """A workload read from a log, with what the log says beside it."""

    path: str
    workload: Workload | None    # None when the log records no per-node count (see below)
    nprocs: int
    io_processes: int
    processes_per_node: int | None   # from DXT hostnames; None when the log has no DXT
    shared_file: bool
    files: int
    shared_files: int
    bytes_read: int
    bytes_written: int
    accesses: tuple[AccessClass, ...]
    recorded_stripe: tuple[int, int] | None   # (stripe count, stripe size) most files had

    def with_per_node(self, per_node: int) -> Workload:
        return Workload(self.io_processes, per_node, self.shared_file, self.accesses)


#: Seconds the child may take to read a log (the largest example, 2,014 records, takes ~2 s
#: with the interpreter's start and PyDarshan's import).
EXTRACT_TIMEOUT = 300.0


def _pydarshan_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("darshan") is not None


def extract_counters(path: str) -> dict:
    """The counters of the log at ``path``, read by PyDarshan in a child process
    (:mod:`.darshan_extract`, where a crash of its C library costs only the child)."""
    if not _pydarshan_installed():
        raise InputError("reading a Darshan log needs PyDarshan: pip install darshan "
                         "(or the project's extra: pip install 'scratchkeeper[darshan]')",
                         path=path)
    # checked on a descriptor opened without waiting (a FIFO named as the log is refused, not
    # waited on); the child reads the file by name, within EXTRACT_TIMEOUT
    try:
        with open_regular(path, "rb"):
            pass
    except FileNotFoundError:
        raise InputError("no such Darshan log", path=path) from None
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror or err}", path=path) from None
    from ..runner import run

    package_root = str(Path(__file__).resolve().parents[2])
    # cwd and PYTHONPATH: the child imports this same scratchkeeper, not one of its cwd
    done = run([sys.executable, "-m", "scratchkeeper.advisor.darshan_extract",
                os.path.abspath(path)], check=False, mutating=False, timeout=EXTRACT_TIMEOUT,
               cwd=package_root,
               env={"PYTHONPATH": os.pathsep.join(filter(None, [
                   package_root, os.environ.get("PYTHONPATH", "")]))})
    # darshan-util's own complaints ("Error: ...") on the child's stderr name what is wrong
    complaints = [line.strip().removeprefix("Error:").strip().rstrip(".")
                  for line in done.stderr.splitlines() if line.startswith("Error:")]
    if done.returncode == 0:
        try:
            return json.loads(done.stdout)
        except ValueError as err:
            raise InputError(f"not a readable Darshan log (the reader printed no JSON: {err})",
                             path=path) from err
    try:
        failure = json.loads(done.stdout)["error"]
    except (ValueError, KeyError, TypeError):
        failure = (f"PyDarshan's reader died of signal {-done.returncode}" if done.returncode < 0
                   else f"PyDarshan's reader exited {done.returncode}")
    if failure == "pydarshan":
        raise InputError(f"reading a Darshan log needs PyDarshan, which {sys.executable} cannot "
                         "import: pip install darshan", path=path)
    raise InputError(f"not a readable Darshan log ({complaints[0] if complaints else failure})",
                     path=path)


def _representative_size(low: int, high: int, common: Counter) -> int:
    inside = [(count, size) for size, count in common.items() if low <= size <= high]
    if inside:
        return max(inside)[1]
    return max(1, round(math.sqrt(max(low, 1) * high)))


def read_workload(path: str, *, per_node: int | None = None,
                  operations: tuple[str, ...] = (READ, WRITE)) -> DarshanWorkload:
    """The workload of the Darshan log at ``path``; ``per_node`` wins over the log's hosts.
    ``operations``: the directions kept (reads only, writes only, or both)."""
    return summarize(extract_counters(path), path, per_node=per_node, operations=operations)


def summarize(counters: dict, path: str, *, per_node: int | None = None,
              operations: tuple[str, ...] = (READ, WRITE)) -> DarshanWorkload:
    """The workload of a log's counters (what :func:`extract_counters` returns)."""
    nprocs = int(counters.get("nprocs") or 0)
    if nprocs < 1:
        raise InputError("the log has no job metadata (nprocs)", path=path)
    if not counters.get("posix"):
        raise InputError("the log records no POSIX accesses (the layer that reaches the file "
                         "system)", path=path)
    records = [r for r in counters["posix"] if not r["name"].startswith(NOT_DATA)
               and r["POSIX_READS"] + r["POSIX_WRITES"] > 0]
    if not records:
        raise InputError("the log records no reads or writes of data files", path=path)

    ranks_of: dict[str, set[int]] = {}
    for record in records:
        ranks_of.setdefault(record["id"], set()).add(record["rank"])
    shared_ids = {i for i, ranks in ranks_of.items() if -1 in ranks or len(ranks) > 1}
    moved = {True: 0, False: 0}
    for record in records:
        moved[record["id"] in shared_ids] += record["POSIX_BYTES_READ"] + \
            record["POSIX_BYTES_WRITTEN"]
    shared_file = moved[True] >= moved[False]
    all_ranks = {r["rank"] for r in records}
    io_processes = nprocs if -1 in all_ranks else len(all_ranks)
    io_processes = max(1, min(io_processes, nprocs))

    common: Counter = Counter()
    for record in records:
        for k in range(1, 5):
            size, count = record[f"POSIX_ACCESS{k}_ACCESS"], record[f"POSIX_ACCESS{k}_COUNT"]
            if size > 0 and count > 0:
                common[size] += count

    classes: dict[tuple[int, str, str], float] = {}
    for operation, prefix, sequential_key, total_key in (
            (READ, "POSIX_SIZE_READ_", "POSIX_SEQ_READS", "POSIX_READS"),
            (WRITE, "POSIX_SIZE_WRITE_", "POSIX_SEQ_WRITES", "POSIX_WRITES")):
        if operation not in operations:
            continue
        for suffix, low, high in SIZE_BINS:
            size = None
            for record in records:
                count = record[prefix + suffix]
                if count <= 0:
                    continue
                if size is None:
                    size = _representative_size(low, high, common)
                share = min(1.0, record[sequential_key] / record[total_key]) \
                    if record[total_key] > 0 else 0.0
                for pattern, part in ((SEQUENTIAL, count * share),
                                      (RANDOM, count * (1.0 - share))):
                    if part > 0:
                        key = (size, operation, pattern)
                        classes[key] = classes.get(key, 0.0) + part
    if not classes:
        wanted = " or ".join(f"{op}s" for op in operations)
        raise InputError(f"the log records no {wanted} of data files", path=path)
    accesses = tuple(AccessClass(size, count, operation, pattern)
                     for (size, operation, pattern), count in sorted(classes.items()))

    hosts = counters.get("hosts") or {}
    hosts_per_node = max((len(ranks) for ranks in hosts.values()), default=None)
    chosen_per_node = per_node if per_node is not None else hosts_per_node
    if chosen_per_node is not None and chosen_per_node > io_processes:
        if per_node is not None:
            raise InputError(f"--per-node {per_node}: the log has {io_processes} I/O processes",
                             path=path)
        chosen_per_node = io_processes
    workload = (Workload(io_processes, chosen_per_node, shared_file, accesses)
                if chosen_per_node is not None else None)

    data_ids = set(ranks_of)
    stripes = Counter((count, size) for record_id, count, size in counters.get("lustre", ())
                      if record_id in data_ids and count > 0 and size > 0)
    return DarshanWorkload(
        path=path, workload=workload, nprocs=nprocs, io_processes=io_processes,
        processes_per_node=hosts_per_node, shared_file=shared_file, files=len(ranks_of),
        shared_files=len(shared_ids),
        bytes_read=sum(r["POSIX_BYTES_READ"] for r in records),
        bytes_written=sum(r["POSIX_BYTES_WRITTEN"] for r in records), accesses=accesses,
        recorded_stripe=stripes.most_common(1)[0][0] if stripes else None)
