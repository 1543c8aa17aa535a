"""The contract every scheduler backend module follows, and the class that runs it.

A backend module (``slurm``, ``pbs``) holds only *build* functions (argv lists) and *parse*
functions (tool output to dataclasses) plus its state-translation table; :class:`Scheduler` runs
the commands through the one command runner, retries transient failures and confirms that a job
missing from the queue really ended before saying so.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import logging
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import field
from types import ModuleType

from ..errors import CommandError, SchedulerError, UnknownJobError
from ..runner import get_runner
from ..structs import record

log = logging.getLogger(__name__)


class JobState(str, enum.Enum):
    """Scheduler-neutral job states."""

    PENDING = "pending"
    HELD = "held"
    RUNNING = "running"
    COMPLETING = "completing"
    SUSPENDED = "suspended"
    REQUEUED = "requeued"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    NODE_FAIL = "node_fail"
    OUT_OF_MEMORY = "out_of_memory"
    PREEMPTED = "preempted"
    #: finished, but the scheduler does not say how (e.g. the Torque wrappers' ``C``)
    ENDED = "ended"
    UNKNOWN = "unknown"

    @property
    def is_final(self) -> bool:
        return self in _FINAL

    @property
    def is_queued(self) -> bool:
        return self in _QUEUED


_QUEUED = frozenset((JobState.PENDING, JobState.HELD, JobState.REQUEUED))
_ACTIVE = frozenset((JobState.RUNNING, JobState.COMPLETING, JobState.SUSPENDED))
_FINAL = {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT,
          JobState.NODE_FAIL, JobState.OUT_OF_MEMORY, JobState.PREEMPTED, JobState.ENDED}


@record(frozen=True)
class JobRecord:
    """What the scheduler says of one job."""

    job_id: str
    state: JobState
    native_state: str
    reason: str = ""
    name: str = ""
    queue: str = ""
    user: str = ""
    nodes: int = 0
    priority: int | None = None
    exit_code: int | None = None
    #: the signal that ended the job (Slurm's ``ExitCode`` is ``code:signal``), 0 if none
    exit_signal: int | None = None
    dependency: str = ""
    submit_time: float | None = None
    start_time: float | None = None
    end_time: float | None = None

    @classmethod
    def from_fields(cls, *values) -> JobRecord:
        """A record from every field's value in declaration order, made without the frozen
        dataclass's one ``object.__setattr__`` per field (a queue snapshot makes 11,000)."""
        record = _new_object(cls)
        record.__dict__.update(zip(_JOB_FIELDS, values))
        return record

    def outcome(self) -> str:
        """How the job ended, in the scheduler's words: ``TIMEOUT, exit code 0:15``."""
        if self.exit_code is None:
            return f"{self.native_state}, exit code unknown"
        return f"{self.native_state}, exit code {self.exit_code}:{self.exit_signal or 0}"


#: the longest cancel reason written to a job (Slurm keeps comments in its accounting database)
COMMENT_MAX = 240


def cancel_comment(reason: str) -> str:
    """The comment a cancelled job carries: one line, printable, bounded, marked as ours."""
    text = " ".join("".join(c if c.isprintable() else " " for c in reason).split())
    text = f"scratchkeeper: {text}"
    return text if len(text) <= COMMENT_MAX else text[:COMMENT_MAX - 3] + "..."


_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(JobRecord))
_new_object = object.__new__


@record(frozen=True)
class SubmitSpec:
    """A submission: ``dependencies`` maps a type (afterok, afterany) to job ids."""

    script_path: str
    queue: str
    job_name: str
    workdir: str
    output_path: str | None = None
    dependencies: tuple[tuple[str, tuple[str, ...]], ...] = ()
    hold: bool = False
    kill_on_invalid_dependency: bool = True
    extra_args: tuple[str, ...] = ()


