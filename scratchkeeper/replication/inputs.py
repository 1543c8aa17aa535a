"""The known inputs of compute jobs, read from the planner's tables.

Two sources (issue 5): files a stage-in job staged (``staged_files`` in state ``staged``, with
size and checksum) and explicit declarations (``#STAGEIN -input PATH``, ``submit --input PATH``:
``job_inputs``). Only files under the scratch root can be replicated; others are left out.

:class:`KnownInputs` keeps what it read between the daemon's cycles and asks the planner again
only for jobs new to it and for jobs whose chain changed since its last look (a stage-in
committed, a job id recorded): 11,000 jobs are read once, not every cycle.
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import Iterable

from ..planner import records
from ..state import StateStore
from .decisions import InputFile, JobInputs

#: a change is looked for from this long before the previous look: the hosts that write the
#: state database (head node, data jobs' nodes) must agree on the time within it
CLOCK_MARGIN = 300.0
#: every job is read again after this long whatever changed (a bound on anything missed)
FULL_REFRESH = 600.0


class KnownInputs:
    """The inputs of the daemon's jobs, read incrementally from the planner's tables.

    ``get(job_ids)`` answers as :func:`job_inputs` does for the same jobs; it queries only the
    jobs it has not read yet and those whose chain changed since its previous call (with
    :data:`CLOCK_MARGIN` of overlap), all of them every :data:`FULL_REFRESH` seconds or when
    planner rows were deleted. Nothing is kept on disk: a restarted daemon reads everything once.
    """

    def __init__(self, store: StateStore, scratch_root: str, *,
                 full_refresh: float = FULL_REFRESH, clock=time.time):
        self.store = store
        self.scratch_root = scratch_root
        self.full_refresh = full_refresh
        self.clock = clock
        self._inputs: dict[str, JobInputs | None] = {}
        self._checksums: dict[str, dict[str, str]] = {}
        self._looked: float | None = None          # wall time of the previous look
        self._full: float | None = None            # wall time of the last full read
        self._counts: tuple[int, int, int] | None = None
        self._answer: tuple[dict[str, JobInputs], dict[str, str]] | None = None
        #: jobs asked of the planner by the last call (for tests and the benchmark)
        self.last_read = 0

    def forget(self) -> None:
        """Drop everything read: the next call reads every job again."""
        self._inputs.clear()
        self._checksums.clear()
        self._looked = self._full = self._counts = self._answer = None

    def get(self, job_ids: Iterable[str]) -> tuple[dict[str, JobInputs], dict[str, str]]:
        wanted = {str(j) for j in job_ids}
        now = self.clock()
        records.open_records(self.store)
        counts = records.input_row_counts(self.store)
        if (self._full is None or now - self._full >= self.full_refresh or self._counts is None
                or any(n < before for n, before in zip(counts, self._counts))):
            self.forget()
            self._full = now
            stale = wanted
        else:
            since = self._looked - CLOCK_MARGIN
            changed = records.compute_jobs_changed_since(self.store, since)
            stale = {j for j in wanted if j not in self._inputs} | (changed & wanted)
        self._counts = counts
        self._looked = now
        leaving = [j for j in self._inputs if j not in wanted]
        for job_id in leaving:
            del self._inputs[job_id]
            self._checksums.pop(job_id, None)
        if stale:
            found, checksums = _read(self.store, stale, self.scratch_root)
            for job_id in stale:
                self._inputs[job_id] = found.get(job_id)
                self._checksums[job_id] = checksums.get(job_id, {})
        self.last_read = len(stale)
        if stale or leaving or self._answer is None:
            self._answer = ({j: item for j, item in self._inputs.items() if item is not None},
                            _merged(self._checksums.values()))
        # the same answer as last time when nothing changed (callers only read it)
        return self._answer


def job_inputs(store: StateStore, job_ids: Iterable[str], scratch_root: str
               ) -> tuple[dict[str, JobInputs], dict[str, str]]:
    """Inputs of each given job that has any, and the planner's checksum of each staged path."""
    records.open_records(store)
    found, checksums = _read(store, job_ids, scratch_root)
    return found, _merged(checksums.values())


def _merged(per_job: Iterable[dict[str, str]]) -> dict[str, str]:
    merged: dict[str, str] = {}
    for by_path in per_job:
        merged.update(by_path)
    return merged


def _read(store: StateStore, job_ids: Iterable[str], scratch_root: str
          ) -> tuple[dict[str, JobInputs], dict[str, dict[str, str]]]:
    """One planner query: each job's inputs (jobs with none left out), its checksums by path."""
    root = posixpath.normpath(scratch_root).rstrip("/") + "/"
    rows = records.compute_job_inputs(store, job_ids)
    files: dict[str, dict[str, InputFile]] = {}
    owners: dict[str, int] = {}
    checksums: dict[str, dict[str, str]] = {}
    for row in rows:
        path = posixpath.normpath(row["path"])
        if not path.startswith(root):
            continue
        owners[row["job_id"]] = row["owner_uid"]
        known = files.setdefault(row["job_id"], {})
        if path not in known or known[path].size is None:
            known[path] = InputFile(path, row["size"])
        if row["checksum"]:
            checksums.setdefault(row["job_id"], {})[path] = row["checksum"]
    return ({job_id: JobInputs(job_id, owners[job_id], tuple(sorted(by_path.values(),
                                                                    key=lambda f: f.path)))
             for job_id, by_path in files.items()}, checksums)
