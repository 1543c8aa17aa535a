"""A file's copies placed by an allocation scheme (docs/qos.rst "Files placed by a design"):
the c - 1 mirrors of a plain striped file, stripe k's copies on the other devices of a bucket
that holds its primary's device (:func:`scratchkeeper.qos.placement.file_copies`), the devices
being a pool's OSTs (or all of the store's) in ascending order."""

from __future__ import annotations

from ..errors import InputError, QosError, ScratchkeeperError
from ..storage.base import StorageBackend
from ..storage.layout import FileLayout, LayoutRequest
from .designs import design_for
from .placement import Allocation, chained_allocation, design_allocation, file_copies, mirrored_allocation

SCHEMES = ("design", "mirrored", "chained")


def allocation_for(scheme: str, devices: int, copies: int) -> Allocation:
    if scheme == "design":
        return design_allocation(design_for(devices, copies))
    if scheme == "mirrored":
        return mirrored_allocation(devices, copies, devices * (devices - 1) // (copies - 1))
    if scheme == "chained":
        return chained_allocation(devices, copies, devices)
    raise InputError(f"scheme {scheme!r}: expected one of {', '.join(SCHEMES)}")


def replicate(backend: StorageBackend, path: str, osts: list[int], *, scheme: str = "design",
              copies: int = 3) -> FileLayout:
    """Give the plain file at ``path`` its ``copies - 1`` mirrors by ``scheme`` over ``osts``;
    all or none (a mirror added before a failure is removed again)."""
    osts = sorted(osts)
    layout = backend.layout(path)
    if len(layout.mirror_ids) > 1 or layout.is_composite:
        raise InputError(f"{layout.path}: has mirrors or components already; a plain file is "
                         "replicated by a scheme")
    device_of = {ost: d for d, ost in enumerate(osts)}
    outside = [o for o in layout.ost_list if o not in device_of]
    if outside:
        raise InputError(f"{layout.path}: its OSTs {outside} are not among the scheme's OSTs "
                         f"{osts}")
    allocation = allocation_for(scheme, len(osts), copies)
    try:
        mirrors = file_copies(allocation, tuple(device_of[o] for o in layout.ost_list))
    except QosError as err:
        raise QosError(f"{layout.path}: {err}") from None
    added: list[int] = []
    try:
        for devices in mirrors:
            layout = backend.add_mirror(path, LayoutRequest(
                ost_list=tuple(osts[d] for d in devices), stripe_size=layout.stripe_size))
            added.append(max(layout.mirror_ids))
    except (ScratchkeeperError, OSError):
        for mirror_id in reversed(added):
            backend.remove_mirror(path, mirror_id)
        raise
    return layout
