"""Chains on the real local cluster: GridFTP and HTTP stage-in, compute, stage-out; Slurm and PBS."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import uuid

import pytest

from scratchkeeper import digests
from scratchkeeper.config import load_config
from scratchkeeper.planner import records
from scratchkeeper.state import StateStore
from scratchkeeper.storage import open_backend
from stalled_jobs import silent_source, wait_running  # noqa: F401 (a fixture)


def sk(cluster, *args, config=None, check=True, cwd=None):
    """Run the real CLI; jobs it submits run in ``cwd`` (their output files land there)."""
    argv = [sys.executable, "-m", "scratchkeeper", "-c", str(config or cluster.site_config), *args]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=180, cwd=cwd)
    if check and result.returncode != 0:
        raise AssertionError(f"{argv} exit {result.returncode}: {result.stderr}")
    return result


@pytest.fixture
def work(local_cluster, tmp_path):
    """A unique name, an input in the source folder, and the scratch folder for this test."""
    name = "t" + uuid.uuid4().hex[:8]
    payload = os.urandom(1_234_567)
    (local_cluster.source_dir / f"{name}.dat").write_bytes(payload)
    scratch = local_cluster.scratch_root / "tests" / name
    return name, payload, scratch, tmp_path


def write_script(tmp_path, text):
    script = tmp_path / "job.sh"
    script.write_text(text)
    return script


def chain_script(cluster, name, scratch):
    gridftp = f"{cluster.gridftp_url}{cluster.source_dir}/{name}.dat"
    http = f"{cluster.http_source_url}{name}.dat"
    reader = f"{sys.executable} -m scratchkeeper -c {cluster.site_config}"
    return f"""#!/bin/bash
#SBATCH --job-name={name}
#STAGEIN -retry 1 -retry-delay 1
#STAGEIN {gridftp} {scratch}/in-gridftp.dat
#STAGEIN {http} {scratch}/in-http.dat
{reader} store cat {scratch}/in-gridftp.dat | sha256sum | cut -d' ' -f1 > {scratch}/result.txt
{reader} store cat {scratch}/in-http.dat | sha256sum | cut -d' ' -f1 >> {scratch}/result.txt
#STAGEOUT {scratch}/result.txt {cluster.gridftp_url}{cluster.sink_dir}/{name}.result
"""


@pytest.mark.parametrize("flavour", ["slurm", "pbs"])
def test_chain_stages_in_computes_and_stages_out(local_cluster, work, flavour):
    name, payload, scratch, tmp_path = work
    if flavour == "pbs":
        local_cluster.skip_without_torque()
    config_path = local_cluster.site_config if flavour == "slurm" else local_cluster.site_config_pbs
    script = write_script(tmp_path, chain_script(local_cluster, name, scratch))
    submitted = json.loads(sk(local_cluster, "submit", str(script), "--json",
                              config=config_path, cwd=tmp_path).stdout)
    roles = [job["role"] for job in submitted["jobs"]]
    assert roles == ["stage-in", "compute", "stage-out"]
    status = sk(local_cluster, "status", submitted["jobs"][1]["job_id"], "--json", "--wait", "150",
                config=config_path)
    report = json.loads(status.stdout)
    states = [j["state"] for j in report["jobs"]]
    if flavour == "slurm":
        assert report["state"] == "completed", report
        assert states == ["completed"] * 3, report
    else:
        # Slurm's Torque wrappers report a finished job as "C" with no exit status, so the
        # compute job's outcome is unknown to a PBS client; the data jobs report their own
        assert report["state"] in ("completed", "ended"), report
        assert states[0] == states[2] == "completed" and states[1] in ("completed", "ended"), report
    digest = hashlib.sha256(payload).hexdigest()
    # the compute job read both staged files through the store; stage-out pushed its result
    assert (local_cluster.sink_dir / f"{name}.result").read_text().split() == [digest, digest]
    # recovery metadata: in the state store and as extended attributes on the staged file
    config = load_config(config_path)
    store = records.open_records(StateStore(config.state.database))
    rows = {r["path"]: r for r in records.staged_files(store, submitted["chain_id"])}
    gridftp_file = str(scratch / "in-gridftp.dat")
    assert rows[gridftp_file]["source"] == f"{local_cluster.gridftp_url}{local_cluster.source_dir}/{name}.dat"
    assert rows[gridftp_file]["checksum"] == "sha256:" + digest
    assert rows[gridftp_file]["size"] == len(payload)
    backend = open_backend(config)
    assert backend.get_xattr(gridftp_file, "user.scratchkeeper.source") \
        == rows[gridftp_file]["source"].encode()
    assert backend.get_xattr(gridftp_file, "user.scratchkeeper.sha256") == digest.encode()
    # and the per-block CRC-32C a patch is checked against, from the same read
    blocks = digests.lookup(store, gridftp_file, digest, len(payload))
    assert blocks is not None and blocks.block_size == config.recovery.digest_block
    assert blocks == digests.digest_bytes(payload, blocks.block_size)


def test_permanent_stage_in_failure_cancels_the_chain(local_cluster, work):
    name, _, scratch, tmp_path = work
    # no -retry: a source that is not there fails at once (with -retry it would be waited for,
    # tests/transfer/test_late_source.py)
    script = write_script(tmp_path, f"""#!/bin/bash
