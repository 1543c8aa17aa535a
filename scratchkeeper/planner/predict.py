"""Predict how long a stage-in job takes: its sources' sizes over the throughput learned per
source host from the stage-ins the project recorded.

The throughput of a host is learned from its most recent ``staging.history`` recorded
transfers (bytes over the seconds from the stage-in job's start, as the scheduler reports it,
to its commit), as the mean and standard deviation of their log rates: rates are spread over
orders of magnitude, and a log keeps one fast outlier from making every prediction optimistic.
The prediction is ``bytes / exp(mean)``; its pessimistic bound, which JIT plans with, is
``bytes / exp(mean - staging.jit_sigmas * sd)``. A host with fewer than ``staging.min_samples``
transfers, or a source whose size cannot be asked (a directory, ``scp://``), has no prediction.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from ..config import SiteConfig
from ..errors import ScratchkeeperError
from ..state import StateStore
from ..transfer.uri import UnknownScheme, parse_location
from . import records
from .sources import SourceAllowList

LOCAL_HOST = "localhost"


@dataclass(frozen=True)
class Throughput:
    """What the recorded transfers of one host say: bytes/s (geometric mean) and spread."""

    host: str
    samples: int
    rate: float | None = None          # exp(mean log rate)
    log_sd: float = 0.0


@dataclass(frozen=True)
class SourcePrediction:
    source: str
    host: str
    bytes: int | None
    reason: str = ""                   # why its size is unknown


@dataclass(frozen=True)
class Prediction:
    """A stage-in job's predicted transfer time; ``seconds is None`` when it cannot be made."""

    sources: tuple[SourcePrediction, ...]
    hosts: tuple[Throughput, ...]
    bytes: int | None
    seconds: float | None
    pessimistic: float | None
    reason: str

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return asdict(self)


def source_host(uri: str) -> str:
    """The host a source is read from (``localhost`` for a path on this cluster)."""
    try:
        location = parse_location(uri)
    except (ValueError, UnknownScheme):
        return ""
    if location.is_local:
        return LOCAL_HOST
    return location.host.rsplit("@", 1)[-1].lower()


def source_size(uri: str, config: SiteConfig, *, owner=None) -> tuple[int | None, str]:
    """(size, "") of one source, asked of its server (GridFTP ``SIZE``, HTTP ``HEAD``) or
    ``fstat`` of a local file opened with ``owner``'s rights; (None, why) when it cannot be."""
    # here, not at the top: `stage commit` imports this module and never opens a source
    from ..transfer.ranged import open_ranged

    try:
        with open_ranged(uri, config.transfer, timeout=min(30.0, config.transfer.timeout),
                         owner=owner) as reader:
            size = reader.size()
    except ScratchkeeperError as err:
        return None, str(err)
    if size is None:
        return None, f"{uri}: the server does not say its size"
    return int(size), ""


def throughput(store: StateStore, host: str, config: SiteConfig) -> Throughput:
    if not records.made(store):
        return Throughput(host, 0)  # no stage-in was ever recorded: the tables are not made yet
    rows = records.recent_transfers(store, host, config.staging.history)
    logs = [math.log(r["bytes"] / r["seconds"]) for r in rows]
    if not logs:
        return Throughput(host, 0)
    mean = sum(logs) / len(logs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1)) if len(logs) > 1 else 0.0
    return Throughput(host, len(logs), math.exp(mean), sd)


def predict(sources: Iterable[tuple[str, bool]], store: StateStore, config: SiteConfig, *,
            owner=None, allowed: SourceAllowList | None = None) -> Prediction:
    """The transfer time of a stage-in job reading ``sources`` ((uri, recursive) pairs).

    ``allowed``: a root service predicting for a user (the chain service) asks only the servers
    the site allows (``recovery.allowed_sources``) for a size, never a host because a user named
    it; a local source is opened with ``owner``'s rights whatever the list says."""
    found: list[SourcePrediction] = []
    for uri, recursive in sources:
        host = source_host(uri)
        if recursive:
            found.append(SourcePrediction(uri, host, None, f"{uri}: a directory"))
            continue
        refused = None
        if allowed is not None and records.source_endpoint(uri) != records.LOCAL:
            refused = allowed.why_refused(uri)
        if refused is not None:
            found.append(SourcePrediction(uri, host, None, f"size not asked: {refused}"))
            continue
        size, why = source_size(uri, config, owner=owner)
        found.append(SourcePrediction(uri, host, size, why))
    hosts = {s.host: throughput(store, s.host, config) for s in found}
    unknown = [s.reason for s in found if s.bytes is None]
    total = None if unknown or not found else sum(s.bytes for s in found)
    reason = ""
    if not found:
        reason = "no structured transfer to predict"
    elif unknown:
        reason = "size unknown: " + unknown[0]
    else:
        few = [h for h in hosts.values() if h.samples < config.staging.min_samples]
        if few:
            reason = (f"host {few[0].host}: {few[0].samples} recorded transfer(s), fewer than "
                      f"staging.min_samples = {config.staging.min_samples}")
    if reason:
        return Prediction(tuple(found), tuple(hosts.values()), total, None, None, reason)
    seconds = pessimistic = 0.0
    per_host: dict[str, int] = {}
    for source in found:
        per_host[source.host] = per_host.get(source.host, 0) + source.bytes
    z = config.staging.jit_sigmas
    for host, size in per_host.items():
        learned = hosts[host]
        seconds += size / learned.rate
        pessimistic += size / (learned.rate * math.exp(-z * learned.log_sd))
    return Prediction(tuple(found), tuple(hosts.values()), total, seconds, pessimistic,
                      f"{total} bytes from {', '.join(per_host)}")
