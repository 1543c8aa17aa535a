"""The command server: ``plan``, ``submit`` and ``status`` without the interpreter's start.

A user types ``scratchkeeper submit`` as often as ``sbatch``; a Python process spends some
50 ms starting and importing before it does anything. As Mercurial's ``chg`` does for ``hg``,
the installed ``scratchkeeper`` command is a small C client (``native/client.c``) that hands
these subcommands to a server of the same user, which has the modules imported already and
forks a child per command. The child takes the client's standard streams (passed over the
socket), working directory, environment, umask and arguments, runs :func:`scratchkeeper.cli.main`
and reports its exit code; the client forwards the signals it gets to the child. Anything else
(other subcommands, no server yet, a server of another release or of changed code, another
group set, other ``PYTHON*`` variables) is run by the Python command itself, which the client ``exec``\\s: the server is
only ever a shortcut to the same code, never a different behaviour.

The server runs as the user it serves and accepts only that user (``SO_PEERCRED``), on a socket
in a directory of theirs (mode 0700, checked). It is started by the client on a miss, exits
after ``IDLE_SECONDS`` without a request, and exits when a module it imported changed on disk
(the next client starts a new one).

Protocol (one request per connection): the client sends ``SKC1``, a 4-byte big-endian length
and a JSON object ``{"argv", "cwd", "env", "umask", "groups", "ignored"}`` (``ignored``: the
signals ignored in the client, which stay ignored in the command) with its descriptors 0, 1, 2
attached (``SCM_RIGHTS``). The server answers ``R`` (run it yourself: stale or refused, then
closes), or its child answers ``P`` and its pid (4 bytes) and ends with ``X`` and its exit
code (1 byte). A connection closed without ``X`` means the child died: the client exits 255.
"""

from __future__ import annotations

import array
import json
import os
import select
import signal
import socket
import stat
import struct
import sys

#: The subcommands the client hands to the server (short ones users type often; never a daemon).
SERVED = ("plan", "submit", "status")
IDLE_SECONDS = 600.0
MAGIC = b"SKC1"
MAX_REQUEST = 1 << 20
#: Imported before the first request: what ``plan``, ``submit`` and ``status`` load.
WARM = ("scratchkeeper.cli.planner", "scratchkeeper.planner.submit", "scratchkeeper.config",
        "scratchkeeper.planner.records", "scratchkeeper.planner.attach",
        "scratchkeeper.planner.status", "scratchkeeper.layout", "scratchkeeper.schedulers.slurm",
        "scratchkeeper.schedulers.pbs", "scratchkeeper.state",
        "scratchkeeper.planner.compiled_templates", "tomllib", "argparse", "json")


class Refused(Exception):
    """The request is not served here; the client runs the command itself."""


def fingerprint() -> dict[str, tuple[int, int]]:
    """``(mtime_ns, size)`` of every scratchkeeper module file imported so far."""
    prints = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and getattr(module, "__name__", "").startswith("scratchkeeper"):
            try:
                st = os.stat(path)
            except OSError:
                continue
            prints[path] = (st.st_mtime_ns, st.st_size)
    return prints


def check_socket_dir(directory: str) -> None:
    """The socket's directory must be this user's own and closed to others."""
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise SystemExit(f"scratchkeeper command server: {directory}: not a directory of uid "
                         f"{os.getuid()} closed to others")


def receive(conn: socket.socket) -> tuple[dict, list[int]]:
    """The request and the descriptors attached to it."""
    fds = array.array("i")
    data = b""
    header_len = len(MAGIC) + 4
    while len(data) < header_len:
        chunk, ancillary, _, _ = conn.recvmsg(header_len - len(data),
                                              socket.CMSG_SPACE(3 * fds.itemsize))
        if not chunk:
            raise Refused("connection closed in the header")
        data += chunk
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
    if data[:len(MAGIC)] != MAGIC:
        _close_all(fds)
        raise Refused("not a client of this protocol")
    (length,) = struct.unpack(">I", data[len(MAGIC):])
    if length > MAX_REQUEST:
        _close_all(fds)
        raise Refused(f"request of {length} bytes")
    body = b""
    while len(body) < length:
        chunk = conn.recv(length - len(body))
        if not chunk:
            _close_all(fds)
            raise Refused("connection closed in the request")
        body += chunk
    try:
        request = json.loads(body)
        if not (isinstance(request.get("argv"), list) and isinstance(request.get("cwd"), str)
                and isinstance(request.get("env"), dict) and isinstance(request.get("umask"), int)
                and isinstance(request.get("groups"), list)
                and isinstance(request.get("ignored"), list)
                and all(isinstance(n, int) for n in request["ignored"])):
            raise ValueError("fields")
    except (ValueError, AttributeError) as err:
        _close_all(fds)
        raise Refused(f"malformed request ({err})") from None
    if len(fds) != 3:
        _close_all(fds)
        raise Refused(f"{len(fds)} descriptors attached, expected 3")
    return request, list(fds)


