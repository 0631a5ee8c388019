"""Changes and faults are marked on the target's charts, at the column of their time."""

from __future__ import annotations

from tests.tui.recorded import recorded_tick
from tui.history import TargetHistory, mark_columns
from tui.panels import PANELS, RenderContext


def test_mark_columns_follow_the_time_axis() -> None:
    # 10 cells over (0, 20]: two slots of 1 s a cell, slot k covers (k, k + 1]
    assert mark_columns([0.5], 0.0, 20.0, 10) == {0}
    assert mark_columns([2.5], 0.0, 20.0, 10) == {1}
    assert mark_columns([20.0], 0.0, 20.0, 10) == {9}  # "now" is the right edge
    assert mark_columns([19.5, 4.0], 0.0, 20.0, 10) == {9, 1}
    assert mark_columns([42.0, -5.0], 0.0, 20.0, 10) == set()  # outside the window
    # a five-minute window on 10 cells: 15 s a slot
    assert mark_columns([150.0], 0.0, 300.0, 10) == {4}


def test_a_fault_is_marked_on_every_chart() -> None:
    history = TargetHistory("redis")
    for seq in range(30):
        tick = recorded_tick("redis", seq)
        history.add(tick)
        if seq == 20:
            history.add_event("fault-pause", "redis (pid 1)", tick.time_ns)
            history.add_event("send-error", "not a change", tick.time_ns)
    text = PANELS["charts"].render(history, RenderContext(width=40, height=16)).plain
    rows = text.splitlines()
    charts = PANELS["charts"].CHARTED  # type: ignore[attr-defined]
    assert sum("┆" in row for row in rows) == len(charts)  # one mark per chart, top row
    assert len(history.marks) == 1  # the send error is not a change
