"""What a run with OMB's backlog phase must show in its files, on any broker: the consumers stopped
at the start of the measuring phase, the backlog built to the size, the consumers resumed and
the drain timed; the events' figures checked against the run's own ticks."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tests.conftest import run_json

SIZE_GB = 0.004  # 4,194 messages of 1 KiB
RATE = 1500
WORKLOAD_FIELDS = (f"producerRate: {RATE}\nmessageSize: 1024\ntestDurationSeconds: 12\n"
                   f"warmupDurationSeconds: 1\nconsumerBacklogSizeGB: {SIZE_GB}\n"
                   "backlogDrainRatio: 0.9\n")


def assert_backlog_phase(out: Path) -> None:
    events = sorted(ds.dataset(out / "events", format="parquet").to_table().to_pylist(),
                    key=lambda e: e["time"])
    kinds = [e["kind"] for e in events if e["kind"] in
             ("consumers", "backlog-built", "backlog-drain-done")]
    assert kinds == ["consumers", "backlog-built", "consumers", "backlog-drain-done"], kinds
    built = next(e for e in events if e["kind"] == "backlog-built")
    done = next(e for e in events if e["kind"] == "backlog-drain-done")
    size_msgs = int(SIZE_GB * 2**30 // 1024)
    backlog = int(re.search(r"([\d,]+) messages", built["detail"]).group(1).replace(",", ""))
    assert size_msgs <= backlog <= size_msgs + 2 * RATE  # found within about a tick
    assert "drain to 1,000" in built["detail"]  # max(1,000, 10 % of 4,194)

    ticks = sorted(ds.dataset(out / "ticks", format="parquet").to_table().to_pylist(),
                   key=lambda t: t["seq"])
    measuring = [t for t in ticks if t["phase"] == "measuring"]
    build = [t for t in measuring if t["time"] <= built["time"]]
    # nothing read while the backlog builds (a read under way when they stopped aside)
    assert sum(t["consumed"] for t in build[1:]) == 0
    last = build[-1]
    assert last["produced_total"] - last["consumed_total"] == backlog
    drain = [t for t in measuring if built["time"] < t["time"] <= done["time"]]
    rate = sum(t["consumed"] for t in drain) / sum(t["interval_s"] for t in drain)
    shown_rate = float(re.search(r"([\d,]+) msg/s", done["detail"]).group(1).replace(",", ""))
    assert shown_rate == pytest.approx(rate, rel=0.01)
    assert rate > RATE  # the drain reads faster than the producers add
    meta = run_json(out)
    assert meta["workload"]["consumerBacklogSizeGB"] == pytest.approx(SIZE_GB)
    totals = meta["totals"][0]
    assert totals["drained"] and totals["consumed"] == totals["produced"]
