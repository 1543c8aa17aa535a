"""``scratchkeeper store`` end to end on the local store."""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import sqlite3
import subprocess

import pytest

from scratchkeeper.cli import main


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "site.toml"
    path.write_text(f"""
[storage]
backend = "local"
scratch_root = "{tmp_path / 'scratch'}"
store_root = "{tmp_path / 'store'}"
ost_count = 6
stripe_count = 2
stripe_size = 65536

[logging]
level = "WARNING"
""")
    return str(path)


def store(config, *args):
    return main(["-c", config, "store", *args])


def test_put_layout_cat_get_rm(config, tmp_path, capsysbinary):
    data = random.Random(1).randbytes(333_333)
    local = tmp_path / "in.bin"
    local.write_bytes(data)
    assert store(config, "put", str(local), "u1/in.bin", "--stripe-count", "3",
                 "--stripe-size", "128K") == 0
    capsysbinary.readouterr()
    assert store(config, "layout", "u1/in.bin", "--json") == 0
    layout = json.loads(capsysbinary.readouterr().out)
    assert layout["size"] == len(data)
    assert layout["components"][0]["stripe_count"] == 3
    assert layout["components"][0]["stripe_size"] == 131072
    assert store(config, "cat", "u1/in.bin") == 0
    assert capsysbinary.readouterr().out == data
    assert store(config, "get", "u1/in.bin", str(tmp_path / "out.bin")) == 0
    assert (tmp_path / "out.bin").read_bytes() == data
    assert store(config, "ls", "u1") == 0
    assert capsysbinary.readouterr().out == b"in.bin\n"
    assert store(config, "rm", "u1/in.bin") == 0
    assert store(config, "ls", "u1") == 0
    assert capsysbinary.readouterr().out == b""


def test_fail_and_restore_ost(config, tmp_path, capsysbinary):
    local = tmp_path / "in.bin"
    local.write_bytes(bytes(300_000))
    assert store(config, "put", str(local), "f", "--ost-list", "1,4") == 0
    assert store(config, "fail-ost", "4") == 0
    capsysbinary.readouterr()
    assert store(config, "cat", "f") == 1
    assert b"OST 4 is unavailable" in capsysbinary.readouterr().err
    assert store(config, "df", "--json") == 0
    states = {o["ost_index"]: o["state"] for o in json.loads(capsysbinary.readouterr().out)}
    assert states[4] == "failed" and states[1] == "active"
    assert store(config, "df", "--check", "2") == 1  # an OST is down
    assert store(config, "restore-ost", "4") == 0
    capsysbinary.readouterr()
    assert store(config, "cat", "f") == 0
    assert capsysbinary.readouterr().out == bytes(300_000)


def test_import_and_xattr(config, tmp_path, capsysbinary):
    posix = tmp_path / "scratch" / "job1" / "input.dat"
    posix.parent.mkdir(parents=True)
    posix.write_bytes(b"staged by a data job")
    assert store(config, "import", str(posix)) == 0
    assert not posix.exists()
    assert store(config, "xattr", "job1/input.dat", "--set", "user.scratchkeeper.source",
                 "gsiftp://mirror/StagedInput") == 0
    assert b"user.scratchkeeper.source=gsiftp://mirror/StagedInput" in \
        capsysbinary.readouterr().out


@pytest.mark.parametrize("args,message", [
    (["put", "{missing}", "x"], b"missing: no such file"),
    (["put", "{local}", "../escape"], b"'..' is not allowed"),
    (["put", "{local}", "x", "--stripe-size", "1000"], b"multiple of 64 KiB"),
    (["put", "{local}", "x", "--ost-list", "2,2"], b"names an OST twice"),
    (["put", "{local}", "x", "--ost-list", "9"], b"no such OST"),
    (["layout", "nothere"], b"no such file in the store"),
    (["fail-ost", "17"], b"no such OST"),
])
def test_bad_input_is_one_line_and_exit_2(config, tmp_path, capsysbinary, args, message):
    local = tmp_path / "in.bin"
    local.write_bytes(b"abc")
    args = [a.format(local=local, missing=tmp_path / "missing") for a in args]
    assert store(config, *args) == 2
    err = capsysbinary.readouterr().err
    assert message in err and err.count(b"\n") == 1
    assert store(config, "ls") == 0
    assert capsysbinary.readouterr().out == b""  # nothing half-created


def test_bad_size_syntax_is_rejected_by_argparse(config, capsysbinary):
    with pytest.raises(SystemExit) as caught:
        store(config, "put", "a", "b", "--stripe-size", "12Q")
    assert caught.value.code == 2


# -- store put reads a regular file only, and a full disk leaves nothing ----------------------

