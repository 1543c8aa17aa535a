"""Failures between hosts (issue 42 item 4, docs/topology.rst "When the head is out of reach"):
the link between a host and the head cut (``bridge link set dev sk-HOST state 0``: its bridge
port drops every frame)
during a data job's commit, during a command, and during a chain. Each command says so in one
line within its bound; a commit retried across the cut lands exactly once; a chain cut in the
middle completes with its bytes right."""

from __future__ import annotations

import contextlib
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

from scratchkeeper.planner import records as planner_records
from scratchkeeper.state import StateStore
from user_runtime import LOCAL_CLUSTER_SCRIPT, PLAIN_USER, plain_user


@pytest.fixture(scope="module")
def hosts(local_cluster) -> dict:
    status = json.loads(local_cluster.status_path.read_text())
    if not status.get("hosts"):
        pytest.fail("cluster.json names no hosts: the cluster runs on one host", pytrace=False)
    return status


def on_host(host: str, *argv: str, user: str | None = None, **popen) -> list[str]:
    return [str(LOCAL_CLUSTER_SCRIPT), "exec", host, *(["--user", user] if user else []), "--",
            *argv]


@contextlib.contextmanager
def cut(host: str):
    """``host`` cut off for the block: its port on the bridge disabled (every frame dropped,
    as a switch port gone bad; the link itself stays up, so ``local-cluster exec`` still
    enters the host); always restored."""
    veth = f"sk-{host}"[:15]
    subprocess.run(["bridge", "link", "set", "dev", veth, "state", "0"], check=True, timeout=30)
    try:
        yield
    finally:
        subprocess.run(["bridge", "link", "set", "dev", veth, "state", "3"], check=True,
                       timeout=30)
        _wait_reachable(host)


#: connects to the head's service (the hosts have no ping)
REACH = "import socket; socket.create_connection(('198.18.77.1', 6830), 2).close()"


