"""Offload at close on the real local cluster: a job writing three results through the scratch
mount sees each one offloaded while it still runs, and the stage-out at its end sends none
of them again."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from scratchkeeper.config import load_config
from scratchkeeper.state import StateStore
from user_runtime import PLAIN_USER, plain_user


def sk(cluster, *args, cwd=None):
    argv = [sys.executable, "-m", "scratchkeeper", "-c", str(cluster.site_config), *args]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=400, cwd=cwd)
    assert result.returncode == 0, f"{argv} exit {result.returncode}: {result.stderr}"
    return result


def as_plain_user(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
    return subprocess.run(["runuser", "-u", PLAIN_USER, "--", "env", "-i",
                           *(f"{k}={v}" for k, v in env.items()), *argv],
                          capture_output=True, text=True, timeout=120, cwd=cwd)


@pytest.mark.parametrize("who", ["root", "plain user"])
def test_each_result_is_offloaded_while_its_job_runs(local_cluster, tmp_path, who):
    name = "close" + uuid.uuid4().hex[:8]
    sink = local_cluster.sink_dir / name
    if who == "root":
        scratch = local_cluster.scratch_root / "tests" / name
    else:
        # the user's own job through the chain service: offload jobs run as that user
        uid, gid = plain_user()
        tmp_path = Path(tempfile.mkdtemp(prefix="sk-close-"))  # every host sees it
        os.chown(tmp_path, uid, gid)
        scratch = local_cluster.scratch_root / f"{PLAIN_USER}-{name}"
    script = tmp_path / "job.sh"
    # a result already there before the job (never closed while it runs): the stage-out at the
    # end sends it, and only it; its close record is read before the chain exists
    (scratch / "results").mkdir(parents=True)
    (scratch / "results" / "r0.dat").write_bytes(os.urandom(500_000))
    if who != "root":
        os.chown(scratch, uid, gid)
        os.chown(scratch / "results", uid, gid)
        os.chown(scratch / "results" / "r0.dat", uid, gid)
    time.sleep(7)                       # one sweep of the chain service
    # the job writes a result, then waits (at most 60 s) until it is at the sink whole before
    # it writes the next one: each line of progress.txt says whether it got there meanwhile
    script.write_text(f"""#!/bin/bash
#SBATCH -t 5
#STAGEOUT -when close
#STAGEOUT {scratch}/results/ {local_cluster.gridftp_url}{sink}/
mkdir -p {scratch}/results
for i in 1 2 3; do
  head -c $((1000000 * i)) /dev/urandom > {scratch}/results/r$i.dat
  state=missing
  for t in $(seq 1 240); do
    if [ "$(stat -c %s {sink}/r$i.dat 2>/dev/null)" = "$((1000000 * i))" ]; then
      state=seen; break
    fi
    sleep 0.25
  done
  echo "r$i $state" >> progress.txt
done
""")
    if who == "root":
        chain = json.loads(sk(local_cluster, "submit", str(script), "--json",
                              cwd=tmp_path).stdout)
        compute_id = chain["jobs"][0]["job_id"]
    else:
        script.chmod(0o644)
        submitted = as_plain_user([local_cluster.runtime_command, "submit", str(script)],
                                  cwd=tmp_path)
        assert submitted.returncode == 0, submitted.stderr
        compute_id = submitted.stdout.split()[1].rstrip(":")
        local_cluster.wait_for_job(compute_id, timeout=300)
        time.sleep(8)                   # the chain service records the stage-out's end
    report = json.loads(sk(local_cluster, "status", compute_id, "--json", "--wait",
                           "360").stdout)
    assert report["state"] == "completed", report
    assert (tmp_path / "progress.txt").read_text().split("\n")[:3] == ["r1 seen", "r2 seen",
                                                                      "r3 seen"]
    for i in (0, 1, 2, 3):
        sent = (sink / f"r{i}.dat").read_bytes()
        kept = (scratch / "results" / f"r{i}.dat").read_bytes()
        assert hashlib.sha256(sent).digest() == hashlib.sha256(kept).digest()
    stage_out = report["jobs"][1]
    log = open(stage_out["log_path"]).read()
    # the transfer at the end sent r0 alone, through the folder of links to what changed
    assert "1 file(s) to send, 3 offloaded at close and unchanged" in log, log
    assert "attempt 1 of" in log and ".results.sk-changed-" not in "".join(
        p.name for p in scratch.iterdir()), log
    # one offload job per result, each recorded with the digest of what it sent
    config = load_config(local_cluster.site_config)
    store = StateStore(config.state.database)
    offloads = store.query("SELECT * FROM offloads WHERE chain_id=? ORDER BY path",
                           (report["chain_id"],))
    assert [(Path(r["path"]).name, r["state"]) for r in offloads] == [
        ("r1.dat", "done"), ("r2.dat", "done"), ("r3.dat", "done")]
    for row, i in zip(offloads, (1, 2, 3)):
        assert row["digest"] == hashlib.sha256((sink / f"r{i}.dat").read_bytes()).hexdigest()
    users = subprocess.run(["sacct", "-n", "-X", "-P", "-o", "User", "-j",
                            ",".join(r["job_id"] for r in offloads)],
                           capture_output=True, text=True, timeout=30).stdout.split()
    assert users == [PLAIN_USER if who != "root" else "root"] * 3
    if who != "root":
        shutil.rmtree(tmp_path, ignore_errors=True)