def _stored_nothing(tmp_path) -> None:
    """No MDT inode (staged or linked), no object and no intent left in the store of ``config``."""
    store_root = tmp_path / "store"
    objects = list(store_root.glob("ost*/*"))
    assert objects == []
    if not (store_root / "namespace.db").exists():
        return  # refused before the store was even opened
    assert [p for p in (store_root / "mdt").rglob("*") if not p.is_dir()] == []
    assert list((store_root / "mdt.staging").iterdir()) == []
    database = sqlite3.connect(store_root / "namespace.db")
    try:
        assert database.execute("SELECT COUNT(*) FROM object_intents").fetchone()[0] == 0
    finally:
        database.close()


def _special_file(kind: str, tmp_path) -> str:
    if kind == "fifo":
        os.mkfifo(tmp_path / "fifo")
        return str(tmp_path / "fifo")
    if kind == "socket":
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(tmp_path / "sock"))
        return str(tmp_path / "sock")
    if kind == "directory":
        (tmp_path / "folder").mkdir()
        return str(tmp_path / "folder")
    if kind.startswith("link to "):
        target = _special_file(kind.removeprefix("link to "), tmp_path)
        (tmp_path / "link").symlink_to(target)
        return str(tmp_path / "link")
    if not os.path.exists(kind):
        pytest.skip(f"{kind} does not exist here")
    return kind


@pytest.mark.parametrize("kind,message", [
    ("/dev/zero", b"is a character device, not a regular file"),
    ("/dev/urandom", b"is a character device, not a regular file"),
    ("fifo", b"is a FIFO, not a regular file"),
    ("socket", b"is a socket or a device, not a regular file"),
    ("directory", b"is a directory, not a regular file"),
    ("link to /dev/zero", b"is a character device, not a regular file"),
    ("link to fifo", b"is a FIFO, not a regular file"),
    # /proc and /sys files are "regular" with sizes that lie: 0, or a page whatever they hold
    ("/proc/self/status", b"holds more than the 0 bytes its size says"),
    ("/proc/self/maps", b"holds more than the 0 bytes its size says"),
    ("/sys/kernel/mm/transparent_hugepage/enabled", b"its size said 4096 bytes but it ends"),
])
def test_put_refuses_anything_but_a_regular_file(config, tmp_path, capsysbinary, alarm, kind,
                                                 message):
    source = _special_file(kind, tmp_path)
    assert store(config, "put", source, "u1/x") == 2
    err = capsysbinary.readouterr().err
    assert err.startswith(source.encode() + b": ") and message in err and err.count(b"\n") == 1
    _stored_nothing(tmp_path)


def test_put_reads_a_link_to_a_regular_file(config, tmp_path, capsysbinary):
    (tmp_path / "real.bin").write_bytes(b"linked bytes")
    (tmp_path / "link.bin").symlink_to(tmp_path / "real.bin")
    assert store(config, "put", str(tmp_path / "link.bin"), "u1/linked") == 0
    capsysbinary.readouterr()
    assert store(config, "cat", "u1/linked") == 0
    assert capsysbinary.readouterr().out == b"linked bytes"


