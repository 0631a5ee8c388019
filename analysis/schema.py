"""Arrow schemas of the run tables (see docs/run-format.md).

Every timestamp is microseconds since the epoch, UTC: Spark cannot read nanosecond Parquet
timestamps. Latencies are integer nanoseconds. The schema version is stored in run.json and in
each Parquet file's schema metadata. It goes up with every change of the tables; the minimum
reader version goes up only with a change an older reader would misread (a renamed or removed
column, a new type or unit), so older readers keep reading runs that only gained columns.
"""

from __future__ import annotations

import pyarrow as pa

# 2: ticks gained the load generator's own figures (loadgen_*); 3: the consumers table;
# 4: ticks gained the audit's duplicates and reordered, e2e_below_zero, e2e_clock_bound_ns,
# nodes_lost and the time lag (lag_seconds*, lag_drain_s); lag gained time_lag_s and leader;
# the broker_metrics, nodes and subscriptions tables; 5: ticks gained nodes_late and
# nodes_late_counted; 6: the latency table's node column, with rows per load node beside the
# target's (a reader before 6 would add those rows into the target's histogram)
SCHEMA_VERSION = 6
MIN_READER_VERSION = 6  # the oldest reader that reads what this version writes
# a run without load nodes (no --cluster) has no per-node latency rows: every change since
# version 1 is then additive, and run.json says version 1 readers read it
MIN_READER_WITHOUT_NODES = 1

TIMESTAMP = pa.timestamp("us", tz="UTC")
LATENCY_KINDS: tuple[str, ...] = ("e2e", "publish", "delay")

# per-tick latency summary columns, one group per kind: "<kind>_<stat>"
SUMMARY_STATS: tuple[tuple[str, pa.DataType], ...] = (
    ("count", pa.int64()),
    ("sum", pa.int64()),
    ("min", pa.int64()),
    ("p50", pa.float64()),
    ("p99", pa.float64()),
    ("p999", pa.float64()),
    ("max", pa.int64()),
)


def _req(name: str, type_: pa.DataType) -> pa.Field:
    return pa.field(name, type_, nullable=False)


def _opt(name: str, type_: pa.DataType) -> pa.Field:
    return pa.field(name, type_, nullable=True)


def _key_fields() -> list[pa.Field]:
    return [
        _req("run_id", pa.string()),
        _req("target", pa.string()),
        _req("seq", pa.int64()),
        _req("time", TIMESTAMP),
        _req("phase", pa.string()),
    ]


def _summary_fields() -> list[pa.Field]:
    fields = []
    for kind in LATENCY_KINDS:
        for stat, type_ in SUMMARY_STATS:
            # count and sum are 0 for an empty interval; the rest are null then
            make = _req if stat in ("count", "sum") else _opt
            fields.append(make(f"{kind}_{stat}", type_))
    return fields


def _with_meta(name: str, fields: list[pa.Field]) -> pa.Schema:
    return pa.schema(
        fields,
        metadata={
            "streambench.table": name,
            "streambench.schema_version": str(SCHEMA_VERSION),
            "streambench.min_reader_version": str(MIN_READER_VERSION),
        },
    )


TICKS = _with_meta(
    "ticks",
    [
        _req("run_id", pa.string()),
        _req("target", pa.string()),
        _req("seq", pa.int64()),
        _req("time", TIMESTAMP),
        _req("interval_s", pa.float64()),
        _req("phase", pa.string()),
        _req("elapsed_s", pa.float64()),
        _req("produced", pa.int64()),
        _req("produced_bytes", pa.int64()),
        _req("consumed", pa.int64()),
        _req("consumed_bytes", pa.int64()),
        _req("send_errors", pa.int64()),
        _req("target_rate", pa.float64()),
        _req("produced_total", pa.int64()),
        _req("consumed_total", pa.int64()),
        _opt("lag_total", pa.int64()),
        _opt("cpu_percent", pa.float64()),
        _req("memory_bytes", pa.int64()),
        _req("disk_read_bytes", pa.int64()),
        _req("disk_write_bytes", pa.int64()),
        _req("net_rx_bytes", pa.int64()),
        _req("net_tx_bytes", pa.int64()),
        *_summary_fields(),
        # the load generator itself (schema 2; null in older runs)
        _opt("loadgen_cpu_percent", pa.float64()),
        _opt("loadgen_loop_lag_ms", pa.float64()),
        _opt("loadgen_saturated", pa.string()),  # why it was the bottleneck; empty when not
        # the delivery audit's finds in the interval (schema 4; 0 without --audit, null before)
        _opt("duplicates", pa.int64()),
        _opt("reordered", pa.int64()),
        # e2e samples below zero (counted as 0 in the e2e figures) and the largest clock error
        # bound applied to the interval's samples (schema 4; null in older runs)
        _opt("e2e_below_zero", pa.int64()),
        _opt("e2e_clock_bound_ns", pa.int64()),
        # load nodes of the target lost by the tick, their share missing (schema 4)
        _opt("nodes_lost", pa.int64()),
        # load nodes whose tick was late, their share counted in a later tick (schema 5)
        _opt("nodes_late", pa.int64()),
        _opt("nodes_late_counted", pa.int64()),
        # the time lag (schema 4; null in older runs and where not known)
        _opt("lag_seconds", pa.float64()),
        _opt("lag_seconds_exact", pa.bool_()),  # false: the estimate, lag ÷ consume rate
        _opt("lag_seconds_bound", pa.float64()),
        _opt("lag_seconds_trend", pa.float64()),
        _opt("lag_drain_s", pa.float64()),  # inf: growing
    ],
)

