"""Kafka's broker metrics: the MBeans that explain a broker under a benchmark (its request
times and queue, its produce rate, replication health, log flushes, the controller, the network
threads' idle time), read once per tick from each broker's Prometheus JMX exporter agent
(compose/jmx.py; for an existing cluster, the exporter endpoints the target names).

The agent serves them as one family (compose.jmx.FAMILY) labelled with each MBean's name parts;
the request-time percentiles are the broker's own (Yammer histograms over a decaying reservoir
of roughly the last five minutes, in ms), the rates are computed here from each meter's
cumulative Count between two reads, not taken from the meter's own moving averages."""

from __future__ import annotations

from collections.abc import Mapping

from collectors.scrape import BrokerState, EndpointMetrics, Sample
from loadgen.core.brokermetrics import BrokerMetric

SOURCE = "JMX (Prometheus JMX exporter)"
FAMILY = "kafka_jmx"  # the agent's family (compose.jmx.FAMILY)
# only the agent's family, not the JVM's own metrics it also serves
QUERY = f"?name[]={FAMILY}"

def _bean(domain: str, type_: str, name: str, request: str = "") -> str:
    return f"{domain}:type={type_},name={name}" + (f",request={request}" if request else "")


# streambench's name -> (domain, type, name, request, attribute, how: as-is | ms | rate)
_READ: dict[str, tuple[str, str, str, str, str, str]] = {
    "produce_total_time_p99_seconds": ("kafka.network", "RequestMetrics", "TotalTimeMs", "Produce",
                                       "99thPercentile", "ms"),
    "produce_queue_time_p99_seconds": ("kafka.network", "RequestMetrics", "RequestQueueTimeMs",
                                       "Produce", "99thPercentile", "ms"),
    "fetch_total_time_p99_seconds": ("kafka.network", "RequestMetrics", "TotalTimeMs",
                                     "FetchConsumer", "99thPercentile", "ms"),
    "fetch_queue_time_p99_seconds": ("kafka.network", "RequestMetrics", "RequestQueueTimeMs",
                                     "FetchConsumer", "99thPercentile", "ms"),
    "produce_requests_per_second": ("kafka.network", "RequestMetrics", "RequestsPerSec", "Produce",
                                    "Count", "rate"),
    "messages_in_per_second": ("kafka.server", "BrokerTopicMetrics", "MessagesInPerSec", "",
                               "Count", "rate"),
    "under_replicated_partitions": ("kafka.server", "ReplicaManager", "UnderReplicatedPartitions",
                                    "", "Value", "as-is"),
    "isr_shrinks_per_second": ("kafka.server", "ReplicaManager", "IsrShrinksPerSec", "", "Count",
                               "rate"),
    "isr_expands_per_second": ("kafka.server", "ReplicaManager", "IsrExpandsPerSec", "", "Count",
                               "rate"),
    "log_flush_time_p99_seconds": ("kafka.log", "LogFlushStats", "LogFlushRateAndTimeMs", "",
                                   "99thPercentile", "ms"),
    "active_controller_count": ("kafka.controller", "KafkaController", "ActiveControllerCount", "",
                                "Value", "as-is"),
    "network_processor_idle_ratio": ("kafka.network", "SocketServer",
                                     "NetworkProcessorAvgIdlePercent", "", "Value", "as-is"),
}

_WHY = {
    "produce_total_time_p99_seconds":
        "the broker's own p99 time for a produce request, from arrival to response sent: when "
        "the clients' publish latency rises and this does not, the time is spent outside the "
        "broker (network, client queue)",
    "produce_queue_time_p99_seconds":
        "how long produce requests wait for a request handler thread (p99): growing, the "
        "handlers (num.io.threads) are the bottleneck",
    "fetch_total_time_p99_seconds":
        "the broker's p99 time for a consumer fetch; includes fetch.max.wait.ms when there is "
        "nothing new to read, so it is high on an idle topic and falls under load",
    "fetch_queue_time_p99_seconds":
        "how long consumer fetches wait for a handler thread (p99): contention between "
        "producers and consumers for the same threads",
    "produce_requests_per_second":
        "produce requests handled per second (all request versions): beside the messages in, "
        "how many messages each request carries (the clients' batching)",
    "messages_in_per_second":
        "messages appended per second by the partitions this broker leads: the produced rate "
        "as the broker counts it",
    "under_replicated_partitions":
        "partitions led here whose followers are not all in sync: above 0 a replica is lost "
        "or slow, and acks=all writes wait for fewer copies or stall",
    "isr_shrinks_per_second":
        "replicas dropped from in-sync replica sets per second: a follower fell behind "
        "replica.lag.time.max.ms (a paused or overloaded broker)",
    "isr_expands_per_second":
        "replicas rejoining in-sync replica sets per second: the recovery after a shrink",
    "log_flush_time_p99_seconds":
        "the p99 time of an fsync of a partition's log: with flush.messages or flush.ms set "
        "each write waits for it, so a slow disk shows here first",
    "active_controller_count":
        "1 on the broker that is the active controller, 0 elsewhere: summed over the cluster "
        "anything but 1 means no controller or a split",
    "network_processor_idle_ratio":
        "the network threads' average idle fraction (0 to 1, despite the MBean's name): near "
        "0 they are saturated and every request waits to be read or answered",
}

_UNITS = {"ms": "seconds", "rate": "per_second"}

METRICS: tuple[BrokerMetric, ...] = tuple(
    BrokerMetric(name, f"{_bean(domain, type_, bean, request)} {attribute}"
                 + (" (all versions)" if bean == "RequestsPerSec" else ""),
                 _UNITS.get(how, "ratio" if name.endswith("_ratio") else "count"), _WHY[name])
    for name, (domain, type_, bean, request, attribute, how) in _READ.items())


def interpret(samples: list[Sample], state: BrokerState) -> dict[str, float]:
    """One read of a broker's exporter as its broker metrics (a meter's rate from the second
    read on; an MBean the broker has not created yet, such as a request's before its first
    request, is left out)."""
    found: dict[tuple[str, str, str, str], float] = {}
    for s in samples:
        if s.name != FAMILY:
            continue
        key = (s.labels.get("domain", ""), s.labels.get("name", ""), s.labels.get("request", ""),
               s.labels.get("attribute", ""))
        found[key] = found.get(key, 0.0) + s.value  # a request's versions summed
    values: dict[str, float] = {}
    for name, (domain, _type, bean, request, attribute, how) in _READ.items():
        value = found.get((domain, bean, request, attribute))
        if value is None:
            continue
        if how == "rate":
            rate = state.rate(name, value)
            if rate is not None:
                values[name] = rate
        else:
            values[name] = value / 1000 if how == "ms" else value
    return values


def kafka_metrics(endpoints: Mapping[str, str]) -> EndpointMetrics:
    """The collector of the brokers' exporter endpoints (broker -> its /metrics URL)."""
    return EndpointMetrics("kafka metrics", {b: u + QUERY for b, u in endpoints.items()},
                           interpret)

