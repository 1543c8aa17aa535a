"""Hybrid replicas (the layout paper's §5): a file's replica kept in another layout than its
primary, and the modelled cost of a request on a mirror of any stripe count and size.

Section 5.1 defines the layouts of a shared file's replicas by their stripe size: a stripe as
large as a request puts each request on one OST (1-DV), a small one spreads it over all of them
(1-DH), one in between over some (2-D). So a mirror of ``count`` stripes of ``size`` bytes
serves a request of ``s`` bytes at ``offset`` from ``k`` OSTs (the stripes the request spans,
at most ``count``): the model's 1-DV for ``k = 1``, 1-DH for ``k = n``, else 2-D with groups of
``k`` OSTs (:func:`mirror_request_cost`; the mount computes the same in C,
``scratchkeeper/mount/native/hybrid.c``). ``n`` is the OSTs the concurrent readers' data is on:
the mirror's stripe count for one shared file, up to every OST for a file per process.

:func:`hybrid_replica` chooses the replica's stripe settings for a recorded workload: of the
section-4 settings of every layout for every request size of the workload, the one that makes
the workload cheapest when each request is served by the cheaper of primary and replica (the
mount's per-request choice). Where no request would be served cheaper by another layout, the
replica keeps the primary's layout.

The workload travels with the file: the stage-in records it in ``user.scratchkeeper.layout``
(:func:`workload_text`) and the replication daemon reads it back (:func:`parse_workload`). It is
a user-writable attribute, so it is read as data: bounded, every field checked, anything else
refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import InputError
from .advise import AccessClass, Workload, format_size, stripe_settings
from .model import (
    LAYOUTS,
    ONE_DH,
    ONE_DV,
    READ,
    SEQUENTIAL,
    TWO_D,
    Cost,
    ModelParams,
    group_choices,
    request_cost,
)

#: the most access classes a recorded workload may hold, and its largest numbers
MAX_CLASSES = 16
MAX_PROCS = 10_000_000
MAX_REQUEST = 1 << 40
MAX_COUNT = 1e15


def spanned_osts(stripe_count: int, stripe_size: int, request_size: int,
                 offset: int = 0) -> int:
    """OSTs a request of ``request_size`` bytes at ``offset`` touches in a RAID-0 component."""
    first = offset // stripe_size
    last = (offset + request_size - 1) // stripe_size
    return max(1, min(stripe_count, last - first + 1))


def mirror_request_cost(stripe_count: int, stripe_size: int, request_size: int,
                        processes: int, osts: int, params: ModelParams, *,
                        offset: int = 0, operation: str = READ,
                        pattern: str = SEQUENTIAL) -> Cost:
    """Table 2's cost of one request of each of ``processes`` readers on one node, on a mirror
    of ``stripe_count`` stripes of ``stripe_size`` bytes whose readers' data is on ``osts``
    OSTs: 1-DV where one request spans one OST, 1-DH where it spans all ``n``, else 2-D with
    groups of the OSTs it spans."""
    n = max(osts, stripe_count)
    width = min(spanned_osts(stripe_count, stripe_size, request_size, offset), n)
    layout = ONE_DV if width == 1 else ONE_DH if width == n else TWO_D
    groups = max(1, n // width) if layout == TWO_D else None
    return request_cost(layout, processes, processes, n, request_size, params,
                        operation=operation, pattern=pattern, groups=groups)


def data_osts(stripe_count: int, workload: Workload, total_osts: int) -> int:
    """The OSTs a workload's readers' data is on in a layout of ``stripe_count`` stripes: the
    file's stripes for one shared file, a file per process spread over up to every OST."""
    if workload.shared_file:
        return stripe_count
    return max(stripe_count, min(total_osts, stripe_count * workload.processes))


@dataclass(frozen=True)
class HybridChoice:
    """The replica's stripe settings, the modelled cost of the workload on the primary alone
    and with the replica (each request on the cheaper mirror), and why."""

    stripe_count: int
    stripe_size: int
    layout: str
    primary_seconds: float
    hybrid_seconds: float
    reason: str

    @property
    def differs(self) -> bool:
        return self.hybrid_seconds < self.primary_seconds


def _class_cost(access: AccessClass, workload: Workload, count: int, size: int,
                total_osts: int, params: ModelParams) -> float:
    cost = mirror_request_cost(count, size, access.request_size, workload.processes,
                               data_osts(count, workload, total_osts), params,
                               operation=access.operation, pattern=access.pattern)
    return cost.total * access.count / workload.processes


