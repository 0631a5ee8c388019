"""The detail screen of one target (Enter on the selected column): per-partition rates, lag
and time lag (each subscription's with its status word above them), per-consumer rates, lag
and the partitions each holds, per-broker CPU, memory, disk and network, the latency
percentiles over the chart window
(a table and their curve on a "nines" axis), the broker metrics the platform declares (a panel
per broker: each value now, a sparkline of the latencies, the broker's own names), and the
target's events. Esc goes back; the
figures follow the run (or the replay) as the columns do.

Per-partition rates come from the broker counters `partition.<n>.produced` and
`partition.<n>.consumed` (messages in the interval) and per-broker figures from
`broker.<name>.cpu_percent` and `broker.<name>.memory_bytes`, where the platform's collectors
report them (docs/run-format.md, broker table); a platform without them shows the lag alone
and the stack's total. Per-consumer figures come from the ticks' `consumers` (the load
generator's own counts, and the partitions each consumer's client or driver holds).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from rich.cells import cell_len, set_cell_size
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen

from loadgen.core.brokermetrics import BrokerMetrics, unit_of
from loadgen.core.histogram import HistogramSnapshot, percentiles
from loadgen.core.ticks import ConsumerStat, LagStatus, Tick, partition_list
from loadgen.status import nodes_text
from loadgen.timelag import seconds_text, time_lag_text
from tui import formatting as fmt
from tui.charts import area_chart
from tui.history import BROKER_METRIC_POINTS, NS_PER_MS, ChartView, TargetHistory
from tui.widgets import RichLines

PERCENTILES = (50.0, 90.0, 99.0, 99.9, 99.99)
SORTS = ("partition", "produce", "consume", "lag", "behind")
CONSUMER_SORTS = ("consumer", "held", "consume", "lag")
PARTITIONS_WIDTH = 24  # the consumers table's partitions column, at most (80 columns)
EVENTS_SHOWN = 12  # the newest; the run's events table has them all


@dataclass(frozen=True, slots=True)
class PartitionRow:
    partition: int
    produce: float  # msg/s over the recent ticks; NaN when the platform does not count it
    consume: float
    lag: float  # messages, at the latest tick; NaN when not measured
    behind: float = math.nan  # the exact time lag (s) at the latest tick; NaN when not known
    leader: bool = True  # False: the partition had no leader at the latest tick


def _counter_parts(name: str, prefix: str) -> tuple[str, str] | None:
    """('0', 'produced') for 'partition.0.produced' with prefix 'partition'."""
    head, _, rest = name.partition(".")
    if head != prefix or "." not in rest:
        return None
    key, _, field = rest.rpartition(".")
    return key, field


def partition_rows(ticks: Iterable[Tick]) -> list[PartitionRow]:
    """Per partition: produce and consume rates over `ticks`, lag at the last of them."""
    sums: dict[int, dict[str, float]] = {}
    seconds = 0.0
    last: Tick | None = None
    for tick in ticks:
        last = tick
        seconds += tick.interval_s
        for name, value in tick.broker.items():
            parts = _counter_parts(name, "partition")
            if parts is None or not parts[0].isdigit():
                continue
            sums.setdefault(int(parts[0]), {})[parts[1]] = (
                sums.get(int(parts[0]), {}).get(parts[1], 0.0) + value)
    lag = last.lag if last is not None else None
    lags = dict(lag.per_partition) if lag is not None else {}
    behind = lag.time.per_partition if lag is not None and lag.time is not None else {}
    leaderless = set(lag.leaderless) if lag is not None else set()
    rows = []
    for p in sorted(set(sums) | set(lags)):
        counted = sums.get(p, {})
        produce, consume = (counted[key] / seconds if key in counted and seconds > 0 else math.nan
                            for key in ("produced", "consumed"))
        rows.append(PartitionRow(p, produce, consume, float(lags[p]) if p in lags else math.nan,
                                 behind.get(p, math.nan), p not in leaderless))
    return rows


def behind_cell(row: PartitionRow) -> str:
    """A partition's time lag as the partitions table writes it."""
    return "no leader" if not row.leader else seconds_text(row.behind)


