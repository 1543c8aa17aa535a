"""Requests between hosts (scratchkeeper/wire.py): the caller is who the MUNGE credential says,
whatever the request's words; a forged, replayed, expired or altered request is refused; a reply
is believed only from the head's service and only for this request; retries are answered once."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from munge_daemon import start_munged
from scratchkeeper.munge import EMUNGE_CRED_REPLAYED, Munge, MungeError, MungeUnavailable
from scratchkeeper.wire import (
    Caller,
    Refused,
    ReplayCache,
    Unreachable,
    open_reply,
    open_request,
    receive_line,
    seal_reply,
    seal_request,
)

NOBODY = 65534


def sealed_as(uid: int, socket_path: str, message: dict) -> bytes:
    """A request sealed by a process of ``uid`` (its credential comes from munged, not from us)."""
    code = ("import sys, json; from scratchkeeper.munge import Munge; "
            "from scratchkeeper.wire import seal_request; "
            "sys.stdout.buffer.write(seal_request(Munge(sys.argv[1]), json.loads(sys.argv[2])))")
    result = subprocess.run([shutil.which("setpriv"), f"--reuid={uid}", f"--regid={uid}",
                             "--clear-groups", sys.executable, "-c", code, socket_path,
                             json.dumps(message)],
                            capture_output=True, check=True, timeout=60,
                            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return result.stdout.rstrip(b"\n")


def test_the_caller_is_the_credentials_uid_not_the_requests_words(munge_site):
    line = sealed_as(NOBODY, munge_site.socket, {"op": "status", "uid": 0, "user": "root"})
    sealed = open_request(Munge(munge_site.socket), line)
    assert sealed.caller.uid == NOBODY
    assert sealed.message["uid"] == 0  # only words: nothing reads them as an identity


def test_a_replayed_request_is_refused(munge_site):
    munge = Munge(munge_site.socket)
    line = seal_request(munge, {"op": "list"}).rstrip(b"\n")
    open_request(munge, line)
    with pytest.raises(Refused, match="Replayed"):
        open_request(munge, line)


def test_a_request_whose_bytes_differ_from_what_was_signed_is_refused(munge_site):
    munge = Munge(munge_site.socket)
    line = seal_request(munge, {"op": "status", "path": "/scratch/alice/a"}).rstrip(b"\n")
    body = line[6:-1]  # between "MUNGE:" and the closing ":"
    for at in (len(body) // 3, len(body) // 2, len(body) - 5):
        # another base64 letter in its place ("A" could be the one there: then "B")
        flipped = bytes([body[at] ^ 0x01]) if chr(body[at] ^ 0x01).isalnum() else \
            b"B" if body[at] == ord("A") else b"A"
        altered = b"MUNGE:" + body[:at] + flipped + body[at + 1:] + b":"
        assert altered != line
        with pytest.raises(Refused, match="credential refused"):
            open_request(munge, altered)
    # a valid credential made for something else (munge -n, another protocol) is no request
    with pytest.raises(Refused, match="not made for a scratchkeeper request"):
        open_request(munge, munge.encode(b'{"op":"list"}').encode())


def test_a_credential_of_another_key_is_refused(munge_site):
    root = Path(tempfile.mkdtemp(prefix="sk-munge-other-"))  # the munge user must reach it
    other = start_munged(root)
    try:
        line = seal_request(Munge(other.socket), {"op": "list"})
    finally:
        other.stop()
        shutil.rmtree(root, ignore_errors=True)
    with pytest.raises(Refused, match="credential refused"):
        open_request(Munge(munge_site.socket), line.rstrip(b"\n"))


def test_a_request_without_a_credential_or_with_garbage_is_refused(munge_site):
    munge = Munge(munge_site.socket)
    for line in (b'{"op":"list"}', b"MUNGE:AAAA:", b"MUNGE:\xff:", b"[1]", b"\xff", b""):
        with pytest.raises(Refused):
            open_request(munge, line)


def test_an_expired_request_is_refused(munge_site):
    munge = Munge(munge_site.socket)
    line = seal_request(Munge(munge_site.socket, ttl=1), {"op": "list"})
    # the credential's age is what is tested: it must pass its one-second time-to-live
    time.sleep(2.2)
    with pytest.raises(Refused, match="[Ee]xpired"):
        open_request(munge, line.rstrip(b"\n"))


def test_a_reply_is_believed_only_from_the_service_and_for_its_own_request(munge_site):
    munge = Munge(munge_site.socket)
    reply = seal_reply(munge, "request-one", {"ok": True, "n": 1}).rstrip(b"\n")
    assert open_reply(munge, "request-one", reply) == {"ok": True, "n": 1}
    again = seal_reply(munge, "request-two", {"ok": True, "n": 2}).rstrip(b"\n")
    with pytest.raises(Refused, match="another request"):
        open_reply(munge, "request-one", again)
    # a reply a user's process sealed (a user listening on the head's port) is not the head's
    forged = sealed_as(NOBODY, munge_site.socket, {"ok": True})
    with pytest.raises(Refused, match="uid 65534"):
        open_reply(munge, "request-one", forged)
    # an unsealed line is believed only as a refusal, whatever it says
    assert open_reply(munge, "request-one", b'{"ok": true, "state": "whole"}')["ok"] is False


def test_munge_errors_say_which(munge_site, tmp_path):
    with pytest.raises(MungeUnavailable):
        Munge(str(tmp_path / "no-such.socket")).encode(b"x")
    munge = Munge(munge_site.socket)
    cred = munge.encode(b"payload")
    assert munge.decode(cred).payload == b"payload"
    with pytest.raises(MungeError) as caught:
        munge.decode(cred)
    assert caught.value.code == EMUNGE_CRED_REPLAYED


class EchoService:
    """A TCP service that opens each request, answers through a ReplayCache and counts the
    handler's runs; ``drop_first`` closes the first connection after serving it unanswered,
    as a partition after the work would."""

    def __init__(self, munge: Munge, drop_first: bool = False):
        self.munge = munge
        self.cache = ReplayCache()
        self.runs = 0
        self.drop_first = drop_first
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                sealed = open_request(self.munge, receive_line(conn, 5))

                def handle(sealed=sealed):
                    self.runs += 1
                    return {"ok": True, "uid": sealed.caller.uid, "runs": self.runs}

                reply = self.cache.serve(sealed.caller.uid, sealed.request_id, handle)
                if self.drop_first:
                    self.drop_first = False
                    continue
                conn.sendall(seal_reply(self.munge, sealed.request_id, reply))

    def close(self) -> None:
        self.listener.close()


def test_a_retry_after_a_lost_answer_is_answered_without_doing_the_work_again(munge_site):
    munge = Munge(munge_site.socket)
    service = EchoService(munge, drop_first=True)
    try:
        reply = Caller("127.0.0.1", service.port, munge, connect_timeout=2).call({"op": "commit"},
                                                                       deadline=20)
    finally:
        service.close()
    assert reply == {"ok": True, "uid": 0, "runs": 1}
    assert service.runs == 1


def test_an_unreachable_head_is_one_line_within_the_deadline(munge_site):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(Unreachable, match=f"127.0.0.1:{port} did not answer within 2s"):
        Caller("127.0.0.1", port, Munge(munge_site.socket), connect_timeout=1).call(
            {"op": "list"}, deadline=2)
    assert time.monotonic() - start < 10


def test_a_head_whose_service_is_stopped_is_given_up_after_refused_wait(munge_site):
    """Refused connections (the host up, nothing listening) end the tries after refused_wait,
    not after the whole deadline, which is for a head that does not answer at all."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    start = time.monotonic()
    # the seconds said are those spent (1 on a quiet machine, more on a busy one)
    with pytest.raises(Unreachable, match=f"127.0.0.1:{port} did not answer within [0-9]+s: "
                                          "Connection refused"):
        Caller("127.0.0.1", port, Munge(munge_site.socket), connect_timeout=1).call(
            {"op": "list"}, deadline=120, refused_wait=1)
    assert time.monotonic() - start < 30


def test_the_replay_cache_is_bounded_per_uid():
    now = [0.0]
    cache = ReplayCache(per_uid=3, ttl=10, clock=lambda: now[0])
    runs = []
    for i in range(5):
        cache.serve(1000, f"request-{i:04d}", lambda i=i: runs.append(i) or {"ok": True, "i": i})
    cache.serve(2000, "request-0000", lambda: runs.append("other") or {"ok": True})
    assert cache.serve(1000, "request-0004", lambda: {"ok": False}) == {"ok": True, "i": 4}
    # the oldest of uid 1000 left; uid 2000's entry did not push any of them out
    assert cache.serve(1000, "request-0000", lambda: {"ok": True, "again": 0}) == \
        {"ok": True, "again": 0}
    now[0] = 11.0
    assert cache.serve(2000, "request-0000", lambda: {"ok": True, "late": 1}) == \
        {"ok": True, "late": 1}
