"""recoveryd's door for other hosts: TCP, each request sealed with a MUNGE credential.

Login, data-transfer and compute nodes cannot reach the head's Unix socket; they send the same
requests over TCP (``head.listen``), sealed by :mod:`scratchkeeper.wire`. The caller's uid and
gid come from the decoded credential, exactly where the Unix socket takes ``SO_PEERCRED``, and
the request then goes through the same admission (connections per uid, handler threads) and
the same answer as a local one, so every rule of docs/security.rst holds across hosts.

What a peer that is not yet authenticated can hold: nothing but a slot in one selector. One
thread reads every pending connection's first line as it arrives, never waiting on one; a
connection that has not sent a whole line within ``request_timeout`` is dropped, and at most
``PENDING_PER_ADDRESS`` connections of one address (``PENDING`` in all) may be pending, so no
host's users hold the head's handler threads without a credential.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import InputError
from ..munge import Munge, MungeUnavailable
from ..ownership import Owner
from ..wire import (
    MAX_LINE,
    Refused,
    ReplayCache,
    Sealed,
    open_request,
    refusal_line,
    seal_reply,
)
from . import trust

log = logging.getLogger(__name__)

PENDING = 256
PENDING_PER_ADDRESS = 64


@dataclass
class _Pending:
    conn: socket.socket
    address: str
    since: float
    received: bytearray = field(default_factory=bytearray)


class RemoteDoor:
    """Accepts other hosts' sealed requests and hands each, opened, to ``answer``.

    ``take_slot(owner)`` admits a caller (None) or says why not; ``release(owner)`` frees it;
    ``answer(message, caller)`` is the service's reply (never raises); ``submit(fn, *args)``
    runs ``fn`` on the service's handler threads.
    """

    def __init__(self, host: str, port: int, munge: Munge, *, stop: threading.Event,
                 take_slot: Callable[[Owner], str | None], release: Callable[[Owner], None],
                 answer: Callable[[dict[str, Any], Owner], dict[str, Any]],
                 submit: Callable[..., Any], request_timeout: float = 10.0):
        self.munge = munge
        self.stop = stop
        self.take_slot = take_slot
        self.release = release
        self.answer = answer
        self.submit = submit
        self.request_timeout = request_timeout
        self.replies = ReplayCache()
        self._refusals = trust.RateLimitedLog(interval=0.0, budget=30)
        try:
            self.listener = socket.create_server((host, port), backlog=128)
        except OSError as err:
            raise InputError(f"head.listen {host}:{port}: cannot listen: {err.strerror}") \
                from None
        self.listener.setblocking(False)
        self.address = self.listener.getsockname()[:2]
        self._pending: dict[int, _Pending] = {}
        self._per_address: dict[str, int] = {}

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.close()
        for pending in self._pending.values():
            pending.conn.close()
        self._pending.clear()

    # -- one thread: accept and read first lines ---------------------------------------------
    def run(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self.listener, selectors.EVENT_READ)
        try:
            while not self.stop.is_set():
                for key, _ in selector.select(timeout=0.5):
                    if key.fileobj is self.listener:
                        self._accept(selector)
                    else:
                        self._read(selector, key.fd)
                self._expire(selector)
        finally:
            selector.close()
            self.close()

    def _accept(self, selector: selectors.BaseSelector) -> None:
        try:
            conn, peer = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as err:
            log.error("head.listen: accept: %s", err)
            return
        address = str(peer[0])
        if len(self._pending) >= PENDING or self._per_address.get(address, 0) >= PENDING_PER_ADDRESS:
            self._note(address, "too many connections waiting to send a request")
            conn.close()
            return
        conn.setblocking(False)
        self._pending[conn.fileno()] = _Pending(conn, address, time.monotonic())
        self._per_address[address] = self._per_address.get(address, 0) + 1
        selector.register(conn, selectors.EVENT_READ)

    def _forget(self, selector: selectors.BaseSelector, fd: int) -> _Pending:
        pending = self._pending.pop(fd)
        selector.unregister(pending.conn)
        left = self._per_address[pending.address] - 1
        if left:
            self._per_address[pending.address] = left
        else:
            del self._per_address[pending.address]
        return pending

    def _read(self, selector: selectors.BaseSelector, fd: int) -> None:
        pending = self._pending[fd]
        try:
            chunk = pending.conn.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._forget(selector, fd).conn.close()
            return
        pending.received += chunk
        end = pending.received.find(b"\n")
        if end == -1:
            if len(pending.received) > MAX_LINE:
                self._note(pending.address, "request longer than the limit")
                self._forget(selector, fd).conn.close()
            return
        self._forget(selector, fd)
        line = bytes(pending.received[:end])
        try:
            self.submit(self._serve, pending.conn, pending.address, line)
        except RuntimeError:  # shutting down
            pending.conn.close()

    def _expire(self, selector: selectors.BaseSelector) -> None:
        cutoff = time.monotonic() - self.request_timeout
        for fd in [fd for fd, p in self._pending.items() if p.since < cutoff]:
            pending = self._forget(selector, fd)
            self._note(pending.address, f"no whole request within {self.request_timeout:g}s")
            pending.conn.close()

    # -- a handler thread: open, admit, answer, seal -----------------------------------------
    def _serve(self, conn: socket.socket, address: str, line: bytes) -> None:
        with conn:
            conn.setblocking(True)
            conn.settimeout(30.0)
            reply, request_id = self._reply_to(address, line)
            try:
                out = (refusal_line(reply) if request_id is None
                       else seal_reply(self.munge, request_id, reply))
            except MungeUnavailable as err:
                log.error("head.listen: cannot seal a reply: %s", err)
                return
            with contextlib.suppress(OSError):
                conn.sendall(out)

    def _reply_to(self, address: str, line: bytes) -> tuple[dict[str, Any], str | None]:
        """The reply, and the request id to seal it for (None: send it unsealed)."""
        try:
            request: Sealed = open_request(self.munge, line)
        except (Refused, InputError) as err:
            self._note(address, str(err))
            return {"ok": False, "error": str(err), "kind": "PermissionDenied"}, None
        except MungeUnavailable as err:
            log.error("head.listen: %s", err)
            return {"ok": False, "error": "the head cannot check credentials now",
                    "kind": "ServiceBusy"}, None
        caller = request.caller
        reason = self.take_slot(caller)
        if reason is not None:
            return {"ok": False, "error": reason, "kind": "ServiceBusy"}, request.request_id
        timeout = request.message.get("timeout")
        wait = float(timeout) + 30.0 if isinstance(timeout, (int, float)) and \
            not isinstance(timeout, bool) and 0 <= timeout <= 86400 else 60.0
        try:
            reply = self.replies.serve(caller.uid, request.request_id,
                                       lambda: self.answer(request.message, caller), wait=wait)
        finally:
            self.release(caller)
        return reply, request.request_id

    def _note(self, address: str, reason: str) -> None:
        # a peer sends as many bad requests as it likes: 30 lines a minute, the rest counted
        self._refusals.note(f"{address}", f"head.listen: refused {address}: {reason[:400]}")
