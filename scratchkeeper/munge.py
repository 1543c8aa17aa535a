"""MUNGE credentials through libmunge, as Slurm's ``auth/munge`` uses them.

A credential names the uid and gid of the process that asked its host's ``munged`` for it; any
host that shares the site's key decodes it back to those ids. ``munged`` refuses a credential
made with another key (invalid), one older than its time-to-live (expired), one decoded before
on the same host (replayed) and one whose bytes were changed (invalid), so the ids a service
takes from a decoded credential are the caller's own, not words of the request.

Only ``libmunge.so.2`` (Debian's ``libmunge2``, which the ``munge`` package pulls in) is needed;
it is loaded on first use, so importing this module never fails on a machine without MUNGE.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from dataclasses import dataclass

from .errors import ScratchkeeperError

#: munge.h's option numbers and error codes this module uses
_OPT_TTL = 4
_OPT_SOCKET = 8
EMUNGE_SOCKET = 6
EMUNGE_BAD_CRED = 8
EMUNGE_CRED_INVALID = 14
EMUNGE_CRED_EXPIRED = 15
EMUNGE_CRED_REWOUND = 16
EMUNGE_CRED_REPLAYED = 17

_lib: ctypes.CDLL | None = None
_lib_lock = threading.Lock()


class MungeError(ScratchkeeperError):
    """munged refused to make or to decode a credential (``code``: munge.h's EMUNGE_*)."""

    exit_code = 5

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


class MungeUnavailable(MungeError):
    """No munged answers on the socket, or libmunge is not installed."""


@dataclass(frozen=True)
class Decoded:
    """What a valid credential says: who made it, and the payload it carries."""

    uid: int
    gid: int
    payload: bytes


def _library() -> ctypes.CDLL:
    global _lib
    with _lib_lock:
        if _lib is None:
            name = ctypes.util.find_library("munge") or "libmunge.so.2"
            try:
                lib = ctypes.CDLL(name, use_errno=True)
            except OSError as err:
                raise MungeUnavailable(f"libmunge is not installed ({err})",
                                       EMUNGE_SOCKET) from None
            lib.munge_encode.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_void_p,
                                         ctypes.c_void_p, ctypes.c_int]
            lib.munge_encode.restype = ctypes.c_int
            lib.munge_decode.argtypes = [ctypes.c_char_p, ctypes.c_void_p,
                                         ctypes.POINTER(ctypes.c_void_p),
                                         ctypes.POINTER(ctypes.c_int),
                                         ctypes.POINTER(ctypes.c_uint),
                                         ctypes.POINTER(ctypes.c_uint)]
            lib.munge_decode.restype = ctypes.c_int
            lib.munge_strerror.argtypes = [ctypes.c_int]
            lib.munge_strerror.restype = ctypes.c_char_p
            lib.munge_ctx_create.argtypes = []
            lib.munge_ctx_create.restype = ctypes.c_void_p
            lib.munge_ctx_destroy.argtypes = [ctypes.c_void_p]
            lib.munge_ctx_destroy.restype = None
            lib.munge_ctx_strerror.argtypes = [ctypes.c_void_p]
            lib.munge_ctx_strerror.restype = ctypes.c_char_p
            lib.munge_ctx_set.restype = ctypes.c_int
            _lib = lib
        return _lib


_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None


class Munge:
    """A handle on one host's ``munged`` (its socket; ``None``: libmunge's default,
    ``/run/munge/munge.socket.2``). Each call gets a context of its own, so one handle serves
    many threads."""

    def __init__(self, socket_path: str | None = None, *, ttl: int | None = None):
        self.socket_path = socket_path
        self.ttl = ttl

    def _context(self, lib: ctypes.CDLL) -> int:
        ctx = lib.munge_ctx_create()
        if not ctx:
            raise MungeError("munge: cannot create a context (out of memory)", 5)
        ctx = int(ctx)
        if self.socket_path:
            rc = lib.munge_ctx_set(ctypes.c_void_p(ctx), ctypes.c_int(_OPT_SOCKET),
                                   ctypes.c_char_p(self.socket_path.encode()))
            if rc:
                lib.munge_ctx_destroy(ctx)
                raise MungeError(f"munge: socket {self.socket_path}: "
                                 f"{lib.munge_strerror(rc).decode()}", rc)
        if self.ttl is not None:
            rc = lib.munge_ctx_set(ctypes.c_void_p(ctx), ctypes.c_int(_OPT_TTL),
                                   ctypes.c_int(self.ttl))
            if rc:
                lib.munge_ctx_destroy(ctx)
                raise MungeError(f"munge: ttl {self.ttl}: {lib.munge_strerror(rc).decode()}", rc)
        return ctx

    def _failure(self, lib: ctypes.CDLL, ctx: int, rc: int, what: str) -> MungeError:
        detail = lib.munge_ctx_strerror(ctx) or lib.munge_strerror(rc)
        message = f"munge: cannot {what}: {detail.decode(errors='replace')}"
        if rc == EMUNGE_SOCKET:
            return MungeUnavailable(message, rc)
        return MungeError(message, rc)

    def encode(self, payload: bytes = b"") -> str:
        """A credential of the calling process's uid and gid that carries ``payload``."""
        lib = _library()
        ctx = self._context(lib)
        cred = ctypes.c_char_p()
        try:
            buf = ctypes.create_string_buffer(payload, len(payload)) if payload else None
            rc = lib.munge_encode(ctypes.byref(cred), ctx, buf, len(payload))
            if rc:
                raise self._failure(lib, ctx, rc, "make a credential")
            assert cred.value is not None
            return cred.value.decode("ascii")
        finally:
            if cred:
                _libc.free(ctypes.cast(cred, ctypes.c_void_p))
            lib.munge_ctx_destroy(ctx)

    def decode(self, credential: str) -> Decoded:
        """The uid, gid and payload of a valid credential; :class:`MungeError` with munged's
        reason (invalid, expired, rewound, replayed) for any other."""
        try:
            raw = credential.encode("ascii")
        except UnicodeEncodeError:
            raise MungeError("munge: cannot decode the credential: not ASCII",
                             EMUNGE_BAD_CRED) from None
        lib = _library()
        ctx = self._context(lib)
        payload = ctypes.c_void_p()
        length = ctypes.c_int(0)
        uid, gid = ctypes.c_uint(0), ctypes.c_uint(0)
        try:
            rc = lib.munge_decode(raw, ctx, ctypes.byref(payload), ctypes.byref(length),
                                  ctypes.byref(uid), ctypes.byref(gid))
            if rc:
                raise self._failure(lib, ctx, rc, "decode the credential")
            data = ctypes.string_at(payload, length.value) if payload and length.value else b""
            return Decoded(uid.value, gid.value, data)
        finally:
            if payload:
                _libc.free(payload)
            lib.munge_ctx_destroy(ctx)