LATENCY = _with_meta(
    "latency",
    [
        *_key_fields(),
        _req("kind", pa.string()),
        _req("bucket", pa.int64()),
        _req("value_ns", pa.int64()),
        _req("count", pa.int64()),
        # null: the target's histogram (every node's merged); a load node's id: that node's
        # own share, beside it (schema 6; no such rows before)
        _opt("node", pa.string()),
    ],
)

LAG = _with_meta(
    "lag",
    [
        *_key_fields(),
        _req("partition", pa.int32()),
        _req("lag", pa.int64()),
        _req("source", pa.string()),
        _opt("time_lag_s", pa.float64()),  # schema 4: the age of the oldest unread message
        _opt("leader", pa.bool_()),  # schema 4: false while the partition has no leader
    ],
)

SUBSCRIPTIONS = _with_meta(
    "subscriptions",
    [
        *_key_fields(),
        _req("subscription", pa.string()),
        _opt("time_lag_s", pa.float64()),  # the oldest unread message over its partitions
        _req("status", pa.string()),  # OK, WARN, STALL or STOP
    ],
)

BROKER = _with_meta(
    "broker",
    [
        *_key_fields(),
        _req("name", pa.string()),
        _req("value", pa.float64()),
    ],
)

BROKER_METRICS = _with_meta(
    "broker_metrics",
    [
        *_key_fields(),
        _req("broker", pa.string()),  # the broker of the target's stack that it describes
        _req("name", pa.string()),  # streambench's name (loadgen.core.brokermetrics)
        _req("unit", pa.string()),  # seconds, bytes, ratio, per_second or count
        _req("value", pa.float64()),
        # the read failed at this tick: the value is the last one read (a paused broker)
        _req("stale", pa.bool_()),
    ],
)

CONSUMERS = _with_meta(
    "consumers",
    [
        *_key_fields(),
        _req("topic", pa.int32()),  # the topic's number within the target
        _req("subscription", pa.string()),
        _req("consumer", pa.int32()),  # its number within the subscription
        _req("consumed", pa.int64()),  # messages in the interval
        # the partitions it held at the tick; null when the broker assigns them unseen
        _opt("partitions", pa.list_(pa.int32())),
        _req("shared", pa.bool_()),  # read together with the subscription's other consumers
    ],
)

NODES = _with_meta(
    "nodes",
    [
        *_key_fields(),
        _req("node", pa.string()),  # the node's id (Ray's)
        _req("host", pa.string()),
        _req("produced", pa.int64()),  # messages in the interval
        _req("consumed", pa.int64()),
        _opt("loadgen_cpu_percent", pa.float64()),  # the node's load actor
        _opt("loadgen_loop_lag_ms", pa.float64()),
        _req("memory_bytes", pa.int64()),  # the actor's resident memory
        _req("loadgen_saturated", pa.string()),
        # the node's wall clock against the coordinator's, as estimated last
        _opt("clock_offset_ns", pa.int64()),  # its wall clock minus the coordinator's
        _opt("clock_bound_ns", pa.int64()),  # the most the offset can be wrong by
        _opt("clock_estimated", TIMESTAMP),  # when that estimate was made
    ],
)

EVENTS = _with_meta(
    "events",
    [
        _req("run_id", pa.string()),
        _req("target", pa.string()),
        _req("time", TIMESTAMP),
        _req("phase", pa.string()),
        _req("kind", pa.string()),
        _req("detail", pa.string()),
    ],
)

RAW = _with_meta(
    "raw",
    [
        *_key_fields(),
        _req("kind", pa.string()),
        _req("value_ns", pa.int64()),
    ],
)

SCHEMAS: dict[str, pa.Schema] = {
    "ticks": TICKS,
    "latency": LATENCY,
    "lag": LAG,
    "broker": BROKER,
    "broker_metrics": BROKER_METRICS,
    "consumers": CONSUMERS,
    "nodes": NODES,
    "subscriptions": SUBSCRIPTIONS,
    "events": EVENTS,
    "raw": RAW,
}
