"""The storage interface contract: every test runs on the local store and on Lustre (fake lfs)."""

from __future__ import annotations

import os
import random
import time

import pytest

from scratchkeeper.errors import InputError, StorageError
from scratchkeeper.storage import OST_ACTIVE, Extent, LayoutRequest

SOURCE = "user.scratchkeeper.source"


def payload(size: int, seed: int = 1) -> bytes:
    return random.Random(seed).randbytes(size)


def put(backend, path: str, data: bytes, request: LayoutRequest = LayoutRequest()):
    layout = backend.create(path, request)
    backend.write(layout.path, 0, data)
    return backend.layout(layout.path)


def test_create_honours_count_size_and_ost_list(backend):
    layout = backend.create("a/one", LayoutRequest(stripe_count=3, stripe_size=131072))
    assert layout.stripe_count == 3 and layout.stripe_size == 131072
    explicit = backend.create("a/two", LayoutRequest(stripe_size=65536, ost_list=(5, 1, 3)))
    assert explicit.ost_list == (5, 1, 3)
    assert backend.stat("a/two").size == 0


def test_create_refuses_existing_file(backend):
    backend.create("dup")
    with pytest.raises(InputError, match="exists"):
        backend.create("dup")


@pytest.mark.parametrize("bad", [LayoutRequest(stripe_size=1000), LayoutRequest(stripe_count=0),
                                 LayoutRequest(ost_list=(1, 1))])
def test_bad_layout_request_is_input_error(backend, bad):
    with pytest.raises(InputError):
        backend.create("bad", bad)
    assert not backend.exists("bad")


def test_write_then_read_any_range(backend):
    data = payload(700_001)
    layout = put(backend, "u/data", data, LayoutRequest(stripe_count=4, stripe_size=65536))
    assert backend.stat(layout.path).size == len(data)
    rng = random.Random(7)
    for _ in range(20):
        offset = rng.randrange(len(data))
        length = rng.randrange(1, 300_000)
        assert backend.read(layout.path, offset, length) == data[offset:offset + length]
    assert backend.read(layout.path, len(data) + 5, 10) == b""
    assert b"".join(backend.open_reader(layout.path, chunk_size=100_000)) == data


def test_overwrite_in_the_middle_and_extend(backend):
    data = bytearray(payload(200_000))
    layout = put(backend, "u/grow", bytes(data), LayoutRequest(stripe_count=2, stripe_size=65536))
    backend.write(layout.path, 60_000, b"x" * 10_000)
    data[60_000:70_000] = b"x" * 10_000
    backend.write(layout.path, 250_000, b"tail")
    data += bytes(50_000) + b"tail"
    assert backend.read(layout.path, 0, 10**6) == bytes(data)


def test_paths_outside_the_scratch_root_are_refused(backend):
    for bad in ("../etc/passwd", "/etc/passwd", "a/../../b"):
        with pytest.raises(InputError):
            backend.create(bad)


def test_stat_exists_remove(backend):
    layout = put(backend, "r/file", b"hello")
    assert backend.exists("r/file")
    info = backend.stat("r/file")
    assert (info.size, info.uid) == (5, os.getuid())
    backend.remove(layout.path)
    assert not backend.exists("r/file")
    with pytest.raises(InputError):
        backend.stat("r/file")


def test_list_dir(backend):
    put(backend, "d/x", b"1")
    put(backend, "d/sub/y", b"2")
    assert backend.list_dir("d") == ["sub/", "x"]


def test_xattrs_roundtrip(backend):
    layout = put(backend, "x/f", b"data")
    assert backend.get_xattr(layout.path, SOURCE) is None
    backend.set_xattr(layout.path, SOURCE, b"gsiftp://source/StagedInput")
    backend.set_xattr(layout.path, "user.scratchkeeper.cksum", b"sha256:00")
    assert backend.get_xattr(layout.path, SOURCE) == b"gsiftp://source/StagedInput"
    assert backend.list_xattrs(layout.path) == {
        "user.scratchkeeper.cksum": b"sha256:00", SOURCE: b"gsiftp://source/StagedInput"}
    backend.remove_xattr(layout.path, "user.scratchkeeper.cksum")
    assert list(backend.list_xattrs(layout.path)) == [SOURCE]


