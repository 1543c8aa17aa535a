"""The recovery service's request protocol on its Unix socket, and the client side of it.

One JSON object per line each way, one request per connection. Requests::

    {"op": "report", "path": F, "ost_index": i}   file F lost OST i (reader, user)
    {"op": "status", "path": F}                   is F whole?
    {"op": "wait", "path": F, "timeout": s}       block until F is whole or lost
    {"op": "recover", "path": F, "wait": true}    recover F now; with wait, the outcome (plan)
    {"op": "check-job", "job_id": J, "timeout": s}  pre-execution hook (root only)
    {"op": "list"}                                recent requests (a user sees their own)
    {"op": "reads", "path": F, "reads": n, "bytes": b}   a reader's reads of F, for tiering
    {"op": "logs"}                                the counters of the read records written for
                                                  users (a user sees their own line)
    {"op": "stage-commit", "chain": C, "job": K[, "layout": L]}  a data job's `stage commit`, for its user
                                  (and "timings": [[LINE, SECONDS], ...], its transfers as it timed them)
    {"op": "stage-fail", "chain": C, "job": K, "line": n, "reason": r}   ... `stage fail`
    {"op": "chains"}, {"op": "chain-status", "ident": J|C}   `status` from another host
    {"op": "job-ended", "job_ids": [J]}, {"op": "file-closed", "path": F, "job": J}   replicad's
                                  events from other hosts' hooks (:mod:`.headops`)

Replies are ``{"ok": true, ...}`` or ``{"ok": false, "error": message, "kind": class}``, a
``ServiceBusy`` one with ``"retry_after": seconds`` when the service knows. The service
authorises each request by the peer's credentials (``SO_PEERCRED``): a user may ask only about
files they own (and report only on their own chains); root may ask about anything. What one
user may make the service spend is bounded (:mod:`.admission`): a client turned away as busy
backs off and tries again.
"""

from __future__ import annotations

import json
import random
import socket
import struct
import time
from collections.abc import Sequence

from .. import wire
from ..config import listen_address
from ..errors import InputError, PermissionDenied, RecoveryError, ScratchkeeperError, StorageError
from ..munge import Munge
from ..ownership import Owner
from ..wire import Caller, Refused, Unreachable

MAX_LINE = 1 << 20


class ServiceUnavailable(RecoveryError):
    """The recovery service's socket does not answer."""


