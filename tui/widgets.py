"""The dashboard's widgets: the status bar, one column per target made of panel views, and
the help screen generated from the key table."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult, RenderResult
from textual.containers import HorizontalScroll, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Static

from loadgen.tick import Phase
from loadgen.workload import Workload
from tui import formatting as fmt
from tui.history import ChartView, TargetHistory
from tui.keys import KEY_TABLE, Key
from tui.panels import COLUMN, PANELS, ROLES, RenderContext, axis_text

LOAD_PHASES = (Phase.WARMUP, Phase.MEASURING)
# phases whose length is unknown in advance: the status bar counts their time from the clock
WAITING_PHASES = (Phase.STARTING, Phase.DRAINING, Phase.WRITING, Phase.REPORT)
MIN_COLUMN_WIDTH = 40  # a target's panels need 36 cells inside border and padding


@dataclass
class RunStatus:
    """What the status bar shows; the app updates it from the bus messages."""

    workload: Workload
    phase: Phase = Phase.STARTING
    phase_since_ns: int | None = None  # wall clock when the phase began
    message: str = ""  # the latest progress message of the run
    elapsed_s: float = 0.0  # load time, from the latest tick
    stop_requests: int = 0
    paused: bool = False
    scope: str = ""  # what the control keys act on: a target's label or "all targets"

    @property
    def planned_s(self) -> float:
        return self.workload.warmup_s + self.workload.duration_s


class StatusBar(Widget):
    """One line: phase, time, what the run is doing; the workload on the right if it fits."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "status--phase", "status--paused", "status--text", "status--muted"}

    def __init__(self, status: RunStatus, clock: Callable[[], int], id: str | None = None) -> None:
        super().__init__(id=id)
        self.status = status
        self.clock = clock

    def render(self) -> RenderResult:
        s = self.status
        style = self.get_component_rich_style
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(f" {s.phase.value.upper()} ", style("status--phase"))
        if s.paused:
            text.append(" PAUSED ", style("status--paused"))
        if s.scope == "all targets":
            text.append(" ALL ", style("status--paused"))
        text.append(" " + self._progress(), style("status--text"))
        right = self._workload()
        gap = self.size.width - text.cell_len - len(right) - 1
        if gap >= 2:
            text.append(" " * gap + right + " ", style("status--muted"))
        return text

    def _progress(self) -> str:
        s = self.status
        parts: list[str] = []
        if s.phase in LOAD_PHASES:
            left = max(0.0, s.planned_s - s.elapsed_s)
            parts.append(f"{fmt.duration(s.elapsed_s)} / {fmt.duration(s.planned_s)}")
            if s.stop_requests:
                parts.append("stopping (q again: skip the drain)")
            else:
                parts.append(f"{fmt.duration(left)} left")
        elif s.phase in WAITING_PHASES and s.phase_since_ns is not None:
            parts.append(fmt.duration((self.clock() - s.phase_since_ns) / 1e9))
        if s.message:
            parts.append(s.message)
        if s.phase is Phase.DRAINING and s.stop_requests < 2:
            parts.append("q skips the drain")
        return " · ".join(parts)

    def _workload(self) -> str:
        w = self.status.workload
        rate = f"{fmt.count(w.rate)} msg/s" if w.rate > 0 else "max rate"
        return f"{w.name} · {rate} · {w.message_size:,} B"


class PanelView(Widget):
    """Shows one panel of one target. A panel that fails to render shows the error in place."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {f"panel--{role}" for role in ROLES}

    def __init__(self, panel_name: str, history: TargetHistory, view: ChartView | None = None) -> None:
        super().__init__(classes=f"-{panel_name}")
        self.panel = PANELS[panel_name]
        self.history = history
        self.view = view
        # the roles' styles, worked out again only when what they depend on changes (Textual's
        # own cache is emptied on every style update of the column, which is every repaint)
        self._styles: tuple[Any, dict[str, Any]] | None = None

    def _role_styles(self) -> dict[str, Any]:
        parent = self.parent
        # what the panel's CSS rules select on: the theme, the app's :ansi / :nocolor, the
        # panel's and its column's classes (the selected column)
        key = (self.app.theme, self.app.pseudo_classes, frozenset(self.classes),
               frozenset(parent.classes) if parent is not None else None)
        if self._styles is None or self._styles[0] != key:
            self._styles = (key, {role: self.get_component_rich_style(f"panel--{role}")
                                  for role in ROLES})
        return self._styles[1]

    def render(self) -> RenderResult:
        styles = self._role_styles()
        ctx = RenderContext(self.content_size.width, self.content_size.height, styles, self.view)
        try:
            return self.panel.render(self.history, ctx)
        except Exception as exc:  # a broken panel must not take the dashboard down
            problem = f"{self.panel.name} cannot be shown: {type(exc).__name__}: {exc}"
            # wrapped here: the panel styles keep lines unwrapped
            return Text("\n".join(textwrap.wrap(problem, max(ctx.width, 20))),
                        style=ctx.style("alert"))


class TargetColumns(HorizontalScroll, can_focus=False):
    """The targets side by side sharing the width; when they would be narrower than
    MIN_COLUMN_WIDTH they keep that width and the row scrolls sideways."""

    def on_resize(self) -> None:
        columns = list(self.query_children(TargetColumn))
        if not columns:
            return
        width = self.size.width
        each = max(MIN_COLUMN_WIDTH, width // len(columns))
        spare = max(0, width - each * len(columns))  # spread the remainder over the first ones
        for i, column in enumerate(columns):
            column.styles.width = each + (1 if i < spare else 0)


class TargetColumn(Vertical):
    """All panels of one target, top to bottom, under the target's label."""

    def __init__(self, history: TargetHistory, view: ChartView | None = None) -> None:
        super().__init__()
        self.history = history
        self.view = view
        self.border_title = history.label

    def compose(self) -> ComposeResult:
        for name in COLUMN:
            yield PanelView(name, self.history, self.view)

    def show(self) -> None:
        for view in self.query(PanelView):
            view.refresh()
        if self.view is not None:  # the charts' x axis, also where the panel has no row for it
            axis = axis_text(self.view, 0)
            if axis != self.border_subtitle:  # setting it repaints the whole column
                self.border_subtitle = axis


def help_table(keys: Sequence[Key] = KEY_TABLE) -> Table:
    """The help screen's body, generated from the key table."""
    table = Table.grid(padding=(0, 2))
    table.add_column(no_wrap=True, style="bold")
    table.add_column()
    rows: list[list[str]] = []
    for key in keys:
        if key.same_line and rows:
            rows[-1][1] += f" · {', '.join(key.shown)}  {key.help}"
        else:
            rows.append([", ".join(key.shown), key.help])
    for row in rows:
        table.add_row(*row)
    return table


class HelpScreen(ModalScreen[None]):
    """The key table, over the dashboard (which keeps collecting underneath)."""

    def __init__(self, keys: Sequence[Key] = KEY_TABLE) -> None:
        super().__init__()
        self.keys = keys

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help") as help_box:  # ↑/↓ scroll it on a short terminal
            help_box.border_title = "keys"
            yield Static(help_table(self.keys))


class KeyLine(Static):
    """The bottom line of a screen whose keys never change: its key table's footer keys, as
    Textual's footer shows them, drawn once."""

    def __init__(self, keys: Sequence[Key]) -> None:
        text = Text(no_wrap=True, overflow="ellipsis")
        for key in keys:
            if key.footer:
                text.append(f" {key.shown[0]} ", style="bold")
                text.append(f"{key.label} ")
        super().__init__(text)
