"""Per-target dashboard state: the latest tick's figures and a bounded history per metric.

Pure data and maths, no Textual: every figure the panels show is computed here once, when a
tick arrives, so rendering (and a paused display catching up) only formats numbers.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from loadgen.core.histogram import HistogramSnapshot, percentiles
from loadgen.core.ticks import Tick

HISTORY_WINDOW_S = 300.0  # the charts' default window: the last five minutes
# the windows the window key cycles through; None is the whole run
WINDOWS: tuple[float | None, ...] = (60.0, 300.0, None)
MAX_POINTS = 200_000  # points kept per series: over two days of one-second ticks
FINE_WINDOW_S = 300.0  # latency histograms kept per tick for this long, then per minute
RECENT_WINDOW_S = 10.0  # latency merged over the last ten seconds
NS_PER_MS = 1e6
EVENTS_KEPT = 200
BROKER_METRIC_POINTS = 40  # each broker metric's latest values kept, for its sparkline
# events drawn as a marker on the charts: changes of the load and faults
MARKED_KINDS = ("rate", "producers", "consumers", "node-lost")
MARKED_PREFIX = ("fault-", "net-")  # a broker's faults and its links'

Reducer = Callable[[Sequence[float]], float]


def mean_of(values: Sequence[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan


def max_of(values: Sequence[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return max(finite) if finite else math.nan


@dataclass(frozen=True, slots=True)
class Metric:
    """One charted quantity: how to read it from a tick and how to fold several points into
    one chart column (max for latency and lag so a spike never disappears)."""

    title: str
    unit: str
    read: Callable[[Tick], float]
    reduce: Reducer


def _e2e_p99_ms(tick: Tick) -> float:
    snap = tick.e2e_latency
    return snap.percentile(99.0) / NS_PER_MS if snap.total else math.nan


def _lag(tick: Tick) -> float:
    return float(tick.lag.total) if tick.lag is not None else math.nan


METRICS: dict[str, Metric] = {
    "produce_rate": Metric("produce", "/s", lambda t: t.produce_rate, mean_of),
    "e2e_p99": Metric("e2e p99", "ms", _e2e_p99_ms, max_of),
    "lag": Metric("lag", "", _lag, max_of),
    "cpu": Metric("cpu", "%", lambda t: t.resources.cpu_percent, mean_of),
    "consume_rate": Metric("consume", "/s", lambda t: t.consume_rate, mean_of),
    "lag_s": Metric("behind", "s", lambda t: t.lag_s, max_of),
}


def metric_values(tick: Tick) -> tuple[float, ...]:
    """The tick's value of each metric, in METRICS order."""
    return tuple(metric.read(tick) for metric in METRICS.values())


@dataclass(frozen=True, slots=True)
class LatencySummary:
    """Percentiles of one latency histogram in milliseconds (NaN when it is empty)."""

    p50: float
    p99: float
    p999: float
    max: float
    count: int

    @staticmethod
    def of(snap: HistogramSnapshot) -> LatencySummary:
        total = snap.total
        if not total:
            return LatencySummary(math.nan, math.nan, math.nan, math.nan, 0)
        p50, p99, p999 = percentiles(snap, [50.0, 99.0, 99.9]).tolist()
        return LatencySummary(p50 / NS_PER_MS, p99 / NS_PER_MS, p999 / NS_PER_MS,
                              snap.max / NS_PER_MS, total)


EMPTY_LATENCY = LatencySummary.of(HistogramSnapshot.empty())


