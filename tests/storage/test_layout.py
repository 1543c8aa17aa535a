"""Stripe arithmetic against a byte-by-byte model of Lustre RAID-0."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scratchkeeper.errors import InputError
from scratchkeeper.storage import (Extent, FileLayout, LayoutComponent, LayoutRequest,
                                   StripeObject, merge_extents, parse_ost_list, parse_size,
                                   subtract_extents)

UNIT = 65536


def component(stripe_count: int, stripe_units: int, **kwargs) -> LayoutComponent:
    return LayoutComponent(stripe_size=stripe_units * UNIT,
                           objects=tuple(StripeObject(i, f"o{i}") for i in range(stripe_count)),
                           **kwargs)


def owner_of(comp: LayoutComponent, offset: int) -> int:
    """The model: stripe number = offset // stripe_size, dealt round-robin over the objects."""
    return (offset // comp.stripe_size) % comp.stripe_count


@settings(max_examples=60, deadline=None)
@given(count=st.integers(1, 32), units=st.integers(1, 8), size=st.integers(0, 3_000_000))
def test_extents_of_all_positions_partition_the_file(count, units, size):
    comp = component(count, units)
    covered = []
    for position in range(count):
        extents = comp.extents_at_position(position, size)
        for extent in extents:
            assert owner_of(comp, extent.offset) == position
            assert owner_of(comp, extent.end - 1) == position
        covered += extents
    assert merge_extents(covered) == ([Extent(0, size)] if size else [])
    assert sum(e.length for e in covered) == size


@settings(max_examples=60, deadline=None)
@given(count=st.integers(1, 16), units=st.integers(1, 4), offset=st.integers(0, 2_000_000),
       length=st.integers(0, 700_000))
def test_pieces_cover_the_range_in_order_and_map_to_dense_objects(count, units, offset, length):
    comp = component(count, units)
    pieces = list(comp.pieces(offset, length))
    assert sum(p.length for p in pieces) == length
    position = offset
    for piece in pieces:
        assert piece.file_offset == position
        assert piece.position == owner_of(comp, position)
        # the object holds its stripes back to back
        stripe_number = position // comp.stripe_size
        assert piece.object_offset == (stripe_number // count) * comp.stripe_size + \
            position % comp.stripe_size
        position += piece.length


def test_object_size_is_the_end_of_its_last_stripe():
    comp = component(4, 1)
    size = 5 * UNIT + 100  # stripes 0..5, the last one partial, on position 1
    assert comp.object_size(1, size) == UNIT + 100
    assert comp.object_size(0, size) == 2 * UNIT
    assert comp.object_size(3, size) == UNIT


@pytest.mark.parametrize("count", [1, 2, 4, 8, 16, 32])
def test_lost_bytes_are_one_stripe_in_count(count):
    size = 7_777_777
    layout = FileLayout((component(count, 1),))
    lost = layout.lost_extents([count - 1], size)
    assert sum(e.length for e in lost) == sum(
        min(UNIT, size - s * UNIT) for s in range(count - 1, -(-size // UNIT), count))


def test_mirrors_only_lose_what_all_copies_lose():
    first = component(2, 1, mirror_id=1)
    second = LayoutComponent(stripe_size=UNIT, objects=(StripeObject(2, "a"),
                                                        StripeObject(3, "b")), mirror_id=2)
    layout = FileLayout((first, second))
    assert layout.lost_extents([0], 4 * UNIT) == []
    assert layout.lost_extents([0, 2], 4 * UNIT) == [Extent(0, UNIT), Extent(2 * UNIT, UNIT)]


def test_extent_subtraction():
    assert subtract_extents([Extent(0, 100)], [Extent(10, 10), Extent(50, 60)]) == \
        [Extent(0, 10), Extent(20, 30)]


_EXTENTS = st.lists(st.builds(Extent, st.integers(0, 300), st.integers(0, 40)), max_size=12)


@given(extents=_EXTENTS, removed=_EXTENTS)
@settings(max_examples=400, deadline=None)
def test_extent_subtraction_matches_a_byte_set(extents, removed):
    """Unsorted, overlapping, touching, empty, cuts spanning several extents: byte for byte."""
    def byte_set(items):
        return {b for e in items for b in range(e.offset, e.end)}
    result = subtract_extents(extents, removed)
    assert byte_set(result) == byte_set(extents) - byte_set(removed)
    assert result == merge_extents(result)  # sorted, disjoint, not touching, none empty


def test_layout_json_roundtrip():
    layout = FileLayout((component(3, 2, pool="flash"),), 4, "/s/f")
    assert FileLayout.from_dict(layout.to_dict()) == layout


@pytest.mark.parametrize("text,value", [("64k", 65536), ("1M", 1 << 20), ("4MiB", 4 << 20),
                                        ("131072", 131072)])
def test_parse_size(text, value):
    assert parse_size(text) == value


def test_parse_ost_list_and_errors():
    assert parse_ost_list("1,3,5-7") == (1, 3, 5, 6, 7)
    with pytest.raises(InputError):
        parse_ost_list("1,x")
    with pytest.raises(InputError):
        parse_size("12Q")
    with pytest.raises(InputError, match="does not match"):
        LayoutRequest(stripe_count=3, ost_list=(1, 2)).check()
