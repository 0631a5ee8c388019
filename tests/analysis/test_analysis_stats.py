"""Statistics helpers: Student-t quantiles against published tables, slope CI, Theil–Sen."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.stats import ols_slope_ci, t_quantile, theil_sen_slope


@pytest.mark.parametrize(
    ("p", "df", "expected"),
    [
        (0.975, 1, 12.7062047362),
        (0.975, 2, 4.3026527297),
        (0.975, 3, 3.1824463053),
        (0.975, 5, 2.5705818356),
        (0.975, 10, 2.2281388520),
        (0.975, 30, 2.0422724563),
        (0.975, 58, 2.0017174830),
        (0.975, 100, 1.9839715185),
        (0.975, 1000, 1.9623390808),
        (0.975, 5000, 1.9604385517),
        (0.995, 5, 4.0321429836),
        (0.95, 20, 1.7247182429),
        (0.9995, 1, 636.6192487688),
    ],
)
def test_t_quantile_matches_tables(p: float, df: int, expected: float) -> None:
    assert t_quantile(p, df) == pytest.approx(expected, rel=1e-8)
    assert t_quantile(1 - p, df) == pytest.approx(-expected, rel=1e-8)


def test_t_quantile_limits() -> None:
    assert t_quantile(0.5, 7) == 0.0
    assert t_quantile(0.975, 10**7) == pytest.approx(1.959963984540054, rel=1e-6)
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError):
            t_quantile(bad, 3)
    with pytest.raises(ValueError):
        t_quantile(0.9, 0)


def test_ols_slope_ci() -> None:
    rng = np.random.default_rng(3)
    x = np.linspace(0.0, 10.0, 25)
    y = 3.0 - 0.5 * x + rng.normal(0.0, 0.2, len(x))
    xm, ym = x - x.mean(), y - y.mean()
    sxx, syy, sxy = (xm * xm).sum(), (ym * ym).sum(), (xm * ym).sum()
    slope = sxy / sxx
    ci = ols_slope_ci(slope, len(x), sxx, syy, sxy)
    resid = ym - slope * xm
    stderr = math.sqrt((resid**2).sum() / 23 / sxx)
    assert ci.stderr == pytest.approx(stderr)
    assert ci.low == pytest.approx(slope - 2.0686576104 * stderr)
    assert ci.high == pytest.approx(slope + 2.0686576104 * stderr)
    assert ci.low < -0.5 < ci.high
    assert math.isnan(ols_slope_ci(slope, 2, sxx, syy, sxy).low)
    assert math.isnan(ols_slope_ci(0.0, 10, 0.0, 1.0, 0.0).high)


def test_theil_sen_resists_outliers() -> None:
    x = np.arange(100, dtype=float)
    y = 2.0 * x + 1.0
    y[::10] += 500.0  # 10 % gross outliers
    assert theil_sen_slope(x, y) == pytest.approx(2.0)
    assert math.isnan(theil_sen_slope([1.0, 1.0], [2.0, 3.0]))
    long_x = np.arange(10_000, dtype=float)
    assert theil_sen_slope(long_x, -0.25 * long_x) == pytest.approx(-0.25)
