"""The chain service's size query follows no redirect the allow-list has not checked
(issue 39, item 2): before holding back a user's ``-start jit`` stage-in it asks the source's
server for the file's size (HTTP ``HEAD``) from the head node, as root, with no OST failure
needed. Real servers on loopback: ``A`` (allowed) answers ``302``; the target is a port the list
does not name (a listener that must see no connection) or a second allowed server ``C``."""

from __future__ import annotations

import os

import pytest

from scratchkeeper.config import RecoveryConfig, SiteConfig, TransferConfig
from scratchkeeper.planner import predict as predict_module, records
from scratchkeeper.planner.predict import predict, size_redirects
from scratchkeeper.planner.sources import SourceAllowList
from scratchkeeper.state import StateStore
from scratchkeeper.transfer.redirects import follow_any
from transfer.loopback import HttpServer, Listener

SIZE = 12_345


@pytest.fixture
def servers(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "c" / "d").mkdir(parents=True)
    (tmp_path / "c" / "d" / "input.dat").write_bytes(b"x" * SIZE)
    a, c, listener = HttpServer(tmp_path / "a"), HttpServer(tmp_path / "c"), Listener()
    a.start()
    c.start()
    yield a, c, listener
    a.stop()
    c.stop()
    listener.stop()


@pytest.fixture
def store(tmp_path):
    return records.open_staging(StateStore(str(tmp_path / "state.db")))


CONFIG = SiteConfig(transfer=TransferConfig(timeout=10.0))


def _allowing(store, *servers: str) -> SourceAllowList:
    return SourceAllowList(RecoveryConfig(allowed_sources=list(servers)), store)


def test_a_size_query_is_not_redirected_to_a_port_the_list_does_not_name(servers, store):
    a, c, listener = servers
    a.redirects["/d/input.dat"] = listener.url("/d/input.dat")
    result = predict([(f"{a.url}/d/input.dat", False)], store, CONFIG,
                     allowed=_allowing(store, a.url, c.url))
    assert listener.connections == 0
    assert result.bytes is None and result.seconds is None
    assert (f"redirect not followed: {a.url} answered HTTP 302 with Location "
            f"{listener.url('/d/input.dat')}: http://127.0.0.1:{listener.port} is not in "
            "recovery.allowed_sources") in result.reason, result.reason
    assert a.requests == [("HEAD", "/d/input.dat")]


def test_a_size_query_follows_a_redirect_to_an_allowed_server(servers, store):
    a, c, listener = servers
    a.redirects["/d/input.dat"] = f"{c.url}/d/input.dat"
    result = predict([(f"{a.url}/d/input.dat", False)], store, CONFIG,
                     allowed=_allowing(store, a.url, c.url))
    assert result.sources[0].bytes == SIZE, result.reason
    assert c.requests == [("HEAD", "/d/input.dat")] and listener.connections == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="root's own size query")
def test_root_asking_unchecked_follows_no_redirect(servers, store):
    """Without an allow-list (root's own job, ``staging predict`` run as root) nothing checks
    a hop, so none is followed."""
    a, c, listener = servers
    a.redirects["/d/input.dat"] = f"{c.url}/d/input.dat"
    result = predict([(f"{a.url}/d/input.dat", False)], store, CONFIG)
    assert not c.requests and listener.connections == 0
    assert result.bytes is None and "this reader follows none" in result.reason


def test_a_plain_user_asking_as_themselves_follows_as_their_data_job_would(monkeypatch):
    monkeypatch.setattr(predict_module.os, "geteuid", lambda: 1000)
    assert size_redirects(None) is follow_any
    allowed = SourceAllowList(RecoveryConfig(allowed_sources=["http://dtn.example.org"]), None)
    assert size_redirects(allowed) == allowed.why_endpoint_refused
    monkeypatch.setattr(predict_module.os, "geteuid", lambda: 0)
    assert size_redirects(None) is None
