"""The rbfly side of the RabbitMQ Streams driver: its client, the producer and the consumer.

rbfly is GPL-3.0-or-later and comes with the `rabbitmq` extra only (pip install
'streambench[rabbitmq]'), so nothing imports this module but loadgen.platforms.rabbitmq's
client_module(), when a RabbitMQ run is about to start: the platform registry, `streambench
platforms` and a run of other platforms never load rbfly. Message format, routing and offsets:
loadgen.platforms.rabbitmq."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import zlib
from collections.abc import Sequence
from typing import Any

import rbfly.streams as rbs
from rbfly.streams.error import ProtocolError
from rbfly.util import Option

from compose.net import connect_failure
from loadgen.core.audit import STAMP_BASE
from loadgen.core.driver import Consumer, OutMessage, Producer, ReceivedBatch
from loadgen.core.errors import DriverError
from loadgen.platforms.rabbitmq import CONNECT_TIMEOUT_S, RECONNECT_PAUSE_S

INTENDED_PROPERTY = "t"
RECEIVE_WAIT_S = 0.1
BUFFER_LIMIT = 20_000  # messages a consumer holds before its readers wait for receive()
# a consumer's close: its readers cancelled this many times at most, each waited for this long
CLOSE_CANCELS = 5
CLOSE_CANCEL_WAIT_S = 1.0
NO_OFFSET = 0x13  # the stream protocol's answer to a query for an offset never stored


class _StreamsClient(rbs.StreamsClient):
    """rbfly's client, but a lost connection is tried again every RECONNECT_PAUSE_S instead of
    every 30 s, and a failed attempt raises ConnectionError instead of waiting on: a publish
    during an outage fails (the run counts it) rather than hanging, and the clients are back
    within a second of the broker (what the recovery after a fault measures). A subscription
    keeps trying by itself and resumes after the last message it delivered."""

    async def _reconnect(self) -> Any:
        try:
            protocol = await self._create_protocol()
            await self._connect(protocol)
        except (ConnectionError, OSError) as exc:
            await asyncio.sleep(RECONNECT_PAUSE_S)
            raise ConnectionError(f"rabbitmq at {self._cinfo.host}:{self._cinfo.port}: "
                                  f"{connect_failure(exc)}") from exc
        return Option(protocol)


class OneByOne:
    """rbfly's single-message Publisher behind the batch publishers' batch() and flush(): a
    flush sends the queued messages one at a time, each confirmed before the next is sent."""

    def __init__(self, publisher: rbs.Publisher) -> None:
        self.publisher = publisher
        self._data: list[Any] = []

    def batch(self, message: Any) -> None:
        self._data.append(message)

    async def flush(self) -> None:
        queued, self._data = self._data, []
        for message in queued:
            await self.publisher.send(message)


class RabbitProducer(Producer):
    """One connection, one publisher per partition stream (named, so the server deduplicates
    what the client sends again after a reconnection). A batch is split by partition and each
    part flushed as publish frames; the batch is sent once the broker confirmed every part."""

    max_in_flight = 1  # a publisher has one frame awaiting its confirm at a time

    def __init__(self, client: rbs.StreamsClient, publishers: list[Any],
                 stack: contextlib.AsyncExitStack) -> None:
        self._client = client
        self._publishers = publishers
        self._stack = stack
        self._next = 0

    async def send_batch(self, batch: Sequence[OutMessage]) -> None:
        pubs = self._publishers
        n = len(pubs)
        self._next = (self._next + 1) % n
        sticky = pubs[self._next]
        ctx = rbs.stream_message_ctx
        used: dict[int, Any] = {}
        for m in batch:
            pub = sticky if m.key is None else pubs[zlib.crc32(m.key) % n]
            # an audit stamp (loadgen.core.audit) is past AMQP's ulong: its decimal text then
            stamp = m.intended_ns
            pub.batch(ctx(m.payload, app_properties={
                INTENDED_PROPERTY: stamp if stamp < STAMP_BASE else str(stamp)}))
            used[id(pub)] = pub
        parts = list(used.values())
        try:
            if len(parts) == 1:
                await parts[0].flush()
            else:
                await asyncio.gather(*(p.flush() for p in parts))
        except BaseException:
            # the run counts the batch as failed: not sent again with the next one
            for p in parts:
                p._data.clear()
            raise

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._stack.aclose(), 5.0)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._client.disconnect(), 5.0)


class RabbitConsumer(Consumer):
    """One connection; a reader task per assigned partition stream iterates the client's
    subscription (credit-based flow from the server) into a shared buffer that receive()
    empties. Offsets are stored per stream under the subscription's name."""

    def __init__(self, client: rbs.StreamsClient, streams: dict[int, str], reference: str,
                 track_ids: bool, store_interval_s: float,
                 subscribe: dict[str, Any] | None = None) -> None:
        self._client = client
        self._subscribe = dict(subscribe or {})  # subscribe()'s `consumer.` keyword arguments
        self._streams = streams
        self._reference = reference
        self._track = track_ids
        self._store_interval_s = store_interval_s
        self._intended: list[int] = []
        self._sizes = 0
        self._ids: list[tuple[int, str]] = []
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._last: dict[int, int] = {}  # partition -> offset of the last message handed over
        self._stored: dict[int, int] = {}
        self._stored_at = time.monotonic()
        self._failure: BaseException | None = None
        self._tasks = [asyncio.create_task(self._read(p, s)) for p, s in streams.items()]
        self._held = tuple(sorted(streams))

    def partitions(self) -> tuple[int, ...] | None:
        return self._held  # dealt by the driver: partition i to consumer i mod consumers

    async def _start(self, partition: int, stream: str) -> rbs.Offset:
        """Where a (re)subscription starts: after the last message handed over, else after the
        subscription's stored offset, else at the stream's first message."""
        if partition in self._last:
            return rbs.Offset.offset(self._last[partition] + 1)
        protocol = await self._client.get_protocol()
        try:
            stored = await protocol.query_offset(stream, self._reference)
        except ProtocolError as exc:
            if exc.code == NO_OFFSET:
                return rbs.Offset.FIRST  # type: ignore[misc]
            raise
        return rbs.Offset.offset(stored + 1)

    async def _read(self, partition: int, stream: str) -> None:
        """Until cancelled: subscribe and hand messages over; after a failure (e.g. the stream
        not yet available on a restarted node) subscribe again where it left off."""
        while True:
            try:
                await self._subscription(partition, stream)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._failure = exc
                self._arrived.set()
                await asyncio.sleep(RECONNECT_PAUSE_S)

    async def _subscription(self, partition: int, stream: str) -> None:
        get_ctx = rbs.get_message_ctx
        track = self._track
        last = self._last
        start = await self._start(partition, stream)
        async for body in self._client.subscribe(stream, offset=start, **self._subscribe):
            ctx = get_ctx()
            # receive() swaps the lists: look them up on every message
            stamp = ctx.app_properties[INTENDED_PROPERTY]
            self._sizes += len(body)  # type: ignore[arg-type]
            offset = ctx.stream_offset
            last[partition] = offset
            if track:  # the audit's runs: the stamp may be text
                stamp = int(stamp)  # type: ignore[arg-type]
                self._ids.append((partition, str(offset)))
            self._intended.append(stamp)  # type: ignore[arg-type]
            self._arrived.set()
            if len(self._intended) >= BUFFER_LIMIT:
                self._room.clear()
                await self._room.wait()

    def _take(self) -> ReceivedBatch | None:
        if not self._intended:
            return None
        batch = ReceivedBatch(time.time_ns(), self._intended, self._sizes,
                              self._ids if self._track else None)
        # the readers append to fresh lists from now on
        self._intended, self._sizes, self._ids = [], 0, []
        self._room.set()
        self._arrived.clear()
        return batch

    async def receive(self) -> ReceivedBatch | None:
        await self._store(force=False)
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure
        if not self._intended:
            if not self._tasks:
                await asyncio.sleep(RECEIVE_WAIT_S)
                return None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), RECEIVE_WAIT_S)
        return self._take()

    async def _store(self, force: bool) -> None:
        now = time.monotonic()
        if not force and now - self._stored_at < self._store_interval_s:
            return
        self._stored_at = now
        for partition, offset in list(self._last.items()):
            if self._stored.get(partition) != offset:
                await self._client.write_offset(self._streams[partition], self._reference, offset)
                self._stored[partition] = offset

    async def close(self) -> None:
        # a cancel can be lost: asyncio.wait_for in Python 3.11 swallows one that comes as its
        # wait ends, and rbfly's subscription waits so (consumer.timeout=): cancelled again
        # until the readers end, for a few seconds at most
        for _ in range(CLOSE_CANCELS):
            running = [t for t in self._tasks if not t.done()]
            if not running:
                break
            for task in running:
                task.cancel()
            await asyncio.wait(running, timeout=CLOSE_CANCEL_WAIT_S)
        # what was handed over is processed: store it
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._store(force=True), 5.0)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._client.disconnect(), 5.0)