@pytest.mark.parametrize("name", ["security.selinux", "security.scratchkeeper.lov",
                                  "trusted.overlay.opaque", "trusted.scratchkeeper.anything",
                                  "system.posix_acl_access", "user.", "nonsense"])
def test_xattr_names_outside_the_list_are_refused(backend, name):
    """Daemons call these as root with names that may come from a user: a security.* or
    trusted.* name the docs do not list is refused before the file is looked at (issue 30)."""
    layout = put(backend, "x/g", b"data")
    for action in (lambda: backend.set_xattr(layout.path, name, b"v"),
                   lambda: backend.set_xattrs(layout.path, {SOURCE: b"s", name: b"v"}),
                   lambda: backend.get_xattr(layout.path, name),
                   lambda: backend.remove_xattr(layout.path, name)):
        with pytest.raises(InputError, match="^xattr name .*: expected a 'user.' name"):
            action()
    assert backend.list_xattrs(layout.path) == {}


def test_list_and_check_osts(backend, take_down):
    osts = backend.check_osts(timeout=2.0)
    assert [o.ost_index for o in osts] == list(range(8))
    assert all(o.state == OST_ACTIVE for o in osts)
    take_down(backend, 3)
    states = {o.ost_index: o.healthy for o in backend.check_osts(timeout=2.0)}
    assert states[3] is False and all(states[i] for i in states if i != 3)


def test_files_on_ost(backend):
    first = put(backend, "f/a", b"a" * 100, LayoutRequest(ost_list=(0, 1)))
    put(backend, "f/b", b"b" * 100, LayoutRequest(ost_list=(2,)))
    assert backend.files_on_ost(1) == [first.path]


def test_add_and_remove_mirror(backend):
    data = payload(300_000)
    layout = put(backend, "m/f", data, LayoutRequest(stripe_count=2, stripe_size=65536))
    mirrored = backend.add_mirror(layout.path, LayoutRequest(stripe_count=2))
    assert len(mirrored.mirror_ids) == 2
    first, second = mirrored.mirror_ids
    assert not mirrored.osts(first) & mirrored.osts(second)
    assert backend.read(layout.path, 0, len(data)) == data
    single = backend.remove_mirror(layout.path, first)
    assert single.mirror_ids == [second]
    assert backend.read(layout.path, 0, len(data)) == data
    with pytest.raises(InputError, match="last copy"):
        backend.remove_mirror(layout.path, second)


def test_rebuild_patches_only_lost_ranges_and_switches_atomically(backend, take_down):
    data = payload(1_000_003, seed=3)
    layout = put(backend, "rb/f", data, LayoutRequest(stripe_count=4, stripe_size=65536))
    backend.set_xattr(layout.path, SOURCE, b"file:///src")
    failed = layout.ost_list[2]
    take_down(backend, failed)
    substitute = backend.pick_substitute(layout, osts=backend.check_osts(2.0))
    assert substitute not in layout.ost_list
    rebuild = backend.begin_rebuild(layout.path, {failed: substitute})
    assert rebuild.lost == layout.extents_on_ost(failed, len(data))
    assert sum(e.length for e in rebuild.lost) < len(data) // 3
    assert [r.rebuild_id for r in backend.open_rebuilds()] == [rebuild.rebuild_id]
    # the file keeps its old layout until commit
    assert backend.layout(layout.path).ost_list == layout.ost_list
    with pytest.raises(StorageError, match="misses"):
        backend.commit_rebuild(rebuild)
    with pytest.raises(StorageError, match="not in a lost range"):
        backend.write_rebuild(rebuild, 0, data[:10])
    for extent in rebuild.lost:
        backend.write_rebuild(rebuild, extent.offset, data[extent.offset:extent.end])
    new_layout = backend.commit_rebuild(rebuild)
    expected = tuple(substitute if i == failed else i for i in layout.ost_list)
    assert new_layout.ost_list == expected
    assert backend.read(layout.path, 0, len(data)) == data
    assert backend.get_xattr(layout.path, SOURCE) == b"file:///src"
    assert backend.open_rebuilds() == []


