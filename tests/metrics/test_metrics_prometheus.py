"""A private recoveryd serving metrics on a free loopback port, scraped by a real Prometheus
server (Debian's, started here on a free port and stopped at the end): the target is up, and
an OST failed in the store shows as down in Prometheus's own answer."""

from __future__ import annotations

import os
import threading

import pytest

from recovery.conftest import NoQueue, write_site  # tests/recovery's private site
from scratchkeeper.recovery.service import RecoveryService

from .prometheus import PrometheusServer, free_port


@pytest.fixture
def recoveryd(site_dir):
    if os.geteuid() != 0:
        pytest.skip("recoveryd's private site is made as root (site_dir)")
    port = free_port()
    site = write_site(site_dir, ost_count=4,
                      extra=f'[metrics]\nrecoveryd = "127.0.0.1:{port}"\nreplicad = "0"\n'
                            'chain_service = "0"\ntierd = "0"')
    service = RecoveryService(site.config, scheduler=NoQueue())
    service.start()
    loop = threading.Thread(target=service.run, name="recoveryd-check", daemon=True)
    loop.start()
    yield site, service, port
    service.stop.set()
    loop.join(timeout=30)
    service.shutdown()


@pytest.fixture
def prometheus_of():
    servers: list[PrometheusServer] = []

    def start(targets):
        server = PrometheusServer(targets)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def test_prometheus_scrapes_recoveryd(recoveryd, prometheus_of):
    site, service, port = recoveryd
    prometheus = prometheus_of({"recoveryd": [f"127.0.0.1:{port}"]})
    targets = prometheus.wait_up()
    assert [t["scrapeUrl"] for t in targets] == [f"http://127.0.0.1:{port}/metrics"]
    up = prometheus.query('scratchkeeper_service_up{service="recoveryd"}')
    assert up[0]["value"][1] == "1"
    # every OST healthy after the first check, then OST 2 fails and the next checks see it
    prometheus.query("scratchkeeper_ost_up", until=lambda r: len(r) == 4 and all(
        s["value"][1] == "1" for s in r))
    site.backend.fail_ost(2)
    try:
        down = prometheus.query("scratchkeeper_ost_up == 0", timeout=60)
        assert [s["metric"]["ost"] for s in down] == ["2"]
        states = prometheus.query('scratchkeeper_ost_state{ost="2",state="failed"} == 1')
        assert states
    finally:
        site.backend.restore_ost(2)
    requests = prometheus.query('scratchkeeper_recovery_requests{state="queued"}')
    assert requests[0]["value"][1].isdigit()
    # the scrape format Prometheus negotiated: OpenMetrics (its first choice)
    mount = prometheus.query("scratchkeeper_mount_up")
    assert mount[0]["value"][1] == "0"  # no scratch mount serves this private site
