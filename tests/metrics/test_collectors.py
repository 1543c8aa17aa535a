"""Each collector's exposition, parsed strictly (OpenMetrics parser, promtool), from tables and
counters made here; the endpoint's HTTP behaviour; the [metrics] keys; who imports the
library. No root, no cluster."""

from __future__ import annotations

import functools
import json
import logging
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from scratchkeeper.config import SiteConfig, listen_address, parse_config
from scratchkeeper.errors import ConfigError
from scratchkeeper.metrics import serve
from scratchkeeper.metrics.chains import ChainCollector
from scratchkeeper.metrics.endpoint import MAX_STATES
from scratchkeeper.metrics.mount import (
    MountCollector,
    dispatch_families,
    hybrid_families,
    log_families,
    qos_families,
)
from scratchkeeper.metrics.recovery import PatchStats, RecoveryCollector
from scratchkeeper.metrics.replication import ReplicationCollector
from scratchkeeper.metrics.tiering import TieringCollector
from scratchkeeper.planner import records as planner_records
from scratchkeeper.recovery import records as recovery_records
from scratchkeeper.replication import state as replication_state
from scratchkeeper.replication.state import ReplicationState
from scratchkeeper.state import StateStore
from scratchkeeper.storage.base import OstStatus
from scratchkeeper.tiering import records as tiering_records

from .prometheus import exposition, free_port

#: what a mount answered on the local cluster (scratchkeeper store stats --json's sources)
MOUNT_COUNTERS = {
    "dispatch": {"policy": "solver", "min_bytes": 1048576, "threads": 8, "requests": 5,
                 "fallbacks": 1, "solver_errors": 0, "in_order": 2, "striped": 3,
                 "striped_fallbacks": 0,
                 "osts": [{"ost": 0, "pieces": 4, "bytes": 4096, "reads": 17,
                           "read_bytes": 5928079, "seconds_per_byte": 3.7e-10, "latency": 0,
                           "inflight": 1},
                          {"ost": 1, "pieces": 0, "bytes": 0, "reads": 12, "read_bytes": 52,
                           "seconds_per_byte": 2.0e-10, "latency": 2.9e-06, "inflight": 0}]},
    "qos": {"mode": "statistical", "retrieval": "online", "copies": 3, "accesses": 2,
            "interval": 0.1, "limit": 4, "epsilon": 0.01, "admitted": 7, "admitted_buckets": 9,
            "delayed": 1, "violations": 0, "busy_intervals": 4, "risk": 0.002, "bypassed": 5,
            "users": 1},
    "hybrid": {"on": True, "reads": {"1-DV": 1, "2-D": 2, "1-DH": 3},
               "writes": {"1-DV": 0, "2-D": 0, "1-DH": 1}, "invalidated": 1},
    "logs": {"closes.log": {"cap": 67108864, "share": 4194304, "generation": 12, "size": 896,
                            "written": 71, "coalesced": 2,
                            "dropped": {"cap": 0, "share": 3, "space": 0},
                            "users": {"0": {"bytes": 896, "records": 7, "dropped": 0},
                                      "999": {"bytes": 0, "records": 0, "dropped": 3}}},
             "reads.log": {"cap": 67108864, "share": 4194304, "generation": 1, "size": 81896,
                           "written": 84, "coalesced": 0,
                           "dropped": {"cap": 0, "share": 0, "space": 0},
                           "users": {"0": {"bytes": 8506, "records": 77, "dropped": 0}}}},
}


class Fixed:
    """A collector of given families (the mount's, without a mount)."""

    name = "mount"

    def __init__(self, *families):
        self.families = families

    def collect(self):
        for make in self.families:
            yield from make()


def _value(samples, name, **labels):
    return samples[name][tuple(sorted(labels.items()))]


@pytest.fixture
def store(tmp_path):
    return StateStore(tmp_path / "state.db")


# the collectors as the daemons build them: the owners' reading functions bound to the store

