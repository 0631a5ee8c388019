"""NATS JetStream telemetry: each subscription's lag from its durable consumer's info
(`num_pending`: stored, not yet delivered; `num_ack_pending`: delivered, not yet acknowledged),
the messages stored per partition from the stream's per-subject counts
(`partition.<n>.produced`), and the server's counters from its monitoring endpoint (/varz,
/jsz) when there is one.

A subscription is one consumer over every partition's subject, so the server has no figure per
partition: the lag is a total, with no partition breakdown."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any

import nats
from nats.aio.client import Client as NATS

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
