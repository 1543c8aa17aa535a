"""A file's copies by a read-QoS scheme: the pure choice (file_copies) and the store's mirrors
(store replicate)."""

from __future__ import annotations

import os

import pytest

from scratchkeeper.errors import InputError, QosError
from scratchkeeper.qos.designs import design_for
from scratchkeeper.qos.files import replicate
from scratchkeeper.qos.placement import (
    chained_allocation,
    design_allocation,
    file_copies,
    mirrored_allocation,
)
from scratchkeeper.storage.layout import LayoutRequest
from scratchkeeper.storage.local import LocalStripedStore


def check_copies(allocation, primary, copies):
    """Every stripe's devices form one bucket; no device is used twice by the file."""
    assert len(copies) == allocation.copies - 1
    buckets = {frozenset(b) for b in allocation.replicas}
    for k, device in enumerate(primary):
        assert frozenset((device, *(copy[k] for copy in copies))) in buckets
    every = list(primary) + [d for copy in copies for d in copy]
    assert len(every) == len(set(every))


@pytest.mark.parametrize("primary", [(0, 1, 2), (0, 4, 8), (5,), (3, 7)])
def test_design_copies_are_disjoint_blocks_through_the_primary(primary):
    allocation = design_allocation(design_for(9, 3))
    copies = file_copies(allocation, primary)
    check_copies(allocation, primary, copies)


def test_mirrored_and_chained_copies_and_what_they_cannot_place():
    mirrored = mirrored_allocation(9, 3, 36)
    check_copies(mirrored, (0, 3, 6), file_copies(mirrored, (0, 3, 6)))
    assert file_copies(mirrored, (0, 3, 6)) == [(1, 4, 7), (2, 5, 8)]
    with pytest.raises(QosError, match="no disjoint buckets"):
        file_copies(mirrored, (0, 1, 2))        # one group: its copies collide
    chained = chained_allocation(9, 3, 9)
    assert file_copies(chained, (0, 3, 6)) == [(1, 4, 7), (2, 5, 8)]
    with pytest.raises(QosError, match="need 12 devices"):
        file_copies(design_allocation(design_for(9, 3)), (0, 1, 2, 3))
    with pytest.raises(QosError, match="repeat"):
        file_copies(chained, (0, 0))


def test_replicate_gives_a_file_its_design_copies_all_or_none(tmp_path, monkeypatch):
    (tmp_path / "scratch").mkdir()
    store = LocalStripedStore(str(tmp_path / "scratch"), str(tmp_path / "store"), ost_count=9,
                              default_stripe_count=3, default_stripe_size=65536)
    data = os.urandom(5 * 65536)
    store.create("f", LayoutRequest(ost_list=(0, 4, 8)))
    store.write("f", 0, data)
    layout = replicate(store, "f", list(range(9)))
    assert layout.mirror_ids == [1, 2, 3]
    allocation = design_allocation(design_for(9, 3))
    primary = layout.mirror(1)[0].ost_list
    check_copies(allocation, primary, [layout.mirror(m)[0].ost_list for m in (2, 3)])
    assert store.read("f", 0, len(data)) == data
    with pytest.raises(InputError, match="has mirrors"):
        replicate(store, "f", list(range(9)))
    # the second mirror fails: the first is removed again
    store.create("g", LayoutRequest(ost_list=(0, 1, 2)))
    store.write("g", 0, data)
    original, calls = store.add_mirror, []

    def failing(path, request):
        calls.append(request)
        if len(calls) == 2:
            raise QosError("injected: the second mirror fails")
        return original(path, request)
    monkeypatch.setattr(store, "add_mirror", failing)
    with pytest.raises(QosError, match="injected"):
        replicate(store, "g", list(range(9)))
    left = store.layout("g")                   # one copy again (a mirrored file stays FLR)
    assert len(left.mirror_ids) == 1 and left.ost_list == (0, 1, 2)
    assert store.read("g", 0, len(data)) == data
    store.create("h", LayoutRequest(ost_list=(0, 1, 2)))
    with pytest.raises(InputError, match="not among"):
        replicate(store, "h", [1, 2, 3, 4, 5, 6, 7, 8])
