"""recoveryd never acts on a user's word: sources come from root's record of the stage-in, only
where the site allows, and a path a user may not reach is answered as a missing one (issue 30;
a private site, no cluster needed; users skplain and skother)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import threading
import time

import pytest

from scratchkeeper.errors import InputError, RecoveryError
from scratchkeeper.planner import records as planner_records
from scratchkeeper.planner.commit import commit_stage
from scratchkeeper.recovery import trust
from scratchkeeper.recovery.outcome import LOST, PATCHED
from scratchkeeper.recovery.reconstruct import Recoverer
from scratchkeeper.recovery.service import RecoveryService
from scratchkeeper.state import StateStore
from scratchkeeper.storage.base import XATTR_PREFIX
from user_runtime import plain_user

from .conftest import NoQueue, other_user, read_all, run_as, stage, write_site

KiB = 1 << 10


class Listener:
    """A TCP listener on loopback that records every connection made to it (and hangs up)."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.connections += 1
            conn.close()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def close(self):
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


@pytest.fixture
def listener():
    running = Listener()
    yield running
    running.close()


@pytest.fixture(autouse=True)
def fresh_log_limits(monkeypatch):
    """Each test starts with empty per-file log limits."""
    monkeypatch.setattr(trust, "MISMATCHES", trust.RateLimitedLog())
    monkeypatch.setattr(trust, "REFUSALS", trust.RateLimitedLog())


def _damaged(site, tmp_path, name: str, *, owner=None, store=None, trusted=True):
    """A file staged from a file:// source (the record made as stage commit makes it), one of
    whose OSTs failed. The source is in the site's folder, which every user may enter."""
    data = os.urandom(700_001)
    folder = site.root / "sources"
    folder.mkdir(mode=0o755, exist_ok=True)
    source = folder / f"{name}.source"
    source.write_bytes(data)
    os.chmod(source, 0o644)
    backend = site.backend
    path = stage(backend, name, data, f"file://{source}", stripe_count=2, stripe_size=64 * KiB,
                 owner=owner, digest_store=store, trusted=trusted)
    backend.fail_ost(backend.layout(path).ost_list[0])
    return backend, path, data, f"file://{source}"


def _recover(recoverer, path):
    """(state, reason) of a recovery; an error before any patch counts as lost."""
    try:
        outcome = recoverer.recover(path)
    except RecoveryError as err:
        return LOST, str(err)
    return outcome.state, outcome.reason


def test_a_users_source_attribute_is_never_fetched_from(site_dir, tmp_path, listener, caplog):
    """The owner points user.scratchkeeper.source (and .sources) at a listener of theirs: root
    must not connect to it, and patches from the source stage commit recorded."""
    site = write_site(site_dir, ost_count=8)
    uid, gid = plain_user()
    backend, path, data, recorded = _damaged(site, tmp_path, "in.dat", owner=(uid, gid))
    # what the owner may do: change the user.* attributes of their own file
    backend.set_xattr(path, XATTR_PREFIX + "source", listener.url("in.dat").encode())
    backend.set_xattr(path, XATTR_PREFIX + "sources", listener.url("again.dat").encode())
    backend.set_xattr(path, XATTR_PREFIX + "sha256", b"0" * 64)
    with caplog.at_level(logging.WARNING, logger="scratchkeeper.recovery.trust"):
        outcome = Recoverer(backend, site.config).recover(path)
    assert outcome.state == PATCHED, outcome
    assert [s["source"] for s in outcome.plan.to_dict()["sources"]] == [recorded]
    assert read_all(backend, path) == data
    assert listener.connections == 0
    mismatch = [r.getMessage() for r in caplog.records if "differ from the record" in
                r.getMessage()]
    assert len(mismatch) == 1 and path in mismatch[0]
    assert all(f"{XATTR_PREFIX}{n}" in mismatch[0] for n in ("source", "sources", "sha256"))
    # one line per file: asking again does not write another
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="scratchkeeper.recovery.trust"):
        trust.read_record(backend, path, uid, len(data), None)
    assert not [r for r in caplog.records if "differ from the record" in r.getMessage()]


def test_a_file_with_only_user_attributes_is_not_fetched_for(site_dir, tmp_path, listener):
    """No trusted record, no committed row: the periodic check does not queue it, and a
    recovery asked for reports it unrecoverable without touching what the attribute names."""
    site = write_site(site_dir, ost_count=8)
    uid, gid = plain_user()
    store = StateStore(site.config.state.database)
    backend, path, _, _ = _damaged(site, tmp_path, "bare.dat", owner=(uid, gid), trusted=False)
    backend.set_xattr(path, XATTR_PREFIX + "source", listener.url("bare.dat").encode())
    service = RecoveryService(site.config, backend=backend, store=store, scheduler=NoQueue())
    from scratchkeeper.recovery import records
    records.open_records(store)
    planner_records.open_records(store)
    assert service.check_cycle() == []
    state, reason = _recover(Recoverer(backend, site.config, store=store), path)
    assert state == LOST and "stage commit recorded none" in reason
    assert listener.connections == 0


