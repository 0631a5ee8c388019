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
from tests.analysis.synthetic_runs import (
    SyntheticEvent,
    SyntheticRun,
    TargetModel,
    write_synthetic_run,
)

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


# -- a steered run: rate changes, faults, consumers stopped and started ------------------------

RECOVERED = ("healthy again 9.1 s after kill gamma-2 (4.2 s after start gamma-2); lag peak "
             "12,345 (before 10); longest publish stall 850 ms; late messages 2,300 (e2e over "
             "100 ms); send errors 7")
NOT_RECOVERED = ("not healthy again since pause delta; lag peak 5,000 (before 3); longest "
                 "publish stall 3,000 ms; late messages 900 (e2e over 100 ms); send errors 0")
DRAINED = ("backlog of 14,000 drained in 1.2 s after the consumers resumed: 11,667 msg/s "
           "consumed meanwhile")
STEERED_EVENTS = (
    SyntheticEvent(-1.5, "gamma", "rate", "max → 1,000 msg/s"),  # in warm-up: no segment
    SyntheticEvent(5.5, "delta", "fault-pause", "delta (pid 77)"),
    SyntheticEvent(8.5, "delta", "fault-resume", "delta (pid 77)"),
    SyntheticEvent(10.3, "gamma", "rate", "1,000 → 5,000 msg/s"),
    SyntheticEvent(12.5, "gamma", "loadgen-saturated",
                   "worker CPU 97 % of a core: figures describe the load generator"),
    SyntheticEvent(15.7, "", "coordinator-late", "the run loop woke 1.20 s late"),
    SyntheticEvent(20.4, "gamma", "fault-kill", "gamma-2 (pid 4242)"),
    SyntheticEvent(25.3, "gamma", "fault-start", "gamma-2 (pid 4243)"),
    SyntheticEvent(29.6, "gamma", "recovered", RECOVERED),
    SyntheticEvent(30.5, "gamma", "consumers", "running → stopped"),
    SyntheticEvent(33.4, "gamma", "consumers", "stopped → running"),
    SyntheticEvent(34.6, "gamma", "backlog-drained", DRAINED),
    SyntheticEvent(37.2, "delta", "not-recovered", NOT_RECOVERED),  # in the drain
)
# the measuring seconds each target's segments start at
GAMMA_SEGMENTS = (0, 10, 20, 25, 30, 33)
DELTA_SEGMENTS = (0, 5, 8)
STEERED_MEASURING_S = 36


def _step(k: int, *levels: tuple[int, float]) -> float:
    """The value of the last (from second, value) level at or before second k."""
    return [v for start, v in levels if start <= k][-1]


STEERED_MODELS = {
    "gamma": TargetModel(
        mb_s=lambda m: 1.0, noise_mb_s=0.02,
        measuring_mb_s=lambda k: _step(k, (0, 1.0), (10, 5.0), (20, 2.0), (25, 4.8), (30, 5.0)),
        target_rate=lambda k: 1000.0 if k < 10 else 5000.0,
        latency_factor=lambda k: _step(k, (0, 1.0), (20, 8.0), (25, 3.0), (30, 1.0)),
        consume_factor=lambda k: _step(k, (0, 1.0), (30, 0.0), (33, 2.0)),
    ),
    "delta": TargetModel(
        mb_s=lambda m: 3.0, noise_mb_s=0.05, e2e_median_ns=4e6,
        latency_factor=lambda k: _step(k, (0, 1.0), (5, 20.0), (8, 1.0)),
        measuring_mb_s=lambda k: _step(k, (0, 3.0), (5, 0.0), (8, 3.0)),
    ),
    "epsilon": TargetModel(mb_s=lambda m: 2.0, noise_mb_s=0.05),
}


@pytest.fixture(scope="session")
def steered(tmp_path_factory: pytest.TempPathFactory) -> SyntheticRun:
    """A run steered while it ran, stopped early, one target not drained."""
    run_dir = tmp_path_factory.mktemp("steered") / "run-s"
    return write_synthetic_run(run_dir, "run-s", STEERED_MODELS, warmup_s=2,
                               measuring_s=STEERED_MEASURING_S, draining_s=3,
                               samples_per_tick=300, seed=23, raw=False,
                               events=STEERED_EVENTS, stopped_early=True,
                               drained={"delta": False})


@pytest.fixture(scope="session")
def killed_run(steered: SyntheticRun) -> SyntheticRun:
    """A short run whose run.json records no end: the process was killed."""
    return write_synthetic_run(steered.run_dir.parent / "run-k", "run-k",
                               {"zeta": MODELS["beta"]}, warmup_s=1, measuring_s=8,
                               draining_s=0, samples_per_tick=50, seed=5, raw=False, ended=False)


@dataclass
class Steered:
    data: ReportData
    out: Path
    steps: list[str]


@pytest.fixture(scope="session")
def steered_report(spark: Any, steered: SyntheticRun, killed_run: SyntheticRun,
                   tmp_path_factory: pytest.TempPathFactory) -> Steered:
    """The steered and the killed run reported together; report.md and report.html written."""
    from analysis.report import write_outputs

    steps: list[str] = []
    data = compute_report(spark, load_runs([steered.run_dir, killed_run.run_dir]), steps.append)
    out = tmp_path_factory.mktemp("reports") / "steered"
    write_outputs(data, out, ("md", "html"))
    return Steered(data, out, steps)
