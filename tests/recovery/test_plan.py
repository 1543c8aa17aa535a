"""Lost-range arithmetic and the patch plan (no cluster needed)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from scratchkeeper.errors import InputError
from scratchkeeper.recovery.plan import (
    STORE,
    PatchSource,
    SourceEstimate,
    candidate_sources,
    choose,
    cut_chunks,
)
from scratchkeeper.recovery.reconstruct import lost_ranges
from scratchkeeper.storage.layout import Extent, FileLayout, LayoutComponent, StripeObject, merge_extents

KiB = 1 << 10


def _layout(stripe_count: int, stripe_size: int) -> FileLayout:
    objects = tuple(StripeObject(10 + i, f"o{i}") for i in range(stripe_count))
    return FileLayout((LayoutComponent(stripe_size, objects),), 0, "/scratch/f")


@settings(deadline=None)
@given(stripe_count=st.integers(1, 32), stripe_exp=st.integers(0, 6),
       file_size=st.integers(0, 50_000_000), data=st.data())
def test_seed_formula_matches_the_layout(stripe_count, stripe_exp, file_size, data):
    stripe_size = 64 * KiB << stripe_exp
    position = data.draw(st.integers(0, stripe_count - 1))
    layout = _layout(stripe_count, stripe_size)
    expected = layout.extents_on_ost(10 + position, file_size)
    assert merge_extents(lost_ranges(stripe_size, stripe_count, position, file_size)) == expected
    # every byte of the file is on exactly one position
    total = sum(e.length for p in range(stripe_count)
                for e in lost_ranges(stripe_size, stripe_count, p, file_size))
    assert total == file_size


def test_lost_ranges_example_and_bad_position():
    # 4 stripes of 1 MiB, 9.5 MiB file, position 1: [1,2) [5,6) [9,9.5) MiB
    mib = 1 << 20
    assert lost_ranges(mib, 4, 1, 9 * mib + mib // 2) == [
        Extent(mib, mib), Extent(5 * mib, mib), Extent(9 * mib, mib // 2)]
    with pytest.raises(InputError, match="stripe position 4"):
        lost_ranges(mib, 4, 4, 100)


@given(extents=st.lists(st.tuples(st.integers(0, 10_000_000), st.integers(1, 3_000_000)),
                        max_size=8),
       stripe_exp=st.integers(0, 4), chunk_exp=st.integers(0, 6))
def test_chunks_cover_exactly_and_respect_the_size(extents, stripe_exp, chunk_exp):
    stripe_size = 64 * KiB << stripe_exp
    chunk_size = 64 * KiB << chunk_exp
    ranges = [Extent(o, n) for o, n in extents]
    chunks = cut_chunks(ranges, stripe_size, chunk_size)
    assert merge_extents(chunks) == merge_extents(ranges)
    assert all(c.length <= max(chunk_size, stripe_size) for c in chunks)
    assert all(c.length <= chunk_size for c in chunks) or chunk_size < stripe_size


def test_store_serves_only_what_a_mirror_still_holds():
    chunks = [Extent(0, 100), Extent(100, 100), Extent(200, 100)]
    sources, candidates = candidate_sources(chunks, ["ftp://a/x", "http://b/x", "ftp://a/x"],
                                            [Extent(150, 10)])
    assert [s.name for s in sources] == ["ftp://a/x", "http://b/x", STORE]
    assert candidates == [[0, 1, 2], [0, 1], [0, 1, 2]]


@given(chunks=st.lists(st.builds(Extent, st.integers(0, 400), st.integers(1, 60)), max_size=10),
       lost=st.lists(st.builds(Extent, st.integers(0, 400), st.integers(0, 60)), max_size=10))
@settings(deadline=None)
def test_the_store_serves_a_chunk_exactly_when_no_byte_of_it_was_lost(chunks, lost):
    _, candidates = candidate_sources(chunks, ["ftp://a/x"], lost)
    lost_bytes = {b for e in lost for b in range(e.offset, e.end)}
    for chunk, choice in zip(chunks, candidates):
        untouched = lost_bytes.isdisjoint(range(chunk.offset, chunk.end))
        assert (len(choice) == 2) == untouched


def test_single_source_needs_no_solver():
    chunks = [Extent(i * 100, 100) for i in range(5)]
    sources = [PatchSource("ftp://a/x", "uri")]
    plan = choose(chunks, sources, [[0]] * 5, [SourceEstimate()], 100)
    assert plan.assignment == [0] * 5 and plan.algorithm == "single-source"
    assert "5 chunks, 500 bytes" in plan.explain()


def test_solver_gives_the_fast_source_more_chunks():
    chunks = [Extent(i * 1000, 1000) for i in range(40)]
    sources = [PatchSource("ftp://fast/x", "uri"), PatchSource("http://slow/x", "uri")]
    estimates = [SourceEstimate(latency=0.001, throughput=3e6),
                 SourceEstimate(latency=0.001, throughput=1e6)]
    plan = choose(chunks, sources, [[0, 1]] * 40, estimates, 1000)
    fast, slow = len(plan.chunks_of(0)), len(plan.chunks_of(1))
    assert fast + slow == 40 and fast == 30 and slow == 10
    assert plan.algorithm.startswith("solver") and plan.response_time == pytest.approx(0.011)
    text = plan.explain()
    assert "ftp://fast/x: 30 chunks, 30000 bytes; latency 1.0 ms, 3.0 MB/s" in text


def test_queued_work_shifts_chunks_away():
    chunks = [Extent(i * 1000, 1000) for i in range(20)]
    sources = [PatchSource("a", "uri"), PatchSource("b", "uri")]
    idle = choose(chunks, sources, [[0, 1]] * 20,
                  [SourceEstimate(0.0, 1e6, 0), SourceEstimate(0.0, 1e6, 0)], 1000)
    busy = choose(chunks, sources, [[0, 1]] * 20,
                  [SourceEstimate(0.0, 1e6, 10_000), SourceEstimate(0.0, 1e6, 0)], 1000)
    assert len(idle.chunks_of(0)) == 10 and len(busy.chunks_of(0)) == 5


def test_an_unreachable_source_gets_nothing_when_another_can_serve():
    chunks = [Extent(i * 1000, 1000) for i in range(6)]
    sources = [PatchSource("a", "uri"), PatchSource("b", "uri")]
    plan = choose(chunks, sources, [[0, 1]] * 6,
                  [SourceEstimate(error="connection refused"), SourceEstimate(0.0, 1e6)], 1000)
    assert plan.chunks_of(0) == [] and len(plan.chunks_of(1)) == 6
    assert "unusable: connection refused" in plan.explain()


def test_recovery_config_keys_are_validated():
    from scratchkeeper.config import parse_config
    from scratchkeeper.errors import ConfigError
    config = parse_config("[recovery]\nftp_method = \"globus-url-copy\"\nrange_checksum = \"MD5\"\n")
    assert config.recovery.ftp_method == "globus-url-copy"
    assert config.recovery.sync_bytes == 16 << 20 and config.recovery.verify_source is True
    with pytest.raises(ConfigError, match=r"site.toml:2: key 'recovery.range_checksum': "
                                          r"expected one of 'ADLER32', 'MD5', got 'CRC'"):
        parse_config("[recovery]\nrange_checksum = \"CRC\"\n", "site.toml")
    with pytest.raises(ConfigError, match="recovery.chunk_size"):
        parse_config("[recovery]\nchunk_size = 100\n", "site.toml")
