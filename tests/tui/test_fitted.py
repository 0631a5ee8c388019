"""The screen fitted to the run: charts over the run's planned length, fewer and taller charts
on a short terminal, the compare view's axis from zero, and figures and texts that read right
(units, ratios, ellipses, the rate in force, no "behind" for a load stopped on purpose)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from textual.app import App, ComposeResult
from textual.command import CommandPalette
from textual.widgets import Input

from loadgen.core.events import PhaseChange, RunEvent
from loadgen.core.ticks import Phase, Tick
from tests.tui.recorded import LABELS, T0_NS, TICKS, WORKLOAD, recorded_items, recorded_tick
from tests.tui.screen import screen_lines, wait_until
from tests.tui.test_snapshot import feed_recorded, live_app
from tui import formatting as fmt
from tui.app import REPAINT_S, DashboardApp, EventReceived, PhaseChanged, bus_message
from tui.compare import CompareScreen
from tui.control import RateScreen
from tui.history import HISTORY_WINDOW_S, ChartScale, ChartView, TargetHistory
from tui.keys import KEY_TABLE, REPLAY_KEY_TABLE, STEERING
from tui.launcher import LauncherScreen, LaunchSettings, PickScreen, Problem, describe_platform
from tui.logs import LogLines
from tui.panels import PANELS, ChartsPanel, RenderContext
from tui.replay import ReplayApp
from tui.session import SessionApp
from tui.widgets import HelpScreen

PLANNED_S = WORKLOAD.warmup_s + WORKLOAD.duration_s  # 70 s


# ---- the chart window ----------------------------------------------------------------------

def test_a_run_shorter_than_the_window_is_charted_whole_from_its_start_then_scrolls() -> None:
    history = TargetHistory("redis")
    view = ChartView({"redis": history}, planned_s=PLANNED_S)
    assert view.run_window and view.window_s == PLANNED_S and view.window_name() == "run 1:10"
    start_s = (T0_NS + 1_000_000_000) / 1e9 - 1.0  # the first tick covers the second before it
    for seq in range(100):
        tick = recorded_tick("redis", seq)
        history.add(tick)
        latest = tick.time_ns / 1e9
        start, end = view.span(76)
        if latest <= start_s + PLANNED_S:  # the whole run, from its start: it fills the chart
            assert (start, end) == pytest.approx((start_s, start_s + PLANNED_S)), seq
            assert view.anchored()
        else:  # longer than planned: the same length scrolls with the latest tick
            assert not view.anchored()
            assert end - start == pytest.approx(PLANNED_S) and latest <= end < latest + 1, seq
    # the window key goes on to the fixed windows and the whole run, then back
    names = []
    for _ in view.windows:
        view.cycle_window()
        names.append(view.window_name())
    assert names == ["1 min", "5 min", "whole run", "run 1:10"]
    # planned as long as the default window or longer, or not known: the five minutes
    for planned in (HISTORY_WINDOW_S, 3600.0, None):
        assert ChartView({"redis": history}, planned_s=planned).window_s == HISTORY_WINDOW_S


async def test_the_dashboard_charts_the_recorded_run_from_its_start() -> None:
    app = live_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await feed_recorded(app, pilot)
        lines = screen_lines(app)
        axis = next(line for line in lines if "run 1:10" in line and "╶" in line)
        assert axis.split()[1].startswith("0:00") and axis.rstrip("┃│ ").endswith("1:10")
        # 30 of 70 s: the produce chart's rows are filled in the left half, blank on the right
        produce = lines[lines.index(next(ln for ln in lines if "produce 5.0k" in ln)) + 1]
        cells = produce.split("┃")[1]
        assert cells[2:20].strip() and not cells[30:55].strip()


# ---- a short terminal: fewer charts, taller, and a key for the others -----------------------

def chart_heights(lines: list[str], captions: tuple[str, ...]) -> dict[str, int]:
    """Rows below each chart caption in the left column until the next caption or the events."""
    left = [line.split("┃")[1] if line.count("┃") >= 2 else "" for line in lines]
    starts = {name: i for i, text in enumerate(left) for name in captions
              if text.startswith(f" {name}") and "↑" in text}
    out = {}
    for name, i in starts.items():
        rows = 0
        for text in left[i + 1:]:
            if "↑" in text or text.startswith(" events") or not text:
                break
            rows += 1
        out[name] = rows
    return out


async def test_at_80x24_two_charts_of_three_rows_and_g_shows_the_other_two() -> None:
    app = live_app()
    titles = ("produce", "e2e p99", "lag", "cpu")
    async with app.run_test(size=(80, 24)) as pilot:
        await feed_recorded(app, pilot)
        lines = screen_lines(app)
        assert any("e2e 10s" in line for line in lines)  # the figures table stays
        first = chart_heights(lines, titles)
        assert set(first) == {"produce", "e2e p99"}
        assert all(rows >= ChartsPanel.MIN_ROWS for rows in first.values()), first
        assert any("g more" in line for line in lines)  # the column says there are others
        await pilot.press("g")
        await pilot.pause(REPAINT_S)
        second = chart_heights(screen_lines(app), titles)
        assert set(second) == {"lag", "cpu"}
        assert all(rows >= ChartsPanel.MIN_ROWS for rows in second.values()), second
        await pilot.press("g")
        await pilot.pause(REPAINT_S)
        assert set(chart_heights(screen_lines(app), titles)) == {"produce", "e2e p99"}
    app = live_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await feed_recorded(app, pilot)
        assert set(chart_heights(screen_lines(app), titles)) == set(titles)
        await pilot.press("g")  # every chart fits: nothing to cycle
        await pilot.pause(REPAINT_S)
        assert set(chart_heights(screen_lines(app), titles)) == set(titles)
        assert app.view.chart_page == 0


def test_the_chart_key_is_in_the_one_key_table_of_the_dashboard_and_the_replay() -> None:
    for table in (KEY_TABLE, REPLAY_KEY_TABLE):
        (key,) = [k for k in table if k.action == "next_charts"]
        assert key.keys == ("g",)


# ---- the compare view's axis -----------------------------------------------------------------

async def test_the_compare_view_draws_rates_and_lag_from_zero() -> None:
    app = live_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await feed_recorded(app, pilot)
        await pilot.press("v")
        await wait_until(pilot, lambda: isinstance(app.screen, CompareScreen), "the compare view")
        await pilot.pause()
        lines = screen_lines(app)
    throughput = next(line for line in lines if line.startswith(" throughput"))
    lag = next(line for line in lines if line.startswith(" lag msgs"))
    e2e = next(line for line in lines if line.startswith(" e2e p99"))
    assert throughput.split()[2] == "0–5.0k" and lag.split()[2] == "0–313"
    # the latency's axis spans its values, and says so in its unit
    low = min(min(h.series["e2e_p99"].values()) for h in app.histories.values())
    assert e2e.split()[2] == f"{fmt.short(low)}–21ms"


# ---- replay, the header, "behind" ------------------------------------------------------------

async def test_a_replay_sought_back_from_its_end_is_not_marked_final(recorded_dir: Path) -> None:
    from tui.bench.recording import load_recording

    app = ReplayApp(load_recording(recorded_dir), playing=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("end")
        await pilot.pause()
        assert screen_lines(app)[1].count("· final") == 2
        assert all(str(c.border_title).endswith("· final") for c in app._columns.values())
        await pilot.press("left")  # 10 s back: the figures are live again
        await pilot.pause()
        assert not any("final" in line for line in screen_lines(app))
        await pilot.press("end")
        await pilot.pause()
        assert all(c.border_title == f"{label} · final" for label, c in app._columns.items())


@pytest.fixture(scope="module")
def recorded_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recorded run as a run that ended writes it: its last phase is the writing of its
    files, after which the columns are marked final."""
    from analysis.sink import ParquetSink
    from loadgen.core.events import RunMeta

    run_dir = tmp_path_factory.mktemp("fitted") / "run"
    sink = ParquetSink(run_dir, "recorded", background=False)
    for item in [*recorded_items(),
                 PhaseChange(Phase.WRITING, T0_NS + (TICKS + 1) * 1_000_000_000,
                             "writing run files")]:
        sink(item)
    sink(RunMeta({"run_id": "recorded", "workload": WORKLOAD.to_omb(),
                  "targets": [{"label": label} for label in LABELS],
                  "ended": "2027-01-15T08:00:31+00:00", "stopped_early": False}))
    sink.close()
    return run_dir


