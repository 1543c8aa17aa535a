"""The local cluster as a site runs it: the runtime every user runs, scratchkeeper's own services
(recoveryd, replicad, the chain service) with their log files, and a plain user's
`scratchkeeper submit` and `sbatch --stage-in` working with no step beyond `make cluster`."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

from scratchkeeper.config import load_config
from scratchkeeper.storage import open_backend
from user_runtime import LOCAL_CLUSTER_SCRIPT, PLAIN_USER, local_cluster_script, plain_user


@pytest.fixture(scope="module")
def script():
    return local_cluster_script()


def test_the_runtime_holds_this_checkout_and_every_user_runs_it(local_cluster, script):
    assert local_cluster.runtime_command == str(script.RUNTIME_LINK)
    assert script.Runtime().installed_digest() == script.source_digest()
    for path in (local_cluster.site_config, local_cluster.users_site_config):
        assert load_config(path).templates.command == local_cluster.runtime_command
    plain_user()
    version = subprocess.run(["runuser", "-u", PLAIN_USER, "--", local_cluster.runtime_command,
                              "--version"], capture_output=True, text=True, timeout=60, cwd="/")
    assert version.returncode == 0, version.stderr
    assert load_config(local_cluster.users_site_config).scheduler.submit_via == "chain-service"


def test_the_services_run_and_log_to_their_files(local_cluster, script):
    status = json.loads(local_cluster.status_path.read_text())
    assert set(local_cluster.service_logs) == set(script.MANAGED_SERVICES)
    for name, log_path in local_cluster.service_logs.items():
        pid = status["pids"][name]
        assert script.process_alive(pid, script.RUNTIME_PYTHON), f"{name} (pid {pid}) not running"
        if name in script.RESPAWN:
            # cluster.json holds its supervisor's pid; the command's own is in run/NAME.pid
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            assert argv[1].endswith(b"supervise.py"), argv
            pid = int((local_cluster.local_dir / "run" / f"{name}.pid").read_text())
            assert script.process_alive(pid, script.RUNTIME_PYTHON), f"{name} (pid {pid})"
        argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]]
        # the runtime's command (the command server's client) ran the release's console script
        console_script = Path(local_cluster.runtime_command).resolve().with_name("scratchkeeper")
        assert Path(argv[1]).resolve() == console_script
        assert argv[2:] == ["-c", str(local_cluster.site_config), *script.MANAGED_SERVICES[name]]
        assert f"{name}: logging to {log_path} (pid {pid})" in Path(log_path).read_text()
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(local_cluster.recovery_socket))
    listing = subprocess.run([str(LOCAL_CLUSTER_SCRIPT), "status"], capture_output=True,
                             text=True, timeout=60).stdout.splitlines()
    for name in script.MANAGED_SERVICES:
        assert any(line.split()[:3] == [name, str(status["pids"][name]), "running"]
                   for line in listing), listing


@pytest.fixture
def plain_work(local_cluster):
    """A folder of the plain user for its scripts and job output, a source file on the servers,
    and a scratch folder name of its own (it does not exist yet: the user's jobs make it)."""
    uid, gid = plain_user()
    # tempfile's folder: one every host sees (tests/conftest.py, SHARED_TEMP)
    work = Path(tempfile.mkdtemp(prefix="sk-plain-"))
    os.chown(work, uid, gid)
    tag = uuid.uuid4().hex[:8]
    source = local_cluster.source_dir / f"plain-{tag}"
    source.mkdir()
    payload = os.urandom(1_500_001)
    (source / "input.dat").write_bytes(payload)
    (source / "input.dat").chmod(0o644)
    scratch = local_cluster.scratch_root / f"{PLAIN_USER}-{tag}"
    yield work, source / "input.dat", payload, scratch
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(source, ignore_errors=True)


def as_plain_user(argv: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    # a login-less environment: no SCRATCHKEEPER_CONFIG, so the command reads the default config
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
    return subprocess.run(["runuser", "-u", PLAIN_USER, "--", "env", "-i",
                           *(f"{k}={v}" for k, v in env.items()), *argv],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd)


def test_a_plain_user_stages_with_submit_and_with_sbatch_right_after_up(local_cluster,
                                                                        plain_work):
    work, source, payload, scratch = plain_work
    uri = f"{local_cluster.gridftp_url}{source}"
    command = local_cluster.runtime_command
    staged = {name: scratch / name / "input.dat" for name in ("submit", "sbatch", "dw")}
    scripts = {
        # `scratchkeeper submit` of a chain (#STAGEIN), handed to the chain service
        "submit": f"#!/bin/bash\n#SBATCH --job-name=plain-submit\n#SBATCH --output={work}/%j.out\n"
                  f"#STAGEIN {uri} {staged['submit']}\n"
                  f"{command} store cat {staged['submit']} | sha256sum > {work}/submit.sha\n",
        # plain sbatch with the SPANK plugin's --stage-in=SRC:DST
        "sbatch": f"#!/bin/bash\n#SBATCH --job-name=plain-sbatch\n#SBATCH --output={work}/%j.out\n"
                  f"#SBATCH --stage-in={uri}:{staged['sbatch']}\n"
                  f"{command} store cat {staged['sbatch']} | sha256sum > {work}/sbatch.sha\n",
        # `scratchkeeper submit` of a DataWarp script: held and chained like #STAGEIN (it was
        # once cancelled as if job_submit.lua were missing)
        "dw": f"#!/bin/bash\n#SBATCH --job-name=plain-dw\n#SBATCH --output={work}/%j.out\n"
              f"#DW stage_in source={uri} destination={staged['dw']} type=file\n"
              f"{command} store cat {staged['dw']} | sha256sum > {work}/dw.sha\n",
    }
    for name, text in scripts.items():
        (work / f"{name}.sh").write_text(text)
        (work / f"{name}.sh").chmod(0o644)
    job_ids = []
    try:
        for name in ("submit", "dw"):
            submitted = as_plain_user([command, "submit", f"{work}/{name}.sh"], cwd=work)
            assert submitted.returncode == 0, submitted.stderr
            assert "held until the chain service has chained its data jobs" in submitted.stdout
            job_ids.append(submitted.stdout.split()[1].rstrip(":"))
        sbatched = as_plain_user(["sbatch", "--parsable", f"{work}/sbatch.sh"], cwd=work)
        assert sbatched.returncode == 0, sbatched.stderr
        job_ids.append(sbatched.stdout.strip().split(";")[0])
        # nobody chains them by hand: the chain service `up` started does
        states = {job: local_cluster.wait_for_job(job, timeout=240) for job in job_ids}
        assert states == dict.fromkeys(job_ids, "COMPLETED")
    finally:
        local_cluster.command(["scancel", *job_ids], check=False)
    want = hashlib.sha256(payload).hexdigest()
    for name in scripts:
        assert (work / f"{name}.sha").read_text().split()[0] == want, name
    backend = open_backend(load_config(local_cluster.site_config))
    owner = pwd.getpwnam(PLAIN_USER).pw_uid
    for path in staged.values():
        assert backend.stat(str(path)).uid == owner
    report = as_plain_user([command, "status", job_ids[0], "--json"], cwd=work)
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["state"] == "completed"
    for path in staged.values():
        as_plain_user([command, "store", "rm", str(path)], cwd=work)


def test_the_mount_comes_back_by_itself_after_kill_9(local_cluster, script):
    """kill -9 of the mount leaves a dead mount answering ENOTCONN; its supervisor starts it
    again, which detaches the dead mount and mounts anew (what the systemd unit's
    Restart=always does on a site): a file closed before the kill reads whole, an fsync'd write
    survives. (docs/local-cluster.rst, "The supervised mount")"""
    folder = local_cluster.scratch_root / f"kill9-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    closed, synced = os.urandom(3_000_001), os.urandom(1_048_577)
    (folder / "closed.dat").write_bytes(closed)
    fd = os.open(folder / "synced.dat", os.O_WRONLY | os.O_CREAT, 0o644)
    assert os.write(fd, synced) == len(synced)
    os.fsync(fd)  # still open when the mount dies
    supervisor = json.loads(local_cluster.status_path.read_text())["pids"]["mount"]
    pid_file = local_cluster.local_dir / "run" / "mount.pid"
    pid = int(pid_file.read_text())
    log = local_cluster.log_dir / "mount.log"
    detached_before = log.read_text(errors="replace").count("a stale mount of a killed instance")
    os.kill(pid, 9)
    script.wait_until(lambda: not script.process_alive(pid, script.RUNTIME_PYTHON), 30)
    try:
        os.close(fd)
    except OSError:
        pass  # ENOTCONN: the close of a dead mount's file
    with pytest.raises(OSError) as dead:
        os.statvfs(folder)  # the supervisor waits 2 s before it starts the mount again
    assert dead.value.errno == errno.ENOTCONN

    def back() -> bool:
        try:
            return int(pid_file.read_text()) != pid and bool(os.statvfs(folder))
        except (OSError, ValueError):
            return False

    assert script.wait_until(back, 30), "the mount is not back 30 s after kill -9"
    assert log.read_text(errors="replace").count("a stale mount of a killed instance") > \
        detached_before
    assert json.loads(local_cluster.status_path.read_text())["pids"]["mount"] == supervisor
    assert (folder / "closed.dat").read_bytes() == closed
    assert (folder / "synced.dat").read_bytes() == synced
    shutil.rmtree(folder)
    local_cluster.wait_for_the_mount_gate()  # the health check drained the nodes meanwhile
