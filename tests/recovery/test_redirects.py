"""recoveryd follows no HTTP redirect the site's allow-list has not checked (issue 39, item 2).

A file staged from an allowed HTTP server (``A``, on loopback) loses a stripe; ``A`` answers
its ranged reads with ``302``. To another port of this machine, which the list does not name
(a :class:`Listener` that counts connections): no connection, and the file is reported
unrecoverable with a reason naming the server and the Location. To a second server the list
allows (``C``): patched from it. With the list empty, a hop goes only to an endpoint the site's
data jobs staged from, as the first URL does.
"""

from __future__ import annotations

import os

import pytest

from scratchkeeper.errors import RecoveryError
from scratchkeeper.planner import records as planner_records
from scratchkeeper.recovery import trust
from scratchkeeper.recovery.outcome import LOST, PATCHED
from scratchkeeper.recovery.reconstruct import Recoverer
from scratchkeeper.state import StateStore
from transfer.loopback import HttpServer, Listener

from .conftest import read_all, stage, write_site

KiB = 1 << 10


@pytest.fixture(autouse=True)
def fresh_log_limits(monkeypatch):
    monkeypatch.setattr(trust, "REFUSALS", trust.RateLimitedLog())


@pytest.fixture
def servers(site_dir):
    """(A, C, listener): A answers what the test says, C serves ``site_dir/c``."""
    for name in ("a", "c"):
        (site_dir / name / "d").mkdir(parents=True)
    a, c, listener = HttpServer(site_dir / "a"), HttpServer(site_dir / "c"), Listener()
    a.start()
    c.start()
    yield a, c, listener
    a.stop()
    c.stop()
    listener.stop()


def _site(site_dir, allowed: list[str]):
    listed = ", ".join(f'"{u}"' for u in allowed)
    return write_site(site_dir, ost_count=8, extra=f"[recovery]\nallowed_sources = [{listed}]")


def _damaged(site, servers, name: str, *, store=None):
    """A file staged from ``A/d/name`` (C holds the same bytes) with one OST failed."""
    a, c, _ = servers
    data = os.urandom(300_007)
    (c.folder / "d" / name).write_bytes(data)
    backend = site.backend
    path = stage(backend, name, data, f"{a.url}/d/{name}", stripe_count=2,
                 stripe_size=64 * KiB, digest_store=store)
    backend.fail_ost(backend.layout(path).ost_list[0])
    return backend, path, data


def _recover(recoverer, path) -> tuple[str, str]:
    try:
        outcome = recoverer.recover(path)
    except RecoveryError as err:
        return LOST, str(err)
    return outcome.state, outcome.reason


def test_a_redirect_to_a_port_the_list_does_not_name_is_not_followed(site_dir, servers):
    a, c, listener = servers
    site = _site(site_dir, [a.url, c.url])
    backend, path, _ = _damaged(site, servers, "in.dat")
    a.redirects["/d/in.dat"] = listener.url("/d/in.dat")
    state, reason = _recover(Recoverer(backend, site.config), path)
    assert listener.connections == 0
    assert state == LOST
    assert (f"redirect not followed: {a.url} answered HTTP 302 with Location "
            f"{listener.url('/d/in.dat')}: http://127.0.0.1:{listener.port} is not in "
            "recovery.allowed_sources") in reason, reason
    assert ("GET", "/d/in.dat") in a.requests and backend.open_rebuilds() == []


def test_a_redirect_to_another_allowed_server_is_followed(site_dir, servers):
    a, c, listener = servers
    site = _site(site_dir, [a.url, c.url])
    backend, path, data = _damaged(site, servers, "in.dat")
    a.redirects["/d/in.dat"] = f"{c.url}/d/in.dat"
    outcome = Recoverer(backend, site.config).recover(path)
    assert outcome.state == PATCHED, outcome
    assert read_all(backend, path) == data
    assert ("GET", "/d/in.dat") in c.requests and listener.connections == 0


def test_without_a_list_a_hop_goes_only_where_data_jobs_staged_from(site_dir, servers):
    a, c, _ = servers
    site = _site(site_dir, [])
    store = StateStore(site.config.state.database)
    planner_records.open_records(store)
    backend, path, data = _damaged(site, servers, "in.dat", store=store)
    a.redirects["/d/in.dat"] = f"{c.url}/d/in.dat"
    # stage() recorded A's endpoint (as stage commit does); no data job staged from C
    state, reason = _recover(Recoverer(backend, site.config, store=store), path)
    assert not c.requests
    assert state == LOST
    assert f"no data job of the site staged from {c.url}" in reason, reason
    planner_records.record_endpoints(store, [f"{c.url}/d/other.dat"])
    outcome = Recoverer(backend, site.config, store=store).recover(path)
    assert outcome.state == PATCHED, outcome
    assert read_all(backend, path) == data
