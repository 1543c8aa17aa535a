"""Several users on the scratch mount: owners from the caller, umask, set-group-id directories,
and the kernel's permission checks against the MDT's modes (default_permissions)."""

from __future__ import annotations

import errno
import os
import stat
import sys

from user_runtime import as_user

NOBODY = 65534
OTHER = 4242  # a uid with no name: nothing but its number matters to the kernel


def test_new_files_belong_to_their_creator_and_honour_the_umask(mnt):
    shared = mnt.root / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)

    def create():
        with open(shared / "mine", "wb") as f:
            f.write(b"secret")
        os.mkdir(shared / "mydir", 0o777)
        os.symlink("mine", shared / "mylink")

    assert as_user(NOBODY, NOBODY, create, umask=0o077) == (0, "")
    st = (shared / "mine").stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (NOBODY, NOBODY, 0o600)
    mdt = (mnt.mdt / "shared" / "mine").stat()
    assert (mdt.st_uid, mdt.st_gid) == (NOBODY, NOBODY)
    dst = (shared / "mydir").stat()
    assert (dst.st_uid, stat.S_IMODE(dst.st_mode)) == (NOBODY, 0o700)
    assert os.lstat(shared / "mylink").st_uid == NOBODY
    # the objects carry the owner too, rw for the owner only
    from scratchkeeper.storage.layout import FileLayout
    layout = FileLayout.from_lov(os.getxattr(shared / "mine", "security.scratchkeeper.lov"), "")
    for obj in layout.components[0].objects:
        ost = (mnt.ost(obj.ost_index) / obj.object_id).stat()
        assert (ost.st_uid, stat.S_IMODE(ost.st_mode)) == (NOBODY, 0o600)


def test_another_user_cannot_read_a_private_file(mnt):
    shared = mnt.root / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    private = shared / "private"

    def create():
        fd = os.open(private, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, b"only mine")
        os.close(fd)

    def read():
        with open(private, "rb") as f:
            f.read()

    def remove():
        os.unlink(private)

    assert as_user(NOBODY, NOBODY, create) == (0, "")
    assert as_user(OTHER, OTHER, read) == (1, "PermissionError")
    assert as_user(OTHER, OTHER, remove) == (1, "PermissionError")  # sticky directory
    assert as_user(NOBODY, NOBODY, read) == (0, "")
    assert private.read_bytes() == b"only mine"  # root may


def test_a_set_group_id_directory_gives_its_group(mnt):
    team = mnt.root / "team"
    team.mkdir()
    os.chown(team, 0, 777)
    os.chmod(team, 0o2777)

    def create():
        (team / "f").write_bytes(b"f")
        os.mkdir(team / "d")

    assert as_user(NOBODY, NOBODY, create) == (0, "")
    assert (team / "f").stat().st_gid == 777 and (team / "f").stat().st_uid == NOBODY
    d = (team / "d").stat()
    assert d.st_gid == 777 and d.st_mode & stat.S_ISGID


def test_a_directory_owner_sets_its_default_layout_with_setfattr(mnt):
    """``setfattr -n user.scratchkeeper.stripe`` on a directory is ``lfs setstripe DIR`` for its
    owner: new files there get that layout; nobody else may set it, and a bad value is EINVAL."""
    from scratchkeeper.storage.layout import FileLayout

    stripe = "user.scratchkeeper.stripe"
    os.chmod(mnt.root, 0o1777)

    def owner_sets():
        os.mkdir(mnt.root / "mine")
        os.setxattr(mnt.root / "mine", stripe, b"stripe_count=1 stripe_size=131072")
        (mnt.root / "mine" / "f").write_bytes(os.urandom(300_000))
        assert os.getxattr(mnt.root / "mine", stripe) == b"stripe_count=1 stripe_size=131072"

    assert as_user(OTHER, OTHER, owner_sets) == (0, "")
    layout = FileLayout.from_lov(os.getxattr(mnt.mdt / "mine" / "f", "security.scratchkeeper.lov"),
                                 "mine/f")
    assert (layout.stripe_count, layout.stripe_size) == (1, 131072)
    assert (mnt.root / "mine" / "f").stat().st_size == 300_000

    def stranger_sets():
        os.setxattr(mnt.root / "mine", stripe, b"stripe_count=4 stripe_size=65536")

    assert as_user(NOBODY, NOBODY, stranger_sets) == (1, "PermissionError")

    def bad_values():
        for value in (b"stripe_count=1 stripe_size=1000", b"stripes=2", b""):
            try:
                os.setxattr(mnt.root / "mine", stripe, value)
            except OSError as err:
                assert err.errno == 22, (value, err)  # EINVAL
            else:
                raise AssertionError(f"{value!r} was taken")
        try:
            os.setxattr(mnt.root / "mine" / "f", stripe, b"stripe_count=1 stripe_size=131072")
        except OSError as err:
            # on a regular file it is the file's layout, set on an empty file only
            # (tests/mount/test_mount_setstripe.py)
            assert err.errno == errno.ENOTEMPTY, err
        else:
            raise AssertionError("a file holding data took a layout")
        os.removexattr(mnt.root / "mine", stripe)
        (mnt.root / "mine" / "g").write_bytes(b"x")

    assert as_user(OTHER, OTHER, bad_values) == (0, "")
    layout = FileLayout.from_lov(os.getxattr(mnt.mdt / "mine" / "g", "security.scratchkeeper.lov"),
                                 "mine/g")
    assert layout.stripe_count == mnt.settings["stripe_count"]  # the site's default again


