"""recoveryd reads a file:// source with the rights of the file's owner, never more (two real
users, skplain and skother; recoveryd's side runs as root, as the daemon does)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scratchkeeper.config import TransferConfig
from scratchkeeper.errors import TransferError
from scratchkeeper.ownership import Owner
from scratchkeeper.recovery.outcome import LOST, PATCHED
from scratchkeeper.recovery.reconstruct import Recoverer
from scratchkeeper.storage import Extent
from scratchkeeper.transfer.ranged import open_ranged
from user_runtime import plain_user

from .conftest import other_user, read_all, stage, write_site

KiB = 1 << 10


@pytest.fixture
def users():
    plain_uid, plain_gid = plain_user()
    other_uid, other_gid, shared_gid = other_user()
    return {"plain": (plain_uid, plain_gid), "other": (other_uid, other_gid),
            "shared_gid": shared_gid}


@pytest.fixture
def homes(site_dir, users):
    """A folder of each user's (0755), as their home or project directories would be."""
    folders = {}
    for name in ("plain", "other"):
        folder = site_dir / f"home-{name}"
        folder.mkdir()
        os.chown(folder, *users[name])
        os.chmod(folder, 0o755)
        folders[name] = folder
    return folders


def _file(path: Path, data: bytes, owner: tuple[int, int], mode: int) -> Path:
    path.write_bytes(data)
    os.chown(path, *owner)
    os.chmod(path, mode)
    return path


def _damaged(site, name: str, data: bytes, source: str, owner: tuple[int, int]):
    backend = site.backend
    path = stage(backend, name, data, source, stripe_count=2, stripe_size=64 * KiB, owner=owner)
    backend.fail_ost(backend.layout(path).ost_list[0])
    return path


@pytest.fixture
def site(site_dir):
    return write_site(site_dir / "site", ost_count=8)


def test_a_source_its_owner_cannot_read_is_refused_and_says_nothing_about_it(site, homes, users):
    """skplain's file names skother's private file (or a link to it) as its source: recoveryd
    must not copy skother's bytes into it, and must answer as for a file that does not exist."""
    secret = os.urandom(300_007)
    private = _file(homes["other"] / "secret.bin", secret, users["other"], 0o600)
    link = homes["plain"] / "innocent.bin"
    os.symlink(private, link)
    os.lchown(link, *users["plain"])
    missing = homes["other"] / "no-such-file.bin"
    recoverer = Recoverer(site.backend, site.config)
    reasons = {}
    for name, source in [("direct", private), ("link", link), ("missing", missing)]:
        path = _damaged(site, f"{name}.bin", secret, f"file://{source}", users["plain"])
        outcome = recoverer.recover(path)
        assert outcome.state == LOST, (name, outcome)
        assert outcome.patched_bytes == 0
        reasons[name] = outcome.reason.replace(str(source), "SOURCE").replace(path, "FILE")
    # one answer for all three: no oracle on whether skother's file exists, or its size
    assert reasons["direct"] == reasons["link"] == reasons["missing"], reasons
    assert f"no such file, or not readable by uid {users['plain'][0]}" in reasons["direct"]
    assert str(len(secret)) not in reasons["direct"]


def test_the_owner_reads_what_their_groups_allow(site, homes, users):
    """skother's supplementary group opens a group-readable source; skplain, not in it, cannot."""
    data = os.urandom(250_001)
    shared = _file(homes["other"] / "shared.bin", data, (0, users["shared_gid"]), 0o640)
    recoverer = Recoverer(site.backend, site.config)
    theirs = _damaged(site, "theirs.bin", data, f"file://{shared}", users["other"])
    outcome = recoverer.recover(theirs)
    assert outcome.state == PATCHED, outcome
    assert read_all(site.backend, theirs) == data
    # the same URI for skplain: the reader pooled for skother must not serve skplain
    mine = _damaged(site, "mine.bin", data, f"file://{shared}", users["plain"])
    assert recoverer.recover(mine).state == LOST


def test_the_source_is_resolved_again_for_every_request(homes, users):
    """A reader that has served one request does not keep the file: swapped for a link to a
    file the owner cannot read, the next request is refused."""
    data = os.urandom(200_003)
    source = _file(homes["plain"] / "source.bin", data, users["plain"], 0o644)
    _file(homes["other"] / "secret.bin", b"s" * len(data), users["other"], 0o600)
    owner = Owner.of(*users["plain"])
    reader = open_ranged(f"file://{source}", TransferConfig(), owner=owner)
    try:
        (piece,) = reader.fetch([Extent(1000, 5000)])
        assert piece.data == data[1000:6000]
        source.unlink()
        os.symlink(homes["other"] / "secret.bin", source)
        with pytest.raises(TransferError, match="no such file, or not readable by uid"):
            list(reader.fetch([Extent(1000, 5000)]))
        with pytest.raises(TransferError, match="no such file, or not readable by uid"):
            reader.size()
    finally:
        reader.close()


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_device_is_never_read_as_a_source(device):
    with open_ranged(f"file://{device}", TransferConfig(), owner=Owner.of(0, 0)) as reader:
        with pytest.raises(TransferError, match="not a regular file"):
            list(reader.fetch([Extent(0, 4096)]))


def test_a_failed_read_names_its_byte(tmp_path):
    source = tmp_path / "short.bin"
    source.write_bytes(b"x" * 10_000)
    with open_ranged(f"file://{source}", TransferConfig()) as reader:
        with pytest.raises(TransferError, match="source ends at byte 10000") as failed:
            list(reader.fetch([Extent(0, 100), Extent(9_000, 5_000)]))
    assert failed.value.offset == 10_000
