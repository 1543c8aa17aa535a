"""What docs/operations.rst lists, what the collectors export and what the Grafana dashboard
and the Prometheus example use are the same metrics."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from scratchkeeper.metrics.mount import dispatch_families, hybrid_families, log_families, qos_families
from scratchkeeper.metrics.recovery import PatchStats
from scratchkeeper.planner import records as planner_records
from scratchkeeper.recovery import records as recovery_records
from scratchkeeper.replication.state import ReplicationState
from scratchkeeper.state import StateStore
from scratchkeeper.storage.base import OstStatus
from scratchkeeper.tiering import records as tiering_records

from .prometheus import exposition
from .test_collectors import (
    MOUNT_COUNTERS,
    Fixed,
    _chain,
    chain_collector,
    recovery_collector,
    replication_collector,
    tiering_collector,
)

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "site-config" / "grafana" / "scratchkeeper.json"
OPERATIONS = REPO / "docs" / "operations.rst"
SCRAPE_CONFIG = REPO / "site-config" / "prometheus" / "scratchkeeper.yml"
SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created", "_info")


def _family(sample: str) -> str:
    for suffix in SUFFIXES:
        if sample.endswith(suffix):
            return sample[:-len(suffix)]
    return sample


def _documented() -> set[str]:
    return {_family(name) for name in
            re.findall(r"^``(scratchkeeper_[a-z_]+)``", OPERATIONS.read_text(), re.M)}


def _exported(tmp_path) -> set[str]:
    store = StateStore(tmp_path / "state.db")
    recovery_records.open_records(store)
    planner_records.open_records(store)
    planner_records.open_staging(store)
    tiering_records.open_tiering(store)
    state = ReplicationState(store)
    state.set_status({"scratch_bytes": 1000, "last_cycle": 1.0, "last_cycle_seconds": 0.1,
                      "consecutive_failures": 0, "queued": 0, "deferred_for_space": []})
    _chain(store, "c", "submitted", 1.0, stage_in_started=2.0)
    with store.transaction() as conn:  # families without a row have no sample to see
        conn.execute("INSERT INTO offloads(chain_id, path, size, mtime, destination, job_name,"
                     " state, closed) VALUES ('c', '/s/o', 1, 'm', 'd', 'n', 'done', 1.0)")
        conn.execute("INSERT INTO tier_moves(path, direction, source, target, size, hotness, "
                     "state, started) VALUES ('/s/f', 'up', 'disk', 'flash', 1, 1.0, 'done', 1.0)")
    c = MOUNT_COUNTERS
    samples = exposition([
        recovery_collector(store, PatchStats(),
                           lambda: (1.0, [OstStatus(0, "ost0000", "active")])),
        replication_collector(store, 0.25), chain_collector(store, clock=lambda: 10.0),
        tiering_collector(store),
        Fixed(lambda: dispatch_families(c["dispatch"]), lambda: qos_families(c["qos"]),
              lambda: hybrid_families(c["hybrid"]), lambda: log_families(c["logs"]))])
    names = {_family(name) for name in samples}
    names.add("scratchkeeper_mount_up")  # MountCollector's own, tested in test_collectors
    return names


def test_every_exported_metric_is_documented_and_every_documented_one_exported(tmp_path):
    exported, documented = _exported(tmp_path), _documented()
    assert exported - documented == set(), "exported, not in docs/operations.rst"
    assert documented - exported == set(), "in docs/operations.rst, not exported"


def test_dashboard_uses_a_datasource_variable_and_documented_metrics():
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    documented = _documented()
    used: set[str] = set()
    rows = []
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            rows.append(panel["title"])
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
            for name in re.findall(r"scratchkeeper_[a-z_]+", target["expr"]):
                used.add(_family(name))
    assert used - documented == set()
    # a row per group of metrics, and each group on at least one panel
    assert len(rows) == 7, rows
    for prefix in ("scratchkeeper_ost_", "scratchkeeper_recovery_", "scratchkeeper_replica",
                   "scratchkeeper_chain", "scratchkeeper_offload", "scratchkeeper_mount_",
                   "scratchkeeper_tier_", "scratchkeeper_collector_up"):
        assert any(name.startswith(prefix) for name in used), prefix
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_scrape_config_example_is_valid():
    promtool = shutil.which("promtool")
    if promtool is None:
        return  # bootstrap installs it; the example is then checked on every run
    result = subprocess.run([promtool, "check", "config", str(SCRAPE_CONFIG)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
