"""The report's charts as PNG images, drawn with matplotlib's Agg renderer: no display, no
browser, no pyplot state (each chart is its own Figure), so it runs on any headless server."""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.transforms import offset_copy

from analysis.compute import (
    LATENCY_TITLES,
    NINES_PERCENTILES,
    SERIES_BY_NAME,
    ReportData,
    TargetReport,
)
from analysis.schema import LATENCY_KINDS

WIDTH_IN = 9.0
PANEL_IN = 3.2
BOX_IN = 0.24  # a box-plot panel's height grows by this much a target past a dozen
DPI = 100
_NINES_TICKS = (1.0, 10.0, 100.0, 1e3, 1e4, 1e5)
_NINES_LABELS = ("0 %", "90 %", "99 %", "99.9 %", "99.99 %", "99.999 %")


# a legend of up to this many entries sits inside its panel, where it hides the least; a
# longer one (a report of many runs) goes under the panel in columns, and the figure grows by
# its height, so that the panel keeps its own
LEGEND_INSIDE_MAX = 6
LEGEND_COLUMN_CHARS = 46  # labels up to this long go two to a row, longer ones one
TREND_CHARS = 28  # what a trend adds to a label: ", trend +0.0374 MB/s/min"
LEGEND_ROW_IN = 0.21  # one row of a legend in the small font
LEGEND_GAP_IN = 0.55  # from the panel's lower edge to the legend: the ticks and the axis label


def _headings(data: ReportData) -> list[str]:
    return [t.heading for t in data.targets]


def _legend_below(entries: int) -> bool:
    return entries > LEGEND_INSIDE_MAX


def _columns(longest: int) -> int:
    return 2 if longest <= LEGEND_COLUMN_CHARS else 1


