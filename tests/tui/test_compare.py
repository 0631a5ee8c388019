"""The compare view: every target overlaid on one chart per metric, told apart by glyphs; the
lag also in seconds behind. The chart function alone, the view over the recorded run, and its
snapshots at 80×24 and 120×40."""

from __future__ import annotations

import dataclasses
import math

import pytest
from textual.pilot import Pilot

from loadgen.core.ticks import BrokerMetricValues
from tests.tui.recorded import LABELS, recorded_tick
from tests.tui.screen import screen_lines, wait_until
from tests.tui.test_snapshot import SIZES, feed_recorded, live_app
from tui.charts import OVERLAP, overlay_chart
from tui.compare import (
    CompareScreen,
    broker_metric_lines,
    glyph,
    shared_broker_metrics,
    target_metric,
)
from tui.history import METRICS, TargetHistory


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


def _history(label: str, values: dict[str, dict[str, float]]) -> TargetHistory:
    tick = dataclasses.replace(recorded_tick(LABELS[0], 12), target=label,
                               broker_metrics=BrokerMetricValues(values, (), ""))
    history = TargetHistory(label)
    history.add(tick)
    return history


def test_the_broker_metrics_both_sides_have_side_by_side() -> None:
    """A NATS target beside a Pulsar one: only the names both declare (the messages in per
    second, the messages delivered and not acknowledged), each side's figure in the targets'
    order; a target of several brokers sums a rate and takes the worst latency; a target
    without broker metrics leaves the table out."""
    nats = _history("nats", {"nats": {"in_messages_per_second": 2000.0,
                                      "ack_pending_messages": 12.0, "pending_messages": 3.0}})
    pulsar = _history("pulsar", {"a": {"in_messages_per_second": 600.0, "ack_pending_messages": 4.0,
                                       "storage_write_latency_seconds": 0.002},
                                 "b": {"in_messages_per_second": 400.0, "ack_pending_messages": 1.0,
                                       "storage_write_latency_seconds": 0.005}})
    shared = shared_broker_metrics([nats, pulsar])
    assert shared == [("ack_pending_messages", [12.0, 5.0]),
                      ("in_messages_per_second", [2000.0, 1000.0])]
    assert target_metric([0.002, 0.005], "seconds") == 0.005
    assert broker_metric_lines(shared, 80, 2) == [
        f"ack_pending_messages {glyph(0)} 12 {glyph(1)} 5 │ "
        f"in_messages_per_second {glyph(0)} 2,000/s {glyph(1)} 1,000/s"]
    lines = broker_metric_lines(shared, 40, 1)
    assert len(lines) == 1 and lines[0].endswith("… 1 more (detail: Enter)"), lines
    assert shared_broker_metrics([nats, _history("plain", {})]) == []
    assert shared_broker_metrics([nats]) == []
