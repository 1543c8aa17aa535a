"""The per-request cost model of the layout paper (Song et al., HPDC'11), Table 2.

One request of ``s`` bytes issued at once by each of ``p`` processes (``m`` per client node)
against ``n`` storage targets (OSTs) costs ``T = Te + Tx + Ts + Trw``: connection
establishment and network transmission (the larger of the client-side and the server-side
number of serial operations, section 3), disk start-up and disk read/write (the number of
processes one target serves). Three layouts:

* ``1-DV``: each process's data on one OST;
* ``1-DH``: each process's data striped over all ``n`` OSTs;
* ``2-D``: the OSTs split into ``g`` groups, each process's data on the ``ceil(n/g)`` OSTs of
  one group.

The conditions are compared in integers (``m * ceil(n/g) <= ceil(p/g)`` rather than a float
ratio), so a case on a boundary falls on the side the table puts it.

One row differs from the layout paper's text as extracted: for 2-D with ``p > g`` and
``m > ceil(p/g) / ceil(n/g)`` the text reads ``Te = m * ceil(p/g) * e``. We use
``m * ceil(n/g) * e`` (each of the node's ``m`` processes connects to the ``ceil(n/g)`` OSTs of
its group), which is what the table's own ``p <= g`` row of 2-D gives, what 1-DH's ``m * n * e``
gives with one group, and the only form continuous at the row's boundary (``m * ceil(n/g) =
ceil(p/g)``, where the neighbouring row gives ``ceil(p/g) * e``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import InputError

ONE_DV = "1-DV"
ONE_DH = "1-DH"
TWO_D = "2-D"
#: Also the order a tie is broken in: a layout that loads clients and network less first
#: (implication 4 of the layout paper: 1-DH can overwhelm clients).
LAYOUTS = (ONE_DV, TWO_D, ONE_DH)

READ = "read"
WRITE = "write"
SEQUENTIAL = "sequential"
RANDOM = "random"

#: The layout paper's Table 3, InfiniBand column (MB read as 10**6 bytes): the defaults of ``[layout]``.
PAPER_SOURCE = "the layout paper's Table 3, InfiniBand column (PVFS2 2.8.1, 7200 rpm SATA disks, 2011)"


@dataclass(frozen=True)
class ModelParams:
    """The platform constants of the model (the layout paper's Table 1), in seconds and bytes.

    ``e``: cost of establishing one network connection; ``v``: network seconds per byte;
    ``alpha_*``: start-up of one disk operation (random start-up is the larger: a seek);
    ``beta_*``: storage seconds per byte read or written.
    """

    e: float = 0.0002
    v: float = 1 / 1000e6
    alpha_sequential: float = 0.0001
    alpha_random: float = 0.0003
    beta_read: float = 1 / 120e6
    beta_write: float = 1 / 120e6
    source: str = PAPER_SOURCE

    def alpha(self, pattern: str) -> float:
        return self.alpha_random if pattern == RANDOM else self.alpha_sequential

    def beta(self, operation: str) -> float:
        return self.beta_write if operation == WRITE else self.beta_read


def params_from_config(layout_config) -> ModelParams:
    """The model constants of the site config's ``[layout]`` section (bandwidths there, so
    ``v = 1 / network_bandwidth`` and ``beta = 1 / read_bandwidth``)."""
    constants = ("connect_seconds", "network_bandwidth", "startup_sequential_seconds",
                 "startup_random_seconds", "read_bandwidth", "write_bandwidth")
    defaults = type(layout_config)()
    untouched = all(getattr(layout_config, k) == getattr(defaults, k) for k in constants)
    source = layout_config.calibrated or (PAPER_SOURCE if untouched else "site config [layout]")
    return ModelParams(e=layout_config.connect_seconds,
                       v=1 / layout_config.network_bandwidth,
                       alpha_sequential=layout_config.startup_sequential_seconds,
                       alpha_random=layout_config.startup_random_seconds,
                       beta_read=1 / layout_config.read_bandwidth,
                       beta_write=1 / layout_config.write_bandwidth,
                       source=source)


@dataclass(frozen=True)
class Cost:
    """Seconds of one request per process, by the four terms of Table 2."""

    establish: float
    transmission: float
    startup: float
    transfer: float

    @property
    def total(self) -> float:
        return self.establish + self.transmission + self.startup + self.transfer

    def scaled(self, factor: float) -> Cost:
        return Cost(self.establish * factor, self.transmission * factor,
                    self.startup * factor, self.transfer * factor)

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.establish + other.establish, self.transmission + other.transmission,
                    self.startup + other.startup, self.transfer + other.transfer)


ZERO = Cost(0.0, 0.0, 0.0, 0.0)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def check_shape(processes: int, per_node: int, osts: int, request_size: int,
                groups: int | None = None) -> None:
    """Refuse what the model has no meaning for, naming the quantity."""
    if processes < 1:
        raise InputError(f"processes {processes}: expected at least 1")
    if not 1 <= per_node <= processes:
        raise InputError(f"processes per node {per_node}: expected 1..{processes} (the "
                         f"processes)")
    if osts < 1:
        raise InputError(f"OST count {osts}: expected at least 1")
    if request_size < 1:
        raise InputError(f"request size {request_size}: expected at least 1 byte")
    if groups is not None and not 1 <= groups <= osts:
        raise InputError(f"storage groups {groups}: expected 1..{osts} (the OSTs)")


def request_cost(layout: str, processes: int, per_node: int, osts: int, request_size: int,
                 params: ModelParams, *, operation: str = READ, pattern: str = SEQUENTIAL,
                 groups: int | None = None) -> Cost:
    """Table 2: the cost of one request of ``request_size`` bytes by each of ``processes``
    processes (``per_node`` on a client node) over ``osts`` OSTs in ``layout``; ``groups`` is
    the 2-D layout's ``g``."""
    p, m, n, s = processes, per_node, osts, request_size
    check_shape(p, m, n, s, groups)
    e, v = params.e, params.v
    alpha, beta = params.alpha(pattern), params.beta(operation)
    if layout == ONE_DV:
        per_ost = _ceil_div(p, n)
        # the larger of the serial connections on a client node (m) and on an OST
        serial = m if p <= n or m > per_ost else per_ost
        return Cost(serial * e, serial * s * v, per_ost * alpha, per_ost * s * beta)
    if layout == ONE_DH:
        if m <= _ceil_div(p, n):
            establish, transmission = p * e, p * s * v / n
        else:
            establish, transmission = m * n * e, m * s * v
        return Cost(establish, transmission, p * alpha, p * s * beta / n)
    if layout == TWO_D:
        if groups is None:
            raise InputError("2-D layout: the number of storage groups g is needed")
        g = groups
        per_group = _ceil_div(p, g)        # processes one group (so one of its OSTs) serves
        group_osts = _ceil_div(n, g)       # OSTs each process's data is striped over
        if p <= g:
            establish, transmission = m * group_osts * e, m * s * v
        elif m * group_osts <= per_group:  # m <= ceil(p/g) / ceil(n/g), in integers
            establish, transmission = per_group * e, per_group * s * v / group_osts
        else:
            establish, transmission = m * group_osts * e, m * s * v
        return Cost(establish, transmission, per_group * alpha,
                    per_group * s * beta / group_osts)
    raise InputError(f"layout {layout!r}: expected one of {', '.join(LAYOUTS)}")


def group_choices(osts: int) -> list[int]:
    """The 2-D group counts worth trying: every ``g`` with ``2 <= g <= n - 1`` that divides
    ``n``, so that the groups split the OSTs evenly (with ``g`` not dividing ``n``, ``g``
    groups of ``ceil(n/g)`` OSTs would need more OSTs than there are). ``g = n`` gives exactly
    1-DV's costs and ``g = 1`` is 1-DH's striping, so neither is 2-D proper. Empty for fewer
    than 4 OSTs or a prime number of them."""
    return [g for g in range(2, osts) if osts % g == 0]


def group_size(osts: int, groups: int) -> int:
    """OSTs in one storage group, ``ceil(n/g)``."""
    return math.ceil(osts / groups)
