"""POSIX behaviour of the scratch mount: files, directories, links, attributes, xattrs, statfs."""

from __future__ import annotations

import errno
import os
import stat
import time

import pytest

from scratchkeeper.storage.layout import FileLayout
from waiting import wait_released

LOV = "security.scratchkeeper.lov"


def objects_of(mnt, path) -> list[os.PathLike]:
    layout = FileLayout.from_lov(os.getxattr(mnt.mdt / path, LOV), str(path))
    return [mnt.ost(o.ost_index) / o.object_id for c in layout.components for o in c.objects]


def test_create_write_read_append_and_the_mdt_inode(mnt):
    path = mnt.root / "a.txt"
    path.write_bytes(b"hello ")
    with open(path, "ab") as f:
        f.write(b"world")
    assert path.read_bytes() == b"hello world"
    mdt = mnt.mdt / "a.txt"
    assert mdt.stat().st_size == 11 and mdt.read_bytes() == b"\0" * 11  # no data on the MDT
    assert path.stat().st_size == 11
    layout = FileLayout.from_lov(os.getxattr(mdt, LOV), "a.txt")
    assert layout.stripe_count == 2 and layout.stripe_size == 65536
    assert all(p.exists() for p in objects_of(mnt, "a.txt"))


def test_o_append_writes_at_the_end_whatever_the_offset(mnt):
    path = mnt.root / "log"
    path.write_bytes(b"x" * 100)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, b"END")
    finally:
        os.close(fd)
    assert path.read_bytes() == b"x" * 100 + b"END"


