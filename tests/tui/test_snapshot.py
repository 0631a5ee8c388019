"""The dashboard at 80×24 drawn from fixed recorded data, compared with a committed SVG.

Regenerate after an intended change with UPDATE_SNAPSHOTS=1 and review the new file."""

from __future__ import annotations

import os
from pathlib import Path

from tests.tui.recorded import LABELS, T0_NS, TICKS, WORKLOAD, recorded_items
from tests.tui.screen import wait_until
from tui.app import DashboardApp, bus_message

SNAPSHOTS = Path(__file__).parent / "snapshots"


async def render_recorded(size: tuple[int, int]) -> str:
    # the clock only matters for the waiting phases; pinned so any phase renders the same
    app = DashboardApp(None, LABELS, WORKLOAD, clock=lambda: T0_NS + (TICKS + 1) * 1_000_000_000)
    async with app.run_test(size=size) as pilot:
        for item in recorded_items():
            message = bus_message(item)
            assert message is not None
            app.post_message(message)
        await wait_until(pilot, lambda: all(h.ticks == TICKS for h in app.histories.values()),
                         "the recorded ticks")
        await pilot.wait_for_scheduled_animations()
        return app.export_screenshot(title="streambench")


def check_snapshot(name: str, svg: str, tmp_path: Path) -> None:
    path = SNAPSHOTS / name
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(svg, encoding="utf-8")
        return
    if not path.exists():
        raise AssertionError(f"no snapshot {path}; create it with UPDATE_SNAPSHOTS=1 and review it")
    if path.read_text(encoding="utf-8") != svg:
        actual = tmp_path / name
        actual.write_text(svg, encoding="utf-8")
        raise AssertionError(f"the dashboard differs from {path}; the new rendering is {actual}. "
                             "If the change is intended, rerun with UPDATE_SNAPSHOTS=1")


async def test_dashboard_80x24_matches_snapshot(tmp_path: Path) -> None:
    check_snapshot("dashboard_80x24.svg", await render_recorded((80, 24)), tmp_path)


async def test_rendering_is_deterministic() -> None:
    assert await render_recorded((80, 24)) == await render_recorded((80, 24))
