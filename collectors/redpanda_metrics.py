"""Redpanda's broker metrics, read once per tick from each broker's `/public_metrics` (the Admin
API port, 9644 by default): the Kafka API's produce and consume latency (p99 of the requests
made during the tick, from the histogram's bucket counts), the records produced per second,
under-replicated replicas, the reactor's CPU busy time, leadership changes, the memory its
shards have left and the disk-space alert.

The names are those of Redpanda's public metrics reference (Redpanda Data, "Public Metrics",
docs.redpanda.com, 2025). No Redpanda runs where streambench is tested: the parser is tested
against an exposition written from that reference, and the reading (HTTP once per tick, counter
rates) is the code path Kafka's exporter endpoints go through."""

from __future__ import annotations

from collections.abc import Mapping

from collectors.scrape import BrokerState, EndpointMetrics, Sample, buckets_of, sums
from loadgen.core.brokermetrics import BrokerMetric

SOURCE = "/public_metrics"
PATH = "/public_metrics"
_LATENCY = "redpanda_kafka_request_latency_seconds"

METRICS: tuple[BrokerMetric, ...] = (
    BrokerMetric("produce_latency_p99_seconds",
                 f"{_LATENCY}{{redpanda_request=\"produce\"}} p99", "seconds",
                 "the broker's own p99 time for produce requests made during the tick (its "
                 "histogram's buckets, powers of two in µs): beside the clients' publish latency, "
                 "what of it is the broker's"),
    BrokerMetric("consume_latency_p99_seconds",
                 f"{_LATENCY}{{redpanda_request=\"consume\"}} p99", "seconds",
                 "the broker's p99 time for fetch requests made during the tick, the wait for new "
                 "data included"),
    BrokerMetric("records_produced_per_second", "redpanda_kafka_records_produced_total",
                 "per_second",
                 "records appended per second, over every topic: the produced rate as the "
                 "broker counts it"),
    BrokerMetric("under_replicated_replicas", "redpanda_kafka_under_replicated_replicas",
                 "count",
                 "replicas that are live but behind the latest offset: above 0 a follower is "
                 "slow or lost"),
    BrokerMetric("cpu_busy_ratio", "redpanda_cpu_busy_seconds_total", "ratio",
                 "the fraction of the tick the reactor's shards were busy (averaged over the "
                 "shards): Redpanda polls, so the process's CPU time says little and this is "
                 "its real load"),
    BrokerMetric("leadership_changes_total", "redpanda_raft_leadership_changes", "count",
                 "partition leadership changes since the broker started: each one stalls that "
                 "partition's producers for an election"),
    BrokerMetric("available_memory_bytes", "redpanda_memory_available_memory", "bytes",
                 "memory the shards can still use (free plus reclaimable): near 0 the batch "
                 "cache shrinks and reads go to disk"),
    BrokerMetric("disk_free_space_alert", "redpanda_storage_disk_free_space_alert", "count",
                 "0 with enough disk, 1 low on space, 2 degraded (producers refused)"),
)


def interpret(samples: list[Sample], state: BrokerState) -> dict[str, float]:
    """One read of a broker's /public_metrics as its broker metrics (rates and the tick's
    latency quantiles from the second read on; a metric Redpanda does not export, as for a
    feature not in use, is left out)."""
    values: dict[str, float] = {}
    for name, request in (("produce_latency_p99_seconds", "produce"),
                          ("consume_latency_p99_seconds", "consume")):
        buckets = buckets_of(samples, _LATENCY, redpanda_request=request)
        if buckets and (p99 := state.interval_quantile(name, buckets, 0.99)) is not None:
            values[name] = p99
    produced = sums(samples, "redpanda_kafka_records_produced_total")
    rate = state.rate("records_produced_per_second", produced) if produced is not None else None
    if rate is not None:
        values["records_produced_per_second"] = rate
    busy = [s for s in samples if s.name == "redpanda_cpu_busy_seconds_total"]
    if busy:
        rate = state.rate("cpu_busy_ratio", sum(s.value for s in busy))
        if rate is not None:
            values["cpu_busy_ratio"] = rate / len(busy)
    for name, native in (("under_replicated_replicas", "redpanda_kafka_under_replicated_replicas"),
                         ("leadership_changes_total", "redpanda_raft_leadership_changes"),
                         ("available_memory_bytes", "redpanda_memory_available_memory"),
                         ("disk_free_space_alert", "redpanda_storage_disk_free_space_alert")):
        if (total := sums(samples, native)) is not None:
            values[name] = total
    return values


def redpanda_metrics(endpoints: Mapping[str, str]) -> EndpointMetrics:
    """The collector of the brokers' /public_metrics (broker -> its URL)."""
    return EndpointMetrics("redpanda metrics", endpoints, interpret)
