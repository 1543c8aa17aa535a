"""The Slurm plugins loaded by the real slurmctld and slurmd of the local cluster."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pwd
import shlex
import socket
import subprocess
import sys

import pytest

from scratchkeeper.chain_service.attach import CHAINED, PENDING
from scratchkeeper.config import load_config
from scratchkeeper.planner import records
from scratchkeeper.recovery.service import RecoveryService
from scratchkeeper.replication.state import JOB_ENDED, ReplicationState
from scratchkeeper.state import StateStore
from scratchkeeper.storage import open_backend
from user_runtime import PLAIN_USER, plain_user, user_runtime

from .conftest import sk, wait_for_log

pytestmark = pytest.mark.usefixtures("own_services")



def admin_comment(job_id: str) -> str:
    """The full admin comment (scontrol shows only its first line)."""
    out = subprocess.run(["squeue", "--json"], capture_output=True, text=True, timeout=30).stdout
    for job in json.loads(out)["jobs"]:
        if str(job["job_id"]) == job_id:
            return job.get("admin_comment") or ""
    return ""


def replicad_running() -> bool:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if b"replicad" in open(f"/proc/{entry}/cmdline", "rb").read():
                    return True
            except OSError:
                continue
    return False


def reading_script(site, name: str, staging_line: str, staged, result_file) -> str:
    """A job script named ``name`` with one staging line, whose job writes the sha256 of the
    staged file (read through the store) to ``result_file``."""
    return f"""#!/bin/bash
#SBATCH --job-name={name}
#SBATCH --output=/dev/null
{staging_line}
{sys.executable} -m scratchkeeper -c {site.config_path} store cat {staged} \\
    | sha256sum | cut -d' ' -f1 > {result_file}
