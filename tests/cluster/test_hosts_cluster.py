"""The local cluster's hosts (docs/local-cluster.rst, "Hosts"): each node a machine of its own,
with its own hostname, address, munged and /tmp, reached from the head over the bridge; the
scratch mount the head serves seen on every host, also after it was killed and mounted again.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from user_runtime import LOCAL_CLUSTER_SCRIPT, PLAIN_USER, plain_user

BRIDGE_NETWORK = ipaddress.ip_network("198.18.77.0/24")
HEAD_ADDRESS = "198.18.77.1"


@pytest.fixture(scope="module")
def status(local_cluster) -> dict:
    status = json.loads(local_cluster.status_path.read_text())
    if not status.get("hosts"):
        pytest.fail("cluster.json names no hosts: the cluster runs on one host", pytrace=False)
    return status


def on_host(host: str, *argv: str, user: str | None = None, stdin: str | None = None,
            check: bool = True) -> subprocess.CompletedProcess:
    """``local-cluster exec HOST [--user USER] -- ARGV``."""
    command = [str(LOCAL_CLUSTER_SCRIPT), "exec", host, *(["--user", user] if user else []),
               "--", *argv]
    result = subprocess.run(command, capture_output=True, text=True, input=stdin, timeout=60)
    if check:
        assert result.returncode == 0, f"{command}: exit {result.returncode}: {result.stderr}"
    return result


def run_job(local_cluster, folder: Path, *options: str) -> list[str]:
    """The words a job that prints its host's name, address and node name printed."""
    output = folder / f"host-{uuid.uuid4().hex[:8]}.out"
    job_id = local_cluster.command(
        ["sbatch", "--parsable", f"--output={output}", *options, "--wrap",
         'echo "$(hostname) $(ip -4 -o addr show dev eth0) NODE=$SLURMD_NODENAME"']
    ).stdout.strip().split(";")[0]
    assert local_cluster.wait_for_job(job_id) == "COMPLETED", output.read_text()
    return output.read_text().split()


# ---------------------------------------------------------------------------- what runs where

def test_a_job_sent_to_a_compute_host_runs_there(local_cluster, status, tmp_path):
    host = status["roles"]["compute"][-1]
    words = run_job(local_cluster, tmp_path, "--partition=batch", f"--nodelist={host}")
    assert words[0] == host                                # its own hostname
    assert f"{status['hosts'][host]}/24" in words          # its own address on the bridge
    assert f"NODE={host}" in words


def test_a_data_job_runs_on_the_data_transfer_host(local_cluster, status, tmp_path):
    words = run_job(local_cluster, tmp_path, "--partition=dataxfer")
    (dtn,) = status["roles"]["dtn"]
    assert words[0] == dtn and f"{status['hosts'][dtn]}/24" in words


def test_each_host_has_a_tmp_of_its_own(status):
    first, second = status["roles"]["compute"][:2]
    name = f"/tmp/sk-host-probe-{uuid.uuid4().hex[:8]}"
    on_host(first, "sh", "-c", f"echo {first} > {name}")
    try:
        assert on_host(first, "cat", name).stdout == f"{first}\n"
        assert not Path(name).exists()                     # not on the head
        assert on_host(second, "test", "-e", name, check=False).returncode == 1
    finally:
        on_host(first, "rm", "-f", name)


# ---------------------------------------------------------------------------- munge

def test_a_credential_made_on_login_decodes_on_the_head_once(status):
    credential = on_host("login", "munge", "-n", user="nobody").stdout
    first = subprocess.run(["unmunge"], input=credential, capture_output=True, text=True,
                           timeout=30)
    assert first.returncode == 0, first.stderr
    assert "UID:             nobody (65534)" in first.stdout
    again = subprocess.run(["unmunge"], input=credential, capture_output=True, text=True,
                           timeout=30)
    assert again.returncode != 0 and "Replayed credential" in again.stdout + again.stderr


def test_every_host_runs_a_munged_of_its_own(status):
    """Each host's munge socket is its own: the munged serving it is a different process."""
    serving = {}
    for host in ("login", *status["roles"]["dtn"], status["roles"]["compute"][0]):
        serving[host] = on_host(host, "cat", "/run/munge/munged.pid").stdout.strip()
    assert len(set(serving.values())) == len(serving), serving
    for host, pid in serving.items():
        assert status["pids"][f"munged-{host}"] == int(pid)


