"""The degradation rate's 95 % confidence interval has the coverage it claims.

One synthetic run holds 100 replicates of the same target (same true slope, independent
noise), so one Spark job computes 100 slopes with their intervals; the share of intervals that
contain the true slope must be within a binomial tolerance of 95 %."""

from __future__ import annotations

from math import comb

import numpy as np
import pytest

from analysis.compute import compute_report
from analysis.runs import load_runs
from tests.analysis.synthetic_runs import TargetModel, write_synthetic_run

pytestmark = pytest.mark.spark

REPLICATES = 100
TRUE_SLOPE = -1.5  # MB/s per minute
NOISE = 0.8  # MB/s, per second


def _binomial_tail(n: int, p: float, k_max: int) -> float:
    return sum(comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(k_max + 1))


def test_slope_interval_coverage(spark, tmp_path) -> None:
    model = TargetModel(mb_s=lambda m: 40.0 + TRUE_SLOPE * m, noise_mb_s=NOISE)
    targets = {f"seed-{i:03d}": model for i in range(REPLICATES)}
    run_dir = tmp_path / "replicates"
    write_synthetic_run(run_dir, "replicates", targets, warmup_s=1, measuring_s=60,
                        draining_s=0, samples_per_tick=1, raw=False, seed=2024)
    data = compute_report(spark, load_runs([run_dir]))
    trends = [t.series["produce_mb_s"].trend for t in data.targets]
    assert len(trends) == REPLICATES

    covered = sum(tr.low <= TRUE_SLOPE <= tr.high for tr in trends)
    # a correct 95 % interval covers 88..99 times out of 100 except with probability < 1 %
    low, high = 88, 99
    assert _binomial_tail(REPLICATES, 0.95, low - 1) + 0.95**REPLICATES < 0.01
    assert low <= covered <= high, covered

    slopes = np.array([tr.slope for tr in trends])
    stderr = np.array([tr.stderr for tr in trends])
    # unbiased, and the standard errors match the spread of the slopes themselves
    assert abs(slopes.mean() - TRUE_SLOPE) < 4 * slopes.std(ddof=1) / np.sqrt(REPLICATES)
    assert stderr.mean() == pytest.approx(slopes.std(ddof=1), rel=0.2)
    # the Theil–Sen cross-check agrees with OLS on normal noise
    theil_sen = np.array([tr.theil_sen for tr in trends])
    assert abs(theil_sen.mean() - TRUE_SLOPE) < 4 * theil_sen.std(ddof=1) / np.sqrt(REPLICATES)
    assert sum(tr.verdict == "falling" for tr in trends) >= 90  # the decline is detected
