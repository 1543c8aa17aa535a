"""No reader root runs follows a redirect nobody checked (issue 39, item 2).

Real servers on loopback: an HTTP server (``A``) whose paths answer ``302`` where the test says,
a second one (``C``) serving the files, and a :class:`Listener` that counts the connections made
to it: a port of this machine no one allowed, which must see none. The ranged reader is the one
recoveryd and the chain service's size query use (:func:`open_ranged`); the policy is the same
allow-list they pass (:class:`SourceAllowList`, ``recovery.allowed_sources``).
"""

from __future__ import annotations

import socket
import subprocess
import threading

import pytest

from scratchkeeper.config import RecoveryConfig, TransferConfig
from scratchkeeper.errors import TransferError
from scratchkeeper.planner.sources import SourceAllowList
from scratchkeeper.storage.layout import Extent
from scratchkeeper.transfer.clients import client_command
from scratchkeeper.transfer.gridftp import EretRangedReader
from scratchkeeper.transfer.ranged import open_ranged
from scratchkeeper.transfer.redirects import MAX_REDIRECTS, follow_any
from scratchkeeper.transfer.uri import parse_location

from .loopback import HttpServer, Listener

DATA = bytes(range(256)) * 40  # 10,240 bytes


@pytest.fixture
def servers(tmp_path):
    """(A, C, listener): A redirects, C serves ``/d/f.dat``, the listener is where none may go."""
    (tmp_path / "a").mkdir()
    (tmp_path / "c" / "d").mkdir(parents=True)
    (tmp_path / "c" / "d" / "f.dat").write_bytes(DATA)
    a, c, listener = HttpServer(tmp_path / "a"), HttpServer(tmp_path / "c"), Listener()
    a.start()
    c.start()
    yield a, c, listener
    a.stop()
    c.stop()
    listener.stop()


def _allowing(*servers: str):
    """The allow-list root's readers pass as their redirect policy."""
    return SourceAllowList(RecoveryConfig(allowed_sources=list(servers)), None) \
        .why_endpoint_refused


def _both(reader, listener: Listener | None = None) -> list[str]:
    """The errors of a size query and of a ranged read of ``reader`` (both must fail, and
    neither may reach ``listener``)."""
    errors = []
    for call in (reader.size, lambda: list(reader.fetch([Extent(0, 100), Extent(5000, 10)]))):
        with pytest.raises(Exception) as caught:
            call()
        assert listener is None or listener.connections == 0
        assert isinstance(caught.value, TransferError) and caught.value.permanent, caught.value
        errors.append(str(caught.value))
    return errors


@pytest.mark.parametrize("site_options", [[], ["--location"], ["-L"], ["--location-trusted"]])
def test_without_a_policy_a_redirect_is_an_error_naming_server_and_location(servers,
                                                                             site_options):
    """The site's own curl options (``-L`` among them) do not make curl follow one either."""
    a, _, listener = servers
    a.redirects["/d/f.dat"] = listener.url("/d/f.dat")
    reader = open_ranged(f"{a.url}/d/f.dat", TransferConfig(curl_options=site_options))
    for error in _both(reader, listener):
        assert f"redirect not followed: {a.url} answered HTTP 302 with Location " \
               f"{listener.url('/d/f.dat')}" in error
        assert "\n" not in error
    assert listener.connections == 0
    assert a.requests == [("HEAD", "/d/f.dat"), ("GET", "/d/f.dat"), ("GET", "/d/f.dat")]


def test_a_hop_the_allow_list_refuses_is_not_followed(servers):
    a, c, listener = servers
    a.redirects["/d/f.dat"] = listener.url("/d/f.dat")
    reader = open_ranged(f"{a.url}/d/f.dat", TransferConfig(),
                         redirects=_allowing(a.url, c.url))
    for error in _both(reader, listener):
        assert f"with Location {listener.url('/d/f.dat')}: http://127.0.0.1:{listener.port} " \
               "is not in recovery.allowed_sources" in error
    assert listener.connections == 0


def test_a_hop_to_an_allowed_server_is_followed(servers):
    a, c, listener = servers
    a.redirects["/d/f.dat"] = f"{c.url}/d/f.dat"
    # two hops: a relative Location on A (resolved by curl against A), then C
    a.redirects["/d/g.dat"] = "/d/f.dat"
    for path in ("/d/f.dat", "/d/g.dat"):
        reader = open_ranged(f"{a.url}{path}", TransferConfig(), redirects=_allowing(a.url, c.url))
        assert reader.size() == len(DATA)
        wanted = [Extent(0, 100), Extent(5000, 10), Extent(10_000, 240)]
        got = {piece.extent: bytes(piece.data) for piece in reader.fetch(wanted)}
        assert got == {e: DATA[e.offset:e.end] for e in wanted}
    assert listener.connections == 0
    assert ("GET", "/d/f.dat") in c.requests and ("HEAD", "/d/f.dat") in c.requests


