"""POSIX ACLs through the scratch mount (issue 30): the kernel checks every open against the MDT
inode's ACL (FUSE_CAP_POSIX_ACL), setfacl/getfacl/cp -a pass through to the MDT, default ACLs
are inherited with the umask left out, as on ext4. Each sequence runs on a plain ext4 folder
too, the reference: getfacl output and who can read must be the same."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
from test_mount_users import as_user

A, B, C, D = 4242, 4243, 4244, 4245  # plain users with no names: the kernel needs numbers only
TEAM = 4250                          # a group D is in (and A, B, C are not)
TIMEOUT = 60

pytestmark = pytest.mark.skipif(shutil.which("setfacl") is None, reason="no setfacl (acl)")


def run(uid: int, argv: list[str], cwd: Path, *, umask: int = 0o022,
        groups: tuple[int, ...] = ()) -> subprocess.CompletedProcess:
    """``argv`` as user ``uid`` (its group the same number) in ``cwd``."""
    return subprocess.run(argv, cwd=cwd, user=uid, group=uid, extra_groups=list(groups),
                          umask=umask, capture_output=True, text=True, timeout=TIMEOUT)


def may_read(uid: int, path: str, cwd: Path) -> bool:
    groups = (TEAM,) if uid == D else ()
    done = run(uid, ["cat", path], cwd, groups=groups)
    assert done.returncode == 0 or "Permission denied" in done.stderr, done.stderr
    return done.returncode == 0


def acl(path: str, cwd: Path) -> str:
    done = run(A, ["getfacl", "-n", path], cwd)
    assert done.returncode == 0, done.stderr
    return done.stdout


def ok(uid: int, argv: list[str], cwd: Path, **kwargs) -> None:
    done = run(uid, argv, cwd, **kwargs)
    assert done.returncode == 0, f"{argv}: {done.stderr}"


def readers(path: str, cwd: Path) -> dict[int, bool]:
    return {uid: may_read(uid, path, cwd) for uid in (B, C, D)}


def named_entries(base: Path) -> list:
    """A's 0644 file: a named user denied, a named group allowed, chmod moving the mask."""
    home = base / "a"
    seen = []
    ok(A, ["sh", "-c", "echo secret > f"], home)
    seen.append(("plain", readers("f", home)))
    ok(A, ["setfacl", "-m", f"u:{B}:0", "f"], home)
    seen.append(("u:B:0", acl("f", home), readers("f", home)))
    ok(A, ["setfacl", "-m", f"g:{TEAM}:r,o::0", "f"], home)
    seen.append(("g:TEAM:r o::0", acl("f", home), readers("f", home)))
    ok(A, ["chmod", "600", "f"], home)             # the mask follows the group bits
    seen.append(("chmod 600", acl("f", home), readers("f", home)))
    ok(A, ["chmod", "640", "f"], home)
    seen.append(("chmod 640", acl("f", home), readers("f", home)))
    ok(A, ["cp", "-a", "f", "copy"], home)          # cp -a keeps the ACL
    seen.append(("cp -a", acl("copy", home), readers("copy", home)))
    ok(A, ["setfacl", "-b", "copy"], home)
    seen.append(("setfacl -b", acl("copy", home), readers("copy", home)))
    return seen


def default_acl(base: Path) -> list:
    """A directory's default ACL: inherited by what is made in it, the umask left out."""
    home = base / "a"
    seen = []
    ok(A, ["mkdir", "shared"], home)
    ok(A, ["setfacl", "-m", f"u:{B}:rwx", "-d", "-m", f"u::rwx,g::r-x,o::---,u:{B}:r-x",
           "shared"], home)
    seen.append(("dir", acl("shared", home)))
    # umask 077: ignored under a default ACL (B still reads), as on ext4
    ok(A, ["sh", "-c", "echo new > shared/new && mkdir shared/sub && mkfifo shared/fifo && "
           "echo deep > shared/sub/deep"], home, umask=0o077)
    for name in ("shared/new", "shared/sub", "shared/fifo", "shared/sub/deep"):
        seen.append((name, acl(name, home)))
    seen.append(("new", readers("shared/new", home)))
    seen.append(("deep", readers("shared/sub/deep", home)))
    # B made a file there (B may write the directory): A's default ACL holds for it too
    ok(B, ["sh", "-c", "echo b > shared/by-b"], home, umask=0o077)
    seen.append(("by-b", acl("shared/by-b", home)))
    # without a default ACL the umask applies
    ok(A, ["sh", "-c", "echo plain > plain"], home, umask=0o027)
    seen.append(("plain", acl("plain", home)))
    return seen


