"""RabbitMQ Streams telemetry over a stream-protocol connection of its own (rstream's client):
consumer lag per partition from the stream's tail and each subscription's stored offset; broker
counters from the management HTTP API when it is reachable.

The tail is the offset of the stream's last message: a subscription at `last` with a credit of
one is answered with the stream's last chunk of messages (never an offset-tracking record),
whose first offset and record count give it. A subscription's lag on a partition is that offset
minus the offset it stored (all of the stream when it stored none): 0 once it stored the last
message. Offsets count RabbitMQ's offset-tracking records too (one per stored offset), so while
a backlog remains the figure can exceed the messages left by the stores made since. Consumers
store their offset every `store_interval_s`, so on a target that keeps up the figure still
counts up to that long of consumption, and the sample's own time (the tail first, then the
stored offsets): the snapshot says so (trails_s) for the recovery's lag check.

A tail reading that does not end cleanly (cut off by the sample's timeout while the broker is
paused, a subscribe or unsubscribe that failed) may leave a subscription on the server that the
next reading's subscribe of the same id would collide with, every tail staying where it was
for good: the connection is dropped then, and the next sample opens a fresh one."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import time
import urllib.request
from typing import Any

from rstream import constants, schema
from rstream.client import Client, ClientPool
from rstream.exceptions import OffsetNotFound

from loadgen.core.brokermetrics import BrokerMetric
from loadgen.core.collector import Collector, CounterDeltas, Reading
from loadgen.core.ticks import LagSnapshot

logging.getLogger("rstream").setLevel(logging.CRITICAL)

LAG_SOURCE = "stream tail (last chunk) - stored offset"
# how long the last chunk is waited for: a stream that has none (empty) or answers later keeps
# the tail it had, which the next sample brings up to date
TAIL_WAIT_S = 0.5
MAX_SUBSCRIPTIONS = 250  # per connection the protocol allows 256 subscription ids
SAMPLE_TRAILS_S = 1.0  # beyond the store interval: a sample's tail is read before its offsets


def management_get(base: str, path: str, user: str, password: str, timeout_s: float = 2.0) -> bytes:
    """GET one path of the management HTTP API (blocking: call it in a thread). The
    credentials go with the request (basic authentication, which the API asks for): no
    unauthenticated first request answered 401."""
    token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    request = urllib.request.Request(base + path, headers={"Authorization": f"Basic {token}"})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        return bytes(response.read())


class RabbitTelemetry(Collector):
    name = "rabbitmq"

    def __init__(self, host: str, port: int, user: str, password: str, streams: list[str],
                 subscriptions: list[str], management: str | None,
                 store_interval_s: float = 1.0) -> None:
        self._pool = ClientPool(host, port, vhost="/", username=user, password=password,
                                frame_max=1024 * 1024, heartbeat=60, load_balancer_mode=False,
                                max_retries=1)
        self._client: Client | None = None
        self._user, self._password = user, password
        self._streams = streams
        self._subscriptions = subscriptions
        self._management = management
        self._tails = [-1] * len(streams)  # offsets never go back: keep the highest seen
        self._waiting: dict[int, asyncio.Future[int]] = {}
        self._unclean = False  # a tail reading did not end cleanly: reconnect before the next
        self._trails_s = store_interval_s + SAMPLE_TRAILS_S
        self._deltas = CounterDeltas()

    async def _connect(self) -> Client:
        if self._client is None or not self._client.is_connection_alive() or self._unclean:
            self._unclean = False
            if self._client is not None:
                with contextlib.suppress(Exception):
                    await self._pool.close()
            self._client = await self._pool.get("streambench-telemetry")
            # the client queues every chunk for each handler name: one handler, which tells the
            # subscriptions apart by the frame's id
            self._client.add_handler(schema.Deliver, self._delivered, name="0")
            await self._client.run_queue_listener_task(0, self._delivered)
        return self._client

    def _delivered(self, frame: schema.Deliver) -> None:
        waiter = self._waiting.get(frame.subscription_id)
        if waiter is not None and not waiter.done():
            waiter.set_result(frame.chunk_first_offset + frame.num_records - 1)

    async def start(self) -> None:
        await self._connect()
        self._counters(await self._totals())

    async def _tail_batch(self, client: Client, first: int, count: int) -> None:
        loop = asyncio.get_running_loop()
        for sid in range(count):
            self._waiting[sid] = loop.create_future()
        clean = False
        try:
            clean = await self._read_tails(client, first, count)
        finally:  # also when the sample's timeout cancels it
            for waiter in self._waiting.values():
                waiter.cancel()
            self._waiting.clear()
            if not clean:
                self._unclean = True

    async def _read_tails(self, client: Client, first: int, count: int) -> bool:
        """One subscription at `last` per stream of the batch, its chunk's last offset read
        and the subscription ended; False when a subscribe or unsubscribe failed."""
        answers = await asyncio.gather(*(
            client.subscribe(self._streams[first + sid], sid,
                             schema.OffsetSpec(constants.OffsetType.LAST), initial_credit=1)
            for sid in range(count)), return_exceptions=True)
        subscribed = []
        for sid, answer in enumerate(answers):
            if isinstance(answer, BaseException):
                self._waiting.pop(sid).cancel()
            else:
                subscribed.append(sid)
        if subscribed:
            # an empty stream sends nothing: its tail stays where it was
            await asyncio.wait([self._waiting[s] for s in subscribed], timeout=TAIL_WAIT_S)
        for sid in subscribed:
            waiter = self._waiting.pop(sid)
            if waiter.done() and not waiter.cancelled():
                self._tails[first + sid] = max(self._tails[first + sid], waiter.result())
            else:
                waiter.cancel()
        ended = await asyncio.gather(*(client.unsubscribe(sid) for sid in subscribed),
                                     return_exceptions=True)
        return len(subscribed) == count and not any(isinstance(e, BaseException) for e in ended)

    async def tails(self) -> list[int]:
        """The offset of each stream's last message (-1: none yet)."""
        client = await self._connect()
        for first in range(0, len(self._streams), MAX_SUBSCRIPTIONS):
            await self._tail_batch(client, first, min(MAX_SUBSCRIPTIONS, len(self._streams) - first))
        return list(self._tails)

    async def stored(self, stream: str, subscription: str) -> int:
        """The offset a subscription stored on a stream (-1: none)."""
        client = await self._connect()
        try:
            return int(await client.query_offset(stream, subscription))
        except OffsetNotFound:
            return -1

    async def lag(self) -> LagSnapshot:
        tails = await self.tails()
        pairs = [(p, stream, sub) for p, stream in enumerate(self._streams) for sub in self._subscriptions]
        stored = await asyncio.gather(*(self.stored(stream, sub) for _, stream, sub in pairs))
        per_partition = dict.fromkeys(range(len(self._streams)), 0)
        for (partition, _, _), offset in zip(pairs, stored, strict=True):
            per_partition[partition] += max(0, tails[partition] - offset)
        return LagSnapshot(sum(per_partition.values()), per_partition, LAG_SOURCE,
                           trails_s=self._trails_s)

    def _api(self, path: str) -> Any:
        assert self._management is not None
        return json.loads(management_get(self._management, path, self._user, self._password, 0.5))

    def _management_totals(self) -> dict[str, float]:
        """Stream connections', publishers' and consumers' counters summed over the server (the
        management plugin refreshes them every collect_statistics_interval)."""
        if not self._management:
            return {}
        totals: dict[str, float] = {}
        for path, fields in (("/api/stream/connections", ("recv_oct", "send_oct")),
                             ("/api/stream/publishers", ("published", "confirmed", "errored")),
                             ("/api/stream/consumers", ("consumed",))):
            # a connection closing while it is listed can show as an empty list, not an object
            rows = [row for row in self._api(f"{path}?columns={','.join(fields)}")
                    if isinstance(row, dict)]
            for field in fields:
                totals[field] = float(sum(row.get(field, 0) or 0 for row in rows))
        return totals

    def _counters(self, totals: dict[str, float]) -> dict[str, float]:
        """Per-interval deltas of the management totals (none without the management API)."""
        if not totals:
            return {}
        return {
            "net_in_bytes": self._deltas.delta("in", totals["recv_oct"]),
            "net_out_bytes": self._deltas.delta("out", totals["send_oct"]),
            "published": self._deltas.delta("published", totals["published"]),
            "confirmed": self._deltas.delta("confirmed", totals["confirmed"]),
            "publish_errors": self._deltas.delta("errored", totals["errored"]),
            "consumed": self._deltas.delta("consumed", totals["consumed"]),
        }

    async def _totals(self) -> dict[str, float]:
        try:
            return await asyncio.to_thread(self._management_totals)
        except (OSError, ValueError, KeyError):
            return {}  # no management API there, or it did not answer in time

    async def sample(self) -> Reading:
        totals, lag = await asyncio.gather(self._totals(), self.lag())
        counters = self._counters(totals)  # after both answered: a failed lag keeps no reading
        return Reading(
            lag=lag,
            broker=counters,
            net_rx_bytes=int(counters["net_in_bytes"]) if "net_in_bytes" in counters else None,
            net_tx_bytes=int(counters["net_out_bytes"]) if "net_out_bytes" in counters else None,
        )

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._pool.close(), 5.0)
        self._client = None