async def connect(uri: str, where: str) -> rbs.StreamsClient:
    """A client connected to the node at `uri` (where: HOST:PORT for the messages)."""
    client = _StreamsClient(rbs.streams_client(uri)._cinfo)
    try:
        await asyncio.wait_for(client.get_protocol(), CONNECT_TIMEOUT_S)
    except Exception as exc:
        with contextlib.suppress(Exception):
            await client.disconnect()
        raise DriverError(f"cannot reach rabbitmq at {where}: {connect_failure(exc)}") from None
    return client


async def producer(client: rbs.StreamsClient, topic: str, streams: list[str], index: int,
                   where: str, publisher: str = "PublisherBatchFast") -> RabbitProducer:
    """Producer `index` of `topic`: a publisher of rbfly's class `publisher` on `client` for
    each of its partition streams."""
    cls = getattr(rbs, publisher)
    stack = contextlib.AsyncExitStack()
    publishers = []
    try:
        for stream in streams:
            # the name keys the server's deduplication: one per producer and stream
            made = await stack.enter_async_context(client.publisher(
                stream, name=f"{stream}.producer-{index}.{os.getpid()}", cls=cls))
            publishers.append(made if isinstance(made, rbs.PublisherBatchFast) else OneByOne(made))
    except Exception as exc:
        await stack.aclose()
        await client.disconnect()
        raise DriverError(f"cannot publish to {topic} on {where}: "
                          f"{type(exc).__name__}: {exc}") from None
    return RabbitProducer(client, publishers, stack)
