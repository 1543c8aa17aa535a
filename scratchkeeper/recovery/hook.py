"""The pre-execution hook: verify a job's staged inputs and recover them before it starts.

Slurm runs ``scratchkeeper recovery hook`` as ``PrologSlurmctld`` (``$SLURM_JOB_ID``), PBS as
its prologue (first argument, or ``$PBS_JOBID``). It exits 0 when every staged input of the job
is whole (after patching if needed) and non-zero with one line naming the lost file and why
only when recovery is impossible.
"""

from __future__ import annotations

import time

from ..errors import InputError
from ..planner import records as planner_records
from . import records

#: files named in a check-job reply (the reason and the list); the counts cover them all
MAX_LISTED = 20
#: characters of its reason (20 paths of up to 4 KiB each would be 80 KiB)
MAX_REASON = 16 << 10


def job_inputs(store, job_id: str) -> list[str]:
    """Staged files (and declared inputs) of the chain the job belongs to."""
    chain_id = planner_records.chain_of_job(store, job_id)
    if chain_id is None:
        return []
    paths = [row["path"] for row in planner_records.staged_files(store, chain_id)
             if row["state"] == "staged"]
    paths += planner_records.declared_inputs(store, chain_id)
    return list(dict.fromkeys(paths))


def check_job(service, job_id: str, timeout: float) -> dict:
    """Check every input of ``job_id`` through the service; wait for patches up to ``timeout``."""
    if not job_id or not job_id.replace(".", "").replace("_", "").isalnum():
        raise InputError(f"job id {job_id!r}: expected the scheduler's job id")
    deadline = time.monotonic() + timeout
    results = []
    for path in job_inputs(service.store, job_id):
        if not service.backend.exists(path):
            continue  # a declared input that is no managed file (outside scratch): not ours
        status = service.wait_for(path, max(0.0, deadline - time.monotonic()))
        results.append(status)
    broken = [s for s in results if not s["whole"]]
    reason = "; ".join(f"{s['path']}: {s['reason'] or s['state']}"
                       + (" (timed out waiting for the patch)" if s.get("timed_out") else "")
                       for s in broken[:MAX_LISTED])
    if len(broken) > MAX_LISTED:
        reason += f"; and {len(broken) - MAX_LISTED} more"
    # the reply of a job with thousands of inputs stays one line a prolog reads whole: the
    # files that are not whole, the first MAX_LISTED of them, and the counts
    return {"job_id": job_id, "whole": not broken, "files": broken[:MAX_LISTED],
            "reason": reason[:MAX_REASON], "checked": len(results), "not_whole": len(broken),
            "recovering": [s["path"] for s in broken[:MAX_LISTED]
                           if s["state"] == records.RECOVERING]}