def on_ext4(sequence) -> list:
    """The sequence on a plain folder of the root file system (ext4): the reference."""
    base = Path(tempfile.mkdtemp(prefix="sk-acl-", dir="/var/tmp"))
    try:
        os.chmod(base, 0o755)
        (base / "a").mkdir()
        os.chown(base / "a", A, A)
        assert subprocess.run(["findmnt", "-no", "FSTYPE", "-T", str(base)], capture_output=True,
                              text=True, timeout=TIMEOUT).stdout.strip() == "ext4"
        return sequence(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def on_mount(mnt, sequence) -> list:
    (mnt.root / "a").mkdir()
    os.chown(mnt.root / "a", A, A)
    return sequence(mnt.root)


def test_named_entries_masks_and_chmod_as_on_ext4(mnt):
    mount = on_mount(mnt, named_entries)
    assert mount == on_ext4(named_entries)
    steps = {step[0]: step[-1] for step in mount}
    assert steps["plain"] == {B: True, C: True, D: True}
    assert steps["u:B:0"] == {B: False, C: True, D: True}      # the issue: B read it anyway
    assert steps["g:TEAM:r o::0"] == {B: False, C: False, D: True}
    assert steps["chmod 600"] == {B: False, C: False, D: False}
    assert steps["chmod 640"] == {B: False, C: False, D: True}
    assert steps["cp -a"] == steps["chmod 640"]
    assert f"user:{B}:---" in {s[0]: s[1] for s in mount if len(s) == 3}["cp -a"]
    # the objects of a file with any mode or ACL are 0600, its owner's
    from scratchkeeper.storage.layout import FileLayout
    layout = FileLayout.from_lov(os.getxattr(mnt.root / "a" / "f", "security.scratchkeeper.lov"),
                                 "a/f")
    for obj in layout.components[0].objects:
        info = (mnt.ost(obj.ost_index) / obj.object_id).stat()
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (A, 0o600)


def test_a_default_acl_is_inherited_without_the_umask_as_on_ext4(mnt):
    mount = on_mount(mnt, default_acl)
    assert mount == on_ext4(default_acl)
    seen = dict(mount)
    assert seen["new"] == {B: True, C: False, D: False}
    assert seen["deep"] == {B: True, C: False, D: False}
    assert f"default:user:{B}:r-x" in seen["shared/sub"]
    assert "other::---" in seen["plain"] and "group::r--" in seen["plain"]
    # the inherited ACL is on the MDT inode, where the kernel reads it
    assert os.getxattr(mnt.mdt / "a" / "shared" / "new", "system.posix_acl_access")


def test_security_and_trusted_names_are_refused(mnt):
    path = mnt.root / "f"
    path.write_bytes(b"data")
    os.chmod(path, 0o644)
    for name in ("security.selinux", "security.foo", "trusted.foo",
                 "security.scratchkeeper.lov"):
        with pytest.raises(PermissionError):
            os.setxattr(path, name, b"x")           # root included
        with pytest.raises(PermissionError):
            os.removexattr(path, name)
    assert run(A, ["setfattr", "-n", "security.selinux", "-v", "x", str(path)],
               mnt.root).returncode != 0
    # a user who can reach the file reads its layout
    done = run(C, ["getfattr", "-n", "security.scratchkeeper.lov", "--only-values", str(path)],
               mnt.root)
    assert done.returncode == 0 and done.stdout.startswith("lov 1 "), done.stderr
    # trusted.* (set on the MDT by root) is neither listed nor read for another user
    os.setxattr(mnt.mdt / "f", "trusted.scratchkeeper.note", b"root's")
    assert "trusted.scratchkeeper.note" in os.listxattr(path)
    assert as_user(C, C, lambda: _no_trusted(path)) == (0, "")


def _no_trusted(path: Path) -> None:
    names = os.listxattr(path)
    assert not [n for n in names if n.startswith("trusted.")], names
    assert "security.scratchkeeper.lov" in names
    try:
        os.getxattr(path, "trusted.scratchkeeper.note")
    except OSError as err:
        assert err.errno == errno.ENODATA, err  # as ext4 answers a user
        return
    raise AssertionError("trusted.* read by a user")


def test_the_root_shows_its_own_mode_over_a_closed_mdt(mnt):
    """store_root/mdt is root's and 0700 (no user resolves a name in it outside the mount):
    the mount's root shows the mode chmod gave it, kept across mounts, and takes no ACL."""
    assert stat.S_IMODE(mnt.mdt.stat().st_mode) == 0o700
    assert stat.S_IMODE(mnt.root.stat().st_mode) == 0o755
    os.chmod(mnt.root, 0o1777)
    os.chown(mnt.root, 0, TEAM)
    assert stat.S_IMODE(mnt.mdt.stat().st_mode) == 0o700
    assert as_user(C, C, lambda: (mnt.root / "mine").write_bytes(b"c")) == (0, "")
    with pytest.raises(PermissionError):
        os.setxattr(mnt.root, "system.posix_acl_access", _acl_bytes())
    assert run(0, ["setfacl", "-m", f"u:{B}:rwx", str(mnt.root)], mnt.root).returncode != 0
    assert stat.S_IMODE(mnt.mdt.stat().st_mode) == 0o700
    mnt.stop()
    mnt.start()
    info = mnt.root.stat()
    assert (stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid) == (0o1777, 0, TEAM)
    # a store from before: its MDT directory open (what users saw), no attribute yet; the
    # mount's start closes the directory and shows the mode it had
    mnt.stop()
    os.removexattr(mnt.mdt, "trusted.scratchkeeper.root")
    os.chmod(mnt.mdt, 0o1775)
    os.chown(mnt.mdt, 0, TEAM)
    mnt.start()
    info = mnt.root.stat()
    assert (stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid) == (0o1775, 0, TEAM)
    assert stat.S_IMODE(mnt.mdt.stat().st_mode) == 0o700


def _acl_bytes() -> bytes:
    """A POSIX ACL xattr value (version 2): user::rwx group::r-x other::r-x."""
    import struct
    entries = [(0x01, 0o7, 0xFFFFFFFF), (0x04, 0o5, 0xFFFFFFFF), (0x20, 0o5, 0xFFFFFFFF)]
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)
