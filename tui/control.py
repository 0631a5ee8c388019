"""Steering a run from the dashboard: the dialogs that ask for a rate or pick a fault, and the
strip that shows the latest events of every target. The app turns the answers into
Interventions and hands them to the run, the same records `--at` and `schedule:` produce."""

from __future__ import annotations

from collections import deque
from datetime import datetime
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option

from loadgen.core.errors import WorkloadError
from loadgen.core.events import RunEvent
from loadgen.core.interventions import FAULT_ACTIONS, Intervention, parse_rate


class RateScreen(ModalScreen[float | None]):
    """Asks for a rate in msg/s (or `max`), checked as `--rate` is; Esc cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "cancel")]

    def __init__(self, scope: str, current: float) -> None:
        super().__init__()
        self.scope = scope
        self.current = current

    def compose(self) -> ComposeResult:
        now = "max" if self.current <= 0 else f"{self.current:g}"
        with Vertical(id="dialog"):
            yield Label(f"rate for {self.scope} in msg/s, or max (now {now})")
            yield Label("Enter sets it, Esc cancels", classes="hint")
            yield Input(placeholder="e.g. 5000", id="rate")
            yield Label("", id="problem")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        try:
            rate = parse_rate(event.value, "rate")
        except WorkloadError as exc:
            self.query_one("#problem", Label).update(Text(str(exc), style="bold"))
            return
        self.dismiss(rate)

    def action_cancel(self) -> None:
        self.dismiss(None)


DASHBOARD_LATENCY_MS = 50.0  # the network faults the fault dialog offers
DASHBOARD_BANDWIDTH = 1e6  # B/s


class FaultScreen(ModalScreen[Intervention | None]):
    """Picks a fault for one broker: every action for every broker of the targets in scope; and
    for each target in scope whose links are proxied (`proxied`), the network faults, with the
    dashboard's amounts (--at takes others)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "cancel")]

    def __init__(self, brokers: list[str], proxied: list[str] | None = None) -> None:
        super().__init__()
        self.choices = [Intervention(action, broker=b) for b in brokers for action in FAULT_ACTIONS]
        for label in proxied or []:
            self.choices += [Intervention("latency", label, latency_ms=DASHBOARD_LATENCY_MS),
                             Intervention("bandwidth", label, bandwidth=DASHBOARD_BANDWIDTH),
                             *(Intervention(action, label) for action in ("partition", "reset", "heal"))]

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label("fault to inject (Enter), Esc cancels")
            yield OptionList(*(Option(f"{c.action:<8} {c.target if c.network else c.broker}"
                                      + (f" ({c.describe()})" if c.latency_ms or c.bandwidth else ""))
                               for c in self.choices), id="faults")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.choices[event.option_index])

    def action_cancel(self) -> None:
        self.dismiss(None)


class EventStrip(Widget):
    """The latest events of the run, newest first, one line."""

    def __init__(self, id: str | None = None) -> None:
        super().__init__(id=id)
        self.events: deque[RunEvent] = deque(maxlen=8)

    def add(self, event: RunEvent, repaint: bool = True) -> None:
        self.events.append(event)
        if repaint:
            self.refresh()

    def clear(self) -> None:
        self.events.clear()
        self.refresh()

    def render(self) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        if not self.events:
            text.append(" events: none yet", style="dim")
            return text
        for i, e in enumerate(reversed(self.events)):
            when = datetime.fromtimestamp(e.time_ns / 1e9).strftime("%H:%M:%S")
            who = f"{e.target} " if e.target else ""
            text.append((" · " if i else " ") + f"{when} {who}{e.kind}: {e.detail}",
                        style="bold" if i == 0 else "dim")
        return text