class Series:
    """One metric's points (time in s, value), kept for the whole run (up to MAX_POINTS);
    `values()` and `times()` give the last `window_s` seconds."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._times: list[float] = []
        self._values: list[float] = []

    def add(self, time_s: float, value: float) -> None:
        self._times.append(time_s)
        self._values.append(value)
        if len(self._times) > MAX_POINTS:  # drop the oldest tenth at once, not one by one
            del self._times[:MAX_POINTS // 10]
            del self._values[:MAX_POINTS // 10]

    def clear(self) -> None:
        self._times.clear()
        self._values.clear()

    def between(self, start_s: float, end_s: float) -> tuple[list[float], list[float]]:
        """The times and values of the points with start_s < time <= end_s."""
        lo = bisect.bisect_right(self._times, start_s)
        hi = bisect.bisect_right(self._times, end_s)
        return self._times[lo:hi], self._values[lo:hi]

    def values(self) -> list[float]:
        if not self._times:
            return []
        return self.between(self._times[-1] - self.window_s - 1e-9, self._times[-1])[1]

    def times(self) -> list[float]:
        if not self._times:
            return []
        return self.between(self._times[-1] - self.window_s - 1e-9, self._times[-1])[0]

    @property
    def first_time(self) -> float | None:
        return self._times[0] if self._times else None

    def __len__(self) -> int:
        return len(self.values())


def downsample(values: Sequence[float], points: int, reduce: Reducer) -> list[float]:
    """At most `points` values: consecutive runs folded with `reduce`, newest last."""
    n = len(values)
    if points <= 0:
        return []
    if n <= points:
        return list(values)
    return [reduce(values[i * n // points:(i + 1) * n // points]) for i in range(points)]


def time_slots(times: Sequence[float], values: Sequence[float], start_s: float, end_s: float,
               slots: int, reduce: Reducer, hold_s: float = 2.0) -> list[float]:
    """The points of (start_s, end_s] in `slots` equal slots of time, each slot's points folded
    with `reduce`; a slot without a point of its own repeats the slot before it when that is
    at most `hold_s` older (ticks sparser than the slots), else it is NaN (nothing known).

    (Charts call it for every chart at every repaint, where most slots hold one point or
    none: only the slots with points are kept, and a slot's one point is its value as the
    bundled reducers would give it, without a call.)"""
    if slots <= 0 or end_s <= start_s:
        return []
    slot_s = (end_s - start_s) / slots
    ceil, last_slot = math.ceil, slots - 1
    held: dict[int, list[float]] = {}
    for t, v in zip(times, values, strict=True):
        i = ceil((t - start_s) / slot_s) - 1
        if i < 0:
            i = 0
        elif i > last_slot:
            i = last_slot
        points = held.get(i)
        if points is None:
            held[i] = [v]
        else:
            points.append(v)
    mean, most = reduce is mean_of, reduce is max_of
    folded: dict[int, float] = {}
    for i, points in held.items():
        if len(points) == 1 and (mean or most):
            v = points[0]
            # mean_of([v]) is sum([v]) / 1 = 0 + v; max_of([v]) is v; both NaN unless finite
            folded[i] = (0 + v if mean else v) if math.isfinite(v) else math.nan
        else:
            folded[i] = reduce(points)
    out: list[float] = []
    last, last_i = math.nan, -slots
    for i in range(slots):
        if i in folded:
            last, last_i = folded[i], i
            out.append(last)
        elif (i - last_i) * slot_s <= hold_s:
            out.append(last)
        else:
            out.append(math.nan)
    return out


@dataclass(frozen=True, slots=True)
class TargetEvent:
    kind: str
    detail: str
    time_ns: int | None = None


@dataclass(frozen=True, slots=True)
class LatencyPoint:
    """One tick's (or, for older stretches, one minute's) latency histograms."""

    time_s: float
    e2e: HistogramSnapshot
    publish: HistogramSnapshot
    delay: HistogramSnapshot  # the generator's wait from each slot to its send


class LatencyHistory:
    """The e2e, publish and publish-delay histograms of the run, to merge over any window: per tick for the
    last FINE_WINDOW_S seconds, merged per minute before that (memory stays small on long
    runs; a whole-run window is exact, a window reaching back beyond the per-tick stretch
    rounds its start to a minute)."""

    def __init__(self) -> None:
        self.fine: deque[LatencyPoint] = deque()
        self.coarse: list[LatencyPoint] = []
        self._folding: list[LatencyPoint] = []

    def add(self, time_s: float, e2e: HistogramSnapshot, publish: HistogramSnapshot,
            delay: HistogramSnapshot) -> None:
        self.fine.append(LatencyPoint(time_s, e2e, publish, delay))
        while self.fine and self.fine[0].time_s < time_s - FINE_WINDOW_S:
            old = self.fine.popleft()
            if self._folding and int(old.time_s // 60) != int(self._folding[0].time_s // 60):
                self._fold()
            self._folding.append(old)

    def _fold(self) -> None:
        part = self._folding
        self.coarse.append(LatencyPoint(part[-1].time_s,
                                        HistogramSnapshot.merge([p.e2e for p in part]),
                                        HistogramSnapshot.merge([p.publish for p in part]),
                                        HistogramSnapshot.merge([p.delay for p in part])))
        self._folding = []

    def clear(self) -> None:
        self.fine.clear()
        self.coarse.clear()
        self._folding = []

    def merged(self, start_s: float | None
               ) -> tuple[HistogramSnapshot, HistogramSnapshot, HistogramSnapshot]:
        """(e2e, publish, publish delay) merged over the points after start_s (None: all)."""
        points = [p for p in (*self.coarse, *self._folding, *self.fine)
                  if start_s is None or p.time_s > start_s]
        return (HistogramSnapshot.merge([p.e2e for p in points]),
                HistogramSnapshot.merge([p.publish for p in points]),
                HistogramSnapshot.merge([p.delay for p in points]))


class TargetHistory:
    """Everything the dashboard knows about one target."""

    def __init__(self, label: str, window_s: float = HISTORY_WINDOW_S,
                 recent_s: float = RECENT_WINDOW_S) -> None:
        self.label = label
        self.window_s = window_s
        self.recent_window_s = recent_s
        self.series = {name: Series(window_s) for name in METRICS}
        self.latency = LatencyHistory()
        self.events: deque[TargetEvent] = deque(maxlen=EVENTS_KEPT)
        self.marks: deque[float] = deque(maxlen=EVENTS_KEPT)  # times (s) of changes and faults
        self._recent: deque[Tick] = deque()
        # each broker metric's latest values, by (broker, name); NaN where it was stale
        self.broker_metrics: dict[tuple[str, str], deque[float]] = {}
        self.clear()

    def clear(self) -> None:
        """Forget everything (a replay going back in time starts again from nothing)."""
        self.last: Tick | None = None
        self.ticks = 0
        for series in self.series.values():
            series.clear()
        self.latency.clear()
        self.e2e = EMPTY_LATENCY
        self.e2e_recent = EMPTY_LATENCY
        self.publish = EMPTY_LATENCY
        self.send_errors_total = 0
        # e2e across a cluster's clocks: samples below zero, the worst bound a tick carried
        self.below_zero_total = 0
        self.clock_bound_worst_ns = 0
        self.event_count = 0
        self.events.clear()
        self.marks.clear()
        self._recent.clear()
        self.broker_metrics.clear()
        # what was done to the load on purpose, from the events: the producers stopped, and
        # how many brokers a fault paused or stopped (the rate falls short for those reasons)
        self.producers_stopped = False
        self.brokers_paused = 0
        self.brokers_down = 0

    def add(self, tick: Tick, *, summarise: bool = True,
            values: Sequence[float] | None = None) -> None:
        """Take a tick in. With summarise=False (a replay catching up) the latest-tick latency
        summaries are left for `summarise()` to compute once at the end; `values` are the
        tick's metric_values(), when the caller kept them from an earlier pass."""
        self.last = tick
        self.ticks += 1
        self.send_errors_total += tick.send_errors
        self.below_zero_total += tick.e2e_below_zero
        self.clock_bound_worst_ns = max(self.clock_bound_worst_ns, tick.e2e_clock_bound_ns)
        time_s = tick.time_ns / 1e9
        for series, value in zip(self.series.values(), values or metric_values(tick), strict=True):
            series.add(time_s, value)
        self.latency.add(time_s, tick.e2e_latency, tick.publish_latency, tick.publish_delay)
        self._recent.append(tick)
        if tick.broker_metrics is not None:
            self._add_broker_metrics(tick)
        horizon = tick.time_ns - int(self.recent_window_s * 1e9)
        while self._recent and self._recent[0].time_ns <= horizon:
            self._recent.popleft()
        if summarise:
            self.summarise()

    def _add_broker_metrics(self, tick: Tick) -> None:
        metrics = tick.broker_metrics
        assert metrics is not None
        for broker, values in metrics.values.items():
            stale = broker in metrics.stale
            for name, value in values.items():
                points = self.broker_metrics.get((broker, name))
                if points is None:
                    points = self.broker_metrics[(broker, name)] = deque(
                        maxlen=BROKER_METRIC_POINTS)
                points.append(math.nan if stale else value)

    def summarise(self) -> None:
        tick = self.last
        if tick is None:
            return
        self.e2e = LatencySummary.of(tick.e2e_latency)
        self.publish = LatencySummary.of(tick.publish_latency)
        self.e2e_recent = LatencySummary.of(
            HistogramSnapshot.merge([t.e2e_latency for t in self._recent]))

    def add_event(self, kind: str, detail: str, time_ns: int | None = None) -> None:
        self.event_count += 1
        self.events.append(TargetEvent(kind, detail, time_ns))
        if kind == "producers":  # "running → stopped", "stopped → running"
            self.producers_stopped = detail.rstrip().endswith("stopped")
        elif kind == "fault-pause":
            self.brokers_paused += 1
        elif kind == "fault-resume":
            self.brokers_paused = max(0, self.brokers_paused - 1)
        elif kind == "fault-kill":
            self.brokers_down += 1
        elif kind in ("fault-start", "fault-restart"):
            self.brokers_down = max(0, self.brokers_down - (kind == "fault-start"))
            if kind == "fault-restart":  # a restart also ends a pause
                self.brokers_paused = max(0, self.brokers_paused - 1)
        if time_ns is not None and (kind in MARKED_KINDS or kind.startswith(MARKED_PREFIX)):
            self.marks.append(time_ns / 1e9)

    @property
    def recent_ticks(self) -> list[Tick]:
        """The ticks of the last `recent_window_s` seconds, oldest first."""
        return list(self._recent)

    @property
    def recent_span_s(self) -> float:
        """Seconds the merged latency actually covers (less than the window at the start)."""
        return sum(t.interval_s for t in self._recent)


