"""The one grading rule of ``reproduction.rst``: per-seed values, 95 % intervals, kinds of claim.

Every claim of the thesis that the replay grades is of one kind, and each kind has one test,
applied to the per-seed values of the replay (runs that differ only in ``seed``: what the seed
draws on that trace, see :func:`scratchkeeper.sim.reproduce.seed_draws`):

* **interval**: the mean of the per-seed values ± Student's t (95 %, n - 1 degrees of freedom)
  × SD / sqrt(n). Paired quantities (with/without recovery, one strategy against another) are
  differenced or divided *within* a seed first, so what the seeds share cancels.
* **trend** ("rises", "falls", "grows with the load"): per seed, the least-squares slope over
  *every* point of the curve (x on a log2 axis for stripe counts); the trend is called when the
  interval of the slopes excludes 0: *yes* in the claimed direction, *no* in the other, *not
  shown* when the interval contains 0 (the change is within the spread).
* **ratio** ("more than xK", "much less", "dramatically", "significantly"): per seed the ratio
  before/after, interval on the log scale; *yes* when the interval is above K, *partly* when
  above 1 but not above K, *no* otherwise. Words without a number read as K = 2.
* **value** (a number the thesis states: "0.14 %", "about 100,000 s"): *yes* when the interval,
  widened by half a unit of the thesis's last digit (its rounding), holds the thesis's value,
  *no* otherwise; the grade says by how far it missed, in the thesis's units.
* **band** (a range the thesis states: "tens to hundreds of s", "< 1.8 %", "> 60 %"): *yes*
  when the interval lies inside the range, *partly* when inside the range widened by a factor
  10 at each end (one order of magnitude), *no* otherwise.
* **limit** ("most datasets": fewer than half at risk): *yes* when the interval lies below the
  limit, *no* when above it, *not shown* when it straddles it.
* **equal** ("the same", "virtually identical", "on the ideal curve"): per seed the relative
  difference; *yes* when its interval includes 0 and stays within ±20 % (narrow enough to tell),
  *not shown* when it includes 0 but is wider, *partly* when it excludes 0 but lies within ±5 %,
  *no* otherwise.
* **flat** ("almost flat"): per seed the curve's range over its mean; *yes* within 5 %,
  *partly* within 20 %.

With one run (one seed, or seeds that drew nothing different) there is no interval: the value
itself is graded (an equality must then be 0 at the report's precision) and the grade says
*one run*. A claim true by construction (a definition, a property of the trace) is not graded
as reproduced: it is counted apart. Conditions the reproduction *sets* (a load factor searched
to reach a utilisation or a queue length) are listed as conditions, never graded as results.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

YES, PARTLY, NO, NOT_SHOWN, MISSING = "yes", "partly", "no", "not shown", "no data"
BY_CONSTRUCTION = "by construction"
#: How reproduction.rst counts the verdicts.
TALLY = {YES: "reproduced", PARTLY: "partly", NO: "not reproduced",
         NOT_SHOWN: "not reproduced", BY_CONSTRUCTION: "by construction",
         MISSING: "not measurable"}
#: Student's t, two-sided 95 %, by degrees of freedom (1..30); 1.96 beyond.
_T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042]
EQUAL_TOLERANCE = 0.05
EQUAL_PARTLY = 0.20
BAND_WIDENING = 10.0
WORD_RATIO = 2.0

PerSeed = Mapping[int, float]       # seed -> value


@dataclass(frozen=True)
class Interval:
    """Mean and 95 % interval of ``n`` per-seed values (low == high == mean when n == 1)."""

    mean: float
    low: float
    high: float
    n: int

    @property
    def missing(self) -> bool:
        return self.n == 0 or math.isnan(self.mean)

    def text(self, digits: int = 0, unit: str = "") -> str:
        if self.missing:
            return "-"
        if self.n == 1:
            return f"{_num(self.mean, digits)}{unit} (one run, no interval)"
        if self.low == self.high:
            # Seeds that all gave the same value: no spread to show, and no interval claimed.
            return f"{_num(self.mean, digits)}{unit} ({self.n} seeds, all equal)"
        return (f"{_num(self.mean, digits)}{unit} [{_num(self.low, digits)}, "
                f"{_num(self.high, digits)}]")


@dataclass(frozen=True)
class Grade:
    """A verdict and the measured interval it rests on, in words."""

    verdict: str
    measured: str
    seeds: int = 0

    @property
    def shown(self) -> str:
        """The verdict as the table shows it: a grade resting on one run says so."""
        if self.seeds == 1 and self.verdict not in (MISSING, NOT_SHOWN, BY_CONSTRUCTION):
            return f"{self.verdict} (one run)"
        return self.verdict


def _num(value: float, digits: int) -> str:
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:,.{digits}f}"


def t95(degrees: int) -> float:
    return _T95[degrees - 1] if 1 <= degrees <= len(_T95) else 1.96


def interval(values) -> Interval:
    """The 95 % t-interval of the mean of ``values`` (NaNs left out)."""
    values = [float(v) for v in values if not math.isnan(v)]
    n = len(values)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = math.fsum(values) / n
    if n == 1:
        return Interval(mean, mean, mean, 1)
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = t95(n - 1) * sd / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


def paired(a: PerSeed, b: PerSeed) -> list[int]:
    """Seeds present (and not NaN) in both."""
    return sorted(s for s in a if s in b and not math.isnan(a[s]) and not math.isnan(b[s]))


def slope(points: Mapping[float, float], log2_x: bool = False) -> float:
    """Least-squares slope of ``points`` (x -> y) over every point."""
    xs = [math.log2(x) if log2_x else x for x in points]
    ys = list(points.values())
    if len(xs) < 2:
        return math.nan
    mx, my = math.fsum(xs) / len(xs), math.fsum(ys) / len(ys)
    sxx = math.fsum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return math.nan
    return math.fsum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx


def trend(curves: Mapping[int, Mapping[float, float]], direction: int, *, log2_x: bool = False,
          digits: int = 0, unit: str = "") -> Grade:
    """A curve per seed (x -> y): does it rise (``direction`` 1) or fall (-1)?"""
    slopes = [slope(c, log2_x) for c in curves.values() if len(c) >= 2]
    iv = interval(slopes)
    if iv.missing:
        return Grade(MISSING, "-")
    ends = interval([c[max(c)] - c[min(c)] for c in curves.values() if len(c) >= 2])
    per = "per doubling" if log2_x else "per unit of x"
    measured = (f"slope {iv.text(digits, unit)} {per}; end to end {ends.text(digits, unit)}")
    if iv.n == 1:
        verdict = YES if iv.mean * direction > 0 else NO
    elif iv.low > 0 or iv.high < 0:
        verdict = YES if (iv.low > 0) == (direction > 0) else NO
    else:
        verdict = NOT_SHOWN
    return Grade(verdict, measured, iv.n)


def ratio(before: PerSeed, after: PerSeed, k: float, digits: int = 1) -> Grade:
    """"before is more than x``k`` after": the per-seed ratio's interval against k and 1."""
    seeds = [s for s in paired(before, after) if before[s] > 0 and after[s] > 0]
    logs = interval([math.log(before[s] / after[s]) for s in seeds])
    if logs.missing:
        return Grade(MISSING, "-")
    iv = Interval(math.exp(logs.mean), math.exp(logs.low), math.exp(logs.high), logs.n)
    verdict = YES if iv.low > k else (PARTLY if iv.low > 1 else NO)
    return Grade(verdict, f"x {iv.text(digits)}", iv.n)