def test_a_recorded_source_outside_the_allow_list_is_refused(site_dir, tmp_path, listener):
    """Even root's record does not take recovery anywhere the site did not allow."""
    site = write_site(site_dir, ost_count=8,
                      extra='[recovery]\nallowed_sources = ["https://data.example.org"]')
    backend = site.backend
    data = os.urandom(300_007)
    path = stage(backend, "far.dat", data, listener.url("far.dat"), stripe_count=2,
                 stripe_size=64 * KiB)
    backend.fail_ost(backend.layout(path).ost_list[0])
    state, reason = _recover(Recoverer(backend, site.config), path)
    assert state == LOST
    assert f"127.0.0.1:{listener.port} is not in recovery.allowed_sources" in reason
    assert listener.connections == 0
    assert backend.open_rebuilds() == []


def test_without_a_list_only_endpoints_data_jobs_used_are_allowed(site_dir, tmp_path):
    """recovery.allowed_sources empty: a source is fetched from only when stage commit
    recorded its endpoint for some data job (here: file://, once recorded)."""
    site = write_site(site_dir, ost_count=8, extra="[recovery]\nallowed_sources = []")
    store = StateStore(site.config.state.database)
    planner_records.open_records(store)
    backend, path, data, source = _damaged(site, tmp_path, "new.dat")
    state, reason = _recover(Recoverer(backend, site.config, store=store), path)
    assert state == LOST and "no data job of the site staged from file://" in reason, reason
    planner_records.record_endpoints(store, [source])
    outcome = Recoverer(backend, site.config, store=store).recover(path)
    assert outcome.state == PATCHED, outcome
    assert read_all(backend, path) == data


def test_an_older_commit_is_recovered_from_its_staged_files_row(site_dir, tmp_path, listener):
    """A file committed before the trusted record existed: its source is the state database's
    row (root's), never the user.* attribute."""
    site = write_site(site_dir, ost_count=8)
    uid, gid = plain_user()
    store = StateStore(site.config.state.database)
    planner_records.open_records(store)
    backend, path, data, source = _damaged(site, tmp_path, "old.dat", owner=(uid, gid),
                                           trusted=False)
    backend.set_xattr(path, XATTR_PREFIX + "source", listener.url("old.dat").encode())
    now = time.time()
    with store.transaction() as conn:
        conn.execute("INSERT INTO chains VALUES (?,?,?,?,?,?,?,?,?,?)",
                     ("c-old", "/j.sh", "/tmp", "slurm", uid, "submitted", "", now, now, "{}"))
        conn.execute("INSERT INTO staged_files(chain_id, path, job_key, source, line, state, "
                     "size, checksum, owner_uid, owner_gid, staged_at) VALUES "
                     "(?,?,?,?,?,?,?,?,?,?,?)", ("c-old", path, "stage-in", source, 2, "staged",
                                                 len(data),
                                                 "sha256:" + hashlib.sha256(data).hexdigest(),
                                                 uid, gid, now))
    outcome = Recoverer(backend, site.config, store=store).recover(path)
    assert outcome.state == PATCHED, outcome
    assert read_all(backend, path) == data and listener.connections == 0


# -- one answer for a missing path and one the caller may not reach ---------------------------

