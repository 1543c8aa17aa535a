"""recoveryd's socket under abuse: connection limits per uid, bounded threads, half-sent and
malformed requests (a private site, no cluster needed; the clients run as other users)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import threading
import time

import pytest

from scratchkeeper.recovery import service as service_module
from scratchkeeper.recovery.client import RecoveryClient
from scratchkeeper.recovery.service import RecoveryService
from user_runtime import plain_user

from .conftest import NOBODY, NoQueue, run_as, stage, write_site


@pytest.fixture
def service(site_dir):
    if os.geteuid() != 0:
        pytest.skip("needs root to connect as other users")
    site = write_site(site_dir, ost_count=8)
    running = RecoveryService(site.config, scheduler=NoQueue())
    running.request_timeout = 30.0
    running.start()
    yield running
    running.shutdown()


def _limit(service: RecoveryService, **limits) -> None:
    """Set bounds of the running service's admission (recovery.request_threads, ...)."""
    service.admission.limits = dataclasses.replace(service.admission.limits, **limits)


def _connect(path: str) -> socket.socket:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    return conn


def _answer(conn: socket.socket, timeout: float) -> dict | None:
    """The reply waiting on ``conn`` (None: nothing within ``timeout``, b'' means closed)."""
    conn.settimeout(timeout)
    received = b""
    try:
        while not received.endswith(b"\n"):
            chunk = conn.recv(65536)
            if not chunk:
                return {"closed": True, "partial": received.decode(errors="replace")}
            received += chunk
    except TimeoutError:
        return None
    except ConnectionResetError:  # closed with bytes of ours unread (a drip after the close)
        return {"closed": True, "partial": received.decode(errors="replace"), "reset": True}
    return json.loads(received)


def _hold_connections(uid: int, path: str, count: int):
    """A child running as ``uid`` opens ``count`` connections and keeps them until released.

    Returns (pid, release, answers): ``answers`` holds what each connection got within half a
    second (None: nothing, it was admitted and waits for its request); writing to ``release``
    lets the child close them and exit.
    """
    report_r, report_w = os.pipe()
    release_r, release_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(report_r)
            os.close(release_w)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            conns = [_connect(path) for _ in range(count)]
            answers = [_answer(conn, 0.5) for conn in conns]
            os.write(report_w, json.dumps(answers).encode())
            os.close(report_w)
            os.read(release_r, 1)
            for conn in conns:
                conn.close()
        finally:
            os._exit(0)
    os.close(report_w)
    os.close(release_r)
    chunks = []
    while chunk := os.read(report_r, 65536):
        chunks.append(chunk)
    os.close(report_r)
    return pid, release_w, json.loads(b"".join(chunks))


def _release(pid: int, release: int) -> None:
    os.write(release, b"x")
    os.close(release)
    os.waitpid(pid, 0)


def test_one_uid_gets_at_most_its_share_of_connections_and_others_are_still_served(
        service, caplog):
    caplog.set_level(logging.WARNING, logger="scratchkeeper.recovery.service")
    _limit(service, connections_per_uid=3)
    socket_path = service.config.recovery.socket
    plain_uid, plain_gid = plain_user()
    backend = service.backend
    path = stage(backend, "plain.bin", b"x" * 70_000, "file:///nonexistent",
                 owner=(plain_uid, plain_gid), stripe_count=1)
    pid, release, answers = _hold_connections(NOBODY, socket_path, 5)
    try:
        assert answers[:3] == [None, None, None]  # admitted: waiting for their requests
        for refused in answers[3:]:
            assert refused["ok"] is False
            assert "too many connections from uid 65534 (at most 3 at once)" in refused["error"]
        # another uid is served meanwhile
        answer = run_as(plain_uid, lambda: RecoveryClient(socket_path).status(path))
        assert answer["ok"] and answer["value"]["whole"] is True, answer
        assert service.admission.in_flight().get(NOBODY) == 3
    finally:
        _release(pid, release)
    refusals = [r.getMessage() for r in caplog.records if r.getMessage().startswith("refused")]
    assert refusals.count("refused: uid 65534, op -, path -: too many connections from uid "
                          "65534 (at most 3 at once)") == 2
    deadline = time.monotonic() + 5
    while service.admission.in_flight() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert service.admission.in_flight() == {}  # closed connections no longer count


def test_a_client_turned_away_tries_again_until_a_connection_is_free(service):
    """Many processes of one job waiting for one patch: those past the limit are not failed,
    their client retries with backoff."""
    _limit(service, connections_per_uid=2)
    socket_path = service.config.recovery.socket
    path = stage(service.backend, "nobodys.bin", b"y" * 70_000, "file:///nonexistent",
                 owner=(NOBODY, NOBODY), stripe_count=1)
    pid, release, answers = _hold_connections(NOBODY, socket_path, 2)
    assert answers == [None, None]
    threading.Timer(1.0, _release, (pid, release)).start()
    started = time.monotonic()
    answer = run_as(NOBODY, lambda: RecoveryClient(socket_path).status(path))
    assert answer["ok"] and answer["value"]["whole"] is True, answer
    assert time.monotonic() - started >= 0.9  # it waited for the held connections to go