class ServiceBusy(RecoveryError):
    """The service refused a request for now (this uid's connections, requests a minute or
    pending recoveries, or all its request threads, are taken); the client tries again with
    backoff, not before ``retry_after`` seconds when the service said."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


#: error classes a reply may name, so the client raises what the service raised
ERROR_KINDS = {cls.__name__: cls for cls in (InputError, PermissionDenied, ServiceBusy,
                                             RecoveryError, StorageError, ScratchkeeperError)}


def peer_credentials(conn: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a Unix socket."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", raw)


#: Linux's SO_PEERGROUPS (4.13+): the peer's supplementary groups when it connected
SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)


def peer_owner(conn: socket.socket) -> Owner:
    """The peer's uid, gid and supplementary groups (SO_PEERCRED, SO_PEERGROUPS); the groups
    the system gives the uid where the kernel cannot say (more than 256 of them)."""
    _, uid, gid = peer_credentials(conn)
    try:
        raw = conn.getsockopt(socket.SOL_SOCKET, SO_PEERGROUPS, 1024)
    except OSError:
        return Owner.of(uid, gid)
    groups = struct.unpack(f"{len(raw) // 4}I", raw[:len(raw) // 4 * 4])
    return Owner(uid, gid, tuple(sorted({gid, *groups})))


def read_message(stream) -> dict:
    """The next message of a file-like ``stream`` (the client reading its reply)."""
    line = stream.readline(MAX_LINE + 1)
    if not line:
        raise EOFError("connection closed")
    return decode_message(line)


def decode_message(line: bytes) -> dict:
    """One message line of the Unix socket as a dict (:func:`scratchkeeper.wire.decode_message`,
    at most 1 MiB)."""
    return wire.decode_message(line, limit=MAX_LINE)


def receive_request(conn: socket.socket, timeout: float) -> bytes:
    """The first line a client sends (without its newline), read within ``timeout`` seconds in
    all: a client that sends half a request, or a byte at a time, is cut off (RequestTimeout)."""
    deadline = time.monotonic() + timeout
    received = bytearray()
    while True:
        end = received.find(b"\n")
        if end != -1:
            return bytes(received[:end])
        if len(received) > MAX_LINE:
            raise InputError("request longer than 1 MiB")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RequestTimeout(f"request not complete within {timeout:g}s "
                                 f"({len(received)} bytes received)")
        conn.settimeout(remaining)
        try:
            chunk = conn.recv(65536)
        except TimeoutError:
            continue
        if not chunk:
            if received:
                raise RequestTimeout(f"connection closed in the middle of a request "
                                     f"({len(received)} bytes received)")
            raise EOFError("connection closed")
        received += chunk


class RequestTimeout(InputError):
    """A client did not send a whole request in time (or hung up in the middle of one)."""


def encode(message: dict) -> bytes:
    return (json.dumps(message, separators=(",", ":")) + "\n").encode()


class RecoveryClient:
    """Talks to ``scratchkeeper recoveryd``: over its Unix socket (``recovery.socket``) on the
    head, or, given ``head`` (a :class:`~scratchkeeper.wire.Caller`), over TCP with a MUNGE
    credential from another host (docs/topology.rst)."""

    def __init__(self, socket_path: str, *, connect_timeout: float = 10.0,
                 head: Caller | None = None, head_deadline: float = 60.0,
                 refused_wait: float | None = None):
        self.socket_path = socket_path
        self.connect_timeout = connect_timeout
        self.head = head
        self.head_deadline = head_deadline
        self.refused_wait = refused_wait

    @classmethod
    def for_site(cls, config, *, connect_timeout: float = 10.0) -> RecoveryClient:
        """The client a process of this site uses: the head's TCP door when ``head.address``
        is set (a login, data-transfer or compute node), the Unix socket otherwise."""
        address = listen_address(config.head.address)
        if address is None:
            return cls(config.recovery.socket, connect_timeout=connect_timeout)
        caller = Caller(*address, Munge(config.head.munge_socket or None),
                        connect_timeout=min(connect_timeout, 5.0))
        return cls(config.recovery.socket, connect_timeout=connect_timeout, head=caller,
                   head_deadline=config.head.timeout, refused_wait=config.head.refused_wait)

    def call(self, message: dict, *, timeout: float | None = None) -> dict:
        """Send one request, return the reply; an error reply is raised as its class.

        A connection the service turns away as busy (many processes of one job waiting for
        the same patch) is tried again with backoff and jitter for up to ``timeout`` (at
        least ``connect_timeout``) seconds.
        """
        deadline = time.monotonic() + max(self.connect_timeout, timeout or 0.0)
        delay = 0.05
        while True:
            try:
                return self._call_once(message, timeout)
            except ServiceBusy as busy:
                remaining = deadline - time.monotonic()
                told = busy.retry_after or 0.0
                if remaining <= 0 or told > remaining:
                    raise
                # jitter, so that the clients turned away together do not all come back at once
                pause = told * random.uniform(1.0, 1.5) if told else delay * random.uniform(0.5, 1)
                time.sleep(min(remaining, pause))
                delay = min(delay * 2, 2.0)

    def _call_once(self, message: dict, timeout: float | None) -> dict:
        if self.head is not None:
            try:
                reply = self.head.call(message, timeout=timeout, deadline=self.head_deadline,
                                       refused_wait=self.refused_wait)
            except Unreachable as err:
                raise ServiceUnavailable(str(err)) from None
            except Refused as err:
                raise PermissionDenied(str(err)) from None
            return _raised(reply)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.settimeout(self.connect_timeout)
            try:
                conn.connect(self.socket_path)
            except (FileNotFoundError, ConnectionRefusedError) as err:
                raise ServiceUnavailable(f"recovery service not running ({self.socket_path}: "
                                         f"{err.strerror})") from None
            conn.settimeout(None if timeout is None else timeout + self.connect_timeout)
            try:
                conn.sendall(encode(message))
            except (BrokenPipeError, ConnectionResetError):
                pass  # turned away before the request was read: its answer is waiting
            with conn.makefile("rb") as stream:
                try:
                    reply = read_message(stream)
                except EOFError:
                    raise ServiceUnavailable("the recovery service closed the connection "
                                             "without answering") from None
        except TimeoutError:
            raise RecoveryError(f"no answer from the recovery service within "
                                f"{timeout or self.connect_timeout:g}s") from None
        finally:
            conn.close()
        return _raised(reply)

    def report(self, path: str, ost_index: int | None = None, *,
               timeout: float | None = None) -> dict:
        """Tell recoveryd ``path`` lost ``ost_index``; with ``timeout``, no answer within it is
        a RecoveryError (a mount's read waits on this: never longer than its slice)."""
        return self.call({"op": "report", "path": path, "ost_index": ost_index}, timeout=timeout)

    def reads(self, path: str, reads: int, nbytes: int) -> dict:
        """Tell recoveryd this reader read ``path`` (tiering counts it). One try: a busy
        service drops the count (ServiceBusy) rather than make the reader wait."""
        return self._call_once({"op": "reads", "path": path, "reads": reads, "bytes": nbytes},
                               None)

    def logs(self) -> dict:
        """The counters of the read records recoveryd wrote for users (the caller's own line)."""
        return self.call({"op": "logs"})

    def status(self, path: str) -> dict:
        return self.call({"op": "status", "path": path})

    def wait(self, path: str, timeout: float) -> dict:
        return self.call({"op": "wait", "path": path, "timeout": timeout}, timeout=timeout)

    def recover(self, path: str, *, wait: bool = True, timeout: float = 3600.0,
                osts: list[int] | None = None) -> dict:
        return self.call({"op": "recover", "path": path, "wait": wait, "timeout": timeout,
                          "osts": osts or []}, timeout=timeout if wait else None)

    def check_job(self, job_id: str, timeout: float) -> dict:
        return self.call({"op": "check-job", "job_id": job_id, "timeout": timeout},
                         timeout=timeout)

    def list(self) -> dict:
        return self.call({"op": "list"})

    def stage_commit(self, chain_id: str, job_key: str, *, layout: str | None = None,
                     timings: dict[int, float] | None = None, timeout: float = 3600.0) -> dict:
        message: dict = {"op": "stage-commit", "chain": chain_id, "job": job_key}
        if layout is not None:
            message["layout"] = layout
        if timings:
            message["timings"] = [[line, seconds] for line, seconds in sorted(timings.items())]
        return self.call(message, timeout=timeout)

    def stage_fail(self, chain_id: str, job_key: str, line: int | None, reason: str) -> dict:
        return self.call({"op": "stage-fail", "chain": chain_id, "job": job_key, "line": line,
                          "reason": reason}, timeout=600.0)

    def chains(self) -> dict:
        return self.call({"op": "chains"}, timeout=120.0)

    def chain_status(self, ident: str) -> dict:
        return self.call({"op": "chain-status", "ident": ident}, timeout=120.0)

    def job_ended(self, job_ids: Sequence[str]) -> dict:
        return self.call({"op": "job-ended", "job_ids": [*job_ids]})

    def file_closed(self, path: str, job: str) -> dict:
        return self.call({"op": "file-closed", "path": path, "job": job})


def _raised(reply: dict) -> dict:
    """``reply`` if it says ok; else its error, raised as the class it names."""
    if reply.get("ok"):
        return reply
    kind = ERROR_KINDS.get(reply.get("kind", ""), RecoveryError)
    error = str(reply.get("error", "the recovery service refused the request"))
    if kind is ServiceBusy:
        told = reply.get("retry_after")
        ok = isinstance(told, (int, float)) and not isinstance(told, bool) and 0 <= told <= 3600
        raise ServiceBusy(error, retry_after=float(told) if ok else None)
    raise kind(error)
