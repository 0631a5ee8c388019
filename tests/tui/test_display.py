"""Dashboard behaviour on recorded data: pausing stops the repaint but not the collection,
and a panel that fails shows its error in place."""

from __future__ import annotations

import dataclasses
import math
import re
import time
import types
from typing import Any

import numpy as np
import pytest
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Region
from textual.widget import Widget

from loadgen.core.events import PhaseChange
from loadgen.core.ticks import Phase, Tick
from loadgen.status import status_line
from tests.tui.recorded import LABELS, TICKS, WORKLOAD, recorded_items, recorded_tick
from tests.tui.screen import screen_lines, wait_until
from tui.app import REPAINT_S, DashboardApp, PhaseChanged, bus_message
from tui.detail import DetailScreen
from tui.history import TargetHistory
from tui.panels import PANELS, RenderContext
from tui.widgets import LOAD_PHASES, PanelView, RichLines, RunStatus, StatusBar, _row_segments


def post_all(app: DashboardApp, items: list) -> None:
    for item in items:
        message = bus_message(item)
        assert message is not None
        app.post_message(message)


async def post_second_by_second(app: DashboardApp, pilot: Any, items: list, posted: int,
                                seqs: range) -> int:
    """Posts each second's ticks (from items[posted:]) and lets the app repaint before the
    next second's; returns how many items are posted then."""
    for seq in seqs:
        last = max(i for i, item in enumerate(items) if getattr(item, "seq", -1) == seq)
        post_all(app, items[posted:last + 1])
        posted = last + 1
        await wait_until(pilot, lambda s=seq: app.histories["redis:aof"].ticks > s,
                         f"tick {seq}")
        await pilot.pause(REPAINT_S)
    return posted


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


def test_headless_line_gives_the_generators_delay_behind_its_schedule_when_paced() -> None:
    tick = recorded_tick("redis", 12)  # publish delays 5-24 µs, 5,000 msg/s target
    line = status_line(tick)
    found = re.search(r"\| pub p99 [0-9.]+ delay p99 ([0-9.]+) \|", line)
    assert found is not None, line
    raw_ms = np.array([5 + i % 20 for i in range(100)]) / 1000
    assert math.isclose(float(found.group(1)), float(np.percentile(raw_ms, 99)), rel_tol=0.05)
    # at maximum rate there is no schedule to be late for
    assert "delay" not in status_line(dataclasses.replace(tick, target_rate=0.0))


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


async def test_line_repaints_leave_the_screen_a_full_repaint_would_draw() -> None:
    """Panels repaint only their changed lines tick by tick; after many such repaints, every
    panel's lines (text and styles) equal what drawing the panel afresh gives, and the screen
    is the one a full repaint of every panel shows."""
    items = recorded_items()
    app = DashboardApp(None, LABELS, WORKLOAD)
    async with app.run_test(size=(120, 40)) as pilot:
        posted = await post_second_by_second(app, pilot, items, 0, range(TICKS))
        post_all(app, items[posted:])
        await pilot.pause(REPAINT_S)
        views = list(app.query(PanelView))
        assert views
        partial_lines = sum(len(view._strips) for view in views)
        incremental = [[(strip.text, list(strip)) for strip in view._strips] for view in views]
        before = screen_lines(app)[1:]  # the status bar (line 0) follows the clock
        for view in views:
            view._draw_all(view.content_size, view._role_styles())
        afresh = [[(strip.text, list(strip)) for strip in view._strips] for view in views]
        assert incremental == afresh
        for view in views:
            view.refresh()
        await pilot.pause(REPAINT_S)
        assert screen_lines(app)[1:] == before
        assert partial_lines > 20


async def test_panel_lines_take_the_short_path_and_come_out_as_rich_draws_them() -> None:
    """Every line of every panel over a recorded run is cut into segments without Rich's
    general rendering, and the segments (text and style over the widget's) are the ones
    Rich's path gives; a text the short path does not take (overlapping spans, a style by
    name, a style of its own) goes the general way."""
    items = recorded_items()
    app = DashboardApp(None, LABELS, WORKLOAD)

    def general(row: Text, base: Style) -> list[Segment]:
        return [Segment(part.text, base + part.style if part.style else base)
                for part in row.render(app.console) if part.text]

    async with app.run_test(size=(120, 40)) as pilot:
        post_all(app, items)
        await wait_until(pilot, lambda: app.histories["redis"].ticks == TICKS, "all ticks")
        await pilot.pause(REPAINT_S)
        checked = 0
        for view in app.query(PanelView):
            base = view.visual_style.rich_style
            for row in view._rows(view.content_size, view._role_styles()):
                row.truncate(view.content_size.width, overflow="ellipsis")
                assert _row_segments(row, base) == general(row, base), row.plain
                checked += 1
        assert checked > 60
        base = Style(bgcolor="red")
        overlapping = Text("abcdef")
        overlapping.stylize(Style(bold=True), 0, 4)
        overlapping.stylize(Style(italic=True), 2, 6)
        named = Text("abc", style="")
        named.append("def", "bold")
        own = Text("abc", style=Style(dim=True))
        own.append("def", Style(bold=True))
        for text in (overlapping, named, own):
            assert _row_segments(text, base) is None
        assert _row_segments(Text(""), base) == general(Text(""), base) == []
        gaps = Text("ab")
        gaps.append("cd", Style(bold=True))
        gaps.append("ef")
        gaps.append("", Style(italic=True))
        assert _row_segments(gaps, base) == general(gaps, base)


