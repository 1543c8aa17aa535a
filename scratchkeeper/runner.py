"""The one way scratchkeeper runs an external command.

Every call has a timeout, is logged, can be recorded (tests hook :func:`set_runner`), and in
dry-run mode a command that changes something is printed and not run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any

from .errors import CommandError, CommandTimeout
from .structs import record

if TYPE_CHECKING:  # imported where a command runs: a dry run starts nothing
    import subprocess

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 60.0


@record(frozen=True)
class CommandResult:
    """What a finished command returned."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0


@record
class CommandRunner:
    """Runs argv lists with a timeout; ``dry_run`` prints mutating commands instead of running them.

    :meth:`capture` collects the commands of a block (``plan --dry-run`` prints them, benchmarks
    add up their durations); nothing is kept outside such a block, so daemons do not grow.
    """

    dry_run: bool = False
    default_timeout: float = DEFAULT_TIMEOUT
    echo: Callable[[str], None] | None = None
    _sinks: list[list[CommandResult]] = field(default_factory=list, repr=False)

    @contextlib.contextmanager
    def capture(self) -> Iterator[list[CommandResult]]:
        """Collect every command handed to the runner inside the block (dry-run ones too)."""
        sink: list[CommandResult] = []
        self._sinks.append(sink)
        try:
            yield sink
        finally:
            self._sinks.remove(sink)

    def _keep(self, result: CommandResult) -> CommandResult:
        for sink in self._sinks:
            sink.append(result)
        return result

    def run(self, argv: Sequence[str], *, timeout: float | None = None, check: bool = True,
            input: str | bytes | None = None, env: Mapping[str, str] | None = None,
            cwd: str | None = None, mutating: bool = True, text: bool = True) -> CommandResult:
        """Run ``argv`` (never through a shell).

        ``mutating=False`` marks a read-only query that still runs in dry-run mode.
        ``check`` raises :class:`CommandError` on a non-zero exit.
        """
        argv = tuple(str(a) for a in argv)
        line = shlex.join(argv)
        if self.dry_run and mutating:
            log.info("dry-run: %s", line)
            if self.echo:
                self.echo(line)
            return self._keep(CommandResult(argv, 0, "", "", 0.0, dry_run=True))
        limit = self.default_timeout if timeout is None else timeout
        full_env = None
        if env is not None:
            full_env = dict(os.environ)
            full_env.update(env)
        import subprocess  # not for a dry run (``plan --dry-run`` starts nothing)

        log.debug("run (timeout %.0fs): %s", limit, line)
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env, cwd=cwd,
                text=text, start_new_session=True)
        except FileNotFoundError as err:
            raise CommandError(f"{argv[0]}: command not found", argv=list(argv), returncode=127) from err
        except PermissionError as err:
            raise CommandError(f"{argv[0]}: permission denied", argv=list(argv), returncode=126) from err
        try:
            stdout, stderr = proc.communicate(input=input, timeout=limit)
        except subprocess.TimeoutExpired as err:
            _kill_group(proc)
            stdout, stderr = proc.communicate()
            raise CommandTimeout(f"{argv[0]}: timed out after {limit:g}s: {line}", argv=list(argv),
                                 returncode=None, stdout=stdout or "", stderr=stderr or "") from err
        seconds = time.monotonic() - started
        result = self._keep(CommandResult(argv, proc.returncode, stdout, stderr, seconds))
        log.debug("exit %d after %.3fs: %s", proc.returncode, seconds, argv[0])
        if check and proc.returncode != 0:
            message = (stderr or stdout or "").strip() if text else ""
            raise CommandError(f"{argv[0]} failed (exit {proc.returncode}): {message or line}",
                               argv=list(argv), returncode=proc.returncode,
                               stdout=stdout if text else "", stderr=stderr if text else "")
        return result


def _kill_group(proc: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    """Kill the command and anything it started (it runs in a session of its own)."""
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


_current = CommandRunner()


def get_runner() -> CommandRunner:
    """The process-wide runner every module uses."""
    return _current


def set_runner(runner: CommandRunner) -> CommandRunner:
    """Replace the process-wide runner (CLI ``--dry-run``, tests); returns the previous one."""
    global _current
    previous, _current = _current, runner
    return previous


def run(argv: Sequence[str], **kwargs: Any) -> CommandResult:
    """Shorthand for ``get_runner().run(...)``."""
    return _current.run(argv, **kwargs)