def subscriptions_text(tick: Tick | None) -> Text:
    """The time lag in words and each subscription's own, with its status word."""
    if tick is None or tick.lag is None:
        return Text("time lag –", style="dim")
    text = Text.assemble(("time lag ", "dim"), time_lag_text(tick), no_wrap=True,
                         overflow="ellipsis")
    time_lag = tick.lag.time
    if time_lag is not None and tick.lag_s_exact:
        for sub, word in time_lag.status.items():
            seconds = seconds_text(time_lag.per_subscription.get(sub, math.nan))
            text.append(f" · {sub.removeprefix('streambench-')} {seconds} ")
            text.append(str(word), style="bold" if word is not LagStatus.OK else "")
    return text


def sort_rows(rows: list[PartitionRow], by: str) -> list[PartitionRow]:
    """By partition number ascending; by a figure largest first (unknown figures last)."""
    if by == "partition":
        return sorted(rows, key=lambda r: r.partition)
    value = {"produce": lambda r: r.produce, "consume": lambda r: r.consume,
             "lag": lambda r: r.lag, "behind": lambda r: r.behind}[by]
    return sorted(rows, key=lambda r: (not math.isfinite(value(r)),
                                       -value(r) if math.isfinite(value(r)) else 0, r.partition))


@dataclass(frozen=True, slots=True)
class ConsumerRow:
    key: tuple[int, str, int]  # (topic, subscription, index): the name order
    name: str
    partitions: tuple[int, ...] | None  # held at the latest tick; None when not known
    shared: bool
    consume: float  # msg/s over the recent ticks
    lag: float  # messages of the partitions it holds alone, at the latest tick; NaN if unknown


def _key(c: ConsumerStat) -> tuple[int, str, int]:
    return (c.topic, c.subscription, c.index)


def consumer_rows(ticks: Iterable[Tick]) -> list[ConsumerRow]:
    """Per consumer of the latest tick that has them: its rate over `ticks`, the partitions
    it holds now, and its lag: the sum of its partitions' lag, known when it holds them alone
    and the target has one subscription of one topic (the per-partition lag is summed over
    subscriptions)."""
    sums: dict[tuple[int, str, int], int] = {}
    seconds = 0.0
    latest: Tick | None = None
    for tick in ticks:
        seconds += tick.interval_s
        for c in tick.consumers:
            sums[_key(c)] = sums.get(_key(c), 0) + c.consumed
        if tick.consumers:
            latest = tick
    if latest is None:
        return []
    lags = latest.lag.per_partition if latest.lag is not None else {}
    one_group = len({(c.topic, c.subscription) for c in latest.consumers}) == 1
    rows = []
    for c in latest.consumers:
        lag = math.nan
        if (one_group and not c.shared and c.partitions is not None
                and all(p in lags for p in c.partitions)):
            lag = float(sum(lags[p] for p in c.partitions))
        rows.append(ConsumerRow(_key(c), c.name, c.partitions, c.shared,
                                sums.get(_key(c), 0) / seconds if seconds > 0 else math.nan, lag))
    return rows


def sort_consumers(rows: list[ConsumerRow], by: str) -> list[ConsumerRow]:
    """By name ascending; by the partitions held, the rate or the lag largest first (unknown
    figures last)."""
    if by == "consumer":
        return sorted(rows, key=lambda r: r.key)

    def value(r: ConsumerRow) -> float:
        if by == "held":
            return math.nan if r.partitions is None else float(len(r.partitions))
        return r.consume if by == "consume" else r.lag

    return sorted(rows, key=lambda r: (not math.isfinite(value(r)),
                                       -value(r) if math.isfinite(value(r)) else 0, r.key))


def held_text(row: ConsumerRow) -> str:
    """The partitions a consumer holds, as the consumers table writes them."""
    if row.partitions is None:
        return "broker assigns"
    return partition_list(row.partitions) + (" shared" if row.shared else "")


