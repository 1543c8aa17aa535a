"""A site of many hosts (issue 42, docs/topology.rst): only the head opens the state database;
a plain user on the login host submits a script with a GridFTP ``#STAGEIN``, its stage-in runs
on the data-transfer host, and the job on a compute host reads the staged bytes by path with
plain ``sha256sum`` while an OST fails under it, and gets them right; ``status`` on the login
host answers from the head."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from user_runtime import LOCAL_CLUSTER_SCRIPT, PLAIN_USER, plain_user


@pytest.fixture(scope="module")
def hosts(local_cluster) -> dict:
    status = json.loads(local_cluster.status_path.read_text())
    if not status.get("hosts"):
        pytest.fail("cluster.json names no hosts: the cluster runs on one host", pytrace=False)
    return status


def on_host(host: str, *argv: str, user: str | None = None, check: bool = True,
            timeout: float = 120) -> subprocess.CompletedProcess:
    command = [str(LOCAL_CLUSTER_SCRIPT), "exec", host, *(["--user", user] if user else []),
               "--", *argv]
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if check:
        assert result.returncode == 0, f"{command}: exit {result.returncode}: {result.stderr}"
    return result


def test_no_host_but_the_head_can_open_the_state_database(local_cluster, hosts):
    database = hosts["state_database"]
    assert Path(database).exists()  # the head's
    opening = ("import sqlite3, sys\n"
               "try:\n"
               "    sqlite3.connect(f'file:{sys.argv[1]}?mode=ro', uri=True).execute("
               "'SELECT count(*) FROM sqlite_master').fetchall()\n"
               "except sqlite3.Error as err:\n"
               "    print('refused:', err); sys.exit(3)\n")
    others = [h for role in ("login", "dtn", "compute") for h in hosts["roles"][role]]
    assert others
    for host in others:
        result = on_host(host, "/usr/bin/python3", "-c", opening, database, check=False)
        assert result.returncode == 3, f"{host}: {result.stdout}{result.stderr}"
        assert os.path.basename(database) not in on_host(host, "ls", "-a",
                                                         os.path.dirname(database)).stdout


def test_a_login_users_job_reads_its_staged_input_right_while_an_ost_fails(local_cluster,
                                                                           hosts):
    uid, gid = plain_user()
    command = local_cluster.runtime_command
    work = Path(tempfile.mkdtemp(prefix="sk-hosts-", dir="/var/tmp"))
    os.chmod(work, 0o755)
    os.chown(work, uid, gid)
    name = f"hosts-{uuid.uuid4().hex[:8]}"
    source_dir = local_cluster.source_dir / name
    source_dir.mkdir()
    data = os.urandom(12 * (1 << 20) + 12345)
    (source_dir / "input.dat").write_bytes(data)
    os.chmod(source_dir, 0o755)
    os.chmod(source_dir / "input.dat", 0o644)
    scratch = local_cluster.scratch_root / name  # the user's own folder, as in /scratch/USER
    staged, result, go = scratch / "input.dat", work / "sha.txt", work / "go"
    uri = f"{local_cluster.gridftp_url}{source_dir}/input.dat"  # the GridFTP server
    script = work / "job.sh"
    script.write_text(f"""#!/bin/bash
#SBATCH --job-name={name}
#SBATCH --output={work}/job.out
#STAGEIN {uri} {staged}
# wait (bounded) until the test has failed an OST under the staged file
for i in $(seq 600); do [ -e {go} ] && break; sleep 0.2; done
hostname > {work}/ran-on
sha256sum {staged} | cut -d' ' -f1 > {result}
""")
    os.chown(script, uid, gid)
    failed, job_id = None, None
    try:
        on_host("login", "mkdir", "-p", str(scratch), user=PLAIN_USER)
        submitted = on_host("login", command, "submit", str(script), user=PLAIN_USER).stdout
        job_id = submitted.split()[1].rstrip(":")
        chain = _wait_for_status(command, job_id, lambda s: _stage_in(s)["state"] in (
            "completed", "failed", "cancelled"), timeout=240)
        stage_in = _stage_in(chain)
        assert stage_in["state"] == "completed", chain
        assert _node_of(stage_in["job_id"]) in hosts["roles"]["dtn"]
        assert _wait_running(job_id), f"job {job_id} did not start"

        layout = subprocess.run([command, "store", "layout", "--json", str(staged)],
                                capture_output=True, text=True, timeout=60, check=True)
        failed = json.loads(layout.stdout)["components"][0]["objects"][0]["ost_index"]
        subprocess.run([command, "store", "fail-ost", str(failed)], check=True, timeout=60,
                       capture_output=True)
        go.touch()
        assert local_cluster.wait_for_job(job_id, timeout=300) == "COMPLETED", \
            (work / "job.out").read_text(errors="replace")
        assert result.read_text().strip() == hashlib.sha256(data).hexdigest()
        assert (work / "ran-on").read_text().strip() in hosts["roles"]["compute"]
        final = _wait_for_status(command, job_id, lambda s: s["state"] == "completed",
                                 timeout=120)
        assert final["state"] == "completed", final
    finally:
        if job_id is not None:
            subprocess.run(["scancel", job_id], timeout=30, capture_output=True)
        if failed is not None:
            subprocess.run([command, "store", "restore-ost", str(failed)], timeout=60,
                           capture_output=True)
        subprocess.run([command, "store", "rm", str(staged)], timeout=60, capture_output=True)
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(source_dir, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


def _wait_for_status(command: str, job_id: str, done, timeout: float) -> dict:
    """``status JOB --json`` asked on the login host as the user (from the head's service)
    until ``done(status)``; the last status."""
    deadline = time.monotonic() + timeout
    status: dict = {}
    while time.monotonic() < deadline:
        asked = on_host("login", command, "status", job_id, "--json", user=PLAIN_USER,
                        check=False)
        if asked.returncode in (0, 1) and asked.stdout.strip():
            status = json.loads(asked.stdout)
            if done(status):
                return status
        time.sleep(1)
    pytest.fail(f"job {job_id}: status from the login host did not get there in {timeout:g}s: "
                f"{status}")


def _stage_in(status: dict) -> dict:
    return next((j for j in status.get("jobs", []) if j["role"] == "stage-in"), {"state": "-"})


def _node_of(job_id: str) -> str:
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "NodeList"],
                         capture_output=True, text=True, timeout=30).stdout.split()
    return out[0] if out else ""


def _wait_running(job_id: str, timeout: float = 240) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True,
                               text=True, timeout=30).stdout.strip()
        if state == "RUNNING":
            return True
        time.sleep(0.5)
    return False
