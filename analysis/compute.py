"""The Spark aggregations of the report: every figure per (run, target) over the measuring
phase, returned as plain dataclasses (`ReportData`) that every output (markdown, HTML, charts,
OpenMessaging-Benchmark JSON, the summary table) renders without Spark.

- Throughput, errors and exact latency means, minima and maxima come from one aggregation
  of the ticks table.
- Per-second series (rates, broker network bytes, lag, CPU, memory) are unpivoted into one long
  table and aggregated in one pass: distribution (`percentile`) and OLS regression on time
  (`regr_*`); the per-second values are collected too (one row per second is small) for the
  charts and the Theil–Sen cross-check.
- Latency percentiles are exact over the histogram buckets: the bucket rows are summed per
  value and OMB period once (persisted), then Spark's weighted `percentile(value, p, count)`
  gives the whole-run and the per-period percentiles from those sums.
- OpenMessaging-Benchmark style per-period figures use periods of 10 ticks, as OMB reports.
- Interventions recorded in the events table (rate changes, producers and consumers stopped
  or started, broker faults) split a target's measuring phase into segments; each segment gets
  its own rates and exact latency percentiles, from the same bucket sums (`analysis.events`).

The job uses no Python UDFs and builds no DataFrame from Python objects, so executors need
neither the project's code nor a Python interpreter.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from analysis.events import (
    FAULT_PREFIXES,
    READ_KINDS,
    AssignmentRow,
    ChangeRow,
    Event,
    SegmentStart,
    assignment_rows,
    change_rows,
    is_fault,
    segment_starts,
    split_points,
)
from analysis.faultwindows import (
    WINDOW_PERCENTILES,
    FaultWindow,
    Tick,
    audit_window,
    fault_spans,
    figures,
    target_audit,
)
from analysis.labels import Key, resolve_baseline, run_marks, target_labels
from analysis.runs import RunInfo, read_table
from analysis.schema import LATENCY_KINDS
from analysis.session import JobProgress, Progress
from analysis.stats import Trend, fit_trend, theil_sen_slope
from loadgen.core.errors import ReportError

MEASURING = "measuring"
PERIOD_TICKS = 10  # OpenMessaging Benchmark reports its figures every 10 s

LATENCY_PERCENTILES: tuple[float, ...] = (50.0, 75.0, 90.0, 95.0, 99.0, 99.9, 99.99, 99.999)
BOX_PERCENTILES: tuple[float, ...] = (1.0, 25.0, 50.0, 75.0, 99.0)
# the percentile curve: ten points per "nine", 0 % … 99.999 %
NINES_PERCENTILES: tuple[float, ...] = tuple(
    round(100.0 * (1.0 - 10.0 ** (-k / 10.0)), 6) for k in range(51)
)
OMB_PERCENTILES: tuple[float, ...] = (50.0, 75.0, 95.0, 99.0, 99.9, 99.99, 99.999)
ALL_PERCENTILES: tuple[float, ...] = tuple(
    sorted({*LATENCY_PERCENTILES, *BOX_PERCENTILES, *NINES_PERCENTILES, *OMB_PERCENTILES})
)
RATE_PERCENTILES: tuple[float, ...] = (5.0, 50.0, 95.0)
SEGMENT_PERCENTILES: tuple[float, ...] = (50.0, 99.0, 99.9)
# below this much measuring, a trend is not extrapolated to "% per hour" (see analysis.sections)
MIN_EXTRAPOLATION_S = 300.0

LATENCY_TITLES = {
    "e2e": "End-to-end latency",
    "publish": "Publish latency",
    "delay": "Publish delay",
}

FloatArray = npt.NDArray[np.float64]


# -- per-second series -----------------------------------------------------------------------


def _rate(numerator: Column | str, denominator: Column | str) -> Column:
    num = F.col(numerator) if isinstance(numerator, str) else numerator
    den = F.col(denominator) if isinstance(denominator, str) else denominator
    return F.try_divide(num.cast("double"), den.cast("double"))


@dataclass(frozen=True)
class SeriesDef:
    """One per-second series of the measuring phase."""

    name: str
    title: str
    unit: str  # of the values; slopes are in unit per minute
    column: Callable[[], Column]  # built when Spark is up
    network: bool = False  # broker network bytes: only where the platform reports them


SERIES: tuple[SeriesDef, ...] = (
    SeriesDef("produce_msg_s", "produce rate", "msg/s", lambda: _rate("produced", "interval_s")),
    SeriesDef("produce_mb_s", "produce throughput (payload)", "MB/s",
              lambda: _rate("produced_bytes", "interval_s") / 1e6),
    SeriesDef("consume_msg_s", "consume rate", "msg/s", lambda: _rate("consumed", "interval_s")),
    SeriesDef("consume_mb_s", "consume throughput (payload)", "MB/s",
              lambda: _rate("consumed_bytes", "interval_s") / 1e6),
    SeriesDef("net_rx_mb_s", "broker network bytes in", "MB/s",
              lambda: _rate("net_rx_bytes", "interval_s") / 1e6, network=True),
    SeriesDef("net_tx_mb_s", "broker network bytes out", "MB/s",
              lambda: _rate("net_tx_bytes", "interval_s") / 1e6, network=True),
    SeriesDef("lag", "consumer lag", "messages", lambda: F.col("lag_total").cast("double")),
    # the age of the oldest message not yet consumed; the estimate (lag over the consume rate)
    # where the platform gives no positions (docs/time-lag.md)
    SeriesDef("lag_s", "time lag", "s", lambda: F.col("lag_seconds")),
    SeriesDef("cpu_percent", "broker CPU", "%", lambda: F.col("cpu_percent")),
    # 0 means not measured
    SeriesDef("memory_mb", "broker memory", "MB",
              lambda: F.when(F.col("memory_bytes") > 0, F.col("memory_bytes") / 1e6)),
)
SERIES_BY_NAME = {s.name: s for s in SERIES}
# degradation rate: throughput and byte rate over time
DEGRADATION_SERIES: tuple[str, ...] = ("produce_mb_s", "consume_mb_s", "net_rx_mb_s", "net_tx_mb_s")


# -- results ---------------------------------------------------------------------------------


@dataclass
class Throughput:
    ticks: int
    seconds: float
    produced: int
    produced_bytes: int
    consumed: int
    consumed_bytes: int
    net_rx_bytes: int  # broker network bytes (wire), 0 when the platform reports none
    net_tx_bytes: int
    target_rate: float  # mean msg/s the producers aimed for (0 = as fast as possible)

    def _per_s(self, total: int, scale: float = 1.0) -> float:
        return total / self.seconds / scale if self.seconds > 0 else float("nan")

    @property
    def produce_msg_s(self) -> float:
        return self._per_s(self.produced)

    @property
    def produce_mb_s(self) -> float:
        return self._per_s(self.produced_bytes, 1e6)

    @property
    def consume_msg_s(self) -> float:
        return self._per_s(self.consumed)

    @property
    def consume_mb_s(self) -> float:
        return self._per_s(self.consumed_bytes, 1e6)

    @property
    def network_known(self) -> bool:
        return self.net_rx_bytes + self.net_tx_bytes > 0

    @property
    def net_rx_mb_s(self) -> float:
        return self._per_s(self.net_rx_bytes, 1e6) if self.network_known else float("nan")

    @property
    def net_tx_mb_s(self) -> float:
        return self._per_s(self.net_tx_bytes, 1e6) if self.network_known else float("nan")

    @property
    def message_bytes(self) -> float:
        """Mean payload size of the produced messages."""
        return self.produced_bytes / self.produced if self.produced else float("nan")


@dataclass
class SeriesStats:
    """Per-second values of one series: their distribution and their trend over time."""

    points: int
    mean: float  # mean of the per-second values
    dist: dict[str, float]  # "min", "p5", "p50", "p95", "max"
    trend: Trend


@dataclass
class LatencyStats:
    samples: int
    mean_ms: float  # exact: sum of samples / count
    min_ms: float  # exact
    max_ms: float  # exact
    percentiles_ms: dict[float, float]  # percentile (0-100) -> ms, for ALL_PERCENTILES

    def beyond(self, p: float) -> int:
        """Samples at or above the p-th percentile's rank: how many samples the figure rests on
        (with the linear definition, the value at rank p/100·(n−1))."""
        if not self.samples:
            return 0
        return self.samples - math.ceil(p / 100.0 * (self.samples - 1))


@dataclass
class PeriodLatency:
    samples: int
    mean_ms: float
    max_ms: float
    percentiles_ms: dict[float, float]  # for OMB_PERCENTILES


@dataclass
class Period:
    """One OMB stats period (PERIOD_TICKS ticks) of the measuring phase."""

    index: int
    seconds: float
    publish_rate: float  # msg/s
    consume_rate: float
    error_rate: float  # failed sends/s
    backlog: float  # consumer lag at the end of the period (NaN when not measured)
    latency: dict[str, PeriodLatency]


@dataclass
class Timeline:
    """Per-second values in time order, for charts: x in minutes since the load started."""

    minutes: FloatArray
    values: dict[str, FloatArray]  # series name, or "<kind>_p50" / "<kind>_p99" in ms


@dataclass
class Segment:
    """The part of a target's measuring phase between two interventions (or its start or
    end): ticks first_seq … last_seq."""

    index: int  # 1, 2, … in time order
    first_seq: int
    last_seq: int
    start_s: float  # from the start of the measuring phase: the first tick's start …
    end_s: float  # … and the last tick's end
    started_by: tuple[str, ...]  # the interventions that began it ("kind detail"); none: the start
    throughput: Throughput
    target_rate_min: float  # the ticks' target rates (0 = as fast as possible)
    target_rate_max: float
    send_errors: int
    latency: dict[str, LatencyStats]  # by kind; percentiles for SEGMENT_PERCENTILES


@dataclass(frozen=True)
class BrokerMetricStat:
    """One of the broker's own metrics over a target's measuring phase (the ticks whose read
    succeeded; the stale ones, a paused broker's, counted apart)."""

    broker: str
    name: str
    unit: str
    mean: float
    low: float
    high: float
    last: float
    ticks: int  # ticks it was read at
    stale: int  # ticks it could not be read at (the last value read stood in)


@dataclass
class TargetReport:
    run_id: str
    target: str
    label: str  # the target, or "target (run)" when a name repeats across runs
    persistent: bool  # False for non-persistent topics (nothing written to disk)
    throughput: Throughput
    series: dict[str, SeriesStats]  # by series name; network series only where known
    latency: dict[str, LatencyStats]  # by kind: e2e, publish, delay
    periods: list[Period]
    timeline: Timeline
    send_errors_measuring: int
    send_errors_total: int
    # the load generator itself over the measuring phase: seconds it was the bottleneck, and
    # its mean CPU (% of one core; NaN for runs before schema version 2)
    loadgen_saturated_s: float = 0.0
    loadgen_cpu_percent: float = float("nan")
    # how the run ended, when it needs care: "killed", "stopped early", "not drained"
    marks: tuple[str, ...] = ()
    # messages produced in the measuring phase (× subscriptions) without an end-to-end sample
    # in it: received during the drain, or never
    e2e_unsampled: int = 0
    e2e_expected: int = 0  # messages produced in the measuring phase × subscriptions
    segments: list[Segment] = field(default_factory=list)  # empty: one segment only
    measuring_start_s: float = 0.0  # seconds since the load started, where measuring began
    # the platform's broker metrics (none in runs before schema version 4), by broker and name
    broker_metrics: list[BrokerMetricStat] = field(default_factory=list)

    @property
    def heading(self) -> str:
        """The label with every mark that qualifies the figures, for every table and legend:
        `kafka (non-persistent, stopped early)`."""
        notes = ([] if self.persistent else ["non-persistent"]) + list(self.marks)
        return f"{self.label} ({', '.join(notes)})" if notes else self.label

    @property
    def extrapolates(self) -> bool:
        """Measured long enough for a trend to be given in % per hour."""
        return self.throughput.seconds >= MIN_EXTRAPOLATION_S


@dataclass(frozen=True)
class NodeRow:
    """One load node of a target on a Ray cluster over the measuring phase (the nodes table)."""

    key: Key  # (run_id, target)
    node: str
    host: str
    produced: int
    consumed: int
    cpu_percent: float  # the load actor's mean CPU (% of one core)
    loop_lag_ms: float  # its event loop's latest wake-up
    memory_bytes: int  # its largest resident memory
    saturated_ticks: int  # ticks in which it was the bottleneck
    offset_min_ns: float  # its clock's estimated offset, lowest and highest (NaN: none)
    offset_max_ns: float
    bound_max_ns: float  # the largest error bound of those estimates
    below_zero: int = 0  # the target's e2e samples below zero (per target, not per node)
    nodes_lost: int = 0  # the target's load nodes lost by the end of the measuring phase
    # the e2e latency of the messages this node's consumers read, from its own histograms
    # (schema 6; NaN before, or when it read none)
    e2e_p50_ns: float = math.nan
    e2e_p99_ns: float = math.nan


@dataclass
class ReportData:
    runs: list[RunInfo]
    targets: list[TargetReport]
    baseline: TargetReport | None = None  # the target the comparison divides by
    changes: list[ChangeRow] = field(default_factory=list)  # "Faults and changes", time order
    # "Consumer assignments": the consumers' partitions at start-up and each change, time order
    assignments: list[AssignmentRow] = field(default_factory=list)
    nodes: list[NodeRow] = field(default_factory=list)  # "Load nodes", on a Ray cluster
    # "Fault windows": each fault's figures before, during and after it, time order
    fault_windows: list[FaultWindow] = field(default_factory=list)

    def run(self, run_id: str) -> RunInfo:
        return next(r for r in self.runs if r.run_id == run_id)


# -- helpers ---------------------------------------------------------------------------------


def _key(row: Any) -> Key:
    return (str(row["run_id"]), str(row["target"]))


def _throughput(r: Any) -> Throughput:
    """The throughput sums of one aggregated row (a target's measuring phase, a segment)."""
    return Throughput(
        ticks=int(r["ticks"]),
        seconds=_num(r["interval_s"]),
        produced=_int(r["produced"]),
        produced_bytes=_int(r["produced_bytes"]),
        consumed=_int(r["consumed"]),
        consumed_bytes=_int(r["consumed_bytes"]),
        net_rx_bytes=_int(r["net_rx_bytes"]),
        net_tx_bytes=_int(r["net_tx_bytes"]),
        target_rate=_num(r["target_rate"]),
    )


def _num(value: Any) -> float:
    return float("nan") if value is None else float(value)


def _int(value: Any) -> int:
    return 0 if value is None else int(value)


def _broker_metrics(spark: SparkSession, runs: Sequence[RunInfo]
                    ) -> dict[Key, list[BrokerMetricStat]]:
    """Per (run, target): each broker metric over the measuring phase, from the reads that
    succeeded, with the count of stale ticks beside."""
    table = read_table(spark, runs, "broker_metrics").where(_measuring())
    fresh = ~F.col("stale")
    rows = (table.groupBy("run_id", "target", "broker", "name", "unit").agg(
        F.mean(F.when(fresh, F.col("value"))).alias("mean"),
        F.min(F.when(fresh, F.col("value"))).alias("low"),
        F.max(F.when(fresh, F.col("value"))).alias("high"),
        F.max_by(F.col("value"), F.when(fresh, F.col("seq"))).alias("last"),
        F.sum(F.when(fresh, 1).otherwise(0)).alias("ticks"),
        F.sum(F.when(fresh, 0).otherwise(1)).alias("stale"),
    ).orderBy("run_id", "target", "broker", "name").collect())
    out: dict[Key, list[BrokerMetricStat]] = {}
    for r in rows:
        nan = math.nan
        out.setdefault(_key(r), []).append(BrokerMetricStat(
            str(r["broker"]), str(r["name"]), str(r["unit"]),
            nan if r["mean"] is None else float(r["mean"]),
            nan if r["low"] is None else float(r["low"]),
            nan if r["high"] is None else float(r["high"]),
            nan if r["last"] is None else float(r["last"]), int(r["ticks"]), int(r["stale"])))
    return out


def _measuring() -> Column:
    return F.col("phase") == MEASURING


def _check_phases(totals: dict[Key, _Totals], runs: Sequence[RunInfo]) -> list[Key]:
    """The (run, target) pairs with a measuring phase; ReportError for a run without."""
    for run in runs:
        mine = [t for k, t in totals.items() if k[0] == run.run_id]
        if not mine:
            raise ReportError(
                f"run {run.run_id} ({run.path}) has no ticks: it stopped before its first "
                "second was written"
            )
        if not any(t.throughput.ticks for t in mine):
            raise ReportError(
                f"run {run.run_id} ({run.path}) has no measuring phase: it ended during "
                "start-up or warm-up, so there is nothing to report"
            )
    return [k for k, t in totals.items() if t.throughput.ticks]


def _target_order(runs: Sequence[RunInfo], keys: Iterable[Key]) -> list[Key]:
    """Runs in the order given; targets in run.json order, then by name."""
    order: list[Key] = []
    remaining = set(keys)
    for run in runs:
        listed = run.target_labels()
        in_run = sorted(k for k in remaining if k[0] == run.run_id)
        ranked = sorted(
            in_run,
            key=lambda k: (listed.index(k[1]) if k[1] in listed else len(listed), k[1]),
        )
        order.extend(ranked)
        remaining.difference_update(ranked)
    return order + sorted(remaining)


# -- throughput, errors, latency summaries ----------------------------------------------------


@dataclass
class _Totals:
    throughput: Throughput
    errors: tuple[int, int]  # measuring, whole run
    latency: dict[str, tuple[int, float, float, float]]  # kind -> count, mean, min, max (ns)
    first_seq: int  # first measuring tick, where the OMB periods start
    loadgen: tuple[float, float]  # seconds saturated, mean CPU %
    start_us: int  # wall clock at the start of the first measuring tick (µs)
    end_us: int  # … and at the end of the last
    start_elapsed_s: float  # seconds since the load started, at the start of measuring


def _totals(ticks: DataFrame) -> dict[Key, _Totals]:
    """Sums over the ticks of every (run, target): one row each, measuring phase or not."""

    def m(col: str) -> Column:
        return F.when(_measuring(), F.col(col))

    sums = ["interval_s", "produced", "produced_bytes", "consumed", "consumed_bytes",
            "net_rx_bytes", "net_tx_bytes"]
    aggs = [
        F.count(m("seq")).alias("ticks"),
        *(F.sum(m(c)).alias(c) for c in sums),
        F.avg(m("target_rate")).alias("target_rate"),
        F.sum(m("send_errors")).alias("errors_measuring"),
        F.sum("send_errors").alias("errors_total"),
        F.min(m("seq")).alias("first_seq"),
        F.sum(F.when(_measuring() & (F.coalesce(F.col("loadgen_saturated"), F.lit("")) != ""),
                     F.col("interval_s")).otherwise(0.0)).alias("loadgen_saturated_s"),
        F.avg(m("loadgen_cpu_percent")).alias("loadgen_cpu"),
        F.min(F.when(_measuring(), _start_us())).alias("start_us"),
        F.max(m("time_us")).alias("end_us"),
        F.min(F.when(_measuring(), F.col("elapsed_s") - F.col("interval_s"))).alias("start_el"),
    ]
    for kind in LATENCY_KINDS:
        aggs += [
            F.sum(m(f"{kind}_count")).alias(f"{kind}_n"),
            F.sum(m(f"{kind}_sum")).alias(f"{kind}_s"),
            F.min(m(f"{kind}_min")).alias(f"{kind}_lo"),
            F.max(m(f"{kind}_max")).alias(f"{kind}_hi"),
        ]
    out: dict[Key, _Totals] = {}
    rows = ticks.withColumn("time_us", F.unix_micros("time")).groupBy("run_id", "target")
    for r in rows.agg(*aggs).collect():
        latency = {}
        for kind in LATENCY_KINDS:
            n = _int(r[f"{kind}_n"])
            latency[kind] = (
                n,
                _int(r[f"{kind}_s"]) / n if n else float("nan"),
                _num(r[f"{kind}_lo"]),
                _num(r[f"{kind}_hi"]),
            )
        out[_key(r)] = _Totals(
            throughput=_throughput(r),
            errors=(_int(r["errors_measuring"]), _int(r["errors_total"])),
            loadgen=(_num(r["loadgen_saturated_s"]), _num(r["loadgen_cpu"])),
            latency=latency,
            first_seq=_int(r["first_seq"]),
            start_us=_int(r["start_us"]),
            end_us=_int(r["end_us"]),
            start_elapsed_s=_num(r["start_el"]),
        )
    return out


def _start_us() -> Column:
    """The wall clock at the start of a tick: its end less its interval."""
    return F.col("time_us") - F.round(F.col("interval_s") * 1e6).cast("long")


# -- per-second series -------------------------------------------------------------------------


def _per_second(measuring: DataFrame) -> DataFrame:
    """One row per measuring tick: x (minutes since the load started), every series, and
    the tick's own latency p50 / p99 in ms."""
    cols = [s.column().cast("double").alias(s.name) for s in SERIES]
    for kind in LATENCY_KINDS:
        cols += [(F.col(f"{kind}_{p}") / 1e6).alias(f"{kind}_{p}") for p in ("p50", "p99")]
    return measuring.select(
        "run_id", "target", "seq", (F.col("elapsed_s") / 60.0).alias("x"), *cols
    )


def _series_rows(per_second: DataFrame) -> dict[Key, dict[str, Any]]:
    """Distribution and regression sums of every series, in one aggregation."""
    pairs: list[Column] = []
    for s in SERIES:
        pairs += [F.lit(s.name), F.col(s.name)]
    long = per_second.select(
        "run_id", "target", "x", F.stack(F.lit(len(SERIES)), *pairs).alias("series", "y")
    ).where(F.col("y").isNotNull())
    fractions = [p / 100.0 for p in RATE_PERCENTILES]
    rows = (
        long.groupBy("run_id", "target", "series")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.avg("y").alias("mean"),
            F.min("y").alias("min"),
            F.max("y").alias("max"),
            F.percentile("y", fractions).alias("pct"),
            F.regr_count("y", "x").alias("rn"),
            F.regr_slope("y", "x").alias("slope"),
            F.regr_intercept("y", "x").alias("intercept"),
            F.regr_r2("y", "x").alias("r2"),
            F.regr_sxx("y", "x").alias("sxx"),
            F.regr_syy("y", "x").alias("syy"),
            F.regr_sxy("y", "x").alias("sxy"),
        )
        .collect()
    )
    out: dict[Key, dict[str, Any]] = {}
    for r in rows:
        out.setdefault(_key(r), {})[r["series"]] = r
    return out


