"""Smoke tests of the local cluster itself: Slurm, accounting, the Torque wrappers, GridFTP, HTTP.

They check what later parts rely on, against the real daemons that `scripts/local-cluster up`
started; nothing here is mocked.
"""

from __future__ import annotations

import ftplib
import hashlib
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from scratchkeeper.config import load_config


def _submit(cluster, *args: str) -> str:
    result = cluster.command(["sbatch", "--parsable", *args])
    return result.stdout.strip().split(";")[0]


def _sacct(cluster, job_id: str, fields: str) -> dict[str, str]:
    result = cluster.command(["sacct", "-n", "-X", "-P", "-o", fields, "-j", job_id])
    names = fields.split(",")
    return dict(zip(names, result.stdout.strip().split("|")))


def _billing(alloc_tres: str) -> int:
    """The billing TRES of an AllocTRES string; Slurm leaves it out when it is 0."""
    for item in alloc_tres.split(","):
        name, _, value = item.partition("=")
        if name == "billing":
            return int(value)
    return 0


def _payload(directory: Path, name: str, size: int) -> tuple[Path, bytes]:
    """A file of random bytes in ``directory`` that the servers (running as nobody) can read."""
    content = os.urandom(size)
    path = directory / name
    path.write_bytes(content)
    path.chmod(0o644)
    return path, content


# ---------------------------------------------------------------------------- Slurm

def test_every_compute_node_is_in_batch_and_replica_and_dataxfer_has_its_own(local_cluster):
    # %F is allocated/idle/other/total, one line per partition whatever the node states.
    result = local_cluster.command(["sinfo", "-h", "-o", "%P|%F|%C"])
    rows = [line.split("|") for line in result.stdout.split()]
    partitions = {name.rstrip("*"): int(counts.split("/")[3]) for name, counts, _ in rows}
    dtn = json.loads(local_cluster.status_path.read_text())["roles"]["dtn"]
    assert partitions == {"batch": len(local_cluster.nodes), "replica": len(local_cluster.nodes),
                          "dataxfer": len(dtn)}
    # the data-transfer hosts run as many data jobs at once as the compute nodes' CPUs
    cpus = {name.rstrip("*"): int(counts.split("/")[3]) for name, _, counts in rows}
    assert cpus["dataxfer"] == cpus["batch"]
    assert any(row[0] == "batch*" for row in rows), "batch is the default partition"
    assert len(local_cluster.nodes) >= 4, "the replication daemon needs several nodes"


def test_jobs_run_in_batch_and_dataxfer_and_dataxfer_is_not_charged(local_cluster, tmp_path):
    compute = _submit(local_cluster, "-p", "batch", "-o", f"{tmp_path}/%j.out",
                      "--wrap", "echo compute on $SLURM_JOB_PARTITION")
    stage_in = _submit(local_cluster, "-p", "dataxfer", "-o", f"{tmp_path}/%j.out",
                       "--wrap", "echo data on $SLURM_JOB_PARTITION")
    assert local_cluster.wait_for_job(compute) == "COMPLETED"
    assert local_cluster.wait_for_job(stage_in) == "COMPLETED"
    assert (tmp_path / f"{compute}.out").read_text() == "compute on batch\n"
    assert (tmp_path / f"{stage_in}.out").read_text() == "data on dataxfer\n"
    batch_row = _sacct(local_cluster, compute, "Partition,AllocTRES")
    data_row = _sacct(local_cluster, stage_in, "Partition,AllocTRES")
    assert batch_row["Partition"] == "batch" and _billing(batch_row["AllocTRES"]) > 0
    assert data_row["Partition"] == "dataxfer" and _billing(data_row["AllocTRES"]) == 0


def test_afterok_dependency_waits_for_success(local_cluster, tmp_path):
    first = _submit(local_cluster, "-o", f"{tmp_path}/%j.out", "--wrap", "sleep 2")
    second = _submit(local_cluster, "-p", "dataxfer", "-d", f"afterok:{first}",
                     "-o", f"{tmp_path}/%j.out", "--wrap", "true")
    reason = local_cluster.command(["squeue", "-h", "-j", second, "-o", "%T %r"]).stdout.split()
    assert reason == ["PENDING", "Dependency"]
    assert local_cluster.wait_for_job(second) == "COMPLETED"
    first_end = _sacct(local_cluster, first, "End")["End"]
    second_start = _sacct(local_cluster, second, "Start")["Start"]
    assert second_start >= first_end  # ISO timestamps compare as text