def recovery_collector(store, stats, probes):
    return RecoveryCollector(functools.partial(recovery_records.request_counts, store), stats,
                             probes)


def replication_collector(store, max_space_fraction):
    return ReplicationCollector(
        replica_counts=functools.partial(replication_state.replica_counts, store),
        active_claims=functools.partial(replication_state.active_claim_count, store),
        daemon_status=functools.partial(replication_state.daemon_status, store),
        max_space_fraction=max_space_fraction)


def chain_collector(store, **clock):
    return ChainCollector(
        chain_counts=functools.partial(planner_records.chain_counts, store),
        job_counts=functools.partial(planner_records.chain_job_counts, store),
        stage_in_delays=functools.partial(planner_records.stage_in_delays, store),
        offload_counts=functools.partial(planner_records.offload_counts, store), **clock)


def tiering_collector(store):
    return TieringCollector(functools.partial(tiering_records.move_counts, store),
                           functools.partial(tiering_records.file_count, store))


# ---- the mount -------------------------------------------------------------------------------

def test_mount_counters_are_exported_per_ost_and_log_never_per_user():
    c = MOUNT_COUNTERS
    samples = exposition([Fixed(lambda: dispatch_families(c["dispatch"]),
                                lambda: qos_families(c["qos"]),
                                lambda: hybrid_families(c["hybrid"]),
                                lambda: log_families(c["logs"]))])
    assert _value(samples, "scratchkeeper_mount_dispatch_requests_total") == 5
    assert _value(samples, "scratchkeeper_mount_ost_reads_total", ost="1") == 12
    assert _value(samples, "scratchkeeper_mount_ost_read_bytes_total", ost="0") == 5928079
    assert _value(samples, "scratchkeeper_mount_ost_inflight", ost="0") == 1
    assert _value(samples, "scratchkeeper_mount_qos_mode", mode="statistical") == 1
    assert _value(samples, "scratchkeeper_mount_qos_mode", mode="off") == 0
    assert _value(samples, "scratchkeeper_mount_qos_delayed_total") == 1
    assert _value(samples, "scratchkeeper_mount_hybrid_reads_total", layout="1-DH") == 3
    assert _value(samples, "scratchkeeper_mount_log_records_total", log="reads.log") == 84
    assert _value(samples, "scratchkeeper_mount_log_dropped_total", log="closes.log",
                  why="share") == 3
    labels = {k for series in samples.values() for key in series for k, _ in key}
    assert labels <= {"ost", "mode", "layout", "log", "why", "service", "collector", "version"}


def test_no_mount_is_reported_down_not_failed(tmp_path):
    samples = exposition([MountCollector(str(tmp_path))])
    assert _value(samples, "scratchkeeper_mount_up") == 0
    assert _value(samples, "scratchkeeper_collector_up", service="recoveryd",
                  collector="mount") == 1
    assert "scratchkeeper_mount_ost_reads_total" not in samples


def test_a_hung_mount_costs_one_thread(tmp_path, monkeypatch):
    """A getxattr that never returns: the scrape answers within the timeout, and later
    scrapes start no second read while the first is stuck."""
    import threading

    from scratchkeeper.metrics import mount as mount_module

    release = threading.Event()
    calls = []

    def stuck(root):
        calls.append(root)
        release.wait(30)
        raise OSError("released")

    monkeypatch.setattr(mount_module, "read_counters", stuck)
    collector = MountCollector(str(tmp_path), timeout=0.2)
    try:
        for _ in range(3):
            started = time.monotonic()
            samples = exposition([collector])
            assert time.monotonic() - started < 5
            assert _value(samples, "scratchkeeper_mount_up") == 0
        assert len(calls) == 1
    finally:
        release.set()


# ---- recoveryd -------------------------------------------------------------------------------

