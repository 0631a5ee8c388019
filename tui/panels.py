"""The panels of a target's column: each turns a TargetHistory into a renderable.

A panel is a small object with a name and one method, `render(history, ctx)`; `PANELS` maps
names to panels and `COLUMN` says which appear, top to bottom. Adding a panel is one class and
one `register` call here. Panels return plain `Text` with a fixed number of unwrapped lines,
so a column's height does not depend on the figures, and every figure is written out: styles
(from the theme) only emphasise, they never carry information on their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from rich.style import Style
from rich.text import Text

from loadgen.core.ticks import LagStatus, Phase, Tick
from loadgen.timelag import time_lag_text
from tui import formatting as fmt
from tui.charts import area_chart
from tui.history import (
    METRICS,
    ChartScale,
    ChartView,
    LatencySummary,
    TargetHistory,
    mark_columns,
    time_slots,
)

ROLES = ("label", "value", "muted", "alert", "chart")
BEHIND_RATIO = 0.95  # achieved / target rate below which a producer counts as behind
LABEL_WIDTH = 8


@dataclass(frozen=True)
class RenderContext:
    """Where a panel is drawn: its size in cells and a Rich style per role in ROLES."""

    width: int
    height: int = 0  # the rows given to the panel; only panels that stretch look at it
    styles: Mapping[str, Style] = field(default_factory=dict)
    view: ChartView | None = None  # the charts' window and scales (None: this target alone)

    def style(self, role: str) -> Style:
        return self.styles.get(role, Style.null())


class Panel(Protocol):
    name: str

    def render(self, history: TargetHistory, ctx: RenderContext) -> Text: ...


PANELS: dict[str, Panel] = {}


def register(panel: Panel) -> Panel:
    PANELS[panel.name] = panel
    return panel


Part = tuple[str, str]  # (text, role)


def line(ctx: RenderContext, *parts: Part) -> Text:
    text = Text()
    for content, role in parts:
        text.append(content, ctx.style(role))
    return text


class Lines(Text):
    """A panel's text that also keeps its lines as they were given, so the dashboard can
    draw them one by one without cutting the text up again."""

    rows: list[Text]


def lines(rows: list[Text]) -> Text:
    out = Lines(no_wrap=True, overflow="ellipsis")
    for i, row in enumerate(rows):
        if i:
            out.append("\n")
        out.append_text(row)
    out.rows = rows
    return out


def label(name: str) -> Part:
    return (name.ljust(LABEL_WIDTH), "label")


class ThroughputPanel:
    """Produce and consume rates (messages and MB per second), achieved vs target, lag."""

    name = "throughput"

    def render(self, history: TargetHistory, ctx: RenderContext) -> Text:
        tick = history.last
        if tick is None:
            return lines([
                line(ctx, label("produce"), (fmt.MISSING, "value")),
                line(ctx, label(""), ("waiting for the first tick", "muted")),
                line(ctx, label("consume"), (fmt.MISSING, "value")),
                line(ctx, label("lag"), (fmt.MISSING, "value")),
                line(ctx, label("behind"), (fmt.MISSING, "value")),
            ])
        lag = tick.lag.total if tick.lag is not None else None
        # errors since the start; "(+n)" when the last interval had some
        errors = (f"send errors {fmt.count(history.send_errors_total)}"
                  + (f" (+{fmt.count(tick.send_errors)})" if tick.send_errors else ""),
                  "alert" if history.send_errors_total else "muted")
        return lines([
            line(ctx, label("produce"), (f"{fmt.count(tick.produce_rate)}/s", "value"),
                 (f"  {fmt.megabytes(tick.produce_mb_s * 1e6)} MB/s", "value")),
            line(ctx, label(""), self._versus_target(history)),
            line(ctx, label("consume"), (f"{fmt.count(tick.consume_rate)}/s", "value"),
                 (f"  {fmt.megabytes(tick.consume_mb_s * 1e6)} MB/s", "value")),
            line(ctx, label("lag"), (fmt.count(lag), "value"), (" msg  ", "muted"), errors),
            line(ctx, label("behind"), *self._behind(tick)),
        ])

    @staticmethod
    def _behind(tick: Tick) -> list[Part]:
        """The time lag, its trend, time to drain and status word (an estimate says so)."""
        text = time_lag_text(tick)
        if not tick.lag_s_exact:
            return [(text, "muted")]
        seconds, _, rest = text.partition(" s")
        alert = tick.lag is not None and tick.lag.time is not None and any(
            w is not LagStatus.OK for w in tick.lag.time.status.values())
        return [(seconds + " s", "value"), (rest, "alert" if alert else "muted")]

    @staticmethod
    def _versus_target(history: TargetHistory) -> Part:
        tick = history.last
        assert tick is not None
        if tick.phase not in (Phase.WARMUP, Phase.MEASURING):
            return (f"load stopped ({tick.phase.value})", "muted")
        if tick.target_rate <= 0:
            if tick.loadgen.saturated:
                return ("max rate: generator saturated", "alert")
            return ("max rate (no target)", "muted")
        ratio = tick.produce_rate / tick.target_rate
        text = f"{ratio * 100:.1f}% of {fmt.count(tick.target_rate)}/s"
        # short of the rate on purpose, not behind: the producers stopped, a broker faulted
        if history.producers_stopped:
            return ("producers stopped on purpose", "muted")
        if history.brokers_paused or history.brokers_down:
            state = "paused" if history.brokers_paused else "down"
            return (f"{ratio * 100:.1f}%  broker {state}", "muted")
        if tick.loadgen.saturated:
            return (f"{text}  generator saturated", "alert")
        if ratio < BEHIND_RATIO:
            return (f"{text}  behind", "alert")
        return (text, "muted")


class LatencyPanel:
    """End-to-end latency of the last tick and of the last ten seconds, publish latency."""

    name = "latency"
    COLUMNS = ("p50", "p99", "p99.9", "max")

    def render(self, history: TargetHistory, ctx: RenderContext) -> Text:
        cell = max(5, (ctx.width - LABEL_WIDTH) // len(self.COLUMNS))
        tick = history.last
        tick_span = f"{tick.interval_s:.0f}s" if tick is not None else "1s"
        recent_span = f"{history.recent_span_s or history.recent_window_s:.0f}s"
        header = line(ctx, label("ms"), *((c.rjust(cell), "label") for c in self.COLUMNS))
        return lines([
            header,
            self._row(ctx, f"e2e {tick_span}", history.e2e, cell),
            self._row(ctx, f"e2e {recent_span}", history.e2e_recent, cell),
            self._row(ctx, "publish", history.publish, cell),
        ])

    @staticmethod
    def _row(ctx: RenderContext, name: str, summary: LatencySummary, cell: int) -> Text:
        figures = (summary.p50, summary.p99, summary.p999, summary.max)
        return line(ctx, label(name), *((fmt.millis(v).rjust(cell), "value") for v in figures))


class ResourcesPanel:
    """The broker's CPU and memory (summed over its processes or containers), and the load
    generator's own CPU, in the alert style when the generator is the bottleneck."""

    name = "resources"

    def render(self, history: TargetHistory, ctx: RenderContext) -> Text:
        tick = history.last
        cpu = tick.resources.cpu_percent if tick is not None else None
        memory = tick.resources.memory_bytes if tick is not None else None
        memory_text = f"{fmt.megabytes(memory)} MB" if memory else fmt.MISSING
        gen = tick.loadgen if tick is not None else None
        gen_role = "alert" if gen is not None and gen.saturated else "value"
        gen_cpu = gen.cpu_percent if gen is not None else None
        gen_text = f"{gen_cpu:.0f}%" if gen_cpu is not None and fmt.known(gen_cpu) else fmt.MISSING
        return lines([
            line(ctx, label("cpu"), (fmt.percent(cpu).ljust(7), "value"),
                 ("mem ", "label"), (memory_text.ljust(9), "value"),
                 ("gen ", "label"), (gen_text + ("!" if gen_role == "alert" else ""), gen_role)),
        ])