"""


def prolog_service(site, plugins) -> RecoveryService:
    """A recovery service on this test's site that the prologs ask: on the plugstack's socket
    and, where the plugstack names the head's address (``head=``, a site of many hosts), on
    that address too (the cluster's recoveryd is stopped by ``own_services``)."""
    config = dataclasses.replace(site.config, recovery=dataclasses.replace(
        site.config.recovery, socket=plugins.get("socket", "")))
    if plugins.get("head"):
        config = dataclasses.replace(config, head=dataclasses.replace(
            config.head, listen=plugins["head"]))
    return RecoveryService(config)


def head_listens(plugins) -> bool:
    """Whether something answers on the plugstack's head address."""
    host, _, port = plugins.get("head", "").rpartition(":")
    if not host:
        return False
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
    except OSError:
        return False
    return True


def chain_rows(site, job_id: str):
    """(store, chain id, the chain's jobs by role) of the chain the service made for job_id."""
    store = records.open_records(StateStore(site.config.state.database))
    chain_id = records.chain_of_job(store, job_id)
    return store, chain_id, {row["role"]: row for row in records.chain_jobs(store, chain_id)}


@pytest.mark.parametrize("option,value,message", [
    ("--stage-in", "nocolon", "expected SRC:DST (no ':' found)"),
    ("--stage-in", "ftp://127.0.0.1:2811/x:", "empty DST"),
    ("--stage-in", ":/scratch/x", "empty SRC"),
    ("--stage-in", "gopher://h/x:/scratch/x", "unknown scheme 'gopher'"),
    ("--stage-out", "/scratch/x:/not/a/uri", "expected SRC:DST with DST a URI"),
])
def test_bad_option_values_fail_sbatch_with_the_plugins_message(plugins, jobs, tmp_path,
                                                                 option, value, message):
    result = jobs.sbatch(f"{option}={value}", "--wrap=true", cwd=tmp_path, check=False)
    assert result.returncode != 0
    assert f"scratchkeeper: {option}={value}: {message}" in result.stderr
    assert not result.stdout.strip()  # nothing was submitted


def test_bad_sbatch_line_in_a_script_fails_too(plugins, jobs, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --stage-in=noseparator\ntrue\n")
    result = jobs.sbatch(str(script), cwd=tmp_path, check=False)
    assert result.returncode != 0 and "no ':' found" in result.stderr


def test_sbatch_stage_in_line_gets_the_planners_data_job_and_metadata(plugins, jobs, site, source,
                                                                      local_cluster):
    path, data = source("input.dat", 700_000)
    uri = f"{local_cluster.gridftp_url}{path}"
    staged = site.root / "scratch" / "run" / "input.dat"
    result_file = site.root / "sha.txt"
    script = site.root / "job.sh"
    script.write_text(reading_script(site, "plugin-stage", f"#SBATCH --stage-in={uri}:{staged}",
                                     staged, result_file))
    job_id = jobs.sbatch(str(script), cwd=site.root).stdout.strip()
    comment = admin_comment(job_id)
    assert comment.startswith(PENDING) and f"stage-in {uri}:{staged}" in comment
    assert subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%r"], capture_output=True,
                          text=True).stdout.strip() == "JobHeldUser"

    out = sk(site, "spank", "chain", job_id).stdout
    assert f"job {job_id}: chain sk" in out and "stage-in" in out
    store, chain_id, rows = chain_rows(site, job_id)
    assert rows["compute"]["job_id"] == job_id
    jobs.track([rows["stage-in"]["job_id"]])
    assert admin_comment(job_id).startswith(f"{CHAINED} {chain_id}")
    queue = subprocess.run(["squeue", "-h", "-j", rows["stage-in"]["job_id"], "-o", "%P %j"],
                           capture_output=True, text=True).stdout.split()
    if queue:  # it may have run already
        assert queue == ["dataxfer", "plugin-stage.stage-in"]

    assert local_cluster.wait_for_job(job_id, timeout=120) == "COMPLETED"
    # accounting completes a short job's record a moment after it ends
    assert local_cluster.wait_for_job(rows["stage-in"]["job_id"]) == "COMPLETED"
    assert result_file.read_text().strip() == hashlib.sha256(data).hexdigest()
    listing = sk(site, "store", "xattr", str(staged)).stdout
    assert f"user.scratchkeeper.source={uri}" in listing
    assert f"user.scratchkeeper.job={job_id}" in listing
    assert f"user.scratchkeeper.sha256={hashlib.sha256(data).hexdigest()}" in listing
    (row,) = records.staged_files(store, chain_id)
    assert row["state"] == "staged" and row["source"] == uri and row["size"] == len(data)


def test_directive_script_given_to_plain_sbatch_is_held_for_chaining(plugins, jobs, site,
                                                                   local_cluster):
    script = site.root / "job.sh"
    script.write_text(f"#!/bin/bash\n#STAGEIN -input {local_cluster.scratch_root}/nonexistent/input"
                      "\ntrue\n")
    job_id = jobs.sbatch("--output=/dev/null", str(script), cwd=site.root).stdout.strip()
    assert admin_comment(job_id).startswith(PENDING)
    assert "directives" in admin_comment(job_id)


def test_datawarp_script_given_to_plain_sbatch_is_chained_and_runs_with_its_data(
        plugins, jobs, site, source, local_cluster):
    """`#DW stage_in` under plain sbatch: held like #STAGEIN, chained, run with its data."""
    path, data = source("dw.dat", 300_001)
    uri = f"{local_cluster.gridftp_url}{path}"
    staged = site.root / "scratch" / "dw" / "dw.dat"
    result_file = site.root / "dw-sha.txt"
    script = site.root / "dw.sh"
    script.write_text(reading_script(
        site, "plugin-dw", f"#DW stage_in source={uri} destination={staged} type=file", staged,
        result_file))
    job_id = jobs.sbatch(str(script), cwd=site.root).stdout.strip()
    assert admin_comment(job_id) == f"{PENDING}\ndirectives"
    sk(site, "spank", "chain", job_id)
    _, _, rows = chain_rows(site, job_id)
    jobs.track([rows["stage-in"]["job_id"]])
    assert local_cluster.wait_for_job(job_id, timeout=120) == "COMPLETED"
    assert result_file.read_text().strip() == hashlib.sha256(data).hexdigest()


def test_pbs_stagein_script_given_to_qsub_is_held_for_chaining(plugins, jobs, site,
                                                              local_cluster):
    """Torque's qsub wrapper hands the script to sbatch as it is: a `#PBS -W stagein=` line
    gets the job held for the chain service, never run without its data."""
    local_cluster.skip_without_torque()
    script = site.root / "pbs.sh"
    script.write_text(f"#!/bin/bash\n#PBS -N plugin-pbs\n#PBS -o /dev/null\n"
                      f"#PBS -W stagein={site.root}/scratch/pbs/in.dat@localhost:/nonexistent\n"
                      "true\n")
    submitted = subprocess.run(["qsub", str(script)], capture_output=True, text=True,
                               timeout=60, cwd=site.root)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip().splitlines()[-1].split(".")[0]
    jobs.track([job_id])
    assert admin_comment(job_id) == f"{PENDING}\ndirectives"
    assert subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%r"], capture_output=True,
                          text=True, timeout=30).stdout.strip() == "JobHeldUser"