@pytest.mark.parametrize("width", [120, 24])
async def test_status_bar_draws_what_textuals_general_path_draws(width: int) -> None:
    """The status bar's line, drawn as a panel's line is, has the cells (characters and
    styles) that Textual's own drawing of its text gives, running and paused; on a narrow
    terminal it is cut with an ellipsis, as its text says (Textual's drawing wraps it at a
    word and shows the first line): the cells before the cut are the same."""
    def cells(strips: list) -> list[tuple[str, Any]]:
        return [(ch, segment.style) for strip in strips for segment in strip
                for ch in segment.text]

    app = DashboardApp(None, LABELS, WORKLOAD)
    async with app.run_test(size=(width, 30)) as pilot:
        post_all(app, recorded_items()[:200])
        await pilot.pause(REPAINT_S)
        bar = app._status_bar
        for paused in (False, True):
            bar.status.paused = paused
            crop = Region(0, 0, bar.size.width, 1)
            bar._styles_cache.clear()
            short = cells(bar._styles_cache.render_widget(bar, crop))
            bar.render_line = types.MethodType(Widget.render_line, bar)  # Textual's own
            bar.refresh()  # (its lines are drawn again from the text)
            bar._styles_cache.clear()
            general = cells(bar._styles_cache.render_widget(bar, crop))
            del bar.render_line
            assert len(short) == len(general) == width
            if width >= 80:
                assert short == general
            else:
                assert short[-1][0] == "…"
                shown = min(len("".join(c for c, _ in general).rstrip()), width - 1)
                assert short[:shown] == general[:shown]


async def test_columns_left_undrawn_under_the_detail_screen_catch_up_on_return() -> None:
    """While the detail screen covers the columns and the status bar they are not drawn (their
    cost is saved); back on the dashboard they show the latest tick at once, not the one
    before the detail screen opened."""
    items = recorded_items()
    cut = next(i for i, item in enumerate(items) if getattr(item, "seq", 0) == 20)
    app = DashboardApp(None, LABELS, WORKLOAD)
    async with app.run_test(size=(120, 40)) as pilot:
        post_all(app, items[:cut])
        await wait_until(pilot, lambda: app.histories["redis"].ticks == 20, "20 ticks")
        await pilot.pause(REPAINT_S)
        before = produce_line(app)
        status_before = screen_lines(app)[0]
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, DetailScreen), "the detail screen")
        # nor is the status bar: Textual would repaint all of the detail screen for it
        bar_refreshes = []
        bar_refresh = app._status_bar.refresh
        app._status_bar.refresh = lambda *a, **k: bar_refreshes.append(a) or bar_refresh(*a, **k)
        post_all(app, items[cut:])
        await wait_until(pilot, lambda: app.histories["redis"].ticks == TICKS, "all ticks")
        await pilot.pause(REPAINT_S)
        assert not bar_refreshes
        views = [view for view in app.query(PanelView) if view.panel.name == "throughput"]
        drawn = [list(view._keys) for view in views]
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, DetailScreen), "the dashboard")
        await pilot.pause()
        assert [list(view._keys) for view in views] != drawn  # drawn again on the way back
        assert bar_refreshes and screen_lines(app)[0] != status_before
        assert produce_line(app) != before
        assert "4,597/s" in produce_line(app)  # the last recorded tick of redis:aof