@dataclass(frozen=True, slots=True)
class BrokerRow:
    name: str
    cpu: float  # % of a core
    memory: float  # bytes
    disk_read: float  # bytes/s; NaN when not measured
    disk_write: float
    net_rx: float
    net_tx: float


def broker_rows(tick: Tick | None) -> list[BrokerRow]:
    """Per broker where the collectors report them one by one, else one row for the whole
    stack: CPU %, memory, and disk and network rates over the tick."""
    if tick is None:
        return []
    seconds = tick.interval_s if tick.interval_s > 0 else math.nan
    found: dict[str, dict[str, float]] = {}
    for name, value in tick.broker.items():
        parts = _counter_parts(name, "broker")
        if parts is not None:
            found.setdefault(parts[0], {})[parts[1]] = value
    if found:
        return [BrokerRow(name, f.get("cpu_percent", math.nan), f.get("memory_bytes", math.nan),
                          *(f.get(key, math.nan) / seconds for key in (
                              "disk_read_bytes", "disk_write_bytes", "net_rx_bytes",
                              "net_tx_bytes")))
                for name, f in sorted(found.items())]
    r = tick.resources
    # the stack's network is known where its containers have a network of their own
    networked = bool(r.net_rx_bytes or r.net_tx_bytes)
    return [BrokerRow("all brokers", r.cpu_percent, float(r.memory_bytes or math.nan),
                      r.disk_read_bytes / seconds, r.disk_write_bytes / seconds,
                      r.net_rx_bytes / seconds if networked else math.nan,
                      r.net_tx_bytes / seconds if networked else math.nan)]


SPARK_CELLS = BROKER_METRIC_POINTS // 2  # a sparkline's width: two values per braille cell


def metric_value(value: float, unit: str) -> str:
    """A broker metric as the detail screen writes it: latencies in ms, bytes in MB."""
    if not fmt.known(value):
        return fmt.MISSING
    if unit == "seconds":
        return f"{fmt.millis(value * 1e3)} ms"
    if unit == "bytes":
        return f"{fmt.megabytes(value)} MB"
    if unit == "ratio":
        return f"{value:.2f}"
    return fmt.count(value) + ("/s" if unit == "per_second" else "")


def sparkline(values: Iterable[float]) -> str:
    """One row of braille, the newest value at the right, scaled to the largest shown."""
    points = list(values)
    finite = [v for v in points if math.isfinite(v)]
    top = max(finite) if finite else 0.0
    return area_chart(points, SPARK_CELLS, 1, top)[0] if top > 0 else ""


def broker_metrics_panel(history: TargetHistory, declared: BrokerMetrics | None) -> Text:
    """Per broker of the target: each metric's latest value, for the latencies a sparkline of
    the last BROKER_METRIC_POINTS ticks, and the broker's own name for it; a broker whose read failed says
    so and shows its last values."""
    tick = history.last
    metrics = tick.broker_metrics if tick is not None else None
    if metrics is None or not metrics.values:
        return Text(" none read yet" if declared is not None else " none for this platform",
                    style="dim")
    order = [m.name for m in declared.metrics] if declared is not None else []
    parts = Text(no_wrap=True, overflow="crop")  # a narrow terminal cuts the broker's names
    for i, (broker, values) in enumerate(sorted(metrics.values.items())):
        names = [n for n in order if n in values] + sorted(n for n in values if n not in order)
        rows = []
        for name in names:
            metric = declared.named(name) if declared is not None else None
            unit = unit_of(name)
            points = history.broker_metrics.get((broker, name), ())
            rows.append([name, metric_value(values[name], unit),
                         sparkline(points) if unit == "seconds" else "",
                         metric.native if metric is not None else ""])
        stale = broker in metrics.stale
        state = (f" stale: {metrics.problem or 'not read'} (last values read)" if stale
                 else "")
        parts.append(("\n" if i else "") + f" {broker}", style="bold")
        parts.append(state + "\n", style="bold" if stale else "")
        grid = _text_grid(["metric", "now", f"last {BROKER_METRIC_POINTS} s", "broker's name"],
                          rows, left=(0, 2, 3))
        if stale:
            grid.stylize("dim")
        parts.append_text(grid)
    return parts