def test_recovery_requests_osts_and_patches(store):
    recovery_records.open_records(store)
    ids = recovery_records.enqueue_many(store, [("/scratch/a", [1]), ("/scratch/b", [1]),
                                                ("/scratch/c", [2])],
                                        requested_by=0, origin="check")
    first = ids[0][0]
    assert recovery_records.claim(store, first, "host:1:1")
    recovery_records.finish(store, first, ok=True, path="/scratch/a",
                            file_state=recovery_records.WHOLE, reason="", patched_bytes=4096,
                            seconds=0.3)
    stats = PatchStats()
    stats.observe({"state": "whole", "patched_bytes": 4096, "seconds": 0.3})
    stats.observe({"state": "whole", "patched_bytes": 1 << 20, "seconds": 42.0})
    stats.observe({"state": "lost", "reason": "no source"})
    probes = (1700000000.0, [OstStatus(0, "ost0000", "active"), OstStatus(1, "ost0001", "failed"),
                             OstStatus(2, "ost0002", "unreachable")])
    samples = exposition([recovery_collector(store, stats, lambda: probes)])
    assert _value(samples, "scratchkeeper_recovery_requests", state="queued") == 2
    assert _value(samples, "scratchkeeper_recovery_requests", state="done") == 1
    assert _value(samples, "scratchkeeper_recovery_requests", state="running") == 0
    assert _value(samples, "scratchkeeper_recovery_patched_bytes_total") == 4096 + (1 << 20)
    assert _value(samples, "scratchkeeper_recovery_finished_total", outcome="lost") == 1
    assert _value(samples, "scratchkeeper_recovery_patch_seconds_count") == 2
    assert _value(samples, "scratchkeeper_recovery_patch_seconds_bucket", le="0.5") == 1
    assert _value(samples, "scratchkeeper_recovery_patch_seconds_bucket", le="30.0") == 1
    assert _value(samples, "scratchkeeper_recovery_patch_seconds_bucket", le="60.0") == 2
    assert _value(samples, "scratchkeeper_recovery_patch_seconds_sum") == pytest.approx(42.3)
    assert _value(samples, "scratchkeeper_ost_up", ost="0") == 1
    assert _value(samples, "scratchkeeper_ost_up", ost="1") == 0
    assert _value(samples, "scratchkeeper_ost_state", ost="2", state="unreachable") == 1
    assert _value(samples, "scratchkeeper_ost_state", ost="2", state="active") == 0
    assert _value(samples, "scratchkeeper_ost_probe_timestamp_seconds") == 1700000000.0


def test_before_the_first_probe_no_ost_is_claimed_up_or_down(store):
    recovery_records.open_records(store)
    samples = exposition([recovery_collector(store, PatchStats(), lambda: None)])
    assert "scratchkeeper_ost_up" not in samples
    assert _value(samples, "scratchkeeper_recovery_requests", state="failed") == 0


def test_a_collector_that_fails_is_said_and_the_others_still_answer(store):
    """No recovery tables in this database: the recovery collector fails, the scrape does
    not, and collector_up says which one failed."""
    samples = exposition([recovery_collector(store, PatchStats(), lambda: None),
                          Fixed(lambda: qos_families(MOUNT_COUNTERS["qos"]))])
    assert _value(samples, "scratchkeeper_collector_up", service="recoveryd",
                  collector="recovery") == 0
    assert _value(samples, "scratchkeeper_collector_up", service="recoveryd",
                  collector="mount") == 1
    assert _value(samples, "scratchkeeper_mount_qos_admitted_total") == 7
    assert _value(samples, "scratchkeeper_service_up", service="recoveryd") == 1


# ---- replicad --------------------------------------------------------------------------------

