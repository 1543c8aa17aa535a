"""Issue 30, "Trust between users": a user's data is readable only as its mode and POSIX ACLs
allow, by every path into the store. The MDT and OST directories are root's 0700 and objects
0600, so the only way in is the scratch mount, whose every lookup and open the kernel checks
(``default_permissions`` and FUSE's POSIX ACLs); a user's ``scratchkeeper store cat|get`` reads
through the mount too (``storage/local/users.py``).

Users A, B and C are bare uids (no account needed: the kernel knows numbers only). Their
``scratchkeeper`` runs with the system Python and a world-readable copy of the package (the
venv is under /root, which they cannot enter).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

import user_runtime
from scratchkeeper.storage import XATTR_TRUSTED_NAMES
from scratchkeeper.storage.layout import LOV_XATTR, FileLayout
from user_runtime import DEPENDENCIES, plain_python, world_readable_copy

A, B, C = 4141, 4242, 4343
OP_TIMEOUT = 120


@pytest.fixture(scope="module")
def user_library():
    """The package and what its command line imports, readable by every user."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run processes as other users")
    folder = Path(tempfile.mkdtemp(prefix="sk-privacy-lib-", dir="/tmp"))
    folder.chmod(0o755)
    try:
        yield world_readable_copy(folder / "lib", DEPENDENCIES)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def as_user(uid: int, action, *, umask: int = 0o022) -> tuple[int, str]:
    """:func:`user_runtime.as_user` with ``uid`` as the gid too."""
    return user_runtime.as_user(uid, uid, action, umask=umask)


def run_as(uid: int, argv: list[str], *, cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, user=uid, group=uid, extra_groups=[], cwd=cwd,
                          env={"PATH": "/usr/bin:/bin"}, capture_output=True,
                          timeout=OP_TIMEOUT, **kwargs)


def store_as(mnt, library: Path, uid: int, *argv: str, config: Path | None = None
             ) -> subprocess.CompletedProcess:
    """``scratchkeeper -c CONFIG store ARGV...`` as ``uid`` (a user's batch job)."""
    main = (f"import sys; sys.path.insert(0, {str(library)!r}); "
            "from scratchkeeper.cli import main; sys.exit(main())")
    (config or mnt.config).chmod(0o644)
    return run_as(uid, [plain_python(), "-I", "-c", main, "-c", str(config or mnt.config),
                        "store", *argv], cwd=mnt.root.parent)


def home_of(mnt, uid: int, name: str, mode: int = 0o755) -> Path:
    """A directory of the scratch root belonging to ``uid`` (made by root, as a site does)."""
    home = mnt.root / name
    home.mkdir()
    os.chown(home, uid, uid)
    os.chmod(home, mode)
    return home


