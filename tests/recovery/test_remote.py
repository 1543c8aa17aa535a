"""recoveryd's door for other hosts (recovery/remote.py, head.listen): a request sealed with a
MUNGE credential is answered as the credential's uid, exactly as the Unix socket answers that
uid's peer; forged, replayed and unsealed requests are refused (a private site and munged)."""

from __future__ import annotations

import os
import socket

import pytest

from scratchkeeper.config import load_config
from scratchkeeper.errors import PermissionDenied
from scratchkeeper.munge import Munge
from scratchkeeper.recovery.client import RecoveryClient, ServiceUnavailable
from scratchkeeper.recovery.service import RecoveryService
from scratchkeeper.wire import new_request_id, open_reply, receive_line, seal_request

from .conftest import NOBODY, NoQueue, run_as, write_site


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def remote(site_dir, munge_site):
    if os.geteuid() != 0:
        pytest.skip("needs root to connect as other users")
    port = _free_port()
    head = (f'[head]\nlisten = "127.0.0.1:{port}"\naddress = "127.0.0.1:{port}"\n'
            f'munge_socket = "{munge_site.socket}"\ntimeout = 5\n')
    site = write_site(site_dir, ost_count=8, extra=head)
    running = RecoveryService(site.config, scheduler=NoQueue())
    running.start()
    yield site, running, port
    running.shutdown()


def test_a_remote_request_is_answered_as_the_credentials_uid(remote):
    site, _, _ = remote
    path = f"{site.root}/scratch/someone/x"

    def ask():
        client = RecoveryClient.for_site(load_config(site.config_path))
        assert client.head is not None  # over TCP, not the Unix socket
        return client.call({"op": "status", "path": path, "uid": 0})

    answer = run_as(NOBODY, ask)
    assert answer["ok"] is False and answer["kind"] == "PermissionDenied"
    assert f"no file of uid {NOBODY} there" in answer["error"]
    # root's credential may ask about any path under the scratch root: another answer
    client = RecoveryClient.for_site(site.config)
    assert "requests" in client.call({"op": "list"})
    with pytest.raises(Exception) as caught:
        client.call({"op": "status", "path": path})
    assert "uid 0 may ask" not in str(caught.value)


def test_a_user_lists_only_their_own_requests_over_tcp_as_on_the_socket(remote):
    site, _, _ = remote
    local = run_as(NOBODY, lambda: RecoveryClient(site.config.recovery.socket).call(
        {"op": "list"})["requests"])
    tcp = run_as(NOBODY, lambda: RecoveryClient.for_site(load_config(site.config_path)).call(
        {"op": "list"})["requests"])
    assert local == tcp == {"ok": True, "value": []}


def test_replayed_and_unsealed_requests_are_refused(remote, munge_site):
    _, _, port = remote
    munge = Munge(munge_site.socket)
    request_id = new_request_id()
    line = seal_request(munge, {"op": "list", "request_id": request_id})

    def send(raw: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            conn.sendall(raw)
            return receive_line(conn, 10)

    assert open_reply(munge, request_id, send(line))["ok"] is True
    replayed = open_reply(munge, request_id, send(line))
    assert replayed["ok"] is False and "Replayed" in replayed["error"]
    unsealed = open_reply(munge, request_id, send(b'{"op": "list", "uid": 0}\n'))
    assert unsealed["ok"] is False and "MUNGE credential" in unsealed["error"]


def test_a_stopped_head_is_one_line_within_the_timeout(site_dir, munge_site):
    port = _free_port()
    head = (f'[head]\naddress = "127.0.0.1:{port}"\nmunge_socket = "{munge_site.socket}"\n'
            'timeout = 2\n')
    site = write_site(site_dir, ost_count=8, extra=head)
    with pytest.raises(ServiceUnavailable, match=f"127.0.0.1:{port} did not answer within 2s"):
        RecoveryClient.for_site(site.config).call({"op": "list"})


def test_a_credential_of_another_uid_cannot_speak_for_root(remote):
    site, _, _ = remote

    def ask():
        return RecoveryClient.for_site(load_config(site.config_path)).call(
            {"op": "check-job", "job_id": "1", "timeout": 1})

    answer = run_as(NOBODY, ask)
    assert answer["ok"] is False and answer["kind"] == PermissionDenied.__name__