def test_replicas_by_state_and_space(store):
    state = ReplicationState(store)
    for i, size in enumerate((100, 200, 300)):
        state.begin_create(f"/scratch/u/f{i}", job_id=str(10 + i), reason="window",
                           expected_mirror_id=2, primary_mirrors=[1], primary_osts=[0, 1],
                           size=size, checksum=None, token=f"t{i}")
    state.mark_ready("/scratch/u/f0", "t0", 2, [2, 3])
    state.set_status({"scratch_bytes": 1000, "last_cycle": 1700000000.0,
                      "last_cycle_seconds": 0.25, "consecutive_failures": 0,
                      "deferred_for_space": ["/scratch/u/f2"], "queued": 4})
    samples = exposition([replication_collector(store, 0.25)], service="replicad")
    assert _value(samples, "scratchkeeper_replicas", state="ready") == 1
    assert _value(samples, "scratchkeeper_replicas", state="creating") == 2
    assert _value(samples, "scratchkeeper_replicas", state="failed") == 0
    assert _value(samples, "scratchkeeper_replica_bytes", state="creating") == 500
    assert _value(samples, "scratchkeeper_replica_space_limit_bytes") == 250
    assert _value(samples, "scratchkeeper_replication_deferred_for_space") == 1
    assert _value(samples, "scratchkeeper_replication_last_cycle_duration_seconds") == 0.25


# ---- the chain service ---------------------------------------------------------------------

def _chain(store, chain_id, state, created, *, stage_in_started=None, jit=False):
    with store.transaction() as conn:
        conn.execute("INSERT INTO chains VALUES (?,?,?,?,?,?,?,?,?,?)",
                     (chain_id, "/home/u/job.sh", "/home/u", "slurm", 1000, state, "", created,
                      created, "{}"))
        for position, (key, role) in enumerate((("stage_in", "stage-in"),
                                                ("compute", "compute"))):
            conn.execute("INSERT INTO chain_jobs(chain_id, job_key, role, queue, position, "
                         "state, updated) VALUES (?,?,?,?,?,?,?)",
                         (chain_id, key, role, "q", position, "submitted", created))
        if stage_in_started is not None:
            conn.execute("INSERT INTO transfers(chain_id, job_key, host, bytes, seconds, "
                         "started) VALUES (?,?,?,?,?,?)",
                         (chain_id, "stage_in", "h", 1, 1.0, stage_in_started))
        if jit:
            conn.execute("INSERT INTO jit_schedule(chain_id, job_key, job_id, compute_id, "
                         "scheduler, state, decided) VALUES (?,?,?,?,?,?,?)",
                         (chain_id, "stage_in", "1", "2", "slurm", "held", created))


def test_chains_delays_and_offloads(store):
    planner_records.open_records(store)
    planner_records.open_staging(store)
    now = 1_700_000_000.0
    for i in range(20):  # delays 1..20 s
        _chain(store, f"c{i}", "submitted", now - 600, stage_in_started=now - 600 + i + 1)
    _chain(store, "jit", "submitted", now - 600, stage_in_started=now - 100, jit=True)
    _chain(store, "old", "submitted", now - 7200, stage_in_started=now - 7200 + 500)
    _chain(store, "failed", "stage-in-failed", now - 60)
    # a state no code writes (a path, say): summed as "other", never its own series
    _chain(store, "odd", "/scratch/alice/secret", now - 60)
    with store.transaction() as conn:
        conn.execute("INSERT INTO offloads(chain_id, path, size, mtime, destination, job_name,"
                     " state, closed) VALUES ('c1', '/scratch/u/out', 10, 'm', 'd', 'n', "
                     "'submitted', ?)", (now,))
    samples = exposition([chain_collector(store, clock=lambda: now)], service="chain-service")
    assert _value(samples, "scratchkeeper_chains", state="submitted") == 22
    assert _value(samples, "scratchkeeper_chains", state="stage-in-failed") == 1
    assert _value(samples, "scratchkeeper_chains", state="other") == 1
    assert _value(samples, "scratchkeeper_chain_jobs", role="stage-in", state="submitted") == 24
    assert _value(samples, "scratchkeeper_chain_stage_in_delay_chains") == 20
    assert _value(samples, "scratchkeeper_chain_stage_in_delay_seconds", rank="p50") == 10
    assert _value(samples, "scratchkeeper_chain_stage_in_delay_seconds", rank="p95") == 19
    assert _value(samples, "scratchkeeper_chain_stage_in_delay_seconds", rank="max") == 20
    assert _value(samples, "scratchkeeper_offloads", state="submitted") == 1
    assert _value(samples, "scratchkeeper_offload_bytes", state="submitted") == 10
    values = {v for series in samples.values() for key in series for _, v in key}
    assert not any("/" in v for v in values)


