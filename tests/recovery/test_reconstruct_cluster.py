"""Reconstruction against the real GridFTP and HTTP servers of the local cluster."""

from __future__ import annotations

import ftplib
import threading
import time
from dataclasses import replace

import pytest

from gridftp_server import PrivateGridFtp
from scratchkeeper.recovery import patching
from scratchkeeper.recovery.outcome import LOST, PATCHED, WHOLE
from scratchkeeper.recovery.reconstruct import Recoverer
from scratchkeeper.storage.base import XATTR_PREFIX
from scratchkeeper.transfer import gridftp, ranged

from .conftest import corrupt_first_data_block, read_all, stage, write_site

KiB, MiB = 1 << 10, 1 << 20

# (stripe count, stripe size, file size): sizes are multiples of nothing
GEOMETRIES = [
    (1, 64 * KiB, 1_000_003),
    (2, 128 * KiB, 3_333_331),
    (4, 1 * MiB, 9_876_543),
    (8, 256 * KiB, 5_555_557),
    (16, 64 * KiB, 2_718_281),
    (32, 64 * KiB, 3_141_593),
    (4, 4 * MiB, 21_000_017),
    (8, 2 * MiB, 17_000_023),
]


def _fail_one(backend, path, position=None):
    layout = backend.layout(path)
    ost = layout.ost_list[position if position is not None else len(layout.ost_list) // 2]
    backend.fail_ost(ost)
    return ost


@pytest.mark.parametrize("stripe_count,stripe_size,size", GEOMETRIES)
@pytest.mark.parametrize("scheme", ["ftp", "http"])
def test_one_failed_ost_every_byte_matches(site, sources, scheme, stripe_count, stripe_size, size):
    source, data = sources.make(f"g{stripe_count}-{stripe_size}.bin", size)
    backend = site.backend
    uri = sources.ftp(source) if scheme == "ftp" else sources.http(source)
    path = stage(backend, "in/data.bin", data, uri, stripe_count=stripe_count,
                 stripe_size=stripe_size)
    failed = _fail_one(backend, path)
    before = backend.layout(path)
    expected_lost = before.extents_on_ost(failed, size)
    with pytest.raises(Exception):  # noqa: B017 (any failure: the read must not succeed)
        read_all(backend, path)
    recoverer = Recoverer(backend, site.config)
    outcome = recoverer.recover(path)
    assert outcome.state == PATCHED, outcome.reason
    assert outcome.patched_bytes == sum(e.length for e in expected_lost)
    assert outcome.verified == ("ranges" if scheme == "ftp" else "file")
    assert recoverer.buffers.idle_bytes == 0  # receive buffers are not kept between patches
    after = backend.layout(path)
    substitute = outcome.substitutes[failed]
    assert failed not in after.ost_list and substitute not in before.ost_list
    assert after.ost_list.index(substitute) == before.ost_list.index(failed)
    assert read_all(backend, path) == data
    assert backend.open_rebuilds() == []


def _counting_connects(monkeypatch) -> list[str]:
    """The names of the threads that open FTP connections from now on."""
    connects, real_connect = [], ftplib.FTP.connect

    def counting(self, *args, **kwargs):
        connects.append(threading.current_thread().name)
        return real_connect(self, *args, **kwargs)

    monkeypatch.setattr(ftplib.FTP, "connect", counting)
    return connects


def test_the_connection_opened_ahead_is_the_one_the_patch_uses(site_dir, local_cluster, sources,
                                                               monkeypatch):
    """The connection begun while the rebuild starts is taken by the lane: no second one."""
    site = write_site(site_dir, extra="[recovery]\nverify_source = false")
    source, data = sources.make("ahead.bin", 5_000_011)
    backend = site.backend
    path = stage(backend, "ahead.bin", data, sources.ftp(source), stripe_count=4,
                 stripe_size=256 * KiB)
    _fail_one(backend, path)
    connects = _counting_connects(monkeypatch)
    outcome = Recoverer(backend, site.config).recover(path)
    assert outcome.state == PATCHED, outcome.reason
    assert read_all(backend, path) == data
    assert connects == ["patch-connect"]
    assert 0 < outcome.patch_seconds < outcome.seconds  # the probe is detection, not patching


def test_files_of_one_server_share_one_connection(site_dir, local_cluster, sources,
                                                  monkeypatch):
    """An OST failure hits many files of the same server: one login serves them all."""
    site = write_site(site_dir, extra="[recovery]\nverify_source = false")
    backend = site.backend
    files = []
    for number in range(3):
        source, data = sources.make(f"shared-{number}.bin", 3_000_017 + number)
        files.append((stage(backend, f"shared-{number}.bin", data, sources.ftp(source),
                            stripe_count=4, stripe_size=128 * KiB, osts=(0, 1, 2, 3)), data))
    backend.fail_ost(2)
    connects = _counting_connects(monkeypatch)
    recoverer = Recoverer(backend, site.config)
    for path, data in files:
        outcome = recoverer.recover(path)
        assert outcome.state == PATCHED, outcome.reason
        assert read_all(backend, path) == data  # each file's own bytes, not the one before's
    assert len(connects) == 1
    recoverer.readers.close_all()


@pytest.mark.parametrize("method", ["globus-url-copy", "file"])
def test_other_clients_patch_exactly(site_dir, local_cluster, sources, method):
    extra = '[recovery]\nftp_method = "globus-url-copy"' if method == "globus-url-copy" else ""
    site = write_site(site_dir, extra=extra)
    source, data = sources.make("other.bin", 4_444_447)
    uri = sources.ftp(source) if method == "globus-url-copy" else sources.file(source)
    backend = site.backend
    path = stage(backend, "other.bin", data, uri, stripe_count=4, stripe_size=256 * KiB)
    _fail_one(backend, path)
    outcome = Recoverer(backend, site.config).recover(path)
    assert outcome.state == PATCHED, outcome.reason
    assert outcome.verified == "file"
    assert read_all(backend, path) == data
    # globus-url-copy spooled inside the scratch root and cleaned up after itself
    assert not list((site_dir / "scratch").glob(".sk-ranged-*"))


def test_two_failed_osts_at_once(site, sources):
    source, data = sources.make("two.bin", 6_000_011)
    backend = site.backend
    path = stage(backend, "two.bin", data, sources.ftp(source), stripe_count=8,
                 stripe_size=128 * KiB)
    layout = backend.layout(path)
    failed = {layout.ost_list[1], layout.ost_list[6]}
    for ost in failed:
        backend.fail_ost(ost)
    outcome = Recoverer(backend, site.config).recover(path)
    assert outcome.state == PATCHED and set(outcome.substitutes) == failed
    assert len(set(outcome.substitutes.values())) == 2
    assert not set(backend.layout(path).ost_list) & failed
    assert read_all(backend, path) == data


def test_nothing_to_do_when_whole(site, sources):
    source, data = sources.make("whole.bin", 100_001)
    backend = site.backend
    path = stage(backend, "whole.bin", data, sources.ftp(source))
    outcome = Recoverer(backend, site.config).recover(path)
    assert outcome.state == WHOLE and outcome.patched_bytes == 0


def test_substitute_failing_during_patch_gets_replaced(site, sources):
    source, data = sources.make("sub.bin", 8_000_009)
    backend = site.backend
    path = stage(backend, "sub.bin", data, sources.ftp(source), stripe_count=4,
                 stripe_size=64 * KiB)
    failed = _fail_one(backend, path)
    first_substitutes = []

    def on_progress(done, total):
        if not first_substitutes:
            rebuild = backend.open_rebuilds()[0]
            first_substitutes.append(rebuild.substitutes[failed])
            backend.fail_ost(rebuild.substitutes[failed])  # the substitute dies mid-patch

    recoverer = Recoverer(backend, site.config)
    outcome = recoverer.recover(path, progress=on_progress)
    assert outcome.state == PATCHED, outcome.reason
    assert outcome.attempts == 2
    final = backend.layout(path).ost_list
    assert first_substitutes[0] not in final and failed not in final
    assert read_all(backend, path) == data
    assert backend.open_rebuilds() == []


def test_source_server_dying_mid_patch_marks_file_lost_not_corrupt(site, sources, site_dir,
                                                                     monkeypatch):
    source, data = sources.make("dies.bin", 6_000_007)
    server = PrivateGridFtp(sources.folder, site_dir)
    server.start()
    try:
        backend = site.backend
        path = stage(backend, "dies.bin", data, f"{server.url}{source}", stripe_count=4,
                     stripe_size=64 * KiB)
        failed = _fail_one(backend, path)
        layout_before = backend.layout(path)
        fetches = []
        real_fetch = gridftp.EretRangedReader.fetch

        def counting_fetch(self, extents, **options):
            fetches.append(len(extents))
            yield from real_fetch(self, extents, **options)

        monkeypatch.setattr(gridftp.EretRangedReader, "fetch", counting_fetch)
        started = time.monotonic()
        outcome = Recoverer(backend, site.config).recover(
            path, progress=lambda done, total: server.kill())
        elapsed = time.monotonic() - started
        assert outcome.state == LOST
        assert "cannot fetch" in outcome.reason
        # retried with backoff (attempts = 3, delay 0.2 s, x2) before giving up
        assert len(fetches) >= 3 and elapsed >= 0.2 * 0.5 + 0.4 * 0.5
        assert backend.layout(path) == layout_before and backend.open_rebuilds() == []
        # not corrupt: the surviving stripes read as before, the lost ones still say which OST
        survivor = next(e for e in layout_before.extents_on_ost(layout_before.ost_list[0],
                                                                len(data)))
        assert backend.read(path, survivor.offset, survivor.length) == \
            data[survivor.offset:survivor.end]
        lost = layout_before.extents_on_ost(failed, len(data))[0]
        with pytest.raises(Exception, match=f"OST {failed}"):
            backend.read(path, lost.offset, lost.length)
        # once the server is back, the same file recovers
        server.start()
        outcome = Recoverer(backend, site.config).recover(path)
        assert outcome.state == PATCHED and read_all(backend, path) == data
    finally:
        server.kill()


def test_server_back_within_retries_recovers(site, sources, site_dir):
    source, data = sources.make("blip.bin", 3_000_017)
    server = PrivateGridFtp(sources.folder, site_dir)
    server.start()
    try:
        backend = site.backend
        path = stage(backend, "blip.bin", data, f"{server.url}{source}", stripe_count=4,
                     stripe_size=64 * KiB)
        _fail_one(backend, path)
        restarted = []

        def blip(done, total):
            if not restarted:
                restarted.append(True)
                server.kill()
                server.start()  # back before the retries run out
        outcome = Recoverer(backend, site.config).recover(path, progress=blip)
        assert outcome.state == PATCHED and read_all(backend, path) == data
    finally:
        server.kill()


@pytest.mark.parametrize("method", ["eret", "eret-per-range"])
def test_corrupted_range_is_detected_and_fetched_again(site, sources, monkeypatch, method):
    source, data = sources.make(f"corrupt-{method}.bin", 2_000_003)
    backend = site.backend
    path = stage(backend, f"corrupt-{method}.bin", data, sources.ftp(source), stripe_count=2,
                 stripe_size=64 * KiB)
    _fail_one(backend, path, 0)
    if method == "eret":
        corrupted = corrupt_first_data_block(monkeypatch)
    else:
        corrupted = []
        real = gridftp.EretRangedReader._retrieve

        def flip_once(self, ftp, extent):
            payload = real(self, ftp, extent)
            if not corrupted:
                corrupted.append(extent)
                return bytes([payload[0] ^ 0xFF]) + payload[1:]
            return payload

        monkeypatch.setattr(gridftp.EretRangedReader, "_retrieve", flip_once)
    config = replace(site.config, recovery=replace(site.config.recovery, ftp_method=method))
    outcome = Recoverer(backend, config).recover(path)
    assert corrupted and outcome.state == PATCHED and outcome.verified == "ranges"
    assert read_all(backend, path) == data


def test_corruption_without_range_checksum_is_caught_by_file_checksum(site, sources, monkeypatch):
    source, data = sources.make("corrupt-http.bin", 2_000_029)
    backend = site.backend
    path = stage(backend, "corrupt-http.bin", data, sources.http(source), stripe_count=2,
                 stripe_size=64 * KiB)
    failed = _fail_one(backend, path, 1)
    before = backend.layout(path)
    real = ranged.CurlRangedReader.fetch

    def always_corrupt(self, extents, **options):
        for piece in real(self, extents, **options):
            yield ranged.RangeData(piece.extent, b"\0" + piece.data[1:], piece.verified)

    monkeypatch.setattr(ranged.CurlRangedReader, "fetch", always_corrupt)
    outcome = Recoverer(backend, site.config).recover(path)
    assert outcome.state == LOST and "SHA-256" in outcome.reason
    assert backend.layout(path) == before and backend.open_rebuilds() == []
    assert failed in backend.layout(path).ost_list


@pytest.mark.parametrize("problem", ["missing", "permission"])
@pytest.mark.parametrize("scheme", ["ftp", "http"])
def test_missing_or_forbidden_source_is_permanent(site_dir, local_cluster, sources, problem,
                                                  scheme, monkeypatch):
    # a retry would sleep 5 s: a quick failure proves there was none
    site = write_site(site_dir, extra="[retry]\ndelay = 5.0")
    source, data = sources.make("gone.bin", 1_000_033,
                                mode=0o600 if problem == "permission" else 0o644)
    backend = site.backend
    uri = sources.ftp(source) if scheme == "ftp" else sources.http(source)
    path = stage(backend, "gone.bin", data, uri, stripe_count=2, stripe_size=64 * KiB)
    if problem == "missing":
        source.unlink()
    _fail_one(backend, path)
    opened = []
    real_open = patching.open_ranged

    def counting_open(*args, **kwargs):
        opened.append(args[0])
        return real_open(*args, **kwargs)

    monkeypatch.setattr(patching, "open_ranged", counting_open)
    started = time.monotonic()
    outcome = Recoverer(backend, site.config).recover(path)
    assert outcome.state == LOST
    assert time.monotonic() - started < 2.0, "a permanent error must not be retried"
    assert len(opened) <= 1 + site.config.recovery.workers  # source check, one per lane
    assert ("No such file" in outcome.reason or "404" in outcome.reason
            if problem == "missing" else
            "Permission denied" in outcome.reason or "403" in outcome.reason), outcome.reason
    assert backend.open_rebuilds() == []


def test_source_changed_since_stage_in_is_refused(site, sources):
    source, data = sources.make("changed.bin", 700_001)
    backend = site.backend
    path = stage(backend, "changed.bin", data, sources.ftp(source), stripe_count=2,
                 stripe_size=64 * KiB)
    source.write_bytes(b"x" + data[1:])
    _fail_one(backend, path)
    outcome = Recoverer(backend, site.config).recover(path)
    assert outcome.state == LOST and "changed since stage-in" in outcome.reason


def test_multi_source_plan_uses_the_solver_and_explains(site, sources):
    source, data = sources.make("multi.bin", 12_000_017)
    backend = site.backend
    path = stage(backend, "multi.bin", data, sources.ftp(source), stripe_count=2,
                 stripe_size=64 * KiB, extra_sources=[sources.http(source), sources.file(source)])
    _fail_one(backend, path)
    outcome = Recoverer(backend, site.config).recover(path)
    assert outcome.state == PATCHED and read_all(backend, path) == data
    plan = outcome.plan
    assert plan.algorithm.startswith("solver")
    assert len(plan.sources) == 3 and all(e.throughput for e in plan.estimates)
    assert sum(len(plan.chunks_of(i)) for i in range(3)) == len(plan.chunks)
    text = plan.explain()
    assert "MB/s" in text and sources.ftp(source) in text


def test_mirror_serves_what_it_holds(site, sources):
    source, data = sources.make("mirror.bin", 3_000_001)
    backend = site.backend
    path = stage(backend, "mirror.bin", data, sources.ftp(source), stripe_count=2,
                 stripe_size=64 * KiB)
    backend.add_mirror(path)
    layout = backend.layout(path)
    # one OST of each mirror: bytes lost in both come from the source, the rest from the store
    first, second = layout.mirror(layout.mirror_ids[0])[0], layout.mirror(layout.mirror_ids[1])[0]
    backend.fail_ost(first.ost_list[0])
    backend.fail_ost(second.ost_list[0])
    outcome = Recoverer(backend, site.config).recover(path)
    assert outcome.state == PATCHED, outcome.reason
    kinds = {s.kind for i, s in enumerate(outcome.plan.sources) if outcome.plan.chunks_of(i)}
    assert "uri" in kinds
    assert read_all(backend, path) == data


def test_file_without_source_is_a_clear_error(site):
    backend = site.backend
    backend.create("plain.bin")
    backend.write("plain.bin", 0, b"a" * 300_000)
    _fail_one(backend, "plain.bin", 0)
    with pytest.raises(Exception, match="no recovery source"):
        Recoverer(backend, site.config).recover("plain.bin")


def test_lost_mark_is_set_and_cleared(site, sources):
    from scratchkeeper.recovery import records
    from scratchkeeper.recovery.service import process_request
    from scratchkeeper.state import StateStore
    source, data = sources.make("mark.bin", 500_009)
    backend = site.backend
    path = stage(backend, "mark.bin", data, sources.ftp(source), stripe_count=2,
                 stripe_size=64 * KiB)
    _fail_one(backend, path)
    source.rename(source.with_suffix(".away"))
    store = records.open_records(StateStore(site.config.state.database))
    recoverer = Recoverer(backend, site.config)
    for expected in ("lost", "patched"):
        request_id, _ = records.enqueue(store, path, reported_osts=[], requested_by=0,
                                        origin="test")
        assert records.claim(store, request_id, records.worker_id())
        result = process_request(store, recoverer, records.request(store, request_id))
        assert result["state"] == expected
        lost_mark = backend.get_xattr(path, XATTR_PREFIX + "lost")
        assert (lost_mark is not None) == (expected == "lost")
        if expected == "lost":
            source.with_suffix(".away").rename(source)  # the source is back
    assert read_all(backend, path) == data
