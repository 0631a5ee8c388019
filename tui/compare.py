"""The compare view (`v` on the dashboard): one chart per metric with every target overlaid,
each target drawn with its own glyph so the lines part without colour. Throughput (consumed
msg/s), lag (with the time lag: the age of the oldest message not yet consumed, or where that
cannot be had the estimate, lag over the consume rate) and e2e p99, over the same window as the
columns' charts; below them the broker metrics every target has (the same streambench name),
their latest values side by side."""

from __future__ import annotations

import math

from rich.text import Text
from textual.app import ComposeResult, RenderResult
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, Static

from loadgen.core.brokermetrics import unit_of
from loadgen.core.ticks import Tick
from loadgen.timelag import seconds_text, worst_status
from tui import formatting as fmt
from tui.charts import OVERLAP, overlay_chart
from tui.detail import metric_value
from tui.history import METRICS, ChartView, TargetHistory, time_slots
from tui.panels import axis_text

GLYPHS = ("●", "×", "+", "○", "▲", "■", "◆", "▼", "#", "@")
# (metric, caption): the charts top to bottom
COMPARED = (("consume_rate", "throughput msg/s"), ("lag", "lag msgs"), ("e2e_p99", "e2e p99"))
# the charts whose y axis starts at zero; the latency's spans the window's values, so close
# lines still part (its caption says where it starts)
FROM_ZERO = ("consume_rate", "lag")
HINT = "esc back · w window · x screenshot · ? help"


def behind_text(tick: Tick | None) -> str:
    """`5.00 s STOP` (exact, with the worst subscription's word), `~0.52 s est.`, `– s`."""
    if tick is None:
        return "– s"
    if tick.lag_s_exact and tick.lag is not None and tick.lag.time is not None:
        return " ".join(p for p in (seconds_text(tick.lag_s), worst_status(tick.lag.time)) if p)
    estimate = tick.lag_estimate_s
    return f"~{seconds_text(estimate)} est." if math.isfinite(estimate) else "– s"


def glyph(i: int) -> str:
    return GLYPHS[i % len(GLYPHS)]


def target_metric(values: list[float], unit: str) -> float:
    """One figure for a target from its brokers' values: a latency or ratio its worst
    broker's, a count, rate or size the sum over its brokers."""
    return max(values) if unit in ("seconds", "ratio") else sum(values)


def shared_broker_metrics(histories: list[TargetHistory]) -> list[tuple[str, list[float]]]:
    """The broker metrics every target's latest tick has (two targets or more), each with a
    figure per target in the targets' order; none when a target has none."""
    latest = []
    for h in histories:
        metrics = h.last.broker_metrics if h.last is not None else None
        if metrics is None or not metrics.values:
            return []
        per_name: dict[str, list[float]] = {}
        for values in metrics.values.values():
            for name, value in values.items():
                per_name.setdefault(name, []).append(value)
        latest.append({n: target_metric(v, unit_of(n)) for n, v in per_name.items()})
    if len(latest) < 2:
        return []
    names = sorted(set.intersection(*(set(figures) for figures in latest)))
    return [(name, [figures[name] for figures in latest]) for name in names]


def broker_metric_lines(shared: list[tuple[str, list[float]]], width: int, rows: int) -> list[str]:
    """`name ● value × value` entries packed into at most `rows` lines of `width`; what does
    not fit is counted on the last line."""
    entries = [f"{name} " + " ".join(f"{glyph(i)} {metric_value(v, unit_of(name))}"
                                     for i, v in enumerate(values))
               for name, values in shared]
    lines: list[str] = []
    for n, entry in enumerate(entries):
        if lines and len(lines[-1]) + 3 + len(entry) <= width:
            lines[-1] += " │ " + entry
        elif len(lines) < rows:
            lines.append(entry)
        else:
            more = f" … {len(entries) - n} more (detail: Enter)"
            lines[-1] = lines[-1][:max(0, width - len(more))] + more
            break
    return lines


class CompareCharts(Widget):
    """The overlaid charts, sharing out the rows the widget is given."""

    def __init__(self, view: ChartView) -> None:
        super().__init__()
        self.view = view

    def render(self) -> RenderResult:
        width, height = self.content_size.width, self.content_size.height
        histories = list(self.view.histories.values())
        start, end = self.view.span(width)  # one point a cell, on the charts' grid of time
        text = Text(no_wrap=True, overflow="ellipsis")
        legend = "  ".join(f"{glyph(i)} {h.label}" for i, h in enumerate(histories))
        text.append(legend + f"  {OVERLAP} several\n", style="bold")
        shared = shared_broker_metrics(histories)
        # the broker metrics' lines: at most a quarter of the height, under a caption
        metric_rows = min(len(shared), max(1, (height - 2) // 4) - 1) if shared else 0
        lines = broker_metric_lines(shared, width, metric_rows) if metric_rows > 0 else []
        used = len(lines) + 1 if lines else 0
        share, spare = divmod(max(0, height - 2 - used), len(COMPARED))
        for n, (name, caption) in enumerate(COMPARED):
            rows = max(1, share + (1 if n < spare else 0) - 1)
            metric = METRICS[name]
            series = []
            for h in histories:
                times, values = h.series[name].between(start - 2.0, end)
                series.append(time_slots(times, values, start, end, width, metric.reduce))
            finite = [v for points in series for v in points if math.isfinite(v)]
            bottom, top = min(finite, default=0.0), max(finite, default=0.0)
            if name in FROM_ZERO:
                # rates and lag from zero: a fraction of a percent of noise stays flat
                bottom = min(0.0, bottom)
            span = (fmt.span(bottom, top, "ms") if name == "e2e_p99"
                    else f"{fmt.short(bottom)}–{fmt.short(top)}")
            text.append(Text.assemble((caption, "bold"), f" {span} ",
                                      *self._latest(name, histories)))
            text.append("\n")
            for row in overlay_chart(series, [glyph(i) for i in range(len(series))], width, rows,
                                     bottom, top):
                text.append(row + "\n")
        text.append(axis_text(self.view, width), style="dim")
        if lines:
            text.append("\nbroker metrics on every target (latest)", style="bold")
            for line in lines:
                text.append("\n" + line)
        return text

    @staticmethod
    def _latest(name: str, histories: list[TargetHistory]) -> list[str]:
        """Each target's latest value; the lag also in seconds behind (its status word)."""
        out = []
        for i, h in enumerate(histories):
            values = h.series[name].values()
            value = values[-1] if values else math.nan
            figure = fmt.latency(value) if name == "e2e_p99" else fmt.short(value)
            if name == "lag":
                figure += f" = {behind_text(h.last)}"
            out.append(f" {glyph(i)} {figure}")
        return out


class CompareScreen(Screen[None]):
    """Every target on the same charts; the dashboard's view keys still work."""

    def __init__(self, view: ChartView) -> None:
        super().__init__()
        self.view = view

    def compose(self) -> ComposeResult:
        yield Static(Text(" COMPARE ", style="bold reverse") + Text(f"  {HINT}"), id="compare-title")
        yield CompareCharts(self.view)
        yield Footer()

    def show(self) -> None:
        if self.is_mounted:
            self.query_one(CompareCharts).refresh()