def _close_all(fds) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _become_client(request: dict, fds: list[int]) -> None:
    """Take the client's signal dispositions, streams, directory, umask and environment."""
    # the signal dispositions a Python process started by the client would have
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as the interpreter sets it
    for signum in request["ignored"]:
        if signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(signum, signal.SIG_IGN)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.umask(request["umask"])
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in request["env"].items()})
    import time
    time.tzset()  # TZ
    if "tempfile" in sys.modules:
        sys.modules["tempfile"].tempdir = None  # TMPDIR, looked up again on first use
    sys.stdin = os.fdopen(0, "r", closefd=False)
    sys.stdout = os.fdopen(1, "w", closefd=False, buffering=1 if os.isatty(1) else -1)
    sys.stderr = os.fdopen(2, "w", closefd=False, buffering=1)


def run_child(conn: socket.socket, request: dict, fds: list[int]) -> None:
    """In the forked child: become the client's command, run it, report its exit code.

    What cannot be taken over (the client's directory is gone, say) is answered ``R``: the
    client then runs the command itself, which meets the same condition as it would anyway."""
    code = 255
    try:
        try:
            _become_client(request, fds)
        except OSError:
            conn.sendall(b"R")
            os._exit(0)
        conn.sendall(b"P" + struct.pack(">I", os.getpid()))
        sys.argv = ["scratchkeeper", *request["argv"]]
        from . import main
        try:
            code = main([str(a) for a in request["argv"]])
        except SystemExit as exc:  # argparse: --help, usage errors
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if exc.code is not None and not isinstance(exc.code, int):
                print(exc.code, file=sys.stderr)
        except KeyboardInterrupt:
            code = 130
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        try:
            conn.sendall(b"X" + bytes([code & 0xFF]))
        except OSError:
            pass
        os._exit(0)


def serve(path: str) -> int:
    """Accept requests on ``path`` until idle for ``IDLE_SECONDS`` or stale."""
    import importlib

    check_socket_dir(os.path.dirname(path))
    for name in WARM:
        importlib.import_module(name)
    from ..config import parse_config
    from . import prebuild_parsers
    prebuild_parsers(SERVED)
    parse_config("", "<warm-up>")  # the schema's lazily built parts
    import gc
    gc.collect()
    gc.freeze()  # the collector of a child leaves the server's objects (and their pages) alone
    prints = fingerprint()
    groups = sorted(os.getgroups())
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    old_umask = os.umask(0o077)
    try:
        listener.bind(path)
    finally:
        os.umask(old_umask)
    listener.listen(64)
    identity = os.stat(path)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    try:
        while True:
            ready, _, _ = select.select([listener], [], [], IDLE_SECONDS)
            if not ready:
                return 0
            try:
                current = os.stat(path)
            except FileNotFoundError:
                return 0  # another server took the name, or it was removed: leave
            if (current.st_ino, current.st_dev) != (identity.st_ino, identity.st_dev):
                return 0
            conn, _ = listener.accept()
            with conn:
                if not _handle(conn, listener, prints, groups):
                    return 0
    finally:
        listener.close()
        try:
            if (os.stat(path).st_ino, os.stat(path).st_dev) == (identity.st_ino, identity.st_dev):
                os.unlink(path)
        except OSError:
            pass


def _interpreter_settings(env) -> dict:
    """The variables that change how Python starts (a ``PYTHONPATH`` of a test's hooks): a
    request whose differ from the server's runs as its own process."""
    return {k: v for k, v in env.items() if str(k).startswith("PYTHON")}


def _handle(conn: socket.socket, listener: socket.socket, prints: dict, groups: list) -> bool:
    """Serve one connection; False when the server must stop (its code changed)."""
    conn.settimeout(5.0)
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _, uid, gid = struct.unpack("3i", creds)
    if uid != os.getuid():
        return True  # not ours: closed unanswered
    try:
        request, fds = receive(conn)
    except (Refused, OSError):
        return True
    stale = fingerprint() != prints
    if stale or gid != os.getgid() or sorted(request["groups"]) != groups \
            or _interpreter_settings(request["env"]) != _interpreter_settings(os.environ):
        _close_all(fds)
        try:
            conn.sendall(b"R")
        except OSError:
            pass
        return not stale
    conn.settimeout(None)
    pid = os.fork()  # the child answers on ``conn`` itself
    if pid == 0:
        listener.close()
        run_child(conn, request, fds)
    _close_all(fds)
    return True


def server_pids(path: str) -> list[int]:
    """The servers listening on the socket ``path`` (their command lines name it)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    argv = handle.read().split(b"\0")
            except OSError:
                continue
            if os.fsencode(path) in argv and b"scratchkeeper.cli._server" in argv:
                pids.append(int(entry))
    return pids


def stop_servers(directory: str) -> None:
    """Stop the servers whose sockets are in ``directory`` (tests, benchmarks)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    for name in names:
        if name.endswith(".sock"):
            for pid in server_pids(os.path.join(directory, name)):
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] != "--socket":
        print("usage: python -m scratchkeeper.cli.server --socket PATH", file=sys.stderr)
        return 2
    return serve(args[1])


if __name__ == "__main__":
    sys.exit(main())
