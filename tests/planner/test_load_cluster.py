"""60 chains submitted at once on the real local cluster, each a small ``file://`` stage-in
(issue 14: 6 of 60 stage-in jobs failed after their transfer had succeeded, with
``namespace.db: cannot open state database: database is locked``, and their compute jobs were
cancelled). Every stage-in must commit, every compute job run, no log mention a locked database.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
import uuid

import pytest

from scratchkeeper.config import load_config
from scratchkeeper.planner import records
from scratchkeeper.state import StateStore
from scratchkeeper.storage import open_backend

CHAINS = 60
PAYLOAD = 64 << 10
SUBMITTERS = 12
LOCKED = "database is locked"
#: sacct states of a job that has not ended yet
ACTIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING",
                    "SUSPENDED", "REQUEUE_HOLD", "REQUEUE_FED", "SIGNALING", "STAGE_OUT"})


def _checkout_config(cluster, tmp_path):
    """The cluster's root configuration with data jobs calling back into this checkout (not
    the installed runtime), so the test runs the code under test."""
    command = shlex.join([sys.executable, "-m", "scratchkeeper"])
    text = re.sub(r"(?m)^command\s*=.*$", lambda _: f"command = {json.dumps(command)}",
                  cluster.site_config.read_text())
    if f"command = {json.dumps(command)}" not in text:
        text += f"\n[templates]\ncommand = {json.dumps(command)}\n"
    path = tmp_path / "site.toml"
    path.write_text(text)
    return path


def _submit(config_path, script, cwd) -> dict:
    argv = [sys.executable, "-m", "scratchkeeper", "-c", str(config_path), "submit",
            str(script), "--json"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=cwd)
    assert result.returncode == 0, f"{script}: exit {result.returncode}: {result.stderr}"
    return json.loads(result.stdout)


SLOW_WRITER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)
while True:
    conn.execute("BEGIN EXCLUSIVE")
    time.sleep(3.0)
    conn.execute("COMMIT")
    time.sleep(1.0)
"""


def _slow_writer(database) -> subprocess.Popen:
    """A writer that holds the database's lock 3 s out of every 4 s: the slow commits of a
    loaded machine, made deterministic (the report's failures came from opens that waited 1 s
    for the journal mode switch, then failed on the next statement)."""
    return subprocess.Popen([sys.executable, "-c", SLOW_WRITER, str(database)])


def _wait_all(cluster, job_ids: list[str], timeout: float) -> dict[str, str]:
    """Each job's final state (one sacct call per poll for all of them)."""
    deadline = time.monotonic() + timeout
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        result = cluster.command(["sacct", "-n", "-X", "-P", "-o", "JobID,State,Partition",
                                  "-j", ",".join(job_ids)], check=False, timeout=60)
        for line in result.stdout.splitlines():
            fields = line.split("|")
            if len(fields) == 3 and fields[2] and fields[1].split()[0] not in ACTIVE:
                states[fields[0]] = fields[1].split()[0]
        if len(states) == len(job_ids):
            return states
        time.sleep(3)
    pytest.fail(f"{len(job_ids) - len(states)} of {len(job_ids)} jobs not finished after "
                f"{timeout:g}s")


def test_sixty_chains_submitted_at_once_all_stage_in_and_run(local_cluster, tmp_path):
    run = "load" + uuid.uuid4().hex[:8]
    source = local_cluster.source_dir / run
    source.mkdir()
    scratch = local_cluster.scratch_root / "tests" / run
    payloads, scripts = {}, []
    for index in range(CHAINS):
        payloads[index] = os.urandom(PAYLOAD + index)
        (source / f"in{index}.dat").write_bytes(payloads[index])
        script = tmp_path / f"chain{index}.sh"
        script.write_text(f"""#!/bin/bash
#SBATCH --job-name={run}-{index}
#SBATCH --output={tmp_path}/compute-{index}.out
#STAGEIN -retry 1
#STAGEIN file://{source}/in{index}.dat {scratch}/in{index}.dat
echo computed {index}
""")
        scripts.append(script)
    config_path = _checkout_config(local_cluster, tmp_path)
    started = time.monotonic()
    # as fast as slurmctld takes them on 2 cores (60 at once time out its socket)
    with concurrent.futures.ThreadPoolExecutor(max_workers=SUBMITTERS) as pool:
        submitted = list(pool.map(lambda s: _submit(config_path, s, tmp_path), scripts))
    jobs = {job["job_id"]: (index, job["role"])
            for index, chain in enumerate(submitted) for job in chain["jobs"]}
    writer = _slow_writer(local_cluster.store_root / "namespace.db")
    try:
        states = _wait_all(local_cluster, list(jobs), timeout=900)
    finally:
        writer.terminate()
        writer.wait(timeout=30)
    elapsed = time.monotonic() - started

    failed = {job_id: (jobs[job_id], state) for job_id, state in states.items()
              if state != "COMPLETED"}
    config = load_config(config_path)
    store = records.open_records(StateStore(config.state.database))
    logs = {}
    for chain in submitted:
        for row in records.chain_jobs(store, chain["chain_id"]):
            if row["log_path"]:
                path = row["log_path"].replace("%j", row["job_id"])
                logs[path] = open(path, errors="replace").read()
    locked = [path for path, text in logs.items() if LOCKED in text]
    assert failed == {} and locked == [], (failed, locked,
                                           [logs[p][-600:] for p in locked[:3]])
    assert len(logs) == CHAINS
    backend = open_backend(config)
    for index, chain in enumerate(submitted):
        (row,) = records.staged_files(store, chain["chain_id"])
        path = str(scratch / f"in{index}.dat")
        digest = hashlib.sha256(payloads[index]).hexdigest()
        assert (row["path"], row["state"], row["checksum"]) == (path, "staged", "sha256:" + digest)
        assert backend.stat(path).size == len(payloads[index])
        assert [r["state"] for r in records.chain_jobs(store, chain["chain_id"])][0] == "done"
        assert (tmp_path / f"compute-{index}.out").read_text() == f"computed {index}\n"
    print(f"{CHAINS} chains in {elapsed:.0f}s")