@pytest.fixture
def small_store(tmp_path):
    """``tmp_path/store`` on a 1 MiB tmpfs of its own (mounted for the test, then unmounted)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    mount = tmp_path / "store"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(mount)],
                   check=True, capture_output=True, timeout=30)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True, capture_output=True,
                       timeout=30)


def test_put_on_a_full_disk_is_one_line_and_leaves_nothing(config, tmp_path, small_store,
                                                           capsysbinary):
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(3 << 20))
    assert store(config, "put", str(big), "u1/big") == 1
    err = capsysbinary.readouterr().err
    assert err.count(b"\n") == 1 and b"u1/big: the store's file system is full" in err, err
    _stored_nothing(tmp_path)
    # and the space came back: a file that fits goes in
    (tmp_path / "small.bin").write_bytes(b"fits")
    assert store(config, "put", str(tmp_path / "small.bin"), "u1/small") == 0


def test_import_on_a_full_disk_keeps_the_posix_file_and_stores_nothing(config, tmp_path,
                                                                       small_store,
                                                                       capsysbinary):
    posix = tmp_path / "scratch" / "job1" / "input.dat"
    posix.parent.mkdir(parents=True)
    data = os.urandom(3 << 20)
    posix.write_bytes(data)
    assert store(config, "import", str(posix)) == 1
    err = capsysbinary.readouterr().err
    assert err.count(b"\n") == 1 and b"the store's file system is full" in err, err
    assert posix.read_bytes() == data
    _stored_nothing(tmp_path)


# -- directory defaults (lfs setstripe DIR / getstripe DIR) and garbage collection -------------
def test_setstripe_sets_a_directory_default_and_layout_shows_it(config, tmp_path,
                                                                capsysbinary):
    assert store(config, "setstripe", "proj/in", "--stripe-count", "3",
                 "--stripe-size", "128K") == 0
    assert capsysbinary.readouterr().out == \
        f"{tmp_path}/scratch/proj/in: stripe_count=3 stripe_size=131072\n".encode()
    local = tmp_path / "in.bin"
    local.write_bytes(bytes(200_000))
    assert store(config, "put", str(local), "proj/in/a.bin") == 0
    capsysbinary.readouterr()
    assert store(config, "layout", "proj/in/a.bin", "--json") == 0
    component = json.loads(capsysbinary.readouterr().out)["components"][0]
    assert (component["stripe_count"], component["stripe_size"]) == (3, 131072)
    assert store(config, "layout", "proj/in") == 0
    assert capsysbinary.readouterr().out == (f"{tmp_path}/scratch/proj/in\n"
                                             "  stripe_count: 3  stripe_size: 131072  "
                                             "pool: -\n").encode()
    assert store(config, "layout", "proj", "--json") == 0
    assert json.loads(capsysbinary.readouterr().out) == {
        "path": f"{tmp_path}/scratch/proj", "directory": True, "default": None}
    assert store(config, "ls", "proj") == 0
    assert capsysbinary.readouterr().out == b"in/\n"


@pytest.mark.parametrize("args,message", [
    (["setstripe", "d", "--stripe-size", "1000"], b"multiple of 64 KiB"),
    (["setstripe", "d", "--stripe-count", "0"], b"stripe count 0"),
    (["setstripe", "d", "--pool", "nope"], b"no such pool"),
    (["setstripe", "../d"], b"'..' is not allowed"),
])
def test_setstripe_bad_input_is_one_line_exit_2_and_makes_nothing(config, capsysbinary, args,
                                                                  message):
    assert store(config, *args) == 2
    err = capsysbinary.readouterr().err
    assert message in err and err.count(b"\n") == 1
    assert store(config, "ls") == 0
    assert capsysbinary.readouterr().out == b""


def test_setstripe_on_a_file_is_refused(config, tmp_path, capsysbinary):
    local = tmp_path / "in.bin"
    local.write_bytes(b"x")
    assert store(config, "put", str(local), "f") == 0
    capsysbinary.readouterr()
    assert store(config, "setstripe", "f", "-c", "1") == 2
    assert capsysbinary.readouterr().err == \
        f"scratchkeeper: {tmp_path}/scratch/f: is not a directory\n".encode()


def test_gc_prints_what_it_removed(config, tmp_path, capsysbinary):
    assert store(config, "gc") == 0  # creates the store; nothing to collect
    assert capsysbinary.readouterr().out == \
        b"0 object(s) deleted, 0 committing intent(s) released, 0 staging entries removed\n"
    orphan = tmp_path / "store" / "ost0003" / ("ab" * 16)
    orphan.write_bytes(b"x")
    database = sqlite3.connect(tmp_path / "store" / "namespace.db")
    database.execute("INSERT INTO object_intents(ost_index, object_id, owner) "
                     "VALUES (3, ?, 'pid:999999999:1')", ("ab" * 16,))
    database.commit()
    database.close()
    staged = tmp_path / "store" / "mdt.staging" / "pid:999999999:1.0123"
    staged.write_bytes(b"")
    assert store(config, "gc") == 0
    assert capsysbinary.readouterr().out == (
        f"deleted object {'ab' * 16} on OST 3\n"
        "removed staging entry pid:999999999:1.0123\n"
        "1 object(s) deleted, 0 committing intent(s) released, 1 staging entry removed\n"
    ).encode()
    assert not orphan.exists() and not staged.exists()


def test_setstripe_file_makes_an_empty_laid_out_file_a_copy_then_keeps(config, tmp_path,
                                                                       capsysbinary):
    """``store setstripe --file`` as a stage-in runs it: an empty file (a new one, or in place
    of an earlier store file), whose layout the copied data takes at import."""
    local = tmp_path / "in.bin"
    local.write_bytes(bytes(300_000))
    assert store(config, "put", str(local), "w/in.bin") == 0
    capsysbinary.readouterr()
    for _ in range(2):  # a re-run of the data job lays the file out again
        assert store(config, "setstripe", "--file", "-c", "3", "-S", "128K", "w/in.bin") == 0
        assert capsysbinary.readouterr().out.startswith(
            f"{tmp_path}/scratch/w/in.bin: stripe count 3, stripe size 131072".encode())
    (tmp_path / "scratch" / "w").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(local, tmp_path / "scratch" / "w" / "in.bin")
    assert store(config, "import", "w/in.bin") == 0
    capsysbinary.readouterr()
    assert store(config, "layout", "w/in.bin", "--json") == 0
    shown = json.loads(capsysbinary.readouterr().out)
    component = shown["components"][0]
    assert (component["stripe_count"], component["stripe_size"]) == (3, 131072), shown
