"""``scratchkeeper mount [MOUNTPOINT]``: serve the local store as a POSIX file system (FUSE) in the
foreground until ``fusermount3 -u MOUNTPOINT`` or SIGINT/SIGTERM (docs/mount.rst)."""

from __future__ import annotations

import argparse

from . import daemon_logging


def register(subparsers) -> None:
    mount = subparsers.add_parser(
        "mount", help="serve the local store at a mount point through FUSE (foreground)",
        description="Mount the local striped store (its MDT tree and OST objects) at MOUNTPOINT "
                    "and serve it until unmounted (fusermount3 -u MOUNTPOINT) or interrupted. "
                    "Runs as root.")
    mount.add_argument("mountpoint", metavar="MOUNTPOINT", nargs="?", default=None,
                       help="an empty directory (default: storage.scratch_root, where jobs "
                            "read and write)")
    # -c also after the subcommand: `scratchkeeper mount MNT -c CONFIG`
    mount.add_argument("-c", "--config", metavar="FILE", default=argparse.SUPPRESS,
                       help="site configuration (as the global -c)")
    mount.add_argument("--debug", action="store_true",
                       help="log every FUSE request to standard error (libfuse's -d)")
    mount.set_defaults(func=_mount)


def _mount(args: argparse.Namespace) -> int:
    config = daemon_logging(args)
    from ..mount.serve import serve

    serve(config, args.mountpoint or config.storage.scratch_root, debug=args.debug)
    return 0