def _timelines(per_second: DataFrame) -> dict[Key, Timeline]:
    names = [c for c in per_second.columns if c not in ("run_id", "target", "seq", "x")]
    collected: dict[Key, list[Any]] = {}
    for r in per_second.collect():  # one row per second: sorted here, not by a Spark sort
        collected.setdefault(_key(r), []).append(r)
    out = {}
    for key, rows in collected.items():
        rows.sort(key=lambda r: r["seq"])
        minutes = np.array([_num(r["x"]) for r in rows])
        values = {n: np.array([_num(r[n]) for r in rows]) for n in names}
        out[key] = Timeline(minutes=minutes, values=values)
    return out


def _series_stats(row: Any, timeline: Timeline, name: str) -> SeriesStats:
    y = timeline.values[name]
    keep = np.isfinite(y)
    theil_sen = theil_sen_slope(timeline.minutes[keep], y[keep])
    pct = row["pct"] or [None] * len(RATE_PERCENTILES)
    dist = {"min": _num(row["min"])}
    dist.update({f"p{p:g}": _num(v) for p, v in zip(RATE_PERCENTILES, pct, strict=True)})
    dist["max"] = _num(row["max"])
    trend = fit_trend(
        _int(row["rn"]), _num(row["slope"]), _num(row["intercept"]), _num(row["r2"]),
        _num(row["sxx"]), _num(row["syy"]), _num(row["sxy"]), _num(row["mean"]), theil_sen,
    )
    return SeriesStats(points=int(row["n"]), mean=_num(row["mean"]), dist=dist, trend=trend)


