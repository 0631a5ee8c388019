"""Dashboard behaviour on recorded data: pausing stops the repaint but not the collection,
and a panel that fails shows its error in place."""

from __future__ import annotations

import pytest
from rich.text import Text

from loadgen.tick import Phase
from tests.tui.recorded import LABELS, TICKS, WORKLOAD, recorded_items
from tests.tui.screen import screen_lines, wait_until
from tui.app import REPAINT_S, DashboardApp, bus_message
from tui.history import TargetHistory
from tui.panels import PANELS, RenderContext
from tui.widgets import RunStatus, StatusBar


def post_all(app: DashboardApp, items: list) -> None:
    for item in items:
        message = bus_message(item)
        assert message is not None
        app.post_message(message)


def produce_line(app: DashboardApp) -> str:
    return next(line for line in screen_lines(app) if "produce" in line)


async def test_pause_keeps_collecting_and_resume_shows_everything() -> None:
    items = recorded_items()
    cut = next(i for i, item in enumerate(items) if getattr(item, "seq", 0) == 20)
    app = DashboardApp(None, LABELS, WORKLOAD)
    async with app.run_test(size=(80, 24)) as pilot:
        post_all(app, items[:cut])
        await wait_until(pilot, lambda: app.histories["redis"].ticks == 20, "20 ticks")
        await pilot.pause(REPAINT_S)  # the last repaint may wait for the repaint period
        before = produce_line(app)
        await pilot.press("p")
        post_all(app, items[cut:])
        await wait_until(pilot, lambda: app.histories["redis"].ticks == TICKS, "all ticks")
        await pilot.pause()
        assert "PAUSED" in screen_lines(app)[0]
        assert produce_line(app) == before  # the display is frozen …
        assert len(app.histories["redis:aof"].series["produce_rate"]) == TICKS  # … not the data
        await pilot.press("p")
        await pilot.pause()
        assert "PAUSED" not in screen_lines(app)[0]
        assert "4,597/s" in produce_line(app)  # the last recorded tick of redis:aof


class BrokenPanel:
    name = "throughput"

    def render(self, history: TargetHistory, ctx: RenderContext) -> Text:
        raise ZeroDivisionError("no interval")


async def test_a_failing_panel_shows_its_error_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(PANELS, "throughput", BrokenPanel())
    app = DashboardApp(None, LABELS, WORKLOAD)
    async with app.run_test(size=(80, 24)) as pilot:
        post_all(app, recorded_items())
        await wait_until(pilot, lambda: app.histories["redis"].ticks == TICKS, "all ticks")
        await pilot.pause()
        text = "\n".join(screen_lines(app))
        assert "throughput cannot be shown:" in text
        assert "ZeroDivisionError: no interval" in text
        assert "p99.9" in text  # the other panels still render
        assert app.is_running


def test_status_line_follows_the_phases_with_a_pinned_clock() -> None:
    now = 1_000_000_000_000
    status = RunStatus(WORKLOAD, phase_since_ns=now - 3_000_000_000, message="starting brokers")
    bar = StatusBar(status, clock=lambda: now)
    assert bar._progress() == "0:03 · starting brokers"
    status.phase, status.message, status.elapsed_s = Phase.MEASURING, "", 30.0
    assert bar._progress() == "0:30 / 1:10 · 0:40 left"
    status.stop_requests = 1
    assert bar._progress() == "0:30 / 1:10 · stopping (q again: skip the drain)"
    status.phase, status.phase_since_ns = Phase.DRAINING, now - 2_000_000_000
    status.message = "waiting for consumers to catch up"
    assert bar._progress() == "0:02 · waiting for consumers to catch up · q skips the drain"
    status.stop_requests = 2
    assert bar._progress() == "0:02 · waiting for consumers to catch up"
