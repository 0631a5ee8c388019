"""Per-target dashboard state: the latest tick's figures and a bounded history per metric.

Pure data and maths, no Textual: every figure the panels show is computed here once, when a
tick arrives, so rendering (and a paused display catching up) only formats numbers.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from loadgen.histogram import HistogramSnapshot
from loadgen.tick import Tick

HISTORY_WINDOW_S = 300.0  # what the charts can show: the last five minutes
RECENT_WINDOW_S = 10.0  # latency merged over the last ten seconds
NS_PER_MS = 1e6
EVENTS_KEPT = 20
# events drawn as a marker on the charts: changes of the load and faults
MARKED_KINDS = ("rate", "producers", "consumers")
MARKED_PREFIX = "fault-"

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
    "produce_rate": Metric("msg/s", "/s", lambda t: t.produce_rate, mean_of),
    "e2e_p99": Metric("e2e p99", "ms", _e2e_p99_ms, max_of),
    "lag": Metric("lag", "", _lag, max_of),
    "cpu": Metric("cpu", "%", lambda t: t.resources.cpu_percent, mean_of),
}


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
        if not snap.total:
            return LatencySummary(math.nan, math.nan, math.nan, math.nan, 0)
        return LatencySummary(
            snap.percentile(50.0) / NS_PER_MS,
            snap.percentile(99.0) / NS_PER_MS,
            snap.percentile(99.9) / NS_PER_MS,
            snap.max / NS_PER_MS,
            snap.total,
        )


EMPTY_LATENCY = LatencySummary.of(HistogramSnapshot.empty())


class Series:
    """One metric's points (time in s, value) over a sliding time window."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._points: deque[tuple[float, float]] = deque()

    def add(self, time_s: float, value: float) -> None:
        self._points.append((time_s, value))
        horizon = time_s - self.window_s
        while self._points and self._points[0][0] < horizon:
            self._points.popleft()

    def values(self) -> list[float]:
        return [v for _, v in self._points]

    def times(self) -> list[float]:
        return [t for t, _ in self._points]

    def __len__(self) -> int:
        return len(self._points)


def downsample(values: Sequence[float], points: int, reduce: Reducer) -> list[float]:
    """At most `points` values: consecutive runs folded with `reduce`, newest last."""
    n = len(values)
    if points <= 0:
        return []
    if n <= points:
        return list(values)
    return [reduce(values[i * n // points:(i + 1) * n // points]) for i in range(points)]


@dataclass(frozen=True, slots=True)
class TargetEvent:
    kind: str
    detail: str


class TargetHistory:
    """Everything the dashboard knows about one target."""

    def __init__(self, label: str, window_s: float = HISTORY_WINDOW_S,
                 recent_s: float = RECENT_WINDOW_S) -> None:
        self.label = label
        self.last: Tick | None = None
        self.ticks = 0
        self.series = {name: Series(window_s) for name in METRICS}
        self.e2e = EMPTY_LATENCY
        self.e2e_recent = EMPTY_LATENCY
        self.publish = EMPTY_LATENCY
        self.send_errors_total = 0
        self.event_count = 0
        self.events: deque[TargetEvent] = deque(maxlen=EVENTS_KEPT)
        self.marks: deque[float] = deque(maxlen=EVENTS_KEPT)  # times (s) of changes and faults
        self.recent_window_s = recent_s
        self._recent: deque[Tick] = deque()

    def add(self, tick: Tick) -> None:
        self.last = tick
        self.ticks += 1
        self.send_errors_total += tick.send_errors
        time_s = tick.time_ns / 1e9
        for name, metric in METRICS.items():
            self.series[name].add(time_s, metric.read(tick))
        self._recent.append(tick)
        horizon = tick.time_ns - int(self.recent_window_s * 1e9)
        while self._recent and self._recent[0].time_ns <= horizon:
            self._recent.popleft()
        self.e2e = LatencySummary.of(tick.e2e_latency)
        self.publish = LatencySummary.of(tick.publish_latency)
        self.e2e_recent = LatencySummary.of(
            HistogramSnapshot.merge([t.e2e_latency for t in self._recent]))

    def add_event(self, kind: str, detail: str, time_ns: int | None = None) -> None:
        self.event_count += 1
        self.events.append(TargetEvent(kind, detail))
        if time_ns is not None and (kind in MARKED_KINDS or kind.startswith(MARKED_PREFIX)):
            self.marks.append(time_ns / 1e9)

    @property
    def recent_span_s(self) -> float:
        """Seconds the merged latency actually covers (less than the window at the start)."""
        return sum(t.interval_s for t in self._recent)


def mark_columns(times: Sequence[float], marks: Sequence[float], width: int) -> set[int]:
    """The chart columns (0 = left, `width` cells showing up to 2 × width points, newest at the
    right edge, as area_chart draws them) where the points at or just after each mark fall."""
    n = len(times)
    slots = 2 * width
    columns = set()
    for m in marks:
        if not times or m < times[0] - 1.0 or m > times[-1]:
            continue
        i = next((k for k, t in enumerate(times) if t >= m), n - 1)
        slot = (slots - n) + i if n <= slots else i * slots // n
        columns.add(min(width - 1, max(0, slot // 2)))
    return columns
