"""``scratchkeeper replicas`` (report, JSON, hooks) and reads served by a replica."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from scratchkeeper.config import parse_config
from scratchkeeper.errors import TargetUnavailable
from scratchkeeper.replication.replicas import ReplicaOperations
from scratchkeeper.replication.state import JOB_ENDED, ReplicationState
from scratchkeeper.state import StateStore
from scratchkeeper.storage import open_backend

from .helpers import stage_input, write_site


def sk(site, *args, check=True):
    result = subprocess.run([sys.executable, "-m", "scratchkeeper", "-c", str(site), *args],
                            capture_output=True, text=True, timeout=60)
    if check:
        assert result.returncode == 0, result.stderr
    return result


@pytest.fixture
def with_replica(tmp_path):
    site = write_site(tmp_path / "site.toml", tmp_path)
    config = parse_config(site.read_text(), str(site))
    backend = open_backend(config)
    state = ReplicationState(StateStore(config.state.database))
    path, sha = stage_input(config, "77", "in.dat", 2_000_000)
    with state.store.transaction() as conn:
        conn.execute("INSERT INTO claims(job_id, path, active, reason, position, created, updated)"
                     " VALUES ('77', ?, 1, 'shortcut', 5, 0, 0)", (path,))
    ReplicaOperations(backend, state, config).create(path, job_id="77", reason="shortcut",
                                                     owner_uid=0, checksum=f"sha256:{sha}")
    state.set_status({"last_cycle": 1.0, "at_risk": [{"job_id": "80", "paths": ["/x"]}],
                      "windows": [{"group": "*", "queued": 9, "required_nodes": 4, "length": 2,
                                   "alpha": 0.5, "threshold": 0.1}],
                      "consecutive_failures": 0})
    return site, config, backend, path


def test_report_as_json_and_text(with_replica):
    site, config, backend, path = with_replica
    report = json.loads(sk(site, "replicas", "--json").stdout)
    (entry,) = report["replicas"]
    assert entry["path"] == path and entry["state"] == "ready" and entry["bytes"] == 2_000_000
    assert entry["jobs"] == [{"job_id": "77", "active": True, "reason": "shortcut",
                              "position": 5, "group": None, "released_why": ""}]
    assert report["space"]["used_bytes"] == 2_000_000 and report["space"]["scratch_bytes"] > 0
    assert report["at_risk"] == [{"job_id": "80", "paths": ["/x"]}]
    text = sk(site, "replicas").stdout
    assert "shortcut" in text and path in text and "jobs at risk" in text and "80: /x" in text
    assert "window *: 2 of 9 queued jobs cover 4 nodes" in text


def test_job_ended_hook_records_events_and_rejects_garbage(with_replica, tmp_path):
    site, config, backend, path = with_replica
    sk(site, "replicas", "job-ended", "77", "78_3")
    state = ReplicationState(StateStore(config.state.database))
    assert [(e["kind"], e["job_id"]) for e in state.pending_events()] == [(JOB_ENDED, "77"),
                                                                          (JOB_ENDED, "78_3")]
    bad = sk(site, "replicas", "job-ended", "77;rm -rf /", check=False)
    assert bad.returncode == 2 and "expected a scheduler job id" in bad.stderr
    outside = sk(site, "replicas", "closed", "/etc/passwd", check=False)
    assert outside.returncode == 2 and "outside the scratch root" in outside.stderr


def test_a_read_whose_primary_ost_failed_is_served_by_the_replica(with_replica):
    site, config, backend, path = with_replica
    data = backend.read(path, 0, 2_000_000)
    layout = backend.layout(path)
    failed = min(layout.osts(1))
    backend.fail_ost(failed)
    try:
        assert backend.read(path, 0, 2_000_000) == data          # served from mirror 2
        backend.remove_mirror(path, 2)
        with pytest.raises(TargetUnavailable):
            backend.read(path, 0, 2_000_000)
    finally:
        backend.restore_ost(failed)


def test_bad_interval_is_refused(tmp_path):
    site = write_site(tmp_path / "site.toml", tmp_path)
    result = sk(site, "replicad", "--interval", "0", check=False)
    assert result.returncode == 2 and "--interval" in result.stderr
