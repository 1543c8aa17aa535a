"""The ``scratchkeeper`` command: one entry point, one module per group of subcommands.

Each module in this package defines ``register(subparsers)``, which adds its subcommands and
sets ``func`` on them; ``func(args)`` returns the exit code. Modules are found by name, so a new
subcommand is a new module and nothing else changes.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import logging.handlers
import os
import pkgutil
import sys

from .. import __version__
from ..config import SiteConfig, load_config
from ..errors import ConfigError, ScratchkeeperError

log = logging.getLogger("scratchkeeper")
LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s: %(message)s"


def build_parser() -> argparse.ArgumentParser:
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
    for module_info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if module_info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        module.register(subparsers)
    return parser


def site_config(args: argparse.Namespace) -> SiteConfig:
    """The validated site configuration named by ``--config`` (loaded once per run)."""
    cached = getattr(args, "_site_config", None)
    if cached is None:
        cached = load_config(args.config)
        args._site_config = cached
    return cached


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


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(format=LOG_FORMAT, level=logging.WARNING, stream=sys.stderr)
    parser = build_parser()
    args = parser.parse_args(argv)
    _set_log_level(args, None)
    try:
        return int(args.func(args) or 0)
    except ScratchkeeperError as err:
        print(f"scratchkeeper: {err}" if not _names_a_place(err) else str(err), file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("scratchkeeper: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1


def _names_a_place(err: ScratchkeeperError) -> bool:
    return getattr(err, "path", None) is not None


if __name__ == "__main__":
    sys.exit(main())
