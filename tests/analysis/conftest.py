"""Synthetic runs and the reports on them, made once per test session: the Spark work is the
slow part, so every analysis test reads the same few results."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from analysis.compute import ReportData, compute_report
from analysis.report import build_report
from analysis.runs import load_runs
from tests.analysis.synthetic_runs import SyntheticRun, TargetModel, write_synthetic_run

TRUE_SLOPE = -2.0  # MB/s per minute for "alpha"
MEMORY_GROWTH = 30.0  # MB per minute for "alpha"
LAG_GROWTH = 300.0  # messages per minute for "alpha"
NET_FACTOR = 1.08  # alpha's broker network bytes per payload byte

MODELS = {
    "alpha": TargetModel(
        mb_s=lambda m: 50.0 + TRUE_SLOPE * m, cpu=150.0, net_factor=NET_FACTOR,
        memory_growth_mb_min=MEMORY_GROWTH, lag_growth_per_min=LAG_GROWTH,
    ),
    "beta": TargetModel(
        mb_s=lambda m: 30.0, e2e_median_ns=7e5, publish_median_ns=2e5, cpu=80.0,
        memory_bytes=300_000_000, config={"persistent": "false"},
    ),
}


@pytest.fixture(scope="session")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> SyntheticRun:
    run_dir = tmp_path_factory.mktemp("runs") / "run-a"
    return write_synthetic_run(run_dir, "run-a", MODELS, warmup_s=5, measuring_s=60,
                               draining_s=3)


@pytest.fixture(scope="session")
def run_b(synthetic: SyntheticRun) -> SyntheticRun:
    """A second, shorter run of the same kind, next to the first."""
    return write_synthetic_run(synthetic.run_dir.parent / "run-b", "run-b",
                               {"alpha": MODELS["alpha"]}, warmup_s=2, measuring_s=25,
                               draining_s=0, samples_per_tick=200, seed=11, raw=False)


@dataclass
class Computed:
    data: ReportData
    steps: list[str]


@pytest.fixture(scope="session")
def report(spark: Any, synthetic: SyntheticRun) -> Computed:
    steps: list[str] = []
    data = compute_report(spark, load_runs([synthetic.run_dir]), steps.append)
    return Computed(data, steps)


@dataclass
class Built:
    out: Path
    main: Path
    steps: list[str]


@pytest.fixture(scope="session")
def built(spark: Any, synthetic: SyntheticRun, run_b: SyntheticRun,
          tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The full report on both runs, the second given as a glob pattern, beta as baseline."""
    out = tmp_path_factory.mktemp("reports") / "both"
    steps: list[str] = []
    main = build_report([synthetic.run_dir, str(run_b.run_dir.parent / "run-[b]")], out,
                        progress=steps.append, baseline="beta")
    return Built(out, main, steps)
