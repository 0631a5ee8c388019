"""What the broker-metrics tests of the platforms read back from a run with a paused broker:
the broker_metrics table per tick, the pause's times, the steady ticks before it, and the
check that the ticks cut while the broker was paused carry its last values, stale."""

from __future__ import annotations

from pathlib import Path

import pyarrow.dataset as ds
import pytest

from loadgen.core.brokermetrics import BrokerMetric
from tests.conftest import run_cli, run_json


def table(run_dir: Path, name: str) -> dict[str, list]:
    return ds.dataset(run_dir / name, format="parquet").to_table().to_pydict()


def by_tick(run_dir: Path) -> dict[int, tuple[dict[str, float], bool, str]]:
    """seq -> (the metrics' values, stale, phase)."""
    t = table(run_dir, "broker_metrics")
    out: dict[int, tuple[dict[str, float], bool, str]] = {}
    for seq, name, value, stale, phase in zip(t["seq"], t["name"], t["value"], t["stale"],
                                              t["phase"], strict=True):
        out.setdefault(seq, ({}, stale, phase))[0][name] = value
    return out


def fault_times(run_dir: Path) -> tuple[float, float]:
    """Wall-clock seconds of the pause and the resume."""
    events = table(run_dir, "events")
    when = {k: t.timestamp() for k, t in zip(events["kind"], events["time"], strict=True)
            if k in ("fault-pause", "fault-resume")}
    return when["fault-pause"], when["fault-resume"]


def steady_rows(run_dir: Path, skip: int = 2) -> list[int]:
    """Row numbers in the ticks table of the measuring ticks cut 1.5 s or more before the
    pause, the first `skip` left out (they still carry the warm-up's start)."""
    paused, _ = fault_times(run_dir)
    ticks = table(run_dir, "ticks")
    rows = [i for i, (p, t) in enumerate(zip(ticks["phase"], ticks["time"], strict=True))
            if p == "measuring" and t.timestamp() < paused - 1.5]
    return rows[skip:]


def assert_stale_while_paused(run_dir: Path) -> None:
    """Ticks cut while the broker is paused (a read follows the cut by up to 0.9 s) are stale
    with the last values read; the broker answers again within 2 s of being resumed."""
    paused, resumed = fault_times(run_dir)
    ticks = table(run_dir, "ticks")
    metrics = by_tick(run_dir)
    times = {s: t.timestamp() for s, t in zip(ticks["seq"], ticks["time"], strict=True)}
    inside = [seq for seq, t in times.items() if paused + 0.2 < t < resumed - 1.0]
    assert inside and all(s in metrics and metrics[s][1] for s in inside), inside
    before = max(s for s, t in times.items() if t < paused and s in metrics and not metrics[s][1])
    assert all(metrics[s][0] == metrics[before][0] for s in inside)
    after = [metrics[s][1] for s, t in times.items() if t > resumed + 2.0 and s in metrics]
    assert after and not any(after)


def paused_run(tmp_path_factory: pytest.TempPathFactory, target: str, broker: str,
               pause_at_s: int, resume_at_s: int, rate: int = 1000,
               duration_s: int = 18) -> Path:
    """A headless run of `target` at `rate` msg/s (2 s warm-up) with its broker paused by
    streambench's own fault from `pause_at_s` to `resume_at_s` measuring seconds."""
    run_dir = tmp_path_factory.mktemp(f"{target}-metrics") / "run"
    res = run_cli(["run", target, "--headless", "--rate", str(rate), "--warmup", "2",
                   "--duration", str(duration_s), "--out", str(run_dir),
                   "--at", f"{pause_at_s}s:pause={broker}",
                   "--at", f"{resume_at_s}s:resume={broker}"], timeout_s=300)
    assert res.returncode == 0, res.stderr
    return run_dir


def assert_named(run_dir: Path, metrics: tuple[BrokerMetric, ...], source: str) -> None:
    """run.json says where the metrics come from and names each as the broker does."""
    target = run_json(run_dir)["targets"][0]
    assert target["broker_metrics"]["source"] == source
    assert {m["name"]: m["native"] for m in target["broker_metrics"]["metrics"]} == {
        m.name: m.native for m in metrics}
