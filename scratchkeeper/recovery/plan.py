"""Which source serves which chunk of the lost ranges: the patch plan (the
replica-selection paper's solver).

Lost ranges are cut into chunks (at most ``recovery.chunk_size``, never across a stripe
boundary, so a chunk lands in one substitute object). Each chunk is a bucket of the
replica-selection problem; each source able to serve it (the source URI recorded at stage-in,
other URIs listed for the file, a surviving mirror of the store) is a disk with
``D_d`` = measured latency, ``C_d`` = seconds per chunk at the measured throughput and
``X_d`` = seconds of work already queued on that source. With one source there is nothing to
choose and nothing is measured.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..solver import select_replicas
from ..storage.layout import Extent, merge_extents

STORE = "store"  # a surviving mirror, read through the storage backend


@dataclass(frozen=True)
class PatchSource:
    """A place lost bytes can come from: a URI, or the store's own surviving mirrors."""

    name: str   # the URI, or "store"
    kind: str   # "uri" or "store"


@dataclass(frozen=True)
class SourceEstimate:
    """Measured behaviour of one source (``None`` when it was not measured)."""

    latency: float | None = None       # seconds, D_d
    throughput: float | None = None    # bytes/s
    queued_bytes: int = 0              # outstanding work, for X_d
    error: str = ""


@dataclass
class PatchPlan:
    """Chunks, their candidate sources and the chosen source per chunk."""

    chunks: list[Extent]
    sources: list[PatchSource]
    candidates: list[list[int]]
    assignment: list[int]
    estimates: list[SourceEstimate] = field(default_factory=list)
    response_time: float | None = None
    algorithm: str = "single-source"

    def chunks_of(self, source_index: int) -> list[Extent]:
        return [c for c, s in zip(self.chunks, self.assignment) if s == source_index]

    @property
    def total_bytes(self) -> int:
        return sum(c.length for c in self.chunks)

    def to_dict(self) -> dict:
        return {"algorithm": self.algorithm, "response_time": self.response_time,
                "chunks": len(self.chunks), "bytes": self.total_bytes,
                "sources": [{"source": s.name, "kind": s.kind,
                             "chunks": len(self.chunks_of(i)),
                             "bytes": sum(c.length for c in self.chunks_of(i)),
                             "latency": e.latency, "throughput": e.throughput,
                             "queued_bytes": e.queued_bytes, "error": e.error}
                            for i, (s, e) in enumerate(zip(self.sources, self._estimates()))]}

    def _estimates(self) -> list[SourceEstimate]:
        return self.estimates or [SourceEstimate() for _ in self.sources]

    def explain(self) -> str:
        """A few lines a person can read: what each source serves and why."""
        lines = [f"{len(self.chunks)} chunks, {self.total_bytes} bytes; plan: {self.algorithm}"
                 + (f", predicted response time {self.response_time:.3f}s"
                    if self.response_time is not None else "")]
        for i, (source, estimate) in enumerate(zip(self.sources, self._estimates())):
            mine = self.chunks_of(i)
            measured = ""
            if estimate.latency is not None and estimate.throughput is not None:
                measured = (f"; latency {estimate.latency * 1000:.1f} ms, "
                            f"{estimate.throughput / 1e6:.1f} MB/s, "
                            f"{estimate.queued_bytes} bytes queued")
            if estimate.error:
                measured = f"; unusable: {estimate.error}"
            lines.append(f"  {source.name}: {len(mine)} chunks, "
                         f"{sum(c.length for c in mine)} bytes{measured}")
        return "\n".join(lines)


def cut_chunks(extents: Iterable[Extent], stripe_size: int, chunk_size: int) -> list[Extent]:
    """Split ranges at stripe boundaries and into pieces of at most ``chunk_size`` bytes."""
    # cut points at absolute offsets, so a chunk never straddles more stripes than it must
    if chunk_size <= stripe_size:
        step = chunk_size
    else:
        step = stripe_size * (chunk_size // stripe_size)
    chunks = []
    for extent in merge_extents(extents):
        position = extent.offset
        while position < extent.end:
            boundary = (position // step + 1) * step
            end = min(extent.end, boundary)
            chunks.append(Extent(position, end - position))
            position = end
    return chunks


def candidate_sources(chunks: Sequence[Extent], uris: Sequence[str],
                      unrecoverable_by_store: Sequence[Extent]) -> tuple[list[PatchSource],
                                                                          list[list[int]]]:
    """Sources and, per chunk, the indices of those that can serve it.

    Every URI serves every chunk; the store (a surviving mirror) serves a chunk no byte of
    which is in ``unrecoverable_by_store``.
    """
    sources = [PatchSource(uri, "uri") for uri in dict.fromkeys(uris)]
    candidates = [list(range(len(sources))) for _ in chunks]
    unrecoverable = merge_extents(unrecoverable_by_store)
    starts = [e.offset for e in unrecoverable]
    served_by_store = [not _overlaps(chunk, unrecoverable, starts) for chunk in chunks]
    if any(served_by_store):
        sources.append(PatchSource(STORE, "store"))
        store_index = len(sources) - 1
        for chunk_candidates, served in zip(candidates, served_by_store):
            if served:
                chunk_candidates.append(store_index)
    return sources, candidates


def _overlaps(chunk: Extent, merged: Sequence[Extent], starts: Sequence[int]) -> bool:
    """Whether ``chunk`` shares a byte with ``merged`` (sorted, disjoint; ``starts`` theirs)."""
    # the last extent starting before the chunk ends is the only one that can reach into it
    index = bisect.bisect_left(starts, chunk.end) - 1
    return chunk.length > 0 and index >= 0 and merged[index].end > chunk.offset


def choose(chunks: list[Extent], sources: list[PatchSource], candidates: list[list[int]],
           estimates: list[SourceEstimate], chunk_size: int) -> PatchPlan:
    """Assign each chunk a source; the solver decides when there is a choice to make."""
    usable = {i for i, e in enumerate(estimates) if not e.error}
    # a source that failed its measurement is dropped where another can serve the chunk; a
    # chunk with no other choice keeps it, and the patch will say why it fails
    pruned = [[i for i in c if i in usable] or list(c) for c in candidates]
    if all(len(set(c)) == 1 for c in pruned):
        return PatchPlan(chunks, sources, candidates, [c[0] for c in pruned], estimates)
    cost, delay, load = [], [], []
    for estimate in estimates:
        throughput = estimate.throughput or 1.0
        cost.append(max(chunk_size / throughput, 1e-6))
        delay.append(estimate.latency or 0.0)
        load.append(estimate.queued_bytes / throughput)
    # whole microseconds keep the solver's arithmetic exact
    cost = [max(round(c, 6), 1e-6) for c in cost]
    delay = [round(d, 6) for d in delay]
    load = [round(x, 6) for x in load]
    selection = select_replicas(pruned, cost, delay, load)
    return PatchPlan(chunks, sources, candidates, list(selection.assignment), estimates,
                     selection.response_time, f"solver ({selection.algorithm})")