# ---------------------------------------------------------------------------- exec

def test_exec_runs_as_the_user_on_the_host_and_passes_the_exit_status_through(status):
    uid, _ = plain_user()
    assert on_host("login", "id", "-u", user=PLAIN_USER).stdout == f"{uid}\n"
    assert on_host("login", "hostname").stdout == "login\n"
    assert on_host("head", "hostname").stdout == f"{os.uname().nodename}\n"
    assert on_host(status["roles"]["dtn"][0], "cat", stdin="bytes in\n").stdout == "bytes in\n"
    assert on_host("node1", "sh", "-c", "echo err >&2; exit 7", check=False).returncode == 7
    unknown = on_host("nowhere", "true", check=False)
    assert unknown.returncode == 1 and "no host nowhere" in unknown.stderr


# ---------------------------------------------------------------------------- the scratch mount

def _read_on(host: str, path: Path) -> str | None:
    result = on_host(host, "cat", str(path), check=False)
    return result.stdout if result.returncode == 0 else None


def _wait(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def _mount_answers(scratch: Path) -> bool:
    try:
        os.statvfs(scratch)
        return True
    except OSError:
        return False


def test_the_scratch_mount_is_seen_on_a_compute_host_also_after_a_remount(local_cluster,
                                                                           status):
    host = status["roles"]["compute"][1]
    folder = local_cluster.scratch_root / f"hosts-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    try:
        (folder / "seen.txt").write_text("written on the head\n")
        assert _read_on(host, folder / "seen.txt") == "written on the head\n"
        pid_file = local_cluster.local_dir / "run" / "mount.pid"
        mount_pid = int(pid_file.read_text())
        os.kill(mount_pid, signal.SIGKILL)                 # the supervisor mounts it again
        assert _wait(lambda: not Path(f"/proc/{mount_pid}").exists(), 10)
        assert _wait(lambda: _mount_answers(local_cluster.scratch_root) and
                     pid_file.read_text().strip() != str(mount_pid), 60), "no remount on the head"
        # the head's new mount reached the host (a propagated mount, not the dead one's copy)
        assert _wait(lambda: _read_on(host, folder / "seen.txt") == "written on the head\n",
                     30), f"{host} does not see the remounted scratch"
        (folder / "after.txt").write_text("after the remount\n")
        assert _read_on(host, folder / "after.txt") == "after the remount\n"
    finally:
        if _wait(lambda: _mount_answers(local_cluster.scratch_root), 60):
            subprocess.run(["rm", "-rf", str(folder)], timeout=60)
        local_cluster.wait_for_the_mount_gate()


# ---------------------------------------------------------------------------- cluster.json

def test_cluster_json_names_the_hosts_their_roles_and_the_state_database(local_cluster, status):
    hosts, roles = status["hosts"], status["roles"]
    assert set(roles) == {"head", "login", "dtn", "compute"}
    assert roles["head"] == ["head"] and hosts["head"] == HEAD_ADDRESS
    assert roles["login"] == ["login"] and len(roles["dtn"]) >= 1
    assert roles["compute"] == list(local_cluster.nodes)
    assert sorted(sum(roles.values(), [])) == sorted(hosts)      # each host has one role
    assert len(set(hosts.values())) == len(hosts)
    assert all(ipaddress.ip_address(address) in BRIDGE_NETWORK for address in hosts.values())
    assert status["state_database"] == str(local_cluster.state_db)
    # the servers are published on the head's bridge address, which every host reaches
    for url in (local_cluster.gridftp_url, local_cluster.http_source_url):
        assert f"//{HEAD_ADDRESS}:" in url
    sinfo = local_cluster.command(["sinfo", "-h", "-N", "-o", "%N %P"]).stdout.split("\n")
    partitions = {}
    for line in filter(None, sinfo):
        node, partition = line.split()
        partitions.setdefault(partition.rstrip("*"), set()).add(node)
    assert partitions == {"batch": set(roles["compute"]), "replica": set(roles["compute"]),
                          "dataxfer": set(roles["dtn"])}