def test_no_table_can_grow_the_series_set(store):
    planner_records.open_records(store)
    for i in range(3 * MAX_STATES):
        _chain(store, f"c{i}", f"state-{i}", 1.0)
    samples = exposition([chain_collector(store)], service="chain-service")
    assert len(samples["scratchkeeper_chains"]) == MAX_STATES + 1
    assert _value(samples, "scratchkeeper_chains", state="other") == 2 * MAX_STATES
    # no staging tables yet: no delay, no offloads, and no failure
    assert "scratchkeeper_chain_stage_in_delay_seconds" not in samples
    assert _value(samples, "scratchkeeper_collector_up", service="chain-service",
                  collector="chains") == 1


# ---- tierd -----------------------------------------------------------------------------------

def test_tier_moves(store):
    tiering_records.open_tiering(store)
    with store.transaction() as conn:
        for direction, state, size in (("up", "done", 10), ("up", "done", 5),
                                       ("down", "failed", 7)):
            conn.execute("INSERT INTO tier_moves(path, direction, source, target, size, "
                         "hotness, state, started) VALUES ('/scratch/f', ?, 'disk', 'flash', "
                         "?, 1.0, ?, 1.0)", (direction, size, state))
    samples = exposition([tiering_collector(store)], service="tierd")
    assert _value(samples, "scratchkeeper_tier_moves", direction="up", target="flash",
                  state="done") == 2
    assert _value(samples, "scratchkeeper_tier_move_bytes", direction="up", target="flash",
                  state="done") == 15
    assert _value(samples, "scratchkeeper_tier_files") == 0


# ---- the endpoint ----------------------------------------------------------------------------

def _config(**keys) -> SiteConfig:
    return parse_config("[metrics]\n" + "".join(f'{k} = "{v}"\n' for k, v in keys.items()))


def test_endpoint_serves_openmetrics_and_only_metrics():
    port = free_port()
    endpoint = serve(_config(replicad=f"127.0.0.1:{port}"), "replicad",
                     [Fixed(lambda: qos_families(MOUNT_COUNTERS["qos"]))])
    assert endpoint is not None and endpoint.port == port
    try:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={
            "Accept": "application/openmetrics-text;version=1.0.0,text/plain;q=0.5"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.headers["Content-Type"].startswith("application/openmetrics-text")
            body = answer.read().decode()
        assert body.endswith("# EOF\n")
        assert 'scratchkeeper_service_up{service="replicad"} 1.0' in body
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            assert answer.headers["Content-Type"].startswith("text/plain")
        for path in ("/debug", "/metrics/../etc/passwd", "/api"):
            with pytest.raises(urllib.error.HTTPError) as caught:
                urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10)
            assert caught.value.code == 404
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(urllib.request.Request(
                f"http://127.0.0.1:{port}/metrics", data=b"x", method="POST"), timeout=10)
        assert caught.value.code == 405
    finally:
        endpoint.close()


def test_endpoint_off_or_taken(caplog):
    assert serve(_config(tierd="0"), "tierd", []) is None
    assert serve(_config(tierd=""), "tierd", []) is None
    port = free_port()
    first = serve(_config(tierd=f"127.0.0.1:{port}"), "tierd", [])
    assert first is not None
    try:
        with caplog.at_level(logging.ERROR, logger="scratchkeeper.metrics.endpoint"):
            assert serve(_config(tierd=f"127.0.0.1:{port}"), "tierd", []) is None
        assert f"tierd cannot serve metrics on 127.0.0.1:{port}" in caplog.text
    finally:
        first.close()


