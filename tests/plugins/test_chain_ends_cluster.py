"""A chain made by the plugins (sbatch --stage-in, held by job_submit.lua, chained by
`scratchkeeper spank chain`) whose stage-in ends any way but success: the compute job must not
stay pending for ever, and `status` must say why the chain ended.

The stage-in reads from a listener that accepts connections and never answers, so it runs until
the test ends it: scancel, its walltime (EndTime moved to now: Slurm's own time-limit check ends
it as TIMEOUT within 30 s, instead of a one-minute --time), or SIGKILL to its batch shell alone,
so its `stage fail` never runs. The chain service's sweep is run once, as a restarted service
would (a new process on the same state database).
"""

from __future__ import annotations

import datetime
import json
import subprocess
import time
import uuid

import pytest

from scratchkeeper.config import load_config
from scratchkeeper.planner import records
from scratchkeeper.state import StateStore
from stalled_jobs import silent_source, squeue_state, wait_running  # noqa: F401 (a fixture)

from .conftest import sk

ENDINGS = {
    # how the stage-in is ended -> (sacct state, words status must use); the exit code is the
    # batch step's (0:15, from slurmctld) or the allocation's (0:0, from sacct), whichever the
    # sweep read first
    "scancel": ("CANCELLED", "(cancelled)"),
    "walltime": ("TIMEOUT", "(its walltime ran out)"),
    "killed-before-reporting": ("FAILED", "exit code 0:9 (killed by signal 9)"),
}


def end_stage_in(how: str, job_id: str) -> None:
    if how == "scancel":
        argv = ["scancel", job_id]
    elif how == "walltime":
        soon = datetime.datetime.now() + datetime.timedelta(seconds=2)
        argv = ["scontrol", "update", f"JobId={job_id}", f"EndTime={soon:%Y-%m-%dT%H:%M:%S}"]
    else:
        # RUNNING comes before slurmd has started the batch shell, and a signal sent then is
        # lost (CI once saw the stage-in run on for 90 s): send it until the job leaves RUNNING
        # (the test's assertions then say whether it ended as it should)
        for _ in range(10):
            subprocess.run(["scancel", "--batch", "--signal=KILL", job_id], check=False,
                           capture_output=True, timeout=30)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and squeue_state(job_id)[0] == "RUNNING":
                time.sleep(0.2)
            if squeue_state(job_id)[0] != "RUNNING":
                return
        return
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


def wait_never_satisfied(job_id: str, timeout: float = 30.0) -> tuple[str, str]:
    """The job's state once slurmctld has seen that its dependency failed (it re-checks
    dependencies on its own schedule)."""
    deadline = time.monotonic() + timeout
    state = squeue_state(job_id)
    while state[1] != "DependencyNeverSatisfied" and time.monotonic() < deadline:
        time.sleep(0.5)
        state = squeue_state(job_id)
    return state


@pytest.mark.parametrize("how", list(ENDINGS))
def test_a_stage_in_that_ends_without_success_ends_the_plugin_chain(plugins, jobs, local_cluster,
                                                                    silent_source, tmp_path,  # noqa: F811
                                                                    how):
    # The cluster's own site and state database: its chain service (if it runs) and this test
    # then chain the job into the same place, whichever comes first.
    config = local_cluster.site_config
    slurm_state, words = ENDINGS[how]
    scratch = local_cluster.scratch_root / "tests" / ("ends-" + uuid.uuid4().hex[:8])
    marker = scratch / "compute-ran"
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\n#SBATCH --output=/dev/null\n"
                      f"#SBATCH --stage-in={silent_source}/in.dat:{scratch}/in.dat\n"
                      f"touch {marker}\n")
    job_id = jobs.sbatch(str(script), cwd=tmp_path).stdout.strip()
    sk(config, "spank", "chain", job_id)
    store = records.open_records(StateStore(load_config(config).state.database))
    chain_id = records.chain_of_job(store, job_id)
    rows = {row["role"]: row for row in records.chain_jobs(store, chain_id)}
    stage_in = rows["stage-in"]["job_id"]
    jobs.track([stage_in])
    wait_running(stage_in)

    end_stage_in(how, stage_in)
    assert local_cluster.wait_for_job(stage_in, timeout=90) == slurm_state
    # Slurm alone leaves the compute job waiting for ever (its dependency was set by
    # `scontrol update`, which cannot ask for kill-on-invalid-dep), unless the cluster's chain
    # service has swept meanwhile
    state, reason = wait_never_satisfied(job_id)
    assert state in ("PENDING", "CANCELLED", "")
    assert state != "PENDING" or reason == "DependencyNeverSatisfied"

    sk(config, "spank", "chain", job_id)  # the service's next cycle, as a new process
    assert local_cluster.wait_for_job(job_id, timeout=60) == "CANCELLED"
    assert not marker.exists()

    status = sk(config, "status", job_id, "--json", check=False)
    assert status.returncode == 1
    report = json.loads(status.stdout)
    assert report["state"] == "stage-in-failed"
    assert report["reason"].startswith(f"stage-in job {stage_in} ended {slurm_state}, exit code")
    assert words in report["reason"]
    by_role = {job["role"]: job for job in report["jobs"]}
    assert by_role["stage-in"]["native_state"] == slurm_state
    assert by_role["compute"]["state"] == "cancelled"
    assert by_role["compute"]["reason"] == "cancelled: " + report["reason"]
    assert "waiting" not in by_role["compute"]["reason"]
