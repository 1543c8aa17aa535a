"""Lustre-only behaviour on the fake ``lfs``: the commands issued and EIO mapped to an OST."""

from __future__ import annotations

import errno

import pytest

from scratchkeeper.errors import InputError, StorageError, TargetUnavailable
from scratchkeeper.storage import LayoutRequest


def commands(fake, *words):
    return [argv for argv in fake.calls if list(argv[1:1 + len(words)]) == list(words)]


def test_an_io_error_names_the_ost_of_the_stripe(lustre_backend):
    layout = lustre_backend.create("f", LayoutRequest(stripe_size=65536, ost_list=(6, 2, 4)))
    lustre_backend.write(layout.path, 0, bytes(400_000))
    error = lustre_backend._io_error(layout.path, 3 * 65536 + 5 + 65536,
                                     OSError(errno.EIO, "Input/output error"))
    assert isinstance(error, TargetUnavailable)
    assert error.ost_index == 2 and error.path == layout.path


def test_mirror_is_verified_after_extend(fake_lustre, lustre_backend):
    layout = lustre_backend.create("m", LayoutRequest(stripe_count=2))
    lustre_backend.add_mirror(layout.path)
    extend = commands(fake_lustre, "mirror", "extend")
    verify = commands(fake_lustre, "mirror", "verify")
    assert extend and verify
    assert fake_lustre.calls.index(verify[0]) > fake_lustre.calls.index(extend[0])


def test_a_preferred_mirror_is_extended_with_flags_prefer(fake_lustre, lustre_backend):
    """tierd's replicas: ``lfs mirror extend -N --flags=prefer -p POOL`` (as Lustre's own
    sanity-flr tests run it), and getstripe's lcme_flags read back."""
    layout = lustre_backend.create("p", LayoutRequest(stripe_count=1))
    mirrored = lustre_backend.add_mirror(layout.path, LayoutRequest(prefer=True))
    extend = commands(fake_lustre, "mirror", "extend")[-1]
    at = list(extend).index("extend")
    assert list(extend[at + 1:at + 3]) == ["-N", "--flags=prefer"]
    newest = mirrored.mirror(max(mirrored.mirror_ids))
    assert "prefer" in newest[0].flags.split(",")
    plain = lustre_backend.add_mirror(layout.path)
    assert "prefer" not in plain.mirror(max(plain.mirror_ids))[0].flags.split(",")


def test_rebuild_goes_through_setstripe_on_substitutes_and_swap_layouts(fake_lustre,
                                                                        lustre_backend):
    layout = lustre_backend.create("r", LayoutRequest(stripe_size=65536, ost_list=(0, 1, 2)))
    data = bytes(range(256)) * 1000
    lustre_backend.write(layout.path, 0, data)
    rebuild = lustre_backend.begin_rebuild(layout.path, {1: 5})
    temp_setstripe = commands(fake_lustre, "setstripe")[-1]
    assert temp_setstripe[temp_setstripe.index("-o") + 1] == "0,5,2"
    for extent in rebuild.lost:
        lustre_backend.write_rebuild(rebuild, extent.offset, data[extent.offset:extent.end])
    lustre_backend.commit_rebuild(rebuild)
    assert commands(fake_lustre, "swap_layouts")
    assert lustre_backend.list_dir("") == ["r"]  # the temporary file is gone


def test_composite_files_are_not_rebuilt_in_place(lustre_backend):
    layout = lustre_backend.create("c", LayoutRequest(stripe_count=2))
    lustre_backend.add_mirror(layout.path)
    with pytest.raises(StorageError, match="composite"):
        lustre_backend.begin_rebuild(layout.path, {layout.ost_list[0]: 7})


def test_drop_cache_asks_the_osts_with_ladvise_dontneed(fake_lustre, lustre_backend):
    layout = lustre_backend.create("cached", LayoutRequest(stripe_count=2))
    lustre_backend.write(layout.path, 0, bytes(300_000))
    lustre_backend.drop_cache("cached")
    assert fake_lustre.advised == [("dontneed", 0, 300_000, layout.path)]
    assert commands(fake_lustre, "ladvise") == [
        ("lfs", "ladvise", "-a", "dontneed", "-s", "0", "-e", "300000", layout.path)]
    empty = lustre_backend.create("empty")
    lustre_backend.drop_cache(empty.path)  # an empty file: the range is [0, 1)
    assert fake_lustre.advised[-1] == ("dontneed", 0, 1, empty.path)
    with pytest.raises(InputError, match="no such file"):
        lustre_backend.drop_cache("absent")