def _wait_reachable(host: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        probe = subprocess.run(on_host(host, "/usr/bin/python3", "-c", REACH),
                               capture_output=True, timeout=30)
        if probe.returncode == 0:
            return
        time.sleep(0.5)
    pytest.fail(f"{host}: the head not reachable {timeout:g}s after the link came back")


@pytest.fixture
def shared_work():
    """A folder on the shared /var/tmp the plain user owns."""
    uid, gid = plain_user()
    work = Path(tempfile.mkdtemp(prefix="sk-partition-", dir="/var/tmp"))
    os.chmod(work, 0o755)
    os.chown(work, uid, gid)
    yield work
    shutil.rmtree(work, ignore_errors=True)


def _short_head_config(local_cluster, work: Path, timeout: float) -> Path:
    """The users' site configuration with head.timeout lowered (the other keys as deployed)."""
    text = local_cluster.users_site_config.read_text()
    assert "\n[head]\n" in text
    text = text.replace("\n[head]\n", f"\n[head]\ntimeout = {timeout}\n", 1)
    path = work / "site.toml"
    path.write_text(text)
    os.chmod(path, 0o644)
    return path


def test_a_command_on_a_cut_off_host_says_so_in_one_line_within_its_bound(local_cluster, hosts,
                                                                          shared_work):
    config = _short_head_config(local_cluster, shared_work, 4)
    with cut("login"):
        started = time.monotonic()
        asked = subprocess.run(on_host("login", local_cluster.runtime_command, "-c", str(config),
                                       "status", user=PLAIN_USER),
                               capture_output=True, text=True, timeout=120)
        took = time.monotonic() - started
    assert asked.returncode != 0
    assert asked.stderr.count("\n") == 1, asked.stderr
    assert "198.18.77.1:6830 did not answer within" in asked.stderr, asked.stderr
    assert took < 4 + 5 + 10, f"{took:.1f}s for head.timeout = 4"  # + a connect, + start-up
    # and with the link back, the same command answers
    again = subprocess.run(on_host("login", local_cluster.runtime_command, "-c", str(config),
                                   "status", user=PLAIN_USER), capture_output=True, text=True,
                           timeout=120)
    assert again.returncode == 0, again.stderr


def test_a_commit_from_the_data_transfer_host_across_a_cut_lands_once(local_cluster, hosts,
                                                                      shared_work):
    uid, gid = plain_user()
    store = planner_records.open_records(StateStore(str(local_cluster.state_db)))
    folder = local_cluster.scratch_root / f"partition-{uuid.uuid4().hex[:8]}"
    subprocess.run(on_host("dtn1", "mkdir", str(folder), user=PLAIN_USER), check=True,
                   timeout=60)
    staged = folder / "in.dat"
    subprocess.run(on_host("dtn1", "sh", "-c", f"head -c 3000017 /dev/urandom > {staged}",
                           user=PLAIN_USER), check=True, timeout=60)
    data = staged.read_bytes()
    chain_id = f"sk-partition-{time.monotonic_ns()}"
    now = time.time()
    with store.transaction() as conn:
        conn.execute("INSERT INTO chains VALUES (?,?,?,?,?,?,?,?,?,?)",
                     (chain_id, f"{shared_work}/job.sh", str(shared_work), "slurm", uid,
                      "submitted", "", now, now, "{}"))
        conn.execute("INSERT INTO chain_jobs(chain_id, job_key, role, queue, position, state, "
                     "updated) VALUES (?,?,?,?,?,?,?)",
                     (chain_id, "stage-in", "stage-in", "dataxfer", 0, "submitted", now))
        conn.execute("INSERT INTO staged_files(chain_id, path, job_key, source, line, state) "
                     "VALUES (?,?,?,?,?,?)", (chain_id, str(staged), "stage-in",
                                              f"{local_cluster.gridftp_url}/nowhere/in.dat", 3,
                                              "planned"))
    try:
        with cut("dtn1"):
            commit = subprocess.Popen(on_host("dtn1", local_cluster.runtime_command, "stage",
                                              "commit", "--chain", chain_id, "--job", "stage-in",
                                              user=PLAIN_USER),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            # the data job keeps trying while the head is out of reach
            deadline = time.monotonic() + 8
            while time.monotonic() < deadline:
                assert commit.poll() is None, commit.communicate()
                time.sleep(0.5)
        out, err = commit.communicate(timeout=180)
        assert commit.returncode == 0, err
        assert f"staged {staged} (3000017 bytes, sha256 {hashlib.sha256(data).hexdigest()})" \
            in out, out
        (row,) = planner_records.staged_files(store, chain_id)
        assert row["state"] == "staged" and row["size"] == 3000017
        # once: a second commit of the same job records nothing more
        again = subprocess.run(on_host("dtn1", local_cluster.runtime_command, "stage", "commit",
                                       "--chain", chain_id, "--job", "stage-in",
                                       user=PLAIN_USER), capture_output=True, text=True,
                               timeout=120)
        assert again.returncode == 0 and "committed 0 file(s)" in again.stdout, again
        assert len(planner_records.staged_files(store, chain_id)) == 1
    finally:
        subprocess.run([local_cluster.runtime_command, "store", "rm", str(staged)],
                       capture_output=True, timeout=60)
        shutil.rmtree(folder, ignore_errors=True)


def test_a_chain_whose_data_transfer_host_is_cut_off_midway_completes_right(local_cluster,
                                                                           hosts, shared_work):
    name = f"cut-{uuid.uuid4().hex[:8]}"
    source_dir = local_cluster.source_dir / name
    source_dir.mkdir()
    data = os.urandom(256 * (1 << 20) + 3)  # a transfer of some seconds over the bridge
    (source_dir / "input.dat").write_bytes(data)
    os.chmod(source_dir, 0o755)
    os.chmod(source_dir / "input.dat", 0o644)
    scratch = local_cluster.scratch_root / name
    staged, result = scratch / "input.dat", shared_work / "sha.txt"
    script = shared_work / "job.sh"
    uid, gid = plain_user()
    script.write_text(f"""#!/bin/bash
#SBATCH --job-name={name}
#SBATCH --output={shared_work}/job.out
#STAGEIN -retry 3 -retry-delay 2
#STAGEIN {local_cluster.gridftp_url}{source_dir}/input.dat {staged}
sha256sum {staged} | cut -d' ' -f1 > {result}
""")
    os.chown(script, uid, gid)
    command = local_cluster.runtime_command
    job_id = None
    try:
        subprocess.run(on_host("login", "mkdir", "-p", str(scratch), user=PLAIN_USER),
                       check=True, timeout=60)
        submitted = subprocess.run(on_host("login", command, "submit", str(script),
                                           user=PLAIN_USER), capture_output=True, text=True,
                                   timeout=120)
        assert submitted.returncode == 0, submitted.stderr
        job_id = submitted.stdout.split()[1].rstrip(":")
        stage_in = _running_data_job(f"{name}.stage-in")
        with cut("dtn1"):
            cut_at = time.time()
            time.sleep(10)  # the cut's length: the point of the test, not a wait for a condition
        assert local_cluster.wait_for_job(job_id, timeout=300) == "COMPLETED", \
            (shared_work / "job.out").read_text(errors="replace")
        assert result.read_text().strip() == hashlib.sha256(data).hexdigest()
        assert local_cluster.wait_for_job(stage_in, timeout=60) == "COMPLETED"
        # the cut fell while the stage-in ran: it ended after the cut began
        ended = subprocess.run(["sacct", "-n", "-X", "-P", "-j", stage_in, "-o", "End"],
                               capture_output=True, text=True, timeout=30).stdout.split()[0]
        assert time.mktime(time.strptime(ended, "%Y-%m-%dT%H:%M:%S")) >= int(cut_at), ended
    finally:
        if job_id is not None:
            subprocess.run(["scancel", job_id], capture_output=True, timeout=30)
        subprocess.run([command, "store", "rm", str(staged)], capture_output=True, timeout=60)
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(source_dir, ignore_errors=True)


def _running_data_job(name: str, timeout: float = 180) -> str:
    """The id of the data job called ``name`` as soon as Slurm runs it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listed = subprocess.run(["squeue", "-h", "-n", name, "-t", "RUNNING", "-o", "%i"],
                                capture_output=True, text=True, timeout=30).stdout.split()
        if listed:
            return listed[0]
        time.sleep(0.1)
    pytest.fail(f"data job {name} did not start within {timeout:g}s")