# -- latency histograms ------------------------------------------------------------------------


_SEP = "\x1f"


def _lookup(values: dict[str, float], *key_columns: str) -> Column:
    """values[key] for each row, the key being the row's key columns joined (as strings): a
    map literal (a handful of entries per target), so the bucket rows need no join. Null when
    missing."""
    if not values:
        return F.lit(None).cast("double")
    entries = [F.lit(x) for k, v in values.items() for x in (k, float(v))]
    key = F.concat_ws(_SEP, *(F.col(c).cast("string") for c in key_columns))
    return F.try_element_at(F.create_map(*entries), key)


Bounds = dict[str, float]  # "run<SEP>target<SEP>kind<SEP>segment" -> exact min or max (ns)


def _clamp_bounds(totals: dict[Key, _Totals],
                  segments: dict[Key, list[_SegmentTotals]]) -> tuple[Bounds, Bounds]:
    """The exact smallest and largest sample of each kind per segment (the whole measuring
    phase, segment 0, for a target with one segment)."""
    lo: Bounds = {}
    hi: Bounds = {}
    for key, t in totals.items():
        parts = ([(s.index, s.latency) for s in segments[key]] if key in segments
                 else [(0, t.latency)])
        for index, latency in parts:
            for kind, (_n, _mean, kind_lo, kind_hi) in latency.items():
                k = _SEP.join((*key, kind, str(index)))
                if math.isfinite(kind_lo) and math.isfinite(kind_hi):
                    lo[k], hi[k] = kind_lo, kind_hi
    return lo, hi