def hybrid_replica(workload: Workload, primary: tuple[int, int], replica_osts: int,
                   total_osts: int, params: ModelParams) -> HybridChoice:
    """The stripe settings of a replica on ``replica_osts`` OSTs (outside the primary's) that
    serve ``workload`` best beside the primary's ``(stripe count, stripe size)``."""
    if replica_osts < 1:
        raise InputError("no OST for the replica")
    p_count, p_size = primary
    primary_costs = [_class_cost(a, workload, p_count, p_size, total_osts, params)
                     for a in workload.accesses]
    primary_total = sum(primary_costs)
    candidates: dict[tuple[int, int], str] = {}
    for layout in LAYOUTS:
        tries = group_choices(replica_osts) if layout == TWO_D else [None]
        for groups in tries:
            for access in workload.accesses:
                count, size, _ = stripe_settings(layout, access.request_size, replica_osts,
                                                 workload.shared_file, groups)
                candidates.setdefault((count, size), layout)
    # ties: the order of LAYOUTS, then fewer stripes
    total, _, count, size = min(
        (sum(min(primary_cost, _class_cost(a, workload, count, size, total_osts, params))
             for a, primary_cost in zip(workload.accesses, primary_costs)),
         LAYOUTS.index(layout), count, size)
        for (count, size), layout in candidates.items())
    if not total < primary_total * (1 - 1e-9):
        count, size = min(p_count, replica_osts), p_size
        return HybridChoice(count, size, "primary's", primary_total, primary_total,
                            "no request of the workload is modelled cheaper in another layout: "
                            "the replica keeps the primary's layout")
    layout = candidates[(count, size)]
    served = [a for a, primary_cost in zip(workload.accesses, primary_costs)
              if _class_cost(a, workload, count, size, total_osts, params) < primary_cost]
    sizes = ", ".join(sorted({format_size(a.request_size) for a in served}))
    reason = (f"{layout} replica ({count} x {format_size(size)}): serves the {sizes} requests; "
              f"workload modelled {primary_total:.4g} s on the primary alone, "
              f"{total:.4g} s with each request on the cheaper mirror")
    return HybridChoice(count, size, layout, primary_total, total, reason)


# -- the workload recorded with the file ---------------------------------------------------------

_ACCESS = re.compile(r"([0-9]{1,13}):([0-9]+(?:\.[0-9]{1,6})?):(read|write):(sequential|random)")
_WORKLOAD = re.compile(r"workload=procs:([0-9]{1,8}),per_node:([0-9]{1,8}),"
                       r"(shared|per-process),([^ ]{1,2000})")


def workload_text(workload: Workload) -> str:
    """``workload=procs:P,per_node:M,shared,SIZE:COUNT:read:sequential;...``: one word of the
    layout record, what :func:`parse_workload` reads back."""
    accesses = ";".join(f"{a.request_size}:{a.count:.6g}:{a.operation}:{a.pattern}"
                        for a in workload.accesses[:MAX_CLASSES])
    mode = "shared" if workload.shared_file else "per-process"
    return (f"workload=procs:{workload.processes},per_node:{workload.processes_per_node},"
            f"{mode},{accesses}")


def parse_workload(record: str) -> Workload | None:
    """The workload word of a layout record (``user.scratchkeeper.layout``), None if it has
    none; :class:`InputError` for one that is not exactly what :func:`workload_text` writes."""
    head = record.split(": ", 1)[0]
    words = [w for w in head.split() if w.startswith("workload=")]
    if not words:
        return None
    if len(words) > 1:
        raise InputError("layout record: more than one workload")
    match = _WORKLOAD.fullmatch(words[0])
    if match is None:
        raise InputError(f"layout record: malformed workload {words[0][:80]!r}")
    procs, per_node = int(match.group(1)), int(match.group(2))
    if not 1 <= per_node <= procs <= MAX_PROCS:
        raise InputError(f"layout record: processes {procs}, {per_node} per node: out of range")
    parts = match.group(4).split(";")
    if len(parts) > MAX_CLASSES:
        raise InputError(f"layout record: {len(parts)} access classes, at most {MAX_CLASSES}")
    accesses = []
    for part in parts:
        access = _ACCESS.fullmatch(part)
        if access is None:
            raise InputError(f"layout record: malformed access class {part[:80]!r}")
        size, count = int(access.group(1)), float(access.group(2))
        if not 1 <= size <= MAX_REQUEST or not 0 <= count <= MAX_COUNT:
            raise InputError(f"layout record: access class {part[:80]!r} out of range")
        accesses.append(AccessClass(size, count, access.group(3), access.group(4)))
    return Workload(procs, per_node, match.group(3) == "shared", tuple(accesses))


__all__ = ["HybridChoice", "data_osts", "hybrid_replica",
           "mirror_request_cost", "parse_workload", "spanned_osts", "workload_text"]