def test_the_owner_cannot_release_a_job_before_it_is_chained(plugins, jobs, local_cluster):
    user = _plain_user()
    job_id = jobs.sbatch("--output=/dev/null",
                         f"--stage-in=ftp://127.0.0.1:2811/none:{local_cluster.scratch_root}/none",
                         "--wrap=true", cwd="/tmp", user=user).stdout.strip()
    release = subprocess.run(["runuser", "-u", user, "--", "scontrol", "release", job_id],
                             capture_output=True, text=True, timeout=30)
    assert release.returncode != 0
    state = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T %r"], capture_output=True,
                           text=True, timeout=30).stdout.split()
    assert state == ["PENDING", "JobHeldUser"]
    # other updates by the owner still work
    subprocess.run(["runuser", "-u", user, "--", "scontrol", "update", f"JobId={job_id}",
                    "TimeLimit=10"], check=True, capture_output=True, timeout=30)


def _plain_user() -> str:
    plain_user()
    return PLAIN_USER


@pytest.mark.parametrize("queue", ["dataxfer", "replica"])
def test_a_plain_users_submission_to_a_data_queue_is_refused(plugins, jobs, queue):
    user = _plain_user()
    result = jobs.sbatch(f"--partition={queue}", "--output=/dev/null", "--wrap=true",
                         cwd="/tmp", user=user, check=False)
    assert result.returncode != 0
    assert f"partition {queue} is reserved for scratchkeeper's data jobs" in result.stderr
    # the same user may still use the batch queue
    ok = jobs.sbatch("--partition=batch", "--output=/dev/null", "--wrap=true", cwd="/tmp",
                     user=user)
    assert ok.stdout.strip().isdigit()


def test_recovery_service_down_job_still_runs_and_epilog_reaches_replicad(plugins, jobs,
                                                                          local_cluster, tmp_path):
    socket_path = plugins.get("socket", "")
    if os.path.exists(socket_path) or head_listens(plugins):
        pytest.skip(f"a recovery service listens on {socket_path} or {plugins.get('head')}; "
                    "cannot test it down")
    job_id = jobs.sbatch("--output=/dev/null", "--wrap=true", cwd=tmp_path).stdout.strip()
    assert local_cluster.wait_for_job(job_id, timeout=60) == "COMPLETED"
    assert wait_for_log(local_cluster, f"scratchkeeper: job {job_id}: recovery service "
                                       f"unreachable, inputs not checked")
    if plugins.get("head"):
        # a site of many hosts: the epilog's job-ended goes to the head's service, which is
        # down; the epilog says so in one line, within head.refused_wait, not its timeout
        told = wait_for_log(local_cluster, f"scratchkeeper: job {job_id}: could not tell the "
                                           f"replication daemon the job ended: ")
        # (the plugin logs the command's exit, not its words: exited 1, before epilog_timeout)
        assert told and "exited 1" in told[-1] and "timed out" not in told[-1], told
        return
    assert wait_for_log(local_cluster, f"scratchkeeper: job {job_id}: replication daemon told "
                                       f"the job ended")
    config = load_config(plugins["config"])
    events = ReplicationState(StateStore(config.state.database)).pending_events()
    if not any(e["kind"] == JOB_ENDED and e["job_id"] == job_id for e in events):
        # a replicad on that database consumes events at once; it must have logged the job
        assert replicad_running(), f"no {JOB_ENDED} event for job {job_id} and no replicad"