def _buckets(latency: DataFrame, totals: dict[Key, _Totals], segment: Column,
             bounds: tuple[Bounds, Bounds]) -> DataFrame:
    """Measuring-phase buckets with their segment and OMB period, their value clamped to the
    exact min / max of the segment's ticks (every sample of a bucket lies within them)."""
    lo, hi = bounds
    first: dict[str, float] = {f"{k[0]}{_SEP}{k[1]}": t.first_seq for k, t in totals.items()}
    value = F.col("value_ns").cast("double")
    keys = ("run_id", "target", "kind", "segment")
    clamped = F.least(F.greatest(value, _lookup(lo, *keys)), _lookup(hi, *keys))
    start = _lookup(first, "run_id", "target")
    # the target's buckets: a load node's own (schema 6) are beside them, counted there too
    targets = latency.where(_measuring() & F.col("node").isNull())
    return targets.withColumn("segment", segment).select(
        "run_id",
        "target",
        "kind",
        "segment",
        F.floor((F.col("seq") - start) / PERIOD_TICKS).alias("period"),
        F.coalesce(clamped, value).alias("v"),
        "count",
    )


def _period_histograms(buckets: DataFrame) -> DataFrame:
    """The buckets summed per value within each OMB period and segment: one row per (run,
    target, kind, period, segment, value). The one pass over the bucket rows; the whole-run,
    per-period and per-segment percentiles are all computed from it, so the caller persists
    it."""
    return buckets.groupBy("run_id", "target", "kind", "period", "segment", "v").agg(
        F.sum("count").alias("count")
    )


