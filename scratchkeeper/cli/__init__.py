"""The ``scratchkeeper`` command: one entry point, one module per group of subcommands.

Each module in this package defines ``register(subparsers)``, which adds its subcommands and
sets ``func`` on them; ``func(args)`` returns the exit code. ``register`` is cheap: a module
imports at its top only what its parsers need, and its handlers import the rest when they run.

A run imports only the module of the subcommand it names, found in :data:`COMMANDS`; a name not
in the table (a new module not yet listed, a typo, no subcommand, ``--help``) makes the parser
load every module of the package, so a new subcommand is still just a new module (and a line
here; ``tests/test_cli_imports.py`` checks the table against the modules).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import io
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .. import __version__
from ..errors import ConfigError, ScratchkeeperError

if TYPE_CHECKING:
    from ..config import SiteConfig

log = logging.getLogger("scratchkeeper")
LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s: %(message)s"


#: Subcommand -> the module of this package that registers it.
COMMANDS = {
    "bb": "burst_buffer",
    "config": "config",
    "layout": "layout",
    "metrics": "metrics",
    "mount": "mount",
    "plan": "planner", "submit": "planner", "status": "planner",
    "recoveryd": "recovery", "read": "recovery", "recover": "recovery", "recovery": "recovery",
    "replay": "replay", "sweep": "replay", "report": "replay",
    "replicad": "replication", "replicas": "replication",
    "reproduce": "reproduce",
    "solve": "solve",
    "spank": "spank",
    "stage": "stage",
    "staging": "staging",
    "store": "store",
    "tierd": "tiering", "tiers": "tiering",
}


def command_modules() -> list[str]:
    """Every module of this package that registers subcommands, sorted by name."""
    import pkgutil

    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def command_word(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names: its first word after the global options (``-c FILE``,
    ``-v``); ``None`` when it names none, asks for help, or the options are not plain."""
    tokens = iter(argv)
    for token in tokens:
        if token == "--":
            return next(tokens, None)
        if not token.startswith("-") or token == "-":
            return token
        if token.startswith("--"):
            name = token.split("=", 1)[0]
            if len(name) > 2 and "--help".startswith(name):
                return None
            if "=" not in token and len(name) > 2 and "--config".startswith(name):
                next(tokens, None)  # --config FILE (or an abbreviation of it)
            continue
        for index, flag in enumerate(token[1:]):
            if flag == "c":  # -c FILE, -cFILE, -vc FILE
                if index == len(token) - 2:
                    next(tokens, None)
                break
            if flag != "v":  # -h: the help lists every subcommand
                return None
    return None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser of the subcommand ``argv`` names (only its module imported), or of every
    subcommand when ``argv`` is ``None`` or names none that :data:`COMMANDS` knows."""
    parser = argparse.ArgumentParser(
        prog="scratchkeeper",
        description="Stage, replicate, recover and offload the transient data of batch jobs.")
    parser.add_argument("--version", action="version", version=f"scratchkeeper {__version__}")
    parser.add_argument("-c", "--config", metavar="FILE",
                        help="site configuration (default: $SCRATCHKEEPER_CONFIG, then "
                             "/etc/scratchkeeper/site.toml, then built-in defaults)")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="more log output (-vv for every command run); config: logging.level")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    word = command_word(argv) if argv is not None else None
    for name in [COMMANDS[word]] if word in COMMANDS else command_modules():
        importlib.import_module(f"{__name__}.{name}").register(subparsers)
    return parser


#: Parsers built ahead, by subcommand (the command server builds those it serves before it
#: forks, cli/_server.py); a parser depends only on the subcommand it is built for.
_PREBUILT: dict[str, argparse.ArgumentParser] = {}


def prebuild_parsers(words: Sequence[str]) -> None:
    """Build the parsers of the subcommands ``words`` now, for the runs to come."""
    for word in words:
        _PREBUILT[word] = build_parser([word])


def site_config(args: argparse.Namespace) -> SiteConfig:
    """The validated site configuration named by ``--config`` (loaded once per run)."""
    cached = getattr(args, "_site_config", None)
    if cached is None:
        from ..config import load_config


        cached = load_config(args.config)
        args._site_config = cached
    return cached


def head_elsewhere(config: SiteConfig) -> bool:
    """Whether this host asks the head for what is in the state database: ``head.address`` is
    set and the database is not on this host (a login, data-transfer or compute node; on the
    head the file is there, and its commands open it as before)."""
    return bool(config.head.address) and not os.path.exists(config.state.database)


def state_here(config: SiteConfig, what: str) -> None:
    """Refuse ``what`` (a command that opens the state database) on a host that is not the
    head: only the head opens it (docs/topology.rst)."""
    if head_elsewhere(config):
        from ..errors import StateError

        raise StateError(f"{what} opens the state database {config.state.database}, which is "
                         f"the head's ({config.head.address}): run it on the head")


def _set_log_level(args: argparse.Namespace, config: SiteConfig | None) -> None:
    """-v/-vv win; daemons pass their config (``logging.level``), commands default to warnings."""
    if args.verbose >= 2:
        level = logging.DEBUG
    elif args.verbose == 1:
        level = logging.INFO
    elif config is not None:
        level = getattr(logging, config.logging.level)
    else:
        level = logging.WARNING
    logging.getLogger().setLevel(level)


def daemon_name(args: argparse.Namespace) -> str:
    """The name a service logs under: its subcommand (``recoveryd``, ``replicad``) or group and
    action (``spank-chain``), as in its systemd unit's name."""
    action = getattr(args, f"{args.command}_command", None)
    return f"{args.command}-{action}" if action else args.command