def test_threads_are_bounded_and_the_last_ones_are_kept_for_a_uid_holding_none(service):
    """Of 4 request threads, a uid already holding some gets 3 at most (root too: only the
    pool bounds its connections); the 4th goes to the first connection of another uid, and
    beyond the 4 every connection is refused."""
    _limit(service, threads=4)
    socket_path = service.config.recovery.socket
    held = [_connect(socket_path) for _ in range(3)]
    pid = release = None
    try:
        assert [_answer(conn, 0.3) for conn in held] == [None] * 3
        extra = _connect(socket_path)
        refused = _answer(extra, 5)
        extra.close()
        assert refused["ok"] is False and refused["kind"] == "ServiceBusy"
        assert "service busy (3 requests in progress)" in refused["error"]
        pid, release, answers = _hold_connections(NOBODY, socket_path, 1)
        assert answers == [None]  # the kept thread: NOBODY held none
        extra = _connect(socket_path)  # all 4 are taken: root's is refused,
        refused = _answer(extra, 5)
        extra.close()
        assert refused["ok"] is False and "service busy (4 requests in progress)" in \
            refused["error"]
        plain_uid, _ = plain_user()  # and so is the first of another uid
        answer = run_as(plain_uid, lambda: RecoveryClient(socket_path, connect_timeout=0.2)
                        .list())
        assert answer["ok"] is False and answer["kind"] == "ServiceBusy", answer
        handlers = [t for t in threading.enumerate() if t.name.startswith("socket-request")]
        assert len(handlers) <= 4
    finally:
        for conn in held:
            conn.close()
        if pid is not None:
            _release(pid, release)
    # once they are gone, requests are answered again
    deadline = time.monotonic() + 5
    while True:
        try:
            assert RecoveryClient(socket_path).list()["requests"] == []
            break
        except AssertionError:
            raise
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.mark.parametrize("drip", [False, True])
def test_a_half_sent_request_is_dropped_after_the_timeout(service, caplog, drip):
    caplog.set_level(logging.WARNING, logger="scratchkeeper.recovery.service")
    service.request_timeout = 0.5
    conn = _connect(service.config.recovery.socket)
    started = time.monotonic()
    conn.sendall(b'{"op": "sta')
    if drip:  # a byte at a time, each well within the timeout: the whole request still has 0.5 s
        for byte in b'tus", "path"':
            time.sleep(0.1)
            try:
                conn.sendall(bytes([byte]))
            except OSError:
                break
    answer = _answer(conn, 5)
    elapsed = time.monotonic() - started
    conn.close()
    assert answer is not None and answer["closed"], answer
    assert elapsed < 3
    assert any(r.getMessage().startswith("refused: uid 0, op -, path -: request not complete "
                                         "within 0.5s") for r in caplog.records)
    deadline = time.monotonic() + 5
    while service.admission.in_flight() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert service.admission.in_flight() == {}


@pytest.mark.parametrize("request_line,expected", [
    (b'{"op": "status", "path": "caf\xe9"}\n', "request is not UTF-8 (byte 29 is 0xe9)"),
    (b'\xff\xfe{}\n', "request is not UTF-8 (byte 0 is 0xff)"),
    (b'{"op": "status", \n', "request is not JSON"),
    (b'[1, 2]\n', "request must be a JSON object"),
    (b'{"op": "wait", "path": "a", "timeout": NaN}\n', "request is not usable JSON"),
    (b'{"op": "wait", "path": "a", "timeout": 1e999}\n', "'timeout' must be a non-negative"),
    (b'{"op": "wait", "path": "a", "timeout": ' + b"9" * 400 + b'}\n',
     "'timeout' must be a non-negative"),
    (b'{"op": "recover", "path": "a", "osts": [1' + b"0" * 5000 + b']}\n',
     "request is not usable JSON"),
    (b'{"op": "recover", "path": "a", "osts": 5}\n', "'osts' must be OST indices"),
    (b'{"op": "recover", "path": "a", "osts": [true]}\n', "'osts' must be OST indices"),
    (b'{"op": "status", "path": "a\\u0000b"}\n', "invalid path"),
    (b'{"op": "status", "path": ["a"]}\n', "request without a 'path'"),
    (b'{"op": {"x": 1}}\n', "unknown op"),
    (b"[" * 100_000 + b"]" * 100_000 + b"\n", "request is not usable JSON"),
    (b'{"a":' * 100_000 + b"1" + b"}" * 100_000 + b"\n", "request is not usable JSON"),
], ids=["latin-1", "bom", "truncated", "array", "nan", "inf", "400-digits", "5000-digit-int",
        "osts-int", "osts-bool", "nul-path", "list-path", "dict-op", "deep-array", "deep-object"])
def test_a_malformed_request_gets_a_clear_input_error(service, caplog, request_line, expected):
    caplog.set_level(logging.WARNING, logger="scratchkeeper.recovery.service")
    conn = _connect(service.config.recovery.socket)
    conn.sendall(request_line)
    answer = _answer(conn, 10)
    conn.close()
    assert answer["ok"] is False and answer["kind"] == "InputError", answer
    assert answer["error"].startswith(expected) or expected in answer["error"], answer
    assert "internal error" not in answer["error"]
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert any(r.getMessage().startswith("refused: uid 0, op ") for r in caplog.records)


def test_refused_requests_cannot_fill_roots_log(service, caplog):
    """A user sending refused requests in a loop gets a bounded number of log lines a minute,
    and another user's refusal is still logged meanwhile."""
    caplog.set_level(logging.WARNING, logger="scratchkeeper.recovery")
    for _ in range(500):
        service._refuse(NOBODY, "status", "/x" * 5000, "no file of uid 65534 there")
    service._refuse(1234, "status", "/y", "no file of uid 1234 there")
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("refused")]
    flood = [line for line in lines if line.startswith(f"refused: uid {NOBODY},")]
    assert len(flood) == service_module.REFUSALS_PER_MINUTE
    assert all(len(line) < 1200 for line in flood)  # a long path is cut
    assert any(line.startswith("refused: uid 1234,") for line in lines)