def _weighted_percentiles(
    histograms: DataFrame, group: Sequence[str], percentiles: Sequence[float]
) -> list[Any]:
    """Exact weighted percentiles of the bucket values per group: the counts are summed per
    distinct value of the group first, then Spark's `percentile`."""
    return (
        histograms.groupBy(*group, "v")
        .agg(F.sum("count").alias("count"))
        .groupBy(*group)
        .agg(
            F.sum("count").alias("n"),
            F.percentile("v", [p / 100.0 for p in percentiles], F.col("count")).alias("pct"),
        )
        .collect()
    )


def _latency(histograms: DataFrame,
             totals: dict[Key, _Totals]) -> dict[Key, dict[str, LatencyStats]]:
    out: dict[Key, dict[str, LatencyStats]] = {}
    for r in _weighted_percentiles(histograms, ("run_id", "target", "kind"), ALL_PERCENTILES):
        key = _key(r)
        _count, mean, lo, hi = totals[key].latency[r["kind"]]
        out.setdefault(key, {})[r["kind"]] = LatencyStats(
            samples=int(r["n"] or 0),
            mean_ms=mean / 1e6,
            min_ms=lo / 1e6,
            max_ms=hi / 1e6,
            percentiles_ms={
                p: _num(v) / 1e6 for p, v in zip(ALL_PERCENTILES, r["pct"], strict=True)
            },
        )
    return out


def _empty_latency() -> LatencyStats:
    nan = float("nan")
    return LatencyStats(0, nan, nan, nan, {p: nan for p in ALL_PERCENTILES})


# -- OMB periods -------------------------------------------------------------------------------


