"""Issue 39: one user's files cost no other user an open. The mount is one process serving every
user of the node, so its open-file limit is shared: it keeps a descriptor for at most a bounded
number of the inodes the kernel caches (the others are opened again from their file handles),
and counts what users hold open (files, their objects, directories) against each user's share
(docs/mount.rst "Descriptors").

Each test lowers the running mount's limit with prlimit (the mount follows its soft limit as
it is), so that a few thousand files are far more than it. Users A and B are bare uids.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import time
from pathlib import Path

import user_runtime
from user_runtime import plain_python

A, B = 4545, 4646
LIMIT = 512           # the mount's open-file limit in these tests
FILES = 3 * LIMIT     # what A creates: far more than the limit
OP_TIMEOUT = 120
DESCRIPTORS = "user.scratchkeeper.descriptors"

# A's job: open its files read-write and write a byte to each (so the mount opens their
# objects too), holding every one, until the mount refuses; print how many and why, then hold
# them until its stdin closes.
HOLDER = """
import errno, os, sys
folder, count = sys.argv[1], int(sys.argv[2])
held, why = [], "none"
for i in range(count):
    try:
        fd = os.open(os.path.join(folder, "f%d" % i), os.O_RDWR)
    except OSError as err:
        why = errno.errorcode[err.errno]
        break
    try:
        os.write(fd, b"x")
    except OSError as err:
        os.close(fd)
        why = errno.errorcode[err.errno]
        break
    held.append(fd)
print(len(held), why, flush=True)
sys.stdin.read()
"""


def lower_limit(mnt, limit: int) -> None:
    """The running mount's open-file limit, soft and hard (prlimit, as an administrator would)."""
    assert mnt.process is not None
    resource.prlimit(mnt.process.pid, resource.RLIMIT_NOFILE, (limit, limit))


def open_in_mount(mnt) -> int:
    """How many descriptors the mount process has open now."""
    assert mnt.process is not None
    return len(os.listdir(f"/proc/{mnt.process.pid}/fd"))


def descriptors(mnt) -> dict:
    """The mount's descriptor counters (its root's read-only attribute)."""
    return json.loads(os.getxattr(mnt.root, DESCRIPTORS))


def home_of(mnt, uid: int, name: str) -> Path:
    home = mnt.root / name
    home.mkdir()
    os.chown(home, uid, uid)
    os.chmod(home, 0o755)
    return home


