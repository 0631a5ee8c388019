"""Small statistics helpers for the reports (no SciPy): Student-t quantiles, the OLS slope
confidence interval, the Theil–Sen slope, and `Trend`, which puts them together for one
per-second series against time."""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

_SERIES_MAX_DF = 1000  # above this the Cornish–Fisher expansion is exact to ~1e-12
_THEIL_SEN_MAX_POINTS = 2000


def _t_abs_cdf(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with integer df (Abramowitz & Stegun 26.7.3 / 26.7.4)."""
    theta = math.atan(t / math.sqrt(df))
    s, c = math.sin(theta), math.cos(theta)
    c2 = c * c
    if df % 2 == 0:
        term = total = 1.0
        for k in range(2, df - 1, 2):
            term *= (k - 1) / k * c2
            total += term
        return s * total
    if df == 1:
        return 2.0 * theta / math.pi
    term = total = c
    for k in range(3, df - 1, 2):
        term *= (k - 1) / k * c2
        total += term
    return 2.0 / math.pi * (theta + s * total)


def _t_cornish_fisher(p: float, df: int) -> float:
    z = NormalDist().inv_cdf(p)
    z3, z5, z7, z9 = z**3, z**5, z**7, z**9
    n = float(df)
    return (
        z
        + (z3 + z) / (4 * n)
        + (5 * z5 + 16 * z3 + 3 * z) / (96 * n**2)
        + (3 * z7 + 19 * z5 + 17 * z3 - 15 * z) / (384 * n**3)
        + (79 * z9 + 776 * z7 + 1482 * z5 - 1920 * z3 - 945 * z) / (92160 * n**4)
    )


def t_quantile(p: float, df: int) -> float:
    """The p-quantile (0 < p < 1) of Student's t distribution with df >= 1 degrees of freedom."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if df > _SERIES_MAX_DF:
        return _t_cornish_fisher(p, df)
    target = 2.0 * p - 1.0  # P(|T| < t)
    lo, hi = 0.0, 2.0
    while _t_abs_cdf(hi, df) < target:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _t_abs_cdf(mid, df) < target:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * hi:
            break
    return 0.5 * (lo + hi)


@dataclass(frozen=True, slots=True)
class SlopeCI:
    slope: float
    low: float
    high: float
    stderr: float


def ols_slope_ci(
    slope: float, n: int, sxx: float, syy: float, sxy: float, level: float = 0.95
) -> SlopeCI:
    """Confidence interval of an OLS slope from the regression sums (as Spark's regr_sxx,
    regr_syy, regr_sxy, regr_count give them). NaN bounds when n < 3 or x does not vary."""
    nan = float("nan")
    if n < 3 or not sxx > 0 or math.isnan(slope):
        return SlopeCI(slope, nan, nan, nan)
    resid = max(syy - slope * sxy, 0.0)
    stderr = math.sqrt(resid / (n - 2) / sxx)
    half = t_quantile(0.5 + level / 2.0, n - 2) * stderr
    return SlopeCI(slope, slope - half, slope + half, stderr)


def theil_sen_slope(x: npt.ArrayLike, y: npt.ArrayLike) -> float:
    """Median of the pairwise slopes (robust to outliers); long series are thinned evenly
    to at most 2000 points first. NaN when fewer than two distinct x values."""
    xa = np.asarray(x, dtype=np.float64)
    ya = np.asarray(y, dtype=np.float64)
    keep = np.isfinite(xa) & np.isfinite(ya)
    xa, ya = xa[keep], ya[keep]
    if len(xa) > _THEIL_SEN_MAX_POINTS:
        pick = np.linspace(0, len(xa) - 1, _THEIL_SEN_MAX_POINTS).round().astype(np.int64)
        xa, ya = xa[pick], ya[pick]
    i, j = np.triu_indices(len(xa), k=1)
    dx = xa[j] - xa[i]
    ok = dx != 0
    if not ok.any():
        return float("nan")
    return float(np.median((ya[j] - ya[i])[ok] / dx[ok]))


@dataclass(frozen=True, slots=True)
class Trend:
    """Straight-line fit of a per-second series against time (x in minutes): the OLS slope in
    y units per minute with its confidence interval, R², and the Theil–Sen slope as a robust
    cross-check. `mean` is the mean of y, the base of the relative figures."""

    points: int
    slope: float
    intercept: float
    low: float
    high: float
    stderr: float
    r2: float
    mean: float
    theil_sen: float

    @property
    def significant(self) -> bool:
        """The confidence interval lies on one side of zero."""
        return math.isfinite(self.low) and math.isfinite(self.high) and (
            self.low > 0.0 or self.high < 0.0
        )

    @property
    def verdict(self) -> str:
        if not math.isfinite(self.low):
            return "too few points"
        if not self.significant:
            return "no significant trend"
        return "falling" if self.slope < 0 else "rising"

    def per_hour_pct(self, per_minute: float) -> float:
        """A slope (y units per minute) as % of the mean per hour."""
        if not self.mean or not math.isfinite(self.mean):
            return float("nan")
        return per_minute * 60.0 / self.mean * 100.0


def fit_trend(
    n: int,
    slope: float,
    intercept: float,
    r2: float,
    sxx: float,
    syy: float,
    sxy: float,
    mean: float,
    theil_sen: float = float("nan"),
    level: float = 0.95,
) -> Trend:
    """A Trend from the regression sums (Spark's regr_count, regr_slope, regr_intercept,
    regr_r2, regr_sxx, regr_syy, regr_sxy and avg of y)."""
    ci = ols_slope_ci(slope, n, sxx, syy, sxy, level)
    return Trend(n, slope, intercept, ci.low, ci.high, ci.stderr, r2, mean, theil_sen)
