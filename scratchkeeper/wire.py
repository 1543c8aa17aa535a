"""Requests between hosts: one line each way over TCP, each a MUNGE credential.

A process on a login, data-transfer or compute node reaches the head node's service
(``docs/topology.rst``) as Slurm's commands reach slurmctld: its host's ``munged`` makes a
credential for the calling process that carries the request as its payload, and the head takes
the caller's uid and gid from the decoded credential, never from the request's words. munge's
MAC covers the payload, the credential expires with munge's TTL and the head's ``munged``
refuses one it decoded before, so a request cannot be forged, changed, kept for later or sent
twice. The reply is a credential the service (root) made, whose payload names the request's
``request_id``, so a client believes only its head's answer to its own question. A refusal that
comes before anything could be sealed (a credential munged rejects) is answered as a plain
line, which a client believes only as a failure.

Every request carries a ``request_id`` the client draws once and keeps across its retries; the
service answers a repeated id with the first answer (:class:`ReplayCache`), so a retry after a
timeout or a partition does no harm: each request is idempotent.

Wire format, one line each way (no other framing; munge's credentials are ASCII)::

    MUNGE:...:        payload "scratchkeeper/1 request\n" + the request as JSON
    MUNGE:...:        payload "scratchkeeper/1 reply\n" + request_id + "\n" + the reply as JSON
    {"ok": false, "error": "...", "kind": "..."}     a refusal the service could not seal
"""

from __future__ import annotations

import json
import random
import secrets
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import InputError, PermissionDenied, ScratchkeeperError
from .munge import Munge, MungeError
from .ownership import Owner

#: the largest request or reply: munged takes messages of up to 1 MiB, payload and header
MAX_BODY = 960 << 10
#: the longest line either side reads: a credential is the payload in base64, and more
MAX_LINE = MAX_BODY * 3 // 2 + 4096

REQUEST = b"scratchkeeper/1 request\n"
REPLY = b"scratchkeeper/1 reply\n"

#: the uid whose sealed replies a client believes: the head's services run as root
SERVICE_UID = 0

#: a request or a reply, as JSON objects are read
Message = dict[str, Any]


class Unreachable(ScratchkeeperError):
    """The head node's service did not answer: refused, reset, or silent past the deadline."""

    exit_code = 3


class Refused(PermissionDenied):
    """A request whose seal does not hold: not a credential, one munged refused (another key,
    expired, replayed, rewound, altered), or one made for another purpose."""


def decode_message(line: bytes, *, limit: int = MAX_BODY) -> Message:
    """One message line as a dict; anything else (not UTF-8, not JSON, NaN, a number of 5000
    digits, nesting deeper than the parser goes, not an object) is an :class:`InputError`."""
    if len(line) > limit:
        size = f"{limit >> 20} MiB" if limit % (1 << 20) == 0 else f"{limit >> 10} KiB"
        raise InputError(f"request longer than {size}")
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"request is not UTF-8 (byte {err.start} is {line[err.start]:#04x})") \
            from None
    try:
        message = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as err:
        raise InputError(f"request is not JSON: {err}") from None
    except (ValueError, RecursionError) as err:
        raise InputError(f"request is not usable JSON: {str(err)[:200]}") from None
    if not isinstance(message, dict):
        raise InputError("request must be a JSON object")
    return message


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a request may carry")


def encode(message: Message) -> bytes:
    return (json.dumps(message, separators=(",", ":")) + "\n").encode()


@dataclass(frozen=True)
class Sealed:
    """A request as the service opened it: who sent it (from the credential) and what it asks."""

    caller: Owner
    message: Message

    @property
    def request_id(self) -> str:
        value = self.message.get("request_id")
        return value if isinstance(value, str) and len(value) <= 64 else ""


def seal_request(munge: Munge, message: Message) -> bytes:
    """The line to send for ``message`` (which should hold its ``request_id``)."""
    body = json.dumps(message, separators=(",", ":")).encode()
    if len(body) > MAX_BODY:
        raise InputError(f"request longer than {MAX_BODY >> 10} KiB")
    return munge.encode(REQUEST + body).encode() + b"\n"


