"""The screens drawn from fixed recorded data, compared with committed SVG snapshots
(pytest-textual-snapshot): the live dashboard, a replay and the detail screen, at 80×24 and
120×40.

After an intended change: `pytest tests/tui/test_snapshot.py --snapshot-update`, then review
the new files under __snapshots__/ (a failing run writes an HTML report of the differences)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from textual.containers import VerticalScroll
from textual.pilot import Pilot

from tests.tui.recorded import (
    LABELS,
    STALE_TICKS,
    T0_NS,
    TICKS,
    WORKLOAD,
    recorded_items,
    write_recorded_run,
)
from tests.tui.screen import wait_until
from tui.app import REPAINT_S, DashboardApp, bus_message
from tui.bench.recording import load_recording
from tui.detail import DetailScreen
from tui.replay import ReplayApp

SIZES = [(80, 24), (120, 40)]


def live_app() -> DashboardApp:
    # the clock only matters for the waiting phases; pinned so any phase renders the same
    return DashboardApp(None, LABELS, WORKLOAD, clock=lambda: T0_NS + (TICKS + 1) * 1_000_000_000)


async def feed_recorded(app: DashboardApp, pilot: Pilot) -> None:
    for item in recorded_items():
        message = bus_message(item)
        assert message is not None
        app.post_message(message)
    await wait_until(pilot, lambda: all(h.ticks == TICKS for h in app.histories.values()),
                     "the recorded ticks")
    await pilot.pause(REPAINT_S)  # the last repaint may wait for the repaint period
    await pilot.wait_for_scheduled_animations()


@pytest.fixture(scope="module")
def recorded_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_recorded_run(tmp_path_factory.mktemp("snap") / "run")


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_dashboard(snap_compare, size: tuple[int, int]) -> None:
    app = live_app()

    async def before(pilot: Pilot) -> None:
        await feed_recorded(app, pilot)

    assert snap_compare(app, terminal_size=size, run_before=before)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_replay_at_the_rate_change(snap_compare, recorded_dir: Path, size: tuple[int, int]) -> None:
    app = ReplayApp(load_recording(recorded_dir), playing=False)

    async def before(pilot: Pilot) -> None:
        app.seek_to(T0_NS + 24 * 1_000_000_000)
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=before)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_detail_screen(snap_compare, recorded_dir: Path, size: tuple[int, int]) -> None:
    app = ReplayApp(load_recording(recorded_dir), playing=False)

    async def before(pilot: Pilot) -> None:
        await pilot.press("end", "tab", "enter")
        await wait_until(pilot, lambda: isinstance(app.screen, DetailScreen), "the detail")
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=before)


@pytest.fixture(scope="module")
def redis_recorded_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recorded run with its targets' platform in run.json, as a real run has it."""
    run_dir = write_recorded_run(tmp_path_factory.mktemp("snap-redis") / "run")
    meta = json.loads((run_dir / "run.json").read_text())
    for target in meta["targets"]:
        target["platform"] = "redis"
    (run_dir / "run.json").write_text(json.dumps(meta))
    return run_dir


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_detail_broker_metrics(snap_compare, redis_recorded_dir: Path,
                               size: tuple[int, int]) -> None:
    """The broker metrics panel of the aof target while its server does not answer (stale,
    its last values), scrolled into view: the broker's own names and a sparkline of the
    server's time per XADD."""
    app = ReplayApp(load_recording(redis_recorded_dir), playing=False)

    async def before(pilot: Pilot) -> None:
        app.seek_to(T0_NS + (STALE_TICKS.start + 2) * 1_000_000_000)
        await pilot.press("tab", "enter")
        await wait_until(pilot, lambda: isinstance(app.screen, DetailScreen), "the detail")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, DetailScreen)
        lines = app.console.render_lines(screen.body(), app.console.options.update_width(
            size[0] - 2), pad=False)
        at = next(i for i, line in enumerate(lines)
                  if "".join(seg.text for seg in line).startswith("broker metrics"))
        app.screen.query_one("#detail", VerticalScroll).scroll_to(y=at, animate=False)
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=before)


async def test_rendering_is_deterministic() -> None:
    async def render() -> str:
        app = live_app()
        async with app.run_test(size=(80, 24)) as pilot:
            await feed_recorded(app, pilot)
            return app.export_screenshot(title="streambench")

    assert await render() == await render()
