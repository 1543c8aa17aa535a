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
import socket
import subprocess
import time

import pytest

from scratchkeeper.planner import records
from scratchkeeper.state import StateStore

from .conftest import sk

pytestmark = pytest.mark.cluster

ENDINGS = {
    # how the stage-in is ended -> (sacct state, words status must use)
    "scancel": ("CANCELLED", "CANCELLED, exit code 0:15 (cancelled)"),
    "walltime": ("TIMEOUT", "(its walltime ran out)"),
    "killed-before-reporting": ("FAILED", "FAILED, exit code 0:9 (killed by signal 9)"),
}


@pytest.fixture
def silent_source():
    """An http:// source that accepts the connection and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()


def squeue_state(job_id: str) -> tuple[str, str]:
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T %r"], capture_output=True,
                         text=True, timeout=30).stdout.split()
    return (out[0], out[1]) if len(out) == 2 else ("", "")


def wait_running(job_id: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if squeue_state(job_id)[0] == "RUNNING":
            return
        time.sleep(0.5)
    pytest.fail(f"stage-in job {job_id} did not start within {timeout:g}s")


def end_stage_in(how: str, job_id: str) -> None:
    if how == "scancel":
        argv = ["scancel", job_id]
    elif how == "walltime":
        soon = datetime.datetime.now() + datetime.timedelta(seconds=2)
        argv = ["scontrol", "update", f"JobId={job_id}", f"EndTime={soon:%Y-%m-%dT%H:%M:%S}"]
    else:
        argv = ["scancel", "--batch", "--signal=KILL", job_id]
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


@pytest.mark.parametrize("how", list(ENDINGS))
def test_a_stage_in_that_ends_without_success_ends_the_plugin_chain(plugins, jobs, site,
                                                                    local_cluster, silent_source,
                                                                    how):
    slurm_state, words = ENDINGS[how]
    staged = site.root / "scratch" / "in.dat"
    marker = site.root / "compute-ran"
    script = site.root / "job.sh"
    script.write_text(f"#!/bin/bash\n#SBATCH --output=/dev/null\n"
                      f"#SBATCH --stage-in={silent_source}/in.dat:{staged}\ntouch {marker}\n")
    job_id = jobs.sbatch(str(script), cwd=site.root).stdout.strip()
    sk(site, "spank", "chain", job_id)
    store = records.open_records(StateStore(site.config.state.database))
    chain_id = records.chain_of_job(store, job_id)
    rows = {row["role"]: row for row in records.chain_jobs(store, chain_id)}
    stage_in = rows["stage-in"]["job_id"]
    jobs.track([stage_in])
    wait_running(stage_in)

    end_stage_in(how, stage_in)
    assert local_cluster.wait_for_job(stage_in, timeout=90) == slurm_state
    # Slurm alone leaves the compute job waiting for ever (its dependency was set by
    # `scontrol update`, which cannot ask for kill-on-invalid-dep)
    assert squeue_state(job_id) == ("PENDING", "DependencyNeverSatisfied")

    swept = sk(site, "spank", "chain", job_id).stdout  # the service's next cycle
    assert f"chain {chain_id}: stage-in job {stage_in} ended {slurm_state}" in swept
    assert local_cluster.wait_for_job(job_id, timeout=60) == "CANCELLED"
    assert not marker.exists()

    status = sk(site, "status", job_id, "--json", check=False)
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