def _credential(line: bytes) -> str:
    if len(line) > MAX_LINE or not line.startswith(b"MUNGE:"):
        raise Refused("a request from another host must be a MUNGE credential")
    try:
        return line.decode("ascii")
    except UnicodeDecodeError:
        raise Refused("a request from another host must be a MUNGE credential") from None


def open_request(munge: Munge, line: bytes) -> Sealed:
    """The caller and the request of a sealed line; :class:`Refused` if the seal does not hold.

    The caller's supplementary groups are this host's for the credential's uid, as slurmctld
    takes them: a credential names only a uid and a gid.
    """
    try:
        decoded = munge.decode(_credential(line))
    except MungeError as err:
        reason = str(err).removeprefix("munge: cannot decode the credential: ")
        raise Refused(f"credential refused: {reason}") from None
    if not decoded.payload.startswith(REQUEST):
        raise Refused("credential refused: it was not made for a scratchkeeper request")
    return Sealed(Owner.of(decoded.uid, decoded.gid),
                  decode_message(decoded.payload[len(REQUEST):]))


def seal_reply(munge: Munge, request_id: str, reply: Message) -> bytes:
    body = json.dumps(reply, separators=(",", ":")).encode()
    if len(body) > MAX_BODY:
        body = json.dumps({"ok": False, "error": "the answer is longer than a reply may be",
                           "kind": "RecoveryError"}).encode()
    return munge.encode(REPLY + request_id.encode() + b"\n" + body).encode() + b"\n"


def refusal_line(reply: Message) -> bytes:
    """A refusal sent unsealed, when the request's credential could not be opened."""
    return encode({"ok": False, "error": str(reply.get("error", "refused"))[:1000],
                   "kind": str(reply.get("kind", "PermissionDenied"))[:64]})


def open_reply(munge: Munge, request_id: str, line: bytes, *,
               service_uid: int = SERVICE_UID) -> Message:
    """The reply to the request ``request_id``, if the head's service sealed it; an unsealed
    line is believed only as a refusal."""
    if line.startswith(b"{"):
        refusal = decode_message(line)
        return {"ok": False, "kind": "PermissionDenied",
                "error": f"the head refused the request: {str(refusal.get('error'))[:1000]}"}
    try:
        decoded = munge.decode(_credential(line))
    except MungeError as err:
        raise Refused(f"the head's reply was refused: {err}") from None
    if decoded.uid != service_uid:
        raise Refused(f"the reply was sealed by uid {decoded.uid}, not the head's service")
    prefix = REPLY + request_id.encode() + b"\n"
    if not decoded.payload.startswith(prefix):
        raise Refused("the reply was sealed for another request")
    return decode_message(decoded.payload[len(prefix):])


def receive_line(conn: socket.socket, timeout: float, *, limit: int = MAX_LINE) -> bytes:
    """The first line the peer sends (without its newline), read within ``timeout`` seconds in
    all: a peer that sends half a line, or a byte at a time, is cut off (:class:`TimeoutError`)."""
    deadline = time.monotonic() + timeout
    received = bytearray()
    while True:
        end = received.find(b"\n")
        if end != -1:
            return bytes(received[:end])
        if len(received) > limit:
            raise InputError("request longer than the limit")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no whole line within {timeout:g}s ({len(received)} bytes)")
        conn.settimeout(remaining)
        try:
            chunk = conn.recv(65536)
        except TimeoutError:
            continue
        if not chunk:
            raise EOFError("connection closed")
        received += chunk


def new_request_id() -> str:
    return secrets.token_hex(16)