def _periods(measuring: DataFrame, histograms: DataFrame,
             totals: dict[Key, _Totals]) -> dict[Key, list[Period]]:
    first = _lookup({f"{k[0]}{_SEP}{k[1]}": t.first_seq for k, t in totals.items()},
                    "run_id", "target")
    aggs = [
        F.sum("interval_s").alias("seconds"),
        F.sum("produced").alias("produced"),
        F.sum("consumed").alias("consumed"),
        F.sum("send_errors").alias("errors"),
        F.max_by("lag_total", "seq").alias("backlog"),
    ]
    for kind in LATENCY_KINDS:
        aggs += [
            F.sum(f"{kind}_count").alias(f"{kind}_n"),
            F.sum(f"{kind}_sum").alias(f"{kind}_s"),
            F.max(f"{kind}_max").alias(f"{kind}_hi"),
        ]
    tick_rows = (
        measuring.withColumn("period", F.floor((F.col("seq") - first) / PERIOD_TICKS))
        .groupBy("run_id", "target", "period")
        .agg(*aggs)
        .collect()
    )
    pct_rows = _weighted_percentiles(histograms, ("run_id", "target", "kind", "period"),
                                     OMB_PERCENTILES)
    pcts = {(*_key(r), r["kind"], int(r["period"])): r["pct"] for r in pct_rows}
    nan = float("nan")
    out: dict[Key, list[Period]] = {}
    for r in sorted(tick_rows, key=lambda r: (*_key(r), int(r["period"]))):
        key, index = _key(r), int(r["period"])
        seconds = _num(r["seconds"])

        def per_s(total: Any, seconds: float = seconds) -> float:
            return _int(total) / seconds if seconds > 0 else nan

        latency = {}
        for kind in LATENCY_KINDS:
            n = _int(r[f"{kind}_n"])
            pct = pcts.get((*key, kind, index)) or [None] * len(OMB_PERCENTILES)
            latency[kind] = PeriodLatency(
                samples=n,
                mean_ms=_int(r[f"{kind}_s"]) / n / 1e6 if n else nan,
                max_ms=_num(r[f"{kind}_hi"]) / 1e6,
                percentiles_ms={p: _num(v) / 1e6 for p, v in zip(OMB_PERCENTILES, pct,
                                                                  strict=True)},
            )
        out.setdefault(key, []).append(
            Period(
                index=index,
                seconds=seconds,
                publish_rate=per_s(r["produced"]),
                consume_rate=per_s(r["consumed"]),
                error_rate=per_s(r["errors"]),
                backlog=_num(r["backlog"]),
                latency=latency,
            )
        )
    return out


# -- events and segments -----------------------------------------------------------------------


def _events(spark: SparkSession, runs: Sequence[RunInfo]) -> list[Event]:
    """The events the report reads (interventions, recoveries, drained backlogs, notes)."""
    kinds = F.col("kind")
    rows = (
        read_table(spark, runs, "events")
        .where(functools.reduce(operator.or_, (kinds.startswith(p) for p in FAULT_PREFIXES),
                                kinds.isin(*READ_KINDS)))
        .select("run_id", "target", F.unix_micros("time").alias("time_us"), "phase", "kind",
                "detail")
        .collect()
    )
    return [
        Event(str(r["run_id"]), str(r["target"] or ""), _int(r["time_us"]), str(r["phase"] or ""),
              str(r["kind"]), str(r["detail"] or ""))
        for r in rows
    ]


def _segment_starts(measuring: DataFrame,
                    splits: dict[Key, list[Event]]) -> dict[Key, list[SegmentStart]]:
    """Where each target's segments start, for the targets the interventions split in two or
    more: their measuring ticks (one row per second) are collected to find them."""
    if not splits:
        return {}
    wanted = [f"{k[0]}{_SEP}{k[1]}" for k in splits]
    rows = (
        measuring.where(F.concat_ws(_SEP, "run_id", "target").isin(*wanted))
        .select("run_id", "target", "seq", F.unix_micros("time").alias("time_us"))
        .collect()
    )
    ticks: dict[Key, list[tuple[int, int]]] = {}
    for r in rows:
        ticks.setdefault(_key(r), []).append((int(r["seq"]), int(r["time_us"])))
    out = {}
    for key, rows_of_key in ticks.items():
        starts = segment_starts(sorted(rows_of_key), splits[key])
        if len(starts) > 1:
            out[key] = starts
    return out


def _segment_column(starts: dict[Key, list[SegmentStart]]) -> Column:
    """A tick's (or bucket row's) segment, 0, 1, …, from its seq: 0 for a target with one."""
    segment: Column = F.lit(0)
    for (run_id, target), parts in starts.items():
        mine = (F.col("run_id") == run_id) & (F.col("target") == target)
        for part in parts[1:]:
            segment = segment + F.when(mine & (F.col("seq") >= part.first_seq), 1).otherwise(0)
    return segment


@dataclass
class _SegmentTotals:
    index: int  # 0, 1, … (shown from 1)
    first_seq: int
    last_seq: int
    start_elapsed_s: float
    end_elapsed_s: float
    throughput: Throughput
    rates: tuple[float, float]  # min, max target rate
    errors: int
    latency: dict[str, tuple[int, float, float, float]]  # kind -> count, mean, min, max (ns)


def _segment_totals(measuring: DataFrame, starts: dict[Key, list[SegmentStart]]
                    ) -> dict[Key, list[_SegmentTotals]]:
    """The ticks' sums per segment, for the targets with more than one."""
    if not starts:
        return {}
    wanted = [f"{k[0]}{_SEP}{k[1]}" for k in starts]
    sums = ["interval_s", "produced", "produced_bytes", "consumed", "consumed_bytes",
            "net_rx_bytes", "net_tx_bytes"]
    aggs = [
        F.count("seq").alias("ticks"),
        *(F.sum(c).alias(c) for c in sums),
        F.avg("target_rate").alias("target_rate"),
        F.min("target_rate").alias("rate_lo"),
        F.max("target_rate").alias("rate_hi"),
        F.sum("send_errors").alias("errors"),
        F.min("seq").alias("first_seq"),
        F.max("seq").alias("last_seq"),
        F.min(F.col("elapsed_s") - F.col("interval_s")).alias("start_el"),
        F.max("elapsed_s").alias("end_el"),
    ]
    for kind in LATENCY_KINDS:
        aggs += [
            F.sum(f"{kind}_count").alias(f"{kind}_n"),
            F.sum(f"{kind}_sum").alias(f"{kind}_s"),
            F.min(f"{kind}_min").alias(f"{kind}_lo"),
            F.max(f"{kind}_max").alias(f"{kind}_hi"),
        ]
    rows = (
        measuring.where(F.concat_ws(_SEP, "run_id", "target").isin(*wanted))
        .withColumn("segment", _segment_column(starts))
        .groupBy("run_id", "target", "segment")
        .agg(*aggs)
        .collect()
    )
    out: dict[Key, list[_SegmentTotals]] = {}
    for r in sorted(rows, key=lambda r: (*_key(r), int(r["segment"]))):
        latency = {}
        for kind in LATENCY_KINDS:
            n = _int(r[f"{kind}_n"])
            latency[kind] = (n, _int(r[f"{kind}_s"]) / n if n else float("nan"),
                             _num(r[f"{kind}_lo"]), _num(r[f"{kind}_hi"]))
        out.setdefault(_key(r), []).append(_SegmentTotals(
            index=int(r["segment"]),
            first_seq=int(r["first_seq"]),
            last_seq=int(r["last_seq"]),
            start_elapsed_s=_num(r["start_el"]),
            end_elapsed_s=_num(r["end_el"]),
            throughput=_throughput(r),
            rates=(_num(r["rate_lo"]), _num(r["rate_hi"])),
            errors=_int(r["errors"]),
            latency=latency,
        ))
    return out