def band(values: PerSeed, low: float, high: float, digits: int = 0, unit: str = "") -> Grade:
    """The value lies in the stated range [low, high]; partly within one order of magnitude."""
    iv = interval(values.values())
    if iv.missing:
        return Grade(MISSING, "-")
    if low <= iv.low and iv.high <= high:
        verdict = YES
    elif low / BAND_WIDENING <= iv.low and iv.high <= high * BAND_WIDENING:
        verdict = PARTLY
    else:
        verdict = NO
    return Grade(verdict, iv.text(digits, unit), iv.n)


def below(values: PerSeed, limit: float, digits: int = 0, unit: str = "") -> Grade:
    """A strict limit ("most jobs": below 50 % at risk): *yes* when the interval lies below
    ``limit``, *no* when it lies above, *not shown* when it straddles it; no widening, since
    a majority is not a matter of magnitude."""
    iv = interval(values.values())
    if iv.missing:
        return Grade(MISSING, "-")
    verdict = YES if iv.high < limit else NO if iv.low >= limit else NOT_SHOWN
    return Grade(verdict, f"{iv.text(digits, unit)}; limit {_num(limit, digits)}{unit}", iv.n)


def value(values: PerSeed, stated: float, rounding: float, digits: int = 0,
          unit: str = "") -> Grade:
    """The thesis states ``stated`` (to ``rounding``, half a unit of its last digit): does the
    interval hold it? With one run the value itself must round to it."""
    iv = interval(values.values())
    if iv.missing:
        return Grade(MISSING, "-")
    low, high = iv.low - rounding, iv.high + rounding
    held = low <= stated <= high
    measured = f"{iv.text(digits, unit)}; the thesis {_num(stated, digits)}{unit}"
    if not held:
        miss = stated - iv.high if stated > iv.high else iv.low - stated
        side = "above" if stated > iv.high else "below"
        measured += (f", {_num(miss, digits)}{unit} {side} the "
                     + ("value" if iv.n == 1 else "interval"))
    return Grade(YES if held else NO, measured, iv.n)


