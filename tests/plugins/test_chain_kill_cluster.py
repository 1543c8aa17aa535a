"""The chain service killed with SIGKILL in the middle of chaining a held job, on the real Slurm
of the local cluster (the failure an admin met: one held data job left pending for ever, and
`status` showing the abandoned chain as ``submit-failed`` although the job ran).

The service is a child process that sends itself SIGKILL at the worst moment: right after the
held stage-in's ``sbatch`` returned and before its job id was written to the state database.
Then the service's next cycle runs as a restarted service would (a new process on the same state
database). It must find the data job nobody recorded, cancel it with a reason, chain the job
again, and the job must run with its data; `status` must say the old chain was replaced and what
became of the job, and the backlog must show nothing left behind.
"""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys

import pytest

from scratchkeeper.chain_service.attach import PENDING
from scratchkeeper.planner import records
from scratchkeeper.planner.spool import spool_dir
from scratchkeeper.state import StateStore

from .conftest import sacct, sk
from .test_plugins_cluster import admin_comment, chain_rows, reading_script

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("own_services")]

# `scratchkeeper -c SITE spank chain JOB`, killed (SIGKILL, no handler runs) as soon as a data
# job's id is to be recorded; the compute job's own record is not a data job's
KILLED_SERVICE = """
import os, signal, sys
from scratchkeeper.cli import main
from scratchkeeper.planner import records

recorded = records.set_job_submitted

def killed(store, chain_id, key, job_id):
    if key != "compute":
        os.kill(os.getpid(), signal.SIGKILL)
    return recorded(store, chain_id, key, job_id)

records.set_job_submitted = killed
sys.exit(main(["-c", sys.argv[1], "spank", "chain", sys.argv[2]]))
"""


def queued_scripts() -> dict[str, str]:
    """Job id -> batch script of every job in the queue."""
    out = subprocess.run(["squeue", "-h", "-o", "%i|%o"], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)


def test_a_chain_service_killed_mid_chain_leaves_no_data_job_behind(plugins, jobs, site, source,
                                                                     local_cluster):
    path, data = source("killed.dat", 200_003)
    uri = f"{local_cluster.gridftp_url}{path}"
    staged = site.root / "scratch" / "killed" / "killed.dat"
    result_file = site.root / "killed-sha.txt"
    script = site.root / "killed.sh"
    script.write_text(reading_script(site, "killed-chain", f"#SBATCH --stage-in={uri}:{staged}",
                                     staged, result_file))
    job_id = jobs.sbatch(str(script), cwd=site.root).stdout.strip()
    assert admin_comment(job_id).startswith(PENDING)

    killed = subprocess.run([sys.executable, "-c", KILLED_SERVICE, str(site.config_path), job_id],
                            capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    store = records.open_records(StateStore(site.config.state.database))
    first = records.chain_of_job(store, job_id)
    assert first is not None
    first_rows = {row["role"]: row for row in records.chain_jobs(store, first)}
    assert not first_rows["stage-in"]["job_id"]  # submitted, never recorded
    spool = str(spool_dir(site.config, first))
    (orphan,) = [jid for jid, path in queued_scripts().items() if path.startswith(spool)]
    jobs.track([orphan])

    # the service's next cycle: a restarted service
    sk(site, "spank", "chain", job_id)
    assert local_cluster.wait_for_job(orphan, timeout=60) == "CANCELLED"
    assert f"chaining job {job_id} was interrupted" in sacct(orphan, "Comment")[0]
    _, second, rows = chain_rows(site, job_id)
    assert second != first
    jobs.track([rows["stage-in"]["job_id"]])
    assert local_cluster.wait_for_job(job_id, timeout=120) == "COMPLETED"
    assert result_file.read_text().strip() == hashlib.sha256(data).hexdigest()
    assert orphan not in queued_scripts()

    old = json.loads(sk(site, "status", first, "--json").stdout)
    assert (old["state"], old["recorded_state"], old["replaced_by"]) == \
        ("completed", records.SUBMIT_FAILED, second)
    listed = {line.split()[0]: line for line in sk(site, "status").stdout.splitlines()
              if line.startswith("sk")}
    assert f"(replaced by {second})" in listed[first]
    assert listed[second].split()[3] == "completed"
    backlog = json.loads(sk(site, "status", "--backlog", "--json").stdout)
    assert backlog["orphans"] == [] and backlog["to_chain"] == []
    assert not [j for j in backlog["unrecorded"] if j["job_id"] == orphan]