def _segments(histograms: DataFrame, totals: dict[Key, _Totals],
              seg_totals: dict[Key, list[_SegmentTotals]],
              starts: dict[Key, list[SegmentStart]]) -> dict[Key, list[Segment]]:
    """Every segment's figures: sums from the ticks, exact percentiles from the buckets."""
    if not seg_totals:
        return {}
    wanted = [f"{k[0]}{_SEP}{k[1]}" for k in seg_totals]
    pct_rows = _weighted_percentiles(
        histograms.where(F.concat_ws(_SEP, "run_id", "target").isin(*wanted)),
        ("run_id", "target", "kind", "segment"), SEGMENT_PERCENTILES)
    pcts = {(*_key(r), r["kind"], int(r["segment"])): r["pct"] for r in pct_rows}
    out: dict[Key, list[Segment]] = {}
    for key, parts in seg_totals.items():
        origin = totals[key].start_elapsed_s
        for part in parts:
            latency = {}
            for kind, (n, mean, lo, hi) in part.latency.items():
                pct = pcts.get((*key, kind, part.index)) or [None] * len(SEGMENT_PERCENTILES)
                latency[kind] = LatencyStats(
                    samples=n, mean_ms=mean / 1e6, min_ms=lo / 1e6, max_ms=hi / 1e6,
                    percentiles_ms={p: _num(v) / 1e6
                                    for p, v in zip(SEGMENT_PERCENTILES, pct, strict=True)})
            out.setdefault(key, []).append(Segment(
                index=part.index + 1,
                first_seq=part.first_seq,
                last_seq=part.last_seq,
                start_s=part.start_elapsed_s - origin,
                end_s=part.end_elapsed_s - origin,
                started_by=tuple(e.describe() for e in starts[key][part.index].started_by),
                throughput=part.throughput,
                target_rate_min=part.rates[0],
                target_rate_max=part.rates[1],
                send_errors=part.errors,
                latency=latency,
            ))
    return out


