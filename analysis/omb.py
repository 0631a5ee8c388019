"""One OpenMessaging-Benchmark result JSON per target, so OMB's chart tooling
(bin/create_charts.py and the like) reads streambench runs.

The keys, units and shapes are OMB's TestResult: per-period lists (one value per 10-second
period of the measuring phase) for rates, backlog and latency, `aggregated…` figures over the
whole measuring phase, and `aggregated…Quantiles` maps from percentile (0–100) to latency.
Latency is in milliseconds, except publish delay, which OMB gives in whole microseconds. A
figure with no sample is 0, as in OMB's empty histograms; the files are strict JSON (no NaN).
"""

from __future__ import annotations

import math
from typing import Any

from analysis.compute import NINES_PERCENTILES, OMB_PERCENTILES, ReportData, TargetReport

# streambench latency kind -> OMB key stem, and whether OMB keeps it in whole microseconds
_KINDS: dict[str, tuple[str, bool]] = {
    "publish": ("publishLatency", False),
    "delay": ("publishDelayLatency", True),
    "e2e": ("endToEndLatency", False),
}


def _suffix(p: float) -> str:
    """OMB's name of a percentile: 50 -> 50pct, 99.9 -> 999pct, 99.999 -> 99999pct."""
    return f"{p:g}".replace(".", "") + "pct"


def _ms(value: float) -> float:
    return value if math.isfinite(value) else 0.0


def _us(value_ms: float) -> int:
    return round(value_ms * 1000.0) if math.isfinite(value_ms) else 0


def _stem_upper(stem: str) -> str:
    return stem[0].upper() + stem[1:]


def omb_result(data: ReportData, t: TargetReport) -> dict[str, Any]:
    w = data.run(t.run_id).workload

    def workload_int(key: str, default: int) -> int:
        value = w.get(key)
        return int(value) if isinstance(value, int | float) else default

    size = round(t.throughput.message_bytes) if t.throughput.produced else 0
    result: dict[str, Any] = {
        "workload": str(w.get("name") or t.run_id),
        "driver": t.heading,
        "messageSize": workload_int("messageSize", size),
        "topics": workload_int("topics", 1),
        "partitions": workload_int("partitionsPerTopic", 1),
        "producersPerTopic": workload_int("producersPerTopic", 1),
        "consumersPerTopic": workload_int("subscriptionsPerTopic", 1)
        * workload_int("consumerPerSubscription", 1),
        "publishRate": [_ms(p.publish_rate) for p in t.periods],
        "publishErrorRate": [_ms(p.error_rate) for p in t.periods],
        "consumeRate": [_ms(p.consume_rate) for p in t.periods],
        "backlog": [round(p.backlog) if math.isfinite(p.backlog) else 0 for p in t.periods],
    }
    for kind, (stem, micros) in _KINDS.items():
        conv = _us if micros else _ms
        result[f"{stem}Avg"] = [_ms(p.latency[kind].mean_ms * (1000.0 if micros else 1.0))
                                for p in t.periods]
        for q in OMB_PERCENTILES:
            result[f"{stem}{_suffix(q)}"] = [conv(p.latency[kind].percentiles_ms[q])
                                             for p in t.periods]
        result[f"{stem}Max"] = [conv(p.latency[kind].max_ms) for p in t.periods]

        stats = t.latency[kind]
        agg = f"aggregated{_stem_upper(stem)}"
        result[f"{agg}Avg"] = _ms(stats.mean_ms * (1000.0 if micros else 1.0))
        for q in OMB_PERCENTILES:
            result[f"{agg}{_suffix(q)}"] = conv(stats.percentiles_ms[q])
        result[f"{agg}Max"] = conv(stats.max_ms)
        quantiles: dict[str, float | int] = {
            str(q): conv(stats.percentiles_ms[q]) for q in NINES_PERCENTILES
        }
        quantiles[str(100.0)] = conv(stats.max_ms)
        result[f"{agg}Quantiles"] = quantiles
    return result


def result_file_name(t: TargetReport) -> str:
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in f"{t.run_id}--{t.target}")
    return f"{safe}.json"
