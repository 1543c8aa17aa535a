"""``scratchkeeper solve``: choose the replica of every bucket of one request (seed 000 §2.3)."""

from __future__ import annotations

import json

from ..errors import SolverInputError
from ..solver import ALGORITHMS, DiskTable


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "solve", help="optimal replica selection for one read request",
        description="Read FILE.json {\"disks\": [{\"cost\": C, \"delay\": D, \"load\": X}, ...], "
                    "\"buckets\": [[disk, ...], ...]} and print the minimal response time "
                    "and the disk chosen for every bucket.")
    parser.add_argument("file", metavar="FILE.json", help="the request and its disks")
    parser.add_argument("--algorithm", default="auto", choices=("auto",) + ALGORITHMS,
                        help="solver algorithm (default: auto, the fastest exact one)")
    parser.add_argument("--threads", type=int, default=1, metavar="N",
                        help="threads for --algorithm parallel (default 1)")
    parser.add_argument("--json", action="store_true",
                        help="print {\"response_time\", \"assignment\", \"counts\", ...} as JSON")
    parser.set_defaults(func=_run)


def _run(args) -> int:
    table, buckets = load_request(args.file)
    try:
        selection = table.select(buckets, algorithm=args.algorithm, threads=args.threads)
    except SolverInputError as err:
        raise SolverInputError(err.message, path=args.file) from err
    if args.json:
        print(json.dumps(selection.as_dict()))
        return 0
    print(f"response time: {selection.response_time:g}")
    print(f"algorithm: {selection.algorithm} ({selection.probes} probes)")
    used = [(disk, count) for disk, count in enumerate(selection.counts) if count]
    print("buckets per disk: " + ", ".join(f"{disk}:{count}" for disk, count in used))
    print("assignment: " + " ".join(str(disk) for disk in selection.assignment))
    return 0


def load_request(path: str) -> tuple[DiskTable, list[list[int]]]:
    """Parse and check a solve request file; errors name the file and the disk or bucket."""
    try:
        with open(path, encoding="utf-8") as stream:
            document = json.load(stream, parse_constant=_reject_constant)
    except OSError as err:
        raise SolverInputError(f"cannot read: {err.strerror}", path=path) from err
    except json.JSONDecodeError as err:
        raise SolverInputError(f"invalid JSON: {err.msg} (column {err.colno})", path=path,
                               line=err.lineno) from err
    except ValueError as err:  # NaN / Infinity literals
        raise SolverInputError(str(err), path=path) from err
    if not isinstance(document, dict):
        raise SolverInputError("expected an object with \"disks\" and \"buckets\"", path=path)
    unknown = sorted(set(document) - {"disks", "buckets"})
    if unknown:
        raise SolverInputError(f"unknown key {unknown[0]!r} (expected \"disks\", \"buckets\")",
                               path=path)
    disks = document.get("disks")
    buckets = document.get("buckets")
    if not isinstance(disks, list):
        raise SolverInputError("\"disks\" must be a list of {\"cost\", \"delay\", \"load\"}",
                               path=path)
    if not isinstance(buckets, list):
        raise SolverInputError("\"buckets\" must be a list of lists of disk ids", path=path)
    columns = {"cost": [], "delay": [], "load": []}
    for index, disk in enumerate(disks):
        if not isinstance(disk, dict):
            raise SolverInputError(f"disk {index}: expected an object with \"cost\", "
                                   f"\"delay\", \"load\"", path=path)
        extra = sorted(set(disk) - set(columns))
        if extra:
            raise SolverInputError(f"disk {index}: unknown key {extra[0]!r}", path=path)
        if "cost" not in disk:
            raise SolverInputError(f"disk {index}: missing \"cost\"", path=path)
        for name, column in columns.items():
            column.append(disk.get(name, 0.0))
    for index, replicas in enumerate(buckets):
        if not isinstance(replicas, list):
            raise SolverInputError(f"bucket {index}: expected a list of disk ids, "
                                   f"got {_json_type(replicas)}", path=path)
        for disk in replicas:
            if isinstance(disk, bool) or not isinstance(disk, int):
                raise SolverInputError(f"bucket {index}: disk id {disk!r} is not an integer",
                                       path=path)
    try:
        table = DiskTable.from_lists(columns["cost"], columns["delay"], columns["load"])
    except SolverInputError as err:
        raise SolverInputError(err.message, path=path) from err
    return table, buckets


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a valid number here")


def _json_type(value) -> str:
    return {dict: "an object", str: "a string", float: "a number", int: "a number",
            bool: "a boolean", type(None): "null"}.get(type(value), type(value).__name__)