def daemon_logging(args: argparse.Namespace) -> SiteConfig:
    """For long-running services: load the config, log at its ``logging.level`` and, when
    ``logging.file`` is set, to that file (``{daemon}`` replaced by :func:`daemon_name`)
    instead of standard error."""
    import logging.handlers

    config = site_config(args)
    _set_log_level(args, config)
    if config.logging.file:
        path = config.logging.file.replace("{daemon}", daemon_name(args))
        try:
            # A new file is not for every user to read: its records name users' files.
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640))
            # Watched: logrotate may move the file away; the next record reopens it.
            handler = logging.handlers.WatchedFileHandler(path)
        except OSError as err:
            raise ConfigError(f"key 'logging.file': cannot open {path}: {err.strerror}",
                              path=config.source) from err
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        root = logging.getLogger()
        for previous in list(root.handlers):
            root.removeHandler(previous)
        root.addHandler(handler)
        log.info("%s: logging to %s (pid %d)", daemon_name(args), path, os.getpid())
    return config


def add_loop_arguments(parser: argparse.ArgumentParser, section: str, once: str) -> None:
    """``--interval`` (overriding ``SECTION.interval``) and ``--once`` of a daemon's loop."""
    parser.add_argument("--interval", type=float,
                        help=f"seconds between cycles (config: {section}.interval)")
    parser.add_argument("--once", action="store_true", help=once)


def loop_config(args: argparse.Namespace, section: str) -> SiteConfig:
    """:func:`daemon_logging`'s config with ``SECTION.interval`` replaced by ``--interval``."""
    import dataclasses

    config = daemon_logging(args)
    if args.interval is None:
        return config
    if not args.interval > 0:
        from ..errors import InputError

        raise InputError(f"--interval: expected a number > 0, got {args.interval:g}")
    settings = dataclasses.replace(getattr(config, section), interval=args.interval)
    return dataclasses.replace(config, **{section: settings})


def main(argv: list[str] | None = None) -> int:
    """Run the command ``argv`` names; its exit code.

    Its standard output and error are checked (:class:`_Output`): output the command could not
    write (``> /dev/full``, a closed pipe, an I/O error) makes the exit code non-zero, the same
    served or not, with one line, never a traceback nor the interpreter's error at exit."""
    output = _Output()
    try:
        code = _run(argv)
    except BaseException as exc:
        if not output.lost():
            output.restore()
            raise
        # the command ended because its output failed (or raised something else after it did)
        code = exc.code if isinstance(exc, SystemExit) and isinstance(exc.code, int) else 1
    return output.finish(code)


def _run(argv: list[str] | None) -> int:
    logging.basicConfig(format=LOG_FORMAT, level=logging.WARNING, stream=sys.stderr)
    if argv is None:
        argv = sys.argv[1:]
    parser = _PREBUILT.get(command_word(argv)) or build_parser(argv)
    args = parser.parse_args(argv)
    _set_log_level(args, None)
    try:
        return int(args.func(args) or 0)
    except ScratchkeeperError as err:
        _say(f"scratchkeeper: {err}" if not _names_a_place(err) else str(err))
        return err.exit_code
    except OSError as err:
        if err.filename is None:
            raise  # not a file's: the command's own output failing is main()'s to report
        # a file no layer turned into one of ours (a folder this user may not write): one line
        # naming it, never a traceback
        _say(f"scratchkeeper: {_os_error_line(err, args)}")
        return 2 if isinstance(err, PermissionError) else 1
    except KeyboardInterrupt:
        _say("scratchkeeper: interrupted")
        return 130


