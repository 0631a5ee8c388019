"""Changes and faults are marked on the target's charts, at the column of their time."""

from __future__ import annotations

from tests.tui.recorded import recorded_tick
from tui.history import TargetHistory, mark_columns
from tui.panels import PANELS, RenderContext


def test_mark_columns_follow_the_charts_layout() -> None:
    times = [float(t) for t in range(10)]
    # 10 points in 20 slots: right-aligned, point i in slot 10 + i, two slots a column
    assert mark_columns(times, [0.0], 10) == {5}
    assert mark_columns(times, [9.0], 10) == {9}
    assert mark_columns(times, [4.5], 10) == {7}  # the first point at or after the mark
    assert mark_columns(times, [42.0, -5.0], 10) == set()  # outside the window
    many = [float(t) for t in range(100)]  # downsampled: 100 points into 20 slots
    assert mark_columns(many, [50.0], 10) == {5}


def test_a_fault_is_marked_on_every_chart() -> None:
    history = TargetHistory("redis")
    for seq in range(30):
        tick = recorded_tick("redis", seq)
        history.add(tick)
        if seq == 20:
            history.add_event("fault-pause", "redis (pid 1)", tick.time_ns)
            history.add_event("send-error", "not a change", tick.time_ns)
    text = PANELS["charts"].render(history, RenderContext(width=40, height=8)).plain
    rows = text.splitlines()
    charts = PANELS["charts"].CHARTED  # type: ignore[attr-defined]
    assert sum("┆" in row for row in rows) == len(charts)  # one mark per chart, top row
    assert len(history.marks) == 1  # the send error is not a change
