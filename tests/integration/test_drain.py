"""The drain after a consumer restart on a real broker (local redis-server), with the producers
running at 1,000 and 10,000 msg/s: the `backlog-drained` event's figures checked against the
run's own ticks, the drain's end to the tick."""

from __future__ import annotations

from pathlib import Path

import pyarrow.dataset as ds
import pytest

from analysis.events import parse_backlog
from loadgen.recovery import DRAIN_HOLD_S, LEVEL_TICKS
from tests.conftest import run_cli

pytestmark = pytest.mark.integration

STOP_S, START_S = 2.5, 6.5  # off the tick boundaries: the drain time has a fraction


def _table(run_dir: Path, name: str, order: str) -> list[dict]:
    rows = ds.dataset(run_dir / name, format="parquet").to_table().to_pylist()
    return sorted(rows, key=lambda r: r[order])


@pytest.mark.parametrize("rate", [1_000, 10_000])
def test_backlog_drained_to_the_tick_of_the_lag_series(tmp_path: Path, rate: int,
                                                       no_leftover_redis) -> None:
    run_dir = tmp_path / "run"
    res = run_cli(["run", "redis", "--headless", "--rate", str(rate), "--warmup", "1",
                   "--duration", "12", "--out", str(run_dir),
                   "--at", f"{STOP_S:g}s:consumers=stop", "--at", f"{START_S:g}s:consumers=start"],
                  timeout_s=180)
    assert res.returncode == 0, res.stderr[-3000:]
    events = _table(run_dir, "events", "time")
    ticks = [t for t in _table(run_dir, "ticks", "seq") if t["lag_total"] is not None]
    stop, start = [e for e in events if e["kind"] == "consumers"]
    assert (stop["detail"], start["detail"]) == ("running → stopped", "stopped → running")
    (drained,) = [e for e in events if e["kind"] == "backlog-drained"]

    # the rule, on the ticks as written: the lag back within its level before the stop (the
    # highest of the last readings then) or the tick's production, for DRAIN_HOLD_S on
    level = max(t["lag_total"] for t in [t for t in ticks if t["time"] < stop["time"]][-LEVEL_TICKS:])
    after = [t for t in ticks if t["time"] > start["time"]]
    back = [i for i, t in enumerate(after) if t["lag_total"] <= max(level, t["produced"])]
    first = next(i for i in back
                 if all(j in back for j in range(i, len(after))
                        if (after[j]["time"] - after[i]["time"]).total_seconds() <= DRAIN_HOLD_S))
    end = after[first]
    took = (end["time"] - start["time"]).total_seconds()
    consumed = sum(t["consumed"] for t in after[:first + 1])
    before = [t for t in ticks if t["time"] <= start["time"]][-1]
    peak = max([before["lag_total"]] + [t["lag_total"] for t in after[:first + 1]])

    figures = parse_backlog(drained["detail"])
    assert figures.drained_in_s == pytest.approx(took, abs=0.051), (drained["detail"], end)
    assert figures.rate == pytest.approx(consumed / took, rel=0.01, abs=1), drained["detail"]
    assert figures.backlog == peak, drained["detail"]
    # a backlog of the stopped seconds' production, read within a few ticks at either rate,
    # said once the hold is over
    stopped_s = (start["time"] - stop["time"]).total_seconds()
    assert peak >= 0.8 * rate * stopped_s, peak
    assert took < 3.0, drained["detail"]
    assert (drained["time"] - end["time"]).total_seconds() == pytest.approx(DRAIN_HOLD_S, abs=0.5)
    assert f"backlog of {peak:,} drained in {took:.1f} s after the consumers resumed: " \
        in drained["detail"] and drained["detail"].endswith(" msg/s consumed meanwhile")