def _subscriptions(run: RunInfo) -> int:
    value = run.workload.get("subscriptionsPerTopic", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 1


def _nodes(spark: SparkSession, runs: Sequence[RunInfo], measuring: DataFrame,
           keys: Sequence[Key]) -> list[NodeRow]:
    """Each target's load nodes over the measuring phase (runs on a Ray cluster; none for
    the others), in the targets' order, then by node."""
    rows = (read_table(spark, runs, "nodes").where(_measuring())
            .groupBy("run_id", "target", "node", "host")
            .agg(F.sum("produced").alias("produced"), F.sum("consumed").alias("consumed"),
                 F.avg("loadgen_cpu_percent").alias("cpu"),
                 F.max("loadgen_loop_lag_ms").alias("lag"),
                 F.max("memory_bytes").alias("memory"),
                 F.sum(F.when(F.col("loadgen_saturated") != "", 1).otherwise(0)).alias("sat"),
                 F.min("clock_offset_ns").alias("lo"), F.max("clock_offset_ns").alias("hi"),
                 F.max("clock_bound_ns").alias("bound"))
            .collect())
    if not rows:
        return []
    per_target = {(r["run_id"], r["target"]): r for r in (
        measuring.groupBy("run_id", "target")
        .agg(F.sum(F.coalesce(F.col("e2e_below_zero"), F.lit(0))).alias("below"),
             F.max(F.coalesce(F.col("nodes_lost"), F.lit(0))).alias("lost"))
        .collect())}
    e2e = (read_table(spark, runs, "latency")
           .where(_measuring() & (F.col("kind") == "e2e") & F.col("node").isNotNull())
           .select("run_id", "target", "node", F.col("value_ns").cast("double").alias("v"),
                   "count"))
    node_e2e = {(r["run_id"], r["target"], r["node"]): r["pct"] for r in
                _weighted_percentiles(e2e, ("run_id", "target", "node"), (50.0, 99.0))}
    order = {k: i for i, k in enumerate(keys)}
    out = []
    for r in rows:
        key = (r["run_id"], r["target"])
        target = per_target.get(key)
        p50, p99 = node_e2e.get((*key, r["node"]), (None, None))
        out.append(NodeRow(
            key, r["node"], r["host"], _int(r["produced"]), _int(r["consumed"]), _num(r["cpu"]),
            _num(r["lag"]), _int(r["memory"]), _int(r["sat"]), _num(r["lo"]), _num(r["hi"]),
            _num(r["bound"]), _int(target["below"]) if target else 0,
            _int(target["lost"]) if target else 0, _num(p50), _num(p99)))
    return sorted(out, key=lambda n: (order.get(n.key, len(order)), n.node))


# -- fault windows -----------------------------------------------------------------------------


def _fault_windows(spark: SparkSession, runs: Sequence[RunInfo], measuring: DataFrame,
                   changes: list[ChangeRow]) -> list[FaultWindow]:
    """Each fault's windows (analysis.faultwindows): the faulted targets' ticks collected (one
    row a second), the e2e percentiles of each window exact from the buckets of its ticks."""
    faulted = sorted({r.event.key for r in changes if is_fault(r.event.kind)})
    if not faulted:
        return []
    wanted = [f"{k[0]}{_SEP}{k[1]}" for k in faulted]
    ticks: dict[Key, list[Tick]] = {}
    for r in (measuring.where(F.concat_ws(_SEP, "run_id", "target").isin(*wanted))
              .select("run_id", "target", "seq", F.unix_micros("time").alias("end_us"),
                      "interval_s", "produced", "consumed", "send_errors", "lag_total")
              .collect()):
        ticks.setdefault(_key(r), []).append(Tick(
            int(r["seq"]), int(r["end_us"]), _num(r["interval_s"]), _int(r["produced"]),
            _int(r["consumed"]), _int(r["send_errors"]),
            None if r["lag_total"] is None else int(r["lag_total"])))
    for rows in ticks.values():
        rows.sort(key=lambda t: t.seq)
    spans = fault_spans(changes, ticks)
    if not spans:
        return []
    labels = [F.when((F.col("run_id") == row.event.run_id) & (F.col("target") == row.event.target)
                     & F.col("seq").isin(*span.seqs), F.lit(f"{span.fault}/{span.name}"))
              for row, parts in spans for span in parts if span.seqs]
    pcts: dict[str, list[Any]] = {}
    if labels:
        buckets = (read_table(spark, runs, "latency").where(_measuring() & (F.col("kind") == "e2e"))
                   .where(F.concat_ws(_SEP, "run_id", "target").isin(*wanted))
                   .select(F.explode(F.array_compact(F.array(*labels))).alias("window"),
                           F.col("value_ns").cast("double").alias("v"), "count"))
        pcts = {str(r["window"]): r["pct"]
                for r in _weighted_percentiles(buckets, ("window",), WINDOW_PERCENTILES)}
    out = []
    for row, parts in spans:
        key = row.event.key
        windows = []
        for span in parts:
            got = pcts.get(f"{span.fault}/{span.name}") or [None] * len(WINDOW_PERCENTILES)
            windows.append(figures(span, ticks[key], {
                p: _num(v) / 1e6 for p, v in zip(WINDOW_PERCENTILES, got, strict=True)}))
        meta = next(r for r in runs if r.run_id == key[0]).meta
        out.append(FaultWindow(key, row, windows, audit_window(target_audit(meta, key[1]), row)))
    return out


# -- the job -----------------------------------------------------------------------------------


def compute_report(
    spark: SparkSession,
    runs: Sequence[RunInfo],
    progress: Progress | None = None,
    baseline: str | None = None,
) -> ReportData:
    """Every figure of the report, per (run, target), measuring phase only. `baseline` names
    the target the comparison divides by (checked before the heavy steps: ReportError when it
    names no target); None means the first target."""
    say = progress or (lambda _msg: None)
    with JobProgress(spark.sparkContext, say) as steps:
        steps.step("reading runs")
        ticks = read_table(spark, runs, "ticks").cache()
        try:
            totals = _totals(ticks)
            keys = _target_order(runs, _check_phases(totals, runs))
            labels = target_labels(keys)
            baseline_key = resolve_baseline(baseline, labels) if baseline is not None else None
            measuring = ticks.where(_measuring())
            steps.step("per-second series and trends")
            per_second = _per_second(measuring)
            series_rows = _series_rows(per_second)
            timelines = _timelines(per_second)
            steps.step("events and segments")
            events = _events(spark, runs)
            bounds = {k: (totals[k].start_us, totals[k].end_us) for k in keys}
            starts = _segment_starts(measuring, split_points(events, bounds))
            seg_totals = _segment_totals(measuring, starts)
            histograms = _period_histograms(
                _buckets(read_table(spark, runs, "latency"), totals, _segment_column(starts),
                         _clamp_bounds(totals, seg_totals))
            ).persist(StorageLevel.MEMORY_AND_DISK)
            try:
                steps.step("latency percentiles")
                latency = _latency(histograms, totals)
                segments = _segments(histograms, totals, seg_totals, starts)
                steps.step("OpenMessaging-Benchmark periods")
                periods = _periods(measuring, histograms, totals)
            finally:
                histograms.unpersist()
            steps.step("fault windows")
            changes = change_rows(events, {k: totals[k].start_us for k in keys})
            fault_windows = _fault_windows(spark, runs, measuring, changes)
            steps.step("broker metrics")
            broker_metrics = _broker_metrics(spark, runs)
            steps.step("load nodes")
            nodes = _nodes(spark, runs, measuring, keys)
        finally:
            ticks.unpersist()

    targets = []
    for key in keys:
        run_id, target = key
        total = totals[key]
        timeline = timelines[key]
        series = {}
        for s in SERIES:
            row = series_rows.get(key, {}).get(s.name)
            if row is None or (s.network and not total.throughput.network_known):
                continue
            series[s.name] = _series_stats(row, timeline, s.name)
        lat = latency.get(key, {})
        run = next(r for r in runs if r.run_id == run_id)
        expected = total.throughput.produced * _subscriptions(run)
        targets.append(
            TargetReport(
                run_id=run_id,
                target=target,
                label=labels[key],
                persistent=run.persistent(target),
                throughput=total.throughput,
                series=series,
                latency={k: lat.get(k, _empty_latency()) for k in LATENCY_KINDS},
                periods=periods.get(key, []),
                timeline=timeline,
                send_errors_measuring=total.errors[0],
                send_errors_total=total.errors[1],
                loadgen_saturated_s=total.loadgen[0],
                loadgen_cpu_percent=total.loadgen[1],
                marks=run_marks(run.meta, target),
                e2e_unsampled=max(expected - total.latency["e2e"][0], 0),
                e2e_expected=expected,
                segments=segments.get(key, []),
                measuring_start_s=total.start_elapsed_s,
                broker_metrics=broker_metrics.get(key, []),
            )
        )
    chosen = baseline_key or keys[0]
    base = next(t for t in targets if (t.run_id, t.target) == chosen)
    measuring_start = {k: totals[k].start_us for k in keys}
    return ReportData(runs=list(runs), targets=targets, baseline=base, changes=changes,
                      assignments=assignment_rows(events, measuring_start), nodes=nodes,
                      fault_windows=fault_windows)
