"""The dashboard's metric maths: windows, downsampling, merged percentiles, charts, numbers."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from loadgen.core.ticks import Phase
from tests.tui.recorded import T0_NS, TICKS, histogram, latency_values, recorded_tick
from tui import formatting as fmt
from tui.charts import _heights, area_chart
from tui.history import (
    METRICS,
    ChartView,
    Reducer,
    Series,
    TargetHistory,
    downsample,
    max_of,
    mean_of,
    time_slots,
)


def test_series_keeps_only_the_window() -> None:
    series = Series(window_s=10.0)
    for t in range(30):
        series.add(float(t), float(t))
    assert series.values() == [float(t) for t in range(19, 30)]


def test_downsample_folds_runs_and_keeps_short_series() -> None:
    assert downsample([1.0, 2.0, 3.0], 5, max_of) == [1.0, 2.0, 3.0]
    assert downsample([1.0, 5.0, 2.0, 2.0, 0.0, 9.0], 3, max_of) == [5.0, 2.0, 9.0]
    assert downsample([1.0, 3.0, 2.0, 4.0], 2, mean_of) == [2.0, 3.0]
    assert math.isnan(max_of([math.nan]))


def test_recent_latency_merges_the_last_ten_seconds_of_histograms() -> None:
    history = TargetHistory("redis")
    for seq in range(15):
        history.add(recorded_tick("redis", seq))
    values = np.concatenate([np.array(latency_values(seq, seq)) for seq in range(5, 15)]) / 1000
    assert math.isclose(history.e2e_recent.p99, float(np.percentile(values, 99)), rel_tol=2e-3)
    assert math.isclose(history.e2e_recent.max, float(values.max()), rel_tol=1e-3)
    assert history.recent_span_s == 10.0
    last = np.array(latency_values(14, 14)) / 1000
    assert math.isclose(history.e2e.p50, float(np.percentile(last, 50)), rel_tol=2e-3)


def test_publish_delay_merges_over_any_window_as_numpy_finds_it_in_the_raw_delays() -> None:
    """The detail screen's delay row: each tick's publish-delay histogram kept beside e2e and
    publish, per tick for five minutes and per minute before that, merged over a window."""
    history = TargetHistory("redis")
    raw: list[list[int]] = []
    for seq in range(420):  # seven minutes: the first two are folded per minute
        delays = [5 + (i * 7 + seq) % 40 + (900 if i == 0 and seq % 60 == 7 else 0)
                  for i in range(50)]
        raw.append(delays)
        history.add(dataclasses.replace(recorded_tick("redis", seq),
                                        publish_delay=histogram(delays)))
    assert history.latency.coarse, "the oldest minutes are folded"
    for start_seq in (None, 380):  # the whole run; the last 40 ticks (per-tick stretch)
        start = None if start_seq is None else T0_NS / 1e9 + start_seq + 0.5
        e2e, publish, delay = history.latency.merged(start)
        kept = np.array([v for seq, d in enumerate(raw)
                         if start_seq is None or seq >= start_seq for v in d], float)
        ticks = 420 if start_seq is None else 40
        assert (e2e.total, publish.total, delay.total) == (200 * ticks, 101 * ticks, kept.size)
        for p in (50.0, 99.0):
            assert math.isclose(delay.percentile(p) / 1000, float(np.percentile(kept, p)),
                                rel_tol=0.02), p
        assert delay.max / 1000 == kept.max()
    # a window reaching back into the folded stretch takes the whole minute holding its start
    # (ticks 0-58 end in the run's first minute of wall clock)
    assert history.latency.merged(T0_NS / 1e9 + 30.5)[2].total == 50 * 420


def test_an_empty_interval_has_no_latency_figures() -> None:
    tick = recorded_tick("redis", 0)
    history = TargetHistory("redis")
    history.add(dataclasses.replace(tick, e2e_latency=type(tick.e2e_latency).empty(),
                                    phase=Phase.DRAINING))
    assert history.e2e.count == 0 and math.isnan(history.e2e.p99)
    assert math.isnan(history.series["e2e_p99"].values()[-1])


def test_area_chart_is_right_aligned_and_scaled() -> None:
    rows = area_chart([4.0, 8.0], width=3, height=2, top=8.0)
    assert rows[0] == "  ⢸"  # only the newest point reaches the top row
    assert rows[1] == "  ⣿"
    assert area_chart([], width=2, height=1, top=0.0) == ["  "]
    assert area_chart([math.nan, 0.0, 0.001], width=2, height=1, top=1.0) == [" ⢀"]


def test_dot_heights_follow_a_value_by_value_reference() -> None:
    """Each value's dot rows against the rule written out one value at a time: nothing for
    zero, negative, NaN or infinite values, else the nearest level, at least 1 and at most
    all of them (values above the top, however large, fill the column)."""
    def reference(values: list[float], top: float, levels: int, n: int) -> list[int]:
        out = [0] * n
        kept = values[-n:] if n else []
        for i, v in enumerate(kept):
            if top > 0 and math.isfinite(v) and v > 0:
                level = levels if v >= top else round(v / top * levels)
                out[n - len(kept) + i] = max(1, level)
        return out

    rng = np.random.default_rng(7)
    specials = [math.nan, math.inf, -math.inf, 0.0, -1.0, 1e308, 5e-324, 1e-9]
    for trial in range(300):
        count = int(rng.integers(0, 90))
        values = list(rng.uniform(-10, 120, count))
        for i in rng.integers(0, max(count, 1), int(rng.integers(0, 6))):
            if count:
                values[int(i)] = specials[int(rng.integers(0, len(specials)))]
        top = [100.0, 1e-300, 0.0, -5.0, 37.5][trial % 5]
        levels, n = int(rng.integers(1, 40)), int(rng.integers(0, 80))
        # away from the rounding boundary, where the reference's division order could differ
        values = [v + 1e-6 if math.isfinite(v) and abs(v / top * levels % 1 - 0.5) < 1e-6
                  else v for v in values] if top > 0 else values
        assert list(_heights(values, top, levels, n)) == reference(values, top, levels, n), (
            values, top, levels, n)
    assert list(_heights((3.0, 6.0), 6.0, 4, 3)) == [0, 2, 4]  # any sequence, not only lists


def test_time_slots_follow_a_slot_by_slot_reference() -> None:
    """The slots against the rule written out with a list per slot and a reducer call for
    every slot with points: points out of order, on slot edges, before the start and after
    the end (folded into the first and last slot), NaN, infinities and -0.0, slots sparser
    and denser than the points, the bundled reducers and one of a caller's own."""
    def reference(times: list[float], values: list[float], start: float, end: float,
                  slots: int, reduce: Reducer, hold_s: float) -> list[float]:
        slot_s = (end - start) / slots
        buckets: list[list[float]] = [[] for _ in range(slots)]
        for t, v in zip(times, values, strict=True):
            buckets[min(slots - 1, max(0, math.ceil((t - start) / slot_s) - 1))].append(v)
        out: list[float] = []
        last, last_i = math.nan, -slots
        for i, bucket in enumerate(buckets):
            if bucket:
                last, last_i = reduce(bucket), i
                out.append(last)
            else:
                out.append(last if (i - last_i) * slot_s <= hold_s else math.nan)
        return out

    def same(a: list[float], b: list[float]) -> bool:  # bit for bit, NaN equal to NaN
        return len(a) == len(b) and all(
            (math.isnan(x) and math.isnan(y)) or (x == y and math.copysign(1, x) == math.copysign(1, y))
            for x, y in zip(a, b, strict=True))

    def first(values: Sequence[float]) -> float:
        return values[0]

    rng = np.random.default_rng(11)
    specials = [math.nan, math.inf, -math.inf, -0.0, 0.0, 1e308]
    reducers: list[Reducer] = [mean_of, max_of, first]
    for trial in range(400):
        start = float(rng.uniform(-100, 1e6))
        end = start + float(rng.choice([0.5, 10.0, 60.0, 300.0]))
        slots = int(rng.integers(1, 200))
        count = int(rng.integers(0, 3 * slots))
        times = list(rng.uniform(start - 5, end + 1, count))
        if count and trial % 3 == 0:  # points exactly on slot edges
            edges = [start + (end - start) / slots * int(k) for k in rng.integers(0, slots + 1, count)]
            times = edges
        if trial % 2:
            times.sort()
        values = list(rng.uniform(-5, 5, count))
        for i in rng.integers(0, max(count, 1), int(rng.integers(0, 8))):
            if count:
                values[int(i)] = specials[int(rng.integers(0, len(specials)))]
        reduce = reducers[trial % 3]
        hold = float(rng.choice([0.0, 2.0, 30.0]))
        assert same(time_slots(times, values, start, end, slots, reduce, hold),
                    reference(times, values, start, end, slots, reduce, hold)), trial
    assert time_slots([1.0], [2.0], 5.0, 5.0, 10, mean_of) == []
    assert time_slots([1.0], [2.0], 0.0, 5.0, 0, mean_of) == []


