"""``scratchkeeper solve``: choose the replica of every bucket of one request (the
replica-selection paper, §2.3)."""

from __future__ import annotations

import json
import math
import sys

from ..errors import SolverInputError
from ..inputfiles import read_limited
from ..solver import ALGORITHMS, DiskTable

#: Largest request read: a million buckets of a few replicas is ~30 MB of JSON.
REQUEST_SIZE_MAX = 256 << 20


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
    data = read_limited(path, REQUEST_SIZE_MAX, what="solve request", error=SolverInputError)
    try:
        text = data.decode("utf-8")
        document = json.loads(text, parse_constant=_reject_constant, parse_int=_parse_int,
                              parse_float=_parse_float)
    except UnicodeDecodeError as err:
        raise SolverInputError(f"not UTF-8: byte 0x{data[err.start]:02x}", path=path,
                               line=data.count(b"\n", 0, err.start) + 1) from err
    except json.JSONDecodeError as err:
        raise SolverInputError(f"invalid JSON: {err.msg} (column {err.colno})", path=path,
                               line=err.lineno) from err
    except RecursionError as err:
        raise SolverInputError("invalid JSON: arrays or objects nested too deeply (a request "
                               "nests three levels)", path=path) from err
    except _BadNumber as err:
        at = text.find(err.literal)
        raise SolverInputError(err.reason, path=path,
                               line=text.count("\n", 0, at) + 1 if at >= 0 else None) from err
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


#: No number a request needs is longer: a double has 17 significant digits, a disk id 10.
_NUMBER_CHARACTERS_MAX = 100


class _BadNumber(ValueError):
    """A JSON number (or constant) no request can hold; ``literal`` is its text."""

    def __init__(self, literal: str, reason: str):
        super().__init__(reason)
        self.literal = literal
        self.reason = reason


def _reject_constant(name: str):
    raise _BadNumber(name, f"{name} is not a valid number here")


def _too_long(literal: str) -> None:
    if len(literal) > _NUMBER_CHARACTERS_MAX:
        raise _BadNumber(literal, f"number {literal[:20]}... has {len(literal)} characters "
                         f"(at most {_NUMBER_CHARACTERS_MAX}): out of range")


def _parse_int(literal: str) -> int:
    _too_long(literal)
    return int(literal)


def _parse_float(literal: str) -> float:
    _too_long(literal)
    value = float(literal)
    if not math.isfinite(value):
        raise _BadNumber(literal, f"number {literal} is out of range (beyond "
                         f"{sys.float_info.max:.6g})")
    return value


def _json_type(value) -> str:
    return {dict: "an object", str: "a string", float: "a number", int: "a number",
            bool: "a boolean", type(None): "null"}.get(type(value), type(value).__name__)
