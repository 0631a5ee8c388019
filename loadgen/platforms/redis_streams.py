"""Redis Streams driver (redis.asyncio): a topic with N partitions is N streams, a subscription
is a consumer group, producers XADD, consumers XREADGROUP + XACK.

Each entry has two fields: `t`, the intended send time in ns, and `p`, the payload of exactly
`messageSize` bytes."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import redis.asyncio as aioredis
from redis.exceptions import RedisError, ResponseError

from compose.redis import connect_failure
from loadgen.errors import DriverError
from loadgen.pacing import now_ns
from loadgen.platforms.base import Consumer, Driver, OutMessage, Producer, ReceivedBatch

READ_COUNT = 1000
BLOCK_MS = 100


def stream_names(topic: str, partitions: int) -> list[str]:
    return [f"{topic}-{i}" for i in range(partitions)]


def _connection(host: str, port: int) -> aioredis.Redis:
    return aioredis.Redis(host=host, port=port, single_connection_client=True,
                          socket_connect_timeout=5.0, socket_timeout=30.0)


class RedisProducer(Producer):
    """One connection; a batch goes out as one pipeline of XADDs (one round trip)."""

    max_in_flight = 1  # a connection carries one pipeline at a time

    def __init__(self, conn: aioredis.Redis, streams: list[str], maxlen: int) -> None:
        self._conn = conn
        self._streams = streams
        self._next = 0
        self._maxlen = maxlen

    def _stream_for(self, key: bytes | None) -> str:
        if key is None:
            self._next = (self._next + 1) % len(self._streams)
            return self._streams[self._next]
        return self._streams[zlib.crc32(key) % len(self._streams)]

    async def send_batch(self, batch: Sequence[OutMessage]) -> None:
        pipe = self._conn.pipeline(transaction=False)
        trim: tuple[str, ...] = ("MAXLEN", "~", str(self._maxlen)) if self._maxlen else ()
        for m in batch:
            pipe.execute_command("XADD", self._stream_for(m.key), *trim, "*",
                                 "t", m.intended_ns, "p", m.payload)
        await pipe.execute(raise_on_error=True)

    async def close(self) -> None:
        await self._conn.aclose()


class RedisConsumer(Consumer):
    def __init__(self, conn: aioredis.Redis, streams: list[str], group: str, name: str,
                 track_ids: bool) -> None:
        self._conn = conn
        self._streams = streams
        self._group = group
        self._name = name
        self._track = track_ids
        self._index = {s.encode(): i for i, s in enumerate(streams)}
        self._read_args = ("GROUP", group, name, "COUNT", READ_COUNT, "BLOCK", BLOCK_MS,
                           "STREAMS", *streams, *([">"] * len(streams)))

    async def receive(self) -> ReceivedBatch | None:
        reply = await self._conn.execute_command("XREADGROUP", *self._read_args)
        if not reply:
            return None
        receive_ns = now_ns()[1]
        intended: list[int] = []
        size = 0
        ids: list[tuple[int, str]] | None = [] if self._track else None
        pipe = self._conn.pipeline(transaction=False)
        for stream, entries in reply:
            if not entries:
                continue
            entry_ids = []
            for entry_id, fields in entries:
                intended.append(int(fields[b"t"]))
                size += len(fields[b"p"])
                entry_ids.append(entry_id)
            if ids is not None:
                part = self._index[stream]
                ids.extend((part, e.decode()) for e in entry_ids)
            pipe.execute_command("XACK", stream, self._group, *entry_ids)
        await pipe.execute(raise_on_error=True)
        return ReceivedBatch(receive_ns, intended, size, ids)

    async def close(self) -> None:
        await self._conn.aclose()


class RedisStreamsDriver(Driver):
    def __init__(self, host: str, port: int, maxlen: int = 0) -> None:
        self._host = host
        self._port = port
        self._maxlen = maxlen
        self._admin: aioredis.Redis | None = None
        self._version = ""
        self._partitions: dict[str, int] = {}

    async def connect(self) -> None:
        self._admin = _connection(self._host, self._port)
        try:
            await self._admin.ping()
            info = await self._admin.info("server")
        except (OSError, RedisError) as exc:
            raise DriverError(f"cannot reach redis at {self._host}:{self._port}: "
                              f"{connect_failure(exc)}") from None
        self._version = str(info.get("redis_version", b""))

    def version(self) -> str:
        return self._version

    async def create_topic(self, name: str, partitions: int, subscriptions: list[str]) -> None:
        assert self._admin is not None
        self._partitions[name] = partitions
        for stream in stream_names(name, partitions):
            for group in subscriptions:
                try:
                    await self._admin.xgroup_create(stream, group, id="$", mkstream=True)
                except ResponseError as exc:
                    raise DriverError(f"cannot create consumer group {group} on stream {stream}: "
                                      f"{exc}") from None

    async def delete_topic(self, name: str) -> None:
        assert self._admin is not None
        keys = [k async for k in self._admin.scan_iter(match=f"{name}-*")]
        if keys:
            await self._admin.delete(*keys)

    async def _open(self) -> aioredis.Redis:
        conn = _connection(self._host, self._port)
        try:
            await conn.ping()
        except (OSError, RedisError) as exc:
            raise DriverError(f"cannot reach redis at {self._host}:{self._port}: "
                              f"{connect_failure(exc)}") from None
        return conn

    async def producer(self, topic: str, index: int) -> Producer:
        return RedisProducer(await self._open(), self._streams(topic), self._maxlen)

    async def consumer(self, topic: str, subscription: str, index: int, track_ids: bool) -> Consumer:
        return RedisConsumer(await self._open(), self._streams(topic), subscription,
                             f"consumer-{index}", track_ids)

    def _streams(self, topic: str) -> list[str]:
        return stream_names(topic, self._partitions.get(topic, 1))

    async def close(self) -> None:
        if self._admin is not None:
            await self._admin.aclose()
            self._admin = None
