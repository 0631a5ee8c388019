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
import urllib.request
from typing import Any, Protocol

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


def partition_index(name: str) -> int:
    """`persistent://t/ns/topic-partition-3` -> 3."""
    return int(name.rsplit("-partition-", 1)[1])


def backlog(stats: dict[str, Any], subscriptions: set[str], partitions: int) -> dict[int, int]:
    """msgBacklog per partition, summed over `subscriptions`, from partitioned-stats with
    perPartition=true."""
    per_partition = dict.fromkeys(range(partitions), 0)
    for name, part in (stats.get("partitions") or {}).items():
        subs = part.get("subscriptions") or {}
        per_partition[partition_index(name)] = sum(
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
