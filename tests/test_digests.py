"""Block digests recorded at stage-in (scratchkeeper.digests): computing, checking, storing."""

from __future__ import annotations

import hashlib
import os

import pytest

from scratchkeeper import digests
from scratchkeeper.state import StateStore
from scratchkeeper.storage.layout import Extent

KiB = 1024


@pytest.mark.parametrize("size", [0, 1, 65_535, 65_536, 65_537, 1_000_003, 4 * 1024 * KiB + 7])
@pytest.mark.parametrize("block", [4 * KiB, 64 * KiB, 1024 * KiB, 3 * KiB + 1])
def test_file_and_memory_digests_agree(tmp_path, size, block):
    data = os.urandom(size)
    path = tmp_path / "f"
    path.write_bytes(data)
    sha, from_file = digests.digest_file(str(path), block)
    assert sha == hashlib.sha256(data).hexdigest()
    assert from_file == digests.digest_bytes(data, block)
    assert len(from_file.crcs) == -(-size // block)
    if size:
        assert from_file.block(len(from_file.crcs) - 1).end == size


def test_check_finds_bad_and_partial_blocks():
    data = bytearray(os.urandom(10 * 4096 + 100))
    blocks = digests.digest_bytes(bytes(data), 4096)
    # whole blocks 1..3, plus part of block 4
    bad, partial = blocks.check(4096, data[4096:4096 * 4 + 10])
    assert bad == [] and partial == [4]
    data[4096 * 2 + 5] ^= 1
    bad, partial = blocks.check(4096, data[4096:4096 * 4])
    assert bad == [2] and partial == []
    # the short last block is whole when the range reaches the end of the file
    bad, partial = blocks.check(10 * 4096, data[10 * 4096:])
    assert bad == [] and partial == []
    assert list(blocks.blocks_over(Extent(4095, 2))) == [0, 1]


def test_record_lookup_only_for_the_same_file(tmp_path):
    store = StateStore(tmp_path / "state.db")
    data = os.urandom(100_000)
    sha = hashlib.sha256(data).hexdigest()
    blocks = digests.digest_bytes(data, 8192)
    digests.record(store, "/scratch/a", "sha256:" + sha, blocks)
    assert digests.lookup(store, "/scratch/a", sha, len(data)) == blocks
    assert digests.lookup(store, "/scratch/a", "sha256:" + sha, len(data)) == blocks
    # another file now at the path, or another size: the digests do not describe it
    assert digests.lookup(store, "/scratch/a", "0" * 64, len(data)) is None
    assert digests.lookup(store, "/scratch/a", sha, len(data) + 1) is None
    assert digests.lookup(store, "/scratch/a", None, len(data)) is None
    assert digests.lookup(store, "/scratch/b", sha, len(data)) is None
    # re-staged: replaced
    other = os.urandom(5000)
    digests.record(store, "/scratch/a", hashlib.sha256(other).hexdigest(),
                   digests.digest_bytes(other, 4096))
    assert digests.lookup(store, "/scratch/a", sha, len(data)) is None
    digests.forget(store, "/scratch/a")
    assert digests.lookup(store, "/scratch/a", hashlib.sha256(other).hexdigest(), 5000) is None


def test_damaged_record_is_ignored(tmp_path):
    store = StateStore(tmp_path / "state.db")
    data = os.urandom(50_000)
    sha = hashlib.sha256(data).hexdigest()
    digests.record(store, "/scratch/a", sha, digests.digest_bytes(data, 4096))
    with store.transaction() as conn:
        conn.execute("UPDATE block_digests SET digests = ?", (b"\0" * 7,))
    assert digests.lookup(store, "/scratch/a", sha, len(data)) is None


def test_bad_block_size():
    with pytest.raises(ValueError):
        digests.BlockDigests(10, 0, digests.array("I"))
    with pytest.raises(ValueError):
        digests.BlockDigests(10, 4, digests.array("I", [1]))
