"""The live dashboard: a subscriber of the run's bus that shows each target side by side.

The run loop and the app share one asyncio loop. The bus callback only wraps each item in a
typed message and posts it; the message handlers update the per-target histories and the
widgets. Pausing stops the repaint of the columns, never the collection.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import ClassVar

from textual.app import App, ComposeResult, SystemCommand
from textual.binding import BindingType
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer

from loadgen.errors import StreambenchError
from loadgen.run import BusItem, Run, RunSummary
from loadgen.tick import Phase, PhaseChange, RunEvent, Tick
from loadgen.workload import Workload
from tui.history import TargetHistory
from tui.keys import BINDINGS, KEY_TABLE
from tui.widgets import HelpScreen, RunStatus, StatusBar, TargetColumn, TargetColumns

AfterRun = Callable[[RunSummary], Awaitable[str | None]]
# what `run_async()` / `run()` return: the summary of a finished run, the user-facing error
# that ended it, or None when the app was quit without a run
DashboardResult = RunSummary | StreambenchError | None
# palette entries of Textual's that the key table replaces
_REPLACED_COMMANDS = {"Quit", "Keys"}


@dataclass
class TickReceived(Message):
    tick: Tick


@dataclass
class PhaseChanged(Message):
    change: PhaseChange


@dataclass
class EventReceived(Message):
    event: RunEvent


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

    def __init__(self, run: Run | None, labels: list[str], workload: Workload,
                 after_run: AfterRun | None = None, *,
                 clock: Callable[[], int] = time.time_ns) -> None:
        super().__init__()
        self.bench = run
        self.after_run = after_run
        self.clock = clock  # wall clock in ns, for the length of the waiting phases
        self.histories = {label: TargetHistory(label) for label in labels}
        self.status = RunStatus(workload)
        self.summary: RunSummary | None = None
        self.report_path: str | None = None
        self._status_bar = StatusBar(self.status, clock, id="status")
        self._columns = {label: TargetColumn(h) for label, h in self.histories.items()}

    # ---- layout -------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield self._status_bar
        with TargetColumns(id="columns"):
            yield from self._columns.values()
        yield Footer()

    def on_mount(self) -> None:
        if self.console.color_system in ("standard", "windows"):
            self.theme = "ansi-dark"  # 8/16-colour terminal: the theme of native ANSI colours
        self.set_interval(1.0, self._show_status)
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
        try:
            summary = await self.bench.execute()
        except StreambenchError as exc:
            self.exit(exc)
            return
        self.summary = summary
        if self.after_run is not None:
            self.post_message(PhaseChanged(PhaseChange(Phase.REPORT, self.clock(),
                                                       "writing the report")))
            try:
                self.report_path = await self.after_run(summary)
            except StreambenchError as exc:
                self.exit(exc)
                return
            done = f"report: {self.report_path}" if self.report_path else "no report written"
            self.post_message(PhaseChanged(PhaseChange(Phase.DONE, self.clock(), done)))
        self.exit(summary)

    # ---- bus messages -------------------------------------------------------------------

    def on_tick_received(self, message: TickReceived) -> None:
        tick = message.tick
        history = self.histories.get(tick.target)
        if history is None:
            return
        with self.batch_update():
            history.add(tick)
            self.status.elapsed_s = max(self.status.elapsed_s, tick.elapsed_s)
            if not self.status.paused:
                self._columns[tick.target].show()
            self._show_status()

    def on_phase_changed(self, message: PhaseChanged) -> None:
        change = message.change
        with self.batch_update():
            if change.phase is not self.status.phase or self.status.phase_since_ns is None:
                self.status.phase_since_ns = change.time_ns
            self.status.phase = change.phase
            self.status.message = change.message
            self._show_status()

    def on_event_received(self, message: EventReceived) -> None:
        event = message.event
        with self.batch_update():
            history = self.histories.get(event.target)
            if history is None:  # a run-wide event
                self.status.message = f"{event.kind}: {event.detail}"
                self._show_status()
                return
            history.add_event(event.kind, event.detail)
            if not self.status.paused:
                self._columns[event.target].show()

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
                for column in self._columns.values():
                    column.show()
            self._show_status()

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            self.pop_screen()
        else:
            self.push_screen(HelpScreen())

    def action_close_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            self.pop_screen()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "close_help":
            # escape is a priority key: let it through to other screens (the command palette)
            return isinstance(self.screen, HelpScreen)
        return True

    def action_scroll_columns(self, direction: int) -> None:
        self.query_one(TargetColumns).scroll_columns(direction)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        for command in super().get_system_commands(screen):
            if command.title not in _REPLACED_COMMANDS:
                yield command
        for key in KEY_TABLE:
            if key.footer:
                yield SystemCommand(key.label, key.help, partial(self.run_action, key.action))

    # ---- repaint ------------------------------------------------------------------------

    def _show_status(self) -> None:
        self._status_bar.refresh()