def secret_bytes(size: int = 300_000) -> bytes:
    """Bytes no other file holds, longer than a stripe: on both of the file's objects."""
    token = b"SECRET-" + os.urandom(8).hex().encode() + b"\n"
    return (token * (size // len(token) + 1))[:size]


def refused_line(result: subprocess.CompletedProcess) -> str:
    assert (result.returncode, result.stdout) == (2, b""), result
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_private_directory_keeps_its_0644_file_from_another_user(mnt, user_library):
    """The issue's reproduction: A's 0644 file inside a ``chmod go-rwx`` directory. B reads
    it neither through the mount, nor with ``store cat``/``store get``, nor with ``grep -r``
    over ``store_root`` (where its objects are) or the scratch root; A still does."""
    home = home_of(mnt, A, "alice")
    secret = secret_bytes()
    target = home / "private" / "data.txt"

    def make():
        os.mkdir(home / "private")
        os.chmod(home / "private", 0o700)  # chmod go-rwx
        target.write_bytes(secret)

    assert as_user(A, make) == (0, "")
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert as_user(B, target.read_bytes) == (1, "PermissionError")

    walked = f"uid {B} may not reach it"
    assert refused_line(store_as(mnt, user_library, B, "cat", str(target))) == \
        f"scratchkeeper: {target}: permission denied ({walked})"
    out = mnt.root.parent / "b-out"
    out.mkdir()
    os.chown(out, B, B)
    assert refused_line(store_as(mnt, user_library, B, "get", str(target),
                                 str(out / "copy"))) == \
        f"scratchkeeper: {target}: permission denied ({walked})"
    assert os.listdir(out) == []

    # the bytes are on the OSTs (root finds them there) and no other user reaches them
    root_grep = subprocess.run(["grep", "-r", "-l", "-F", secret[:23], str(mnt.store)],
                               capture_output=True, timeout=OP_TIMEOUT)
    assert len(root_grep.stdout.splitlines()) == 2, root_grep
    for where in (mnt.store, mnt.root):
        grep = run_as(B, ["grep", "-r", "-l", "-F", secret[:23].decode(), str(where)],
                      cwd=mnt.root.parent)
        assert grep.stdout == b"", where
        assert grep.returncode == 2  # directories it may not read, reported as such

    mine = store_as(mnt, user_library, A, "cat", str(target))
    assert (mine.returncode, mine.stderr) == (0, b"")
    assert mine.stdout == secret
    got = home / "copy"
    copied = store_as(mnt, user_library, A, "get", str(target), str(got))
    assert (copied.returncode, copied.stderr) == (0, b"")
    assert got.read_bytes() == secret


def test_an_acl_denying_one_user_is_honoured_by_the_mount_and_store_cat(mnt, user_library):
    """``setfacl -m u:B:0 FILE`` on A's 0644 file: B is refused through the mount and by
    ``store cat``/``store get``, while C, whom the mode lets in, reads it (needs the mount's
    POSIX ACL support: FUSE_CAP_POSIX_ACL and the ACL attributes passed through)."""
    home = home_of(mnt, A, "alice")
    secret = secret_bytes()
    target = home / "shared.txt"

    def make():
        target.write_bytes(secret)
        setfacl = subprocess.run(["setfacl", "-m", f"u:{B}:0", str(target)],
                                 capture_output=True, timeout=OP_TIMEOUT)
        assert setfacl.returncode == 0, setfacl.stderr

    assert as_user(A, make) == (0, "")
    acl = subprocess.run(["getfacl", "-n", str(target)], capture_output=True, text=True,
                         timeout=OP_TIMEOUT)
    assert f"user:{B}:---" in acl.stdout.splitlines(), acl.stdout
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # the mask r--: the group bits

    assert as_user(B, target.read_bytes) == (1, "PermissionError")
    assert as_user(C, target.read_bytes) == (0, "")
    assert refused_line(store_as(mnt, user_library, B, "cat", str(target))) == \
        f"scratchkeeper: {target}: permission denied (uid {B} may not read it)"
    out = mnt.root.parent / "b-out"
    out.mkdir()
    os.chown(out, B, B)
    assert refused_line(store_as(mnt, user_library, B, "get", str(target),
                                 str(out / "copy"))) == \
        f"scratchkeeper: {target}: permission denied (uid {B} may not read it)"
    assert os.listdir(out) == []
    allowed = store_as(mnt, user_library, C, "cat", str(target))
    assert (allowed.returncode, allowed.stderr) == (0, b"")
    assert allowed.stdout == secret


def test_the_mdt_and_the_objects_are_closed_to_their_own_owner(mnt):
    """A may chmod its file through the mount only: the MDT inode (a ``chmod 600`` made there
    would bypass the mount) and the objects, whose ids A reads in the layout, are out of
    reach by every name, while the scratch root still lets users in."""
    home = home_of(mnt, A, "alice")
    target = home / "f"
    inode = mnt.mdt / "alice" / "f"

    def make():
        target.write_bytes(secret_bytes())
        layout = FileLayout.from_lov(os.getxattr(target, LOV_XATTR), str(target))
        with open(home / "ids", "w") as handle:
            json.dump([[o.ost_index, o.object_id] for c in layout.components
                       for o in c.objects], handle)

    assert as_user(A, make) == (0, "")
    ids = json.loads((home / "ids").read_text())
    objects = [mnt.ost(index) / oid for index, oid in ids]
    assert len(objects) == 2
    assert {(o.stat().st_uid, stat.S_IMODE(o.stat().st_mode)) for o in objects} == {(A, 0o600)}
    for directory in [mnt.mdt, mnt.store / "mdt.staging"] + [mnt.ost(i) for i in range(4)]:
        info = directory.stat()
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o700), directory
    assert stat.S_IMODE(mnt.root.stat().st_mode) == 0o755  # what users see at the root

    for action in (lambda: os.chmod(inode, 0o600), lambda: os.stat(inode),
                   lambda: os.setxattr(inode, "user.x", b"1"),
                   *[(lambda o=o: open(o, "rb").close()) for o in objects],
                   *[(lambda o=o: os.chmod(o, 0o644)) for o in objects]):
        assert as_user(A, action) == (1, "PermissionError")
    assert stat.S_IMODE(inode.stat().st_mode) == 0o644

    # through the mount, A's chmod is the kernel-checked one, and B then reads nothing
    assert as_user(A, lambda: os.chmod(target, 0o600)) == (0, "")
    assert stat.S_IMODE(inode.stat().st_mode) == 0o600
    assert as_user(B, target.read_bytes) == (1, "PermissionError")


PLAIN_SCRIPT = """
import hashlib, json
from scratchkeeper.config import load_config
from scratchkeeper.storage import open_backend
store = open_backend(load_config({config!r}))
results = {{}}
def attempt(name, action):
    try:
        results[name] = {{"ok": action()}}
    except Exception as err:
        results[name] = {{"error": type(err).__name__, "message": str(err)}}
digest = lambda b: hashlib.sha256(b).hexdigest()
attempt("through_mount", lambda: store.through_mount)
attempt("mine", lambda: digest(store.read("me/mine.dat", 0, 1 << 30)))
attempt("mine_streamed", lambda: digest(b"".join(store.open_reader("me/mine.dat",
                                                                   chunk_size=100_000))))
attempt("mine_range", lambda: store.read("me/mine.dat", 65_000, 1_000).hex())
attempt("secret", lambda: store.read("other/secret.dat", 0, 100))
attempt("hidden", lambda: store.read("other/hidden/file.dat", 0, 100))
attempt("striped_on_failed_ost", lambda: store.read("me/striped.dat", 0, 1 << 30))
attempt("stat", lambda: (lambda s: [s.size, s.uid, s.mode])(store.stat("me/mine.dat")))
attempt("layout", lambda: len(store.layout("me/mine.dat").ost_list))
attempt("file_id", lambda: store.file_id("me/mine.dat"))
attempt("xattr", lambda: store.get_xattr("me/mine.dat", "user.scratchkeeper.source").decode())
attempt("xattrs", lambda: {{k: v.decode() for k, v in store.list_xattrs("me/mine.dat").items()}})
attempt("list_dir", lambda: store.list_dir("me"))
attempt("list_root", lambda: store.list_dir(""))
attempt("hidden_dir", lambda: store.list_dir("other/hidden"))
attempt("secret_xattrs", lambda: store.list_xattrs("other/secret.dat"))
attempt("files_on_ost", lambda: store.files_on_ost({failed}))
attempt("osts", lambda: [o.state for o in store.list_osts()])
attempt("write", lambda: store.write("me/mine.dat", 0, b"x"))
attempt("set_xattr", lambda: store.set_xattr("me/mine.dat", "user.x", b"1"))
print(json.dumps(results))
"""


def test_a_users_store_reads_through_the_mount_what_the_kernel_lets_it(mnt, user_library):
    """The read-only store of a user (``store cat``, ``recovery status``...) walks the scratch
    mount: it reads what the kernel lets the user read and nothing else, layouts included; a
    stripe on a failed OST is still ``TargetUnavailable`` naming the OST."""
    from scratchkeeper.config import load_config
    from scratchkeeper.storage import LayoutRequest, open_backend

    backend = open_backend(load_config(mnt.config))
    me = home_of(mnt, A, "me")
    mine = os.urandom(400_000)

    def make():
        old = os.umask(0o077)
        try:
            (me / "mine.dat").write_bytes(mine)  # objects made by the mount
        finally:
            os.umask(old)

    assert as_user(A, make) == (0, "")
    backend.set_xattrs(str(me / "mine.dat"), {
        "user.scratchkeeper.source": b"gsiftp://h/mine",
        **dict.fromkeys(sorted(XATTR_TRUSTED_NAMES), b"root's record")})
    # an OST mine.dat is not on fails; striped.dat and the hidden file have a stripe there
    failed = max(set(range(4)) - backend.layout(str(me / "mine.dat")).osts())
    other = home_of(mnt, B, "other")
    secret = backend.create(str(other / "secret.dat"), owner=(B, B), mode=0o600)
    backend.write(secret.path, 0, b"not yours")
    backend.set_xattr(secret.path, "user.scratchkeeper.source", b"file:///secret")
    (other / "hidden").mkdir(mode=0o700)
    os.chown(other / "hidden", B, B)
    backend.write(backend.create(str(other / "hidden" / "file.dat"), LayoutRequest(
        ost_list=(failed,)), owner=(B, B), mode=0o644).path, 0, b"hidden")
    striped = backend.create(str(me / "striped.dat"), LayoutRequest(
        ost_list=((failed + 1) % 4, failed)), owner=(A, A), mode=0o600)
    backend.write(striped.path, 0, os.urandom(200_000))
    backend.fail_ost(failed)
    mnt.config.chmod(0o644)

    main = f"import sys; sys.path.insert(0, {str(user_library)!r})\n"
    result = run_as(A, [plain_python(), "-I", "-c", main + PLAIN_SCRIPT.format(
        config=str(mnt.config), failed=failed)], cwd=mnt.root.parent)
    assert result.returncode == 0, result.stderr
    results = json.loads(result.stdout)
    assert results["through_mount"] == {"ok": True}
    assert results["mine"] == {"ok": hashlib.sha256(mine).hexdigest()}
    assert results["mine_streamed"] == {"ok": hashlib.sha256(mine).hexdigest()}
    assert results["mine_range"] == {"ok": mine[65_000:66_000].hex()}
    assert results["secret"] == {"error": "PermissionDenied", "message": (
        f"{other}/secret.dat: permission denied (uid {A} may not read it)")}
    assert results["hidden"] == {"error": "PermissionDenied", "message": (
        f"{other}/hidden/file.dat: permission denied (uid {A} may not reach it)")}
    assert results["striped_on_failed_ost"]["error"] == "TargetUnavailable"
    assert f"OST {failed} is unavailable" in results["striped_on_failed_ost"]["message"]
    assert results["stat"] == {"ok": [len(mine), A, 0o600]}
    assert results["layout"] == {"ok": mnt.settings["stripe_count"]}
    assert results["file_id"] == {"ok": (mnt.mdt / "me" / "mine.dat").stat().st_ino}
    assert results["xattr"] == {"ok": "gsiftp://h/mine"}
    # root's trusted.* record of the file is root's: not listed to its owner
    assert results["xattrs"] == {"ok": {"user.scratchkeeper.source": "gsiftp://h/mine"}}
    assert results["list_dir"] == {"ok": ["mine.dat", "striped.dat"]}
    assert results["list_root"] == {"ok": ["me/", "other/"]}
    assert results["hidden_dir"] == {"error": "PermissionDenied", "message": (
        f"{other}/hidden: permission denied (uid {A} may not list it)")}
    assert results["secret_xattrs"] == {"error": "PermissionDenied", "message": (
        f"{other}/secret.dat: permission denied (uid {A} may not read its attribute "
        "user.scratchkeeper.source)")}
    # a file A may not reach is not named to A, whatever OST it is on
    assert results["files_on_ost"] == {"ok": sorted(
        [striped.path] + [secret.path] * (failed in backend.layout(secret.path).osts()))}
    assert results["osts"] == {"ok": ["failed" if i == failed else "active" for i in range(4)]}
    for name in ("write", "set_xattr"):
        assert results[name] == {"error": "PermissionDenied", "message": (
            f"the store at {mnt.store} is owned by uid 0; only its owner can change it "
            f"(this process runs as uid {A})")}


def test_a_mount_of_another_store_at_the_scratch_root_is_refused(mnt, user_library):
    """A user's store reads through the mount only when it serves this store's MDT."""
    home = home_of(mnt, A, "alice")
    assert as_user(A, lambda: (home / "f").write_bytes(b"mine")) == (0, "")
    other_store = mnt.root.parent / "other-store"
    config = mnt.root.parent / "other.toml"
    config.write_text(mnt.config.read_text().replace(f'store_root = "{mnt.store}"',
                                                     f'store_root = "{other_store}"'))
    config.chmod(0o644)
    from scratchkeeper.config import load_config
    from scratchkeeper.storage import open_backend

    open_backend(load_config(config)).list_osts()  # root makes it
    assert refused_line(store_as(mnt, user_library, A, "cat", str(home / "f"),
                                 config=config)) == (
        f"scratchkeeper: the store at {other_store} keeps its data for root: users read it "
        f"through the scratch mount at {mnt.root}, which serves another store")
    mine = store_as(mnt, user_library, A, "cat", str(home / "f"))
    assert (mine.returncode, mine.stdout) == (0, b"mine")
