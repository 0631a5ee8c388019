"""The broker-metrics trait: the declarations' names and units, every declaring platform's
list, the INFO parsing of Redis's collector, and the run files' broker_metrics table written by
the sink and read back by the replay (stale marks included)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.dataset as ds
import pytest

from analysis.sink import ParquetSink
from loadgen.core.brokermetrics import UNITS, BrokerMetric, BrokerMetrics, unit_of
from loadgen.core.events import RunMeta
from loadgen.core.histogram import HistogramSnapshot
from loadgen.core.ticks import BrokerMetricValues, Phase, Resources, Tick
from loadgen.platforms import PLATFORMS
from loadgen.platforms.redis_metrics import command_stat, info_fields
from tui.bench.recording import load_recording

T0_NS = 1_800_000_000_000_000_000


@pytest.mark.parametrize("name, unit", [
    ("xadd_time_seconds", "seconds"), ("used_memory_bytes", "bytes"),
    ("mem_fragmentation_ratio", "ratio"), ("ops_per_second", "per_second"),
    ("blocked_clients", "count"), ("aof_delayed_fsync_total", "count")])
def test_a_names_suffix_is_its_unit(name: str, unit: str) -> None:
    assert unit_of(name) == unit
    assert BrokerMetric(name, "native", unit, "why").unit == unit


@pytest.mark.parametrize("name, unit", [
    ("flush_time_ms", "seconds"), ("used_memory", "bytes"), ("queue_seconds", "count"),
    ("ops", "hertz"), ("Ops-Per_second", "per_second")])
def test_a_name_that_does_not_say_its_unit_is_refused(name: str, unit: str) -> None:
    with pytest.raises(ValueError, match=name):
        BrokerMetric(name, "native", unit, "why")


def test_a_name_declared_twice_is_refused() -> None:
    m = BrokerMetric("blocked_clients", "blocked_clients", "count", "why")
    with pytest.raises(ValueError, match="twice"):
        BrokerMetrics("INFO", (m, m), lambda _t, _d, _n: None)  # type: ignore[arg-type,return-value]


def test_every_declaring_platform_has_a_handful_with_reasons() -> None:
    declaring = {name: trait for name in PLATFORMS
                 if (trait := PLATFORMS[name].broker_metrics) is not None}
    assert "redis" in declaring
    for name, trait in declaring.items():
        assert 5 <= len(trait.metrics) <= 12, name
        for m in trait.metrics:
            assert m.unit in UNITS and m.native and len(m.why) > 30, (name, m.name)


def test_info_replies_parsed_as_the_server_writes_them() -> None:
    reply = (b"# Stats\r\ninstantaneous_ops_per_sec:4123\r\ntotal_commands_processed:99\r\n"
             b"\r\n# Commandstats\r\n"
             b"cmdstat_xadd:calls=12,usec=96,usec_per_call=8.00,rejected_calls=0,failed_calls=0\r\n")
    fields = info_fields(reply)
    assert fields["instantaneous_ops_per_sec"] == "4123"
    assert command_stat(fields["cmdstat_xadd"]) == (12.0, 96.0)
    assert "# Stats" not in fields and "" not in fields


def _tick(seq: int, metrics: BrokerMetricValues | None) -> Tick:
    empty = HistogramSnapshot.empty()
    return Tick(target="t", seq=seq, time_ns=T0_NS + seq * 10**9, interval_s=1.0,
                phase=Phase.MEASURING, elapsed_s=float(seq), produced=1, produced_bytes=1,
                consumed=1, consumed_bytes=1, send_errors=0, target_rate=1.0,
                publish_latency=empty, publish_delay=empty, e2e_latency=empty, lag=None,
                resources=Resources(), broker_metrics=metrics)


def test_the_table_round_trips_through_the_sink_and_the_replay(tmp_path: Path) -> None:
    fresh = BrokerMetricValues({"b-1": {"ops_per_second": 10.0, "used_memory_bytes": 5e6},
                                "b-2": {"ops_per_second": 20.0}})
    stale = BrokerMetricValues(fresh.values, stale=("b-2",), problem="TimeoutError")
    sink = ParquetSink(tmp_path / "run", "r", background=False)
    for seq, m in enumerate((fresh, stale, None)):
        sink(_tick(seq, m))
    sink(RunMeta({"run_id": "r", "targets": [{"label": "t", "platform": "redis"}]}))
    sink.close()
    rows = ds.dataset(tmp_path / "run" / "broker_metrics", format="parquet").to_table().to_pylist()
    assert sorted((r["seq"], r["broker"], r["name"], r["unit"], r["value"], r["stale"])
                  for r in rows) == [
        (0, "b-1", "ops_per_second", "per_second", 10.0, False),
        (0, "b-1", "used_memory_bytes", "bytes", 5e6, False),
        (0, "b-2", "ops_per_second", "per_second", 20.0, False),
        (1, "b-1", "ops_per_second", "per_second", 10.0, False),
        (1, "b-1", "used_memory_bytes", "bytes", 5e6, False),
        (1, "b-2", "ops_per_second", "per_second", 20.0, True)]
    ticks = [i for i in load_recording(tmp_path / "run").items if isinstance(i, Tick)]
    assert [t.broker_metrics.values if t.broker_metrics else None for t in ticks] == [
        fresh.values, fresh.values, None]
    assert [t.broker_metrics.stale if t.broker_metrics else None for t in ticks] == [
        (), ("b-2",), None]


# the broker's own text, as Pulsar 4.0.8's standalone wrote it (a partition of the run's topic
# and a topic of the broker's own; one bucket of each family shown in full)
_T = 'cluster="standalone",namespace="public/default",topic="persistent://public/default/'
PULSAR_TEXT = "\n".join([
    "# TYPE pulsar_rate_in gauge",
    f'pulsar_rate_in{{{_T}run-0-partition-0"}} 999.734',
    f'pulsar_rate_in{{{_T}run-0-partition-1"}} 0.266',
    f'pulsar_rate_in{{{_T}__change_events"}} 5.0',
    f'pulsar_rate_out{{{_T}run-0-partition-0"}} 999.051',
    f'pulsar_msg_backlog{{{_T}run-0-partition-0"}} 47',
    f'pulsar_subscription_unacked_messages{{{_T}run-0-partition-0",subscription="s"}} 83',
    *(f'pulsar_storage_write_latency_{b}{{{_T}run-0-partition-0"}} {n}' for b, n in (
        ("le_0_5", 283), ("le_1", 255), ("le_5", 25912), ("le_10", 639), ("le_20", 268),
        ("le_50", 115), ("le_100", 17), ("le_200", 4), ("le_1000", 0), ("overflow", 0))),
    f'pulsar_storage_write_latency_sum{{{_T}run-0-partition-0"}} 54435657',
    f'pulsar_storage_write_latency_count{{{_T}run-0-partition-0"}} 27493',
    f'pulsar_storage_ledger_write_latency_sum{{{_T}run-0-partition-0"}} 0',
    f'pulsar_storage_ledger_write_latency_count{{{_T}run-0-partition-0"}} 0',
    f'pulsar_storage_write_latency_sum{{{_T}__change_events"}} 9e9',
    f'pulsar_storage_write_latency_count{{{_T}__change_events"}} 1',
])


def test_pulsars_metrics_from_its_text() -> None:
    """The run's partitions summed, the broker's own topic left out; the latency's mean from
    its sum (µs) over its count, its p99 the upper edge of the bucket where 99 % of the counts
    are reached (283 + 255 + 25,912 + 639 + 268 = 27,357 ≥ 0.99 × 27,493: the 20 ms bucket);
    a latency of a period without writes (count 0) left out, not 0."""
    from collectors.pulsar import pulsar_metrics

    found = pulsar_metrics(PULSAR_TEXT, ("persistent://public/default/run-0-partition-",))
    assert found == pytest.approx({
        "in_messages_per_second": 1000.0, "out_messages_per_second": 999.051,
        "backlog_messages": 47.0, "ack_pending_messages": 83.0,
        "storage_write_latency_seconds": 54435657 / 27493 / 1e6,
        "storage_write_latency_p99_seconds": 0.020})


def test_rabbitmqs_metrics_from_its_replies() -> None:
    """Rates from the publishers' counters over the seconds between reads; confirms
    outstanding; a node that has not gathered its figures yet (its reply `[[]]`, read as no
    rows, as early in a run) gives no memory, disk or alarm figure rather than zeros."""
    from collectors.rabbitmq import RabbitMetrics

    c = RabbitMetrics("http://127.0.0.1:1", "guest", "guest")
    publishers = [{"published": 1000, "confirmed": 990}, {"published": 500, "confirmed": 500}]
    c.metrics(publishers, [], [], [], 10.0)
    later = [{"published": 3000, "confirmed": 2990}, {"published": 2500, "confirmed": 2480}]
    nodes = [{"mem_used": 150e6, "disk_free": 60e9, "mem_alarm": False, "disk_free_alarm": True}]
    found = c.metrics(later, [{"offset_lag": 3}, {"offset_lag": 4}], [{"name": "a"}] * 4,
                      nodes, 12.0)
    assert found == {"published_per_second": 2000.0, "confirmed_per_second": 1990.0,
                     "unconfirmed_messages": 30.0, "consumer_offset_lag_messages": 7.0,
                     "connected_clients": 4.0, "used_memory_bytes": 150e6,
                     "disk_free_bytes": 60e9, "resource_alarms": 1.0}
    assert "used_memory_bytes" not in c.metrics(later, [], [], [], 13.0)
