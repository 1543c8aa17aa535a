"""The command server: ``plan``, ``submit`` and ``status`` without the interpreter's start.

A user types ``scratchkeeper submit`` as often as ``sbatch``; a Python process spends some
50 ms starting and importing before it does anything. As Mercurial's ``chg`` does for ``hg``,
the installed ``scratchkeeper`` command is a small C client (``native/client.c``) that hands
these subcommands to a server of the same user, which has the modules imported already and
forks a child per command. The child takes the client's standard streams (passed over the
socket), working directory, environment, umask and arguments, runs :func:`scratchkeeper.cli.main`
and reports its exit code; the client forwards the signals it gets to the child. Anything else
(other subcommands, no server yet, a server of another release or of changed code, another
group set, other ``PYTHON*`` variables) is run by the Python command itself, which the client
``exec``\\s: the server is only ever a shortcut to the same code, never a different behaviour.

The server runs as the user it serves and accepts only that user (``SO_PEERCRED``), on a socket
in a directory of theirs (mode 0700, checked). It is started by the client on a miss, stops
accepting after ``IDLE_SECONDS`` without a request or when a module it imported changed on disk
(the next client starts a new one), and exits once the commands it runs have ended.

Protocol (one request per connection): the client sends ``SKC1``, a 4-byte big-endian length
and a JSON object ``{"argv", "cwd", "env", "umask", "groups", "ignored"}`` (``ignored``: the
signals ignored in the client, which stay ignored in the command) with its descriptors 0, 1, 2
attached (``SCM_RIGHTS``). The server answers ``R`` (run it yourself: stale, refused or busy,
then closes), or its child answers ``P`` and its pid (4 bytes) and ends with ``X`` and its exit
code (1 byte). A child killed by a signal cannot say so: the server, which reaps it, answers
``K`` and the signal's number (1 byte), and the client kills itself with that signal, as the
Python command would have died of it. A connection closed without ``X`` or ``K`` (the server
was stopped too) makes the client exit 255.

Every user has a server of their own (it runs as them), so users are kept apart by the kernel;
within one, the server is a single thread that never waits on one client: it reads requests as
they arrive (a connection that has not sent its request within ``REQUEST_SECONDS`` is dropped),
each command runs in its own child, and it watches each child (a pidfd) and its client (a client
that is gone, killed by a signal it could not forward, takes its command with it: SIGKILL). What
a user can hold is bounded: ``MAX_PENDING`` connections still sending, ``MAX_RUNNING`` commands
running; a connection beyond those is closed or answered ``R``, and its command runs as the
Python command: slower, never refused.
"""

from __future__ import annotations

import array
import json
import os
import selectors
import signal
import socket
import stat
import struct
import sys
import time

