"""The head's answers to what other hosts once read or wrote in the state database themselves.

On a site of many hosts only the head opens the state database (docs/topology.rst). A login
node's ``status`` and a compute node's epilog (``replicas job-ended``) or a job's ``replicas
closed`` therefore ask the head's service, which answers here with the caller's uid from its
MUNGE credential (or ``SO_PEERCRED`` on the head's Unix socket):

    {"op": "chains"}                            the caller's recent chains (root: everyone's)
    {"op": "chain-status", "ident": J|C}        one chain, by its id or a job's (its owner's)
    {"op": "job-ended", "job_ids": [J, ...]}    the scheduler's epilog, for replicad (root, or
                                                recovery.hook_user)
    {"op": "file-closed", "path": F, "job": J}  a job closed a replicated input (its owner's)

and a data job's ``stage commit``/``stage fail`` (:func:`stage_report`), from a data-transfer
node or the head.

Each is the same function the command runs on the head; nothing here decides anything the
command would not.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

from ..errors import InputError, PermissionDenied
from ..ownership import Owner
from ..planner import records as planner_records
from ..planner.commit import commit_stage, fail_stage
from ..planner.status import chain_status, chain_summaries, resolve_chain
from ..planner.transfer_timing import check_timings

OPS = ("chains", "chain-status", "job-ended", "file-closed")

#: A scheduler job id as the epilog passes it: Slurm's 123, 123_4 (array), 123+1 (het) or
#: PBS's 123.server, 123[4].server
_JOB_ID = re.compile(r"^[0-9]+(?:[_+][0-9]+|\[[0-9]*\])?(?:\.[A-Za-z0-9.-]+)?$")
#: job ids one epilog request may name (a node's epilog names one; a site's hook a few)
MAX_JOB_IDS = 256


def check_job_ids(job_ids: object) -> list[str]:
    """The request's job ids, each a scheduler's job id; anything else is refused whole."""
    if not isinstance(job_ids, list) or not job_ids or len(job_ids) > MAX_JOB_IDS:
        raise InputError(f"'job_ids' must be a list of 1 to {MAX_JOB_IDS} job ids")
    for job_id in job_ids:
        if not isinstance(job_id, str) or len(job_id) > 128 or not _JOB_ID.match(job_id):
            raise InputError(f"job id {str(job_id)[:64]!r}: expected a scheduler job id")
    return job_ids


def answer(service, op: str, message: dict, caller: Owner, *,
           authorise: Callable[[object, Owner], str], may_hook: Callable[[int], bool]) -> dict:
    """The reply to one of :data:`OPS` for ``caller`` (``authorise``: the service's check that a
    path is the caller's own file; ``may_hook``: whether a uid may speak for the scheduler)."""
    store, config, uid = service.store, service.config, caller.uid
    if op == "chains":
        planner_records.open_records(store)
        rows = planner_records.recent_chains(store, None if uid == 0 else uid)
        return {"chains": [c.to_dict() for c in chain_summaries(store, config, rows)]}
    if op == "chain-status":
        ident = message.get("ident")
        if not isinstance(ident, str) or not 0 < len(ident) <= 128:
            raise InputError("chain-status needs an 'ident' (a chain id or a job id)")
        planner_records.open_records(store)
        chain_id = resolve_chain(store, ident)
        return {"status": chain_status(store, config, chain_id, caller_uid=uid).to_dict()}
    if op == "job-ended":
        if not may_hook(uid):
            raise PermissionDenied(f"job-ended is for the scheduler's epilog only (root or "
                                   f"recovery.hook_user {config.recovery.hook_user!r})")
        job_ids = check_job_ids(message.get("job_ids"))
        state = service.replication_state()
        for job_id in job_ids:
            state.add_event("job-ended", job_id=job_id, source="head")
        return {"recorded": len(job_ids)}
    if op == "file-closed":
        full = authorise(message.get("path"), caller)
        job = message.get("job", "")
        if not isinstance(job, str) or (job and not _JOB_ID.match(job)):
            raise InputError(f"'job' must be a scheduler job id or empty, got {str(job)[:64]!r}")
        event = service.replication_state().add_event("file-closed", job_id=job, path=full,
                                                      source="head")
        return {"event": event}
    raise InputError(f"unknown op {op[:64]!r}")


def stage_report(service, op: str, message: dict, uid: int) -> dict:
    """A data job's ``stage commit``/``stage fail``, done here because the data job runs as
    its user, who cannot write the state database; only for that user's own chains."""
    chain_id, job_key = message.get("chain"), message.get("job")
    if not (isinstance(chain_id, str) and chain_id and isinstance(job_key, str) and job_key):
        raise InputError(f"{op} needs a 'chain' and a 'job'")
    if op == "stage-commit":
        layout = message.get("layout")
        if layout is not None and not isinstance(layout, str):
            raise InputError("stage-commit: 'layout' must be a string")
        timings = check_timings(message.get("timings"))
        files = commit_stage(service.store, service.config, chain_id, job_key, for_uid=uid,
                             backend=service.backend, layout=layout, timings=timings)
        service.request_lines.log(uid, "chain %s: %s committed for uid %d (%d file(s))",
                                  chain_id, job_key, uid, len(files))
        return {"files": [dataclasses.asdict(f) for f in files]}
    line = message.get("line")
    line = line if isinstance(line, int) and not isinstance(line, bool) and line > 0 else None
    cancelled = fail_stage(service.store, service.config, chain_id, job_key,
                           str(message.get("reason") or "")[:4000], line, for_uid=uid)
    service.request_lines.log(uid, "chain %s: %s failed, reported by uid %d; cancelled %s",
                              chain_id, job_key, uid, cancelled or "nothing")
    return {"cancelled": cancelled}