def _rate(value: float) -> str:
    return f"{fmt.megabytes(value)} MB/s" if fmt.known(value) else fmt.MISSING


def nines_curve(e2e: HistogramSnapshot, publish: HistogramSnapshot, width: int = 36) -> Text:
    """The latency percentile curve on a "nines" axis: one row per percentile (p50, p90, p99,
    p99.9, p99.99, max), each series a bar on a shared logarithmic scale (█ end-to-end,
    ░ publish: told apart without colour)."""
    series = [(name, glyph, snap) for name, glyph, snap in (("e2e", "█", e2e), ("publish", "░", publish))
              if snap.total]
    values = {name: [float(v) / NS_PER_MS for v in percentiles(snap, list(PERCENTILES))]
              + [snap.max / NS_PER_MS] for name, _, snap in series}
    headers = ["", "", "ms", ""]
    shown = [v for vs in values.values() for v in vs if v > 0]
    if not shown:
        return _text_grid(headers, [], left=(0, 3), note="no samples yet", note_cells=["", "",
                                                                                     fmt.MISSING])
    low, high = math.log10(min(shown)), math.log10(max(shown))
    span = max(high - low, 1e-9)
    labels = [f"p{p:g}" for p in PERCENTILES] + ["max"]
    rows = []
    for i, label in enumerate(labels):
        for j, (name, glyph, _) in enumerate(series):
            value = values[name][i]
            size = 1 + round((math.log10(value) - low) / span * (width - 1)) if value > 0 else 0
            rows.append([label if j == 0 else "", name, fmt.millis(value), glyph * size])
    return _text_grid(headers, rows, left=(0, 3),
                      note=f"log scale {fmt.millis(10 ** low)} … {fmt.millis(10 ** high)} ms")


def clock_lines(history: TargetHistory) -> list[Text]:
    """On a cluster: the worst clock bound the run's e2e samples carried and the samples
    below zero (counted as 0); then each load node's share at the last tick, its load actor's
    own figures and its clock against streambench's."""
    tick = history.last
    if tick is None or not (tick.nodes or nodes_text(tick) or history.clock_bound_worst_ns or
                            history.below_zero_total):
        return []
    note = (f" e2e timed on streambench's clock: worst bound ±"
            f"{history.clock_bound_worst_ns / NS_PER_MS:.3f} ms, "
            f"{history.below_zero_total:,} sample(s) below zero (counted as 0)")
    lines = [Text(note, style="dim", no_wrap=True, overflow="ellipsis")]
    late = nodes_text(tick).removeprefix(" | ")
    if late:
        lines.append(Text(f" load nodes at the last tick: {late}", style="bold",
                          no_wrap=True, overflow="ellipsis"))
    if tick.nodes:
        clocks = {c.node: c for c in tick.clocks}
        per_s = 1 / tick.interval_s if tick.interval_s > 0 else float("nan")
        rows = []
        for n in tick.nodes:
            clock = clocks.get(n.node)
            rows.append([n.node[:12], n.host, fmt.count(n.produced * per_s),
                         fmt.count(n.consumed * per_s), fmt.percent(n.cpu_percent),
                         fmt.millis(n.loop_lag_ms), fmt.megabytes(n.memory_bytes),
                         fmt.MISSING if clock is None else f"{clock.offset_ns / NS_PER_MS:+.3f}",
                         fmt.MISSING if clock is None else f"±{clock.bound_ns / NS_PER_MS:.3f}",
                         n.saturated or "no"])
        lines += [Text(""), Text("load nodes (last tick; clock in ms against streambench's)",
                                 style="bold"),
                  _text_grid(["node", "host", "produce/s", "consume/s", "cpu", "loop lag ms",
                              "memory MB", "clock", "bound", "saturated"], rows,
                             left=(0, 1, 9))]
    return lines


