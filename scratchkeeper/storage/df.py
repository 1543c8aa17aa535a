"""``store df -h``: the OSTs' space in the columns and units of ``lfs df -h``.

The format follows Lustre's ``lfs df -h`` as its manual page (``lfs-df(1)``: ``-h`` prints
sizes in human-readable units, powers of 1024) and the samples in Lustre's and Amazon FSx for
Lustre's documentation show it::

    UUID                       bytes        Used   Available Use% Mounted on
    fsx-MDT0000_UUID          102.8G      216.1M      102.6G   0% /fsx[MDT:0]
    fsx-OST0000_UUID            1.1T       44.6M        1.1T   0% /fsx[OST:0]

    filesystem_summary:         3.3T      134.8M        3.3T   0% /fsx

a UUID left-aligned in 20 columns, three sizes right-aligned in 12 with one decimal and a unit
letter (K, M, G, T, P, E), ``Use%`` as ``used / (used + available)`` rounded, the mount point
with ``[OST:index]``; an OST that cannot answer is one line ``NAME : why`` (as ``lfs df`` prints
``OST0002 : inactive device``); a blank line, then the summary over the OSTs that answered.
There is no MDT line: the backends report OSTs only.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import OstStatus

_UNITS = "KMGTPE"


def human_size(value: int) -> str:
    """``lfs df -h``'s size: ``44.6M``, ``1.1T`` (powers of 1024); under 1 KiB, the bytes."""
    if value < 1024:
        return str(value)
    size = float(value)
    for unit in _UNITS:
        size /= 1024
        if size < 1024 or unit == _UNITS[-1]:
            return f"{size:.1f}{unit}"
    raise AssertionError("unreachable")  # the loop returns at the last unit


def use_percent(used: int, available: int) -> int:
    """``Use%``: the used share of what the OST can hold for files, rounded."""
    if used + available <= 0:
        return 0
    return int(used * 100 / (used + available) + 0.5)


@dataclass(frozen=True)
class DfSummary:
    total_bytes: int
    used_bytes: int
    available_bytes: int


def summary(osts: list[OstStatus], *, shared_space: bool = False) -> DfSummary | None:
    """The ``filesystem_summary`` of the OSTs that report their space (None: none does).

    ``shared_space``: every OST is a directory of one file system (the local store's
    ``store_root``), each reporting that file system's size and free space: those count once,
    the bytes each OST's objects use add up. Otherwise (Lustre) every figure adds up.
    """
    known = [o for o in osts if o.total_bytes is not None and o.available_bytes is not None]
    if not known:
        return None
    used = sum(o.used_bytes or 0 for o in known)
    if shared_space:
        return DfSummary(max(o.total_bytes or 0 for o in known), used,
                         max(o.available_bytes or 0 for o in known))
    return DfSummary(sum(o.total_bytes or 0 for o in known), used,
                     sum(o.available_bytes or 0 for o in known))


def human_lines(osts: list[OstStatus], mount: str, *, shared_space: bool = False) -> list[str]:
    """The lines ``lfs df -h MOUNT`` would print for these OSTs."""
    lines = [f"{'UUID':<20}{'bytes':>12}{'Used':>12}{'Available':>12} Use% Mounted on"]
    for ost in osts:
        if ost.total_bytes is None or ost.available_bytes is None:
            why = ost.state + (f": {ost.detail}" if ost.detail else "")
            lines.append(f"{ost.name:<20}: {why}")
            continue
        used = "-" if ost.used_bytes is None else human_size(ost.used_bytes)
        percent = ("  -" if ost.used_bytes is None
                   else f"{use_percent(ost.used_bytes, ost.available_bytes):3d}")
        lines.append(f"{ost.name + '_UUID':<20}{human_size(ost.total_bytes):>12}{used:>12}"
                     f"{human_size(ost.available_bytes):>12} {percent}% "
                     f"{mount}[OST:{ost.ost_index}]")
    total = summary(osts, shared_space=shared_space)
    if total is not None:
        lines.append("")
        lines.append(f"{'filesystem_summary:':<20}{human_size(total.total_bytes):>12}"
                     f"{human_size(total.used_bytes):>12}"
                     f"{human_size(total.available_bytes):>12} "
                     f"{use_percent(total.used_bytes, total.available_bytes):3d}% {mount}")
    return lines
