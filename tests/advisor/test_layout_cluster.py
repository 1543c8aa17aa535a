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

pytestmark = pytest.mark.cluster


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
