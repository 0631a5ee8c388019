"""OMB's backlog phase on a real broker: consumers stopped at the start of the measuring phase
until the backlog reaches consumerBacklogSizeGB, then the drain timed to OMB's threshold; the
events' figures checked against the run's own ticks."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tests.conftest import run_cli, run_json

pytestmark = pytest.mark.integration

SIZE_GB = 0.004  # 4,194 messages of 1 KiB
RATE = 1500


def _workload(tmp_path: Path, extra: str = "") -> str:
    path = tmp_path / "backlog.yaml"
    path.write_text(f"name: backlog\nproducerRate: {RATE}\nmessageSize: 1024\n"
                    f"testDurationSeconds: 12\nwarmupDurationSeconds: 1\n"
                    f"consumerBacklogSizeGB: {SIZE_GB}\nbacklogDrainRatio: 0.9\n{extra}")
    return str(path)


def test_backlog_is_built_then_drained_on_redis(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = run_cli(["run", "redis", "--workload", _workload(tmp_path), "--headless",
                   "--out", str(out)], timeout_s=180)
    assert res.returncode == 0, res.stderr[-3000:]
    events = sorted(ds.dataset(out / "events", format="parquet").to_table().to_pylist(),
                    key=lambda e: e["time"])
    kinds = [e["kind"] for e in events if e["kind"] in
             ("consumers", "backlog-built", "backlog-drain-done")]
    assert kinds == ["consumers", "backlog-built", "consumers", "backlog-drain-done"]
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


@pytest.mark.parametrize(("args", "fragment"), [
    (["--max-rate"], "consumerBacklogSizeGB needs a fixed producerRate"),
])
def test_backlog_input_errors(tmp_path: Path, args: list[str], fragment: str) -> None:
    res = run_cli(["run", "redis", "--workload", _workload(tmp_path), "--headless",
                   "--out", str(tmp_path / "run"), *args])
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and fragment in res.stderr
    assert not (tmp_path / "run").exists()


def test_a_backlog_larger_than_memory_is_refused_before_anything_starts(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text(f"producerRate: {RATE}\nconsumerBacklogSizeGB: 1000000\n")
    res = run_cli(["run", "redis", "--workload", str(big), "--headless", "--out", str(tmp_path / "run")])
    assert res.returncode == 2
    assert "does not fit in the" in res.stderr and res.stderr.strip().count("\n") == 0
    assert not (tmp_path / "run").exists()

