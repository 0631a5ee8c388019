"""Snapshots of the screen fitted to the run, from the recorded data at 80×24 and 120×40: the
other charts of a short column (after `g`), the end of a run whose rate was changed and whose
producers were stopped (the header's rate, no "behind", a long event cut with an ellipsis, the
footer without the run's controls, the columns marked final), the help box and the rate prompt.

After an intended change: `pytest tests/tui/test_fitted_snapshot.py --snapshot-update`, then
review the new files under __snapshots__/."""

from __future__ import annotations

import pytest
from textual.pilot import Pilot

from loadgen.core.events import PhaseChange, RunEvent
from loadgen.core.ticks import Phase
from tests.tui.recorded import T0_NS, TICKS
from tests.tui.screen import screen_lines, wait_until
from tests.tui.test_fitted import post, rate_changed_items
from tests.tui.test_snapshot import SIZES, feed_recorded, live_app
from tui.app import REPAINT_S
from tui.control import RateScreen
from tui.widgets import HelpScreen


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_other_charts(snap_compare, size: tuple[int, int]) -> None:
    app = live_app()

    async def before(pilot: Pilot) -> None:
        await feed_recorded(app, pilot)
        await pilot.press("g")
        await pilot.pause(REPAINT_S)
        app.clear_notifications()  # (the toast naming the charts shown)
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=before)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_end_of_a_steered_run(snap_compare, size: tuple[int, int]) -> None:
    app = live_app()
    end_ns = T0_NS + (TICKS + 1) * 1_000_000_000

    async def before(pilot: Pilot) -> None:
        items = rate_changed_items(6250.0)
        # redis:aof's producers stopped on purpose before its last ticks (which are short)
        cut = next(i for i, item in enumerate(items) if getattr(item, "seq", -1) == 25)
        items.insert(cut, RunEvent(T0_NS + 25_500_000_000, "redis:aof", "producers",
                                   "running → stopped"))
        items += [RunEvent(end_ns - 500_000_000, "redis", "fault-pause",
                           "paused the broker redis-server-1 (SIGSTOP to its process group "
                           "12345) and every one of its threads"),
                  PhaseChange(Phase.WRITING, end_ns, "writing run files")]
        post(app, items)
        await wait_until(pilot, lambda: app.run_over and "r rate" not in (
            screen_lines(app) or ["r rate"])[-1], "the run's end")
        await pilot.pause(REPAINT_S)
        await pilot.wait_for_scheduled_animations()

    assert snap_compare(app, terminal_size=size, run_before=before)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_help_box(snap_compare, size: tuple[int, int]) -> None:
    app = live_app()

    async def before(pilot: Pilot) -> None:
        await feed_recorded(app, pilot)
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), "the help")
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=before)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_rate_prompt(snap_compare, size: tuple[int, int]) -> None:
    app = live_app()

    async def before(pilot: Pilot) -> None:
        await feed_recorded(app, pilot)
        await pilot.press("r")
        await wait_until(pilot, lambda: isinstance(app.screen, RateScreen), "the rate prompt")
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=before)