def test_o_trunc_and_o_excl(mnt):
    path = mnt.root / "f"
    path.write_bytes(os.urandom(200_000))
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    os.close(fd)
    assert path.stat().st_size == 0 and path.read_bytes() == b""
    with pytest.raises(FileExistsError):
        os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    fd = os.open(mnt.root / "new", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
    os.close(fd)
    assert stat.S_IMODE((mnt.root / "new").stat().st_mode) == 0o640 & ~_umask()


def drop_cache(path) -> None:
    """Forget the kernel's cached pages of ``path``: the next read asks the mount."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_writes_at_offsets_and_holes_read_back_exactly(mnt):
    path = mnt.root / "holes"
    model = bytearray()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        for offset, size in [(0, 10), (70_000, 5000), (300_000, 1), (131_072, 65_536),
                             (65_530, 20), (1_000_000, 3)]:
            data = os.urandom(size)
            os.pwrite(fd, data, offset)
            if len(model) < offset + size:
                model.extend(b"\0" * (offset + size - len(model)))
            model[offset:offset + size] = data
        assert os.fstat(fd).st_size == len(model)
        assert os.pread(fd, len(model) + 100, 0) == bytes(model)
        # odd-sized reads across stripe boundaries
        for offset in (0, 65_535, 65_536, 131_071, 999_999):
            assert os.pread(fd, 70_001, offset) == bytes(model[offset:offset + 70_001])
    finally:
        os.close(fd)
    # after the kernel's cache is gone too
    drop_cache(path)
    assert path.read_bytes() == bytes(model)


def test_truncate_down_shrinks_objects_and_up_reads_zeros(mnt):
    path = mnt.root / "t"
    data = os.urandom(300_000)
    path.write_bytes(data)
    os.truncate(path, 100_000)
    assert path.read_bytes() == data[:100_000]
    sizes = sorted(p.stat().st_size for p in objects_of(mnt, "t"))
    # 100000 bytes over 2 stripes of 64 KiB: 65536 on the first object, 34464 on the second
    assert sizes == [34_464, 65_536]
    os.truncate(path, 250_000)
    assert path.read_bytes() == data[:100_000] + b"\0" * 150_000
    with open(path, "r+b") as f:
        f.truncate(0)
    assert path.stat().st_size == 0 and all(p.stat().st_size == 0 for p in objects_of(mnt, "t"))


def test_rename_replaces_atomically_and_frees_the_old_objects(mnt):
    old, new = mnt.root / "old", mnt.root / "new"
    old.write_bytes(b"A" * 100_000)
    new.write_bytes(b"B" * 100_000)
    replaced = objects_of(mnt, "new")
    kept = objects_of(mnt, "old")
    os.rename(old, new)
    assert not old.exists() and new.read_bytes() == b"A" * 100_000
    assert not any(p.exists() for p in replaced) and all(p.exists() for p in kept)
    # RENAME_NOREPLACE through the kernel's flags: a link() based check of the same
    (mnt.root / "x").write_bytes(b"x")
    with pytest.raises(FileExistsError):
        os.link(mnt.root / "x", new)


def test_hard_links_and_unlink_while_open(mnt):
    path = mnt.root / "data"
    data = os.urandom(150_000)
    path.write_bytes(data)
    objects = objects_of(mnt, "data")
    os.link(path, mnt.root / "alias")
    assert path.stat().st_nlink == 2
    path.unlink()
    assert (mnt.root / "alias").read_bytes() == data and all(p.exists() for p in objects)
    with open(mnt.root / "alias", "rb") as f:
        os.unlink(mnt.root / "alias")
        assert all(p.exists() for p in objects)  # still open: still readable
        assert f.read() == data
    deadline = time.monotonic() + 5  # the release is asynchronous
    while any(p.exists() for p in objects) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not any(p.exists() for p in objects)


def test_directories(mnt):
    d = mnt.root / "d"
    d.mkdir(0o750)
    assert stat.S_IMODE(d.stat().st_mode) == 0o750 & ~_umask()
    names = {f"f{i}" for i in range(300)}
    for name in names:
        (d / name).write_bytes(name.encode())
    (d / "sub").mkdir()
    assert set(os.listdir(d)) == names | {"sub"}
    with pytest.raises(OSError) as err:
        d.rmdir()
    assert err.value.errno == errno.ENOTEMPTY
    for name in names:
        (d / name).unlink()
    (d / "sub").rmdir()
    d.rmdir()
    assert os.listdir(mnt.root) == []


def test_symlinks(mnt):
    (mnt.root / "target").write_bytes(b"t")
    os.symlink("target", mnt.root / "link")
    assert os.readlink(mnt.root / "link") == "target"
    assert (mnt.root / "link").read_bytes() == b"t"
    assert stat.S_ISLNK(os.lstat(mnt.root / "link").st_mode)
    os.symlink("/nowhere", mnt.root / "dangling")
    assert not (mnt.root / "dangling").exists()


def test_chmod_chown_utimens(mnt):
    path = mnt.root / "f"
    path.write_bytes(b"12345")
    os.chmod(path, 0o604)
    os.chown(path, 1234, 5678)
    st = path.stat()
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o604, 1234, 5678)
    for obj in objects_of(mnt, "f"):  # the objects follow the file's owner, 0600 whatever its mode
        ost = obj.stat()
        assert (ost.st_uid, ost.st_gid, stat.S_IMODE(ost.st_mode)) == (1234, 5678, 0o600)
    os.utime(path, ns=(1_000_000_000_123, 2_000_000_000_456))
    st = path.stat()
    assert (st.st_atime_ns, st.st_mtime_ns) == (1_000_000_000_123, 2_000_000_000_456)
    before = path.stat().st_mtime_ns  # 2000 s after the epoch: any write now is later
    with open(path, "r+b") as f:
        f.write(b"x")
    drop_cache(path)
    assert (mnt.mdt / "f").stat().st_mtime_ns > before  # a write marks mtime on the MDT


def test_xattrs_and_the_reserved_layout_attribute(mnt):
    path = mnt.root / "x"
    path.write_bytes(b"x")
    os.setxattr(path, "user.color", b"blue")
    assert os.getxattr(path, "user.color") == b"blue"
    assert "user.color" in os.listxattr(path)
    os.removexattr(path, "user.color")
    assert "user.color" not in os.listxattr(path)
    lov = os.getxattr(path, LOV)  # readable through the mount
    assert lov.startswith(b"lov 1 gen=")
    for name in (LOV, "security.scratchkeeper.dirlov"):
        with pytest.raises(PermissionError):
            os.setxattr(path, name, b"lov 1 gen=9\n")
    with pytest.raises(PermissionError):
        os.removexattr(path, LOV)
    assert os.getxattr(path, LOV) == lov


def test_a_directory_default_layout_is_used_and_inherited(mnt):
    d = mnt.root / "wide"
    d.mkdir()
    os.setxattr(mnt.mdt / "wide", "security.scratchkeeper.dirlov",
                b"stripe_count=3 stripe_size=131072")
    (d / "sub").mkdir()
    (d / "sub" / "f").write_bytes(os.urandom(1000))
    layout = FileLayout.from_lov(os.getxattr(d / "sub" / "f", LOV), "f")
    assert (layout.stripe_count, layout.stripe_size) == (3, 131072)
    assert len(set(layout.ost_list)) == 3


def test_statfs(mnt):
    ours, store = os.statvfs(mnt.root), os.statvfs(mnt.store)
    assert ours.f_blocks * ours.f_frsize == store.f_blocks * store.f_frsize
    df = mnt.run(["df", "-P", str(mnt.root)], text=True)
    assert df.returncode == 0 and "scratchkeeper" in df.stdout


def test_special_files(mnt):
    os.mkfifo(mnt.root / "fifo", 0o600)
    assert stat.S_ISFIFO(os.lstat(mnt.root / "fifo").st_mode)
    assert stat.S_ISFIFO(os.lstat(mnt.mdt / "fifo").st_mode)


def test_no_descriptor_or_inode_leaks(mnt):
    fds = mnt.process.pid

    def count() -> int:
        return len(os.listdir(f"/proc/{fds}/fd"))

    (mnt.root / "warm").write_bytes(b"w")
    base = None
    for _round in range(3):
        for i in range(100):
            path = mnt.root / f"f{i}"
            path.write_bytes(os.urandom(1000))
            with open(path, "rb") as f:
                f.read()
            path.unlink()
        wait_released(mnt.root)
        if base is None:
            base = count()
    assert count() <= base + 2
    leftovers = [p for i in range(4) for p in mnt.ost(i).iterdir()]
    assert len(leftovers) == 2  # the objects of "warm" only
