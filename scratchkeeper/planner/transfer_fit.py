"""The transfer-time model JIT stage-in plans with: seconds = fixed + bytes / bandwidth per file,
fitted robustly to timings data jobs measured themselves, and a pessimistic bound from the
fit's relative residuals (:mod:`.predict` picks the history; this module only fits).

The fit minimises the sum of *relative* absolute deviations, ``sum |s_i - a - b x_i| / s_i``
(least absolute deviations weighted by the time itself), by iteratively reweighted least
squares started from the Theil-Sen line, with ``a >= 0`` and ``b >= 0``. Relative, because
times of one history span orders of magnitude (a 1 MB file in tens of milliseconds, a 1 GB one
in seconds) and the prediction is judged relative to each transfer; absolute deviations, so a
few transfers slowed by a busy server or a retry inside the client do not move it. Samples of a
single size (or one sample) give no slope: the line then goes through the origin at the median
seconds per byte, which over-predicts a larger file (it scales the fixed cost too), the safe
side for JIT.

The pessimistic bound of a file is ``estimate * (1 + spread)``, ``spread`` the ``quantile``
(``staging.jit_quantile``) of the relative residuals ``s_i / estimate_i - 1``, never below
``min_spread`` (``staging.jit_min_spread``).

A changed host (a new link, a server moved): the ``change_window`` newest samples are compared
with the fit of the older ones; when more than half of them lie outside the older fit's
residual band (its ``1 - quantile`` and ``quantile`` quantiles, widened by ``min_spread``) on
the same side, the host is refitted on the newest samples only, and its spread is the larger
of theirs and the older fit's. (A change of bandwidth shows only in files large enough for
their bytes to outweigh the fixed cost: newest samples all small do not reveal it, nor are
their predictions wrong.) Once the newer samples are the majority of the older ones too,
the change is no longer seen and the whole history is fitted: the older samples then widen the
bound until they leave the history.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: iterations of the reweighting; each is one 2x2 solve over the history
ITERATIONS = 100
#: a relative residual below this is taken as this when it is reweighted (IRLS's guard)
_TINY = 1e-4
#: pairs of samples the Theil-Sen start looks at, at most (a history of 200 has 19,900)
MAX_PAIRS = 20_000


@dataclass(frozen=True)
class TransferFit:
    """One fitted model: ``fixed`` seconds per file, ``per_byte`` seconds per byte."""

    fixed: float
    per_byte: float
    spread: float
    samples: int
    basis: str = ""

    @property
    def bandwidth(self) -> float | None:
        """Bytes per second; None for a fit with no per-byte cost."""
        return 1.0 / self.per_byte if self.per_byte > 0 else None

    def seconds(self, size: int) -> float:
        return self.fixed + self.per_byte * size

    def pessimistic(self, size: int) -> float:
        return self.seconds(size) * (1.0 + self.spread)


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (linear between order statistics)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("quantile of no values")
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def relative_residuals(fixed: float, per_byte: float, sizes: Sequence[float],
                       seconds: Sequence[float]) -> list[float]:
    """``s_i / (fixed + per_byte * x_i) - 1`` of every sample: how much slower than predicted."""
    return [s / max(fixed + per_byte * x, 1e-12) - 1.0 for x, s in zip(sizes, seconds)]


def _theil_sen(sizes: Sequence[float], seconds: Sequence[float]) -> tuple[float, float]:
    """The Theil-Sen line: the median slope of the pairs of different sizes, the median
    intercept for that slope (a deterministic stride over the pairs when there are too many)."""
    n = len(sizes)
    pairs = n * (n - 1) // 2
    stride = max(1, pairs // MAX_PAIRS)
    slopes = []
    index = 0
    for i in range(n):
        for j in range(i + 1, n):
            index += 1
            if index % stride or sizes[i] == sizes[j]:
                continue
            slopes.append((seconds[j] - seconds[i]) / (sizes[j] - sizes[i]))
    slope = max(quantile(slopes, 0.5), 0.0) if slopes else 0.0
    intercept = max(quantile([s - slope * x for x, s in zip(sizes, seconds)], 0.5), 0.0)
    return intercept, slope


def _objective(fixed: float, per_byte: float, sizes, seconds) -> float:
    return sum(abs(s - fixed - per_byte * x) / s for x, s in zip(sizes, seconds))


def _through_origin(sizes: Sequence[float], seconds: Sequence[float]) -> tuple[float, float]:
    return 0.0, quantile([s / x for x, s in zip(sizes, seconds)], 0.5)


def fit_line(sizes: Sequence[float], seconds: Sequence[float]) -> tuple[float, float]:
    """(fixed seconds, seconds per byte) minimising the relative absolute deviations, both
    non-negative. ``sizes`` > 0 and ``seconds`` > 0."""
    if not sizes or len(sizes) != len(seconds):
        raise ValueError("a fit needs as many sizes as times, and at least one")
    if len(set(sizes)) < 2:
        return _through_origin(sizes, seconds)
    scale = max(sizes)                  # sizes in units of the largest: a well-conditioned solve
    xs = [x / scale for x in sizes]
    fixed, slope = _theil_sen(xs, seconds)
    best = (_objective(fixed, slope, xs, seconds), fixed, slope)
    for _ in range(ITERATIONS):
        weights = [1.0 / (s * s * max(abs(s - fixed - slope * x) / s, _TINY))
                   for x, s in zip(xs, seconds)]
        fixed, slope = _weighted_line(xs, seconds, weights)
        value = _objective(fixed, slope, xs, seconds)
        if value >= best[0] * (1 - 1e-9):
            if value < best[0]:
                best = (value, fixed, slope)
            break
        best = (value, fixed, slope)
    _, fixed, slope = best
    return fixed, slope / scale


def _weighted_line(xs, ys, weights) -> tuple[float, float]:
    """Weighted least squares of ``y = a + b x`` with ``a, b >= 0``."""
    sw = sum(weights)
    sx = sum(w * x for w, x in zip(weights, xs))
    sy = sum(w * y for w, y in zip(weights, ys))
    sxx = sum(w * x * x for w, x in zip(weights, xs))
    sxy = sum(w * x * y for w, x, y in zip(weights, xs, ys))
    det = sw * sxx - sx * sx
    if det > 1e-12 * sw * sxx:
        a = (sy * sxx - sx * sxy) / det
        b = (sw * sxy - sx * sy) / det
        if a >= 0 and b >= 0:
            return a, b
    # on a bound: the better of the line through the origin and the flat line
    through = (0.0, max(sxy / sxx, 0.0)) if sxx > 0 else (0.0, 0.0)
    flat = (max(sy / sw, 0.0), 0.0)
    return min((through, flat), key=lambda ab: _objective(ab[0], ab[1], xs, ys))


def fit_samples(sizes: Sequence[float], seconds: Sequence[float], *, q: float,
                min_spread: float, basis: str) -> TransferFit:
    """The fit of these samples and its spread (the ``q`` quantile of its relative residuals)."""
    fixed, per_byte = fit_line(sizes, seconds)
    residuals = relative_residuals(fixed, per_byte, sizes, seconds)
    spread = max(quantile(residuals, q), min_spread)
    return TransferFit(fixed, per_byte, spread, len(sizes), basis)


def fit_history(samples: Sequence[tuple[float, float]], *, q: float, min_spread: float,
                change_window: int, min_samples: int, basis: str) -> TransferFit:
    """The fit of one host's history, ``samples`` ((bytes, seconds), newest first), with the
    changed-host rule of the module's docstring."""
    sizes = [float(b) for b, _ in samples]
    seconds = [float(s) for _, s in samples]
    whole = fit_samples(sizes, seconds, q=q, min_spread=min_spread, basis=basis)
    older_count = len(samples) - change_window
    if change_window < 1 or older_count < max(min_samples, 2):
        return whole
    older = fit_samples(sizes[change_window:], seconds[change_window:], q=q,
                        min_spread=min_spread, basis=basis)
    older_residuals = relative_residuals(older.fixed, older.per_byte, sizes[change_window:],
                                         seconds[change_window:])
    low = min(quantile(older_residuals, 1 - q), 0.0) - min_spread
    high = max(quantile(older_residuals, q), 0.0) + min_spread
    recent = relative_residuals(older.fixed, older.per_byte, sizes[:change_window],
                                seconds[:change_window])
    slower, faster = sum(r > high for r in recent), sum(r < low for r in recent)
    if 2 * max(slower, faster) <= len(recent):
        return whole
    newest = fit_samples(sizes[:change_window], seconds[:change_window], q=q,
                         min_spread=min_spread,
                         basis=f"{basis}; changed ({max(slower, faster)} of the newest "
                               f"{change_window} {'slower' if slower > faster else 'faster'} "
                               f"than the older fit allows): refitted on them")
    return TransferFit(newest.fixed, newest.per_byte, max(newest.spread, older.spread),
                       newest.samples, newest.basis)