def _os_error_line(err: OSError, args: argparse.Namespace) -> str:
    """``err`` as one line: the file, what the system said and, for a permission, who asked
    with which site configuration (one a plain user may not use for this command, such as
    root's, which submits to data queues only root may use)."""
    where = os.fsdecode(err.filename)
    if err.filename2 is not None:
        where += f" -> {os.fsdecode(err.filename2)}"
    what = err.strerror or str(err)
    if not isinstance(err, PermissionError):
        return f"{where}: {what}"
    config = getattr(args, "config", None)
    with_config = f" with the site configuration {config}" if config else ""
    return (f"{where}: {what.lower()} for uid {os.geteuid()}: this command{with_config} needs "
            "to write there (is it a configuration for the site's own services? users submit "
            "with the one the site gives them)")


def _say(line: str) -> None:
    """One line on standard error; a failing standard error is recorded by :class:`_Output`
    (and makes the exit code non-zero), not raised over the message's own exit code."""
    try:
        print(line, file=sys.stderr)
    except OSError:
        pass


class _CheckedFile(io.FileIO):
    """Descriptor 1 or 2 as the command writes it: the first write error is kept for the exit
    code and what is written after it is dropped, so that neither the command's later prints
    nor the interpreter's flush at exit raise it again (a traceback, exit code 120)."""

    error: OSError | None = None

    def write(self, data) -> int | None:
        if self.error is not None:
            return memoryview(data).nbytes
        try:
            return super().write(data)
        except OSError as err:
            self.error = err
            raise


class _Output:
    """The command's standard output and error replaced by checked ones for one run of
    :func:`main` (only when they are the process's own descriptors 1 and 2: a test's captured
    streams are left alone)."""

    def __init__(self) -> None:
        self.saved = (sys.stdout, sys.stderr)
        self.files: list[_CheckedFile | None] = []
        for name, fd in (("stdout", 1), ("stderr", 2)):
            stream = getattr(sys, name)
            checked = _checked_stream(stream, fd)
            self.files.append(checked.buffer.raw if checked is not None else None)
            if checked is not None:
                setattr(sys, name, checked)

    def _flush(self) -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):
                pass  # recorded by its _CheckedFile, or not a stream of ours

    def lost(self) -> bool:
        """Whether output was lost (after flushing what is buffered)."""
        self._flush()
        return any(f is not None and f.error is not None for f in self.files)

    def restore(self) -> None:
        sys.stdout, sys.stderr = self.saved

    def finish(self, code: int) -> int:
        """``code``, or 1 when output was lost and the command had not failed already; one
        line naming the error unless it is a closed pipe (the reader stopped: ``| head``),
        which ends the command quietly as a command killed by SIGPIPE would."""
        out, err = self.files
        if self.lost():
            error = (out.error if out is not None and out.error is not None else err.error)
            if error.errno != errno.EPIPE and (err is None or err.error is None):
                _say(f"scratchkeeper: writing the output: {error.strerror or error}")
                self._flush()
            code = code or 1
        self.restore()
        return code


def _checked_stream(stream, fd: int) -> io.TextIOWrapper | None:
    """A checked stream on ``fd`` with ``stream``'s settings, if ``stream`` writes to ``fd``."""
    try:
        if stream is None or stream.fileno() != fd or isinstance(
                getattr(stream.buffer, "raw", None), _CheckedFile):
            return None
        stream.flush()
        raw = _CheckedFile(fd, "w", closefd=False)
    except (AttributeError, OSError, ValueError):
        return None
    return io.TextIOWrapper(io.BufferedWriter(raw), encoding=stream.encoding,
                            errors=stream.errors, line_buffering=stream.line_buffering,
                            write_through=getattr(stream, "write_through", False))


def _names_a_place(err: ScratchkeeperError) -> bool:
    return getattr(err, "path", None) is not None


if __name__ == "__main__":
    sys.exit(main())