def test_afterok_dependency_on_a_failed_job_never_starts(local_cluster, tmp_path):
    failing = _submit(local_cluster, "-o", f"{tmp_path}/%j.out", "--wrap", "exit 3")
    blocked = _submit(local_cluster, "-d", f"afterok:{failing}", "-o", f"{tmp_path}/%j.out",
                      "--wrap", "true")
    try:
        assert local_cluster.wait_for_job(failing) == "FAILED"
        assert _sacct(local_cluster, failing, "ExitCode")["ExitCode"] == "3:0"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            reason = local_cluster.command(["squeue", "-h", "-j", blocked, "-o", "%T %r"]).stdout.split()
            if reason == ["PENDING", "DependencyNeverSatisfied"]:
                break
            time.sleep(0.5)
        assert reason == ["PENDING", "DependencyNeverSatisfied"]
    finally:
        local_cluster.command(["scancel", blocked], check=False)
    assert local_cluster.wait_for_job(blocked) == "CANCELLED"


def test_sacct_answers_after_the_job_left_the_queue(local_cluster, tmp_path):
    job = _submit(local_cluster, "-o", f"{tmp_path}/%j.out", "--wrap", "true")
    assert local_cluster.wait_for_job(job) == "COMPLETED"
    row = _sacct(local_cluster, job, "JobID,State,ExitCode,Partition")
    assert row == {"JobID": job, "State": "COMPLETED", "ExitCode": "0:0", "Partition": "batch"}


def test_qsub_with_depend_and_qstat(local_cluster, tmp_path):
    script = tmp_path / "job.pbs"
    script.write_text("#!/bin/bash\n#PBS -N smoke\nsleep 1\necho ran in $SLURM_JOB_PARTITION\n")
    # -e too: the wrapper would otherwise write smoke.e<id> into the current directory
    compute = local_cluster.command(["qsub", "-q", "batch", "-o", f"{tmp_path}/compute.out",
                                     "-e", f"{tmp_path}/compute.err", str(script)]).stdout.strip()
    stage_out = local_cluster.command(["qsub", "-q", "dataxfer", "-W", f"depend=afterok:{compute}",
                                       "-o", f"{tmp_path}/stage_out.out",
                                       "-e", f"{tmp_path}/stage_out.err", str(script)]).stdout.strip()
    assert compute.isdigit() and stage_out.isdigit()
    full = local_cluster.command(["qstat", "-f", stage_out]).stdout
    assert f"Job Id:\t{stage_out}" in full and "queue = dataxfer" in full
    assert local_cluster.wait_for_job(stage_out) == "COMPLETED"
    assert (tmp_path / "stage_out.out").read_text() == "ran in dataxfer\n"
    assert _sacct(local_cluster, stage_out, "Start")["Start"] >= _sacct(local_cluster, compute, "End")["End"]
    plain = local_cluster.command(["qstat"]).stdout
    assert any(line.split()[0] == stage_out and line.split()[4] == "C" for line in plain.splitlines()[2:])


# ---------------------------------------------------------------------------- GridFTP

def _ftp_url(cluster, path: Path) -> str:
    return f"{cluster.gridftp_url}{path}"


def test_gridftp_full_read(local_cluster, tmp_path):
    source, content = _payload(local_cluster.source_dir, "smoke-full.bin", 3 * 1024 * 1024 + 17)
    target = tmp_path / "copy.bin"
    local_cluster.command(["globus-url-copy", _ftp_url(local_cluster, source), f"file://{target}"],
                          timeout=60)
    assert target.read_bytes() == content


def test_gridftp_partial_read_lands_at_its_offset(local_cluster, tmp_path):
    source, content = _payload(local_cluster.source_dir, "smoke-partial.bin", 200_000)
    target = tmp_path / "part.bin"
    local_cluster.command(["globus-url-copy", "-partial-offset", "70000", "-partial-length", "1000",
                           _ftp_url(local_cluster, source), f"file://{target}"], timeout=60)
    # globus-url-copy writes the range at the same offset of the target, not at its start.
    assert target.stat().st_size == 71_000
    assert target.read_bytes()[70_000:] == content[70_000:71_000]