#STAGEIN {local_cluster.http_source_url}{name}-missing.dat {scratch}/missing.dat
touch {scratch}/compute-ran
#STAGEOUT {scratch}/compute-ran {local_cluster.gridftp_url}{local_cluster.sink_dir}/{name}.ran
""")
    submitted = json.loads(sk(local_cluster, "submit", str(script), "--json", cwd=tmp_path).stdout)
    ids = [j["job_id"] for j in submitted["jobs"]]
    status = sk(local_cluster, "status", ids[0], "--json", "--wait", "90", check=False)
    assert status.returncode == 1
    report = json.loads(status.stdout)
    assert report["state"] == "stage-in-failed"
    assert "404" in report["reason"] and f"{script}:2:" in report["reason"]
    assert [j["state"] for j in report["jobs"]] == ["failed", "cancelled", "cancelled"]
    assert local_cluster.wait_for_job(ids[1]) == "CANCELLED"
    assert local_cluster.wait_for_job(ids[2]) == "CANCELLED"
    queue = local_cluster.command(["squeue", "-h", "-o", "%i", "-j", ",".join(ids)], check=False)
    assert queue.stdout.split() == []
    assert not (scratch / "compute-ran").exists()
    # why, where Slurm users look: the cancelled jobs' comment, in squeue and in sacct
    for job_id in ids[1:]:
        comment = local_cluster.command(["sacct", "-n", "-X", "-P", "-j", job_id, "-o",
                                         "Comment"]).stdout.strip()
        assert comment.startswith("scratchkeeper: stage-in failed: ") and "404" in comment \
            and f"{script}:2:" in comment, (job_id, comment)
    # a 404 without -retry is permanent: one attempt
    log = [j for j in report["jobs"] if j["role"] == "stage-in"][0]["log_path"]
    assert len(re.findall(r": attempt \d+ of \d+$", open(log).read(), re.M)) == 1


def test_transient_failure_is_retried_then_fails(local_cluster, work):
    name, _, scratch, tmp_path = work
    script = write_script(tmp_path, f"""#!/bin/bash
#STAGEIN -retry 2 -retry-delay 0.5
#STAGEIN ftp://127.0.0.1:9/{name}.dat {scratch}/x.dat
true
""")
    submitted = json.loads(sk(local_cluster, "submit", str(script), "--json", cwd=tmp_path).stdout)
    report = json.loads(sk(local_cluster, "status", submitted["chain_id"], "--json", "--wait",
                           "90", check=False).stdout)
    assert report["state"] == "stage-in-failed"
    log = report["jobs"][0]["log_path"]
    # one line per attempt as it starts ("line 3: attempt 2 of 3"); the failures name theirs too
    assert len(re.findall(r": attempt \d+ of 3$", open(log).read(), re.M)) == 3
    assert report["jobs"][1]["state"] == "cancelled"


def test_failed_submission_cancels_what_was_submitted(local_cluster, work):
    name, _, scratch, tmp_path = work
    site = tmp_path / "site.toml"
    site.write_text(local_cluster.site_config.read_text().replace('batch_queue = "batch"',
                                                                  'batch_queue = "nosuchqueue"'))
    script = write_script(tmp_path, f"""#!/bin/bash
