"""Predict how long a stage-in job takes: per file, a fixed cost plus its bytes over the
bandwidth learned per source host and client from the transfers data jobs timed themselves.

Data jobs time each structured transfer (the client's run, sub-second, per directive line) and
``stage commit`` records it (:mod:`.transfer_timing`). For a source read with client ``C``
(``gridftp`` for ``gsiftp://``/``ftp://``, ``http`` for ``http(s)://``, ``file`` for a local
path, ``scp``) from host ``H``, the model is fitted (:mod:`.transfer_fit`: least absolute
relative deviations, a changed host refitted on its newest samples) to the newest
``staging.history`` single-file transfers of ``(H, C)``:

- at least ``staging.min_samples`` of them: that fit (``basis`` ``host``);
- fewer: the fit of the newest ``staging.history`` transfers by ``C`` from every host
  (``pooled``), when there are at least ``staging.min_samples``; its spread holds the
  differences between hosts too, so its bound is wider;
- fewer still: no prediction (a JIT stage-in then starts at once).

A stage-in's prediction is the sum over its files of ``fixed + bytes * per_byte``; its
pessimistic bound, which JIT plans with, the sum of each file's ``estimate * (1 + spread)``,
``spread`` the ``staging.jit_quantile`` quantile of the fit's relative residuals (at least
``staging.jit_min_spread``). A source whose size cannot be asked (a directory, ``scp://``) or
whose client is unknown has no prediction. The stage-in job's own start-up (its scheduler's
dispatch, the commit) is not in the model: ``staging.jit_margin`` covers it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from ..config import SiteConfig
from ..errors import ScratchkeeperError
from ..state import StateStore
from ..transfer.redirects import RedirectPolicy, follow_any
from ..transfer.uri import UnknownScheme, parse_location
from . import records
from .sources import SourceAllowList
from .transfer_fit import TransferFit, fit_history, fit_samples

LOCAL_HOST = "localhost"
#: the client of a source by its scheme (the program is the site's: transfer.globus_url_copy...)
CLIENTS = {"gsiftp": "gridftp", "ftp": "gridftp", "http": "http", "https": "http",
           "file": "file", "path": "file", "scp": "scp"}


@dataclass(frozen=True)
class HostModel:
    """What the timed transfers of one (host, client) say; ``fit`` None when too few."""

    host: str
    client: str
    samples: int
    fit: TransferFit | None = None
    reason: str = ""


@dataclass(frozen=True)
class SourcePrediction:
    source: str
    host: str
    bytes: int | None
    reason: str = ""                   # why its size is unknown
    client: str = ""


@dataclass(frozen=True)
class Prediction:
    """A stage-in job's predicted transfer time; ``seconds is None`` when it cannot be made."""

    sources: tuple[SourcePrediction, ...]
    hosts: tuple[HostModel, ...]
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


def source_client(uri: str) -> str:
    """The client a source is read with (``gridftp``, ``http``, ``file``, ``scp``); "" if none."""
    try:
        return CLIENTS.get(parse_location(uri).scheme, "")
    except (ValueError, UnknownScheme):
        return ""


def source_size(uri: str, config: SiteConfig, *, owner=None,
                redirects: RedirectPolicy | None = None) -> tuple[int | None, str]:
    """(size, "") of one source, asked of its server (GridFTP ``SIZE``, HTTP ``HEAD``) or
    ``fstat`` of a local file opened with ``owner``'s rights; (None, why) when it cannot be.
    ``redirects``: the HTTP redirect targets that may be followed (default: none)."""
    # here, not at the top: `stage commit` imports this module and never opens a source
    from ..transfer.ranged import open_ranged

    try:
        with open_ranged(uri, config.transfer, timeout=min(30.0, config.transfer.timeout),
                         owner=owner, redirects=redirects) as reader:
            size = reader.size()
    except ScratchkeeperError as err:
        return None, str(err)
    if size is None:
        return None, f"{uri}: the server does not say its size"
    return int(size), ""


def size_redirects(allowed: SourceAllowList | None) -> RedirectPolicy | None:
    """Which redirects a size query follows: those ``allowed`` allows, when a root service asks
    for a user; any, for a plain user asking as themselves; none, for root asking unchecked."""
    if allowed is not None:
        return allowed.why_endpoint_refused
    return follow_any if os.geteuid() != 0 else None


