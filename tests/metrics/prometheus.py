"""Helpers of the metrics tests: strict parsing of an exposition, promtool, free ports, and a
private Prometheus server (Debian's ``prometheus``) started on a free loopback port."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from scratchkeeper.metrics.endpoint import registry_of, render


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def exposition(collectors, service: str = "recoveryd") -> dict[str, dict[tuple, float]]:
    """The collectors' OpenMetrics text, parsed strictly (a malformed line, a counter without
    _total, a histogram without +Inf raise): {sample name: {sorted labels: value}}. The text
    format of the same registry goes through ``promtool check metrics`` when it is installed."""
    registry = registry_of(service, collectors)
    body, content_type = render(registry)
    assert content_type.startswith("application/openmetrics-text"), content_type
    text = body.decode()
    assert text.endswith("# EOF\n")
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        assert family.documentation, family.name
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    promtool_check(render(registry, "text/plain")[0].decode())
    return samples


def promtool_check(text: str) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        return  # the strict parser above has checked it; bootstrap installs promtool
    result = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


class PrometheusServer:
    """A private Prometheus scraping ``targets`` ({job: ["host:port", ...]}) every second."""

    def __init__(self, targets: dict[str, list[str]]):
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.skip("no prometheus server (scripts/bootstrap installs Debian's prometheus)")
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="sk-prometheus-"))
        config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                  "scrape_configs": [{"job_name": job, "static_configs": [{"targets": hosts}]}
                                     for job, hosts in targets.items()]}
        # JSON is YAML: no YAML writer needed
        (self.dir / "prometheus.yml").write_text(json.dumps(config))
        self.log = open(self.dir / "prometheus.log", "w")  # closed in stop()
        self.process = subprocess.Popen(
            [binary, f"--config.file={self.dir / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def api(self, path: str, **params: str) -> dict:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as answer:
            reply = json.load(answer)
        assert reply["status"] == "success", reply
        return reply["data"]

    def wait_up(self, timeout: float = 90.0) -> list[dict]:
        """The active targets once every one is ``up`` (fails naming those that are not)."""
        deadline = time.monotonic() + timeout
        targets: list[dict] = []
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.logs()
            try:
                targets = self.api("targets")["activeTargets"]
            except OSError:
                targets = []
            if targets and all(t["health"] == "up" for t in targets):
                return targets
            time.sleep(0.5)
        pytest.fail("targets not up: " + json.dumps(
            [{k: t.get(k) for k in ("scrapeUrl", "health", "lastError")} for t in targets])
            + "\n" + self.logs())

    def query(self, expression: str, timeout: float = 60.0, until=None) -> list[dict]:
        """The instant vector of ``expression``, waited for until it is not empty (and
        ``until(result)`` holds, when given)."""
        deadline = time.monotonic() + timeout
        result: list[dict] = []
        while time.monotonic() < deadline:
            result = self.api("query", query=expression)["result"]
            if result and (until is None or until(result)):
                return result
            time.sleep(0.5)
        pytest.fail(f"query {expression!r}: {result}")

    def logs(self) -> str:
        self.log.flush()
        return (self.dir / "prometheus.log").read_text()[-4000:]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