#SBATCH --job-name={name}
#STAGEIN {local_cluster.http_source_url}{name}.dat {scratch}/in.dat
true
""")
    result = sk(local_cluster, "submit", str(script), config=site, check=False, cwd=tmp_path)
    assert result.returncode == 1
    assert "Invalid partition name specified" in result.stderr  # the scheduler's own words
    assert "cancelled the jobs already submitted" in result.stderr
    match = re.search(r"cancelled the jobs already submitted: ([0-9, ]+)", result.stderr)
    ids = match.group(1).replace(" ", "").split(",")
    assert len(ids) == 1, "only the stage-in job was submitted before the compute job failed"
    assert local_cluster.wait_for_job(ids[0]) == "CANCELLED"
    assert not (scratch / "in.dat").exists()


@pytest.mark.parametrize("directive", [
    "#STAGEIN -retry many",
    "#STAGEIN s3://bucket/key /scratch/x",
    "#DW stage_in source=/a type=file",
])
def test_malformed_directive_submits_nothing(local_cluster, work, directive):
    name, _, _, tmp_path = work
    script = write_script(tmp_path, f"#!/bin/bash\n#SBATCH --job-name={name}\n{directive}\ntrue\n")
    result = sk(local_cluster, "submit", str(script), check=False, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith(f"{script}:3: ")
    assert len(result.stderr.strip().splitlines()) == 1
    queue = local_cluster.command(["squeue", "-h", "-o", "%i", "--name",
                                   f"{name},{name}.stage-in"], check=False)
    assert queue.ok and queue.stdout.split() == []
    config = load_config(local_cluster.site_config)
    store = records.open_records(StateStore(config.state.database))
    assert store.query("SELECT chain_id FROM chains WHERE script_path = ?", (str(script),)) == []


def test_status_of_an_unknown_job_id(local_cluster):
    result = sk(local_cluster, "status", "999999999", check=False)
    assert result.returncode == 2
    assert "unknown job id" in result.stderr


@pytest.mark.parametrize("flavour", ["slurm", "pbs"])
def test_a_cancelled_stage_in_ends_a_submitted_chain(local_cluster, work,
                                                     silent_source, flavour):  # noqa: F811
    """`scratchkeeper submit` chains: Slurm cancels the compute job itself (it was submitted with
    --kill-on-invalid-dep); the Torque wrappers cannot pass that, so there the chain service's
    sweep must. Either way status names the stage-in's end, not a pending reason."""
    name, _, scratch, tmp_path = work
    if flavour == "pbs":
        local_cluster.skip_without_torque()
    config_path = local_cluster.site_config if flavour == "slurm" else local_cluster.site_config_pbs
    script = write_script(tmp_path, f"""#!/bin/bash
#STAGEIN {silent_source}/{name}.dat {scratch}/in.dat
touch {scratch}/compute-ran
#STAGEOUT {scratch}/compute-ran {local_cluster.gridftp_url}{local_cluster.sink_dir}/{name}.ran
""")
    submitted = json.loads(sk(local_cluster, "submit", str(script), "--json", config=config_path,
                              cwd=tmp_path).stdout)
    stage_in, compute, stage_out = [j["job_id"] for j in submitted["jobs"]]
    try:
        wait_running(stage_in)
        local_cluster.command(["scancel", stage_in])
        assert local_cluster.wait_for_job(stage_in, timeout=60) == "CANCELLED"
        if flavour == "slurm":
            # Slurm ended the compute job itself; status says why at once (its accounting
            # record still carries the pending reason "Dependency"): from Slurm's own record
            # before any sweep, or from the reason the cluster's running chain service recorded
            # if its sweep came first. Either names the stage-in's end.
            assert local_cluster.wait_for_job(compute, timeout=60) == "CANCELLED"
            early = json.loads(sk(local_cluster, "status", compute, "--json", config=config_path,
                                  check=False).stdout)
            assert early["state"] == "stage-in-failed", early
            reason = {j["role"]: j["reason"] for j in early["jobs"]}["compute"]
            assert reason.startswith((f"CANCELLED: never ran, stage-in job {stage_in} ended "
                                      "CANCELLED",
                                      f"cancelled: stage-in job {stage_in} ended CANCELLED")), early
        # the chain service's next cycle (a new process on the state database, as after a restart)
        sk(local_cluster, "spank", "chain", compute, config=config_path)
        assert local_cluster.wait_for_job(compute, timeout=60) == "CANCELLED"
        assert local_cluster.wait_for_job(stage_out, timeout=60) == "CANCELLED"
    finally:
        local_cluster.command(["scancel", stage_in, compute, stage_out], check=False)
    status = sk(local_cluster, "status", compute, "--json", config=config_path, check=False)
    assert status.returncode == 1
    report = json.loads(status.stdout)
    assert report["state"] == "stage-in-failed"
    if flavour == "slurm":
        assert report["reason"].startswith(f"stage-in job {stage_in} ended CANCELLED, exit code")
    else:  # what the wrappers say of any finished job
        assert report["reason"] == (f"stage-in job {stage_in} ended (state C, exit status not "
                                    "reported) without recording its staged files")
    jobs = {j["role"]: j for j in report["jobs"]}
    assert jobs["compute"]["state"] == jobs["stage-out"]["state"] == "cancelled"
    assert jobs["compute"]["reason"] == "cancelled: " + report["reason"]
    assert not (scratch / "compute-ran").exists()
