"""Choose a layout for a workload by the layout paper's model and turn it into Lustre stripe settings.

:func:`advise` sums the Table 2 cost of every access class of the workload for each layout
(the layout paper's §4: the overall cost of an application is the sum over its requests), takes the
cheapest, and applies the section-4 guidelines to get ``lfs setstripe -c N -S SIZE``:

* 1-DV, one shared file: striped over all OSTs with the stripe size equal to the most common
  request size, so that one request falls on one OST; a file per process: one OST per file
  (``-c 1``; Lustre's allocator spreads new files over the OSTs).
* 1-DH: all OSTs, a small stripe size, so that every request is spread over all of them:
  ``request size / n``.
* 2-D, one shared file: all OSTs, stripe size ``g/n`` times the most common request size, so
  that one request covers ``n/g`` OSTs; a file per process: ``ceil(n/g)`` OSTs per file, with
  the same stripe size (the paper names the count only; this size spreads a request over all of
  them).

Lustre takes stripe sizes in multiples of 64 KiB; where the guideline asks for less (small
requests on many OSTs), the advice says so in its notes.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from ..config import STRIPE_SIZE_MAX, STRIPE_UNIT
from ..errors import InputError
from .model import (
    LAYOUTS,
    ONE_DH,
    ONE_DV,
    RANDOM,
    READ,
    SEQUENTIAL,
    TWO_D,
    WRITE,
    ZERO,
    Cost,
    ModelParams,
    check_shape,
    group_choices,
    group_size,
    request_cost,
)

#: Stripe size of a one-stripe file: it does not change where the data goes (Lustre's default).
ONE_STRIPE_SIZE = 1 << 20


@dataclass(frozen=True)
class AccessClass:
    """Requests alike in size, direction and pattern; ``count`` over all processes together
    (a fraction where a Darshan log's counters are apportioned between patterns)."""

    request_size: int
    count: float
    operation: str = READ
    pattern: str = SEQUENTIAL

    def __post_init__(self):
        if self.operation not in (READ, WRITE):
            raise InputError(f"operation {self.operation!r}: expected 'read' or 'write'")
        if self.pattern not in (SEQUENTIAL, RANDOM):
            raise InputError(f"pattern {self.pattern!r}: expected 'sequential' or 'random'")
        if self.request_size < 1:
            raise InputError(f"request size {self.request_size}: expected at least 1 byte")
        if not self.count >= 0:
            raise InputError(f"request count {self.count}: expected at least 0")


@dataclass(frozen=True)
class Workload:
    """What the model needs of a job: its I/O processes, how many share a client node, whether
    they access one shared file or a file each, and its requests."""

    processes: int
    processes_per_node: int
    shared_file: bool
    accesses: tuple[AccessClass, ...]

    def __post_init__(self):
        if not self.accesses or not any(a.count > 0 for a in self.accesses):
            raise InputError("the workload has no requests")
        check_shape(self.processes, self.processes_per_node, 1, 1)

    @classmethod
    def uniform(cls, processes: int, per_node: int, request_size: int, *, shared_file: bool,
                operation: str = READ, pattern: str = SEQUENTIAL) -> Workload:
        """One request of ``request_size`` by each process: the model's own unit."""
        return cls(processes, per_node, shared_file,
                   (AccessClass(request_size, processes, operation, pattern),))

    @property
    def common_request_size(self) -> int:
        """The most common request size (by count; a tie goes to the larger size)."""
        counts: dict[int, float] = {}
        for access in self.accesses:
            counts[access.request_size] = counts.get(access.request_size, 0) + access.count
        return max(counts, key=lambda size: (counts[size], size))

    @property
    def requests(self) -> float:
        return sum(a.count for a in self.accesses)


@dataclass(frozen=True)
class LayoutEstimate:
    """The modelled cost of the whole workload in one layout (seconds); ``groups`` and
    ``group_osts`` for 2-D."""

    layout: str
    cost: Cost
    groups: int | None = None
    group_osts: int | None = None

    @property
    def label(self) -> str:
        if self.layout == TWO_D:
            return f"2-D (g={self.groups}, {self.group_osts} OSTs per group)"
        return self.layout


@dataclass(frozen=True)
class Advice:
    """The estimates, the choice and the stripe settings it leads to."""

    osts: int
    estimates: tuple[LayoutEstimate, ...]
    layout: str
    groups: int | None
    stripe_count: int
    stripe_size: int
    request_size: int
    shared_file: bool
    reason: str
    command: str
    params: ModelParams
    notes: tuple[str, ...] = field(default=())

    @property
    def chosen(self) -> LayoutEstimate:
        return next(e for e in self.estimates if e.layout == self.layout)


def workload_cost(workload: Workload, layout: str, osts: int, params: ModelParams,
                  groups: int | None = None) -> Cost:
    """Section 4: the sum over requests. All processes issue their requests together, so a
    class of ``count`` requests is ``count / p`` rounds of the Table 2 cost."""
    total = ZERO
    for access in workload.accesses:
        if access.count <= 0:
            continue
        cost = request_cost(layout, workload.processes, workload.processes_per_node, osts,
                            access.request_size, params, operation=access.operation,
                            pattern=access.pattern, groups=groups)
        total = total + cost.scaled(access.count / workload.processes)
    return total


def estimate(workload: Workload, osts: int, params: ModelParams,
             groups: int | None = None) -> tuple[LayoutEstimate, ...]:
    """The cost of each layout; for 2-D the best ``g`` of :func:`group_choices` unless
    ``groups`` names one. No 2-D estimate where no ``g`` splits the OSTs evenly (fewer than
    4 OSTs, or a prime number of them) and ``groups`` is not given."""
    check_shape(workload.processes, workload.processes_per_node, osts, 1, groups)
    estimates = [LayoutEstimate(ONE_DV, workload_cost(workload, ONE_DV, osts, params))]
    tries = [groups] if groups is not None else list(group_choices(osts))
    best: LayoutEstimate | None = None
    for g in tries:
        cost = workload_cost(workload, TWO_D, osts, params, g)
        # the smallest g of equal cost: fewer, wider groups load fewer OSTs per process
        if best is None or cost.total < best.cost.total:
            best = LayoutEstimate(TWO_D, cost, g, group_size(osts, g))
    if best is not None:
        estimates.append(best)
    estimates.append(LayoutEstimate(ONE_DH, workload_cost(workload, ONE_DH, osts, params)))
    return tuple(estimates)


def _stripe_multiple(size: float, *, up: bool) -> int:
    """``size`` as a stripe size Lustre takes: a multiple of 64 KiB, at least 64 KiB, below
    4 GiB; rounded up or down."""
    units = -(-int(size) // STRIPE_UNIT) if up else int(size) // STRIPE_UNIT
    return min(max(units, 1) * STRIPE_UNIT, STRIPE_SIZE_MAX)


def stripe_settings(layout: str, request_size: int, osts: int, shared_file: bool,
                    groups: int | None = None) -> tuple[int, int, tuple[str, ...]]:
    """Section 4's guidelines: ``(stripe count, stripe size, notes)`` for ``layout``."""
    notes: list[str] = []
    if layout == ONE_DV:
        if not shared_file:
            return 1, ONE_STRIPE_SIZE, ()
        # rounded up: a request smaller than a stripe stays on one OST
        size = _stripe_multiple(request_size, up=True)
        if size != request_size:
            notes.append(f"stripe size {format_size(size)}: the request size "
                         f"{format_size(request_size)} rounded up to a multiple of 64 KiB")
        return osts, size, tuple(notes)
    if layout == ONE_DH:
        wanted = request_size / osts
        # rounded down: a request then still spans every OST
        size = _stripe_multiple(wanted, up=False)
        if wanted < STRIPE_UNIT:
            spread = max(1, min(osts, -(-request_size // STRIPE_UNIT)))
            notes.append(f"a {format_size(request_size)} request spans {spread} of {osts} OSTs "
                         "at the smallest stripe size Lustre takes (64 KiB), not all of them")
        return osts, size, tuple(notes)
    if layout == TWO_D:
        if groups is None:
            raise InputError("2-D layout: the number of storage groups g is needed")
        width = group_size(osts, groups)
        wanted = request_size / width
        size = _stripe_multiple(round(wanted / STRIPE_UNIT) * STRIPE_UNIT, up=False)
        if wanted < STRIPE_UNIT:
            spread = max(1, min(width, -(-request_size // STRIPE_UNIT)))
            notes.append(f"a {format_size(request_size)} request spans {spread} of the {width} "
                         "OSTs of a group at Lustre's smallest stripe size (64 KiB)")
        return (osts if shared_file else width), size, tuple(notes)
    raise InputError(f"layout {layout!r}: expected one of {', '.join(LAYOUTS)}")


def format_size(size: int) -> str:
    """Bytes as ``lfs setstripe -S`` takes them: ``4M``, ``192K``, else plain bytes."""
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return str(size)


def _seconds(value: float) -> str:
    if value >= 1:
        return f"{value:.3g} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    return f"{value * 1e6:.3g} us"


def advise(workload: Workload, params: ModelParams, ost_count: int, *,
           groups: int | None = None, target: str | None = None) -> Advice:
    """The layout the model prefers for ``workload`` on ``ost_count`` OSTs, with the stripe
    settings of section 4 and the ``lfs setstripe`` command (for ``target``, by default
    ``FILE`` for a shared file and ``DIR``, where the files will be created, otherwise).

    A tie goes to the first of :data:`LAYOUTS` (1-DV, 2-D, 1-DH).
    """
    estimates = estimate(workload, ost_count, params, groups)
    order = {layout: index for index, layout in enumerate(LAYOUTS)}
    best = min(estimates, key=lambda e: (e.cost.total, order[e.layout]))
    request_size = workload.common_request_size
    count, size, notes = stripe_settings(best.layout, request_size, ost_count,
                                         workload.shared_file, best.groups)
    others = "; ".join(f"{e.label} {_seconds(e.cost.total)}" for e in estimates if e is not best)
    reason = (f"{best.label} is the cheapest, {_seconds(best.cost.total)} modelled"
              + (f" (against {others})" if others else "")
              + f": {workload.processes} processes, {workload.processes_per_node} per node, "
              f"on {ost_count} OSTs, most requests {format_size(request_size)}")
    if target is None:
        target = "FILE" if workload.shared_file else "DIR"
    command = f"lfs setstripe -c {count} -S {format_size(size)} {shlex.quote(target)}"
    return Advice(osts=ost_count, estimates=estimates, layout=best.layout, groups=best.groups,
                  stripe_count=count, stripe_size=size, request_size=request_size,
                  shared_file=workload.shared_file, reason=reason, command=command,
                  params=params, notes=notes)