def _raw(socket_path: str, request: dict) -> str:
    """The reply's bytes to one request (sent as the calling process)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(socket_path)
    conn.settimeout(20)
    conn.sendall((json.dumps(request) + "\n").encode())
    received = b""
    while not received.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        received += chunk
    conn.close()
    return received.decode()


@pytest.fixture
def service(site_dir):
    site = write_site(site_dir, ost_count=4)
    running = RecoveryService(site.config, scheduler=NoQueue())
    running.start()
    yield site, running
    running.shutdown()


REQUESTS = [{"op": "status"}, {"op": "report", "ost_index": 0}, {"op": "wait", "timeout": 1},
            {"op": "recover", "wait": False}, {"op": "reads", "reads": 1, "bytes": 10}]


@pytest.mark.parametrize("what", ["others-file", "own-file", "link-out", "subfolder"])
def test_a_path_the_caller_cannot_reach_is_answered_as_a_missing_one(service, what):
    """skother's folder is 0700. Whatever is in it (skother's file, a file of the caller's own,
    a link out of the scratch root, a folder), the caller gets, byte for byte, the answer it
    gets once that is gone."""
    site, running = service
    plain_uid, plain_gid = plain_user()
    other_uid, other_gid, _ = other_user()
    backend = site.backend
    stage(backend, "other/readme.dat", b"o" * 5000, "file:///dev/null", stripe_count=1,
          owner=(other_uid, other_gid))
    mdt = backend.mdt_root
    folder = mdt / "other"
    os.chown(folder, other_uid, other_gid)
    os.chmod(folder, 0o700)
    target = folder / "secret.dat"
    name = "other/secret.dat"
    if what == "others-file":
        stage(backend, name, b"s" * 7000, "file:///dev/null", stripe_count=1,
              owner=(other_uid, other_gid))
    elif what == "own-file":
        stage(backend, name, b"m" * 7000, "file:///dev/null", stripe_count=1,
              owner=(plain_uid, plain_gid))
    elif what == "link-out":
        os.symlink("/etc/passwd", target)
    else:
        stage(backend, "other/secret.dat/inner.dat", b"i" * 10, "file:///dev/null",
              stripe_count=1, owner=(plain_uid, plain_gid))
        name = "other/secret.dat/inner.dat"
    full = str(site.root / "scratch" / name)
    socket_path = site.config.recovery.socket

    def ask_all():
        return [_raw(socket_path, {**request, "path": full}) for request in REQUESTS]
    present = run_as(plain_uid, ask_all)
    if what == "subfolder":
        backend.remove(name)
        os.rmdir(target)
    elif what == "link-out":
        os.unlink(target)
    else:
        backend.remove(name)
    absent = run_as(plain_uid, ask_all)
    assert present["ok"] and absent["ok"], (present, absent)
    assert present["value"] == absent["value"]
    for answer in absent["value"]:
        reply = json.loads(answer)
        assert reply["ok"] is False and reply["kind"] == "PermissionDenied", reply
        assert f"no file of uid {plain_uid} there" in reply["error"]
    # the caller's own file where the caller can reach it is served
    stage(backend, "mine.dat", b"x" * 100, "file:///dev/null", stripe_count=1,
          owner=(plain_uid, plain_gid))
    mine = str(site.root / "scratch" / "mine.dat")
    served = run_as(plain_uid, lambda: json.loads(_raw(socket_path, {"op": "status",
                                                                      "path": mine})))
    assert served["value"]["ok"] is True and served["value"]["whole"] is True


def test_a_stage_commit_tells_nothing_of_another_users_folder(site_dir):
    """A chain of skplain's naming a path in skother's 0700 folder: the commit fails with the
    same words whether a file is there or not, and lists nothing of the folder."""
    site = write_site(site_dir, ost_count=4)
    plain_uid, _ = plain_user()
    other_uid, other_gid, _ = other_user()
    private = site.root / "scratch" / "private"
    private.mkdir(parents=True)
    os.chown(private, other_uid, other_gid)
    os.chmod(private, 0o700)
    store = planner_records.open_records(StateStore(site.config.state.database))

    def commit(path: str, recursive: bool) -> str:
        chain_id = f"c-{time.monotonic_ns()}"
        now = time.time()
        with store.transaction() as conn:
            conn.execute("INSERT INTO chains VALUES (?,?,?,?,?,?,?,?,?,?)",
                         (chain_id, "/home/u/job.sh", "/tmp", "slurm", plain_uid, "submitted",
                          "", now, now, "{}"))
            conn.execute("INSERT INTO chain_jobs(chain_id, job_key, role, queue, position, "
                         "state, updated) VALUES (?,?,?,?,?,?,?)",
                         (chain_id, "stage-in", "stage-in", "dataxfer", 0, "submitted", now))
            conn.execute("INSERT INTO staged_files(chain_id, path, job_key, source, line, "
                         "recursive, state) VALUES (?,?,?,?,?,?,?)",
                         (chain_id, path, "stage-in", "ftp://h/x", 3, int(recursive),
                          "planned"))
        with pytest.raises(InputError) as raised:
            commit_stage(store, site.config, chain_id, "stage-in", for_uid=plain_uid)
        return str(raised.value).replace(chain_id, "CHAIN")

    for name, recursive in [("secret.dat", False), ("folder", True)]:
        path = str(private / name)
        if recursive:
            (private / name).mkdir()
            (private / name / "inner-name.dat").write_bytes(b"x")
        else:
            (private / name).write_bytes(b"root's bytes")
        os.chown(private / name, plain_uid, plain_uid)  # even a file of the caller's own
        there = commit(path, recursive)
        assert "inner-name" not in there
        if recursive:
            os.unlink(private / name / "inner-name.dat")
            os.rmdir(private / name)
        else:
            os.unlink(private / name)
        assert commit(path, recursive) == there, there


def test_mismatch_lines_are_bounded_per_file_and_in_all(caplog):
    """A user owning many files cannot flood root's log: one line per file per interval, at
    most ``budget`` a minute in all, and the next line says how many were held back."""
    limited = trust.RateLimitedLog(interval=3600.0, budget=3)
    with caplog.at_level(logging.WARNING, logger="scratchkeeper.recovery.trust"):
        logged = [limited.note(f"f{i}", f"file {i} differs") for i in range(10)]
        again = limited.note("f0", "file 0 differs")
    assert logged == [True] * 3 + [False] * 7 and again is False
    assert [r.getMessage() for r in caplog.records] == [f"file {i} differs" for i in range(3)]
    limited.window = (limited.window[0] - 61.0, limited.window[1])  # a minute later
    with caplog.at_level(logging.WARNING, logger="scratchkeeper.recovery.trust"):
        assert limited.note("f5", "file 5 differs") is True
    assert caplog.records[-1].getMessage() == "file 5 differs (7 similar line(s) not logged)"
