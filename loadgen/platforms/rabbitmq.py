"""RabbitMQ Streams driver: a topic with N partitions is N streams `<topic>-0` … `<topic>-<N-1>`
(the layout of a super stream's partitions), producers route each message to one of them, a
subscription is a named consumer whose offset the server stores per stream.

Client: rbfly (asyncio, its codec in Cython) for producing and consuming; rstream (pure Python)
for the admin connection (streams with retention arguments, stored offsets) and the telemetry.
Both were measured producing to a local RabbitMQ 3.10 with publish confirms, 100-byte messages
carrying their send time as an AMQP application property, one publisher awaiting each batch's
confirm: rbfly about 110,000 msg/s, rstream about 29,000 msg/s in tests/bench/rabbitmq_produce.py
(batches of 256), 167,000 against 58,000 in a first comparison with batches of 500. rstream's
AMQP encoder is pure Python: with raw bodies both reached ~160,000 msg/s. rbfly also keeps a
publisher's sequence across reconnections, so a publish retried after a broker restart is
deduplicated by the server. rbfly is GPL-3.0-or-later, rstream MIT.

Why not a super stream: its topology (an exchange binding the partition streams) can be declared
over the stream protocol only from RabbitMQ 3.13 on, and consumers of one subscription can share
its partitions on the server (single active consumer) only from 3.11 on. The partition streams
here are what a super stream routes to; producers route as a super stream producer does (the
key's hash, or the next partition per batch for unkeyed messages), and the consumers of one
subscription deal the partitions among themselves: consumer i of C reads partitions i, i+C, …
Every consumer of a subscription stores its offsets under the subscription's name, so a later
consumer of that subscription (another run, another process) goes on where it left off.

Each message is an AMQP 1.0 message: the payload of exactly `messageSize` bytes as its body and
the intended send time in ns as the application property `t`. A producer's batch is confirmed
by the broker (publish confirms) before it counts as sent. Consumers store the offset of the
last message they handed over every `store_interval_ms` and on close."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import rbfly.streams as rbs
from rbfly.streams.error import ProtocolError
from rbfly.util import Option
from rstream.client import Client, ClientPool
from rstream.exceptions import StreamAlreadyExists

from collectors.base import Collector
from collectors.rabbitmq import RabbitTelemetry
from collectors.resources import resource_collectors
from compose.net import connect_failure
from compose.rabbitmq import RabbitDockerStack, RabbitExternalStack, RabbitLocalStack, parse_address
from compose.stack import Stack, StackDescription
from loadgen.errors import DriverError, TargetError
from loadgen.platforms.base import Consumer, Driver, OutMessage, Producer, ReceivedBatch
from loadgen.platforms.runtime import runtime_options
from loadgen.platforms.spec import Platform, parse_non_negative, parse_port
from loadgen.security import REDIS_SECURITY_OPTIONS, read_secret
from loadgen.target import OptionSpec, Target

INTENDED_PROPERTY = "t"
RECEIVE_WAIT_S = 0.1
BUFFER_LIMIT = 20_000  # messages a consumer holds before its readers wait for receive()
CONNECT_TIMEOUT_S = 10.0
RECONNECT_PAUSE_S = 0.5
NO_OFFSET = 0x13  # the stream protocol's answer to a query for an offset never stored

# both clients log every connection they lose at warning level and above; a benchmark breaks
# connections on purpose (faults), and the run records what matters as events
for _name in ("rbfly", "rstream"):
    logging.getLogger(_name).setLevel(logging.CRITICAL)


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


def stream_names(topic: str, partitions: int) -> list[str]:
    return [f"{topic}-{i}" for i in range(partitions)]


def assigned(partitions: int, consumers: int, index: int) -> list[int]:
    """The partitions consumer `index` of a subscription with `consumers` consumers reads."""
    return [p for p in range(partitions) if p % max(1, consumers) == index]


EXISTING_SERVER_ONLY = ("user", "password_file", "password_env", "management_port")


def check_options(target: Target) -> None:
    """Options that apply to an existing server only (a node streambench starts lets guest in
    on loopback and has its management port chosen by streambench)."""
    misplaced = [k for k in EXISTING_SERVER_ONLY if k in target.explicit]
    if misplaced and target.address is None:
        raise TargetError(f"target {target.spec!r}: {', '.join(misplaced)} apply to an existing "
                          "server (rabbitmq@HOST:PORT); leave them out")


@dataclass(frozen=True)
class RabbitOptions:
    """The client and stream settings of a RabbitMQ target, typed once from its options."""

    user: str
    password: str
    store_interval_ms: int
    max_length_bytes: int  # 0: no limit
    segment_bytes: int  # 0: the server's default

    @classmethod
    def of(cls, target: Target) -> RabbitOptions:
        check_options(target)
        o = target.options
        secret = read_secret(target, "password")
        return cls(str(o.get("user") or "guest"), secret.reveal() if secret else "guest",
                   int(o.get("store_interval_ms") or 0), int(o.get("max_length_bytes") or 0),
                   int(o.get("segment_bytes") or 0))

    def stream_arguments(self) -> dict[str, Any]:
        args: dict[str, Any] = {}
        if self.max_length_bytes:
            args["max-length-bytes"] = self.max_length_bytes
        if self.segment_bytes:
            args["stream-max-segment-size-bytes"] = self.segment_bytes
        return args


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
            pub.batch(ctx(m.payload, app_properties={INTENDED_PROPERTY: m.intended_ns}))
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
                 track_ids: bool, store_interval_s: float) -> None:
        self._client = client
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
        async for body in self._client.subscribe(stream, offset=start):
            ctx = get_ctx()
            # receive() swaps the lists: look them up on every message
            self._intended.append(ctx.app_properties[INTENDED_PROPERTY])  # type: ignore[arg-type]
            self._sizes += len(body)  # type: ignore[arg-type]
            offset = ctx.stream_offset
            last[partition] = offset
            if track:
                self._ids.append((partition, str(offset)))
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
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # what was handed over is processed: store it
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._store(force=True), 5.0)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._client.disconnect(), 5.0)


class RabbitStreamsDriver(Driver):
    def __init__(self, host: str, port: int, options: RabbitOptions) -> None:
        self._host = host
        self._port = port
        self._opts = options
        self._pool: ClientPool | None = None
        self._admin: Client | None = None
        self._version = ""
        self._partitions: dict[str, int] = {}
        self._consumers = 1

    def _where(self) -> str:
        return f"{self._host}:{self._port}"

    async def connect(self) -> None:
        self._pool = ClientPool(self._host, self._port, vhost="/", username=self._opts.user,
                                password=self._opts.password, frame_max=1024 * 1024, heartbeat=60,
                                load_balancer_mode=False, max_retries=1)
        try:
            self._admin = await asyncio.wait_for(self._pool.get("streambench-admin"), CONNECT_TIMEOUT_S)
        except Exception as exc:
            raise DriverError(f"cannot reach rabbitmq at {self._where()}: {connect_failure(exc)}") from None
        self._version = str((self._admin.server_properties or {}).get("version", ""))

    def version(self) -> str:
        return self._version

    def plan(self, consumers_per_subscription: int) -> None:
        self._consumers = max(1, consumers_per_subscription)

    def adopt_topic(self, name: str, partitions: int) -> None:
        self._partitions[name] = partitions

    async def create_topic(self, name: str, partitions: int, subscriptions: list[str]) -> None:
        assert self._admin is not None
        self.adopt_topic(name, partitions)
        arguments = self._opts.stream_arguments()
        for stream in stream_names(name, partitions):
            try:
                await self._admin.create_stream(stream, arguments or None)
            except StreamAlreadyExists:
                continue
            except Exception as exc:
                raise DriverError(f"cannot create stream {stream} on {self._where()}: "
                                  f"{type(exc).__name__}: {exc}") from None
        # a subscription without a stored offset starts at the stream's first message, so
        # nothing produced before its consumers subscribe is missed

    async def delete_topic(self, name: str) -> None:
        assert self._admin is not None
        for stream in stream_names(name, self._partitions.get(name, 1)):
            with contextlib.suppress(Exception):
                await self._admin.delete_stream(stream)

    def _uri(self) -> str:
        from urllib.parse import quote

        host = f"[{self._host}]" if ":" in self._host else self._host
        return (f"rabbitmq-stream://{quote(self._opts.user, safe='')}:"
                f"{quote(self._opts.password, safe='')}@{host}:{self._port}/")

    async def _client(self) -> rbs.StreamsClient:
        info = rbs.streams_client(self._uri())._cinfo
        client = _StreamsClient(info)
        try:
            await asyncio.wait_for(client.get_protocol(), CONNECT_TIMEOUT_S)
        except Exception as exc:
            with contextlib.suppress(Exception):
                await client.disconnect()
            raise DriverError(f"cannot reach rabbitmq at {self._where()}: {connect_failure(exc)}") from None
        return client

    def _streams(self, topic: str) -> list[str]:
        return stream_names(topic, self._partitions.get(topic, 1))

    async def producer(self, topic: str, index: int) -> Producer:
        client = await self._client()
        stack = contextlib.AsyncExitStack()
        publishers = []
        try:
            for stream in self._streams(topic):
                # the name keys the server's deduplication: one per producer and stream
                publishers.append(await stack.enter_async_context(client.publisher(
                    stream, name=f"{stream}.producer-{index}.{os.getpid()}",
                    cls=rbs.PublisherBatchFast)))
        except Exception as exc:
            await stack.aclose()
            await client.disconnect()
            raise DriverError(f"cannot publish to {topic} on {self._where()}: "
                              f"{type(exc).__name__}: {exc}") from None
        return RabbitProducer(client, publishers, stack)

    async def consumer(self, topic: str, subscription: str, index: int, track_ids: bool) -> Consumer:
        streams = self._streams(topic)
        mine = {p: streams[p] for p in assigned(len(streams), self._consumers, index)}
        client = await self._client()
        return RabbitConsumer(client, mine, subscription, track_ids,
                              self._opts.store_interval_ms / 1000.0)

    async def close(self) -> None:
        if self._pool is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._pool.close(), 5.0)
            self._pool = self._admin = None


def _stack(target: Target) -> Stack:
    RabbitOptions.of(target)  # its checks, before anything starts
    if target.runtime == "external":
        return RabbitExternalStack(target, target.label)
    if target.runtime == "docker":
        return RabbitDockerStack(target, target.label)
    return RabbitLocalStack(target, target.label)


def _driver(target: Target, desc: StackDescription) -> Driver:
    host, port = parse_address(desc.endpoints["stream"])
    return RabbitStreamsDriver(host, port, RabbitOptions.of(target))


def _collectors(target: Target, desc: StackDescription, topic: str, partitions: int,
                subscriptions: list[str]) -> list[Collector]:
    host, port = parse_address(desc.endpoints["stream"])
    opts = RabbitOptions.of(target)
    found: list[Collector] = [RabbitTelemetry(host, port, opts.user, opts.password,
                                              stream_names(topic, partitions), subscriptions,
                                              desc.endpoints.get("management"))]
    found[:0] = resource_collectors(target, desc)
    return found


PLATFORMS = [
    Platform(
        name="rabbitmq",
        summary="RabbitMQ Streams (stream protocol, publish confirms, stored consumer offsets); "
                "a partition is a stream",
        options={
            "port": OptionSpec("loopback stream-protocol port of the node (default: a free one)",
                               default=0, parse=parse_port),
            "store_interval_ms": OptionSpec("how often consumers store their offset (ms; always "
                                            "on close)", default=1000, parse=parse_non_negative),
            "max_length_bytes": OptionSpec("retention: keep about this many bytes per stream "
                                           "(0 = no limit)", default=0, parse=parse_non_negative),
            "segment_bytes": OptionSpec("size of a stream's segment files (0 = the server's "
                                        "default, 500 MB)", default=0, parse=parse_non_negative),
            "user": OptionSpec("existing server: user name (default: guest, which RabbitMQ lets "
                               "in on loopback only)", default=None),
            **{k: REDIS_SECURITY_OPTIONS[k] for k in ("password_file", "password_env", "password")},
            "management_port": OptionSpec("@ADDRESS: port of the management HTTP API on the same "
                                          "host, for broker counters (0 = none)", default=15672,
                                          parse=parse_non_negative),
            **runtime_options(("docker", "local")),
        },
        runtimes=("docker", "local", "external"),
        make_stack=_stack,
        make_driver=_driver,
        make_collectors=_collectors,
        address_example=f"HOST:PORT (the stream port, e.g. 127.0.0.1:{5552})",
    ),
]
