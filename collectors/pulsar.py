"""Pulsar telemetry from the admin REST API: subscription backlog per partition (the lag) and
the topic's message and byte counters.

The stats' rate fields refresh only once a minute, so the counters (msgInCounter, …) are
differenced per tick instead. `msgBacklog` counts entries: a batch the producer sent as one
entry counts once until all its messages are acknowledged, so with producer batching on the
backlog is in batches, not messages (Pulsar has no message-exact backlog).

The admin API client comes from the caller (the platform's, compose.pulsar.PulsarAdmin); given a
bare admin URL, the collector makes its own GET requests."""

from __future__ import annotations

import asyncio
import json
import math
import re
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Protocol

from loadgen.core.brokermetrics import BrokerMetric
from loadgen.core.collector import Collector, CounterDeltas, Reading
from loadgen.core.ticks import LagSnapshot

REQUEST_TIMEOUT_S = 2.0

_COUNTERS = (("msgInCounter", "msg_in"), ("bytesInCounter", "bytes_in"),
             ("msgOutCounter", "msg_out"), ("bytesOutCounter", "bytes_out"))


class AdminApi(Protocol):
    """The admin REST call the collector needs: GET a path, the decoded JSON back."""

    async def get(self, path: str) -> Any: ...


class _AdminUrl:
    """GET against an admin URL with urllib, in a worker thread (never stalls the event loop)."""

    def __init__(self, url: str, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self._url = url.rstrip("/")
        self._timeout_s = timeout_s

    def _get(self, path: str) -> Any:
        request = urllib.request.Request(f"{self._url}{path}", headers={"Accept": "application/json"})
        with urllib.request.urlopen(request, timeout=self._timeout_s) as response:
            return json.loads(response.read() or b"null")

    async def get(self, path: str) -> Any:
        return await asyncio.to_thread(self._get, path)


def stats_path(persistent: bool, namespace: str, topic: str) -> str:
    """The admin API path of a partitioned topic's stats, per partition."""
    domain = "persistent" if persistent else "non-persistent"
    return f"/admin/v2/{domain}/{namespace}/{topic}/partitioned-stats?perPartition=true"


def partition_index(name: str) -> int | None:
    """`persistent://t/ns/topic-partition-3` -> 3; None for a name that is no partition's."""
    _, marker, index = name.rpartition("-partition-")
    return int(index) if marker and index.isdigit() else None


def backlog(stats: dict[str, Any], subscriptions: set[str], partitions: int) -> dict[int, int]:
    """msgBacklog per partition, summed over `subscriptions`, from partitioned-stats with
    perPartition=true. An entry that is none of the topic's partitions is left out (a
    standalone restarted beside two busy test processes once answered with one for 114 s, and
    the collector failed every sample meanwhile)."""
    per_partition = dict.fromkeys(range(partitions), 0)
    for name, part in (stats.get("partitions") or {}).items():
        index = partition_index(name)
        if index is None or index not in per_partition:
            continue
        subs = part.get("subscriptions") or {}
        per_partition[index] = sum(
            int(s.get("msgBacklog") or 0) for sub, s in subs.items() if sub in subscriptions)
    return per_partition


class PulsarTelemetry(Collector):
    name = "pulsar"

    def __init__(self, admin: AdminApi | str, persistent: bool, namespace: str, topic: str,
                 partitions: int, subscriptions: list[str], batching: bool) -> None:
        self._admin: AdminApi = _AdminUrl(admin) if isinstance(admin, str) else admin
        self._path = stats_path(persistent, namespace, topic)
        self._partitions = partitions
        self._subscriptions = set(subscriptions)
        self._deltas = CounterDeltas()
        unit = "entries: a producer batch counts once" if batching else "messages"
        self._source = f"admin API msgBacklog ({unit})"

    async def stats(self) -> dict[str, Any]:
        return dict(await self._admin.get(self._path))

    async def start(self) -> None:
        self._counters(await self.stats())

    def _counters(self, stats: dict[str, Any]) -> dict[str, float]:
        broker = {name: self._deltas.delta(name, float(stats.get(key) or 0)) for key, name in _COUNTERS}
        broker["storage_bytes"] = float(stats.get("storageSize") or 0)
        broker["backlog_bytes"] = float(stats.get("backlogSize") or 0)
        return broker

    def lag(self, stats: dict[str, Any]) -> LagSnapshot:
        per_partition = backlog(stats, self._subscriptions, self._partitions)
        return LagSnapshot(sum(per_partition.values()), per_partition, self._source)

    async def sample(self) -> Reading:
        stats = await self.stats()
        with self._deltas.staged():
            broker = self._counters(stats)
            lag = self.lag(stats)
        return Reading(lag=lag, broker=broker,
                       net_rx_bytes=int(broker["bytes_in"]), net_tx_bytes=int(broker["bytes_out"]))


# ---- the broker's own metrics ----------------------------------------------------------------

METRICS_SOURCE = "/metrics"
METRICS_PATH = "/metrics/"  # the web service's Prometheus text (/metrics redirects here)
# the families read, each summed over the run's partitions
_SUMMED = ("pulsar_rate_in", "pulsar_rate_out", "pulsar_msg_backlog",
           "pulsar_subscription_unacked_messages")
# the storage latency histograms: bucket counts of the broker's last stats period (not
# cumulative), their sum in microseconds and their count
_HISTOGRAMS = ("pulsar_storage_write_latency", "pulsar_storage_ledger_write_latency")
_TOPIC = re.compile(r'topic="([^"]*)"')

METRICS: tuple[BrokerMetric, ...] = (
    BrokerMetric("in_messages_per_second", "pulsar_rate_in", "per_second",
                 "the messages the broker took in per second over its last stats period: the "
                 "producers' rate as the broker sees it"),
    BrokerMetric("out_messages_per_second", "pulsar_rate_out", "per_second",
                 "the messages the broker dispatched to the subscriptions per second: below "
                 "the rate in, the backlog grows"),
    BrokerMetric("backlog_messages", "pulsar_msg_backlog", "count",
                 "entries stored and not yet acknowledged by the subscriptions (a producer "
                 "batch counts once): the broker's own lag"),
    BrokerMetric("ack_pending_messages", "pulsar_subscription_unacked_messages", "count",
                 "messages dispatched and not yet acknowledged: at the consumers' "
                 "maxUnackedMessages the broker stops dispatching to them"),
    BrokerMetric("storage_write_latency_seconds",
                 "pulsar_storage_write_latency_sum / _count", "seconds",
                 "the broker's mean time to persist an entry (queued in the managed ledger, "
                 "then written to the bookies) over its last stats period: the publish "
                 "latency's storage part"),
    BrokerMetric("storage_write_latency_p99_seconds", "pulsar_storage_write_latency_le_*",
                 "seconds",
                 "the upper edge of the latency bucket holding the 99th percentile of those "
                 "writes (buckets 0.5, 1, 5, 10, 20, 50, 100, 200, 1000 ms): the tail a "
                 "bookie's journal fsync or a ledger roll-over adds"),
    BrokerMetric("ledger_write_latency_seconds",
                 "pulsar_storage_ledger_write_latency_sum / _count", "seconds",
                 "the mean time the bookies took to add an entry (the journal write and its "
                 "fsync included), as the broker's BookKeeper client times it: when it "
                 "rises with the storage write latency, the disk is the cause"),
)


def _bucket_edge_ms(suffix: str) -> float:
    """`le_0_5` -> 0.5, `le_200` -> 200, `overflow` -> infinity."""
    return math.inf if suffix == "overflow" else float(suffix.removeprefix("le_").replace("_", "."))


@dataclass
class _Histogram:
    buckets: dict[float, float] = field(default_factory=dict)  # upper edge ms -> count
    sum_us: float = 0.0
    count: float = 0.0

    def mean_s(self) -> float | None:
        return self.sum_us / self.count / 1e6 if self.count > 0 else None

    def p99_edge_s(self) -> float | None:
        """The upper edge of the bucket the 99th percentile falls in (None: no writes, or it
        falls past the last bucket)."""
        total = sum(self.buckets.values())
        seen = 0.0
        for edge in sorted(self.buckets):
            seen += self.buckets[edge]
            if total > 0 and seen >= 0.99 * total:
                return edge / 1000 if math.isfinite(edge) else None
        return None


def pulsar_metrics(text: str, topics: tuple[str, ...]) -> dict[str, float]:
    """The declared metrics from the broker's Prometheus text, summed (histograms merged) over
    the series whose topic label starts with one of `topics` (the run's partitioned topics)."""
    sums = dict.fromkeys(_SUMMED, 0.0)
    hists = {h: _Histogram() for h in _HISTOGRAMS}
    for line in text.splitlines():
        if not line.startswith("pulsar_") or "{" not in line:
            continue
        name, _, rest = line.partition("{")
        if name not in sums and not name.startswith(_HISTOGRAMS):
            continue
        topic = _TOPIC.search(rest)
        if topic is None or not topic.group(1).startswith(topics):
            continue
        value = float(rest.rpartition(" ")[2])
        if not math.isfinite(value):
            continue
        if name in sums:
            sums[name] += value
            continue
        family = max((h for h in _HISTOGRAMS if name.startswith(h + "_")), key=len)
        part = name[len(family) + 1:]
        hist = hists[family]
        if part == "sum":
            hist.sum_us += value
        elif part == "count":
            hist.count += value
        elif part.startswith("le_") or part == "overflow":
            edge = _bucket_edge_ms(part)
            hist.buckets[edge] = hist.buckets.get(edge, 0.0) + value
    found = {m.name: sums[m.native] for m in METRICS if m.native in sums}
    derived = {"storage_write_latency_seconds": hists[_HISTOGRAMS[0]].mean_s(),
               "storage_write_latency_p99_seconds": hists[_HISTOGRAMS[0]].p99_edge_s(),
               "ledger_write_latency_seconds": hists[_HISTOGRAMS[1]].mean_s()}
    found.update({k: v for k, v in derived.items() if v is not None})
    return found


class PulsarMetrics(Collector):
    """The broker's /metrics (its web service's Prometheus text), the run's topics' series
    summed: one broker, named `pulsar`. The figures are those of the broker's last stats
    period (statsUpdateFrequencyInSecs, managedLedgerStatsPeriodSeconds: 1 s on the standalone
    streambench starts, 60 s by Pulsar's default)."""

    name = "pulsar metrics"

    def __init__(self, admin: AdminApi, topics: list[str]) -> None:
        self._admin = admin  # its GET gives a reply that is no JSON as text
        # a partition's name is its topic's and -partition-N
        self._topics = tuple(f"{t}-partition-" for t in topics)

    async def start(self) -> None:
        """Nothing kept between reads: every figure is the broker's own, as it is."""

    async def read(self) -> dict[str, float]:
        text = await self._admin.get(METRICS_PATH)
        if not isinstance(text, str):
            raise ValueError(f"{METRICS_PATH} did not answer in Prometheus text")
        return pulsar_metrics(text, self._topics)

    async def sample(self) -> Reading:
        return Reading(metrics={"pulsar": await self.read()})
