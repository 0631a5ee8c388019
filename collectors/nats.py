"""NATS JetStream telemetry: each subscription's lag from its durable consumer's info
(`num_pending`: stored, not yet delivered; `num_ack_pending`: delivered, not yet acknowledged),
the messages stored per partition from the stream's per-subject counts
(`partition.<n>.produced`), and the server's counters from its monitoring endpoint (/varz,
/jsz) when there is one; and the server's broker metrics from that endpoint (NatsMetrics).

A subscription is one consumer over every partition's subject, so the server has no figure per
partition: the lag is a total, with no partition breakdown."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from typing import Any

import nats
from nats.aio.client import Client as NATS

from loadgen.core.brokermetrics import BrokerMetric
from loadgen.core.collector import Collector, CounterDeltas, Reading
from loadgen.core.ticks import LagSnapshot

LAG_SOURCE = "JetStream consumer info num_pending+num_ack_pending"
INFO_TIMEOUT_S = 0.8
CONNECT_TIMEOUT_S = 10.0
# /varz counters that only grow: reported as deltas per tick
_VARZ_COUNTERS = ("in_msgs", "out_msgs", "in_bytes", "out_bytes")


def monitor_get(url: str, path: str, timeout_s: float = 1.0) -> dict[str, Any]:
    """One JSON document of the server's monitoring endpoint (/varz, /jsz …)."""
    with urllib.request.urlopen(f"{url}{path}", timeout=timeout_s) as response:
        return dict(json.loads(response.read()))


async def _ignore(exc: Exception) -> None:
    """Connection errors: a sample that cannot be taken is reported by the run loop."""


async def consumer_lag(nc: NATS, stream: str, consumers: list[str],
                       timeout_s: float = INFO_TIMEOUT_S) -> int:
    """The summed lag of the durable consumers, as the server counts it."""
    jsm = nc.jsm()
    infos = await asyncio.gather(*(jsm.consumer_info(stream, c, timeout=timeout_s) for c in consumers))
    return sum(int(i.num_pending or 0) + int(i.num_ack_pending or 0) for i in infos)


class NatsTelemetry(Collector):
    """One connection of its own, so sampling never waits behind producers or consumers."""

    name = "nats"

    def __init__(self, endpoint: str, stream: str, partitions: int, consumers: list[str],
                 monitor: str | None) -> None:
        self._endpoint = endpoint
        self._stream = stream
        self._partitions = partitions
        self._consumers = consumers
        self._monitor = monitor
        self._nc: NATS | None = None
        self._deltas = CounterDeltas()

    async def start(self) -> None:
        # the server answered the stack's readiness check; after a fault kills it, this
        # connection comes back when it is started again
        self._nc = await asyncio.wait_for(nats.connect(
            f"nats://{self._endpoint}", name="streambench-telemetry", connect_timeout=5,
            max_reconnect_attempts=-1, reconnect_time_wait=0.5, error_cb=_ignore),
            CONNECT_TIMEOUT_S)
        self._stored(await self._stream_counts())
        if self._monitor:
            self._counters(*await asyncio.to_thread(self._monitor_now))

    def _monitor_now(self) -> tuple[dict[str, Any], dict[str, Any]]:
        assert self._monitor is not None
        return (monitor_get(self._monitor, "/varz", INFO_TIMEOUT_S),
                monitor_get(self._monitor, "/jsz", INFO_TIMEOUT_S))

    def _counters(self, varz: dict[str, Any], jsz: dict[str, Any]) -> dict[str, float]:
        found = {name: self._deltas.delta(name, float(varz.get(name, 0))) for name in _VARZ_COUNTERS}
        found["server_memory_bytes"] = float(varz.get("mem", 0))
        found["js_messages"] = float(jsz.get("messages", 0))
        found["js_stored_bytes"] = float(jsz.get("bytes", 0))
        found["js_memory_bytes"] = float(jsz.get("memory", 0))
        found["js_storage_bytes"] = float(jsz.get("storage", 0))
        return found

    async def lag(self) -> LagSnapshot:
        assert self._nc is not None
        total = await consumer_lag(self._nc, self._stream, self._consumers)
        return LagSnapshot(total, {}, LAG_SOURCE)

    async def _stream_counts(self) -> dict[str, int]:
        """The messages the stream holds per subject."""
        assert self._nc is not None
        info = await self._nc.jsm().stream_info(self._stream, subjects_filter=f"{self._stream}.*")
        return dict(info.state.subjects or {})

    def _stored(self, counts: dict[str, int]) -> dict[str, float]:
        """Messages appended to each partition's subject since the previous sample."""
        return {f"partition.{p}.produced":
                self._deltas.delta(f"partition {p}", float(counts.get(f"{self._stream}.{p}", 0)))
                for p in range(self._partitions)}

    async def sample(self) -> Reading:
        # every request answered before any delta is kept: a server killed between two of them
        # fails the sample, and the next one counts the whole interval
        with self._deltas.staged():
            monitor = await asyncio.to_thread(self._monitor_now) if self._monitor else None
            counts = await self._stream_counts()
            lag = await self.lag() if self._consumers else None
            broker = self._counters(*monitor) if monitor is not None else {}
            broker.update(self._stored(counts))
        return Reading(lag=lag, broker=broker)

    async def close(self) -> None:
        if self._nc is not None:
            await self._nc.close()
            self._nc = None