def rate_changed_items(rate: float) -> list[Tick | PhaseChange | RunEvent]:
    """The recorded bus with redis's rate changed to `rate` from its 21st tick on."""
    items: list[Tick | PhaseChange | RunEvent] = []
    for item in recorded_items():
        if isinstance(item, Tick) and item.target == "redis" and item.seq >= 20:
            item = dataclasses.replace(item, target_rate=rate)
        items.append(item)
    return items


def post(app: DashboardApp, items: list[Tick | PhaseChange | RunEvent]) -> None:
    for item in items:
        message = bus_message(item)
        assert message is not None
        app.post_message(message)


async def test_the_header_shows_the_rate_in_force() -> None:
    app = DashboardApp(None, LABELS, WORKLOAD, clock=lambda: T0_NS)
    async with app.run_test(size=(120, 40)) as pilot:
        assert "5,000 msg/s" in screen_lines(app)[0]
        post(app, rate_changed_items(6250.0))
        await wait_until(pilot, lambda: app.histories["redis"].ticks == TICKS, "the ticks")
        await pilot.pause(REPAINT_S)
        assert "recorded · 5,000 / 6,250 msg/s · 1,024 B" in screen_lines(app)[0]
        assert app.status.rates == {"redis": 6250.0, "redis:aof": 5000.0}