def latency_row(snap: HistogramSnapshot) -> list[str]:
    if not snap.total:
        return [fmt.MISSING] * (len(PERCENTILES) + 1) + ["0"]
    values = [float(v) / NS_PER_MS for v in percentiles(snap, list(PERCENTILES))]
    return [fmt.millis(v) for v in values] + [fmt.millis(snap.max / NS_PER_MS), fmt.count(snap.total)]


def _text_grid(headers: list[str], rows: list[list[str]], left: tuple[int, ...] = (0,),
               note: str | None = None, note_cells: list[str] | None = None) -> Text:
    """What _grid draws for plain one-line cells (the `left` columns left, the others right,
    one space on each side of a cell, the header bold), built as text: a table laid out by Rich
    each second is most of the detail screen's cost. `note` is the last cell of a last row,
    dim, after `note_cells` (blank by default); its width counts in its column's."""
    last = len(headers) - 1
    before = note_cells if note_cells is not None else [""] * last
    noted = [*rows, [*before, note]] if note is not None else rows
    widths = [max([cell_len(h), *(cell_len(r[i]) for r in noted)]) for i, h in enumerate(headers)]

    def cell(i: int, c: str) -> str:
        return f" {c.ljust(widths[i]) if i in left else c.rjust(widths[i])} "

    def line(cells: list[str]) -> str:
        return "".join(cell(i, c) for i, c in enumerate(cells))

    text = Text(line(headers), style="bold", no_wrap=True, overflow="crop")
    if rows:
        text.append("\n" + "\n".join(line(r) for r in rows), style="not bold")
    if note is not None:
        text.append("\n" + line(before), style="not bold")
        text.append(cell(last, note), style="not bold dim")
    return text


def _ellipsis(text: str, width: int) -> str:
    """`text` cut to `width` cells with an ellipsis, as a table column's max_width cuts it."""
    return text if cell_len(text) <= width else set_cell_size(text, width - 1) + "…"


def _grid(*headers: str) -> Table:
    table = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold")
    for i, header in enumerate(headers):
        table.add_column(header, justify="left" if i == 0 else "right", no_wrap=True)
    return table