# ---- the broker's own metrics ----------------------------------------------------------------

METRICS_SOURCE = "management API"
# per-tick rates of the stream publishers' counters (streambench's name -> the field)
_PUBLISHER_RATES = {"published_per_second": "published", "confirmed_per_second": "confirmed"}
_NODE_FIELDS = "mem_used,disk_free,mem_alarm,disk_free_alarm"

METRICS: tuple[BrokerMetric, ...] = (
    BrokerMetric("published_per_second", "/api/stream/publishers published", "per_second",
                 "the messages the stream publishers sent per second, as the node counts them "
                 "(refreshed every collect_statistics_interval: 1 s on a node streambench "
                 "starts)"),
    BrokerMetric("confirmed_per_second", "/api/stream/publishers confirmed", "per_second",
                 "the messages the node confirmed per second: written to the stream and "
                 "replicated, the producers' acknowledgements"),
    BrokerMetric("unconfirmed_messages", "/api/stream/publishers published - confirmed",
                 "count",
                 "the publishers' confirms outstanding: when it grows, the node takes messages "
                 "faster than it writes them"),
    BrokerMetric("consumer_offset_lag_messages", "/api/stream/consumers offset_lag", "count",
                 "how far the stream consumers' delivered offsets trail the streams' ends, "
                 "as the node counts it"),
    BrokerMetric("connected_clients", "/api/stream/connections", "count",
                 "stream-protocol connections open: every producer, consumer and collector "
                 "holds one"),
    BrokerMetric("used_memory_bytes", "/api/nodes mem_used", "bytes",
                 "the node's memory: at its high watermark the memory alarm blocks every "
                 "publisher"),
    BrokerMetric("disk_free_bytes", "/api/nodes disk_free", "bytes",
                 "free space where the node keeps its streams: below disk_free_limit the disk "
                 "alarm blocks every publisher"),
    BrokerMetric("resource_alarms", "/api/nodes mem_alarm + disk_free_alarm", "count",
                 "memory and disk alarms in effect (0 to 2): while one is, publishers are "
                 "blocked and the run's rate falls to 0"),
)


