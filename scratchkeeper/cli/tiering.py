"""``scratchkeeper tierd`` (hotness-driven tiering) and ``scratchkeeper tiers`` (its view)."""

from __future__ import annotations

import json
import logging
import time

from ..errors import InputError
from . import add_loop_arguments, loop_config, site_config

log = logging.getLogger(__name__)


def register(subparsers) -> None:
    daemon = subparsers.add_parser(
        "tierd", help="move hot files' replicas to faster pools and cold ones back",
        description="Count the reads the scratch mount records and give files read often a "
                    "replica in a faster performance class (storage.pool_tiers), taken away "
                    "when they cool down (the SUORA paper, Algorithms 2 and 3; docs/tiering.rst).")
    add_loop_arguments(daemon, "tiering", "run one cycle and exit")
    daemon.set_defaults(func=_tierd)

    tiers = subparsers.add_parser(
        "tiers", help="hot files, where each is read from, tierd's latest moves",
        description="Show tierd's view: the hottest known files (decayed read counts), the "
                    "class each is read from, and the latest moves.")
    tiers.add_argument("--json", action="store_true", help="print JSON")
    tiers.add_argument("--limit", type=int, default=20, help="files and moves shown (20)")
    tiers.set_defaults(func=_tiers)


def _tierd(args) -> int:
    from ..tiering.daemon import Tierd

    config = loop_config(args, "tiering")
    daemon = Tierd(config)
    daemon.install_signal_handlers()
    log.info("tierd: starting (state %s, interval %gs, classes %s)", config.state.database,
             config.tiering.interval, ", ".join(c for c, _ in reversed(daemon.classes)))
    return daemon.run(max_cycles=1 if args.once else None)


def _tiers(args) -> int:
    from ..tiering.daemon import report

    if args.limit < 1:
        raise InputError(f"--limit: expected a number >= 1, got {args.limit}")
    view = report(site_config(args), limit=args.limit)
    if args.json:
        print(json.dumps(view, indent=2, sort_keys=True))
        return 0
    print(f"classes (fastest first): {', '.join(view['classes'])}; a file needs "
          + ", ".join(f"{n} reads for {c}" for c, n in view["thresholds"].items())
          + f" (half-life {view['half_life']:g} s)")
    print(f"{view['known_files']} file(s) known")
    for entry in view["files"]:
        print(f"  {entry['hotness']:>8}  {entry['served_from'] or '-':<8} {entry['path']}")
    if view["moves"]:
        print("latest moves:")
    for move in view["moves"]:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(move["started"]))
        print(f"  {when} {move['state']:<7} {move['direction']:<4} {move['source']} -> "
              f"{move['target']} {move['path']}: {move['reason']}")
    return 0