def test_unrecorded_writes_are_recorded_later_or_by_the_commit(backend, take_down):
    """Writes without a journal update count only once recorded (a restart would refetch them)."""
    data = payload(1_500_007, seed=5)
    layout = put(backend, "rec/f", data, LayoutRequest(stripe_count=3, stripe_size=65536))
    failed = layout.ost_list[1]
    take_down(backend, failed)
    rebuild = backend.begin_rebuild(
        layout.path, {failed: backend.pick_substitute(layout, osts=backend.check_osts(2.0))})
    lost = rebuild.lost
    first, rest = lost[:len(lost) // 2], lost[len(lost) // 2:]
    backend.write_rebuild_batch(rebuild, [(e.offset, data[e.offset:e.end]) for e in lost],
                                record=False)
    (journalled,) = backend.open_rebuilds()
    assert journalled.patched == [] and rebuild.missing == lost
    backend.record_patched(rebuild, first)
    (journalled,) = backend.open_rebuilds()
    assert sum(e.length for e in journalled.missing) == sum(e.length for e in rest)
    with pytest.raises(StorageError, match="misses"):
        backend.commit_rebuild(rebuild)  # the rest was written, but nobody said so
    with pytest.raises(StorageError, match="not in a lost range"):
        backend.record_patched(rebuild, [Extent(0, 65536)])  # a surviving stripe's bytes
    with pytest.raises(StorageError, match="not in a lost range"):
        backend.commit_rebuild(rebuild, [Extent(0, 65536)])
    new_layout = backend.commit_rebuild(rebuild, rest)
    assert failed not in new_layout.ost_list and backend.open_rebuilds() == []
    assert backend.read(layout.path, 0, len(data)) == data


def test_abort_rebuild_leaves_the_file_as_it_was(backend):
    data = payload(300_000)
    layout = put(backend, "ab/f", data, LayoutRequest(stripe_count=2, stripe_size=65536))
    rebuild = backend.begin_rebuild(layout.path, {layout.ost_list[0]: 7})
    first = rebuild.lost[0]
    backend.write_rebuild(rebuild, first.offset, b"\0" * first.length)
    backend.abort_rebuild(rebuild)
    assert backend.open_rebuilds() == []
    assert backend.layout(layout.path).ost_list == layout.ost_list
    assert backend.read(layout.path, 0, len(data)) == data


@pytest.mark.parametrize("substitutes,message", [({6: 7}, "holds no stripe"),
                                                 ({0: 1}, "already holds")])
def test_invalid_substitution_is_refused(backend, substitutes, message):
    layout = put(backend, "sub/f", b"z" * 1000, LayoutRequest(ost_list=(0, 1)))
    with pytest.raises(InputError, match=message):
        backend.begin_rebuild(layout.path, substitutes)


def test_commit_refuses_a_rebuild_of_a_file_that_changed(backend):
    data = payload(200_000)
    layout = put(backend, "chg/f", data, LayoutRequest(stripe_count=2, stripe_size=65536))
    rebuild = backend.begin_rebuild(layout.path, {layout.ost_list[1]: 6})
    for extent in rebuild.lost:
        backend.write_rebuild(rebuild, extent.offset, data[extent.offset:extent.end])
    backend.write(layout.path, len(data), b"more")
    with pytest.raises(StorageError, match="changed"):
        backend.commit_rebuild(rebuild)


def test_check_osts_returns_after_one_timeout_with_a_hung_ost(fake_lustre, lustre_backend):
    """A probe that never answers is reported unreachable at the deadline, not waited for."""
    fake_lustre.hung.add(5)
    started = time.monotonic()
    osts = lustre_backend.check_osts(timeout=0.5)
    elapsed = time.monotonic() - started
    assert {o.ost_index for o in osts if not o.healthy} == {5}
    assert elapsed < 0.5 + 1.0


def test_check_osts_probes_every_ost_within_one_timeout_when_more_hang_than_lanes(
        fake_lustre, lustre_backend):
    """Hung probes hold the first lanes; the OSTs behind them still get probed in time."""
    from scratchkeeper.storage.base import PROBE_LANES
    hung = set(range(PROBE_LANES + 2))
    fake_lustre.hung |= hung
    started = time.monotonic()
    osts = lustre_backend.check_osts(timeout=0.5)
    elapsed = time.monotonic() - started
    assert len(osts) > len(hung)
    assert {o.ost_index for o in osts if not o.healthy} == hung
    assert elapsed < 0.5 + 1.0


def test_lost_extent_arithmetic_matches_rebuild(backend):
    layout = put(backend, "ar/f", payload(333_333), LayoutRequest(stripe_count=3,
                                                                  stripe_size=65536))
    rebuild = backend.begin_rebuild(layout.path, {layout.ost_list[0]: 7})
    assert rebuild.lost[0] == Extent(0, 65536)
    assert rebuild.lost[1] == Extent(3 * 65536, 65536)
    backend.abort_rebuild(rebuild)


def test_rebuilds_committed_together_each_get_their_own_outcome(backend, take_down):
    """One commit of several rebuilds: the complete one switches; one whose file changed and one
    still missing bytes get their errors in their places and stay open."""
    files = [put(backend, f"many/{name}", payload(300_000, seed=seed),
                 LayoutRequest(stripe_count=2, stripe_size=65536, ost_list=(0, 1)))
             for seed, name in enumerate(("done", "changed", "short"))]
    take_down(backend, 1)
    rebuilds = [backend.begin_rebuild(layout.path, {1: 5}) for layout in files]
    for rebuild in rebuilds[:2]:
        for extent in rebuild.lost:
            backend.write_rebuild(rebuild, extent.offset, b"\1" * extent.length)
    backend.write(files[1].path, 300_000, b"more")
    done, changed, short = backend.commit_rebuilds([(rebuild, []) for rebuild in rebuilds])
    assert done.ost_list == (0, 5) and backend.layout(files[0].path).ost_list == (0, 5)
    assert isinstance(changed, StorageError) and "changed" in str(changed)
    assert isinstance(short, StorageError) and "misses" in str(short)
    assert {r.rebuild_id for r in backend.open_rebuilds()} == {r.rebuild_id for r in rebuilds[1:]}
    assert [backend.layout(layout.path).ost_list for layout in files[1:]] == [(0, 1), (0, 1)]


def test_rebuilds_begun_together_each_get_their_own_outcome(backend, take_down):
    """One start of several rebuilds: each file's rebuild, or its own error in its place (a
    substitute that is down, a file that is not there), the others begun and committable."""
    files = [put(backend, f"begun/{name}", payload(200_000, seed=seed),
                 LayoutRequest(stripe_count=2, stripe_size=65536, ost_list=(0, 1)))
             for seed, name in enumerate(("a", "b", "c"))]
    take_down(backend, 1)
    take_down(backend, 6)
    first, down, missing, second = backend.begin_rebuilds(
        [(files[0].path, {1: 5}), (files[1].path, {1: 6}), ("begun/none", {1: 5}),
         (files[2].path, {1: 7})])
    assert isinstance(down, StorageError)  # the local store names the OST, lfs its object
    assert isinstance(missing, InputError) and "begun/none" in str(missing)
    assert {r.rebuild_id for r in backend.open_rebuilds()} == {first.rebuild_id,
                                                                second.rebuild_id}
    for rebuild, substitute in ((first, 5), (second, 7)):
        assert rebuild.substitutes == {1: substitute}
        for extent in rebuild.lost:
            backend.write_rebuild(rebuild, extent.offset, b"\2" * extent.length)
    assert [layout.ost_list for layout in backend.commit_rebuilds(
        [(first, []), (second, [])])] == [(0, 5), (0, 7)]
    assert backend.layout(files[1].path).ost_list == (0, 1) and not backend.open_rebuilds()