def test_gridftp_checksum_matches_md5(local_cluster, tmp_path):
    source, content = _payload(local_cluster.source_dir, "smoke-cksm.bin", 100_000)
    with ftplib.FTP() as ftp:
        ftp.connect(urllib.parse.urlsplit(local_cluster.gridftp_url).hostname,
                    local_cluster.gridftp_port, timeout=20)
        ftp.login()
        reply = ftp.sendcmd(f"CKSM MD5 0 -1 {source}")
        partial = ftp.sendcmd(f"CKSM MD5 10 20 {source}")
    assert reply.split() == ["213", hashlib.md5(content).hexdigest()]
    assert partial.split() == ["213", hashlib.md5(content[10:30]).hexdigest()]
    local_cluster.command(["globus-url-copy", "-verify-checksum", _ftp_url(local_cluster, source),
                           f"file://{tmp_path / 'verified.bin'}"], timeout=60)


def test_gridftp_stage_out_goes_to_sink_only(local_cluster, tmp_path):
    upload, content = _payload(tmp_path, "result.bin", 50_000)
    target = local_cluster.sink_dir / f"smoke-{os.getpid()}.bin"
    local_cluster.command(["globus-url-copy", f"file://{upload}", _ftp_url(local_cluster, target)],
                          timeout=60)
    try:
        assert target.read_bytes() == content
    finally:
        target.unlink(missing_ok=True)
    refused = local_cluster.command(
        ["globus-url-copy", f"file://{upload}",
         _ftp_url(local_cluster, local_cluster.source_dir / "must-not-exist.bin")],
        timeout=60, check=False)
    assert not refused.ok and not (local_cluster.source_dir / "must-not-exist.bin").exists()
    outside = local_cluster.command(["globus-url-copy", _ftp_url(local_cluster, Path("/etc/hostname")),
                                     f"file://{tmp_path / 'outside'}"], timeout=60, check=False)
    assert not outside.ok, "paths outside source and sink are refused"


# ---------------------------------------------------------------------------- HTTP

def test_http_range_request(local_cluster):
    source, content = _payload(local_cluster.source_dir, "smoke-range.bin", 10_000)
    request = urllib.request.Request(local_cluster.http_source_url + source.name,
                                     headers={"Range": "bytes=10-20"})
    with urllib.request.urlopen(request, timeout=20) as response:
        assert response.status == 206
        assert response.headers["Content-Range"] == "bytes 10-20/10000"
        assert response.read() == content[10:21]


def test_http_put_into_sink_only(local_cluster):
    content = os.urandom(4096)
    name = f"smoke-{os.getpid()}/put.bin"
    request = urllib.request.Request(local_cluster.http_sink_url + name, data=content, method="PUT")
    with urllib.request.urlopen(request, timeout=20) as response:
        assert response.status == 201
    try:
        assert (local_cluster.sink_dir / name).read_bytes() == content
    finally:
        (local_cluster.sink_dir / name).unlink(missing_ok=True)
        (local_cluster.sink_dir / name).parent.rmdir()
    refused = urllib.request.Request(local_cluster.http_source_url + "put.bin", data=content,
                                     method="PUT")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(refused, timeout=20)
    assert err.value.code == 405


# ---------------------------------------------------------------------------- site config

@pytest.mark.parametrize("kind", ["slurm", "pbs"])
def test_generated_site_config_is_valid(local_cluster, kind):
    path = local_cluster.site_config if kind == "slurm" else local_cluster.site_config_pbs
    config = load_config(path)
    assert config.scheduler.kind == kind
    assert (config.scheduler.batch_queue, config.scheduler.data_queue,
            config.scheduler.replica_queue) == ("batch", "dataxfer", "replica")
    assert config.storage.backend == "local"
    assert Path(config.storage.scratch_root) == local_cluster.scratch_root
    assert Path(config.storage.store_root) == local_cluster.store_root
    assert Path(config.state.database) == local_cluster.state_db
