"""Pravega telemetry: the reader groups' unread bytes per segment, as lag.

The Python client has no unread-bytes figure of its own (the Java client's
`ReaderGroupMetrics.unreadBytes()`), but it has both ends of it: a reader group's stream cut
(`get_streamcut()`: the read offset of each segment, as the group's readers last wrote them
back) and the stream's tail (the stream cut a reader group created at the tail starts from; a
short-lived one is made and deleted per sample). Unread bytes per segment = tail − read offset,
summed over the subscriptions. Events on the wire are the writer's bytes plus an 8-byte frame;
the collector reads the stream's first event once (a reader group of its own, deleted after) for
that size, and unread bytes become events by it (exact while every event has the workload's one
size).
Readers write their positions back at most every 3 s, so the lag trails consumption by up to
about 4 s, as Kafka's committed offsets trail by the auto-commit interval.

The client's calls block while a broker does not answer, so they run in a client host process
of the collector's own (loadgen.platforms.pravega_host, the driver's too: which is why this
collector lives with the platform rather than in collectors/); the queries run one after another
beside the samples, and a sample takes the newest answer (none when it is older than 5 s)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time

from loadgen.core.collector import Collector, CounterDeltas, Reading
from loadgen.core.ticks import LagSnapshot
from loadgen.platforms.pravega_host import ClientHost

SAMPLE_TIMEOUT_S = 0.8
STALE_S = 5.0  # an answer older than this is no reading
TRAILS_S = 4.0  # positions written back every 3 s, sampled about once a second
SOURCE = "reader groups' unread bytes"


def reader_group_name(stream: str, subscription: str) -> str:
    """The reader group of a subscription on a stream (reader group names are per scope)."""
    return re.sub(r"[^A-Za-z0-9.-]", "-", f"{stream}-{subscription}")


def lag_of(unread: dict[int, int], partitions: int, event_bytes: int | None) -> LagSnapshot | None:
    """Unread bytes per segment as a lag in events; None while bytes are unread but the size
    of an event is not known yet."""
    per_segment = {p: unread.get(p, 0) for p in range(partitions)}
    if not event_bytes:
        return (None if any(per_segment.values())
                else LagSnapshot(0, per_segment, SOURCE, trails_s=TRAILS_S))
    per_partition = {p: round(b / event_bytes) for p, b in per_segment.items()}
    return LagSnapshot(sum(per_partition.values()), per_partition,
                       f"{SOURCE} / {event_bytes} B per event (positions written back every 3 s)",
                       trails_s=TRAILS_S)


class PravegaTelemetry(Collector):
    name = "pravega"

    def __init__(self, controller: str, scope: str, stream: str, partitions: int,
                 subscriptions: list[str]) -> None:
        self._controller = controller
        self._scope = scope
        self._stream = stream
        self._partitions = partitions
        self._groups = [reader_group_name(stream, s) for s in subscriptions]
        self._host: ClientHost | None = None
        self._query_task: asyncio.Future[tuple[dict[int, int], dict[int, int]]] | None = None
        self._latest: tuple[dict[int, int], dict[int, int], float] | None = None
        self._event_bytes: int | None = None
        self._sizing: asyncio.Future[int | None] | None = None
        self._deltas = CounterDeltas()

    async def _query(self) -> tuple[dict[int, int], dict[int, int]]:
        assert self._host is not None
        unread, tail = await self._host.call("unread", self._scope, self._stream, self._groups,
                                             timeout_s=3600)
        return dict(unread), dict(tail)

    async def start(self) -> None:
        self._host = ClientHost(self._controller)
        await self._host.start()
        _unread, tail = await asyncio.wait_for(self._query(), 60.0)
        self._deltas.delta("stream_bytes", float(sum(tail.values())))

    def _sizing_done(self) -> None:
        if self._sizing is not None and self._sizing.done():
            sizing, self._sizing = self._sizing, None
            if not sizing.cancelled() and sizing.exception() is None:
                self._event_bytes = sizing.result()

    async def sample(self) -> Reading:
        """The newest answer of the queries that run one after another beside the samples (a
        query can take longer than a tick on a busy host, and waits as long as a broker does
        not answer); a sample waits for the one under way SAMPLE_TIMEOUT_S at most."""
        if self._host is None:
            raise TimeoutError("the collector is not started")
        if self._query_task is None:
            self._query_task = asyncio.ensure_future(self._query())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._query_task), SAMPLE_TIMEOUT_S)
        if self._query_task.done():
            task, self._query_task = self._query_task, None
            unread, tail = task.result()  # a failed query fails this sample
            self._latest = (unread, tail, time.monotonic())
        if self._latest is None:
            raise TimeoutError("no answer from Pravega yet")
        unread, tail, at = self._latest
        if time.monotonic() - at > STALE_S:
            raise TimeoutError(f"no answer from Pravega for {time.monotonic() - at:.0f} s")
        if self._event_bytes is None and any(tail.values()) and self._sizing is None:
            self._sizing = asyncio.ensure_future(self._host.call("event_bytes", self._scope,
                                                                 self._stream, timeout_s=30.0))
        self._sizing_done()
        total = float(sum(tail.values()))
        broker = {"unread_bytes": float(sum(unread.values())),
                  "stream_bytes": total,
                  "bytes_in": self._deltas.delta("stream_bytes", total)}
        return Reading(lag=lag_of(unread, self._partitions, self._event_bytes), broker=broker)

    async def close(self) -> None:
        for task in (self._sizing, self._query_task):
            if task is not None:
                task.cancel()
        host, self._host = self._host, None
        if host is not None:
            await host.close(grace_s=0.5)
