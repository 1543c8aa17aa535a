"""On the local cluster, a plain user's ``scratchkeeper -c site-pbs.toml submit``: root's PBS
configuration submits directly into root's state folder, which the user may not write, so it is
one line naming the folder, exit 2, and nothing queued (issue 32: a ``PermissionError``
traceback)."""

from __future__ import annotations

import os
import subprocess

from user_runtime import plain_user, user_runtime


def test_a_plain_users_pbs_submission_is_one_line_and_nothing_queued(local_cluster, tmp_path):
    local_cluster.skip_without_torque()
    uid, gid = plain_user()
    command = user_runtime(tmp_path)
    work = local_cluster.scratch_root / f"plain-pbs-{os.getpid()}"
    work.mkdir()
    try:
        os.chown(work, uid, gid)
        script = work / "job.sh"
        script.write_text("#!/bin/bash\n#PBS -N skplainpbs\n#PBS -l walltime=00:01:00\ntrue\n")
        os.chmod(script, 0o644)

        def as_plain():
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)

        done = subprocess.run([*command, "-c", str(local_cluster.site_config_pbs), "submit",
                               "job.sh"], cwd=work, capture_output=True, text=True, timeout=120,
                              preexec_fn=as_plain)
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
        assert f"permission denied for uid {uid}" in done.stderr
        assert str(local_cluster.site_config_pbs) in done.stderr
        queued = subprocess.run(["squeue", "-h", "-n", "skplainpbs", "-o", "%i"],
                                capture_output=True, text=True, timeout=30)
        assert queued.returncode == 0 and queued.stdout.strip() == "", queued
    finally:
        subprocess.run(["rm", "-rf", "--", str(work)], check=False, timeout=60)
