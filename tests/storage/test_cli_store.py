"""``scratchkeeper store`` end to end on the local store."""

from __future__ import annotations

import json
import random

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
    (["put", "{missing}", "x"], b"cannot read"),
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
