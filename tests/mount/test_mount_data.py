"""The scratch mount's data path: objects laid out exactly as Lustre's RAID-0 lays them out
(scratchkeeper/storage/layout.py's arithmetic), and the usual tools to and from the mount."""

from __future__ import annotations

import hashlib
import os
import shutil

import pytest

from scratchkeeper.storage.layout import FileLayout

LOV = "security.scratchkeeper.lov"


def expected_object(layout: FileLayout, position: int, data: bytes) -> bytes:
    """What object ``position`` of the first component must hold for a file of ``data``."""
    comp = layout.first
    size = comp.object_size(position, len(data))
    obj = bytearray(size)
    for extent in comp.extents_at_position(position, len(data)):
        start = comp.object_offset(extent.offset)
        obj[start:start + extent.length] = data[extent.offset:extent.end]
    return bytes(obj)


def test_objects_hold_exactly_the_raid0_split(make_mount):
    mnt = make_mount(stripe_count=4, stripe_size=131072)
    data = os.urandom(131072 * 9 + 12345)  # several rounds and a short last stripe
    (mnt.root / "striped").write_bytes(data)
    layout = FileLayout.from_lov(os.getxattr(mnt.mdt / "striped", LOV), "striped")
    assert layout.stripe_count == 4 and len(set(layout.ost_list)) == 4
    for position, obj in enumerate(layout.first.objects):
        held = (mnt.ost(obj.ost_index) / obj.object_id).read_bytes()
        assert held == expected_object(layout, position, data), position
    assert (mnt.root / "striped").read_bytes() == data


def test_files_are_spread_round_robin_over_the_osts(mnt):
    used = set()
    for i in range(4):
        (mnt.root / f"f{i}").write_bytes(b"x")
        used |= set(FileLayout.from_lov(os.getxattr(mnt.mdt / f"f{i}", LOV), "").ost_list)
    assert used == {0, 1, 2, 3}


def _tree(root) -> dict[str, str]:
    digests = {}
    for base, _, files in os.walk(root):
        for name in files:
            path = os.path.join(base, name)
            with open(path, "rb") as f:
                digests[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    return digests


def _make_tree(root):
    os.makedirs(root / "a" / "b")
    for i, size in enumerate([0, 1, 65535, 65536, 200_001, 1 << 20]):
        (root / "a" / f"f{i}").write_bytes(os.urandom(size))
    (root / "a" / "b" / "deep").write_bytes(os.urandom(70_000))
    os.symlink("../f1", root / "a" / "b" / "link")


def test_cp_rsync_tar_and_sha256sum_to_and_from_the_mount(mnt, tmp_path):
    source = tmp_path / "source"
    _make_tree(source)
    want = _tree(source)
    assert mnt.run(["cp", "-a", str(source), str(mnt.root / "cp")]).returncode == 0
    assert _tree(mnt.root / "cp") == want
    result = mnt.run(["rsync", "-a", f"{source}/", str(mnt.root / "rsync")])
    assert result.returncode == 0, result.stderr
    assert _tree(mnt.root / "rsync") == want
    result = mnt.run(["tar", "-C", str(source), "-cf", str(mnt.root / "t.tar"), "."])
    assert result.returncode == 0, result.stderr
    (tmp_path / "untar").mkdir()
    result = mnt.run(["tar", "-C", str(tmp_path / "untar"), "-xf", str(mnt.root / "t.tar")])
    assert result.returncode == 0, result.stderr
    assert _tree(tmp_path / "untar") == want
    # and back out of the mount
    result = mnt.run(["rsync", "-a", f"{mnt.root / 'cp'}/", str(tmp_path / "back")])
    assert result.returncode == 0, result.stderr
    assert _tree(tmp_path / "back") == want
    sums = mnt.run(["sha256sum", "a/f5", "a/b/deep"], cwd=mnt.root / "cp", text=True)
    assert sums.stdout.split()[0::2] == [want["a/f5"], want["a/b/deep"]]


def test_dd_with_fsync_to_and_from_the_mount(mnt, tmp_path):
    source = tmp_path / "in"
    source.write_bytes(os.urandom(5 << 20))
    result = mnt.run(["dd", f"if={source}", f"of={mnt.root / 'dd'}", "bs=1M", "conv=fsync"])
    assert result.returncode == 0, result.stderr
    result = mnt.run(["dd", f"if={mnt.root / 'dd'}", f"of={tmp_path / 'out'}", "bs=1M",
                      "iflag=direct"])
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out").read_bytes() == source.read_bytes()


@pytest.mark.skipif(shutil.which("globus-url-copy") is None, reason="no globus-url-copy")
def test_globus_url_copy_to_and_from_the_mount(mnt, tmp_path):
    """globus-url-copy (file:// on both sides: the client's own reader and writer, no server)
    writes a file into the mount and reads it back out whole."""
    source = tmp_path / "in"
    source.write_bytes(os.urandom((3 << 20) + 12345))
    result = mnt.run(["globus-url-copy", f"file://{source}", f"file://{mnt.root / 'guc'}"],
                     text=True)
    assert result.returncode == 0, result.stderr
    result = mnt.run(["globus-url-copy", f"file://{mnt.root / 'guc'}", f"file://{tmp_path / 'out'}"],
                     text=True)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out").read_bytes() == source.read_bytes()
    assert os.getxattr(mnt.mdt / "guc", "security.scratchkeeper.lov").startswith(b"lov 1")
