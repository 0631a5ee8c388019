"""A target with several topics: its lag is the sum of its topics' own, on a real redis-server.
Two topics at 400 msg/s in all, their consumers stopped for 4 s: the lag grows by the whole
produce rate (both topics), and the time lag of such a target is the labelled estimate."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.integration

RATE = 400.0
STOP_S, START_S = 2.0, 7.0


def test_two_topics_lag_is_their_sum(tmp_path: Path, no_leftover_redis) -> None:
    workload = tmp_path / "two-topics.yaml"
    workload.write_text("name: two-topics\ntopics: 2\npartitionsPerTopic: 2\nmessageSize: 256\n"
                        "subscriptionsPerTopic: 1\nconsumerPerSubscription: 1\n"
                        f"producersPerTopic: 1\nproducerRate: {RATE:.0f}\n")
    run_dir = tmp_path / "run"
    res = run_cli(["run", "redis", "--workload", str(workload), "--headless", "--warmup", "1",
                   "--duration", "10", "--out", str(run_dir),
                   "--at", f"{STOP_S}s:consumers=stop", "--at", f"{START_S}s:consumers=start"],
                  timeout_s=180)
    assert res.returncode == 0, res.stderr[-3000:]
    ticks = sorted(ds.dataset(run_dir / "ticks", format="parquet").to_table().to_pylist(),
                   key=lambda t: t["seq"])
    events = ds.dataset(run_dir / "events", format="parquet").to_table().to_pylist()
    changes = sorted(e["time"].timestamp() for e in events if e["kind"] == "consumers")
    stop, start = changes[0], changes[1]
    stopped = [t for t in ticks if stop + 1.0 < t["time"].timestamp() < start - 1.0]
    assert len(stopped) >= 2, len(stopped)
    at = np.array([t["time"].timestamp() for t in stopped])
    lag = np.array([t["lag_total"] for t in stopped], dtype=float)
    produced = np.array([t["produced"] for t in stopped], dtype=float)
    # each stopped tick's lag grows by what both topics received over it (one topic: half)
    growth = np.diff(lag)
    assert np.all(np.abs(growth - produced[1:]) <= 0.1 * produced[1:] + 20), (growth, produced, at)
    assert np.polyfit(at, lag, 1)[0] == pytest.approx(RATE, rel=0.1)
    # the positions are per topic: the time lag is the estimate, and says so
    assert not any(t["lag_seconds_exact"] for t in ticks if t["lag_seconds"] is not None)
    # drained after the start
    assert ticks[-1]["lag_total"] < RATE