def test_prolog_recovers_a_file_on_a_failed_ost_before_the_job_runs(plugins, jobs, site, source,
                                                                     local_cluster):
    socket_path = plugins.get("socket", "")
    if os.path.exists(socket_path):
        probe = socket.socket(socket.AF_UNIX)
        try:
            probe.connect(socket_path)
            pytest.skip(f"another recovery service listens on {socket_path}")
        except OSError:
            os.unlink(socket_path)  # a stale socket of a dead service
        finally:
            probe.close()
    if head_listens(plugins):
        pytest.skip(f"another recovery service listens on {plugins['head']}")
    path, data = source("lost.dat", 1_500_000)
    uri = f"{local_cluster.gridftp_url}{path}"
    staged = site.root / "scratch" / "lost.dat"
    first = site.root / "first.sh"
    first.write_text(f"#!/bin/bash\n#SBATCH --output=/dev/null\n"
                     f"#SBATCH --stage-in={uri}:{staged}\ntrue\n")
    job_id = jobs.sbatch(str(first), cwd=site.root).stdout.strip()
    sk(site, "spank", "chain", job_id)
    assert local_cluster.wait_for_job(job_id, timeout=120) == "COMPLETED"

    backend = open_backend(site.config)
    failed = backend.layout(str(staged)).ost_list[0]  # the first stripe always holds data
    backend.fail_ost(failed)
    assert "damaged" in sk(site, "recovery", "status", str(staged), check=False).stdout

    # The prolog asks the socket (or the head) in plugstack.conf: serve it from this test's
    # site. start() runs only the socket and its workers, not the periodic check (run()), so a
    # patch can only come from a request: the job prolog's.
    service = prolog_service(site, plugins)
    service.start()
    try:
        result_file = site.root / "sha.txt"
        second = site.root / "second.sh"
        second.write_text(
            f"#!/bin/bash\n#SBATCH --output=/dev/null\n#STAGEIN -input {staged}\n"
            f"{sys.executable} -m scratchkeeper -c {site.config_path} store cat {staged} "
            f"| sha256sum | cut -d' ' -f1 > {result_file}\n")
        reader = jobs.sbatch(str(second), cwd=site.root).stdout.strip()
        sk(site, "spank", "chain", reader)
        assert local_cluster.wait_for_job(reader, timeout=120) == "COMPLETED"
        assert wait_for_log(local_cluster, f"scratchkeeper: job {reader}: staged inputs whole")
    finally:
        service.shutdown()
    assert result_file.read_text().strip() == hashlib.sha256(data).hexdigest()
    assert "whole" in sk(site, "recovery", "status", str(staged), check=False).stdout


