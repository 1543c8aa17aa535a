"""``recovery list``: when each request was queued, started and finished, and its progress.

No cluster: a private site, file:// sources and, for the kill -9 of recoveryd, a throttled HTTP
server of the test's own on loopback (the patch must last long enough to be killed halfway).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from scratchkeeper.cli import main
from scratchkeeper.recovery import records
from scratchkeeper.recovery.client import RecoveryClient
from scratchkeeper.recovery.outcome import PATCHED
from scratchkeeper.recovery.reconstruct import Recoverer
from scratchkeeper.recovery.service import process_request
from scratchkeeper.state import StateStore

from .conftest import read_all, stage, start_recoveryd, write_site

KiB = 1 << 10


@pytest.fixture
def local_site(tmp_path):
    return write_site(tmp_path / "site", ost_count=8)


def _store(site) -> StateStore:
    return records.open_records(StateStore(site.config.state.database))


def _lost_bytes(backend, path: str, ost: int, size: int) -> int:
    return sum(e.length for e in backend.layout(path).extents_on_ost(ost, size))


def test_a_recovered_request_records_its_times_and_all_its_bytes(local_site, tmp_path):
    data = os.urandom(3_000_017)
    source = tmp_path / "source.bin"
    source.write_bytes(data)
    backend = local_site.backend
    path = stage(backend, "t.bin", data, f"file://{source}", stripe_count=4,
                 stripe_size=64 * KiB)
    failed = backend.layout(path).ost_list[1]
    lost = _lost_bytes(backend, path, failed, len(data))
    backend.fail_ost(failed)
    store = _store(local_site)
    request_id, _ = records.enqueue(store, path, reported_osts=[failed], requested_by=0,
                                    origin="test")
    queued = records.request(store, request_id)
    assert queued["started"] is None and queued["bytes_total"] is None
    view = records.request_view(queued, now=queued["created"] + 5)
    assert view["wait_seconds"] == pytest.approx(5) and view["run_seconds"] is None
    assert view["progress"] is None
    assert records.claim(store, request_id, records.worker_id())
    outcome = process_request(store, Recoverer(backend, local_site.config, store=store),
                              records.request(store, request_id))
    assert outcome["state"] == PATCHED
    row = records.request(store, request_id)
    assert row["created"] <= row["started"] <= row["finished"]
    assert row["bytes_total"] == lost and row["bytes_done"] == lost
    view = records.request_view(row, now=row["finished"] + 100)
    assert view["run_seconds"] == pytest.approx(row["finished"] - row["started"])
    assert view["wait_seconds"] == pytest.approx(row["started"] - row["created"])
    assert view["progress"] == 1.0
    assert read_all(backend, path) == data


def test_progress_is_written_at_a_bounded_rate(local_site, monkeypatch):
    store = _store(local_site)
    written = []
    monkeypatch.setattr(records, "record_progress",
                        lambda store, rebuild_id, done, total: written.append(done))
    recorder = records.ProgressRecorder(store, "rb1", 1000, interval=3600.0)
    for done in range(1, 1001):
        recorder.update(done)  # a patch of 1000 small writes within the interval
    assert written == [1], "one write per interval, not one per update"
    recorder.update(1000, force=True)  # the end of the patch is always recorded
    assert written == [1, 1000]
    fast = records.ProgressRecorder(store, "rb2", 10, interval=0.0)
    for done in range(3):
        fast.update(done)
    assert written[2:] == [0, 1, 2]


def test_progress_only_touches_the_running_request_of_its_rebuild(local_site):
    store = _store(local_site)
    first, _ = records.enqueue(store, "/s/a", reported_osts=[], requested_by=0, origin="test")
    second, _ = records.enqueue(store, "/s/b", reported_osts=[], requested_by=0, origin="test")
    for request_id, rebuild in ((first, "rb-a"), (second, "rb-b")):
        assert records.claim(store, request_id, records.worker_id())
        records.set_rebuild(store, request_id, rebuild)
    records.record_progress(store, "rb-a", 40, 100)
    assert (records.request(store, first)["bytes_done"],
            records.request(store, first)["bytes_total"]) == (40, 100)
    assert records.request(store, second)["bytes_total"] is None
    records.finish(store, first, ok=False, path="/s/a", file_state=records.LOST, reason="x")
    records.record_progress(store, "rb-a", 90, 100)  # a late write after the end: ignored
    row = records.request(store, first)
    assert row["state"] == records.FAILED and row["bytes_done"] == 40 and row["finished"]


def test_a_view_of_recoveryds_shorter_answer_claims_no_times_it_does_not_know():
    # the fields recoveryd's "list" answers with: no start, end or progress
    answer = {"request_id": 3, "path": "/s/x", "state": records.DONE, "origin": "probe",
              "requested_by": 1000, "reason": "", "created": 100.0}
    view = records.request_view(answer, now=5000.0)
    assert (view["wait_seconds"], view["run_seconds"], view["progress"]) == (None, None, None)
    queued = records.request_view({**answer, "state": records.QUEUED}, now=130.0)
    assert queued["wait_seconds"] == pytest.approx(30.0)


def test_the_migration_keeps_the_requests_recorded_before_it(tmp_path):
    store = StateStore(tmp_path / "state.db")
    store.ensure_schema(records.COMPONENT, records.MIGRATIONS[:1])
    with store.transaction() as conn:
        conn.execute("INSERT INTO recovery_requests(path, requested_by, origin, state, created, "
                     "updated) VALUES ('/s/old', 0, 'probe', 'done', 10.0, 12.5)")
    records.open_records(store)
    row = records.request(store, 1)
    assert (row["started"], row["finished"], row["bytes_done"], row["bytes_total"]) == \
        (None, 12.5, 0, None)
    assert records.request_view(row)["wait_seconds"] == pytest.approx(2.5)


def test_recovery_list_shows_times_and_progress(local_site, capsys):
    store = _store(local_site)
    running, _ = records.enqueue(store, "/s/run.bin", reported_osts=[2], requested_by=0,
                                 origin="probe")
    records.enqueue(store, "/s/wait.bin", reported_osts=[2], requested_by=0, origin="hook")
    assert records.claim(store, running, records.worker_id())
    records.set_rebuild(store, running, "rb-run")
    records.record_progress(store, "rb-run", 48 << 20, 128 << 20)
    assert main(["-c", str(local_site.config_path), "recovery", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:7] == ["ID", "STATE", "ORIGIN", "QUEUED", "WAITED", "RAN",
                                    "PATCHED"]
    run_line = next(line for line in lines if "/s/run.bin" in line)
    assert "running" in run_line and "48.0M/128.0M 38%" in run_line
    wait_line = next(line for line in lines if "/s/wait.bin" in line)
    assert "queued" in wait_line and " - " in wait_line  # not started: no run time, no progress
    assert main(["-c", str(local_site.config_path), "recovery", "list", "--json"]) == 0
    views = {v["path"]: v for v in json.loads(capsys.readouterr().out)}
    assert views["/s/run.bin"]["bytes_done"] == 48 << 20
    assert views["/s/run.bin"]["progress"] == pytest.approx(0.375)
    assert views["/s/run.bin"]["started"] is not None
    assert views["/s/run.bin"]["run_seconds"] >= 0
    assert views["/s/wait.bin"]["started"] is None and views["/s/wait.bin"]["progress"] is None


# -- kill -9 of recoveryd mid-patch ------------------------------------------------------------

class _SlowHttp:
    """A folder over HTTP (GET with one or more ``Range`` requests as curl sends them, one per
    request) that sends ``rate`` bytes a second: a patch lasts seconds, long enough to kill."""

    def __init__(self, folder: Path, rate: int):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                data = (folder / self.path.lstrip("/")).read_bytes()
                first, _, last = self.headers["Range"].removeprefix("bytes=").partition("-")
                body = data[int(first):int(last) + 1]
                self.send_response(206)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Content-Range", f"bytes {first}-{last}/{len(data)}")
                self.end_headers()
                try:
                    for offset in range(0, len(body), 8 * KiB):
                        self.wfile.write(body[offset:offset + 8 * KiB])
                        time.sleep(8 * KiB / outer.rate)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the killed daemon's curl went away

        self.rate = rate
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def _poll(store: StateStore, request_id: int, until, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        row = records.request(store, request_id)
        seen.append((row["state"], row["bytes_done"], row["bytes_total"]))
        if until(row):
            return row, seen
        time.sleep(0.05)
    raise AssertionError(f"request {request_id}: not reached in {timeout}s; last {seen[-3:]}")


def test_a_request_resumed_after_kill_minus_nine_shows_its_progress_from_where_it_is(
        site_dir, tmp_path):
    site = write_site(site_dir, ost_count=8, extra="[recovery]\nchunk_size = 65536\n"
                      "workers = 1\ncheck_interval = 3600.0")
    served = tmp_path / "served"
    served.mkdir()
    data = os.urandom(16 << 20)
    (served / "slow.bin").write_bytes(data)
    # 4 MiB lost, fetched by curl in batches of 16 chunks (1 MiB) that arrive whole: about 4 s
    # of patching, a batch written (and its progress recorded) every second
    http = _SlowHttp(served, rate=1 << 20)
    backend = site.backend
    path = stage(backend, "slow.bin", data, f"{http.url}/slow.bin", stripe_count=4,
                 stripe_size=64 * KiB)
    failed = backend.layout(path).ost_list[0]
    lost = _lost_bytes(backend, path, failed, len(data))
    backend.fail_ost(failed)
    store = _store(site)
    daemon = start_recoveryd(site)
    try:
        request_id = RecoveryClient(site.config.recovery.socket).recover(
            path, wait=False)["request_id"]
        # killed once some progress is recorded, well before the end
        row, _ = _poll(store, request_id, lambda r: r["bytes_done"] > 0)
    finally:
        os.kill(daemon.pid, signal.SIGKILL)
        daemon.wait(timeout=10)
    killed = records.request(store, request_id)
    assert killed["state"] == records.RUNNING and killed["bytes_total"] == lost
    assert 0 < killed["bytes_done"] < lost, "killed halfway, its progress kept"
    daemon = start_recoveryd(site)
    try:
        row, seen = _poll(store, request_id, lambda r: r["state"] == records.DONE)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
        http.stop()
    # the resumed request never showed less than it had done before the kill
    assert all(done >= killed["bytes_done"] for _, done, _ in seen), seen
    assert any(state == records.RUNNING and killed["bytes_done"] < done < lost
               for state, done, _ in seen), "the resumed patch was seen going on from there"
    assert row["bytes_done"] == row["bytes_total"] == lost
    assert row["started"] == killed["started"], "started once, resumed after"
    assert row["finished"] >= row["started"]
    assert read_all(backend, path) == data
