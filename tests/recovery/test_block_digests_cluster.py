"""Patches checked against the block digests recorded at stage-in, on the real GridFTP/nginx servers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scratchkeeper.recovery.gather import RecoveryInterrupted
from scratchkeeper.recovery.outcome import LOST, PATCHED
from scratchkeeper.recovery.reconstruct import Recoverer
from scratchkeeper.state import StateStore
from scratchkeeper.transfer import gridftp

from .conftest import corrupt_first_data_block, read_all, stage

KiB, MiB = 1 << 10, 1 << 20


@pytest.fixture
def store(site):
    return StateStore(site.config.state.database)


@pytest.fixture
def no_server_hashing(monkeypatch):
    """With digests, the servers are asked for bytes only: no CKSM of ranges or files."""
    def refuse(*args, **kwargs):
        raise AssertionError("a patch with block digests asked the server for a checksum")
    monkeypatch.setattr(gridftp.EretRangedReader, "_range_checksum", refuse)
    monkeypatch.setattr(gridftp.EretRangedReader, "whole_checksum", refuse)


def _fail_one(backend, path, position=0):
    ost = backend.layout(path).ost_list[position]
    backend.fail_ost(ost)
    return ost


# (stripe count, stripe size, digest block, file size): blocks aligned with stripes, blocks
# smaller than stripes, blocks larger than stripes (covered in part: read back), odd sizes
GEOMETRIES = [(4, 1 * MiB, 1 * MiB, 9 * MiB + 12_345), (2, 256 * KiB, 64 * KiB, 3_000_017),
              (8, 64 * KiB, 1 * MiB, 5_000_011), (3, 128 * KiB, 96 * KiB, 2_000_003)]


@pytest.mark.parametrize("stripe_count,stripe_size,block,size", GEOMETRIES)
@pytest.mark.parametrize("scheme", ["ftp", "http"])
def test_patch_is_checked_block_by_block(site, store, sources, no_server_hashing, scheme,
                                         stripe_count, stripe_size, block, size):
    source, data = sources.make(f"d{stripe_count}-{block}.bin", size)
    backend = site.backend
    uri = sources.ftp(source) if scheme == "ftp" else sources.http(source)
    path = stage(backend, f"d{stripe_count}-{block}-{scheme}.bin", data, uri,
                 stripe_count=stripe_count, stripe_size=stripe_size, digest_store=store,
                 digest_block=block)
    _fail_one(backend, path, 1)
    outcome = Recoverer(backend, site.config, store=store).recover(path)
    assert outcome.state == PATCHED and outcome.verified == "blocks", outcome.reason
    assert read_all(backend, path) == data


def test_corruption_in_transit_is_caught_and_fetched_again(site, store, sources, monkeypatch):
    source, data = sources.make("transit.bin", 4_000_037)
    backend = site.backend
    path = stage(backend, "transit.bin", data, sources.ftp(source), stripe_count=4,
                 stripe_size=256 * KiB, digest_store=store)
    _fail_one(backend, path)
    flipped = corrupt_first_data_block(monkeypatch)
    outcome = Recoverer(backend, site.config, store=store).recover(path)
    assert flipped and outcome.state == PATCHED and outcome.verified == "blocks"
    assert read_all(backend, path) == data


@pytest.mark.parametrize("scheme", ["ftp", "http"])
def test_changed_source_is_never_patched_in(site, store, sources, scheme):
    source, data = sources.make(f"changed-{scheme}.bin", 3_000_001)
    backend = site.backend
    uri = sources.ftp(source) if scheme == "ftp" else sources.http(source)
    path = stage(backend, f"changed-{scheme}.bin", data, uri, stripe_count=2,
                 stripe_size=256 * KiB, digest_store=store)
    failed = _fail_one(backend, path, 1)
    before = backend.layout(path)
    # someone rewrites one byte of the source inside a stripe the failed OST held
    lost = before.extents_on_ost(failed, len(data))[1]
    with open(source, "r+b") as handle:
        handle.seek(lost.offset + 7)
        handle.write(bytes([data[lost.offset + 7] ^ 0xFF]))
    outcome = Recoverer(backend, site.config, store=store).recover(path)
    assert outcome.state == LOST
    assert "differ" in outcome.reason and "staged" in outcome.reason
    assert backend.layout(path) == before and backend.open_rebuilds() == []


def test_digests_of_another_file_are_not_used(site, store, sources):
    source, data = sources.make("stale.bin", 2_000_000)
    backend = site.backend
    other = bytes(reversed(data))
    # digests recorded for an earlier file at the same path
    stage(backend, "stale.bin", other, sources.ftp(source), stripe_count=2,
          stripe_size=128 * KiB, digest_store=store)
    backend.remove("stale.bin")
    path = stage(backend, "stale.bin", data, sources.ftp(source), stripe_count=2,
                 stripe_size=128 * KiB)
    _fail_one(backend, path)
    outcome = Recoverer(backend, site.config, store=store).recover(path)
    assert outcome.state == PATCHED and outcome.verified == "ranges"
    assert read_all(backend, path) == data


def test_resumed_rebuild_rechecks_what_was_patched_before(site, store, sources):
    """A crash may leave the journal saying "patched" of bytes that never reached the disk."""
    source, data = sources.make("resume.bin", 6_000_013)
    backend = site.backend
    path = stage(backend, "resume.bin", data, sources.ftp(source), stripe_count=4,
                 stripe_size=256 * KiB, digest_store=store, digest_block=256 * KiB)
    _fail_one(backend, path, 2)
    first = Recoverer(backend, site.config, store=store)

    def stop_after_some(done, total):
        if done >= total // 3:
            first.stop.set()

    with pytest.raises(RecoveryInterrupted):
        first.recover(path, progress=stop_after_some)
    (rebuild,) = backend.open_rebuilds()
    # what a power loss does to written-but-unsynced bytes: the journal keeps them, the disk not
    garbled = rebuild.patched[0]
    backend.write_rebuild(rebuild, garbled.offset, bytes(garbled.length))
    outcome = Recoverer(backend, site.config, store=store).recover(
        path, resume_rebuild_id=rebuild.rebuild_id)
    assert outcome.state == PATCHED and outcome.verified == "blocks"
    assert outcome.attempts == 2  # the garbled block failed its check: patched again whole
    assert read_all(backend, path) == data and backend.open_rebuilds() == []


def test_service_uses_the_digests(site, store, sources, no_server_hashing):
    from scratchkeeper.recovery.service import RecoveryService
    source, data = sources.make("service.bin", 2_500_000)
    backend = site.backend
    path = stage(backend, "service.bin", data, sources.ftp(source), stripe_count=2,
                 stripe_size=64 * KiB, digest_store=store)
    _fail_one(backend, path)
    service = RecoveryService(replace(site.config), backend=backend, store=store)
    outcome = service.recoverer.recover(path)
    assert outcome.state == PATCHED and outcome.verified == "blocks"
    assert read_all(backend, path) == data
