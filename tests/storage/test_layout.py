"""Stripe arithmetic against a byte-by-byte model of Lustre RAID-0."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from scratchkeeper.errors import InputError
from scratchkeeper.storage import (
    Extent,
    FileLayout,
    LayoutComponent,
    LayoutRequest,
    StripeObject,
    merge_extents,
    parse_ost_list,
    parse_size,
    subtract_extents,
)

UNIT = 65536


def component(stripe_count: int, stripe_units: int, **kwargs) -> LayoutComponent:
    return LayoutComponent(stripe_size=stripe_units * UNIT,
                           objects=tuple(StripeObject(i, f"o{i}") for i in range(stripe_count)),
                           **kwargs)


def owner_of(comp: LayoutComponent, offset: int) -> int:
    """The model: stripe number = offset // stripe_size, dealt round-robin over the objects."""
    return (offset // comp.stripe_size) % comp.stripe_count


@settings(max_examples=min(60, settings.default.max_examples), deadline=None)  # slow: bounded
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


@settings(max_examples=min(60, settings.default.max_examples), deadline=None)  # slow: bounded
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
@settings(deadline=None)
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


# -- the layout attribute (docs/mount.rst) ---------------------------------------------------------
from scratchkeeper.errors import StorageError  # noqa: E402
from scratchkeeper.storage.layout import DirDefault  # noqa: E402

OID_A, OID_B, OID_C = "0" * 31 + "a", "f" * 32, "0123456789abcdef" * 2


def test_lov_text_is_the_documented_format():
    layout = FileLayout((
        LayoutComponent(1 << 20, (StripeObject(3, OID_A), StripeObject(10000, OID_B)),
                        comp_id=65537, mirror_id=1, pool="flash"),
        LayoutComponent(4 * UNIT, (StripeObject(0, OID_C),), extent_start=0, extent_end=8 << 20,
                        comp_id=131074, mirror_id=2, flags="init,stale"),
    ), 7, "/scratch/f")
    text = layout.to_lov()
    assert text == (
        b"lov 1 gen=7\n"
        b"comp id=65537 mirror=1 start=0 end=eof stripe_size=1048576 pattern=raid0 "
        b"flags=init pool=flash\n"
        b"obj 3 " + OID_A.encode() + b"\n"
        b"obj 10000 " + OID_B.encode() + b"\n"
        b"comp id=131074 mirror=2 start=0 end=8388608 stripe_size=262144 pattern=raid0 "
        b"flags=init,stale pool=-\n"
        b"obj 0 " + OID_C.encode() + b"\n")
    back = FileLayout.from_lov(text, "/scratch/f")
    assert back == layout and back.path == "/scratch/f" and back.layout_gen == 7


@settings(max_examples=min(60, settings.default.max_examples), deadline=None)  # slow: bounded
@given(gen=st.integers(0, 1 << 40), comps=st.lists(st.tuples(
    st.integers(1, 64), st.lists(st.integers(0, 65535), min_size=1, max_size=8, unique=True),
    st.integers(0, 3), st.one_of(st.none(), st.sampled_from(["flash", "a.b-c_1"]))),
    min_size=1, max_size=4))
def test_lov_round_trips(gen, comps):
    components = tuple(
        LayoutComponent(units * UNIT, tuple(StripeObject(o, f"{n:04x}{o:028x}")
                                            for o in osts),
                        comp_id=n + 1, mirror_id=mirror, pool=pool)
        for n, (units, osts, mirror, pool) in enumerate(comps))
    layout = FileLayout(components, gen, "/s/x")
    assert FileLayout.from_lov(layout.to_lov(), "/s/x") == layout


GOOD = (b"lov 1 gen=2\ncomp id=1 mirror=0 start=0 end=eof stripe_size=65536 pattern=raid0 "
        b"flags=init pool=-\nobj 0 " + OID_A.encode() + b"\n")


@pytest.mark.parametrize("data, says", [
    (GOOD.replace(b"lov 1", b"lov 2"), "unknown version"),
    (GOOD[:-1], "newline"),
    (GOOD.replace(b" gen=2", b""), "expected 'lov 1 gen=G'"),
    (GOOD.replace(b"gen=2", b"gen=-2"), "not a decimal"),
    (GOOD.replace(b"gen=2", b"gen=02"), "not a decimal"),
    (GOOD.replace(b"stripe_size=65536", b"stripe_size=65537"), "not a multiple of 64 KiB"),
    (GOOD.replace(b"stripe_size=65536", b"stripe_size=0"), "out of range"),
    (GOOD.replace(b" pool=-", b""), "expected"),
    (GOOD.replace(b"mirror=0 start", b"start"), "expected id= mirror="),
    (GOOD.replace(b"mirror=0", b"mirrors=0"), "expected mirror="),
    (GOOD.replace(b"end=eof", b"end=0"), "out of range"),
    (GOOD.replace(b"pattern=raid0", b"pattern=mdt"), "pattern"),
    (GOOD.replace(b"flags=init", b"flags=init,init"), "flags"),
    (GOOD.replace(b"flags=init", b"flags=bogus"), "flags"),
    (GOOD.replace(b"pool=-", b"pool=a/b"), "pool"),
    (GOOD.replace(b"obj 0 ", b"obj 65536 "), "out of range"),
    (GOOD.replace(OID_A.encode(), OID_A.upper().encode()), "32 lower-case hex"),
    (GOOD.replace(OID_A.encode(), OID_A[:-1].encode()), "32 lower-case hex"),
    (GOOD + b"obj 0 " + OID_A.encode() + b"\n", "listed twice"),
    (GOOD + b"\n", "expected a comp or obj line"),
    (GOOD.replace(b"  ", b" ").replace(b"obj 0", b"obj  0"), "expected 'obj OST"),
    (b"lov 1 gen=2\n", "no component"),
    (GOOD.split(b"obj")[0], "has no object"),
    (b"lov 1 gen=2\nobj 0 " + OID_A.encode() + b"\n", "before any component"),
    (GOOD.replace(b"lov", b"l\xc3\xb6v"), "not ASCII"),
    (b"", "newline"),
])
def test_lov_parser_refuses_anything_else(data, says):
    with pytest.raises(StorageError) as caught:
        FileLayout.from_lov(data, "/scratch/bad")
    message = str(caught.value)
    assert message.startswith("/scratch/bad: corrupt layout attribute "
                              "(security.scratchkeeper.lov): ")
    assert says in message and "\n" not in message


def test_to_lov_refuses_a_layout_the_format_cannot_hold():
    bad = FileLayout((LayoutComponent(UNIT, (StripeObject(0, "o0"),)),), 0, "/s/y")
    with pytest.raises(StorageError, match="/s/y: corrupt layout"):
        bad.to_lov()


def test_dir_default_round_trips_and_refuses_garbage():
    for default in (DirDefault(4, 1 << 20), DirDefault(-1, UNIT, "flash")):
        assert DirDefault.from_xattr(default.to_xattr(), "/d") == default
    assert DirDefault(2, UNIT, "p").to_xattr() == b"stripe_count=2 stripe_size=65536 pool=p"
    assert DirDefault.from_xattr(b"stripe_count=2 stripe_size=65536\n", "/d") == \
        DirDefault(2, UNIT)
    for bad in (b"stripe_count=0 stripe_size=65536", b"stripe_size=65536 stripe_count=2",
                b"stripe_count=2 stripe_size=1000", b"stripe_count=2", b"",
                b"stripe_count=2 stripe_size=65536 pool=", b"stripe_count=2 stripe_size=65536 x=1",
                b"stripe_count=-2 stripe_size=65536"):
        with pytest.raises(StorageError, match="^/d: corrupt default layout attribute"):
            DirDefault.from_xattr(bad, "/d")