class RabbitMetrics(Collector):
    """The node's own view from its management API: the stream publishers', consumers' and
    connections' figures summed over the server, the node's memory, disk and alarms. One
    node, named `rabbitmq`. Without a management API there is nothing to read (no values,
    none stale)."""

    name = "rabbitmq metrics"

    def __init__(self, management: str | None, user: str, password: str,
                 timeout_s: float = 0.8) -> None:
        self._management = management
        self._user, self._password = user, password
        self._timeout_s = timeout_s
        self._deltas = CounterDeltas()
        self._last = 0.0  # monotonic time of the previous read

    def _api(self, path: str) -> list[dict[str, Any]]:
        assert self._management is not None
        found = json.loads(management_get(self._management, path, self._user, self._password,
                                          self._timeout_s))
        # the rows; a list that is not a row (`[[]]`: a node that has not yet gathered its
        # figures, as early in a run) counts as none
        return [row for row in (found if isinstance(found, list) else [found])
                if isinstance(row, dict)]

    def _read(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]],
                             list[dict[str, Any]]]:
        return (self._api("/api/stream/publishers?columns=published,confirmed"),
                self._api("/api/stream/consumers?columns=offset_lag"),
                self._api("/api/stream/connections?columns=name"),
                self._api(f"/api/nodes?columns={_NODE_FIELDS}"))

    async def start(self) -> None:
        if self._management is not None:
            try:
                publishers, *_ = await asyncio.to_thread(self._read)
            except (OSError, ValueError):  # no management API answering (an existing server
                return  # without one): the run goes on, each sample's failure said as such
            self._last = time.monotonic()
            for field in _PUBLISHER_RATES.values():
                self._deltas.delta(field, _total(publishers, field))

    def metrics(self, publishers: list[dict[str, Any]], consumers: list[dict[str, Any]],
                connections: list[dict[str, Any]], nodes: list[dict[str, Any]],
                now: float) -> dict[str, float]:
        seconds, self._last = now - self._last, now
        found = {name: self._deltas.delta(field, _total(publishers, field)) / seconds
                 for name, field in _PUBLISHER_RATES.items() if seconds > 0}
        found["unconfirmed_messages"] = (_total(publishers, "published")
                                         - _total(publishers, "confirmed"))
        found["consumer_offset_lag_messages"] = _total(consumers, "offset_lag")
        found["connected_clients"] = float(len(connections))
        if nodes:  # none while the node has not yet gathered them
            found["used_memory_bytes"] = _total(nodes, "mem_used")
            found["disk_free_bytes"] = _total(nodes, "disk_free")
            found["resource_alarms"] = float(sum(bool(n.get("mem_alarm"))
                                                 + bool(n.get("disk_free_alarm")) for n in nodes))
        return found

    async def sample(self) -> Reading:
        if self._management is None:
            return Reading(metrics={})
        publishers, consumers, connections, nodes = await asyncio.to_thread(self._read)
        with self._deltas.staged():
            values = self.metrics(publishers, consumers, connections, nodes, time.monotonic())
        return Reading(metrics={"rabbitmq": values})


def _total(rows: list[dict[str, Any]], field: str) -> float:
    return float(sum(row.get(field) or 0 for row in rows))
