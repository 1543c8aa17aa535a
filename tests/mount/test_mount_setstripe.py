"""A plain user sets the layout of their own new, empty file (and their directory's default)
with ``scratchkeeper store setstripe``, through the scratch mount, as ``lfs setstripe`` does on
Lustre (issue 32: ``#STAGEIN -layout auto`` failed for every plain user). Not another user's
file, not a file holding data, not beyond the store's OSTs and pools; each refusal one line."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from scratchkeeper.storage.layout import LOV_XATTR, FileLayout
from user_runtime import DEPENDENCIES, as_user, plain_python, world_readable_copy

A, B = 4141, 4242
STRIPE = "user.scratchkeeper.stripe"


@pytest.fixture(scope="module")
def user_library():
    if os.geteuid() != 0:
        pytest.skip("needs root to run processes as other users")
    folder = Path(tempfile.mkdtemp(prefix="sk-setstripe-lib-", dir="/tmp"))
    folder.chmod(0o755)
    try:
        yield world_readable_copy(folder / "lib", DEPENDENCIES)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def store_as(mnt, library: Path, uid: int, *argv: str) -> subprocess.CompletedProcess:
    """``scratchkeeper -c CONFIG store ARGV...`` as ``uid`` (a user's data job)."""
    main = (f"import sys; sys.path.insert(0, {str(library)!r}); "
            "from scratchkeeper.cli import main; sys.exit(main())")
    mnt.config.chmod(0o644)
    return subprocess.run([plain_python(), "-I", "-c", main, "-c", str(mnt.config), "store",
                           *argv], user=uid, group=uid, extra_groups=[], cwd=mnt.root.parent,
                          env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                          timeout=120)


def home_of(mnt, uid: int, name: str, mode: int = 0o755) -> Path:
    home = mnt.root / name
    home.mkdir()
    os.chown(home, uid, uid)
    os.chmod(home, mode)
    return home


def layout_of(mnt, path: Path) -> FileLayout:
    relative = path.relative_to(mnt.root)
    return FileLayout.from_lov(os.getxattr(mnt.mdt / relative, LOV_XATTR), str(relative))


def objects_of(mnt, layout: FileLayout) -> list[Path]:
    return [mnt.ost(o.ost_index) / o.object_id for c in layout.components for o in c.objects]


def one_line(done: subprocess.CompletedProcess, code: int = 2) -> str:
    assert done.returncode == code and done.stdout == "", done
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    return done.stderr


def test_a_user_lays_out_their_own_new_file_and_the_transfer_keeps_it(make_mount, user_library):
    mnt = make_mount(ost_count=6, stripe_count=2)
    home = home_of(mnt, A, "alice")
    target = home / "in" / "data.bin"
    (home / "in").mkdir()
    os.chown(home / "in", A, A)
    done = store_as(mnt, user_library, A, "setstripe", "--file", "-c", "5", "-S", "128K",
                    str(target))
    assert done.returncode == 0, done.stderr
    layout = layout_of(mnt, target)
    assert (layout.stripe_count, layout.stripe_size) == (5, 131072)
    assert str(target) in done.stdout and "stripe count 5" in done.stdout
    st = target.stat()
    assert (st.st_uid, st.st_size) == (A, 0)
    for obj in objects_of(mnt, layout):  # made by the mount, charged to the owner
        assert (obj.stat().st_uid, obj.stat().st_mode & 0o777) == (A, 0o600)
    # the transfer writes it in place (O_TRUNC, as curl does): the layout stays
    data = os.urandom(700_000)

    def write():
        with open(target, "wb") as out:
            out.write(data)

    assert as_user(A, A, write) == (0, "")
    assert target.read_bytes() == data
    assert layout_of(mnt, target).stripe_count == 5
    # a re-staged input: the file is replaced by an empty one with the new layout, and the
    # objects of the old one are gone
    old = objects_of(mnt, layout_of(mnt, target))
    done = store_as(mnt, user_library, A, "setstripe", "--file", "-c", "1", str(target))
    assert done.returncode == 0, done.stderr
    assert layout_of(mnt, target).stripe_count == 1 and target.stat().st_size == 0
    assert not any(o.exists() for o in old)


def test_an_empty_file_is_laid_out_again_and_its_old_objects_deleted(mnt):
    """``setfattr -n user.scratchkeeper.stripe`` on one's own empty file, as ``lfs setstripe``
    on a new file: new objects, the old (empty) ones deleted, an open handle unharmed."""
    target = home_of(mnt, A, "alice") / "empty"
    assert as_user(A, A, lambda: open(target, "wb").close()) == (0, "")
    before = objects_of(mnt, layout_of(mnt, target))

    def lay_out_while_open_then_write():
        with open(target, "wb") as out:   # a writer opened it first, wrote nothing yet
            os.setxattr(target, STRIPE, b"stripe_count=3 stripe_size=65536")
            out.write(b"x" * 300_000)     # goes to the new objects

    assert as_user(A, A, lay_out_while_open_then_write) == (0, "")
    after = layout_of(mnt, target)
    assert after.stripe_count == 3
    assert all(o.exists() for o in objects_of(mnt, after))
    assert not any(o.exists() for o in before)
    assert target.read_bytes() == b"x" * 300_000


def test_nobody_lays_out_another_users_file_or_a_file_holding_data(make_mount, user_library):
    mnt = make_mount(ost_count=4, stripe_count=2, pools={"flash": "2-3"})
    shared = home_of(mnt, A, "shared", 0o777)   # B may write the folder, and the file
    theirs = shared / "theirs.dat"

    def make():
        open(theirs, "wb").close()
        os.chmod(theirs, 0o666)

    assert as_user(A, A, make) == (0, "")
    before = layout_of(mnt, theirs)
    # a group/other writer is not the owner: EPERM from the mount, one line from the store
    code, error = as_user(B, B, lambda: os.setxattr(theirs, STRIPE,
                                                    b"stripe_count=1 stripe_size=65536"))
    assert (code, error) == (1, "PermissionError")
    assert layout_of(mnt, theirs) == before
    mine = home_of(mnt, B, "bob") / "f"
    (mine.parent / "sub").mkdir()
    os.chown(mine.parent / "sub", A, A)  # A's directory inside B's: B may not set its default
    line = one_line(store_as(mnt, user_library, B, "setstripe", "-c", "1",
                             str(mine.parent / "sub")))
    assert "only the directory's owner (or root) may set its layout (uid 4242" in line
    # holding data: refused (as Lustre), the bytes and layout untouched
    data = os.urandom(200_000)

    def write_then_lay_out():
        mine.write_bytes(data)
        try:
            os.setxattr(mine, STRIPE, b"stripe_count=1 stripe_size=65536")
        except OSError as err:
            assert err.errno == errno.ENOTEMPTY, err
        else:
            raise AssertionError("a file holding data was laid out")

    assert as_user(B, B, write_then_lay_out) == (0, "")
    assert mine.read_bytes() == data
    # beyond the store: more stripes than OSTs, a pool it has not, a bad size
    empty = mine.parent / "empty"
    for argv, what in ((["-c", "5"], "stripe count 5"), (["-p", "nvme"], "pool nvme"),
                       (["-S", "1000"], "")):
        done = store_as(mnt, user_library, B, "setstripe", "--file", *argv, str(empty))
        line = one_line(done)
        assert what in line, line
    done = store_as(mnt, user_library, B, "setstripe", "--file", "-c", "2", "-p", "flash",
                    str(empty))
    assert done.returncode == 0, done.stderr
    assert {o.ost_index for o in layout_of(mnt, empty).components[0].objects} == {2, 3}
    # an OST list is not something the value can say
    code, error = as_user(B, B, lambda: os.setxattr(
        empty, STRIPE, b"stripe_count=1 stripe_size=65536 ost_list=0"))
    assert (code, error) == (1, "OSError")
    # the directory default of one's own directory, as a plain user
    done = store_as(mnt, user_library, B, "setstripe", "-c", "1", "-S", "128K",
                    str(mine.parent))
    assert done.returncode == 0, done.stderr
    assert os.getxattr(mine.parent, STRIPE) == b"stripe_count=1 stripe_size=131072"


def test_removing_a_directory_default_needs_what_setting_it_needs(mnt):
    """Issue 39: a member of a directory's group may write it, but neither set nor remove
    (``setfattr -x``) its owner's default layout; the owner and root may do both."""
    team = home_of(mnt, A, "team", 0o775)     # A's, group A, which B is in below
    default = b"stripe_count=1 stripe_size=131072"

    def owner_sets():
        os.setxattr(team, STRIPE, default)

    assert as_user(A, A, owner_sets) == (0, "")

    def member_changes():
        open(team / "by-member", "wb").close()  # the group may write the directory
        for change in (lambda: os.setxattr(team, STRIPE, b"stripe_count=4 stripe_size=65536"),
                       lambda: os.removexattr(team, STRIPE)):
            try:
                change()
            except OSError as err:
                assert err.errno == errno.EPERM, err
            else:
                raise AssertionError("a group member changed the owner's default layout")

    assert as_user(B, A, member_changes) == (0, "")   # B with A's group
    assert os.getxattr(team, STRIPE) == default
    assert layout_of(mnt, team / "by-member").stripe_count == 1  # laid out by the default

    def owner_removes():
        os.removexattr(team, STRIPE)

    assert as_user(A, A, owner_removes) == (0, "")
    with pytest.raises(OSError) as gone:
        os.getxattr(team, STRIPE)
    assert gone.value.errno == errno.ENODATA
    os.setxattr(team, STRIPE, default)   # root, as CAP_FOWNER
    os.removexattr(team, STRIPE)
    with pytest.raises(OSError):
        os.getxattr(team, STRIPE)
