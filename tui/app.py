"""The live dashboard: a subscriber of the run's bus that shows each target side by side.

The run loop and the app share one asyncio loop. The bus callback only wraps each item in a
typed message and posts it; the message handlers update the per-target histories and the
widgets. Pausing stops the repaint of the columns, never the collection.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import ClassVar

from textual.app import App, ComposeResult, SystemCommand
from textual.await_complete import AwaitComplete
from textual.binding import BindingType
from textual.command import CommandPalette
from textual.driver import Driver
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.timer import Timer
from textual.widgets import Footer

from loadgen.core.brokermetrics import BrokerMetrics
from loadgen.core.errors import StreambenchError
from loadgen.core.events import PhaseChange, RunEvent
from loadgen.core.interventions import Intervention, first_names
from loadgen.core.ticks import Phase, Tick
from loadgen.core.workload import Workload
from loadgen.platforms import PLATFORMS
from loadgen.run import BusItem, Run, RunSummary
from tui.compare import CompareScreen
from tui.control import EventStrip, FaultScreen, RateScreen
from tui.detail import DetailScreen
from tui.driver import quiet_driver_class
from tui.history import METRICS, Baseline, ChartView, TargetHistory
from tui.keys import BINDINGS, KEY_TABLE, STEERING, Key
from tui.logs import LogScreen
from tui.metadata import MetadataScreen, RunDescription, live_description
from tui.panels import ChartsPanel
from tui.widgets import (
    LOAD_PHASES,
    HelpScreen,
    RunStatus,
    StatusBar,
    TargetColumn,
    TargetColumns,
)

AfterRun = Callable[[RunSummary], Awaitable[str | None]]
# what `run_async()` / `run()` return: the summary of a finished run, the user-facing error
# that ended it, or None when the app was quit without a run
DashboardResult = RunSummary | StreambenchError | None
REPAINT_S = 0.25  # the columns repaint at most four times a second
# once the run has ended, the columns say their figures are final, not live
FINAL_PHASES = (Phase.WRITING, Phase.REPORT, Phase.DONE)
FINAL_MARK = " · final"
# an app that ends during a run waits this long for the run's own cleanup (load processes
# stopped, brokers down: a Kafka or Pulsar broker takes seconds to stop)
CLOSE_WAIT_S = 90.0
GATHER_S = 0.05  # a repaint waits this long for the other targets' ticks of the same second
# palette entries of Textual's that the key table replaces
_REPLACED_COMMANDS = {"Quit", "Keys", "Screenshot"}


@dataclass
class TickReceived(Message):
    tick: Tick


@dataclass
class PhaseChanged(Message):
    change: PhaseChange


@dataclass
class EventReceived(Message):
    event: RunEvent


@dataclass
class ReportProgress(Message):
    """A line of the report's progress, posted from the report's thread."""

    text: str


def bus_message(item: BusItem) -> Message | None:
    """The message for a bus item; None for items the dashboard does not show."""
    if isinstance(item, Tick):
        return TickReceived(item)
    if isinstance(item, PhaseChange):
        return PhaseChanged(item)
    if isinstance(item, RunEvent):
        return EventReceived(item)
    return None


class DashboardApp(App[DashboardResult]):
    """Live view of a Run. With `run=None` it shows only the messages posted to it."""

    CSS_PATH = Path(__file__).with_name("streambench.tcss")  # also for subclasses elsewhere
    TITLE = "streambench"
    BINDINGS: ClassVar[list[BindingType]] = list(BINDINGS)
    KEYS: ClassVar[tuple[Key, ...]] = KEY_TABLE  # what the help screen and the palette list

    def __init__(self, run: Run | None, labels: list[str], workload: Workload,
                 after_run: AfterRun | None = None, *,
                 clock: Callable[[], int] = time.time_ns,
                 baselines: dict[str, Baseline] | None = None) -> None:
        super().__init__()
        self.clock = clock  # wall clock in ns, for the length of the waiting phases
        self._events = EventStrip(id="events")
        self._last_repaint = -math.inf  # monotonic time of the last repaint of the columns
        self._repaint_pending = False
        self._repaint_timer: Timer | None = None
        self._ticked: set[str] = set()  # the targets whose ticks came since the last repaint
        self._status_timer: Timer | None = None
        self._set_run(run, labels, workload, after_run, baselines)
        self._status_bar = self._make_status_bar(clock)

    def get_driver_class(self) -> type[Driver]:
        return quiet_driver_class(super().get_driver_class())

    def _set_run(self, run: Run | None, labels: list[str], workload: Workload,
                 after_run: AfterRun | None, baselines: dict[str, Baseline] | None) -> None:
        """What the dashboard shows and steers: one run's targets, from their first tick."""
        self.bench = run
        self.after_run = after_run
        self.histories = {label: TargetHistory(label) for label in labels}
        self._ticked = set()
        self.view = ChartView(self.histories, planned_s=workload.warmup_s + workload.duration_s)
        self.status = RunStatus(workload)
        self.summary: RunSummary | None = None
        self._executing: Run | None = None  # the run whose execute() is under way
        self.report_path: str | None = None
        self.run_dir: Path | None = run.run_dir if run is not None else None  # for screenshots
        self._columns = {label: TargetColumn(h, self.view) for label, h in self.histories.items()}
        self.view.baselines = dict(baselines or {})
        for label, baseline in self.view.baselines.items():  # the ghost series' source
            self._columns[label].border_title = f"{label} vs {baseline.name}"
        self._events.clear()
        self.labels = list(labels)
        self.selected = 0  # the column the control keys act on
        self.all_targets = False  # … or every column
        self.producing = dict.fromkeys(labels, True)
        self.consuming = dict.fromkeys(labels, True)
        self.fixed_rate = {label: workload.rate for label in labels}  # for the max-rate toggle
        if self.is_running:  # a new run of a session: its controls are offered again
            self.refresh_bindings()

    def _make_status_bar(self, clock: Callable[[], int]) -> StatusBar:
        return StatusBar(self.status, clock, id="status")

    # ---- layout -------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield self._status_bar
        with TargetColumns(id="columns"):
            yield from self._columns.values()
        yield self._events
        yield Footer()

    def on_mount(self) -> None:
        self._mark_selected()
        if self.console.color_system in ("standard", "windows"):
            self.theme = "ansi-dark"  # 8/16-colour terminal: the theme of native ANSI colours
        self._status_clock()
        if self.bench is not None:
            self.bench.subscribe(self._forward)
            self.run_worker(self._execute(), name="run", group="run")

    # ---- the run ------------------------------------------------------------------------

    def _forward(self, item: BusItem) -> None:
        message = bus_message(item)
        if message is not None:
            self.post_message(message)

    async def _execute(self) -> None:
        assert self.bench is not None
        self._executing = self.bench
        try:
            summary = await self.bench.execute()
        except StreambenchError as exc:
            self.run_ended(exc)
            return
        finally:
            self._executing = None
        self.summary = summary
        self.refresh_bindings()
        if self.after_run is not None:
            self.post_message(PhaseChanged(PhaseChange(Phase.REPORT, self.clock(),
                                                       "writing the report")))
            try:
                self.report_path = await self.after_run(summary)
            except StreambenchError as exc:
                self.run_ended(exc)
                return
            done = f"report: {self.report_path}" if self.report_path else "no report written"
            self.post_message(PhaseChanged(PhaseChange(Phase.DONE, self.clock(), done)))
        self.run_ended(summary)

    def run_ended(self, result: RunSummary | StreambenchError) -> None:
        """The run is over (its summary) or could not go on (the error a user can act on)."""
        self.exit(result)

    async def on_unmount(self) -> None:
        """The app ends while its run goes on (an error in the interface, or a caller that
        leaves early): Textual has cancelled the run's worker without waiting for it. The
        run's own cleanup (load processes stopped, brokers down, files closed, run.json
        marked as cut short) runs to its end before the event loop does; otherwise the
        process would wait forever on its load processes at exit, with the brokers up."""
        run = self._executing
        if run is not None and not run.finished.is_set():
            await asyncio.to_thread(run.finished.wait, CLOSE_WAIT_S)

    # ---- bus messages -------------------------------------------------------------------

    def on_tick_received(self, message: TickReceived) -> None:
        with self.batch_update():
            if self._take_tick(message.tick) and not self.status.paused:
                # the window ends at the latest tick: every column's x axis moves with it
                self._ticked.add(message.tick.target)
                if (self._ticked.issuperset(self.histories)
                        and time.monotonic() >= self._last_repaint + REPAINT_S):
                    self._repaint_columns()  # every target's tick is in: no wait
                else:
                    self._request_repaint()
            if not self._repaint_pending:  # else the repaint shows it: one screen update
                self._show_status()

    def on_phase_changed(self, message: PhaseChanged) -> None:
        with self.batch_update():
            self._take_phase(message.change)
            self._status_clock()
            self._show_status()

    def _status_clock(self) -> None:
        """The status bar's one-second timer runs in the phases whose time only the clock
        gives (starting, draining, writing, …); in the load phases every tick moves the bar.
        (Each wake-up of an idle process costs CPU of its own.)"""
        needed = self.status.phase not in LOAD_PHASES
        if needed and self._status_timer is None:
            self._status_timer = self.set_interval(1.0, self._show_status)
        elif not needed and self._status_timer is not None:
            self._status_timer.stop()
            self._status_timer = None

    def on_event_received(self, message: EventReceived) -> None:
        with self.batch_update():
            target = self._take_event(message.event)
            self._events.refresh()
            if target is not None and not self.status.paused:
                self._request_repaint()
            self._show_status()

    # the data side of the three messages, without repaint (a replay catching up uses these)

    def _take_tick(self, tick: Tick, summarise: bool = True,
                   values: Sequence[float] | None = None) -> bool:
        history = self.histories.get(tick.target)
        if history is None:
            return False
        history.add(tick, summarise=summarise, values=values)
        self.status.elapsed_s = max(self.status.elapsed_s, tick.elapsed_s)
        self.status.rates[tick.target] = tick.target_rate
        return True

    def _take_phase(self, change: PhaseChange) -> None:
        if change.phase is not self.status.phase or self.status.phase_since_ns is None:
            self.status.phase_since_ns = change.time_ns
        self.status.phase = change.phase
        self.status.message = change.message
        self._mark_final(change.phase in FINAL_PHASES)
        if change.phase in FINAL_PHASES:
            self.refresh_bindings()  # the footer no longer offers the run's controls

    def _mark_final(self, final: bool) -> None:
        """The columns' titles say whether their figures are the run's last (no tick comes
        any more) or live; a replay going back in time takes the mark away again."""
        for label, column in self._columns.items():
            title = (column.border_title or label).removesuffix(FINAL_MARK)
            column.border_title = f"{title}{FINAL_MARK}" if final else title

    def report_progress(self, message: str) -> None:
        """A line of the report's progress (its step, Spark's stages and tasks), shown in the
        status bar while the report is written; from the report's thread, post a
        ReportProgress message instead."""
        if self.status.phase is Phase.REPORT:
            self.status.message = f"writing the report: {message}"
            self._show_status()

    def on_report_progress(self, message: ReportProgress) -> None:
        self.report_progress(message.text)

    def _take_event(self, event: RunEvent) -> str | None:
        """Keep the event; the target it belongs to, None for a run-wide event."""
        self._events.add(event, repaint=False)
        history = self.histories.get(event.target)
        if history is None:  # a run-wide event
            self.status.message = f"{event.kind}: {event.detail}"
            return None
        history.add_event(event.kind, event.detail, event.time_ns)
        return event.target

    def _request_repaint(self) -> None:
        """Repaint the columns shortly (GATHER_S: the ticks of every target of a second arrive
        within it, and cost one repaint) and never sooner than REPAINT_S after the last one."""
        if self._repaint_pending:
            return
        wait = max(GATHER_S, self._last_repaint + REPAINT_S - time.monotonic())
        self._repaint_pending = True
        self._repaint_timer = self.set_timer(wait, self._repaint_later)

    def _repaint_later(self) -> None:
        self._repaint_pending = False
        self._repaint_timer = None
        if not self.status.paused:
            self._repaint_columns()

    def _repaint_columns(self) -> None:
        if self._repaint_timer is not None:  # a repaint now stands for the one planned
            self._repaint_timer.stop()
            self._repaint_timer = None
        self._repaint_pending = False
        self._ticked.clear()
        self._last_repaint = time.monotonic()
        if self._columns_in_sight():
            for column in self._columns.values():
                column.show()
            self._show_status()
        # (a timer may fire while the app closes, with no screen left)
        if self.screen_stack and isinstance(self.screen_stack[-1], DetailScreen | CompareScreen):
            self.screen_stack[-1].show()

    def _columns_in_sight(self) -> bool:
        """Whether the columns can be seen: not while a screen of its own (the detail, the
        compare view, …) covers them; a modal one (help) lets them show through."""
        if not self.screen_stack:
            return False
        top = self.screen_stack[-1]
        return top is self.screen_stack[0] or isinstance(top, ModalScreen)

    def pop_screen(self) -> AwaitComplete:
        done = super().pop_screen()
        # the columns were not drawn while covered: they are, as soon as they show again
        self.call_later(self._show_columns_again)
        return done

    def _show_columns_again(self) -> None:
        if not self._columns_in_sight():
            return
        self._status_bar.refresh()
        if not self.status.paused:
            for column in self._columns.values():
                column.show()

    # ---- actions (the key table in tui/keys.py names them) -------------------------------

    def action_stop(self) -> None:
        if self.bench is None:
            self.exit(None)
        elif self.summary is not None:
            self.exit(self.summary)  # the run is over; do not wait for the report
        else:
            self.status.stop_requests += 1
            self.bench.request_stop()
            self._show_status()

    async def action_quit(self) -> None:
        """Textual's own quit (its palette entry) ends the run like `q` does."""
        self.action_stop()

    def action_toggle_pause(self) -> None:
        self.status.paused = not self.status.paused
        with self.batch_update():
            if not self.status.paused:
                self._repaint_columns()
            self._show_status()

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            self.pop_screen()
        else:
            self.push_screen(HelpScreen(self.KEYS))

    def action_close(self) -> None:
        if isinstance(self.screen, HelpScreen | DetailScreen | CompareScreen | MetadataScreen
                      | LogScreen):
            self.pop_screen()

    def run_description(self) -> RunDescription:
        """The run as run.json describes it, as far as it is known now."""
        return live_description(self.bench)

    def action_metadata(self) -> None:
        if isinstance(self.screen, MetadataScreen):
            self.pop_screen()  # i again closes
        else:
            self.push_screen(MetadataScreen(self.run_description, self.labels,
                                            live=self.bench is not None))

    def action_logs(self) -> None:
        if isinstance(self.screen, LogScreen):
            self.pop_screen()  # l again closes
            return
        self.push_screen(LogScreen(self.labels[self.selected], self.run_description))

    def action_compare(self) -> None:
        if isinstance(self.screen, CompareScreen):
            self.pop_screen()
            return
        if isinstance(self.screen, HelpScreen | DetailScreen):
            self.pop_screen()
        self.push_screen(CompareScreen(self.view))

    def action_detail(self) -> None:
        if isinstance(self.screen, DetailScreen):
            return
        if isinstance(self.screen, HelpScreen):
            self.pop_screen()
        label = self.labels[self.selected]
        self.push_screen(DetailScreen(self.histories[label], self.view, self.keys_hint(),
                                      self._broker_metrics_of(label)))

    def _broker_metrics_of(self, label: str) -> BrokerMetrics | None:
        """The broker metrics the target's platform declares (None when it declares none or
        the run does not say which platform it is)."""
        for t in self.run_description().get("targets") or []:
            if isinstance(t, dict) and t.get("label") == label:
                platform = PLATFORMS.get(str(t.get("platform", "")))
                return platform.broker_metrics if platform is not None else None
        return None

    def keys_hint(self) -> str:
        return "esc back · o/O sort · w window · x screenshot · ? help"

    def action_sort(self) -> None:
        if isinstance(self.screen, DetailScreen):
            self.screen.next_sort()

    def action_sort_consumers(self) -> None:
        if isinstance(self.screen, DetailScreen):
            self.screen.next_consumer_sort()

    def action_cycle_window(self) -> None:
        self.view.cycle_window()
        self.notify(f"chart window: {self.view.window_name()}", timeout=2)
        self._repaint_columns()

    def action_next_charts(self) -> None:
        """The next charts in a column too short for all of them."""
        column = self._columns[self.labels[self.selected]]
        if len(column.charts_shown()) == len(ChartsPanel.CHARTED):
            self.notify("every chart is shown", timeout=2)
            return
        self.view.chart_page += 1
        names = ", ".join(METRICS[name].title for name in column.charts_shown())
        self.notify(f"charts: {names}", timeout=2)
        self._repaint_columns()

    def action_toggle_scale(self) -> None:
        label = self.labels[self.selected]
        self.view.toggle_own_scale(label)
        own = label in self.view.own_scale
        self.notify(f"{label}: {'its own y scale' if own else 'y scale shared with the others'}",
                    timeout=2)
        self._repaint_columns()

    def action_save_screen(self) -> None:
        """An SVG of the screen as it is, into the run directory; the path in the status line."""
        directory = self.run_dir if self.run_dir is not None else Path.cwd()
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        name, n = f"screenshot-{stamp}.svg", 1
        while (directory / name).exists():  # twice in one second: -2, -3 …
            n += 1
            name = f"screenshot-{stamp}-{n}.svg"
        try:
            path = self.save_screenshot(name, str(directory))
        except OSError as exc:
            self.notify(f"no screenshot: {exc.strerror or exc}", severity="error")
            return
        self.status.message = f"screenshot: {path}"
        self.notify(f"screenshot: {path}", timeout=6)  # in full, where the status line is short
        self._show_status()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if isinstance(self.screen, LogScreen):  # its filter takes the keys it needs
            return self.screen.allows(action, parameters)
        if action in STEERING and self.run_over:
            return False  # nothing to steer: not in the footer, the key does nothing
        if action == "close":
            # escape is a priority key: let it through to other screens (the command palette)
            return isinstance(self.screen, HelpScreen | DetailScreen | CompareScreen
                              | MetadataScreen)
        # in a dialog its own keys (typing a rate) come first
        # (and Enter picks a command in the palette)
        return not isinstance(self.screen, RateScreen | FaultScreen | CommandPalette)

    # ---- steering the run ---------------------------------------------------------------

    @property
    def run_over(self) -> bool:
        """Whether the run has ended (its files are written, or being written)."""
        return self.summary is not None or self.status.phase in FINAL_PHASES

    @property
    def scope(self) -> list[str]:
        """The targets the control keys act on."""
        return list(self.labels) if self.all_targets else self.labels[self.selected:self.selected + 1]

    def _mark_selected(self) -> None:
        for i, label in enumerate(self.labels):
            column = self._columns[label]
            column.set_class(self.all_targets or i == self.selected, "-selected")
        if self.labels:
            self.status.scope = "all targets" if self.all_targets else self.labels[self.selected]
        self._show_status()

    def action_select(self, direction: int) -> None:
        self.selected = (self.selected + direction) % len(self.labels)
        self._mark_selected()
        self._columns[self.labels[self.selected]].scroll_visible(animate=False)

    def action_toggle_scope(self) -> None:
        self.all_targets = not self.all_targets
        self._mark_selected()

    def _intervene(self, items: list[Intervention]) -> None:
        """Hand the interventions to the run; a refusal is shown, never raised."""
        if self.bench is None:
            self.notify("no run to steer", severity="warning")
            return
        run = self.bench

        async def carry_out() -> None:
            for item in items:
                try:
                    await run.intervene(item)
                except StreambenchError as exc:
                    self.notify(str(exc), severity="error", timeout=8)

        self.run_worker(carry_out(), group="control")

    def _current_rate(self, label: str) -> float:
        return self.bench.rates[label] if self.bench is not None else self.fixed_rate[label]

    def action_scale_rate(self, factor: float) -> None:
        items = []
        for label in self.scope:
            rate = self._current_rate(label)
            if rate <= 0:
                self.notify(f"{label} runs at maximum rate: m goes back to a fixed rate",
                            severity="warning")
                continue
            items.append(Intervention("rate", label, rate=max(1.0, round(rate * factor, 3))))
            self.fixed_rate[label] = items[-1].rate or rate
        self._intervene(items)

    def action_ask_rate(self) -> None:
        scope = self.scope
        name = "all targets" if self.all_targets else scope[0]

        def chosen(rate: float | None) -> None:
            if rate is None:
                return
            for label in scope:
                if rate > 0:
                    self.fixed_rate[label] = rate
            self._intervene([Intervention("rate", label, rate=rate) for label in scope])

        self.push_screen(RateScreen(name, self._current_rate(scope[0])), chosen)

    def action_toggle_max_rate(self) -> None:
        items = []
        for label in self.scope:
            at_max = self._current_rate(label) <= 0
            rate = self.fixed_rate[label] if at_max else 0.0
            if at_max and rate <= 0:
                self.notify(f"{label} has no fixed rate to go back to: r sets one", severity="warning")
                continue
            items.append(Intervention("rate", label, rate=rate))
        self._intervene(items)

    def action_toggle_producers(self) -> None:
        self._switch("producers", self.producing)

    def action_toggle_consumers(self) -> None:
        self._switch("consumers", self.consuming)

    def _switch(self, what: str, state: dict[str, bool]) -> None:
        items = []
        for label in self.scope:
            state[label] = not state[label]
            items.append(Intervention(what, label, state="start" if state[label] else "stop"))
        self._intervene(items)

    def action_fault(self) -> None:
        if self.bench is None:
            self.notify("no run to steer", severity="warning")
            return
        brokers = [name for label in self.scope
                   for name in first_names(self.bench.brokers.get(label, {}))]
        proxied = [label for label in self.scope if "partition" in self.bench.faults.get(label, ())]
        if not brokers and not proxied:
            self.notify("no broker to inject a fault into: an existing cluster has none here",
                        severity="warning")
            return

        def chosen(item: Intervention | None) -> None:
            if item is not None:
                self._intervene([item])

        self.push_screen(FaultScreen(brokers, proxied), chosen)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        for command in super().get_system_commands(screen):
            if command.title not in _REPLACED_COMMANDS:
                yield command
        for key in self.KEYS:
            if key.action != "close" and not (key.steers and self.run_over):
                yield SystemCommand(key.label, key.help, partial(self.run_action, key.action))

    # ---- repaint ------------------------------------------------------------------------

    def _show_status(self) -> None:
        # not while a screen of its own covers it: Textual repaints the whole of the screen
        # on top for any change to the one below (it may show through); caught up on return
        if self._columns_in_sight():
            self._status_bar.show()