@record(frozen=True)
class QueueSnapshot:
    """One batched look at the queue: jobs in the scheduler's priority order."""

    jobs: tuple[JobRecord, ...]
    taken_at: float = field(default_factory=time.time)

    def pending(self) -> list[JobRecord]:
        return list(self._pending)

    def running(self) -> list[JobRecord]:
        return list(self._running)

    # computed once: a daemon's cycle asks several times (a snapshot never changes)
    @functools.cached_property
    def _pending(self) -> tuple[JobRecord, ...]:
        return tuple(j for j in self.jobs if j.state in _QUEUED)

    @functools.cached_property
    def _running(self) -> tuple[JobRecord, ...]:
        return tuple(j for j in self.jobs if j.state in _ACTIVE)


# words in a scheduler's message that mean "try again later", not "your request is wrong"
_TRANSIENT = re.compile(r"Socket timed out|Resource temporarily unavailable|Unable to contact "
                        r"slurm controller|Connection refused|try again|Zero Bytes were transmitted"
                        r"|communication failure|timed out", re.IGNORECASE)


#: which failures of writing a cancel reason are retried (it is idempotent): not Slurm 22.05's
#: "the DB index is being set", which slurmctld answers after holding the request 5 s, and which
#: lasts for a job started just before slurmctld restarted until that job ends: retrying it held
#: a teardown for a minute and more, the cancel it was there to explain waiting behind it
def _annotate_retried(message: str) -> bool:
    return "DB index" not in message


def asks_again(retry: bool | Callable[[str], bool], message: str) -> bool:
    """Whether a caller's ``retry`` (all transient failures, none, or a test of the message)
    takes a transient failure with ``message``."""
    return bool(retry) and (not callable(retry) or retry(message))


#: a will-run answer at most this many seconds ahead means "the resources are free now"
WILL_RUN_NOW = 65.0


