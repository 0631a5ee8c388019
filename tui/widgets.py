"""The dashboard's widgets: the status bar, one column per target made of panel views, and
the help screen generated from the key table."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rich.console import RenderableType
from rich.segment import Segment
from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult, RenderResult
from textual.containers import HorizontalScroll, Vertical, VerticalScroll
from textual.geometry import Region, Size
from textual.screen import ModalScreen
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Static

from loadgen.core.ticks import Phase
from loadgen.core.workload import Workload
from tui import formatting as fmt
from tui.history import ChartView, TargetHistory
from tui.keys import KEY_TABLE, Key
from tui.panels import COLUMN, PANELS, ROLES, ChartsPanel, Lines, RenderContext, axis_text

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
    # each target's rate in force (msg/s, 0 for the maximum rate), from its latest tick: the
    # workload's rate until the first tick, then what rate changes made of it
    rates: dict[str, float] = field(default_factory=dict)

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
        self._drawn: tuple[Any, ...] | None = None  # what the bar says as last drawn

    def _says(self) -> tuple[Any, ...]:
        s = self.status
        return s.phase, s.paused, s.scope, self._progress(), self._workload(), self.size.width

    def show(self) -> None:
        """Repaints the bar if what it says changed since it was drawn (ticks of several
        targets a second, and the clock's timer, mostly find it the same)."""
        if self._says() != self._drawn:
            self.refresh()

    def render(self) -> Text:
        self._drawn = self._says()
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

    def render_line(self, y: int) -> Strip:
        """The bar drawn as a panel's line is: Textual's general path for a text (laid out
        as content, wrapped, aligned) costs a couple of milliseconds, and the bar is
        repainted at every tick."""
        width = self.content_size.width
        self._dirty_regions.clear()  # (as Textual's own drawing of the content does)
        if y:
            return Strip.blank(width, self.visual_style.rich_style)
        return line_strip(self, self.render(), width, y)

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
        rates = sorted(set(self.status.rates.values()) or {w.rate})
        fixed = [fmt.count(r) for r in rates if r > 0]
        rate = " / ".join([*fixed[:1], *fixed[1:]]) + " msg/s" if fixed else ""
        if rates[0] <= 0:  # a target at the maximum rate
            rate = f"max rate / {rate}" if fixed else "max rate"
        return f"{w.name} · {rate} · {w.message_size:,} B"


def _row_segments(row: Text, base: Style) -> list[Segment] | None:
    """A panel's line as segments, each over the widget's style `base`, the way Rich renders a
    text whose parts were appended one after the other (no style of its own, spans one after
    the other, each with a Style): one segment per span and per gap between spans. None for
    any other text (overlapping spans, styles by name), which takes Rich's general path.
    Rich's path sorts, stacks and combines the spans' styles: on the lines of a panel that
    come out the same, it costs several times this."""
    if row.style:
        return None
    text = row.plain
    out: list[Segment] = []
    at = 0
    for start, end, style in row.spans:
        if start < at or not isinstance(style, Style):
            return None
        if start > at:
            out.append(Segment(text[at:start], base))
        if end > start:
            out.append(Segment(text[start:end], base + style if style else base))
        at = max(at, end)
    if at < len(text):
        out.append(Segment(text[at:], base))
    return out


def line_strip(widget: Widget, row: Text, width: int, y: int) -> Strip:
    """One line of `widget` as Textual draws a text: the widget's style under the line's own,
    cut at the width with an ellipsis, offsets for text selection; without its general path."""
    row.truncate(width, overflow="ellipsis")
    base = widget.visual_style.rich_style
    segments = _row_segments(row, base)
    if segments is None:
        segments = [Segment(part.text, base + part.style if part.style else base)
                    for part in row.render(widget.app.console) if part.text]
    return Strip(segments).apply_offsets(0, y)


class PanelView(Widget):
    """Shows one panel of one target. A panel that fails to render shows the error in place.

    The panel is drawn line by line: `show()` works out the panel's lines and repaints only the
    ones that changed since the last time, so a chart that scrolls by one column or a figure
    that moved costs those lines, not the whole panel, in Textual's compositor."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {f"panel--{role}" for role in ROLES}

    def __init__(self, panel_name: str, history: TargetHistory, view: ChartView | None = None) -> None:
        super().__init__(classes=f"-{panel_name}")
        self.panel = PANELS[panel_name]
        self.history = history
        self.view = view
        # the roles' styles, worked out again only when what they depend on changes (Textual's
        # own cache is emptied on every style update of the column, which is every repaint)
        self._styles: tuple[Any, dict[str, Any]] | None = None
        # the lines as drawn: what they were drawn for (size, styles), each line's key, strip
        self._drawn_for: tuple[Size, dict[str, Any]] | None = None
        self._keys: list[Any] = []
        self._strips: list[Strip] = []
        self._own_regions: set[Region] = set()  # the line repaints show() asked for

    def _role_styles(self) -> dict[str, Any]:
        parent = self.parent
        app = self.app
        # what the panel's CSS rules select on: the theme and the app's ansi_color (which
        # give :ansi), no_color (:nocolor), the panel's and its column's classes (the selected
        # column). Read directly: the app's pseudo_classes evaluates every pseudo-class, the
        # theme looked up for several, a tenth of the dashboard's CPU when read for every
        # line repainted.
        key = (app.theme, app.ansi_color, app.no_color, self.classes,
               parent.classes if parent is not None else None)
        if self._styles is None or self._styles[0] != key:
            self._styles = (key, {role: self.get_component_rich_style(f"panel--{role}")
                                  for role in ROLES})
        return self._styles[1]

    def _text(self, size: Size, styles: dict[str, Any]) -> Text:
        ctx = RenderContext(size.width, size.height, styles, self.view)
        try:
            return self.panel.render(self.history, ctx)
        except Exception as exc:  # a broken panel must not take the dashboard down
            problem = f"{self.panel.name} cannot be shown: {type(exc).__name__}: {exc}"
            # wrapped here: the panel styles keep lines unwrapped
            return Text("\n".join(textwrap.wrap(problem, max(ctx.width, 20))),
                        style=ctx.style("alert"))

    def render(self) -> RenderResult:
        """The whole panel as one text (what the lines are cut from)."""
        return self._text(self.content_size, self._role_styles())

    def _rows(self, size: Size, styles: dict[str, Any]) -> list[Text]:
        text = self._text(size, styles)
        if isinstance(text, Lines):
            return text.rows[:size.height]
        return text.split("\n", allow_blank=True)[:size.height]

    def _strip(self, row: Text, width: int, y: int) -> Strip:
        """One line as Textual draws a text (the widget's style under the line's own, cut at
        the width with an ellipsis, offsets for text selection), without its general path."""
        return line_strip(self, row, width, y)

    @staticmethod
    def _key(row: Text) -> Any:
        return row.plain, tuple(row.spans), row.style

    def _draw_all(self, size: Size, styles: dict[str, Any]) -> None:
        rows = self._rows(size, styles)
        self._drawn_for = (size, styles)
        self._keys = [self._key(row) for row in rows]
        self._strips = [self._strip(row, size.width, y) for y, row in enumerate(rows)]

    def show(self) -> None:
        """Repaints the lines that changed (a full repaint if the size or the styles did)."""
        if self._drawn_for is None:  # not drawn yet: its styles may not be known
            self.refresh()
            return
        size = self.content_size
        styles = self._role_styles()
        if not size.width or not size.height or self._drawn_for != (size, styles):
            self.refresh()
            return
        rows = self._rows(size, styles)
        if len(rows) != len(self._keys):
            self.refresh()
            return
        regions = []
        for y, row in enumerate(rows):
            key = self._key(row)
            if key != self._keys[y]:
                self._keys[y] = key
                self._strips[y] = self._strip(row, size.width, y)
                regions.append(Region(0, y, size.width, 1))
        if regions:
            self._own_regions.update(region.translate(self.content_offset) for region in regions)
            self.refresh(*regions)

    def render_line(self, y: int) -> Strip:
        size = self.content_size
        styles = self._role_styles()
        # a repaint that show() did not ask for (a resize, a style change, Textual's own): the
        # lines are drawn again from the panel
        if (self._drawn_for != (size, styles)
                or (self._dirty_regions and not self._dirty_regions <= self._own_regions)):
            self._draw_all(size, styles)
        self._dirty_regions.clear()
        self._own_regions.clear()
        if y < len(self._strips):
            return self._strips[y]
        return Strip.blank(size.width, self.visual_style.rich_style)


class RichLines(Widget):
    """A Rich renderable (tables, groups) drawn line by line and as tall as its lines, for a
    screen refreshed every tick: update() renders it once at the widget's width and repaints
    only the lines that changed. (A Static renders its content twice per update, once for its
    height, and the whole screen is laid out and redrawn.) Lines are drawn as Textual draws a
    Rich renderable: the widget's style under each segment's own, cut at the width, with
    offsets for text selection."""

    DEFAULT_CSS = "RichLines { height: auto; }"

    def __init__(self, renderable: RenderableType, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._renderable = renderable
        # the lines last rendered: for which renderable, width and base style
        self._rendered: tuple[RenderableType, int, Style, list[Strip]] | None = None
        self._line_keys: list[tuple[int, tuple[Segment, ...]]] = []  # (y, segments) of each
        self._drawn_for: tuple[int, Style] | None = None  # what the shown lines were drawn for
        self._strips: list[Strip] = []
        self._own_regions: set[Region] = set()  # the line repaints update() asked for

    def _lines(self, width: int) -> list[Strip]:
        base = self.visual_style.rich_style
        cached = self._rendered
        if (cached is not None and cached[0] is self._renderable and cached[1] == width
                and cached[2] == base):
            return cached[3]
        app = self.app
        options = app.console_options.update(highlight=False, width=width, height=None)
        segments = [Segment(text, base + style if style else base, control)
                    for text, style, control in app.console.render(self._renderable, options)]
        lines = [tuple(line) for line in
                 Segment.split_and_crop_lines(segments, width, include_new_lines=False, pad=False)]
        # a line as it was rendered last time keeps its strip (making a Strip is most of the
        # cost of a line, and most lines of a screen refreshed each tick stay the same)
        before = dict(zip(self._line_keys, cached[3], strict=True)) if (
            cached is not None and cached[1] == width and cached[2] == base) else {}
        strips = []
        for y, line in enumerate(lines):
            strip = before.get((y, line))
            strips.append(strip if strip is not None
                          else Strip(Segment.simplify(line)).apply_offsets(0, y))
        self._line_keys = [(y, line) for y, line in enumerate(lines)]
        self._rendered = (self._renderable, width, base, strips)
        return strips

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._lines(width)) if width > 0 else 0

    def update(self, renderable: RenderableType) -> None:
        """Shows `renderable` in place of what is shown, repainting the lines that differ."""
        self._renderable = renderable
        width = self.content_size.width
        if (not self.is_mounted or self._drawn_for is None
                or self._drawn_for != (width, self.visual_style.rich_style)):
            self.refresh(layout=True)
            return
        strips = self._lines(width)
        if len(strips) != len(self._strips):
            self.refresh(layout=True)  # taller or shorter: laid out again
            return
        regions = [Region(0, y, width, 1)
                   for y, (old, new) in enumerate(zip(self._strips, strips, strict=True))
                   if old is not new and old != new]
        self._strips = strips
        if regions:
            self._own_regions.update(region.translate(self.content_offset) for region in regions)
            self.refresh(*regions)

    def render_line(self, y: int) -> Strip:
        width = self.content_size.width
        base = self.visual_style.rich_style
        # a repaint update() did not ask for (a resize, a style change, scrolling, Textual's
        # own): the lines are drawn again from the renderable
        if (self._drawn_for != (width, base)
                or (self._dirty_regions and not self._dirty_regions <= self._own_regions)):
            self._strips = self._lines(width)
            self._drawn_for = (width, base)
        self._dirty_regions.clear()
        self._own_regions.clear()
        if y < len(self._strips):
            return self._strips[y]
        return Strip.blank(width, base)


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
            view.show()
        if self.view is not None:  # the charts' x axis, also where the panel has no row for it
            axis = axis_text(self.view, 0)
            hidden = len(ChartsPanel.CHARTED) - len(self.charts_shown())
            more = " · g more"
            if hidden and len(axis) + len(more) <= self.size.width - 4:
                axis += more
            if axis != self.border_subtitle:  # setting it repaints the whole column
                self.border_subtitle = axis

    def on_resize(self) -> None:
        # the charts that fit change with the height (and the axis says whether g shows more)
        self.call_after_refresh(self.show)

    def charts_shown(self) -> tuple[str, ...]:
        """The charts the column has room for now."""
        charts = self.query(PanelView).filter(".-charts")
        height = charts.first().content_size.height if charts else 0
        page = self.view.chart_page if self.view is not None else 0
        return ChartsPanel.shown(height, page)


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