METRICS_SOURCE = "/varz and /jsz"
# /varz counters read as a rate over the tick (streambench's name -> /varz field)
_VARZ_RATES = {"in_messages_per_second": "in_msgs"}
# /varz and /jsz figures read as they are
_VARZ_AS_IS = {"slow_consumers_total": "slow_consumers"}
_CONSUMER_SUMS = {"pending_messages": "num_pending", "ack_pending_messages": "num_ack_pending",
                  "redelivered_messages": "num_redelivered"}


class NatsMetrics(Collector):
    """The server's own view of the run's streams and consumers, from its monitoring endpoint
    (/varz, and /jsz with consumer details), summed over the run's streams: one server, named
    `nats`. Without a monitoring endpoint there is nothing to read (no values, none stale)."""

    name = "nats metrics"

    def __init__(self, monitor: str | None, streams: list[str]) -> None:
        self._monitor = monitor
        self._streams = set(streams)
        self._deltas = CounterDeltas()
        self._last = 0.0  # monotonic time of the previous /varz read

    def _read(self) -> tuple[dict[str, Any], dict[str, Any], float]:
        assert self._monitor is not None
        return (monitor_get(self._monitor, "/varz", INFO_TIMEOUT_S),
                monitor_get(self._monitor, "/jsz?consumers=true", INFO_TIMEOUT_S),
                time.monotonic())

    async def start(self) -> None:
        if self._monitor is not None:
            varz, _, self._last = await asyncio.to_thread(self._read)
            for name, field in _VARZ_RATES.items():
                self._deltas.delta(name, float(varz.get(field, 0)))

    def metrics(self, varz: dict[str, Any], jsz: dict[str, Any], now: float) -> dict[str, float]:
        seconds = now - self._last
        self._last = now
        found = {name: self._deltas.delta(name, float(varz.get(field, 0))) / seconds
                 for name, field in _VARZ_RATES.items() if seconds > 0}
        found.update({name: float(varz.get(field, 0)) for name, field in _VARZ_AS_IS.items()})
        found["api_errors_total"] = float((jsz.get("api") or {}).get("errors", 0))
        streams = [s for a in jsz.get("account_details") or [] for s in a.get("stream_detail") or []
                   if s.get("name") in self._streams]
        consumers = [c for s in streams for c in s.get("consumer_detail") or []]
        found["stored_bytes"] = float(sum((s.get("state") or {}).get("bytes", 0) for s in streams))
        for name, field in _CONSUMER_SUMS.items():
            found[name] = float(sum(c.get(field, 0) for c in consumers))
        last = {s.get("name"): (s.get("state") or {}).get("last_seq", 0) for s in streams}
        behind = [last.get(c.get("stream_name"), 0) - (c.get("ack_floor") or {}).get("stream_seq", 0)
                  for c in consumers]
        if behind:  # /jsz reads the streams before their consumers: never below 0
            found["ack_floor_behind_messages"] = float(max(0, *behind))
        return found

    async def sample(self) -> Reading:
        if self._monitor is None:
            return Reading(metrics={})
        varz, jsz, now = await asyncio.to_thread(self._read)
        return Reading(metrics={"nats": self.metrics(varz, jsz, now)})


METRICS: tuple[BrokerMetric, ...] = (
        BrokerMetric("in_messages_per_second", "/varz in_msgs", "per_second",
                     "the messages the server received per second over the tick: the "
                     "producers' rate as the server sees it, acknowledgements and requests "
                     "included"),
        BrokerMetric("pending_messages", "/jsz consumer_detail num_pending", "count",
                     "messages stored and not yet delivered to the subscriptions, as the "
                     "server counts them: the backlog before delivery"),
        BrokerMetric("ack_pending_messages", "/jsz consumer_detail num_ack_pending", "count",
                     "messages delivered and not yet acknowledged: at max_ack_pending the "
                     "server stops delivering to that consumer"),
        BrokerMetric("redelivered_messages", "/jsz consumer_detail num_redelivered", "count",
                     "messages delivered again because their acknowledgement did not come "
                     "within ack_wait: a consumer too slow or lost"),
        BrokerMetric("ack_floor_behind_messages", "/jsz last_seq - ack_floor.stream_seq",
                     "count",
                     "how far the slowest subscription's ack floor (everything below it "
                     "acknowledged) trails the last stored message"),
        BrokerMetric("slow_consumers_total", "/varz slow_consumers", "count",
                     "clients the server found too slow to take what it sent them (their "
                     "pending bytes over the limit): it drops their messages or the client"),
        BrokerMetric("stored_bytes", "/jsz stream_detail state.bytes", "bytes",
                     "bytes the run's streams hold on the server's store: the backlog on "
                     "disk, bounded by the stream's limits"),
        BrokerMetric("api_errors_total", "/jsz api.errors", "count",
                     "JetStream API requests the server answered with an error (a stream or "
                     "consumer it could not create, a request it refused)"),
)