def _figure(panels: int, labels: Sequence[str] = (), extra_chars: int = 0,
            panel_in: float = PANEL_IN) -> tuple[Figure, list[Axes]]:
    """`panels` panels one above the other, each with a legend entry for each of `labels`
    (each made up to `extra_chars` longer)."""
    entries = len(labels)
    longest = max((len(x) for x in labels), default=0) + extra_chars
    extra = (LEGEND_GAP_IN + math.ceil(entries / _columns(longest)) * LEGEND_ROW_IN
             if _legend_below(entries) else 0.0)
    fig = Figure(figsize=(WIDTH_IN, (panel_in + extra) * panels), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(panels, 1, squeeze=False)[:, 0]
    return fig, list(axes)


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def _colour(i: int) -> str:
    """Matplotlib's ten colours, then their light shades: twenty targets told apart."""
    return to_hex(colormaps["tab20"]((2 * i + (i // 10) % 2) % 20))


def _no_data(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def _wide(values: Sequence[float]) -> bool:
    """The positive values span more than two decades: a log scale shows them better."""
    v = np.asarray([x for x in values if math.isfinite(x) and x > 0])
    return bool(len(v) and v.max() / v.min() > 100)


def _legend(ax: Axes) -> None:
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    if not _legend_below(len(handles)):
        ax.legend(fontsize="small", loc="best")
        return
    # its top edge a fixed distance under the panel, whatever the panel's height
    under = offset_copy(ax.transAxes, fig=ax.get_figure(root=True), y=-LEGEND_GAP_IN,
                        units="inches")
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, 0.0),
              bbox_transform=under, ncol=_columns(max(len(x) for x in labels)), frameon=False)


def _segment_lines(ax: Axes, targets: Sequence[TargetReport]) -> None:
    """A dotted vertical line, in the target's colour, where each of its segments begins
    (an intervention: rate, producers, consumers, fault)."""
    for i, t in enumerate(targets):
        for seg in t.segments[1:]:
            ax.axvline((t.measuring_start_s + seg.start_s) / 60.0, color=_colour(i), lw=0.8,
                       ls=":", alpha=0.8)


def _time_panel(ax: Axes, targets: Sequence[TargetReport], series: str, trend: bool) -> bool:
    """One per-second series of every target against minutes; False when none has it."""
    drawn = trends = False
    for i, t in enumerate(targets):
        y = t.timeline.values.get(series)
        if y is None or series not in t.series:
            continue
        x = t.timeline.minutes
        tr = t.series[series].trend
        fitted = trend and math.isfinite(tr.slope) and len(x) > 0
        # one legend entry a target: its trend's slope beside its name
        label = (f"{t.heading}, trend {tr.slope:+.3g} {SERIES_BY_NAME[series].unit}/min"
                 if fitted else t.heading)
        ax.plot(x, y, color=_colour(i), lw=0.9, label=label)
        if fitted:
            xs = np.array([x.min(), x.max()])
            ax.plot(xs, tr.intercept + tr.slope * xs, color=_colour(i), lw=1.6, ls="--")
            trends = True
        drawn = True
    if drawn:
        _segment_lines(ax, targets)
    if trends:
        ax.set_title("dashed: least-squares trend", fontsize="small", loc="right")
    s = SERIES_BY_NAME[series]
    ax.set_ylabel(f"{s.title} ({s.unit})")
    ax.set_xlabel("minutes since the load started")
    ax.grid(alpha=0.3)
    return drawn


def throughput_chart(data: ReportData) -> Figure:
    fig, axes = _figure(2, _headings(data), TREND_CHARS)
    for ax, series in zip(axes, ("produce_mb_s", "consume_mb_s"), strict=True):
        if not _time_panel(ax, data.targets, series, trend=True):
            _no_data(ax, f"no {SERIES_BY_NAME[series].title} measured")
        _legend(ax)
    return fig


def latency_over_time_chart(data: ReportData) -> Figure:
    fig, axes = _figure(len(LATENCY_KINDS), _headings(data))
    for ax, kind in zip(axes, LATENCY_KINDS, strict=True):
        seen: list[float] = []
        for i, t in enumerate(data.targets):
            x = t.timeline.minutes
            labelled = False  # one legend entry a target, its colour; the line style is the stat
            for stat, style in (("p50", "-"), ("p99", "--")):
                y = t.timeline.values[f"{kind}_{stat}"]
                if np.isfinite(y).any():
                    ax.plot(x, y, color=_colour(i), lw=0.9, ls=style,
                            label="_nolegend_" if labelled else t.heading)
                    labelled = True
                    seen += list(y)
        if not seen:
            _no_data(ax, f"no {LATENCY_TITLES[kind].lower()} samples")
            continue
        ax.set_title("solid: p50 of each second, dashed: p99", fontsize="small", loc="right")
        if _wide(seen):
            ax.set_yscale("log")
        _segment_lines(ax, data.targets)
        ax.set_ylabel(f"{LATENCY_TITLES[kind]} (ms)")
        ax.set_xlabel("minutes since the load started")
        ax.grid(alpha=0.3)
        _legend(ax)
    return fig


def percentile_chart(data: ReportData) -> Figure:
    """Latency against percentile with x = 1 / (1 − q): each "nine" takes the same width."""
    fig, axes = _figure(len(LATENCY_KINDS), _headings(data))
    x = 1.0 / (1.0 - np.array(NINES_PERCENTILES) / 100.0)
    for ax, kind in zip(axes, LATENCY_KINDS, strict=True):
        seen: list[float] = []
        for i, t in enumerate(data.targets):
            stats = t.latency[kind]
            y = np.array([stats.percentiles_ms[p] for p in NINES_PERCENTILES])
            if stats.samples and np.isfinite(y).any():
                ax.plot(x, y, color=_colour(i), marker=".", ms=3, lw=1.2, label=t.heading)
                seen += list(y)
        if not seen:
            _no_data(ax, f"no {LATENCY_TITLES[kind].lower()} samples")
            continue
        ax.set_xscale("log")
        ax.set_xticks(_NINES_TICKS, _NINES_LABELS)
        ax.minorticks_off()
        if _wide(seen):
            ax.set_yscale("log")
        ax.set_ylabel(f"{LATENCY_TITLES[kind]} (ms)")
        ax.set_xlabel("percentile")
        ax.grid(alpha=0.3)
        _legend(ax)
    return fig


def boxplot_chart(data: ReportData) -> Figure:
    """Box p25–p75, median p50, whiskers p1 and p99, mean marked: all from the histograms."""
    fig, axes = _figure(len(LATENCY_KINDS),
                        panel_in=max(PANEL_IN, 0.3 + BOX_IN * len(data.targets)))
    for ax, kind in zip(axes, LATENCY_KINDS, strict=True):
        boxes: list[dict[str, Any]] = []
        colours: list[str] = []
        span: list[float] = []
        for i, t in enumerate(data.targets):
            s = t.latency[kind]
            if not s.samples:
                continue
            p = s.percentiles_ms
            boxes.append({"label": t.heading, "whislo": p[1.0], "q1": p[25.0], "med": p[50.0],
                          "q3": p[75.0], "whishi": p[99.0], "mean": s.mean_ms, "fliers": []})
            colours.append(_colour(i))
            span += [p[1.0], p[99.0]]
        if not boxes:
            _no_data(ax, f"no {LATENCY_TITLES[kind].lower()} samples")
            continue
        artists = ax.bxp(boxes, showmeans=True, patch_artist=True, orientation="horizontal",
                         medianprops={"color": "black"},
                         meanprops={"marker": "^", "markerfacecolor": "black",
                                    "markeredgecolor": "black"})
        for patch, colour in zip(artists["boxes"], colours, strict=True):
            patch.set_facecolor(colour)
            patch.set_alpha(0.5)
        ax.invert_yaxis()  # first target on top
        if _wide(span):
            ax.set_xscale("log")
        ax.set_xlabel(f"{LATENCY_TITLES[kind]} (ms)")
        ax.grid(alpha=0.3, axis="x")
    return fig


def lag_chart(data: ReportData) -> Figure:
    fig, (ax,) = _figure(1, _headings(data))
    if not _time_panel(ax, data.targets, "lag", trend=False):
        _no_data(ax, "no consumer lag was measured")
    _legend(ax)
    return fig


def resources_chart(data: ReportData) -> Figure:
    fig, axes = _figure(2, _headings(data))
    for ax, series in zip(axes, ("cpu_percent", "memory_mb"), strict=True):
        if not _time_panel(ax, data.targets, series, trend=False):
            _no_data(ax, f"no {SERIES_BY_NAME[series].title} was measured")
        _legend(ax)
    return fig


CHARTS: dict[str, Callable[[ReportData], Figure]] = {
    "throughput": throughput_chart,
    "latency_over_time": latency_over_time_chart,
    "latency_percentiles": percentile_chart,
    "latency_boxplot": boxplot_chart,
    "lag": lag_chart,
    "resources": resources_chart,
}


def render_charts(data: ReportData) -> dict[str, bytes]:
    """Every chart as PNG bytes, by name (the file stem in charts/)."""
    return {name: _png(draw(data)) for name, draw in CHARTS.items()}