def test_behind_is_not_said_of_producers_stopped_or_a_broker_paused() -> None:
    history = TargetHistory("redis:aof")
    for seq in range(26):
        history.add(recorded_tick("redis:aof", seq))
    assert history.last is not None and history.last.produce_rate / 5000 < 0.95

    def versus() -> str:
        text = PANELS["throughput"].render(history, RenderContext(width=60)).plain
        return text.splitlines()[1]

    assert versus().endswith("behind")
    history.add_event("producers", "running → stopped")
    assert versus().strip() == "producers stopped on purpose"
    history.add_event("producers", "stopped → running")
    assert versus().endswith("behind")
    history.add_event("fault-pause", "redis-1")
    assert versus().endswith("broker paused") and "behind" not in versus()
    history.add_event("fault-resume", "redis-1")
    assert versus().endswith("behind")
    history.add_event("fault-kill", "redis-1")
    assert versus().endswith("broker down")
    history.add_event("fault-start", "redis-1")
    assert versus().endswith("behind")


# ---- figures that read right -----------------------------------------------------------------

def test_milliseconds_past_a_thousand_read_as_seconds_never_as_kms() -> None:
    assert fmt.with_unit(6100, "ms") == "6.1s" and fmt.with_unit(950, "ms") == "950ms"
    assert fmt.span(9.1, 18, "ms") == "9.1–18ms"
    assert fmt.span(900, 6100, "ms") == "900ms–6.1s"
    assert fmt.span(1200, 6100, "ms") == "1.2–6.1s"
    assert fmt.span(4600, 5000, "/s") == "4.6k–5.0k/s"
    caption = ChartsPanel._caption(RenderContext(width=40), "e2e p99", "ms",
                                   ChartScale(900.0, 6100.0, 6100.0, True)).plain
    assert "900ms–6.1s" in caption and "↑6.1s all" in caption and "kms" not in caption
    assert fmt.latency(1234.0) == "1.23s" and fmt.latency(17.84) == "17.8ms"


def test_ratios_keep_their_significant_digits() -> None:
    assert fmt.ratio(0.0027) == "0.0027×"
    assert fmt.ratio(0.000123) == "0.00012×"
    assert fmt.ratio(0.5) == "0.50×" and fmt.ratio(1.234) == "1.23×" and fmt.ratio(0) == "0.00×"
    assert fmt.ratio(float("nan")) == fmt.MISSING


async def test_the_event_strip_cuts_a_long_event_with_an_ellipsis() -> None:
    app = live_app()
    detail = "paused the broker redis-server-1 (SIGSTOP to its process group 12345) for a while"
    async with app.run_test(size=(80, 24)) as pilot:
        await feed_recorded(app, pilot)
        app.post_message(EventReceived(RunEvent(T0_NS + 29_000_000_000, "redis", "fault-pause",
                                                detail)))
        await wait_until(pilot, lambda: "fault-pause" in screen_lines(app)[-2], "the event")
        strip = screen_lines(app)[-2]
        assert strip.endswith("…") and len(strip) == 80


class LogApp(App[None]):
    def compose(self) -> ComposeResult:
        yield LogLines(highlight=False)


async def test_a_log_line_wider_than_the_pane_ends_in_an_ellipsis() -> None:
    app = LogApp()
    async with app.run_test(size=(40, 6)) as pilot:
        log = app.query_one(LogLines)
        log.write_lines(["short line", "x" * 30 + " and the rest of a long line of the broker"])
        await pilot.pause()
        lines = screen_lines(app)
        assert lines[0] == "short line"
        assert lines[1].endswith("…") and lines[1].startswith("x" * 30)


