"""Just-in-time stage-in on the real local cluster: learned from a real transfer, held back
behind a running job, started within the margin before the compute job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest

from scratchkeeper.config import load_config
from scratchkeeper.planner import records as staging_records
from scratchkeeper.state import StateStore
from stalled_jobs import wait_running

#: how long the job that keeps the compute job waiting runs (its time limit is 1 minute)
BLOCKER_SECONDS = 50


def sk(cluster, *args, cwd=None):
    argv = [sys.executable, "-m", "scratchkeeper", "-c", str(cluster.site_config), *args]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=cwd)
    assert result.returncode == 0, f"{argv} exit {result.returncode}: {result.stderr}"
    return result


def sacct_times(job_id: str) -> tuple[float, float]:
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "Start,End"],
                         capture_output=True, text=True, timeout=30).stdout.split("|")
    import datetime

    return tuple(datetime.datetime.fromisoformat(t.strip()).timestamp() for t in out)


def test_jit_stage_in_starts_within_the_margin_before_its_compute_job(local_cluster, tmp_path):
    name = "jit" + uuid.uuid4().hex[:8]
    (local_cluster.source_dir / f"{name}.dat").write_bytes(os.urandom(2_000_000))
    scratch = local_cluster.scratch_root / "tests" / name
    source = f"{local_cluster.gridftp_url}{local_cluster.source_dir}/{name}.dat"
    config = load_config(local_cluster.site_config)
    store = staging_records.open_staging(StateStore(config.state.database))

    # 1. a stage-in started now teaches the prediction this GridFTP server's throughput
    learn = tmp_path / "learn.sh"
    learn.write_text(f"#!/bin/bash\n#STAGEIN -start now\n#STAGEIN {source} {scratch}/learn.dat\n"
                     "true\n")
    first = json.loads(sk(local_cluster, "submit", str(learn), "--json", cwd=tmp_path).stdout)
    sk(local_cluster, "status", first["chain_id"], "--wait", "120")
    learned = staging_records.transfers_of(store, first["chain_id"])
    assert len(learned) == 1 and learned[0]["bytes"] == 2_000_000 and learned[0]["seconds"] > 0
    predicted = json.loads(sk(local_cluster, "staging", "predict", str(learn), "--json").stdout)
    assert predicted[0]["prediction"]["seconds"] is not None, predicted

    # 2. a job holds one CPU of every node for 50 s of its 1-minute limit (Slurm's estimate of
    # the compute job's start); the data queue (same nodes) keeps free CPUs, the compute job
    # (every node, exclusive) must wait for it. With the site's 20 s margin, the stage-in is
    # released about 35 s after the blocker started, well after the submission.
    blocker = subprocess.run(["sbatch", "--parsable", "-p", config.scheduler.batch_queue, "-N8",
                              "--ntasks-per-node=1", "-t", "1", "-o", "/dev/null",
                              "--wrap", f"sleep {BLOCKER_SECONDS}"], capture_output=True,
                             text=True, timeout=30, check=True).stdout.strip()
    chain_jobs: list[str] = []
    try:
        wait_running(blocker)
        job = tmp_path / "job.sh"
        job.write_text(f"#!/bin/bash\n#SBATCH -N 8 --exclusive -t 1\n#STAGEIN -start jit\n"
                       f"#STAGEIN {source} {scratch}/in.dat\nsha256sum {scratch}/in.dat\n")
        submitted_at = time.time()
        chain = json.loads(sk(local_cluster, "submit", str(job), "--json", cwd=tmp_path).stdout)
        stage_in_id, compute_id = chain["jobs"][0]["job_id"], chain["jobs"][1]["job_id"]
        chain_jobs += [job["job_id"] for job in chain["jobs"]]
        decision = staging_records.decisions(store, chain_id=chain["chain_id"])[0]
        assert decision["state"] == staging_records.WAITING, dict(decision)
        assert decision["estimate_source"] == "will-run"
        lead = decision["pessimistic"] + config.staging.jit_margin
        assert decision["release_at"] == pytest.approx(decision["expected_start"] - lead, abs=1)
        assert decision["release_at"] > submitted_at + 15       # the blocker has ~55 s to go
        report = json.loads(sk(local_cluster, "status", compute_id, "--json", "--wait",
                               "300").stdout)
        assert report["state"] == "completed", report
    except BaseException:
        subprocess.run(["scancel", *chain_jobs], timeout=30)   # no chain left held behind
        raise
    finally:
        subprocess.run(["scancel", blocker], timeout=30)
    stage_in_start, stage_in_end = sacct_times(stage_in_id)
    compute_start, _ = sacct_times(compute_id)
    _, blocker_end = sacct_times(blocker)
    # held back: not started at submission but at its release time, or earlier when the
    # estimate came forward (the blocker ended before its time limit, which the estimate
    # assumes; the sweep then starts the stage-in at once) ...
    assert stage_in_start >= min(decision["release_at"] - 5, blocker_end), (stage_in_start,
                                                                             dict(decision))
    assert stage_in_start >= submitted_at + 15, (stage_in_start, submitted_at)
    assert stage_in_start <= decision["release_at"] + 10, (stage_in_start, dict(decision))
    # ... within the margin (and the predicted transfer) before the compute job's start ...
    assert stage_in_end <= compute_start
    assert compute_start - stage_in_start <= lead + 10, (compute_start, stage_in_start, lead)
    # ... and the compute job did not wait for its data longer than a sweep and the transfer
    assert compute_start - blocker_end <= decision["pessimistic"] + 15, (compute_start,
                                                                         blocker_end)
    timing = report["jobs"][0]["timing"]
    assert timing["bytes"] == 2_000_000 and timing["started"] and timing["ended"]
    # the scheduler counts whole seconds: a transfer of 2 MB on loopback may take 0 of them
    assert timing["seconds"] >= 0 and (timing["rate"] is None or timing["rate"] > 0)
    assert timing["jit"]["prediction_error"] is not None


def test_jit_on_the_pbs_path_starts_at_once_and_says_why(local_cluster, tmp_path):
    """Slurm's Torque wrappers give no estimated.start_time: a JIT stage-in starts at once, the
    decision recorded, and the chain runs as with -start now."""
    local_cluster.skip_without_torque()
    name = "jitpbs" + uuid.uuid4().hex[:8]
    (local_cluster.source_dir / f"{name}.dat").write_bytes(os.urandom(100_000))
    scratch = local_cluster.scratch_root / "tests" / name
    source = f"{local_cluster.gridftp_url}{local_cluster.source_dir}/{name}.dat"
    job = tmp_path / "job.sh"
    job.write_text(f"#!/bin/bash\n#STAGEIN -start jit\n#STAGEIN {source} {scratch}/in.dat\n"
                   f"test -s {scratch}/in.dat\n")
    argv = [sys.executable, "-m", "scratchkeeper", "-c", str(local_cluster.site_config_pbs)]
    chain = json.loads(subprocess.run([*argv, "submit", str(job), "--json"], cwd=tmp_path,
                                      capture_output=True, text=True, timeout=120,
                                      check=True).stdout)
    config = load_config(local_cluster.site_config_pbs)
    store = staging_records.open_staging(StateStore(config.state.database))
    decision = staging_records.decisions(store, chain_id=chain["chain_id"])[0]
    assert decision["state"] == staging_records.RELEASED and decision["release_at"] is None
    assert decision["reason"].startswith("start now"), dict(decision)
    report = json.loads(subprocess.run([*argv, "status", chain["chain_id"], "--json", "--wait",
                                        "120"], capture_output=True, text=True,
                                       timeout=180).stdout)
    assert report["state"] in ("completed", "ended"), report
    assert report["jobs"][0]["state"] == "completed", report