class Caller:
    """The client side: sends one sealed request to ``HOST:PORT`` and returns the opened reply.

    A connection refused, reset or silent is tried again with backoff and jitter, with a new
    credential and the same ``request_id``, until ``deadline`` seconds have passed; then
    :class:`Unreachable` says so in one line.
    """

    def __init__(self, host: str, port: int, munge: Munge, *, connect_timeout: float = 5.0):
        self.host, self.port = host, port
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.munge = munge
        self.connect_timeout = connect_timeout

    def call(self, message: Message, *, timeout: float | None = None, deadline: float = 30.0,
             retry_if: Callable[[Message], bool] | None = None,
             refused_wait: float | None = None) -> Message:
        """The reply to ``message``; ``timeout`` bounds the service's work on one try,
        ``deadline`` all tries; ``retry_if(reply)`` asks for another try (a busy answer).
        Connections refused for ``refused_wait`` seconds in a row (the head is up, its service
        is not: stopped, or restarting for longer than that) end the tries early."""
        message = {**message, "request_id": message.get("request_id") or new_request_id()}
        started = time.monotonic()
        end = started + deadline
        delay, last = 0.1, "no try made"
        refused_since: float | None = None
        while True:
            try:
                reply = self._once(message, timeout)
                if retry_if is None or not retry_if(reply):
                    return reply
                last, refused_since = str(reply.get("error", "busy")), None
            except (ConnectionError, TimeoutError, EOFError, OSError) as err:
                last = _reason(err)
                refused = isinstance(err, ConnectionRefusedError)
                refused_since = (refused_since or time.monotonic()) if refused else None
            now = time.monotonic()
            remaining = end - now
            if remaining <= 0 or refused_since is not None and refused_wait is not None and \
                    now - refused_since >= refused_wait:
                raise Unreachable(f"head service {self.address} did not answer within "
                                  f"{min(deadline, now - started):.0f}s: {last}")
            time.sleep(min(remaining, delay * random.uniform(0.5, 1.0)))
            delay = min(delay * 2, 2.0)

    def _once(self, message: Message, timeout: float | None) -> Message:
        line = seal_request(self.munge, message)
        with socket.create_connection((self.host, self.port), timeout=self.connect_timeout) as conn:
            conn.sendall(line)
            reply = receive_line(conn, (timeout or 0.0) + self.connect_timeout + 5.0)
        return open_reply(self.munge, message["request_id"], reply)


def _reason(err: BaseException) -> str:
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    return str(err) or type(err).__name__


class ReplayCache:
    """The service's memory of answered request ids, so a retried request gets the first answer
    instead of being done again. Bounded per uid (``per_uid`` ids, each kept ``ttl`` seconds):
    a user's ids cannot push out another user's. A retry that arrives while the first try is
    still being served waits for that answer."""

    def __init__(self, *, per_uid: int = 256, ttl: float = 600.0,
                 clock: Callable[[], float] = time.monotonic):
        self.per_uid = per_uid
        self.ttl = ttl
        self.clock = clock
        self._lock = threading.Lock()
        self._done: dict[int, OrderedDict[str, tuple[float, Message]]] = {}
        self._running: dict[tuple[int, str], threading.Event] = {}

    def serve(self, uid: int, request_id: object, handler: Callable[[], Message],
              *, wait: float = 60.0) -> Message:
        """``handler()``'s reply, or the reply already given to ``(uid, request_id)``."""
        if not isinstance(request_id, str) or not 8 <= len(request_id) <= 64:
            return handler()
        key = (uid, request_id)
        while True:
            with self._lock:
                done = self._done.get(uid)
                if done is not None and request_id in done:
                    stamp, reply = done[request_id]
                    if self.clock() - stamp <= self.ttl:
                        return reply
                    del done[request_id]
                running = self._running.get(key)
                if running is None:
                    self._running[key] = threading.Event()
                    break
            if not running.wait(wait):
                return {"ok": False, "error": "the same request is still being served",
                        "kind": "ServiceBusy"}
        answer: Message | None = None
        try:
            answer = handler()
            return answer
        finally:
            with self._lock:
                if answer is not None and answer.get("kind") != "ServiceBusy":
                    self._remember(uid, request_id, answer)
                self._running.pop(key).set()

    def _remember(self, uid: int, request_id: str, reply: Message) -> None:
        now = self.clock()
        done = self._done.setdefault(uid, OrderedDict())
        done[request_id] = (now, reply)
        while done and (len(done) > self.per_uid or now - next(iter(done.values()))[0] > self.ttl):
            done.popitem(last=False)