def test_optional_plugin_lets_a_job_with_a_lost_input_run_and_logs_it(plugins, jobs, site,
                                                                      source, local_cluster):
    """With ``optional`` Slurm turns the prolog's error into success: no drained node."""
    socket_path = plugins.get("socket", "")
    if os.path.exists(socket_path) or head_listens(plugins):
        pytest.skip(f"a recovery service (or its stale socket) is at {socket_path}")
    path, _ = source("gone.dat", 300_000)
    uri = f"{local_cluster.gridftp_url}{path}"
    staged = site.root / "scratch" / "gone.dat"
    first = site.root / "first.sh"
    first.write_text(f"#!/bin/bash\n#SBATCH --output=/dev/null\n"
                     f"#SBATCH --stage-in={uri}:{staged}\ntrue\n")
    job_id = jobs.sbatch(str(first), cwd=site.root).stdout.strip()
    sk(site, "spank", "chain", job_id)
    assert local_cluster.wait_for_job(job_id, timeout=120) == "COMPLETED"
    path.unlink()  # the only copy left is gone: recovery must fail
    backend = open_backend(site.config)
    backend.fail_ost(backend.layout(str(staged)).ost_list[0])

    service = prolog_service(site, plugins)
    service.start()
    try:
        marker = site.root / "ran"
        second = site.root / "second.sh"
        second.write_text(f"#!/bin/bash\n#SBATCH --output=/dev/null\n#STAGEIN -input {staged}\n"
                          f"touch {marker}\n")
        reader = jobs.sbatch(str(second), cwd=site.root).stdout.strip()
        sk(site, "spank", "chain", reader)
        assert local_cluster.wait_for_job(reader, timeout=120) == "COMPLETED"
        assert wait_for_log(local_cluster, f"scratchkeeper: job {reader}: staged input not whole")
    finally:
        service.shutdown()
    assert marker.exists()
    drained = subprocess.run(["sinfo", "-h", "-t", "drain,draining", "-o", "%N"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
    assert not drained


def test_a_plain_users_script_is_chained_by_root_and_staged_as_that_user(plugins, jobs, site,
                                                                          source, local_cluster):
    """The data queue admits only root (job_submit.lua's default ACL), so a plain user's
    `scratchkeeper submit` hands the script to the chain service; the data job runs as the user
    and records what it staged through recoveryd, which owns the state database."""
    user = _plain_user()
    account = pwd.getpwnam(user)
    command = user_runtime(site.root / "runtime")
    config_path = site.root / "user-site.toml"
    config_path.write_text(
        site.config_path.read_text().replace(
            "[scheduler]\n", '[scheduler]\nsubmit_via = "chain-service"\n', 1)
        + f"\n[templates]\ncommand = {json.dumps(shlex.join(command))}\n")
    config = load_config(config_path)
    store = records.open_records(StateStore(config.state.database))  # root's, as on a site
    open_backend(config).list_osts()  # the store exists before the user reads it
    home = site.root / "scratch" / user
    home.mkdir()
    os.chown(home, account.pw_uid, account.pw_gid)
    path, data = source("plain.dat", 1_300_007)
    uri = f"{local_cluster.gridftp_url}{path}"
    staged = home / "in" / "plain.dat"
    result_file = home / "result.txt"
    script = home / "job.sh"
    script.write_text(f"""#!/bin/bash
#SBATCH --job-name=plain-chain
#SBATCH --output=/dev/null
#STAGEIN {uri} {staged}
id -u > {result_file}
""")
    os.chown(script, account.pw_uid, account.pw_gid)

    service = RecoveryService(config)
    service.start()
    try:
        submitted = subprocess.run(["runuser", "-u", user, "--", *command, "-c", str(config_path),
                                    "submit", str(script)], capture_output=True, text=True,
                                   timeout=120, cwd=home)
        assert submitted.returncode == 0, submitted.stderr
        job_id = submitted.stdout.split()[1].rstrip(":")
        jobs.track([job_id])
        assert f"job {job_id}: held until the chain service has chained its data jobs" \
            in submitted.stdout
        assert admin_comment(job_id).startswith(PENDING)

        sk_config = dataclasses.replace(site, config=config, config_path=config_path)
        sk(sk_config, "spank", "chain", job_id)
        chain_id = records.chain_of_job(store, job_id)
        rows = {row["role"]: row for row in records.chain_jobs(store, chain_id)}
        stage_in = rows["stage-in"]["job_id"]
        jobs.track([stage_in])
        assert records.chain(store, chain_id)["owner_uid"] == account.pw_uid
        assert local_cluster.wait_for_job(job_id, timeout=180) == "COMPLETED"
        assert local_cluster.job_state(stage_in) == "COMPLETED"
    finally:
        service.shutdown()
    accounted = subprocess.run(["sacct", "-n", "-X", "-P", "-j", stage_in, "-o", "User"],
                               capture_output=True, text=True, timeout=30).stdout.split()
    assert accounted == [user]
    # The job ran as the user; the staged bytes are read as root here, since this site has no
    # scratch mount (a user's `store cat` reads only through one: docs/security.rst).
    assert result_file.read_text().split() == [str(account.pw_uid)]
    backend = open_backend(config)
    assert hashlib.sha256(backend.read(str(staged), 0, len(data))).hexdigest() == \
        hashlib.sha256(data).hexdigest()
    assert backend.stat(str(staged)).uid == account.pw_uid
    (row,) = records.staged_files(store, chain_id)
    assert (row["state"], row["owner_uid"], row["source"]) == ("staged", account.pw_uid, uri)
    assert backend.get_xattr(str(staged), "user.scratchkeeper.source") == uri.encode()
