"""The compare view: every target overlaid on one chart per metric, told apart by glyphs; the
lag also in seconds behind. The chart function alone, the view over the recorded run, and its
snapshots at 80×24 and 120×40."""

from __future__ import annotations

import math

import pytest
from textual.pilot import Pilot

from tests.tui.recorded import LABELS, recorded_tick
from tests.tui.screen import screen_lines, wait_until
from tests.tui.test_snapshot import SIZES, feed_recorded, live_app
from tui.charts import OVERLAP, overlay_chart
from tui.compare import CompareScreen, glyph
from tui.history import METRICS


def test_each_series_has_its_glyph_at_its_level() -> None:
    rows = overlay_chart([[0, 5, 10], [10, 5, math.nan]], ["●", "×"], 4, 3, 0, 10)
    assert rows == [" × ●",  # the newest point at the right edge
                    "  " + OVERLAP + " ",  # both at 5: one cell for several
                    " ●  "]
    assert overlay_chart([[3, 3]], ["●"], 2, 3, 3, 3) == ["  ", "●●", "  "]  # a flat series


def test_lag_in_seconds_is_the_lag_over_the_consume_rate() -> None:
    tick = recorded_tick(LABELS[1], 12)
    assert tick.lag is not None
    assert METRICS["lag_s"].read(tick) == pytest.approx(tick.lag.total / tick.consume_rate)


async def test_v_opens_and_closes_the_compare_view() -> None:
    app = live_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await feed_recorded(app, pilot)
        await pilot.press("v")
        await wait_until(pilot, lambda: isinstance(app.screen, CompareScreen), "the compare view")
        await pilot.pause()
        lines = screen_lines(app)
        assert lines[1].split() == [glyph(0), LABELS[0], glyph(1), LABELS[1], OVERLAP, "several"]
        captions = [line.split()[0] for line in lines if line.startswith(" ") and
                    line.split()[0] in ("throughput", "lag", "e2e")]
        assert captions == ["throughput", "lag", "e2e"]
        lag = next(line for line in lines if line.startswith(" lag msgs"))
        last = {label: app.histories[label].series["lag_s"].values()[-1] for label in LABELS}
        # redis has the exact time lag and its status word, redis:aof only the estimate
        assert f"{glyph(0)} 113 = {last[LABELS[0]]:.3f} s OK" in lag
        assert f"{glyph(1)} 313 = ~{last[LABELS[1]]:.3f} s est." in lag
        # each target's glyph is drawn on the charts
        body = "\n".join(lines[2:-1])
        assert body.count(glyph(0)) > 10 and body.count(glyph(1)) > 10
        await pilot.press("v")
        await wait_until(pilot, lambda: not isinstance(app.screen, CompareScreen), "closed again")
        await pilot.press("v", "escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, CompareScreen), "esc closes it")


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_compare_view(snap_compare, size: tuple[int, int]) -> None:
    app = live_app()

    async def before(pilot: Pilot) -> None:
        await feed_recorded(app, pilot)
        await pilot.press("v")
        await wait_until(pilot, lambda: isinstance(app.screen, CompareScreen), "the compare view")
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=before)
