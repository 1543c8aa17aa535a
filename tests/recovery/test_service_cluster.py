"""recoveryd: the socket API, peer-credential authorisation, the reader, the check and the hook."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from scratchkeeper.errors import PermissionDenied
from scratchkeeper.planner import records as planner_records
from scratchkeeper.recovery import records
from scratchkeeper.recovery.client import RecoveryClient
from scratchkeeper.recovery.reader import RecoveringReader
from scratchkeeper.recovery.service import RecoveryService

from .conftest import NOBODY, NoQueue, read_all, run_as, stage

KiB = 1 << 10


@pytest.fixture
def service(site):
    running = RecoveryService(site.config, scheduler=NoQueue())
    running.start()
    loop = threading.Thread(target=running.run, daemon=True)
    loop.start()
    yield running
    running.shutdown()
    loop.join(timeout=10)


def test_report_then_wait_patches_the_file(site, sources, service):
    source, data = sources.make("svc.bin", 2_500_007)
    backend = site.backend
    path = stage(backend, "svc.bin", data, sources.ftp(source), stripe_count=4,
                 stripe_size=64 * KiB)
    ost = backend.layout(path).ost_list[2]
    service.stop.set()  # no periodic check: only the request below may trigger the patch
    service.stop.clear()
    backend.fail_ost(ost)
    client = RecoveryClient(site.config.recovery.socket)
    assert client.status(path)["whole"] is False
    reply = client.report(path, ost)
    assert reply["request_id"] >= 1
    status = client.wait(path, 60)
    assert status["whole"] and status["state"] == "whole"
    assert read_all(backend, path) == data


def test_reader_waits_for_the_patch_instead_of_failing(site, sources, service):
    source, data = sources.make("reader.bin", 3_000_011)
    backend = site.backend
    path = stage(backend, "reader.bin", data, sources.http(source), stripe_count=4,
                 stripe_size=64 * KiB)
    backend.fail_ost(backend.layout(path).ost_list[1])
    reader = RecoveringReader(backend, RecoveryClient(site.config.recovery.socket), path,
                              wait_timeout=60)
    assert reader.read() == data


def test_periodic_check_recovers_files_on_a_failed_ost(site, sources, service):
    source, data = sources.make("check.bin", 1_500_001)
    backend = site.backend
    path = stage(backend, "check.bin", data, sources.ftp(source), stripe_count=2,
                 stripe_size=64 * KiB)
    backend.fail_ost(backend.layout(path).ost_list[0])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if records.file_state(service.store, path) is not None and \
                records.file_state(service.store, path)["state"] == records.WHOLE:
            break
        time.sleep(0.2)
    assert read_all(backend, path) == data
    assert records.last_request(service.store, path)["origin"] == "check"


def test_recover_request_returns_the_plan(site, sources, service):
    source, data = sources.make("plan.bin", 4_000_037)
    backend = site.backend
    path = stage(backend, "plan.bin", data, sources.ftp(source), stripe_count=2,
                 stripe_size=64 * KiB, extra_sources=[sources.http(source)])
    backend.fail_ost(backend.layout(path).ost_list[1])
    reply = RecoveryClient(site.config.recovery.socket).recover(path, timeout=60)
    assert reply["state"] == "done"
    assert reply["outcome"]["state"] == "patched"
    assert "solver" in reply["outcome"]["explain"]
    assert read_all(backend, path) == data


def _as_nobody(socket_path: str, message: dict) -> dict:
    """Send ``message`` as uid 65534 (SO_PEERCRED says nobody)."""
    answer = run_as(NOBODY, lambda: RecoveryClient(socket_path).call(message))
    return {"ok": True, "reply": answer["value"]} if answer["ok"] else answer


def test_another_users_request_is_refused(site, sources, service):
    source, data = sources.make("owned.bin", 200_003)
    backend = site.backend
    roots = stage(backend, "roots.bin", data, sources.ftp(source), owner=(0, 0))
    theirs = stage(backend, "nobodys.bin", data, sources.ftp(source), owner=(NOBODY, NOBODY))
    socket_path = site.config.recovery.socket
    for op in ("status", "report", "wait", "recover"):
        refused = _as_nobody(socket_path, {"op": op, "path": roots, "timeout": 5})
        assert refused == {"ok": False, "kind": "PermissionDenied",
                           "error": refused["error"]}
        assert "may ask only about its own files" in refused["error"]
    allowed = _as_nobody(socket_path, {"op": "status", "path": theirs})
    assert allowed["ok"] and allowed["reply"]["whole"] is True
    # root may ask about anything
    assert RecoveryClient(socket_path).status(theirs)["whole"] is True
    assert records.active_request(service.store, roots) is None


def test_check_job_is_root_only(site, service):
    refused = _as_nobody(site.config.recovery.socket, {"op": "check-job", "job_id": "1"})
    assert not refused["ok"] and refused["kind"] == "PermissionDenied"


def _record_chain(store, job_id: str, paths: list[str], source: str) -> str:
    planner_records.open_records(store)
    chain_id = f"test-{job_id}"
    now = time.time()
    with store.transaction() as conn:
        conn.execute("INSERT INTO chains VALUES (?,?,?,?,?,?,?,?,?,?)",
                     (chain_id, "/tmp/job.sh", "/tmp", "slurm", 0, "submitted", "", now, now, "{}"))
        conn.execute("INSERT INTO chain_jobs(chain_id, job_key, role, queue, position, job_id,"
                     " state, updated) VALUES (?,?,?,?,?,?,?,?)",
                     (chain_id, "compute", "compute", "batch", 1, job_id, "submitted", now))
        for line, path in enumerate(paths, 1):
            conn.execute("INSERT INTO staged_files(chain_id, path, job_key, source, line, state)"
                         " VALUES (?,?,?,?,?,?)", (chain_id, path, "stage-in", source, line,
                                                   "staged"))
    return chain_id


def test_hook_recovers_inputs_and_fails_only_when_impossible(site, sources, service):
    good_source, good = sources.make("good.bin", 1_000_003)
    bad_source, bad = sources.make("bad.bin", 1_000_033)
    backend = site.backend
    good_path = stage(backend, "job/good.bin", good, sources.ftp(good_source), stripe_count=2,
                      stripe_size=64 * KiB)
    bad_path = stage(backend, "job/bad.bin", bad, sources.ftp(bad_source), stripe_count=2,
                     stripe_size=64 * KiB)
    _record_chain(service.store, "4242", [good_path], sources.ftp(good_source))
    _record_chain(service.store, "4343", [good_path, bad_path], sources.ftp(bad_source))
    backend.fail_ost(backend.layout(good_path).ost_list[0])
    env = dict(os.environ, SLURM_JOB_ID="4242")
    command = [sys.executable, "-m", "scratchkeeper", "-c", str(site.config_path), "recovery",
               "hook"]
    ok = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "1 staged input(s) whole" in ok.stdout
    assert read_all(backend, good_path) == good
    bad_source.unlink()
    backend.fail_ost(backend.layout(bad_path).ost_list[1])
    failed = subprocess.run(command[:-1] + ["hook", "4343", "--timeout", "60"],
                            capture_output=True, text=True, timeout=120)
    assert failed.returncode == 1
    assert "bad.bin" in failed.stderr and "No such file" in failed.stderr
    assert len(failed.stderr.strip().splitlines()) == 1


def test_hook_without_the_daemon_recovers_inline(site, sources):
    source, data = sources.make("inline.bin", 800_011)
    backend = site.backend
    path = stage(backend, "inline.bin", data, sources.http(source), stripe_count=2,
                 stripe_size=64 * KiB)
    store = records.open_records(__import__("scratchkeeper.state", fromlist=["StateStore"])
                                 .StateStore(site.config.state.database))
    _record_chain(store, "777", [path], sources.http(source))
    backend.fail_ost(backend.layout(path).ost_list[0])
    result = subprocess.run([sys.executable, "-m", "scratchkeeper", "-c", str(site.config_path),
                             "recovery", "hook", "777"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert read_all(backend, path) == data


def test_permission_denied_error_class_reaches_the_client(site, sources, service):
    source, data = sources.make("x.bin", 10_007)
    path = stage(site.backend, "x.bin", data, sources.ftp(source), owner=(NOBODY, NOBODY))
    # root is allowed; an unknown op is a clear input error
    with pytest.raises(Exception, match="unknown op"):
        RecoveryClient(site.config.recovery.socket).call({"op": "explode", "path": path})
    assert issubclass(PermissionDenied, Exception)
