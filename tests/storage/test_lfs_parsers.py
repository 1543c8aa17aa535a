"""The ``lfs`` output parsers on captured samples (``tests/data/lfs``, formats in docs/storage.rst)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scratchkeeper.errors import StorageError
from scratchkeeper.storage import OST_ACTIVE, OST_INACTIVE, OST_UNREACHABLE, Extent, LayoutRequest
from scratchkeeper.storage.lustre import lfs

DATA = Path(__file__).resolve().parent.parent / "data" / "lfs"


def sample(name: str) -> str:
    return (DATA / name).read_text()


def test_plain_layout():
    layout = lfs.parse_getstripe_yaml(sample("getstripe_plain.yaml"), "/mnt/testfs/f")
    assert layout.stripe_count == 4 and layout.stripe_size == 1 << 20
    assert layout.ost_list == (2, 3, 0, 1)
    assert layout.first.objects[0].object_id == "0x100020000:0x4a2:0x0"
    assert layout.mirror_ids == [0] and not layout.is_composite


def test_plain_layout_with_pool():
    layout = lfs.parse_getstripe_yaml(sample("getstripe_pool.yaml"))
    assert (layout.first.pool, layout.ost_list, layout.layout_gen) == ("flash", (5, 7), 3)


def test_progressive_file_layout():
    layout = lfs.parse_getstripe_yaml(sample("getstripe_pfl.yaml"), "/mnt/testfs/pfl")
    assert layout.layout_gen == 3
    first, second, third = layout.components
    assert (first.extent_start, first.extent_end, first.ost_list) == (0, 1 << 20, (0,))
    assert (second.extent_start, second.extent_end) == (1 << 20, 256 << 20)
    assert second.ost_list == (1, 2, 3, 0)
    assert third.extent_end is None and not third.instantiated
    # Lustre stripes a component by absolute file offset: byte 1 MiB + 1 is stripe 1 of the
    # second component, its second object (OST 2)
    component = layout.component_at((1 << 20) + 1)
    assert component.objects[component.position_of((1 << 20) + 1)].ost_index == 2
    # OST 0 holds the first MiB and every fourth MiB of the second component
    extents = layout.extents_on_ost(0, 8 << 20)
    assert extents[0].offset == 0 and extents[0].length == 1 << 20
    assert [e.offset >> 20 for e in extents[1:]] == [3, 7]


def test_mirrored_layout():
    layout = lfs.parse_getstripe_yaml(sample("getstripe_mirrored.yaml"), "/mnt/testfs/flr")
    assert layout.mirror_ids == [1, 2]
    assert layout.osts(1) == {0, 1} and layout.osts(2) == {3, 4, 5}
    assert [c.pool for c in layout.components] == ["flash", "archive"]
    # losing OST 1 loses nothing: mirror 2 still has every byte
    assert layout.lost_extents([1], 10 << 20) == []
    # bytes are lost only where every mirror lost them: OSTs 4 (mirror 2) and 0, 1 (all of mirror 1)
    assert layout.lost_extents([1, 4], 10 << 20) == []
    assert layout.lost_extents([0, 1, 4], 10 << 20) == [Extent(4 << 20, 4 << 20)]


def test_default_output_without_yaml_parses_the_same():
    """Plain ``lfs getstripe`` (no --yaml) prints the path and no ``componentN:`` headers."""
    default = lfs.parse_getstripe_yaml(sample("getstripe_mirrored_default.txt"), "/mnt/f")
    assert default == lfs.parse_getstripe_yaml(sample("getstripe_mirrored.yaml"), "/mnt/f")


def test_garbage_is_refused():
    with pytest.raises(StorageError):
        lfs.parse_getstripe_yaml("error: getstripe: no such file\n", "/x")


def test_df_active_inactive_and_unreachable():
    osts = lfs.parse_df(sample("df.txt"))
    assert [o.ost_index for o in osts] == [0, 1, 2, 3, 4]
    assert osts[0].state == OST_ACTIVE and osts[0].available_bytes == 37850660 * 1024
    assert osts[0].name == "testfs-OST0000"
    assert osts[2].state == OST_INACTIVE
    assert osts[3].state == OST_ACTIVE and osts[3].detail == "flags D"
    assert osts[4].state == OST_UNREACHABLE
    assert lfs.fsname_of(osts) == "testfs"


def test_find_print0_keeps_spaces():
    paths = lfs.parse_find_print0((DATA / "find_ost.print0").read_bytes().decode())
    assert paths == ["/mnt/testfs/u1/input.dat", "/mnt/testfs/u2/run 7/mesh.h5"]


def test_argv_builders():
    request = LayoutRequest(stripe_size=4 << 20, ost_list=(3, 1), pool="flash")
    assert lfs.setstripe_argv("lfs", "/mnt/f", request, default_count=4, default_size=1 << 20) \
        == ["lfs", "setstripe", "-c", "2", "-S", str(4 << 20), "-o", "3,1", "-p", "flash", "/mnt/f"]
    assert lfs.mirror_split_argv("lfs", "/mnt/f", 2) == ["lfs", "mirror", "split", "--mirror-id",
                                                         "2", "-d", "/mnt/f"]
    assert lfs.ping_argv("lctl", "testfs", 26) == ["lctl", "set_param",
                                                   "osc.testfs-OST001a-osc-*.ping=1"]