class ChartsPanel:
    """Braille charts of the charted metrics over the chart window, sharing out the rows the
    panel is given: as many charts as have MIN_ROWS rows each (the chart key shows the others
    in their turn). Each chart has a caption line (what the series is, its lowest and highest
    value in the window, the top of its y axis and whether the columns share it) above its
    rows; the last row is the x axis: the time span the charts cover, which every column
    shares."""

    name = "charts"
    CHARTED = ("produce_rate", "e2e_p99", "lag", "cpu")
    MIN_ROWS = 3  # a chart's rows below its caption, fewest that show a trend

    @classmethod
    def fitting(cls, height: int) -> int:
        """How many charts a panel of `height` rows shows (each with MIN_ROWS or more)."""
        return min(len(cls.CHARTED), max(1, height // (1 + cls.MIN_ROWS)))

    @classmethod
    def shown(cls, height: int, page: int) -> tuple[str, ...]:
        """The charts shown in `height` rows: all that fit, the `page`-th set of them (the
        chart key moves on by that many)."""
        n = cls.fitting(height)
        first = page * n % len(cls.CHARTED)
        return tuple(cls.CHARTED[(first + i) % len(cls.CHARTED)] for i in range(n))

    def render(self, history: TargetHistory, ctx: RenderContext) -> Text:
        view = ctx.view if ctx.view is not None else ChartView({history.label: history})
        width = max(0, ctx.width)
        slots = 2 * width
        start, end = view.span(slots)
        charted = self.shown(ctx.height, view.chart_page)
        # the x axis, when a row is left; else the column's bottom border shows it
        axis = ctx.height > len(charted) * (1 + self.MIN_ROWS)
        share, spare = divmod(max(0, ctx.height - axis), len(charted))
        rows = []
        for i, name in enumerate(charted):
            height = max(1, share + (1 if i < spare else 0) - 1)
            metric = METRICS[name]
            scale = view.scale(history.label, name, slots)
            times, values = history.series[name].between(start - 2.0, end)
            points = time_slots(times, values, start, end, slots, metric.reduce)
            ghost = view.ghost(history.label, name, start - 2.0, end)
            ghost_points = (time_slots(*ghost, start, end, slots, metric.reduce)
                            if ghost is not None else None)
            chart = area_chart(points, width, height, scale.top, ghost_points)
            marks = mark_columns(history.marks, start, end, width)
            if marks and chart:  # a change or fault: a tick mark on the chart's top row
                chart[0] = "".join("┆" if c in marks else ch for c, ch in enumerate(chart[0]))
            rows.append(self._caption(ctx, metric.title, metric.unit, scale,
                                      view.delta(history.label, name, slots)))
            rows.extend(line(ctx, (row, "chart")) for row in chart)
        if axis:
            rows.append(line(ctx, (axis_text(view, width), "muted")))
        return lines(rows)

    @staticmethod
    def _caption(ctx: RenderContext, title: str, unit: str, scale: ChartScale,
                 delta: float | None = None) -> Text:
        span = fmt.span(scale.low, scale.high, unit)
        versus = f" Δ{delta:+.0f}%" if delta is not None and fmt.known(delta) else ""
        top = fmt.with_unit(scale.top, unit) if unit == "ms" and scale.top >= 1000 else (
            fmt.short(scale.top))
        axis = f"↑{top} {'all' if scale.shared else 'own'}"
        gap = max(1, ctx.width - LABEL_WIDTH - len(span) - len(versus) - len(axis))
        return line(ctx, (title.ljust(LABEL_WIDTH), "label"), (span, "value"),
                    (versus, "value"), (" " * gap + axis, "muted"))


def axis_text(view: ChartView, width: int) -> str:
    """The charts' x axis: how far back the window reaches, its name, and "now"; for the run
    window while the run is shorter than it, the run's start and its planned length."""
    start, end = view.span()
    if view.anchored():  # from the run's start to its planned end
        left, middle, right = "0:00", f" {view.window_name()} ", fmt.duration(end - start)
    else:
        left, middle, right = f"-{fmt.duration(end - start)}", f" {view.window_name()} ", "now"
    gap = width - len(left) - len(right) - len(middle)
    if gap < 2:
        if view.anchored():  # (its right end names the run's planned length)
            return f"x axis {left} → {right}"
        return f"x axis {left} → {right} ({view.window_name()})"
    return left + "╶" * (gap // 2) + middle + "╶" * (gap - gap // 2) + right


class EventsPanel:
    """The target's latest event (send or receive errors, collector failures)."""

    name = "events"

    def render(self, history: TargetHistory, ctx: RenderContext) -> Text:
        if not history.events:
            return lines([line(ctx, label("events"), ("none", "muted"))])
        last = history.events[-1]
        return lines([line(ctx, label("events"), (f"{history.event_count}  ", "value"),
                           (f"{last.kind}: {last.detail}", "alert"))])


for _panel in (ThroughputPanel(), LatencyPanel(), ResourcesPanel(), ChartsPanel(), EventsPanel()):
    register(_panel)

COLUMN: tuple[str, ...] = ("throughput", "latency", "resources", "charts", "events")