def host_model(store: StateStore | None, host: str, client: str,
               config: SiteConfig) -> HostModel:
    """The model of ``(host, client)``, with the fallbacks of the module's docstring."""
    staging = config.staging
    options = dict(q=staging.jit_quantile, min_spread=staging.jit_min_spread)
    own = records.recent_timings(store, client, staging.history, host) if store else []
    if len(own) >= staging.min_samples:
        fit = fit_history([(r["bytes"], r["seconds"]) for r in own], **options,
                          change_window=staging.change_window,
                          min_samples=staging.min_samples,
                          basis=f"host: {len(own)} timed {client} transfers from {host}")
        return HostModel(host, client, len(own), fit)
    pooled = records.recent_timings(store, client, staging.history) if store else []
    if len(pooled) >= staging.min_samples:
        fit = fit_samples([r["bytes"] for r in pooled], [r["seconds"] for r in pooled],
                          **options, basis=f"pooled: {len(own)} timed {client} transfer(s) "
                                           f"from {host}, fewer than staging.min_samples = "
                                           f"{staging.min_samples}; fitted to the newest "
                                           f"{len(pooled)} {client} transfers of every host")
        return HostModel(host, client, len(own), fit)
    return HostModel(host, client, len(own), None,
                     f"host {host}: {len(own)} timed {client} transfer(s), and "
                     f"{len(pooled)} from every host, fewer than staging.min_samples = "
                     f"{staging.min_samples}")


def predict(sources: Iterable[tuple[str, bool]], store: StateStore | None, config: SiteConfig,
            *, owner=None, allowed: SourceAllowList | None = None) -> Prediction:
    """The transfer time of a stage-in job reading ``sources`` ((uri, recursive) pairs).

    ``allowed``: a root service predicting for a user (the chain service) asks only the servers
    the site allows (``recovery.allowed_sources``) for a size, never a host because a user named
    it, and follows an HTTP redirect only to a server the list allows too; a local source is
    opened with ``owner``'s rights whatever the list says. Without it the caller asks as
    itself: a user follows redirects as their data job's curl would (at most five), root
    follows none (no root path goes where nothing checked)."""
    redirects = size_redirects(allowed)
    found: list[SourcePrediction] = []
    for uri, recursive in sources:
        host, client = source_host(uri), source_client(uri)
        if recursive:
            found.append(SourcePrediction(uri, host, None, f"{uri}: a directory", client))
            continue
        refused = None
        if allowed is not None and records.source_endpoint(uri) != records.LOCAL:
            refused = allowed.why_refused(uri)
        if refused is not None:
            found.append(SourcePrediction(uri, host, None, f"size not asked: {refused}", client))
            continue
        size, why = source_size(uri, config, owner=owner, redirects=redirects)
        found.append(SourcePrediction(uri, host, size, why, client))
    models = {(s.host, s.client): host_model(store, s.host, s.client, config)
              for s in found if s.client}
    unknown = [s.reason for s in found if s.bytes is None]
    total = None if unknown or not found else sum(s.bytes or 0 for s in found)
    reason = ""
    if not found:
        reason = "no structured transfer to predict"
    elif unknown:
        reason = "size unknown: " + unknown[0]
    elif any(not s.client for s in found):
        reason = "no client known for " + next(s.source for s in found if not s.client)
    else:
        missing = [m for m in models.values() if m.fit is None]
        if missing:
            reason = missing[0].reason
    if reason:
        return Prediction(tuple(found), tuple(models.values()), total, None, None, reason)
    seconds = pessimistic = 0.0
    for source in found:
        fit = models[(source.host, source.client)].fit
        assert fit is not None and source.bytes is not None
        seconds += fit.seconds(source.bytes)
        pessimistic += fit.pessimistic(source.bytes)
    hosts = ", ".join(f"{client} from {host}" for host, client in models)
    return Prediction(tuple(found), tuple(models.values()), total, seconds, pessimistic,
                      f"{len(found)} file(s), {total} bytes: {hosts}")