# ---- the [metrics] keys ----------------------------------------------------------------------

def test_metrics_keys_default_to_loopback_ports_of_their_own():
    metrics = SiteConfig().metrics
    addresses = [listen_address(v) for v in (metrics.recoveryd, metrics.replicad,
                                             metrics.chain_service, metrics.tierd,
                                             metrics.mount)]
    assert all(a is not None and a[0] == "127.0.0.1" for a in addresses)
    assert len({a[1] for a in addresses if a}) == 5
    assert listen_address("[::1]:9100") == ("::1", 9100)


@pytest.mark.parametrize("value", ["9671", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:65536",
                                   "http://127.0.0.1:9671", "127.0.0.1:96 71", "a b:1"])
def test_bad_metrics_address_names_file_line_and_key(value):
    with pytest.raises(ConfigError) as caught:
        parse_config(f'[metrics]\n\nrecoveryd = "{value}"\n', "site.toml")
    assert str(caught.value).startswith("site.toml:3: key 'metrics.recoveryd': expected HOST:PORT")


# ---- who imports prometheus_client ---------------------------------------------------------

def test_planner_commands_and_service_modules_do_not_load_the_library():
    """Only a daemon's start imports prometheus_client: planning, submitting and importing the
    services' modules (recoveryd's command-line uses) do not."""
    code = ("import sys, json\n"
            "import scratchkeeper.cli.planner, scratchkeeper.planner.submit\n"
            "import scratchkeeper.recovery.service, scratchkeeper.replication.daemon\n"
            "import scratchkeeper.tiering.daemon, scratchkeeper.chain_service.sweep\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('prometheus'))))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, check=True)
    assert json.loads(result.stdout) == []


def test_the_metrics_package_imports_no_service_nor_the_planner():
    """The services import it (their metrics endpoint): it reads their tables only through
    the functions they hand it, so the imports flow one way (docs/architecture.rst)."""
    code = ("import sys, json\n"
            "import scratchkeeper.metrics, scratchkeeper.metrics.chains\n"
            "import scratchkeeper.metrics.recovery, scratchkeeper.metrics.replication\n"
            "import scratchkeeper.metrics.tiering, scratchkeeper.metrics.mount\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[:2] in (\n"
            "    [['scratchkeeper', p] for p in ('planner', 'recovery', 'replication',\n"
            "     'tiering', 'chain_service', 'mount', 'cli', 'transfer')]))))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, check=True)
    assert json.loads(result.stdout) == []


# ---- scratchkeeper metrics (a node's mount, without recoveryd) -------------------------------

def _site(tmp_path, mount: str) -> str:
    (tmp_path / "scratch").mkdir(exist_ok=True)
    path = tmp_path / "site.toml"
    path.write_text(f'[storage]\nscratch_root = "{tmp_path}/scratch"\nstore_root = '
                    f'"{tmp_path}/store"\n[state]\ndatabase = "{tmp_path}/state.db"\n'
                    f'[metrics]\nmount = "{mount}"\n')
    return str(path)


def test_metrics_command_serves_the_mount_until_sigterm(tmp_path):
    import signal

    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "scratchkeeper", "-c",
                                _site(tmp_path, f"127.0.0.1:{port}"), "metrics"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                            timeout=5) as answer:
                    body = answer.read().decode()
                break
            except OSError:
                assert process.poll() is None, process.communicate()
                assert time.monotonic() < deadline
                time.sleep(0.2)
        assert "scratchkeeper_mount_up 0.0" in body  # no mount serves this scratch root
        assert 'scratchkeeper_service_up{service="metrics"} 1.0' in body
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_metrics_command_off_is_one_line_and_exit_2(tmp_path):
    result = subprocess.run([sys.executable, "-m", "scratchkeeper", "-c", _site(tmp_path, "0"),
                             "metrics"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result
    assert result.stderr.count("\n") == 1, result.stderr
    assert "site.toml: key 'metrics.mount': '0' turns the endpoint off" in result.stderr
