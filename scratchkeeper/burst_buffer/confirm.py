"""The scheduler as the burst-buffer stages use it: a call that got no answer is never taken for
a failure before what happened is known.

slurmctld under load answers late or not at all: ``sbatch`` says ``Socket timed out`` after the
job was queued, ``squeue`` is killed at its timeout. A stage that gave up then would lose its
job (Slurm 22.05 never runs a failed ``data_in`` again: the job stays held for ever) or, tried
again blindly, run a data job twice. So, in :class:`ConfirmingScheduler`:

* a read (``squeue``, ``sacct``) or an idempotent change (``scancel``, ``scontrol update``,
  ``scontrol release``) that got no answer is asked again, for up to :data:`PATIENCE` seconds;
* a submission is made held. When ``sbatch`` gives no clear answer, the queue is asked for the
  job by its script (each data job has a script of its own in the chain's spool folder): found,
  it is kept; not found within a grace, it is submitted again. The kept job is then released.
  A copy the controller queued late is held, so it never runs, and :meth:`cancel_copies`
  cancels it once the stage is done.

A definite refusal (``sbatch: error: Invalid partition``) fails at once, as before.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from types import ModuleType

from ..config import SiteConfig
from ..errors import CommandError, SchedulerError
from ..schedulers import Scheduler, get_scheduler
from ..schedulers.base import _TRANSIENT, SubmitSpec, asks_again

log = logging.getLogger(__name__)

#: how long a stage asks again a scheduler call that got no answer (slurmctld restarting or
#: swamped) before it fails; data_in and data_out run under burst_buffer.conf's timeouts (hours)
PATIENCE = 600.0
#: seconds between two askings
PAUSE = 5.0
#: a submission without an answer is looked for in the queue for this many command timeouts
#: before it is made again (the controller may still be working through the request)
GRACE_TIMEOUTS = 2


def is_transient(err: BaseException | None) -> bool:
    """Whether ``err``, or what caused it, is a scheduler command that got no clear answer:
    killed at its timeout, or a message that means "try again later"."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, CommandError):
            message = err.stderr or err.stdout or str(err)
            return err.returncode is None or bool(_TRANSIENT.search(message))
        err = err.__cause__ or err.__context__
    return False


class ConfirmingScheduler(Scheduler):
    """:class:`Scheduler` whose unanswered calls are asked again, and whose submissions are
    confirmed in the queue before they are made again (the module's docstring)."""

    def __init__(self, backend: ModuleType, *, timeout: float = 30.0, retries: int = 2,
                 patience: float = PATIENCE, pause: float = PAUSE):
        super().__init__(backend, timeout=timeout, retries=retries)
        self.patience, self.pause = patience, pause
        #: script path -> the job id kept for it
        self.kept: dict[str, str] = {}
        #: the script paths whose sbatch got no clear answer (a late copy may be queued)
        self.unanswered: set[str] = set()

    def _run(self, argv: list[str], *, mutating: bool,
             retry: bool | Callable[[str], bool] = True) -> str:
        deadline = time.monotonic() + self.patience
        while True:
            try:
                return super()._run(argv, mutating=mutating, retry=retry)
            except SchedulerError as err:
                if not is_transient(err) or not asks_again(retry, str(err)) \
                        or time.monotonic() >= deadline:
                    raise
                log.warning("%s: no answer (%s); asking again in %g s", argv[0], err, self.pause)
                time.sleep(self.pause)

    def submit(self, spec: SubmitSpec) -> str:
        """Submit held, confirm, release (unless ``spec`` asks for a held job); the job id."""
        held = dataclasses.replace(spec, hold=True)
        try:
            job_id = super().submit(held)
        except SchedulerError as err:
            if not is_transient(err):
                raise
            job_id = self._find_or_submit_again(held, err)
        self.kept[spec.script_path] = job_id
        if not spec.hold:
            self.release([job_id])
        return job_id

    def _find_or_submit_again(self, spec: SubmitSpec, err: SchedulerError) -> str:
        """``sbatch`` of ``spec`` got no clear answer (``err``): the job the queue holds for its
        script, or, when none shows up within the grace, the job of a new submission."""
        self.unanswered.add(spec.script_path)
        deadline = time.monotonic() + self.patience
        while True:
            grace = min(time.monotonic() + GRACE_TIMEOUTS * self.timeout, deadline)
            while True:
                found = self.queued_with_script(spec.script_path)
                if found:
                    log.warning("%s: sbatch gave no clear answer (%s), but job %s is queued: "
                                "kept", spec.script_path, err, found[0])
                    return found[0]
                if time.monotonic() >= grace:
                    break
                time.sleep(self.pause)
            if time.monotonic() >= deadline:
                raise SchedulerError(f"sbatch {spec.script_path}: no answer for "
                                     f"{self.patience:g} s and no job of it queued: {err}"
                                     ) from err
            log.warning("%s: sbatch gave no clear answer (%s) and no job of it is queued: "
                        "submitting it again", spec.script_path, err)
            try:
                return super().submit(spec)
            except SchedulerError as again:
                if not is_transient(again):
                    raise
                err = again

    def queued_with_script(self, script_path: str) -> list[str]:
        """Ids of the queued jobs whose batch script is ``script_path``, oldest first."""
        argv = self.backend.build_scripts_query()
        if argv is None:
            raise SchedulerError(f"{self.name}: cannot list jobs by their script, so a "
                                 "submission that got no answer cannot be confirmed")
        found = [job_id for job_id, script in
                 self.backend.parse_scripts_query(self._run(argv, mutating=False))
                 if script == script_path]
        return sorted(found, key=int)

    def cancel_copies(self) -> list[str]:
        """Cancel what a late controller queued of the submissions that got no answer, beside
        the job kept for each (held: none of them ran); the ids cancelled."""
        copies: list[str] = []
        for path in sorted(self.unanswered):
            copies += [j for j in self.queued_with_script(path) if j != self.kept.get(path)]
        if copies:
            self.cancel(copies, reason="a second copy of a data job, queued late by a "
                                       "controller that did not answer its sbatch in time")
        return copies


def confirming_scheduler(config: SiteConfig) -> ConfirmingScheduler:
    """The site's Slurm, with its command timeout and retries, confirming."""
    plain = get_scheduler(config, "slurm")
    return ConfirmingScheduler(plain.backend, timeout=plain.timeout, retries=plain.retries)