class DetailScreen(Screen[None]):
    """One target in detail; the app's keys still work (esc back, w window, x screenshot)."""

    def __init__(self, history: TargetHistory, view: ChartView, hint: str,
                 broker_metrics: BrokerMetrics | None = None) -> None:
        super().__init__()
        self.history = history
        self.broker_metrics = broker_metrics  # the platform's declaration, when known
        self.view = view
        self.hint = hint
        self.sort = "lag"
        self.consumer_sort = "consumer"

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="detail"):
            yield RichLines(self.body(), id="detail-body")

    def on_mount(self) -> None:
        self.query_one("#detail", VerticalScroll).border_title = f"{self.history.label} · detail"

    def next_sort(self) -> None:
        self.sort = SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)]
        self.show()

    def next_consumer_sort(self) -> None:
        self.consumer_sort = CONSUMER_SORTS[(CONSUMER_SORTS.index(self.consumer_sort) + 1)
                                            % len(CONSUMER_SORTS)]
        self.show()

    def show(self) -> None:
        if self.is_mounted:
            self.query_one("#detail-body", RichLines).update(self.body())

    def consumers_table(self, ticks: list[Tick]) -> RenderableType:
        rows = sort_consumers(consumer_rows(ticks), self.consumer_sort)
        titles = {"consumer": "consumer", "held": "held", "consume": "consume/s", "lag": "lag"}
        marked = {name: title + ((" ▲" if name == "consumer" else " ▼")
                                 if name == self.consumer_sort else "")
                  for name, title in titles.items()}
        headers = [marked["consumer"], marked["held"], "partitions", marked["consume"],
                   marked["lag"]]
        if rows:  # as text, like the partitions: a target may have a hundred consumers
            return _text_grid(headers, [
                [r.name, fmt.MISSING if r.partitions is None else str(len(r.partitions)),
                 _ellipsis(held_text(r), PARTITIONS_WIDTH), fmt.count(r.consume),
                 fmt.count(r.lag)] for r in rows], left=(0, 2))
        table = _grid(*headers)
        table.columns[2].justify = "left"
        table.add_row("–", fmt.MISSING, Text("no consumer figures", style="dim"),
                      fmt.MISSING, fmt.MISSING)
        return table

    def body(self) -> RenderableType:
        history = self.history
        start, end = self.view.span()
        window = self.view.window_name()
        head = Text.assemble(
            (f"window {window}", "bold"),
            (f" (0:00 … {fmt.duration(end - start)}) · " if self.view.anchored()
             else f" (-{fmt.duration(end - start)} … now) · "),
            (self.hint, "dim"), no_wrap=True, overflow="ellipsis")

        rows = sort_rows(partition_rows(history.recent_ticks), self.sort)
        titles = {"partition": "partition", "produce": "produce/s", "consume": "consume/s",
                  "lag": "lag", "behind": "behind"}
        cells = [[str(r.partition), fmt.count(r.produce), fmt.count(r.consume), fmt.count(r.lag),
                  behind_cell(r)]
                 for r in rows] or [["–", fmt.MISSING, fmt.MISSING, fmt.MISSING, fmt.MISSING]]
        parts = _text_grid([title + ((" ▲" if name == "partition" else " ▼") if name == self.sort
                                     else "") for name, title in titles.items()], cells)

        consumers = self.consumers_table(history.recent_ticks)

        brokers = _text_grid(
            ["broker", "cpu", "memory", "disk read", "disk write", "net in", "net out"],
            [[b.name, fmt.percent(b.cpu),
              f"{fmt.megabytes(b.memory)} MB" if fmt.known(b.memory) else fmt.MISSING,
              _rate(b.disk_read), _rate(b.disk_write), _rate(b.net_rx), _rate(b.net_tx)]
             for b in broker_rows(history.last)])

        e2e, publish, delay = history.latency.merged(None if self.view.window_s is None
                                                     else start)
        latency = _text_grid(["ms", *(f"p{p:g}" for p in PERCENTILES), "max", "samples"],
                             [["e2e", *latency_row(e2e)], ["publish", *latency_row(publish)],
                              ["delay", *latency_row(delay)]])
        delay_note = Text(" delay: the generator's own wait from each message's slot to its send "
                          "(e2e counts it; none at max rate)", style="dim", no_wrap=True,
                          overflow="ellipsis")
        curve = nines_curve(e2e, publish)
        clocks = clock_lines(history)

        events = _grid("time", "event")
        events.columns[0].min_width = 8
        events.columns[1].justify = "left"
        newest = list(history.events)[-EVENTS_SHOWN:]
        for e in reversed(newest):
            when = (datetime.fromtimestamp(e.time_ns / 1e9).strftime("%H:%M:%S")
                    if e.time_ns is not None else "")
            events.add_row(when, Text(f"{e.kind}: {e.detail}", overflow="fold"))
        if not history.events:
            events.add_row("", Text("none", style="dim"))
        elif history.event_count > len(newest):
            events.add_row("", Text(f"… {history.event_count - len(newest):,} older: the run's "
                                    "events table has them all", style="dim"))

        recent = f"{history.recent_span_s or history.recent_window_s:.0f} s"
        return Group(
            head, Text(""),
            Text(f"partitions (rates over the last {recent}; o sorts)", style="bold"),
            subscriptions_text(history.last), parts,
            Text(""), Text(f"consumers (rates over the last {recent}; O sorts)", style="bold"),
            consumers,
            Text(""), Text("brokers", style="bold"), brokers,
            Text(""), Text(f"latency over the window ({window})", style="bold"), latency,
            delay_note, *clocks,
            Text(""), Text("broker metrics" + (f" ({self.broker_metrics.source})"
                                               if self.broker_metrics is not None else ""),
                           style="bold"),
            broker_metrics_panel(history, self.broker_metrics),
            Text(""), Text(f"events ({history.event_count}, newest first)", style="bold"), events,
            Text(""), Text(f"latency percentiles over the window ({window}), nines axis",
                           style="bold"), curve,
        )