def mark_columns(marks: Sequence[float], start_s: float, end_s: float, width: int) -> set[int]:
    """The chart columns (0 = left, `width` cells over the time span (start_s, end_s], two
    time slots a cell, as time_slots and area_chart lay them out) where each mark falls."""
    if width <= 0 or end_s <= start_s:
        return set()
    slot_s = (end_s - start_s) / (2 * width)
    columns = set()
    for m in marks:
        if m <= start_s - slot_s or m > end_s:
            continue
        slot = min(2 * width - 1, max(0, math.ceil((m - start_s) / slot_s) - 1))
        columns.add(slot // 2)
    return columns


class Baseline:
    """Another run's figures for one target, to draw under a column as a ghost series: each
    metric by the time since the load started (ticks' elapsed_s), so the two runs line up
    from their starts."""

    def __init__(self, name: str, ticks: Sequence[Tick]) -> None:
        self.name = name  # how the dashboard names it: "<run id>:<target>"
        self.series = {metric: Series(math.inf) for metric in METRICS}
        for tick in sorted(ticks, key=lambda t: t.elapsed_s):
            for metric, spec in METRICS.items():
                self.series[metric].add(tick.elapsed_s, spec.read(tick))


def load_offset(history: TargetHistory) -> float | None:
    """Wall-clock seconds at which the target's load started (tick time − elapsed)."""
    tick = history.last
    return tick.time_ns / 1e9 - tick.elapsed_s if tick is not None else None


@dataclass(frozen=True, slots=True)
class ChartScale:
    """What one chart shows: its series' lowest and highest value in the window, the top of
    its y axis, and whether that top is shared with the other columns."""

    low: float
    high: float
    top: float
    shared: bool


def _minutes(seconds: float) -> str:
    """m:ss of a window's length."""
    total = round(seconds)
    return f"{total // 60}:{total % 60:02d}"


class ChartView:
    """The charts' common settings: the time window (shared by every column, so their x axes
    line up) and, per metric, one y scale for all columns unless a column asked for its own."""

    def __init__(self, histories: dict[str, TargetHistory], window_index: int | None = None,
                 planned_s: float | None = None) -> None:
        self.histories = histories
        # a run planned shorter than the default window is shown whole, over its planned
        # length from its start (it fills the charts as it goes), then that window scrolls
        self.run_s = (planned_s if planned_s is not None and 0 < planned_s < HISTORY_WINDOW_S
                      else None)
        self.windows: tuple[float | None, ...] = (
            WINDOWS if self.run_s is None
            else (self.run_s, *(w for w in WINDOWS if w != self.run_s)))
        self.window_index = (window_index if window_index is not None
                             else self.windows.index(self.run_s if self.run_s is not None
                                                     else HISTORY_WINDOW_S))
        self.chart_page = 0  # which of the charts a column too short for all of them shows
        self.own_scale: set[str] = set()  # labels of the columns with a y scale of their own
        self.baselines: dict[str, Baseline] = {}  # per column label, drawn as a ghost series

    @property
    def window_s(self) -> float | None:
        return self.windows[self.window_index]

    @property
    def run_window(self) -> bool:
        """Whether the window is the run's planned length (from the start, then scrolling)."""
        return self.run_s is not None and self.window_s == self.run_s

    def cycle_window(self) -> None:
        self.window_index = (self.window_index + 1) % len(self.windows)

    def window_name(self) -> str:
        w = self.window_s
        if w is None:
            return "whole run"
        if self.run_window:
            return f"run {_minutes(w)}"
        return f"{w / 60:g} min"

    def _load_start(self) -> float | None:
        """When the first tick's second began (s), over every column; None before a tick."""
        firsts = [f for h in self.histories.values()
                  if (f := h.series["produce_rate"].first_time) is not None]
        return min(firsts) - 1.0 if firsts else None

    def anchored(self) -> bool:
        """Whether the window still starts at the run's start (the run window, before the
        run has gone on for longer than it)."""
        if not self.run_window or self.window_s is None:
            return False
        start = self._load_start()
        lasts = [h.last.time_ns / 1e9 for h in self.histories.values() if h.last is not None]
        return start is not None and max(lasts) <= start + self.window_s + 1e-9

    def toggle_own_scale(self, label: str) -> None:
        self.own_scale ^= {label}

    def span(self, slots: int | None = None) -> tuple[float, float]:
        """(start, end) in s of the window the charts show: it ends at the latest tick, but
        for the run window while the run is shorter than it, which starts at the run's start.

        With `slots` (the chart's time slots) and a window of fixed length, the end is the
        first multiple of the slot's length (window / slots) at or after the latest tick: the
        slots stay on one grid of time from tick to tick, so a chart moves by a whole slot
        when time crosses into a new one and, between those ticks, only its newest slot
        changes (with the end at the tick itself, every slot's share of the ticks, and so
        every line of the chart, changed at every tick)."""
        lasts = [h.last.time_ns / 1e9 for h in self.histories.values() if h.last is not None]
        if not lasts:
            return 0.0, self.window_s or 60.0
        end = max(lasts)
        if self.window_s is not None and self.anchored():
            start = self._load_start()
            assert start is not None
            return start, start + self.window_s
        if self.window_s is not None:
            if slots:
                slot_s = self.window_s / slots
                end = math.ceil(end / slot_s - 1e-9) * slot_s
            return end - self.window_s, end
        start = self._load_start()  # the first tick covers the second before it
        assert start is not None
        return start, max(end, start + 1.0)

    def _range(self, history: TargetHistory, metric: str, start: float, end: float
               ) -> tuple[float, float]:
        finite = [v for v in history.series[metric].between(start, end)[1] if math.isfinite(v)]
        if not finite:
            return math.nan, math.nan
        return min(finite), max(finite)

    def ghost(self, label: str, metric: str, start: float, end: float
              ) -> tuple[list[float], list[float]] | None:
        """The baseline's points of (start, end] on this column's wall clock, or None."""
        baseline = self.baselines.get(label)
        history = self.histories[label]
        offset = load_offset(history)
        if baseline is None or offset is None or history.last is None:
            return None
        end = min(end, history.last.time_ns / 1e9)  # as far as this column has come
        times, values = baseline.series[metric].between(start - offset, end - offset)
        return [t + offset for t in times], values

    def delta(self, label: str, metric: str, slots: int | None = None) -> float | None:
        """How far this column's mean over the window is from the baseline's mean over the
        same stretch of the run, in % of the baseline; None without a baseline or figures."""
        start, end = self.span(slots)
        ghost = self.ghost(label, metric, start, end)
        if ghost is None:
            return None
        mine = [v for v in self.histories[label].series[metric].between(start, end)[1]
                if math.isfinite(v)]
        base = [v for v in ghost[1] if math.isfinite(v)]
        if not mine or not base or sum(base) == 0:
            return None
        return (sum(mine) / len(mine) - sum(base) / len(base)) / (sum(base) / len(base)) * 100

    def _top(self, history: TargetHistory, metric: str, start: float, end: float) -> float:
        high = self._range(history, metric, start, end)[1]
        ghost = self.ghost(history.label, metric, start, end)
        if ghost is not None:  # the ghost fits under the axis too
            high = max((v for v in (high, *ghost[1]) if math.isfinite(v)), default=math.nan)
        if metric == "produce_rate" and history.last is not None:
            # the chart reads against the target rate
            high = max(high, history.last.target_rate) if math.isfinite(high) else high
        return high

    def scale(self, label: str, metric: str, slots: int | None = None) -> ChartScale:
        start, end = self.span(slots)
        history = self.histories[label]
        low, high = self._range(history, metric, start, end)
        own = label in self.own_scale or len(self.histories) < 2
        sharing = ([history] if own else
                   [h for lab, h in self.histories.items() if lab not in self.own_scale])
        tops = [self._top(h, metric, start, end) for h in sharing]
        top = max((v for v in tops if math.isfinite(v)), default=math.nan)
        return ChartScale(low, high, top if math.isfinite(top) else 0.0, not own)
