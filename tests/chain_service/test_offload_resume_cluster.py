"""Offload at close after a kill: an offload recorded by a chain service killed before (or
right after) it submitted the offload job is resumed once. The cluster's own chain service is
stopped for this module (own_services), so that only the test resumes it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

from scratchkeeper.config import load_config
from scratchkeeper.state import StateStore


def sk(cluster, *args, cwd=None):
    argv = [sys.executable, "-m", "scratchkeeper", "-c", str(cluster.site_config), *args]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=400, cwd=cwd)
    assert result.returncode == 0, f"{argv} exit {result.returncode}: {result.stderr}"
    return result


def test_an_offload_left_between_its_record_and_its_job_is_resumed_once(local_cluster,
                                                                        own_services,
                                                                        tmp_path):
    """A chain service killed after recording an offload and before (or right after) submitting
    its job: the next sweep finds the job by its unique name, or submits it; never twice."""
    from scratchkeeper.chain_service import offload
    from scratchkeeper.chain_service.offload import Target, mtime_text

    name = "resume" + uuid.uuid4().hex[:8]
    scratch = local_cluster.scratch_root / "tests" / name
    sink = local_cluster.sink_dir / name
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\n#SBATCH -t 3\n#STAGEOUT -when close\n"
                      f"#STAGEOUT {scratch}/ {local_cluster.gridftp_url}{sink}/\nsleep 90\n")
    config = load_config(local_cluster.site_config)
    store = StateStore(config.state.database)
    scratch.mkdir(parents=True)
    results = [scratch / "a.dat", scratch / "b.dat"]
    for path in results:
        path.write_bytes(os.urandom(300_000))
    chain = json.loads(sk(local_cluster, "submit", str(script), "--json", cwd=tmp_path).stdout)
    try:
        chains = [c for c in offload.close_targets(store) if c[0]["chain_id"] == chain["chain_id"]]
        rows = []
        for path in results:
            info = os.stat(path)
            key = (chain["chain_id"], str(path), info.st_size, mtime_text(info))
            rows.append((key, f"offload-{uuid.uuid4().hex[:10]}"))
            name = offload.job_name(chains[0][0], rows[-1][1])
            with store.transaction() as conn:
                conn.execute("INSERT INTO offloads(chain_id, path, size, mtime, destination, "
                             "job_name, state, closed) VALUES (?,?,?,?,?,?,?,?)",
                             (*key, f"{local_cluster.gridftp_url}{sink}/{path.name}",
                              name, offload.SUBMITTING, time.time()))
        # a.dat's job was submitted before the kill; b.dat's was not
        target = Target(chain["chain_id"], os.getuid(), str(results[0]),
                        f"{local_cluster.gridftp_url}{sink}/a.dat", 0)
        submitted = offload._submit_job(config, store, chains[0][0], target, rows[0][1])
        said = offload._resume(config, store, chains)
        assert len(said) == 2, said
        resumed = {r["path"]: r for r in store.query(
            "SELECT * FROM offloads WHERE chain_id=?", (chain["chain_id"],))}
        assert resumed[str(results[0])]["job_id"] == submitted       # found, not submitted again
        assert resumed[str(results[1])]["state"] == offload.SUBMITTED
        for row in resumed.values():
            assert local_cluster.wait_for_job(row["job_id"], timeout=120) == "COMPLETED"
        for path in results:
            assert (sink / path.name).read_bytes() == path.read_bytes()
        names = [n for _, n in rows]
        jobs = subprocess.run(["sacct", "-n", "-X", "-P", "-a", "-o", "JobName", "-S",
                               "now-1hours"], capture_output=True, text=True, timeout=30).stdout
        assert sum(line.endswith(tuple(names)) for line in jobs.splitlines()) == 2
    finally:
        subprocess.run(["scancel", *[j["job_id"] for j in chain["jobs"]]], timeout=30)
