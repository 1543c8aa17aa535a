"""Servers of the name tests, each started by the test on 127.0.0.1 and stopped after it.

* :class:`HttpServer`: GET (with one ``Range``), HEAD and PUT on a folder, in a thread; a GET
  under ``/echo/`` answers ``echo:<the path asked>`` whatever the path (so a client that asks
  for another path than the one named is seen, and still gets a file to write somewhere); a
  path in ``forbidden`` answers 403, one in ``gone`` 410, one in ``redirects`` 302 with that
  ``Location`` (and a short body, as servers send).
* :class:`Listener`: a TCP port that counts the connections made to it and answers nothing
  (where a client must never go).
* :class:`GridFtpServer`: ``globus-gridftp-server`` serving one folder read-write, anonymous
  sessions as ``nobody``, in its own session (killed with its forked children).
"""

from __future__ import annotations

import posixpath
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

from gridftp_server import PrivateGridFtp


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class HttpServer:
    """A folder over HTTP on a free loopback port; ``requests`` lists (method, raw path)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.requests: list[tuple[str, str]] = []
        self.forbidden: set[str] = set()  # raw paths answered 403 Forbidden
        self.gone: set[str] = set()       # raw paths answered 410 Gone
        self.redirects: dict[str, str] = {}  # raw path -> Location, answered 302 Found
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _file(self) -> Path | None:
                """The served file a path names, None if it would leave the folder."""
                path = posixpath.normpath(unquote(urlsplit(self.path).path))
                if not path.startswith("/") or path.startswith("//"):
                    return None
                return server.folder / path.lstrip("/") if path != "/" else None

            def _body(self) -> bytes | None:
                server.requests.append((self.command, self.path))
                if self.path.startswith("/echo/"):
                    return b"echo:" + self.path.encode()
                target = self._file()
                if target is None or not target.is_file():
                    return None
                return target.read_bytes()

            def _answer(self, head_only: bool) -> None:
                if self.path in server.redirects:
                    server.requests.append((self.command, self.path))
                    moved = b"moved\n"
                    self.send_response(302)
                    self.send_header("Location", server.redirects[self.path])
                    self.send_header("Content-Length", str(len(moved)))
                    self.end_headers()
                    if not head_only:
                        self.wfile.write(moved)
                    return
                for paths, status in ((server.forbidden, 403), (server.gone, 410)):
                    if self.path in paths:
                        server.requests.append((self.command, self.path))
                        self.send_error(status)
                        return
                body = self._body()
                if body is None:
                    self.send_error(404)
                    return
                status, start, end = 200, 0, len(body)
                wanted = self.headers.get("Range", "")
                if wanted.startswith("bytes="):
                    first, _, last = wanted[6:].partition("-")
                    start, end = int(first), min(int(last) + 1, len(body))
                    status = 206
                self.send_response(status)
                self.send_header("Content-Length", str(end - start))
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(body)}")
                self.end_headers()
                if not head_only:
                    self.wfile.write(body[start:end])

            def do_GET(self):
                self._answer(False)

            def do_HEAD(self):
                self._answer(True)

            def do_PUT(self):
                server.requests.append((self.command, self.path))
                data = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                target = self._file()
                if target is None:
                    self.send_error(403)
                    return
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
                self.send_response(201)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        # a short poll: stop() waits for it (the default half second, twice per test)
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,),
                                       daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)


class Listener:
    """A TCP port on loopback that counts the connections made to it and hangs up at once."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.sock = socket.create_server((host, port))
        self.sock.settimeout(0.2)
        self.host = host
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def url(self, path: str = "/") -> str:
        return f"http://{self.host}:{self.port}{path}"

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)
        self.sock.close()


def GridFtpServer(folder: Path, workdir: Path) -> PrivateGridFtp:
    """``globus-gridftp-server`` on a free loopback port; ``folder`` readable and writable."""
    return PrivateGridFtp(folder, workdir, writable=True)