def test_hops_are_bounded(servers):
    a, _, _ = servers
    a.redirects["/loop"] = "/loop"
    reader = open_ranged(f"{a.url}/loop", TransferConfig(), redirects=follow_any)
    errors = _both(reader)
    assert all(f"more than {MAX_REDIRECTS} redirects" in e for e in errors)
    # the first request and MAX_REDIRECTS hops, for each of HEAD and the batch of two ranges
    assert a.requests.count(("HEAD", "/loop")) == MAX_REDIRECTS + 1
    assert a.requests.count(("GET", "/loop")) == 2 * (MAX_REDIRECTS + 1)


@pytest.mark.parametrize("spelling", [
    "http://2130706433:{port}/x",           # decimal
    "http://0177.0.0.1:{port}/x",           # octal
    "http://0x7f.1:{port}/x",               # hexadecimal, short
    "http://[::ffff:127.0.0.1]:{port}/x",   # IPv4-mapped IPv6
    "http://localhost:{port}/x",
    "http://localhost.:{port}/x",           # trailing dot
    "http://{allowed}@127.0.0.1:{port}/x",  # userinfo that looks like the allowed server
    "http://127.0.0.1:{port}/x#@{allowed}/",
    "http://127.0.0.1:{port}\\@{allowed}/x",
    "https://127.0.0.1:{port}/x",
    "ftp://127.0.0.1:{port}/x",
])
def test_no_spelling_of_another_port_gets_past_the_check(servers, spelling):
    """The spellings the first URL is refused in are refused in a Location too."""
    a, _, listener = servers
    allowed = a.url.removeprefix("http://")
    a.redirects["/d/f.dat"] = spelling.format(port=listener.port, allowed=allowed)
    reader = open_ranged(f"{a.url}/d/f.dat", TransferConfig(), redirects=_allowing(a.url))
    for error in _both(reader, listener):
        assert "redirect not followed" in error
    assert listener.connections == 0


def test_data_jobs_follow_redirects_as_their_user(servers, tmp_path):
    """A data job runs as its user and keeps curl's ``--location``: a redirected source is
    staged as the user's own curl would fetch it."""
    a, c, _ = servers
    a.redirects["/d/f.dat"] = f"{c.url}/d/f.dat"
    target = tmp_path / "in" / "f.dat"
    command = client_command(parse_location(f"{a.url}/d/f.dat"), parse_location(str(target)),
                             recursive=False, config=TransferConfig())
    assert "--location" in command.argv and "--no-location" not in command.argv
    done = subprocess.run(command.argv, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert target.read_bytes() == DATA


# -- GridFTP has no redirect; its PASV answer names a data port -------------------------------
class PasvServer:
    """An FTP control port that answers ``PASV`` with a decoy address (127.0.0.2) and serves
    ``ERET`` on the control connection's own host, same port; the decoy counts connections."""

    def __init__(self, payload: bytes):
        self.payload = payload
        self.control = socket.create_server(("127.0.0.1", 0))
        self.port = self.control.getsockname()[1]
        self.data = socket.create_server(("127.0.0.1", 0))
        self.data_port = self.data.getsockname()[1]
        # the decoy: the address the PASV answer names, on the port data is served from
        self.decoy = Listener("127.0.0.2", self.data_port)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.control.settimeout(30)
        conn, _ = self.control.accept()
        with conn, conn.makefile("rb") as lines:
            conn.sendall(b"220 ready\r\n")
            for raw in lines:
                verb = raw.decode().split(" ")[0].strip().upper()
                if verb == "PASV":
                    high, low = divmod(self.data_port, 256)
                    conn.sendall(f"227 Entering Passive Mode (127,0,0,2,{high},{low})\r\n"
                                 .encode())
                elif verb == "ERET":
                    conn.sendall(b"150 sending\r\n")
                    self.data.settimeout(10)
                    try:
                        data_conn, _ = self.data.accept()
                    except OSError:
                        conn.sendall(b"425 no data connection\r\n")
                        continue
                    with data_conn:
                        data_conn.sendall(self.payload)
                    conn.sendall(b"226 done\r\n")
                elif verb == "QUIT":
                    conn.sendall(b"221 bye\r\n")
                    return
                else:
                    conn.sendall({"USER": b"331 password\r\n", "PASS": b"230 in\r\n"}
                                 .get(verb, b"200 ok\r\n"))

    def stop(self) -> None:
        self.thread.join(timeout=5)
        self.control.close()
        self.data.close()
        self.decoy.stop()


def test_ftp_ranges_connect_only_to_the_control_connections_host():
    """recoveryd's ERET reader takes the port of a PASV answer, never its address (ftplib's
    default), so a server cannot send it to another host."""
    server = PasvServer(b"0123456789")
    try:
        reader = EretRangedReader(parse_location(f"ftp://127.0.0.1:{server.port}/x/y"),
                                  timeout=10, many_ranges=False)
        with reader:
            got = [bytes(p.data) for p in reader.fetch([Extent(0, 10)], server_checksums=False)]
        assert got == [b"0123456789"]
        assert server.decoy.connections == 0
    finally:
        server.stop()


def test_the_listener_counts():
    """What the tests above rely on: a connection to a Listener is counted before the
    client sees it closed."""
    listener = Listener()
    try:
        done = subprocess.run(["curl", "--silent", "--max-time", "5", listener.url("/x")],
                              capture_output=True, timeout=30)
        assert done.returncode != 0
        assert listener.connections == 1
    finally:
        listener.stop()
