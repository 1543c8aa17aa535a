"""``scratchkeeper config``: check the site configuration and show every key with its value."""

from __future__ import annotations

import dataclasses
import json

from . import site_config


def register(subparsers) -> None:
    parser = subparsers.add_parser("config", help="validate and print the site configuration")
    parser.add_argument("--schema", action="store_true", help="list every key, its default and meaning")
    parser.add_argument("--json", action="store_true", help="print the effective configuration as JSON")
    parser.set_defaults(func=_run)


def _run(args) -> int:
    if args.schema:
        from ..config import describe_schema

        for name, type_name, default, doc in describe_schema():
            print(f"{name:40} {type_name:8} {default!r:36} {doc}")
        return 0
    config = site_config(args)
    if args.json:
        print(json.dumps(dataclasses.asdict(config), indent=2))
    else:
        print(f"{config.source}: valid")
    return 0