async def test_detail_screen_repaints_by_line_and_ends_as_a_fresh_drawing() -> None:
    """The detail screen follows the ticks by repainting the lines that changed; after many
    such repaints its lines (text and styles) equal a fresh rendering of its body, the screen
    is the one a full layout and repaint shows, and the figures are the last tick's."""
    items = recorded_items()
    app = DashboardApp(None, LABELS, WORKLOAD)
    async with app.run_test(size=(120, 40)) as pilot:
        first = max(i for i, item in enumerate(items) if getattr(item, "seq", -1) == 2)
        post_all(app, items[:first + 1])
        await wait_until(pilot, lambda: app.histories["redis"].ticks > 2, "3 ticks")
        await pilot.press("tab", "enter")
        await wait_until(pilot, lambda: isinstance(app.screen, DetailScreen), "the detail screen")
        detail = app.screen
        assert isinstance(detail, DetailScreen)
        body = detail.query_one("#detail-body", RichLines)
        await pilot.pause(REPAINT_S)
        early = list(body._strips)
        repaints: list[tuple[int, bool]] = []  # (lines, whether laid out again) per refresh
        refresh = body.refresh

        def counted(*regions, **kwargs):
            repaints.append((len(regions), bool(kwargs.get("layout"))))
            return refresh(*regions, **kwargs)

        body.refresh = counted  # type: ignore[method-assign]
        await post_second_by_second(app, pilot, items, first + 1, range(3, TICKS))
        await pilot.pause(REPAINT_S)
        body.refresh = refresh  # type: ignore[method-assign]
        assert detail.history.label == "redis:aof"
        # each tick repainted some lines, none laid the screen out again or repainted it all
        assert len(repaints) >= (TICKS - 3) // 2, repaints
        assert all(0 < lines < len(body._strips) and not layout for lines, layout in repaints)
        incremental = [(strip.text, list(strip)) for strip in body._strips]
        assert incremental != [(strip.text, list(strip)) for strip in early]
        before = screen_lines(app)[1:]
        body._rendered = None
        afresh = [(strip.text, list(strip)) for strip in body._lines(body.content_size.width)]
        assert incremental == afresh
        body.refresh(layout=True)
        await pilot.pause(REPAINT_S)
        assert screen_lines(app)[1:] == before


async def test_panel_styles_follow_the_theme_the_ansi_rules_and_no_color() -> None:
    """The panels keep their roles' styles between repaints, worked out again when what the
    CSS selects on changes: the ANSI theme (its `App:ansi` rules) and back."""
    app = DashboardApp(None, LABELS, WORKLOAD)
    async with app.run_test(size=(80, 24)) as pilot:
        post_all(app, recorded_items())
        await wait_until(pilot, lambda: app.histories["redis"].ticks == TICKS, "all ticks")
        await pilot.pause(REPAINT_S)
        panel = app.query(PanelView).first()
        app.theme = "textual-dark"  # (a test console has 16 colours: the app chose ANSI)
        await pilot.pause()
        truecolor = panel._role_styles()
        assert panel._role_styles() is truecolor  # kept while nothing changed
        assert not truecolor["chart"].color.is_system_defined
        app.theme = "ansi-dark"
        await pilot.pause()
        ansi = panel._role_styles()
        # `App:ansi PanelView > .panel--chart`: the chart in the terminal's own cyan
        assert ansi["chart"].color.is_system_defined and ansi["chart"].color.number == 6, ansi
        app.theme = "textual-dark"
        await pilot.pause()
        assert panel._role_styles() == truecolor


async def test_a_second_of_ticks_costs_one_repaint_and_wakes_no_timer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Once every target's tick of a second is in, the columns and the status bar repaint at
    once, without waiting for the gathering timer (which is stopped: every wake-up costs the
    process CPU); in the load phases the status bar's one-second clock is stopped too (the
    ticks move the bar), and it runs again in a phase that has no ticks."""
    items = recorded_items()
    app = DashboardApp(None, LABELS, WORKLOAD)
    gather_s = 5.0  # the gathering timer would not fire within the test by itself
    async with app.run_test(size=(120, 40)) as pilot:
        assert app._status_timer is not None  # starting: the clock counts the phase's time
        first = max(i for i, item in enumerate(items) if getattr(item, "seq", -1) == 2)
        post_all(app, items[:first + 1])
        await wait_until(pilot, lambda: app.histories["redis:aof"].ticks > 2, "3 ticks")
        assert app.status.phase in LOAD_PHASES and app._status_timer is None
        await pilot.pause(REPAINT_S * 2)  # the next repaint may come at once
        monkeypatch.setattr("tui.app.GATHER_S", gather_s)
        late: list[bool] = []
        repaint_later = app._repaint_later
        app._repaint_later = lambda: late.append(True) or repaint_later()  # type: ignore[method-assign]
        before = produce_line(app)
        ticks = [item for item in items if isinstance(item, Tick) and item.seq == 3]
        assert [t.target for t in ticks] == LABELS
        post_all(app, ticks[:1])
        await wait_until(pilot, lambda: app.histories["redis"].ticks > 3, "redis's tick")
        assert app._repaint_pending  # waiting for the other target's tick
        post_all(app, ticks[1:])
        await wait_until(pilot, lambda: app.histories["redis:aof"].ticks > 3, "the other tick")
        assert not app._repaint_pending and app._repaint_timer is None
        assert not late  # the repaint came with the last tick, not from the timer
        assert produce_line(app) != before
        app.post_message(PhaseChanged(PhaseChange(Phase.DRAINING, time.time_ns(), "")))
        await wait_until(pilot, lambda: app.status.phase is Phase.DRAINING, "the drain")
        assert app._status_timer is not None
