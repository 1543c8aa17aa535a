"""Keep one command running, as systemd's ``Restart=always`` does on a site: the local cluster
has no systemd, and a killed scratch mount must come back by itself (docs/local-cluster.rst).

    python3 supervise.py --name NAME --pid-file PATH [--pause S] -- COMMAND [ARG...]

Starts COMMAND and records its pid in PATH (so a test or an admin can find the process itself,
e.g. to kill -9 it). When it ends without being asked to, waits S seconds (doubled while the
command keeps dying within ``QUICK_EXIT`` seconds of its start, up to ``MAX_PAUSE``) and starts
it again. SIGTERM, SIGINT or SIGHUP to the supervisor is passed to the command as SIGTERM (the
scratch mount unmounts on it); the supervisor waits for it (SIGKILL after ``STOP_GRACE``
seconds), removes the pid file and exits with the command's status. If the supervisor itself
is killed, the command gets SIGTERM (``PR_SET_PDEATHSIG``), so nothing is left unsupervised.

Plain Python 3 standard library only, like scripts/local-cluster.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

QUICK_EXIT = 10.0   # a command that dies sooner than this after its start is crash-looping
MAX_PAUSE = 30.0
STOP_GRACE = 25.0   # below local-cluster's 30 s, after which it kills the supervisor
PR_SET_PDEATHSIG = 1


def log(name: str, message: str) -> None:
    stamp = datetime.datetime.now().isoformat(timespec="seconds")
    print(f"{stamp} supervise {name}: {message}", flush=True)


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the supervisor dies (kill -9 included)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def write_pid(path: Path, pid: int) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(f"{pid}\n")
    os.replace(tmp, path)


def describe(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exited with {code}"


class Supervisor:
    def __init__(self, name: str, argv: list[str], pid_file: Path, pause: float):
        self.name, self.argv, self.pid_file, self.pause = name, argv, pid_file, pause
        # the stop signal's number, set by its handler: a plain value (an Event's lock, or
        # print's buffer, could be held by the very code the handler interrupts)
        self.stopping = 0
        self.child: subprocess.Popen | None = None

    def stop(self, signum: int, _frame) -> None:
        self.stopping = signum
        child = self.child
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)

    def run(self) -> int:
        pause = self.pause
        code = 0
        while not self.stopping:
            started = time.monotonic()
            try:
                self.child = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                              preexec_fn=_die_with_parent)
            except OSError as err:
                log(self.name, f"cannot start {self.argv[0]}: {err.strerror}")
                code = 127
            else:
                write_pid(self.pid_file, self.child.pid)
                log(self.name, f"started (pid {self.child.pid}): {' '.join(self.argv)}")
                if self.stopping:  # a stop signal that came before the pid was known
                    self.child.send_signal(signal.SIGTERM)
                code = self._wait()
            if self.stopping:
                break
            lived = time.monotonic() - started
            pause = min(pause * 2, MAX_PAUSE) if lived < QUICK_EXIT else self.pause
            log(self.name, f"{describe(code)} after {lived:.0f}s; starting again in "
                           f"{pause:g}s")
            deadline = time.monotonic() + pause
            while not self.stopping and time.monotonic() < deadline:
                time.sleep(0.1)
        self.pid_file.unlink(missing_ok=True)
        log(self.name, f"{signal.Signals(self.stopping).name}: stopped ({describe(code)})")
        return code if code >= 0 else 128 - code

    def _wait(self) -> int:
        assert self.child is not None
        while True:
            try:
                # a stop signal interrupts the wait (its handler runs), which then goes on
                return self.child.wait(timeout=STOP_GRACE if self.stopping else 1.0)
            except subprocess.TimeoutExpired:
                if self.stopping:
                    log(self.name, f"still running {STOP_GRACE:g}s after SIGTERM: SIGKILL")
                    self.child.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--pid-file", required=True, type=Path)
    parser.add_argument("--pause", type=float, default=2.0)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (after --)")
    if not 0 < args.pause <= MAX_PAUSE:
        parser.error(f"--pause {args.pause:g}: expected above 0 and at most {MAX_PAUSE:g}")
    supervisor = Supervisor(args.name, command, args.pid_file, args.pause)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, supervisor.stop)
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