def run_as(uid: int, argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(argv, user=uid, group=uid, extra_groups=[], cwd=cwd,
                          env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                          timeout=OP_TIMEOUT)


def create_files(folder: Path, count: int) -> int:
    """As the folder's owner: empty files f0.. until ``count`` or the first refusal; how many."""
    def create():
        for i in range(count):
            try:
                open(folder / f"f{i}", "wb").close()
            except OSError as err:
                raise RuntimeError(f"created {i}: {err.strerror}") from None

    st = folder.stat()
    code, error = user_runtime.as_user(st.st_uid, st.st_gid, create)
    if code == 0:
        return count
    assert error.startswith("RuntimeError('created "), error
    return int(error.split()[1].rstrip(":"))


def check_another_user_works(mnt, uid: int, others: Path, tag: str) -> None:
    """``uid``'s ls, stat, cat, create and write through the mount all succeed, in its own
    folder and in the other user's (readable) one."""
    home = mnt.root / f"home{uid}"
    if not home.exists():
        home_of(mnt, uid, f"home{uid}")
    name = f"{tag}.txt"
    steps = [
        ["ls", "-l", str(others)],
        ["stat", str(others / "f0"), str(others / f"f{FILES - 1}")],
        ["sh", "-c", f"echo {tag} > {name}"],
        ["sh", "-c", f"echo more >> {name}"],
        ["cat", name],
        ["stat", name],
        ["ls", "-la", "."],
        ["mkdir", f"{tag}.d"],
        ["ls", str(mnt.root)],
    ]
    for argv in steps:
        done = run_as(uid, argv, home)
        assert done.returncode == 0, f"{argv}: {done.stderr.strip()}\n{mnt.log.read_text()[-2000:]}"
    assert (home / name).read_text() == f"{tag}\nmore\n"
    listing = run_as(uid, ["ls", str(others)], home).stdout.split()
    assert {f"f{i}" for i in range(FILES)} <= set(listing)


def test_one_users_files_and_opens_leave_every_other_user_their_opens(make_mount):
    mnt = make_mount()
    lower_limit(mnt, LIMIT)
    alice = home_of(mnt, A, "alice")
    # far more files than the limit: the kernel caches every one of their inodes (before
    # issue 39 the mount held a descriptor for each: A's own creates stopped at the limit, and
    # every other user's ls, cat and echo > f failed with "Too many open files")
    created = create_files(alice, FILES)
    check_another_user_works(mnt, B, alice, "cached")
    assert created == FILES
    counters = descriptors(mnt)
    assert counters["limit"] == LIMIT
    assert counters["inodes"]["open"] <= counters["inodes"]["max"] < LIMIT // 2
    # A's job holds as many files open as it may, each with its objects
    holder = subprocess.Popen([plain_python(), "-I", "-c", HOLDER, str(alice), str(FILES)],
                              user=A, group=A, extra_groups=[], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env={"PATH": "/usr/bin:/bin"})
    try:
        assert holder.stdout is not None
        held, why = holder.stdout.readline().split()
        counters = descriptors(mnt)
        share = counters["users"]["share"]
        # refused at its own share (one descriptor per file, one per object: 2 stripes)
        assert why == "EMFILE" and 0 < 3 * int(held) <= share, (held, why, counters)
        assert counters["users"]["held"] <= share
        check_another_user_works(mnt, B, alice, "held")
        assert open_in_mount(mnt) < LIMIT
    finally:
        if holder.stdin:
            holder.stdin.close()
        holder.wait(timeout=OP_TIMEOUT)
    # A's job gone: what it held is given back (its files stay, cached)
    deadline = time.monotonic() + 30
    while descriptors(mnt)["users"]["held"] > 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert descriptors(mnt)["users"]["held"] == 0
    check_another_user_works(mnt, B, alice, "after")
    assert "Too many open files" not in mnt.log.read_text()


def test_inodes_whose_descriptors_were_closed_are_opened_again_from_their_handles(make_mount):
    """Every kind of request on an inode the cache closed (attr_timeout 0: each goes to the
    mount): the inode is opened again from its file handle, by name it is the same file."""
    mnt = make_mount(attr_timeout=0.0)
    lower_limit(mnt, LIMIT)
    alice = home_of(mnt, A, "alice")

    def make_then_use():
        os.mkdir(alice / "d0")
        (alice / "d0" / "data").write_bytes(b"payload" * 10_000)
        os.symlink("d0/data", alice / "link")
        os.link(alice / "d0" / "data", alice / "hard")
        os.setxattr(alice / "d0", "user.note", b"kept")
        for i in range(FILES):  # pushes the entries above out of the cache
            open(alice / f"f{i}", "wb").close()
        # every request below needs the evicted descriptors of d0, data, link and hard
        assert os.stat(alice / "d0" / "data").st_size == 70_000
        assert (alice / "link").read_bytes() == b"payload" * 10_000
        assert os.readlink(alice / "link") == "d0/data"
        assert os.getxattr(alice / "d0", "user.note") == b"kept"
        assert "user.note" in os.listxattr(alice / "d0")
        os.chmod(alice / "hard", 0o640)
        assert os.stat(alice / "d0" / "data").st_mode & 0o777 == 0o640
        with open(alice / "hard", "r+b") as f:
            f.write(b"PAY")
        assert (alice / "d0" / "data").read_bytes()[:7] == b"PAYload"
        os.truncate(alice / "d0" / "data", 3)
        os.rename(alice / "d0", alice / "d1")
        assert (alice / "d1" / "data").read_bytes() == b"PAY"
        assert sorted(os.listdir(alice / "d1")) == ["data"]
        os.unlink(alice / "hard")
        os.unlink(alice / "d1" / "data")
        os.rmdir(alice / "d1")

    assert user_runtime.as_user(A, A, make_then_use) == (0, "")
    counters = descriptors(mnt)
    assert counters["inodes"]["open"] <= counters["inodes"]["max"]
    check_another_user_works(mnt, B, alice, "handles")
