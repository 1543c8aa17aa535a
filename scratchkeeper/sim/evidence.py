"""The evidence a claim is graded on: the sweeps' rows by seed, and the claim records.

:class:`Results` reads every sweep's ``results.csv`` and gives a metric per seed or a curve per
seed. Seeds that drew nothing different (every setting gave the same metrics under every seed)
are one run, not several: :attr:`Results.duplicates` names such sweeps and only their first
seed is kept, so no interval is built from copies.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from .grading import Grade
from .report import Row, one_run, read_results


@dataclass
class Claim:
    section: str
    claim: str
    thesis: str
    kind: str                   # trend, ratio, band, equal
    grade: Grade
    conditions: str = ""
    why: str = ""

    @property
    def shape(self) -> str:
        return self.grade.shown


@dataclass
class Condition:
    """A condition the reproduction set by construction: the target and what it reached."""

    section: str
    what: str
    thesis: str
    reached: str
    how: str


@dataclass
class Ungraded:
    section: str
    claim: str
    reason: str


_DEFAULTS = {"input_model": "requested-memory", "schedule": "model"}


class Results:
    """The rows of every sweep, by sweep name, with per-seed selections."""

    def __init__(self, paths: dict[str, str]):
        self.rows = {name: read_results(path) for name, path in paths.items()}
        #: sweep -> how many seeds it ran, for the sweeps whose seeds gave identical metrics
        self.duplicates: dict[str, int] = {}
        for name, rows in self.rows.items():
            kept = one_run(rows)
            if len(kept) < len(rows):
                self.duplicates[name] = len({r.text("seed") for r in rows})
                self.rows[name] = kept

    def pick(self, sweep: str, **match) -> list[Row]:
        def equal(row: Row, key: str, value) -> bool:
            if isinstance(value, str):
                return (row.text(key) or _DEFAULTS.get(key, "")) == value
            return row.num(key) == value
        return [r for r in self.rows.get(sweep, []) if all(equal(r, k, v) for k, v in match.items())]

    def seeds(self, sweep: str, key: str, **match) -> dict[int, float]:
        """``key`` per seed, averaged over the matching rows of that seed."""
        by_seed: dict[int, list[float]] = {}
        for r in self.pick(sweep, **match):
            seed = int(r.num("seed")) if not math.isnan(r.num("seed")) else 1
            by_seed.setdefault(seed, []).append(r.num(key))
        return {s: mean(v) for s, v in sorted(by_seed.items())}

    def curves(self, sweep: str, key: str, x_key: str, **match) -> dict[int, dict[float, float]]:
        """``key`` against ``x_key``, one curve per seed."""
        out: dict[int, dict[float, list[float]]] = {}
        for r in self.pick(sweep, **match):
            seed = int(r.num("seed")) if not math.isnan(r.num("seed")) else 1
            out.setdefault(seed, {}).setdefault(r.num(x_key), []).append(r.num(key))
        return {s: {x: mean(v) for x, v in sorted(c.items())} for s, c in sorted(out.items())}

    def value(self, sweep: str, key: str, **match) -> float:
        return mean(self.seeds(sweep, key, **match).values())

    def xs(self, sweep: str, x_key: str, **match) -> list[float]:
        return sorted({r.num(x_key) for r in self.pick(sweep, **match)})

    def seed_count(self, sweep: str) -> int:
        return len({r.text("seed") for r in self.rows.get(sweep, [])})


def apart(measured: str) -> float:
    """The leading number of an equality's text: how far apart, in percent."""
    try:
        return abs(float(measured.split(" ")[0].replace(",", "").replace("+", "")))
    except ValueError:
        return 0.0


def mean(values) -> float:
    values = [v for v in values if not math.isnan(v)]
    return math.fsum(values) / len(values) if values else math.nan


def fmt(value: float, digits: int = 0) -> str:
    if value is None or math.isnan(value):
        return "-"
    if math.isinf(value):
        return "inf"
    return f"{value:,.{digits}f}"


def pct(value: float, digits: int = 2) -> str:
    return "-" if math.isnan(value) else f"{value:.{digits}f} %"


def only(curves: dict[int, dict[float, float]], keep: Callable[[float], bool]):
    return {s: {x: v for x, v in c.items() if keep(x)} for s, c in curves.items()}


def diff_curves(a, b):
    """Per seed and x: a - b (paired by seed)."""
    return {s: {x: a[s][x] - b[s][x] for x in a[s] if x in b.get(s, {})}
            for s in a if s in b}


def at(curves, x: float) -> dict[int, float]:
    return {s: c[x] for s, c in curves.items() if x in c}


def mean_curve(curves) -> str:
    xs = sorted({x for c in curves.values() for x in c})
    return ", ".join(f"{x:g}: {fmt(mean([c.get(x, math.nan) for c in curves.values()]))}"
                     for x in xs)