#: The subcommands the client hands to the server (short ones users type often; never a daemon).
SERVED = ("plan", "submit", "status")
IDLE_SECONDS = 600.0
#: A client sends its request as soon as it is connected; a connection silent this long is dropped.
REQUEST_SECONDS = 5.0
#: Connections still sending their request, and commands running, at once (one server per
#: user: this is what a user can hold; beyond it their commands run as the Python command).
MAX_PENDING = 32
MAX_RUNNING = 32
MAGIC = b"SKC1"
MAX_REQUEST = 1 << 20
#: Imported before the first request: what ``plan``, ``submit`` and ``status`` load.
WARM = ("scratchkeeper.cli.planner", "scratchkeeper.planner.submit", "scratchkeeper.config",
        "scratchkeeper.planner.records", "scratchkeeper.chain_service.attach",
        "scratchkeeper.planner.status", "scratchkeeper.advisor", "scratchkeeper.schedulers.slurm",
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


def _parse(body: bytes) -> dict:
    """The request's JSON object, its fields checked."""
    try:
        request = json.loads(body)
        if not (isinstance(request, dict) and isinstance(request.get("argv"), list)
                and isinstance(request.get("cwd"), str)
                and isinstance(request.get("env"), dict) and isinstance(request.get("umask"), int)
                and isinstance(request.get("groups"), list)
                and isinstance(request.get("ignored"), list)
                and all(isinstance(n, int) for n in request["ignored"])):
            raise ValueError("fields")
    except (ValueError, AttributeError) as err:
        raise Refused(f"malformed request ({err})") from None
    return request


class _Pending:
    """A connection whose request is still arriving (read as it comes: never waited on)."""

    HEADER = len(MAGIC) + 4

    def __init__(self, conn: socket.socket, gid: int, deadline: float) -> None:
        self.conn = conn
        self.gid = gid
        self.deadline = deadline
        self.data = b""
        self.length: int | None = None
        self.fds = array.array("i")

    def feed(self) -> tuple[dict, list[int]] | None:
        """Read what has arrived; the request and its descriptors once complete."""
        if self.length is None:
            chunk, ancillary, _, _ = self.conn.recvmsg(
                self.HEADER - len(self.data), socket.CMSG_SPACE(3 * self.fds.itemsize),
                socket.MSG_CMSG_CLOEXEC)
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    self.fds.frombytes(payload[:len(payload) - len(payload) % self.fds.itemsize])
            if len(self.fds) > 3:  # descriptors sent again and again: refused before they pile up
                raise Refused(f"{len(self.fds)} descriptors attached, expected 3")
            if not chunk:
                raise Refused("connection closed in the header")
            self.data += chunk
            if len(self.data) < self.HEADER:
                return None
            if self.data[:len(MAGIC)] != MAGIC:
                raise Refused("not a client of this protocol")
            (self.length,) = struct.unpack(">I", self.data[len(MAGIC):])
            if self.length > MAX_REQUEST:
                raise Refused(f"request of {self.length} bytes")
            self.data = b""
        if len(self.data) < self.length:
            chunk = self.conn.recv(min(self.length - len(self.data), 1 << 16))
            if not chunk:
                raise Refused("connection closed in the request")
            self.data += chunk
            if len(self.data) < self.length:
                return None
        request = _parse(self.data)
        if len(self.fds) != 3:
            raise Refused(f"{len(self.fds)} descriptors attached, expected 3")
        fds, self.fds = list(self.fds), array.array("i")
        return request, fds

    def close(self) -> None:
        _close_all(self.fds)
        self.fds = array.array("i")
        self.conn.close()


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


class _Running:
    """A command's child (watched by a pidfd) and its client's connection."""

    def __init__(self, pid: int, pidfd: int, conn: socket.socket) -> None:
        self.pid = pid
        self.pidfd: int | None = pidfd
        self.conn: socket.socket | None = conn


def _send(conn: socket.socket, data: bytes) -> None:
    """A few bytes to a client, never waiting on it (a client that does not read is its own
    loss)."""
    try:
        conn.send(data, socket.MSG_DONTWAIT)
    except OSError:
        pass


class _Server:
    """The event loop of :func:`serve`: one thread that only ever reacts to what is ready."""

    def __init__(self, path: str, listener: socket.socket, prints: dict, groups: list) -> None:
        self.path = path
        self.listener: socket.socket | None = listener
        self.identity = os.stat(path)
        self.prints = prints
        self.groups = groups
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ, self._accept)
        self.pending: set[_Pending] = set()
        self.running: set[_Running] = set()
        self.unwatched: set[int] = set()  # children no pidfd could be opened for
        self.last = time.monotonic()

    def run(self) -> int:
        while self.listener is not None or self.pending or self.running or self.unwatched:
            for key, _ in self.selector.select(self._timeout()):
                if self.selector.get_map().get(key.fd) is key:  # not closed by an earlier event
                    key.data()
            now = time.monotonic()
            for pid in list(self.unwatched):
                if os.waitpid(pid, os.WNOHANG)[0]:
                    self.unwatched.discard(pid)
            for pending in [p for p in self.pending if p.deadline <= now]:
                self._drop(pending)  # connected and sent nothing in time
            if self.listener is not None and not self.pending and not self.running \
                    and now - self.last >= IDLE_SECONDS:
                self._stop_accepting()
        return 0

    def _timeout(self) -> float | None:
        deadlines = [p.deadline for p in self.pending]
        if self.listener is not None and not self.pending and not self.running:
            deadlines.append(self.last + IDLE_SECONDS)
        if self.unwatched:
            deadlines.append(time.monotonic() + 1.0)
        return max(0.0, min(deadlines) - time.monotonic()) if deadlines else None

    def _stop_accepting(self) -> None:
        """No new connections (idle, stale, or the socket's name taken by another server); the
        commands running are still watched to their end."""
        if self.listener is None:
            return
        self.selector.unregister(self.listener)
        self.listener.close()
        self.listener = None
        try:
            current = os.stat(self.path)
            if (current.st_ino, current.st_dev) == (self.identity.st_ino, self.identity.st_dev):
                os.unlink(self.path)
        except OSError:
            pass

    def _accept(self) -> None:
        try:
            current = os.stat(self.path)
        except FileNotFoundError:
            current = None  # removed: leave
        if current is None or (current.st_ino, current.st_dev) != (self.identity.st_ino,
                                                                  self.identity.st_dev):
            self._stop_accepting()  # another server took the name
            return
        for _ in range(MAX_PENDING):  # what is queued now; the rest at the next turn
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of descriptors system-wide: a pause, not a busy loop
                time.sleep(0.05)
                return
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                    struct.calcsize("3i"))
            _, uid, gid = struct.unpack("3i", creds)
            if uid != os.getuid() or len(self.pending) >= MAX_PENDING:
                conn.close()  # not ours, or too many waiting: closed unanswered
                continue
            conn.setblocking(False)
            pending = _Pending(conn, gid, time.monotonic() + REQUEST_SECONDS)
            self.pending.add(pending)
            self.selector.register(conn, selectors.EVENT_READ,
                                   lambda p=pending: self._read(p))

    def _drop(self, pending: _Pending) -> None:
        self.pending.discard(pending)
        self.selector.unregister(pending.conn)
        pending.close()

    def _read(self, pending: _Pending) -> None:
        try:
            got = pending.feed()
        except (BlockingIOError, InterruptedError):
            return
        except (Refused, OSError):
            self._drop(pending)
            return
        if got is None:
            return
        self.pending.discard(pending)
        self.selector.unregister(pending.conn)
        request, fds = got
        self._start(pending.conn, pending.gid, request, fds)

    def _start(self, conn: socket.socket, gid: int, request: dict, fds: list[int]) -> None:
        """Fork the command's child, or answer ``R`` (stale, another identity, busy)."""
        self.last = time.monotonic()
        stale = fingerprint() != self.prints
        if stale:
            self._stop_accepting()
        if stale or gid != os.getgid() or sorted(request["groups"]) != self.groups \
                or _interpreter_settings(request["env"]) != _interpreter_settings(os.environ) \
                or len(self.running) >= MAX_RUNNING:
            _close_all(fds)
            _send(conn, b"R")
            conn.close()
            return
        # The child writes on it with plain blocking calls; the server only ever with
        # MSG_DONTWAIT (the descriptor's blocking mode is shared with the child).
        conn.setblocking(True)
        try:
            pid = os.fork()  # the child answers on ``conn`` itself
        except OSError:  # the user's process limit, say: the client tries it itself
            _close_all(fds)
            _send(conn, b"R")
            conn.close()
            return
        if pid == 0:
            self._forget()
            run_child(conn, request, fds)
        _close_all(fds)
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:  # the command runs and answers on its own, only unwatched
            self.unwatched.add(pid)
            conn.close()
            return
        running = _Running(pid, pidfd, conn)
        self.running.add(running)
        self.selector.register(running.pidfd, selectors.EVENT_READ,
                               lambda r=running: self._reap(r))
        self.selector.register(conn, selectors.EVENT_READ, lambda r=running: self._client(r))

    def _forget(self) -> None:
        """In a child: close what belongs to the server and to other commands (another
        client's stdout held open here would keep its reader waiting)."""
        for pending in self.pending:
            pending.close()
        for running in self.running:
            if running.pidfd is not None:
                os.close(running.pidfd)
            if running.conn is not None:
                running.conn.close()
        if self.listener is not None:
            self.listener.close()
        self.selector.close()  # only the descriptor: the server's registrations stay

    def _reap(self, running: _Running) -> None:
        """The child ended: a death by a signal is told to the client, which dies of it."""
        self.selector.unregister(running.pidfd)
        os.close(running.pidfd)
        running.pidfd = None
        _, status = os.waitpid(running.pid, 0)
        if running.conn is not None:
            if os.WIFSIGNALED(status):
                _send(running.conn, b"K" + bytes([os.WTERMSIG(status)]))
            self.selector.unregister(running.conn)
            running.conn.close()
            running.conn = None
        self.running.discard(running)

    def _client(self, running: _Running) -> None:
        """The client's end is readable: a client sends nothing after its request, so it is
        gone (killed by a signal it could not forward): its command goes with it."""
        if running.conn is None:
            return
        try:
            if running.conn.recv(4096, socket.MSG_DONTWAIT):
                return  # not a client of this protocol: what it sends is ignored
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            pass
        self.selector.unregister(running.conn)
        running.conn.close()
        running.conn = None
        if running.pidfd is not None:  # not reaped yet: the pid is still this child's
            os.kill(running.pid, signal.SIGKILL)


def serve(path: str) -> int:
    """Accept requests on ``path`` until idle for ``IDLE_SECONDS`` or stale, then see the
    commands running to their end."""
    import importlib
    import resource

    check_socket_dir(os.path.dirname(path))
    os.close(os.pidfd_open(os.getpid()))  # a kernel without pidfds: no server, every command
    #                                       runs as the Python command
    # what the bounds let clients make it hold (a pending connection: itself and up to 6
    # descriptors; a running command: its connection and pidfd), and the server's own
    needed = 64 + 7 * MAX_PENDING + 2 * MAX_RUNNING
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < needed:
        raise SystemExit(f"scratchkeeper command server: needs {needed} open files (ulimit -n)")
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
    listener.setblocking(False)
    server = _Server(path, listener, prints, groups)
    try:
        return server.run()
    finally:
        server._stop_accepting()


def _interpreter_settings(env) -> dict:
    """The variables that change how Python starts (a ``PYTHONPATH`` of a test's hooks): a
    request whose differ from the server's runs as its own process."""
    return {k: v for k, v in env.items() if str(k).startswith("PYTHON")}


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
