"""A stage-in with #STAGEIN -layout on the real local cluster: the staged file has the layout
the plan chose, its reason is recorded on it, and its data is whole."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import uuid

import pytest

from scratchkeeper.config import load_config
from scratchkeeper.storage import open_backend


def test_stage_in_creates_the_file_with_the_chosen_layout(local_cluster, tmp_path):
    name = "layout" + uuid.uuid4().hex[:8]
    payload = os.urandom(3_000_000)
    (local_cluster.source_dir / f"{name}.dat").write_bytes(payload)
    staged = local_cluster.scratch_root / "tests" / name / "in.dat"
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\n#SBATCH -n 4\n"
                      f"#STAGEIN -layout 1dv -stripe-count 2 -stripe-size 256K\n"
                      f"#STAGEIN {local_cluster.gridftp_url}{local_cluster.source_dir}/{name}.dat "
                      f"{staged}\nsha256sum {staged}\n")
    argv = [sys.executable, "-m", "scratchkeeper", "-c", str(local_cluster.site_config)]
    chain = json.loads(subprocess.run([*argv, "submit", str(script), "--json"], cwd=tmp_path,
                                      capture_output=True, text=True, timeout=120,
                                      check=True).stdout)
    report = json.loads(subprocess.run([*argv, "status", chain["chain_id"], "--json", "--wait",
                                        "120"], capture_output=True, text=True,
                                       timeout=180).stdout)
    assert report["state"] == "completed", report
    backend = open_backend(load_config(local_cluster.site_config))
    component = backend.layout(str(staged)).first
    assert (component.stripe_count, component.stripe_size) == (2, 262144)
    reason = backend.get_xattr(str(staged), "user.scratchkeeper.layout").decode()
    assert reason.startswith("1-DV count=2 size=262144: ") and "-layout 1dv" in reason
    assert hashlib.sha256(staged.read_bytes()).digest() == hashlib.sha256(payload).digest()


def test_a_plain_users_stage_in_lays_out_its_own_file(local_cluster, tmp_path):
    """`#STAGEIN -layout` for a plain user (issue 32): the data job runs as the user, who may
    lay out only their own new file, through the scratch mount (as `lfs setstripe` lets a
    file's owner); submitted as a site's users submit, with the users' configuration."""
    import pwd
    import shutil
    import tempfile

    from user_runtime import PLAIN_USER, plain_user

    uid, gid = plain_user()
    if not local_cluster.runtime_command:
        pytest.fail("the local cluster installed no runtime for its users", pytrace=False)
    name = "layoutuser" + uuid.uuid4().hex[:8]
    payload = os.urandom(2_000_000)
    source = local_cluster.source_dir / f"{name}.dat"
    source.write_bytes(payload)
    source.chmod(0o644)
    home = local_cluster.scratch_root / name
    home.mkdir()
    os.chown(home, uid, gid)
    work = tempfile.mkdtemp(prefix="sk-layout-user-")
    os.chmod(work, 0o755)
    script = os.path.join(work, "job.sh")
    with open(script, "w") as handle:
        handle.write(f"#!/bin/bash\n#SBATCH -n 2 --output=/dev/null\n"
                     f"#STAGEIN -layout 1dv -stripe-count 2 -stripe-size 256K\n"
                     f"#STAGEIN {local_cluster.gridftp_url}{source} {home}/in.dat\n"
                     f"sha256sum {home}/in.dat\n")
    os.chown(script, uid, gid)
    argv = ["runuser", "-u", PLAIN_USER, "--", local_cluster.runtime_command,
            "-c", str(local_cluster.users_site_config)]
    job_id = None
    try:
        submitted = subprocess.run([*argv, "submit", script], capture_output=True, text=True,
                                   timeout=120, cwd=work)
        assert submitted.returncode == 0, submitted.stderr
        job_id = submitted.stdout.split()[1].rstrip(":")
        assert local_cluster.wait_for_job(job_id, timeout=180) == "COMPLETED", submitted.stdout
        backend = open_backend(load_config(local_cluster.site_config))
        staged = str(home / "in.dat")
        component = backend.layout(staged).first
        assert (component.stripe_count, component.stripe_size) == (2, 262144)
        assert backend.stat(staged).uid == uid == pwd.getpwnam(PLAIN_USER).pw_uid
        assert hashlib.sha256((home / "in.dat").read_bytes()).digest() == \
            hashlib.sha256(payload).digest()
    finally:
        if job_id:
            subprocess.run(["scancel", job_id], capture_output=True, timeout=30)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)