def equal(a: PerSeed, b: PerSeed, stated: str = "") -> Grade:
    """a equals b: the interval of the per-seed relative difference (a - b) / b must hold 0.

    ``stated`` is the difference the thesis gives, shown beside the measured one.
    """
    seeds = [s for s in paired(a, b) if b[s] != 0]
    iv = interval([(a[s] - b[s]) / abs(b[s]) * 100 for s in seeds])
    grade = _equal_grade(iv)
    if stated and not iv.missing:
        return Grade(grade.verdict, f"{grade.measured} (the thesis: {stated})", grade.seeds)
    return grade


#: The report's precision for a relative difference (one decimal of a percent).
_EQUAL_PRECISION = 0.05


def _equal_grade(iv: Interval) -> Grade:
    if iv.missing:
        return Grade(MISSING, "-")
    worst = max(abs(iv.low), abs(iv.high))
    if iv.n == 1:
        holds_zero = abs(iv.mean) < _EQUAL_PRECISION
    else:
        holds_zero = iv.low <= 0 <= iv.high
    if holds_zero:
        verdict = YES if worst <= EQUAL_PARTLY * 100 or iv.n == 1 else NOT_SHOWN
    else:
        verdict = PARTLY if worst <= EQUAL_TOLERANCE * 100 else NO
    sign = "+" if iv.mean >= 0 else ""
    text = iv.text(1, " %")
    return Grade(verdict, f"{sign}{text} apart", iv.n)


def constructed(reason: str, measured: str = "", seeds: int = 0) -> Grade:
    """A claim true by construction: what the replay shows, counted apart from the results."""
    return Grade(BY_CONSTRUCTION, f"{measured}; {reason}" if measured else reason, seeds)


def flat(curves: Mapping[int, Mapping[float, float]]) -> Grade:
    """A curve is flat: per seed its range over its mean, as an equality (±5 %, partly ±20 %)."""
    spreads = []
    for curve in curves.values():
        values = [v for v in curve.values() if not math.isnan(v)]
        centre = math.fsum(values) / len(values) if values else math.nan
        if values and centre:
            spreads.append((max(values) - min(values)) / abs(centre) * 100)
    iv = interval(spreads)
    if iv.missing:
        return Grade(MISSING, "-")
    verdict = (YES if iv.high <= EQUAL_TOLERANCE * 100 else
               PARTLY if iv.high <= EQUAL_PARTLY * 100 else NO)
    return Grade(verdict, f"range/mean {iv.text(1, ' %')}", iv.n)


def every(grades: list[Grade], measured: str) -> Grade:
    """A claim that must hold at every point: the worst point's verdict."""
    order = [MISSING, NO, NOT_SHOWN, PARTLY, YES, BY_CONSTRUCTION]
    if not grades:
        return Grade(MISSING, "-")
    worst = min(grades, key=lambda g: order.index(g.verdict))
    return Grade(worst.verdict, measured, min(g.seeds for g in grades))
