"""What the broker-metrics tests read of a run: its tables, its broker metrics per tick, the
times of its pause fault, and the check that a paused broker's metrics are stale."""

from __future__ import annotations

from pathlib import Path

import pyarrow.dataset as ds


def table(run_dir: Path, name: str) -> dict[str, list]:
    return ds.dataset(run_dir / name, format="parquet").to_table().to_pydict()


def by_tick(run_dir: Path) -> dict[int, tuple[dict[str, float], bool, str]]:
    """seq -> (the metrics by name, stale, phase)."""
    t = table(run_dir, "broker_metrics")
    out: dict[int, tuple[dict[str, float], bool, str]] = {}
    for seq, name, value, stale, phase in zip(t["seq"], t["name"], t["value"], t["stale"],
                                              t["phase"], strict=True):
        out.setdefault(seq, ({}, stale, phase))[0][name] = value
    return out


def fault_times(run_dir: Path) -> tuple[float, float]:
    """When the run's pause and resume faults were applied (wall-clock seconds)."""
    events = table(run_dir, "events")
    when = {k: t.timestamp() for k, t in zip(events["kind"], events["time"], strict=True)
            if k in ("fault-pause", "fault-resume")}
    return when["fault-pause"], when["fault-resume"]


def check_stale_while_paused(run_dir: Path) -> None:
    """Ticks cut while the broker is paused (the read follows the cut by up to 0.9 s) are
    stale with the last values read; the broker answers again after it is resumed."""
    paused, resumed = fault_times(run_dir)
    ticks = table(run_dir, "ticks")
    metrics = by_tick(run_dir)
    times = {s: t.timestamp() for s, t in zip(ticks["seq"], ticks["time"], strict=True)}
    inside = [seq for seq, t in times.items() if paused + 0.2 < t < resumed - 1.0]
    assert inside and all(metrics[s][1] for s in inside), inside
    before = max(s for s, t in times.items() if t < paused and not metrics[s][1])
    assert all(metrics[s][0] == metrics[before][0] for s in inside)
    after = [metrics[s][1] for s, t in times.items() if t > resumed + 2.0 and s in metrics]
    assert after and not any(after)