class Scheduler:
    """Runs one backend module's commands with a timeout and retries of transient errors."""

    def __init__(self, backend: ModuleType, *, timeout: float = 30.0, retries: int = 2,
                 retry_delay: float = 1.0):
        self.backend = backend
        self.name = backend.NAME
        self.timeout = timeout
        self.retries = retries
        self.retry_delay = retry_delay
        # what the previous snapshot parsed, for the backend to reuse (a daemon polls)
        self._snapshot_lines: dict = {}
        self._snapshot_order: tuple[list, tuple] = ([], ())

    # -- running -------------------------------------------------------------------------
    def _run(self, argv: list[str], *, mutating: bool,
             retry: bool | Callable[[str], bool] = True) -> str:
        """Run ``argv``; ``retry``: whether transient failures are retried, or which (a test of
        the failure's message)."""
        attempt = 0
        while True:
            try:
                return get_runner().run(argv, timeout=self.timeout, mutating=mutating).stdout
            except CommandError as err:
                message = (err.stderr or err.stdout or str(err)).strip()
                transient = err.returncode is None or bool(_TRANSIENT.search(message))
                if transient and asks_again(retry, message) and attempt < self.retries:
                    attempt += 1
                    pause = self.retry_delay * (2 ** (attempt - 1)) * (1 + random.random() / 2)
                    log.warning("%s: transient error, retry %d in %.1fs: %s", argv[0], attempt,
                                pause, message)
                    time.sleep(pause)
                    continue
                raise SchedulerError(f"{argv[0]}: {_scheduler_message(message)}") from err

    # -- the contract ------------------------------------------------------------------------
    def submit(self, spec: SubmitSpec) -> str:
        """Submit and return the job id. Not retried: a retry could submit twice."""
        stdout = self._run(self.backend.build_submit(spec), mutating=True, retry=False)
        if get_runner().dry_run:
            return f"<{spec.job_name}>"
        return self.backend.parse_submit(stdout)

    def query(self, job_ids: Sequence[str] | None = None) -> list[JobRecord]:
        """Jobs the scheduler still holds in its queue (all of them with ``job_ids=None``)."""
        return self.backend.parse_query(self._run(self.backend.build_query(job_ids), mutating=False))

    def history(self, job_ids: Sequence[str]) -> list[JobRecord]:
        """Finished jobs from accounting (sacct, PBS history)."""
        argv = self.backend.build_history(job_ids)
        return self.backend.parse_history(self._run(argv, mutating=False))

    def snapshot(self) -> QueueSnapshot:
        """One batched query of the whole queue, in priority order.

        The backend's ``build_snapshot``/``parse_snapshot`` may ask for fewer fields than
        ``query`` (a daemon polls the whole queue every cycle): the records carry state, reason,
        name, queue, user, nodes, priority, dependency and submit/start times.
        """
        stdout = self._run(self.backend.build_snapshot(), mutating=False)
        records = self.backend.parse_snapshot(stdout, self._snapshot_lines)
        # the same records as last time (each reused whole): the same order
        last_records, last_order = self._snapshot_order
        if len(records) != len(last_records) or any(
                a is not b for a, b in zip(records, last_records)):
            last_order = tuple(self.backend.order_by_priority(records))
            self._snapshot_order = (records, last_order)
        return QueueSnapshot(last_order)

    def lookup(self, job_ids: Sequence[str], *, missing_ok: bool = False) -> dict[str, JobRecord]:
        """The state of each job: queue first, then accounting for the ones gone from it.

        A job that neither knows raises :class:`UnknownJobError`, or with ``missing_ok`` is
        left out of the answer (the scheduler said it does not know it: no error hides there).
        """
        wanted = list(dict.fromkeys(str(j) for j in job_ids))
        found: dict[str, JobRecord] = {}
        try:
            for job_record in self.query(wanted):
                if job_record.job_id in wanted:
                    found[job_record.job_id] = job_record
        except SchedulerError as err:
            # squeue -j with an id it forgot fails outright; accounting still knows it
            if not self.backend.is_unknown_job_error(str(err)):
                raise
        # accounting for the jobs gone from the queue, and for the ended ones the queue gave
        # without their exit status (Slurm's query of a few jobs asks for fewer fields); for
        # the jobs still live only where the queue's word on them is not the last (Torque:
        # see the backend's QUEUE_HOLDS_LIVE_JOBS), and for a completing one, whose script
        # ended: accounting already has how it ended while its epilog runs
        live_in_queue = self.backend.QUEUE_HOLDS_LIVE_JOBS
        missing = [j for j in wanted if j not in found
                   or (not found[j].state.is_final
                       and (not live_in_queue or found[j].state is JobState.COMPLETING))
                   or (found[j].state.is_final and found[j].exit_code is None)]
        if missing:
            try:
                history = self.history(missing)
            except SchedulerError as err:
                # accounting that forgot every one of them says so (Torque: qstat exit 153)
                if not self.backend.is_unknown_job_error(str(err)):
                    raise
                history = []
            for job_record in history:
                if job_record.job_id in missing and (job_record.job_id not in found or (
                        job_record.state.is_final
                        and not _older(job_record, found[job_record.job_id]))):
                    found[job_record.job_id] = job_record
        unknown = [j for j in wanted if j not in found]
        if unknown and not missing_ok:
            raise UnknownJobError(f"unknown job id{'s' if len(unknown) > 1 else ''}: "
                                  + ", ".join(unknown))
        return found

    def cancel(self, job_ids: Sequence[str], reason: str | None = None) -> None:
        """Cancel ``job_ids``; with a ``reason``, first write it where the scheduler's users
        look (Slurm: the job's comment, which ``squeue -o %k`` and ``sacct -o Comment`` show),
        where the backend has such a place. Writing it is best effort: the cancel is what
        counts, so a failure to annotate is logged and the jobs are cancelled all the same."""
        if not job_ids:
            return
        if reason:
            self.annotate(job_ids, reason)
        self._run(self.backend.build_cancel(list(job_ids)), mutating=True)

    def queued_from(self, folder: str) -> list[str]:
        """Ids of the queued jobs whose batch script lies in ``folder`` (a chain's spool
        folder): what a crash between a submission and its record left behind. Empty where the
        backend cannot tell."""
        argv = self.backend.build_scripts_query()
        if argv is None:
            return []
        inside = folder.rstrip("/") + "/"
        return [job_id for job_id, script in
                self.backend.parse_scripts_query(self._run(argv, mutating=False))
                if script.startswith(inside)]

    def annotate(self, job_ids: Sequence[str], reason: str) -> bool:
        """Write why scratchkeeper cancels ``job_ids`` where the scheduler's users look, before
        the cancel (best effort; False where the backend has no such place or it failed)."""
        argv = self.backend.build_annotate(list(job_ids), cancel_comment(reason))
        if argv is None or not job_ids:
            return False
        try:
            self._run(argv, mutating=True, retry=_annotate_retried)
        except SchedulerError as err:
            log.warning("writing the cancel reason of %s: %s", ", ".join(job_ids), err)
            return False
        return True

    def hold(self, job_ids: Sequence[str]) -> None:
        if job_ids:
            self._run(self.backend.build_hold(list(job_ids)), mutating=True)

    def release(self, job_ids: Sequence[str]) -> None:
        if job_ids:
            self._run(self.backend.build_release(list(job_ids)), mutating=True)

    def start_estimates(self, job_ids: Sequence[str]) -> dict[str, float | None]:
        """The scheduler's expected start of each pending job (None: it has none)."""
        if not job_ids:
            return {}
        argv = self.backend.build_start_estimate(list(job_ids))
        return self.backend.parse_start_estimate(self._run(argv, mutating=False))

    def expected_start(self, job_id: str) -> tuple[float | None, str]:
        """When ``job_id`` is expected to start, and whose estimate that is: the backfill
        scheduler's own, else (a job waiting on a dependency has none) the scheduler's will-run
        answer for the same resources, else unknown (None)."""
        own = self.start_estimates([job_id]).get(job_id)
        if own is not None:
            return own, "backfill"
        if self.backend.build_request is None:
            return None, "unknown"
        request = self.backend.parse_request(
            self._run(self.backend.build_request(job_id), mutating=False))
        argv = self.backend.build_will_run(request) if request is not None else []
        if not argv:
            return None, "unknown"
        asked = time.time()
        try:
            result = get_runner().run(argv, timeout=self.timeout, mutating=False)
        except CommandError as err:
            log.info("job %s: no will-run estimate: %s", job_id, (err.stderr or str(err)).strip())
            return None, "unknown"
        when = self.backend.parse_will_run(result.stderr + result.stdout)
        if when is None:
            return None, "unknown"
        # Slurm 22.05 answers "now + 60 s" for resources that are free now (seen on an idle
        # cluster): an answer that close means now, or a held-back stage-in would be moved a
        # minute ahead at every sweep and never start
        return (asked if when - asked <= WILL_RUN_NOW else when), "will-run"

    def set_begin(self, job_id: str, when: float | None) -> None:
        """Hold pending ``job_id`` back until ``when`` (epoch seconds), or start it now."""
        self._run(self.backend.build_set_begin(job_id, when), mutating=True)

    def find_by_name(self, name: str) -> list[str]:
        """Ids of the jobs named ``name`` (a name made unique by the caller), oldest first."""
        found: list[str] = []
        for argv in self.backend.build_find_by_name(name):
            for job_id in self.backend.parse_find_by_name(self._run(argv, mutating=False)):
                if job_id not in found:
                    found.append(job_id)
        return sorted(found, key=lambda j: (len(j), j))

    def system_nodes(self, queue: str | None = None) -> int:
        """Node count of the system (S in the replication window): ``queue``'s nodes where
        the scheduler can say, every node otherwise."""
        return self.backend.parse_nodes(self._run(self.backend.build_nodes(queue),
                                                  mutating=False))


def _scheduler_message(message: str) -> str:
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return " / ".join(lines[-3:]) if lines else "failed with no message"


def _older(record: JobRecord, queued: JobRecord) -> bool:
    """Whether accounting's ``record`` is of an earlier job than the one the queue holds under
    the same id: ids are handed out again (slurmctld's state reset, MaxJobId wrapped), and
    sacct keeps the earlier job's record, ended long ago. Submit times are whole seconds."""
    return (record.submit_time is not None and queued.submit_time is not None
            and record.submit_time < queued.submit_time - 1)
