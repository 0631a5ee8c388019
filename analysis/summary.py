"""The report's figures as one flat table, one row per (run, target): summary.parquet and
summary.csv, for spreadsheets, notebooks and comparisons across reports. A figure that does
not exist (no samples, not measured) is null."""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa

from analysis.compute import LATENCY_PERCENTILES, RATE_PERCENTILES, SERIES, ReportData, TargetReport
from analysis.events import is_change
from analysis.labels import KILLED, NOT_DRAINED, STOPPED_EARLY
from analysis.schema import LATENCY_KINDS

# 2: loadgen_saturated_s, loadgen_cpu_percent
# 3: marks, killed, stopped_early, drained, e2e_unsampled, segments, changes; the % per hour
#    slopes are null for targets measured for less than 5 minutes
SUMMARY_VERSION = 3


def percentile_tag(p: float) -> str:
    """Column-name form of a percentile: 99.9 -> p99_9."""
    return "p" + f"{p:g}".replace(".", "_")


def _f(value: float) -> float | None:
    return value if math.isfinite(value) else None


STRING, INT, FLOAT, BOOL = pa.string(), pa.int64(), pa.float64(), pa.bool_()


class _Row:
    """Columns of one summary row in order, each with its Arrow type."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.types: dict[str, pa.DataType] = {}

    def add(self, name: str, type_: pa.DataType, value: Any) -> None:
        if type_ == FLOAT and value is not None:
            value = _f(float(value))
        self.values[name] = value
        self.types[name] = type_


def _row(data: ReportData, t: TargetReport) -> _Row:
    tp = t.throughput
    row = _Row()
    row.add("run_id", STRING, t.run_id)
    row.add("target", STRING, t.target)
    row.add("label", STRING, t.label)
    row.add("workload", STRING, str(data.run(t.run_id).workload.get("name", "")))
    row.add("persistent", BOOL, t.persistent)
    row.add("baseline", BOOL, t is data.baseline)
    row.add("marks", STRING, ", ".join(t.marks) or None)  # null: no mark
    row.add("killed", BOOL, KILLED in t.marks)
    row.add("stopped_early", BOOL, STOPPED_EARLY in t.marks)
    # null when run.json does not say (a killed run, or one written before it was recorded)
    row.add("drained", BOOL, _drained(data, t))
    row.add("ticks", INT, tp.ticks)
    row.add("seconds", FLOAT, tp.seconds)
    for name in ("produced", "produced_bytes", "consumed", "consumed_bytes", "net_rx_bytes",
                 "net_tx_bytes"):
        row.add(name, INT, getattr(tp, name))
    for name in ("message_bytes", "produce_msg_s", "produce_mb_s", "consume_msg_s",
                 "consume_mb_s", "net_rx_mb_s", "net_tx_mb_s"):
        row.add(name, FLOAT, getattr(tp, name))
    for s in SERIES:
        stats = t.series.get(s.name)
        tr = stats.trend if stats else None
        row.add(f"{s.name}_points", INT, stats.points if stats else None)
        row.add(f"{s.name}_mean", FLOAT, stats.mean if stats else None)
        for stat in ("min", *(f"p{p:g}" for p in RATE_PERCENTILES), "max"):
            row.add(f"{s.name}_{stat}", FLOAT, stats.dist[stat] if stats else None)
        row.add(f"{s.name}_slope_per_min", FLOAT, tr.slope if tr else None)
        row.add(f"{s.name}_slope_ci_low", FLOAT, tr.low if tr else None)
        row.add(f"{s.name}_slope_ci_high", FLOAT, tr.high if tr else None)
        row.add(f"{s.name}_slope_pct_per_hour", FLOAT,
                tr.per_hour_pct(tr.slope) if tr and t.extrapolates else None)
        row.add(f"{s.name}_slope_r2", FLOAT, tr.r2 if tr else None)
        row.add(f"{s.name}_theil_sen_per_min", FLOAT, tr.theil_sen if tr else None)
        row.add(f"{s.name}_trend", STRING, tr.verdict if tr else None)
    for kind in LATENCY_KINDS:
        lat = t.latency[kind]
        row.add(f"{kind}_samples", INT, lat.samples)
        row.add(f"{kind}_mean_ms", FLOAT, lat.mean_ms)
        row.add(f"{kind}_min_ms", FLOAT, lat.min_ms)
        for p in LATENCY_PERCENTILES:
            tag = percentile_tag(p)
            row.add(f"{kind}_{tag}_ms", FLOAT, lat.percentiles_ms[p])
            row.add(f"{kind}_{tag}_samples_beyond", INT, lat.beyond(p))
        row.add(f"{kind}_max_ms", FLOAT, lat.max_ms)
    row.add("e2e_unsampled", INT, t.e2e_unsampled)
    row.add("send_errors_measuring", INT, t.send_errors_measuring)
    row.add("send_errors_total", INT, t.send_errors_total)
    row.add("loadgen_saturated_s", FLOAT, t.loadgen_saturated_s)
    row.add("loadgen_cpu_percent", FLOAT, t.loadgen_cpu_percent)
    row.add("segments", INT, max(len(t.segments), 1))
    row.add("changes", INT, sum(1 for c in data.changes
                                if c.event.key == (t.run_id, t.target) and is_change(c.event.kind)))
    return row


def _drained(data: ReportData, t: TargetReport) -> bool | None:
    if NOT_DRAINED in t.marks:
        return False
    totals = data.run(t.run_id).meta.get("totals")
    for entry in totals if isinstance(totals, list) else []:
        if isinstance(entry, dict) and str(entry.get("label")) == t.target:
            drained = entry.get("drained")
            return drained if isinstance(drained, bool) else None
    return None


def summary_table(data: ReportData) -> pa.Table:
    rows = [_row(data, t) for t in data.targets]
    types = rows[0].types
    arrays = [pa.array([r.values[name] for r in rows], type=type_) for name, type_ in types.items()]
    return pa.Table.from_arrays(
        arrays,
        names=list(types),
        metadata={"streambench.table": "summary",
                  "streambench.summary_version": str(SUMMARY_VERSION)},
    )
