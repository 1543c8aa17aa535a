"""kill -9 of recoveryd in the middle of a batch (issue 43): the next start resumes every
file's rebuild from its journal, each file is whole and verified by its blocks.

No cluster: a private site, recoveryd as its own process, and a throttled HTTP server of the
test's own on loopback (the batch must last long enough to be killed halfway).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from scratchkeeper.recovery import records
from scratchkeeper.state import StateStore
from scratchkeeper.storage import Rebuild

from .conftest import read_all, stage, start_recoveryd, stop_recoveryd, write_site

KiB = 1 << 10
MiB = 1 << 20


class _SlowHttp:
    """A folder over HTTP (one ``Range`` per request, as curl sends them) at ``rate`` bytes a
    second per request."""

    def __init__(self, folder: Path, rate: int):
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
                        time.sleep(8 * KiB / rate)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the killed daemon's curl went away

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def _journalled(store_root: Path) -> dict[str, int]:
    """Bytes each open rebuild's journal holds, by file: read-only, beside the running daemon."""
    conn = sqlite3.connect(f"file:{store_root / 'namespace.db'}?mode=ro", uri=True, timeout=10)
    try:
        rows = conn.execute("SELECT record FROM rebuilds").fetchall()
    except sqlite3.OperationalError:
        return {}  # a transaction of the daemon's in the way: look again
    finally:
        conn.close()
    rebuilds = [Rebuild.from_dict(json.loads(record)) for record, in rows]
    return {r.path: sum(e.length for e in r.patched) for r in rebuilds}


def _requests(store: StateStore, paths: list[str]) -> list:
    return [records.last_request(store, path) for path in paths]


def _until(store: StateStore, paths: list[str], done, timeout: float = 90.0) -> list:
    deadline = time.monotonic() + timeout
    rows = _requests(store, paths)
    while time.monotonic() < deadline:
        rows = _requests(store, paths)
        if all(row is not None for row in rows) and done(rows):
            return rows
        time.sleep(0.05)
    raise AssertionError(f"not reached within {timeout:g} s: "
                         f"{[(r['state'], r['bytes_done']) if r else None for r in rows]}")


def test_a_batch_killed_halfway_is_resumed_file_by_file_from_its_journal(site_dir, tmp_path):
    # journalled after every write (conftest), checked every half second, chunks of 64 KiB
    site = write_site(site_dir, ost_count=8, extra="[recovery]\nchunk_size = 65536\n"
                      "workers = 1")
    store = records.open_records(StateStore(site.config.state.database))
    served = tmp_path / "served"
    served.mkdir()
    http = _SlowHttp(served, rate=MiB)
    backend = site.backend
    files = []
    for number in range(4):
        data = os.urandom(8 * MiB + number)
        (served / f"slow-{number}.bin").write_bytes(data)
        files.append((stage(backend, f"slow-{number}.bin", data,
                            f"{http.url}/slow-{number}.bin", stripe_count=4,
                            stripe_size=64 * KiB, osts=(0, 1, 2, 3), digest_store=store,
                            digest_block=64 * KiB), data))
    paths = [path for path, _ in files]
    lost = sum(e.length for e in backend.layout(paths[0]).extents_on_ost(1, 8 * MiB))
    backend.fail_ost(1)
    daemon = start_recoveryd(site)
    try:
        # the check queues the failure's files; one worker claims them all and patches them
        # at once: killed once every one of them has some bytes in its journal
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            done = _journalled(Path(site.config.storage.store_root))
            if len(done) == len(paths) and all(done.values()):
                break
            time.sleep(0.02)
        else:
            raise AssertionError(f"the batch never had every file under way: {done}")
    finally:
        os.kill(daemon.pid, signal.SIGKILL)
        daemon.wait(timeout=10)
    killed = _requests(store, paths)
    assert len({row["worker"] for row in killed}) == 1, "one claim for the batch"
    assert all(row["state"] == records.RUNNING and row["rebuild_id"] for row in killed)
    open_rebuilds = {r.rebuild_id: r for r in backend.open_rebuilds()}
    assert {row["rebuild_id"] for row in killed} == set(open_rebuilds)
    journalled = {row["path"]: sum(e.length for e in open_rebuilds[row["rebuild_id"]].patched)
                  for row in killed}
    assert all(0 < done < lost for done in journalled.values()), journalled
    daemon = start_recoveryd(site)
    try:
        finished = _until(store, paths, lambda rows: all(
            r["state"] in (records.DONE, records.FAILED) for r in rows))
    finally:
        assert stop_recoveryd(site, daemon) == 0
        http.stop()
    for row, (path, data) in zip(finished, files):
        outcome = json.loads(row["outcome"])
        assert row["state"] == records.DONE, (row["reason"], outcome)
        # the same rebuild went on: only what its journal did not hold was fetched again
        assert row["request_id"] == next(r["request_id"] for r in killed if r["path"] == path)
        assert outcome["patched_bytes"] == lost - journalled[path]
        assert outcome["verified"] == "blocks"
        assert read_all(backend, path) == data
    assert backend.open_rebuilds() == []
