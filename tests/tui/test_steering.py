"""The dashboard steering a real run against a local redis-server: the keys raise the rate,
stop and start the consumers, pause the broker for 2 s and resume it; the run files hold each
change as an event at its time, the backlog drains, and the pause shows in the latencies."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from textual.widgets import Input, OptionList

from analysis.sink import ParquetSink
from loadgen.core.target import unique_labels
from loadgen.core.ticks import Phase
from loadgen.core.workload import Workload
from loadgen.platforms import resolve_target
from loadgen.run import Run, RunSummary
from tests.tui.screen import screen_lines, wait_until
from tui.app import DashboardApp
from tui.control import FaultScreen, RateScreen

WORKLOAD = Workload(name="steering", rate=1000, duration_s=16, warmup_s=1, message_size=100)


async def _hold(pilot, seconds: float) -> None:
    await asyncio.sleep(seconds)
    await pilot.pause()


@pytest.mark.integration
async def test_keys_steer_a_live_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run = Run(WORKLOAD, unique_labels([resolve_target("redis:runtime=local")]), out_dir=run_dir,
              recorder=ParquetSink)
    app = DashboardApp(run, run.labels, run.workload)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: app.status.phase is Phase.MEASURING, "measuring", 60)
        await pilot.press("plus")  # 1,000 → 1,250 msg/s
        await wait_until(pilot, lambda: run.rates[run.labels[0]] == 1250, "the new rate")
        await pilot.press("r")  # typed: 'm' and 'a' go to the box, not to the key table
        await wait_until(pilot, lambda: isinstance(app.screen, RateScreen), "the rate dialog")
        await pilot.press(*"ma", "backspace", "backspace")
        assert not app.all_targets
        app.screen.query_one(Input).value = "1500"
        await pilot.press("enter")
        await wait_until(pilot, lambda: run.rates[run.labels[0]] == 1500, "the typed rate")
        await pilot.press("c")  # consumers stop: a backlog builds
        await _hold(pilot, 2)
        await pilot.press("c")
        await _hold(pilot, 2)
        await pilot.press("f")
        await wait_until(pilot, lambda: isinstance(app.screen, FaultScreen), "the fault menu")
        options = app.screen.query_one(OptionList)
        assert "pause" in str(options.get_option_at_index(0).prompt)
        await pilot.press("enter")  # pause redis
        await _hold(pilot, 2)
        await pilot.press("f")
        await wait_until(pilot, lambda: isinstance(app.screen, FaultScreen), "the fault menu")
        await pilot.press("down", "enter")  # resume redis
        await wait_until(pilot, lambda: not isinstance(app.screen, FaultScreen), "the menu to close")
        strip = "\n".join(screen_lines(app))
        assert "fault-" in strip or "rate" in strip
        await wait_until(pilot, lambda: not app.is_running, "the run to end", 90)

    summary = app.return_value
    assert isinstance(summary, RunSummary) and not summary.stopped_early
    events = sorted(ds.dataset(run_dir / "events", format="parquet").to_table().to_pylist(),
                    key=lambda e: e["time"])
    steered = [(e["kind"], e["detail"]) for e in events
               if e["kind"] in ("rate", "consumers", "fault-pause", "fault-resume")]
    kinds = [k for k, _ in steered]
    assert kinds == ["rate", "rate", "consumers", "consumers", "fault-pause", "fault-resume"], steered
    assert steered[0][1] == "1,000 msg/s → 1,250 msg/s"
    assert steered[1][1] == "1,250 msg/s → 1,500 msg/s"
    at = {e["kind"]: e["time"] for e in events}
    pause = next(e["time"] for e in events if e["kind"] == "fault-pause")
    resume = next(e["time"] for e in events if e["kind"] == "fault-resume")
    assert 1.8 <= (resume - pause).total_seconds() <= 3.5
    assert "backlog-drained" in at
    totals = summary.targets[0]
    assert totals.drained and totals.consumed == totals.produced
    ticks = sorted(ds.dataset(run_dir / "ticks", format="parquet").to_table().to_pylist(),
                   key=lambda t: t["seq"])
    after_resume = [t for t in ticks if t["time"] >= resume and t["e2e_count"]]
    before_pause = [t for t in ticks if t["time"] < pause and t["e2e_count"] and t["phase"] == "measuring"]
    # the messages the paused broker held waited the pause out; before it latencies were low
    assert after_resume[0]["e2e_p999"] >= 1.5e9 or after_resume[1]["e2e_p999"] >= 1.5e9
    assert max(t["e2e_p999"] for t in before_pause if t["time"] < at["consumers"]) < 0.5e9