def test_a_user_who_may_write_both_directories_moves_a_file_and_renames_a_directory(mnt):
    """rename(2) asks for write access to both parents only (pjdfstest rename/21.t), and for a
    directory moved to another parent, write access to the directory itself (its "..")."""
    src, dst = mnt.root / "src", mnt.root / "dst"
    for folder in (src, dst):
        folder.mkdir()
        os.chmod(folder, 0o777)
    (src / "file").write_bytes(b"root's")
    os.chmod(src / "file", 0o644)
    (src / "sub").mkdir()
    os.chmod(src / "sub", 0o700)
    assert as_user(NOBODY, NOBODY, lambda: os.rename(src / "file", dst / "moved")) == (0, "")
    assert (dst / "moved").read_bytes() == b"root's" and not (src / "file").exists()
    assert as_user(NOBODY, NOBODY, lambda: os.rename(src / "sub", src / "renamed")) == (0, "")
    assert as_user(NOBODY, NOBODY, lambda: os.rename(src / "renamed", dst / "sub")) == \
        (1, "PermissionError")
    assert (src / "renamed").is_dir()


def test_a_new_directory_has_the_callers_mode_under_the_callers_umask_only(mnt):
    """The mount process's own umask (022) never reaches a caller's mkdir (pjdfstest rename/21.t
    makes its 0777 directories with umask 0)."""
    shared = mnt.root / "modes"
    shared.mkdir()
    os.chmod(shared, 0o777)

    def make():
        os.mkdir(shared / "open", 0o777)
        os.mkdir(shared / "sticky", 0o1777)

    assert as_user(NOBODY, NOBODY, make, umask=0) == (0, "")
    assert stat.S_IMODE((shared / "open").stat().st_mode) == 0o777
    assert stat.S_IMODE((shared / "sticky").stat().st_mode) == 0o1777
    assert stat.S_IMODE((mnt.mdt / "modes" / "open").stat().st_mode) == 0o777


def test_a_directory_default_pool_places_new_files_on_its_osts(make_mount):
    """``lfs setstripe -p POOL DIR`` through the mount (setfattr, or ``store setstripe -p``):
    new files there go to the pool's OSTs only and their layout names the pool; a pool the
    store does not know is EINVAL, as ``store setstripe`` refuses it."""
    from scratchkeeper.storage.layout import FileLayout

    mnt = make_mount(ost_count=6, stripe_count=2, pools={"flash": "4-5", "disk": "0-3"})
    stripe = "user.scratchkeeper.stripe"
    (mnt.root / "hot").mkdir()
    os.setxattr(mnt.root / "hot", stripe, b"stripe_count=-1 stripe_size=65536 pool=flash")
    (mnt.root / "cold").mkdir()
    command = [sys.executable, "-m", "scratchkeeper", "-c", str(mnt.config), "store"]
    setstripe = mnt.run([*command, "setstripe", "-c", "3", "-p", "disk", str(mnt.root / "cold")])
    assert setstripe.returncode == 0, setstripe.stderr
    for name in ("hot", "cold"):
        (mnt.root / name / "sub").mkdir()  # inherits the default, pool included
        for index in range(4):
            (mnt.root / name / "sub" / f"f{index}").write_bytes(os.urandom(200_000))
    for name, pool, osts, count in (("hot", "flash", {4, 5}, 2), ("cold", "disk", {0, 1, 2, 3}, 3)):
        used = set()
        for index in range(4):
            lov = os.getxattr(mnt.mdt / name / "sub" / f"f{index}", "security.scratchkeeper.lov")
            layout = FileLayout.from_lov(lov, f"{name}/sub/f{index}")
            assert layout.stripe_count == count
            assert {c.pool for c in layout.components} == {pool}
            used |= {o.ost_index for c in layout.components for o in c.objects}
        assert used == osts, name  # round-robin over the pool's OSTs reaches each of them
    listed = mnt.run([*command, "layout", str(mnt.root / "hot" / "sub" / "f0")])
    assert listed.returncode == 0 and b"flash" in listed.stdout, listed.stdout + listed.stderr
    try:
        os.setxattr(mnt.root / "hot", stripe, b"stripe_count=1 stripe_size=65536 pool=nvme")
    except OSError as err:
        assert err.errno == 22
    else:
        raise AssertionError("an unknown pool was taken")
    assert os.getxattr(mnt.root / "hot", stripe) == b"stripe_count=-1 stripe_size=65536 pool=flash"