def test_charts_keep_their_slots_on_one_grid_of_time() -> None:
    """With a window of fixed length the chart's time slots stay on one grid: from one tick to
    the next either only the newest slot changes, or the chart moves by one whole slot and
    every slot it keeps is unchanged; the window ends on the grid, at or after the latest
    tick, and ends at the tick itself without slots (the axis and the detail screen)."""
    def same(a: list[float], b: list[float]) -> bool:
        return len(a) == len(b) and all(x == y or (math.isnan(x) and math.isnan(y))
                                        for x, y in zip(a, b, strict=True))

    history = TargetHistory("redis")
    view = ChartView({"redis": history})
    slots = 76
    slot_s = view.window_s / slots
    previous: tuple[float, list[float]] | None = None
    moves = stays = 0
    for seq in range(TICKS):
        history.add(recorded_tick("redis", seq))
        latest = history.last.time_ns / 1e9
        assert view.span() == (latest - view.window_s, latest)
        start, end = view.span(slots)
        assert latest <= end < latest + slot_s and end - start == view.window_s
        assert abs(end / slot_s - round(end / slot_s)) < 1e-6
        times, values = history.series["lag"].between(start - 2.0, end)
        points = time_slots(times, values, start, end, slots, METRICS["lag"].reduce)
        if previous is not None:
            moved = round((end - previous[0]) / slot_s)
            if moved == 0:
                stays += 1
                assert same(points[:-1], previous[1][:-1]), seq
            else:
                moves += 1
                assert moved == 1 and same(points[:-1], previous[1][1:]), seq
        previous = end, points
    assert moves >= 5 and stays >= 15, (moves, stays)


def test_numbers_are_short_and_missing_figures_are_marked() -> None:
    assert fmt.count(5002.4) == "5,002"
    assert fmt.count(2_500_000) == "2.50M"
    assert fmt.millis(0.1234) == "0.123"
    assert fmt.millis(12.34) == "12.3"
    assert fmt.millis(1234.5) == "1,234"
    assert fmt.short(5000) == "5.0k" and fmt.short(12_345) == "12k" and fmt.short(0.42) == "0.42"
    assert fmt.megabytes(5_120_000) == "5.1"
    assert fmt.duration(3725) == "1:02:05" and fmt.duration(65.9) == "1:06"
    assert fmt.millis(math.nan) == fmt.count(None) == fmt.MISSING