async def test_the_rate_prompt_shows_all_of_its_words() -> None:
    app = live_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await feed_recorded(app, pilot)
        await pilot.press("r")
        await wait_until(pilot, lambda: isinstance(app.screen, RateScreen), "the rate prompt")
        await pilot.pause()
        text = "\n".join(screen_lines(app))
        assert "rate for redis in msg/s, or max (now 5000)" in text
        assert "Enter sets it, Esc cancels" in text


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_the_help_box_is_closed_by_its_border_at_either_size(size: tuple[int, int]) -> None:
    app = live_app()
    async with app.run_test(size=size) as pilot:
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), "the help")
        await pilot.pause()
        lines = screen_lines(app)
        top = next(i for i, line in enumerate(lines) if "╭─ keys" in line)
        bottom = next(i for i, line in enumerate(lines) if line.lstrip(" ┏┃┗").startswith("╰"))
        column = lines[top].index("╭")
        assert lines[bottom].index("╰") == column and bottom > top
        # every line of the table between the two (test_help checks each key's words)
        assert all(lines[i][column] == "│" for i in range(top + 1, bottom))


async def test_the_palettes_screenshot_is_the_x_keys(tmp_path: Path) -> None:
    app = live_app()
    app.run_dir = tmp_path
    async with app.run_test(size=(80, 24)) as pilot:
        await feed_recorded(app, pilot)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert [t for t in titles if t.lower() == "screenshot"] == ["screenshot"]
        await pilot.press("ctrl+p")
        await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette), "the palette")
        await pilot.press(*"screenshot")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await wait_until(pilot, lambda: bool(list(tmp_path.glob("screenshot-*.svg"))),
                         "the screenshot")
        (shot,) = tmp_path.glob("screenshot-*.svg")
        assert app.status.message == f"screenshot: {shot}"
        assert "redis:aof" in shot.read_text()


async def test_after_the_run_the_footer_and_palette_offer_no_run_controls() -> None:
    app = live_app()
    steering = [k for k in KEY_TABLE if k.steers]
    assert {k.action.partition("(")[0] for k in steering} == STEERING
    async with app.run_test(size=(120, 40)) as pilot:
        await feed_recorded(app, pilot)
        footer = screen_lines(app)[-1]
        assert "r rate" in footer and "s producers" in footer and "f fault" in footer
        app.post_message(PhaseChanged(PhaseChange(Phase.WRITING, T0_NS + 31_000_000_000,
                                                  "writing run files")))
        await wait_until(pilot, lambda: "r rate" not in screen_lines(app)[-1], "the footer")
        footer = screen_lines(app)[-1]
        assert not any(f"{k.shown[0]} {k.label}" in footer for k in steering if k.footer)
        assert "q stop" in footer and "? help" in footer
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert not titles & {k.label for k in steering} and "help" in titles
        await pilot.press("s")  # the key does nothing any more
        await pilot.pause()
        assert app.producing == dict.fromkeys(LABELS, True)


# ---- the launcher ----------------------------------------------------------------------------

def test_the_launcher_offers_no_option_that_is_always_refused() -> None:
    from loadgen.platforms import PLATFORMS

    for name, platform in PLATFORMS.items():
        offered = describe_platform(name).split("options: ", 1)[1].split(", ")
        refused = {opt for opt, spec in platform.options.items() if spec.refuse}
        assert not refused & {o.partition("=")[0] for o in offered}, name
        if "password_file" in platform.options:
            assert "password" in refused and "password_file" in offered


def shown_problems(app: SessionApp) -> list[str]:
    return [str(p.render()) for p in app.screen.query(Problem) if p.has_class("-shown")]


async def test_a_picked_platform_is_kept_as_options_are_typed_after_it() -> None:
    app = SessionApp(LaunchSettings())
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, LauncherScreen), "the launcher")
        await pilot.press("ctrl+t")
        await wait_until(pilot, lambda: isinstance(app.screen, PickScreen), "the platforms")
        assert isinstance(app.screen, PickScreen)
        picked = app.screen.items[0][0]
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, LauncherScreen)
                         and app.screen._target_inputs()[0].has_focus, "the target field")
        await pilot.pause()
        await pilot.press(*":runtime=local")
        await pilot.pause()
        launcher = app.screen
        assert isinstance(launcher, LauncherScreen)
        assert launcher._target_inputs()[0].value == f"{picked}:runtime=local"


async def test_a_fields_error_goes_once_the_field_is_right() -> None:
    app = SessionApp(LaunchSettings())
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, LauncherScreen), "the launcher")
        rate = app.screen.query_one("#opt-rate", Input)
        rate.focus()
        await pilot.press(*"fast-ish", "tab")
        await wait_until(pilot, lambda: bool(shown_problems(app)), "the error")
        assert shown_problems(app) == ["✗ argument --rate: expected a number, got 'fast-ish'"]
        rate.focus()
        await pilot.pause()
        await pilot.press(*["backspace"] * len("fast-ish"), *"500")
        await wait_until(pilot, lambda: not shown_problems(app), "the error to go")
        assert rate.has_focus and rate.value == "500"  # without leaving the field
