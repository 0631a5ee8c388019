"""Redis Streams driver (redis.asyncio): a topic with N partitions is N streams, a subscription
is a consumer group, producers XADD, consumers XREADGROUP + XACK.

Each entry has two fields: `t`, the intended send time in ns, and `p`, the payload of exactly
`messageSize` bytes."""

from __future__ import annotations

import contextlib
import shutil
import time
import zlib
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError, ResponseError

from collectors.resources import resource_collectors
from compose.docker import file_images
from compose.redis import (
    RedisDockerStack,
    RedisExternalStack,
    RedisLocalStack,
    connect_failure,
    parse_address,
)
from loadgen.core.acklog import stream_position
from loadgen.core.collector import Collector
from loadgen.core.driver import (
    Acknowledged,
    Consumer,
    Delivered,
    Driver,
    OutMessage,
    Producer,
    ReceivedBatch,
)
from loadgen.core.errors import DriverError
from loadgen.core.platform import Platform, Prerequisite, parse_non_negative, parse_port, tool_version
from loadgen.core.security import PLAINTEXT, REDIS_SECURITY_OPTIONS, ClientSecurity
from loadgen.core.settings import (
    SettingsRecord,
    config_option,
    names_check,
    namespace,
    profile_option,
)
from loadgen.core.stack import Stack, StackDescription
from loadgen.core.target import OptionSpec, Target, join_host_port, parse_bool
from loadgen.core.workload import Workload
from loadgen.omb_driver import REDIS_FIELDS, driver_option, named_driver
from loadgen.platforms.redis_metrics import METRICS as BROKER_METRICS
from loadgen.platforms.redis_resp import RespConnection, RespError, encode
from loadgen.platforms.redis_telemetry import RedisTelemetry
from loadgen.platforms.runtime import runtime_options
from loadgen.platforms.setting_names.redis import REDIS_DIRECTIVES

READ_COUNT = 1000
BLOCK_MS = 100

_first, _second, _fourth = itemgetter(0), itemgetter(1), itemgetter(3)


ATOMIC_BATCH = 64
_MULTI = encode(["MULTI"])
_EXEC = encode(["EXEC"])


def _first_error(replies: list[Any]) -> RespError | None:
    """The first error reply, also inside an EXEC's array of replies."""
    for r in replies:
        if isinstance(r, RespError):
            return r
        if isinstance(r, list):
            for inner in r:
                if isinstance(inner, RespError):
                    return inner
    return None


def stream_names(topic: str, partitions: int) -> list[str]:
    return [f"{topic}-{i}" for i in range(partitions)]


def _connection(host: str, port: int, security: ClientSecurity) -> aioredis.Redis:
    return aioredis.Redis(host=host, port=port, single_connection_client=True,
                          socket_connect_timeout=5.0, socket_timeout=30.0,
                          **security.redis_kwargs())


class RedisProducer(Producer):
    """One connection; a batch goes out as one pipeline of XADDs (one write, one round trip),
    its replies dispatched by the connection as they arrive (no task per batch).

    The server serves a reader blocked on a stream after each command that adds to it: a
    pipeline of XADDs would wake a blocked XREADGROUP for its first entry and leave the rest to
    the next read. A batch of up to ATOMIC_BATCH entries (what a paced producer hands over)
    therefore goes in MULTI / EXEC, after which a blocked reader gets all of it at once; larger
    ones (maximum rate, catching up) stay plain pipelines, whose readers are seldom blocked."""

    # batches pipelined on the one connection; replies return in order, so entries stay ordered
    max_in_flight = 4
    submits = True

    def __init__(self, conn: RespConnection, streams: list[str], maxlen: int) -> None:
        self._conn = conn
        # pre-encoded command heads: `*7/9 $4 XADD $n <stream> [MAXLEN ~ n] $1 * $1 t`
        trim = ["MAXLEN", "~", str(maxlen)] if maxlen else []
        self._heads = [self._head(s, trim) for s in streams]
        self._next = 0

    @staticmethod
    def _head(stream: str, trim: list[str]) -> bytes:
        args = ["XADD", stream, *trim, "*", "t"]
        body = b"".join(b"$%d\r\n%s\r\n" % (len(a.encode()), a.encode()) for a in args)
        return b"*%d\r\n" % (len(args) + 3) + body

    def _partition(self, key: bytes | None) -> int:
        if key is None:
            self._next = (self._next + 1) % len(self._heads)
            return self._next
        return zlib.crc32(key) % len(self._heads)

    def _encode(self, batch: Sequence[OutMessage], streams: list[int] | None) -> tuple[bytes, int]:
        """The batch's commands and how many replies they get; the stream (partition) of each
        message goes into `streams` when given."""
        parts = []
        heads = self._heads
        for m in batch:
            t = b"%d" % m.intended_ns
            stream = self._partition(m.key)
            if streams is not None:
                streams.append(stream)
            parts.append(b"%s$%d\r\n%s\r\n$1\r\np\r\n$%d\r\n%s\r\n" % (
                heads[stream], len(t), t, len(m.payload), m.payload))
        if 1 < len(batch) <= ATOMIC_BATCH:  # +OK, +QUEUED per XADD, the XADD replies in one array
            return _MULTI + b"".join(parts) + _EXEC, len(batch) + 2
        return b"".join(parts), len(batch)

    def _streams(self, batch: Sequence[OutMessage]) -> list[int] | None:
        """Where to list the batch's streams, when the ack log may sample one of its messages."""
        acks = self.acks
        return [] if acks is not None and batch and acks.wanted(batch[-1].intended_ns) else None

    def _stored(self, batch: Sequence[OutMessage], streams: list[int] | None,
                replies: list[Any]) -> None:
        """Note where the acknowledged messages were stored: the ids XADD answered."""
        if self.acks is None or streams is None:
            return
        ids = replies[-1] if len(replies) == len(batch) + 2 else replies
        self.acks.each(streams, ids, [m.intended_ns for m in batch], stream_position)

    async def send_batch(self, batch: Sequence[OutMessage]) -> None:
        streams = self._streams(batch)
        replies = await self._conn.pipeline(*self._encode(batch, streams))
        error = _first_error(replies)
        if error is not None:
            raise error
        self._stored(batch, streams, replies)

    def submit(self, batch: Sequence[OutMessage], done: Acknowledged) -> None:
        streams = self._streams(batch)

        def replied(result: list[Any] | BaseException) -> None:
            if isinstance(result, BaseException):
                done(result)
                return
            error = _first_error(result)
            if error is None:
                self._stored(batch, streams, result)
            done(error)

        self._conn.submit(*self._encode(batch, streams), replied)

    async def close(self) -> None:
        await self._conn.close()


class RedisConsumer(Consumer):
    """XREADGROUP ... BLOCK on the server (no polling), up to READ_COUNT entries per stream per
    read. A batch's XACK goes out in the same write as the next XREADGROUP, right behind it:
    the server runs it once that read is answered and sends both replies together, so
    acknowledging costs neither a round trip nor a wake-up of its own. Until then the entries
    are pending (read, not yet acknowledged), as with any consumer that acknowledges after
    processing; close() sends what is still owed.

    The load starts each read from the reply to the previous one (deliver()), without waking a
    task per read; receive() serves the reads that need requests of their own (the pending list
    after a lost connection, a group made again)."""

    shared = True  # every consumer of the group reads every stream; the server deals entries
    delivers = True

    def __init__(self, conn: RespConnection, streams: list[str], group: str, name: str,
                 track_ids: bool) -> None:
        self._all = tuple(range(len(streams)))
        self._conn = conn
        # the group again, from each stream's first entry, should the server have lost it
        self._create = b"".join(encode(["XGROUP", "CREATE", s, group, "0", "MKSTREAM"])
                                for s in streams)
        self._n_streams = len(streams)
        self._track = track_ids
        self._index = {s.encode(): i for i, s in enumerate(streams)}
        # `XACK <stream> <group>` without the array header, which depends on the id count
        self._ack_heads = {s.encode(): encode(["XACK", s, group]).split(b"\r\n", 1)[1]
                           for s in streams}
        self._read = encode(["XREADGROUP", "GROUP", group, name, "COUNT", READ_COUNT, "BLOCK",
                             BLOCK_MS, "STREAMS", *streams, *([">"] * len(streams))])
        self._acks = b""  # XACKs of the latest batch, sent with the next read
        self._ack_count = 0
        # entries the server delivered to this consumer name but whose reply was lost with a
        # connection (see take_over): read again from the group's pending list, id 0
        self._history = encode(["XREADGROUP", "GROUP", group, name, "COUNT", READ_COUNT,
                                "STREAMS", *streams, *(["0"] * len(streams))])
        self._in_history = False
        # deliver()'s read in flight: the XACKs sent with it, and where its outcome goes
        self._owed, self._n_owed = b"", 0
        self._outcome: Delivered | None = None
        self._no_group: RespError | None = None  # a NOGROUP reply to a read from deliver()

    def deliver(self, outcome: Delivered) -> bool:
        if self._in_history or self._no_group is not None:
            return False
        self._owed, self._n_owed = self._acks, self._ack_count
        self._acks, self._ack_count = b"", 0
        try:
            self._conn.submit(self._read, 1, self._replied, self._owed, self._n_owed)
        except BaseException:
            self._acks, self._ack_count = self._owed, self._n_owed
            raise
        self._outcome = outcome
        return True

    def _replied(self, result: list[Any] | BaseException) -> None:
        outcome, self._outcome = self._outcome, None
        assert outcome is not None
        receive_ns = time.time_ns()
        if isinstance(result, BaseException):
            self._acks, self._ack_count = self._owed, self._n_owed  # still owed, as in receive()
            outcome(result)
            return
        error = self._conn.take_send_error() or result[0]
        if isinstance(error, RespError):
            if str(error).startswith("NOGROUP"):
                self._no_group = error  # receive() makes the group again
                outcome(None)
            else:
                outcome(error)
            return
        try:
            batch = self._settle(result[0], receive_ns)
        except Exception as exc:
            outcome(exc)
            return
        outcome(batch)

    async def receive(self) -> ReceivedBatch | None:
        if self._no_group is not None:
            reply, self._no_group = self._no_group, None
            await self._lost_group(reply)
        owed, n_owed = self._acks, self._ack_count
        self._acks, self._ack_count = b"", 0
        try:
            if self._in_history:
                # acknowledge first, so that the pending list read next holds only entries
                # this consumer has not counted
                if n_owed:
                    await self._conn.pipeline(owed, n_owed)
                owed, n_owed = b"", 0
                (reply,) = await self._conn.pipeline(self._history, 1)
            else:
                (reply,) = await self._conn.pipeline(self._read, 1, owed, n_owed)
        except BaseException:
            # the XACKs may not have reached the server: still owed (acknowledging twice is
            # harmless), by this consumer or the one that takes over from it
            self._acks, self._ack_count = owed, n_owed
            raise
        receive_ns = time.time_ns()
        if isinstance(reply, RespError):
            if str(reply).startswith("NOGROUP"):
                await self._lost_group(reply)
            raise reply
        return self._settle(reply, receive_ns)

    async def _lost_group(self, reply: RespError) -> None:
        """A server started again without its data (no AOF): the streams the producers write
        again have no group; made again, reading them from their start (another consumer of the
        group may have made it first: BUSYGROUP, fine). Raises the error, explained."""
        await self._conn.pipeline(self._create, self._n_streams)
        raise RespError(f"{reply}; the group was created again, from the streams' first "
                        "entries (the server lost it: started again without its data?)")

    def _settle(self, reply: Any, receive_ns: int) -> ReceivedBatch | None:
        """The batch in a reply to XREADGROUP; its XACKs are owed from now on."""
        history = self._in_history
        if history and not any(entries for _, entries in reply or ()):
            self._in_history = False  # the pending list is empty: back to new entries
        if not reply:
            return None
        intended: list[int] = []
        size = 0
        ids: list[tuple[int, str]] | None = [] if self._track else None
        acks = []
        for stream, entries in reply:
            if history:
                # a pending entry deleted (trimmed) since its delivery comes back without
                # fields: only acknowledged
                gone = [e[0] for e in entries if e[1] is None]
                if gone:
                    acks.append(b"*%d\r\n%s%s" % (len(gone) + 3, self._ack_heads[stream], b"".join(
                        [b"$%d\r\n%s\r\n" % (len(e), e) for e in gone])))
                    entries = [e for e in entries if e[1] is not None]
            if not entries:
                continue
            # an entry is [id, [b"t", <intended ns>, b"p", <payload>]]
            fields = list(map(_second, entries))
            intended += map(int, map(_second, fields))
            size += sum(map(len, map(_fourth, fields)))
            entry_ids = list(map(_first, entries))
            if ids is not None:
                part = self._index[stream]
                ids.extend((part, e.decode()) for e in entry_ids)
            acks.append(b"*%d\r\n%s%s" % (len(entry_ids) + 3, self._ack_heads[stream], b"".join(
                [b"$%d\r\n%s\r\n" % (len(e), e) for e in entry_ids])))
        self._acks, self._ack_count = b"".join(acks), len(acks)
        return ReceivedBatch(receive_ns, intended, size, ids)

    def partitions(self) -> tuple[int, ...] | None:
        return self._all

    def take_over(self, lost: Consumer) -> None:
        if not isinstance(lost, RedisConsumer):
            return
        self._acks, self._ack_count = lost._acks + self._acks, lost._ack_count + self._ack_count
        lost._acks, lost._ack_count = b"", 0
        # entries delivered to the lost connection whose reply never came are counted now
        self._in_history = True

    async def close(self) -> None:
        if self._ack_count:
            with contextlib.suppress(OSError, RespError):
                self._conn.send(self._acks, self._ack_count)
            self._acks, self._ack_count = b"", 0
        await self._conn.close()


def _str(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class RedisStreamsDriver(Driver):
    def __init__(self, host: str, port: int, maxlen: int = 0,
                 security: ClientSecurity = PLAINTEXT, target: Target | None = None,
                 desc: StackDescription | None = None) -> None:
        self._target = target
        self._desc = desc
        self._host = host
        self._port = port
        self._maxlen = maxlen
        self._security = security
        self._admin: aioredis.Redis | None = None
        self._version = ""
        self._partitions: dict[str, int] = {}

    async def connect(self) -> None:
        self._admin = _connection(self._host, self._port, self._security)
        try:
            await self._admin.ping()
            info = await self._admin.info("server")
        except (OSError, RedisError) as exc:
            raise DriverError(f"cannot reach redis at {join_host_port(self._host, self._port)}: "
                              f"{connect_failure(exc, self._security.tls is not None)}") from None
        self._version = str(info.get("redis_version", b""))

    def version(self) -> str:
        return self._version

    async def settings_in_force(self) -> dict[str, dict[str, Any]]:
        """The server's directives (CONFIG GET *), each with its source."""
        if self._target is None:
            return {}
        assert self._admin is not None
        record = SettingsRecord(self._target)
        written = self._desc.broker_settings if self._desc is not None else {}
        try:
            values = await self._admin.config_get("*")
        except (OSError, RedisError):  # CONFIG may be renamed or refused on a managed server
            values = None
        if values:
            explicit = self._target.explicit
            record.add("conf", {_str(k): _str(v) for k, v in sorted(values.items())}, read_back=True,
                       streambench=written,
                       user=[k for k, option in (("appendonly", "aof"), ("appendfsync", "fsync"))
                             if option in explicit])
        record.add_requested()
        return record.result()

    def adopt_topic(self, name: str, partitions: int) -> None:
        self._partitions[name] = partitions

    async def create_topic(self, name: str, partitions: int, subscriptions: list[str]) -> None:
        assert self._admin is not None
        self.adopt_topic(name, partitions)
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

    async def _open(self) -> RespConnection:
        try:
            conn = await RespConnection.open(self._host, self._port,
                                             tls=self._security.ssl_context(),
                                             auth=self._security.redis_auth())
            await conn.call("PING")
        except (OSError, RespError, TimeoutError) as exc:
            why = connect_failure(exc, self._security.tls is not None)
            if "max number of clients" in str(exc):
                why += (" (the server's maxclients: the run opens a connection per consumer and "
                        "producer; raise it on the server, redis:conf.maxclients=N on one "
                        "streambench starts, or run fewer consumers)")
            raise DriverError(f"cannot reach redis at {join_host_port(self._host, self._port)}: "
                              f"{why}") from None
        return conn

    async def producer(self, topic: str, index: int) -> Producer:
        return RedisProducer(await self._open(), self._streams(topic), self._maxlen)

    async def consumer(self, topic: str, subscription: str, index: int, track_ids: bool) -> Consumer:
        return RedisConsumer(await self._open(), self._streams(topic), subscription,
                             f"consumer-{index}", track_ids)

    def _streams(self, topic: str) -> list[str]:
        return stream_names(topic, self._partitions.get(topic, 1))

    def topic_layout(self, name: str, partitions: int) -> dict[str, Any]:
        return {"partitions": partitions, "streams": stream_names(name, partitions)}

    async def close(self) -> None:
        if self._admin is not None:
            await self._admin.aclose()
            self._admin = None


def _stack(target: Target) -> Stack:
    if target.runtime == "external":
        return RedisExternalStack(target, target.label)
    if target.runtime == "docker":
        return RedisDockerStack(target, target.label)
    return RedisLocalStack(target, target.label)


def _driver(target: Target, desc: StackDescription) -> Driver:
    host, port = parse_address(desc.endpoints["redis"])
    return RedisStreamsDriver(host, port, maxlen=int(target.options.get("maxlen") or 0),
                              security=ClientSecurity.of(target), target=target, desc=desc)


def _collectors(target: Target, desc: StackDescription, topic: str, partitions: int,
                subscriptions: list[str]) -> list[Collector]:
    host, port = parse_address(desc.endpoints["redis"])
    found: list[Collector] = [RedisTelemetry(host, port, stream_names(topic, partitions), subscriptions,
                                             ClientSecurity.of(target), topic)]
    found[:0] = resource_collectors(target, desc)
    return found


_SET_BY_STREAMBENCH = {
    "port": "use redis:port=N", "bind": "the server listens on 127.0.0.1",
    "dir": "each server has a data directory of its own", "daemonize": "streambench runs it",
    "logfile": "streambench keeps its log with the run",
    **{k: "a secret is not taken on the command line, and streambench's clients reach the local "
          "server without one" for k in ("requirepass", "masterauth", "tls-key-file-pass")},
}
# fsync of every write to the append-only file (the README tells its measured effect)
PROFILES = {"durable": {"conf.appendonly": "yes", "conf.appendfsync": "always"}}

def _loss_hint(target: Target) -> str | None:
    maxlen = int(target.options.get("maxlen") or 0)
    if not maxlen:
        return None
    return (f"maxlen={maxlen} trims each stream to about its last {maxlen:,} entries, read or "
            "not: entries the consumers had not read by then are gone")


# bytes of a Redis server's used_memory per stream entry beyond its payload (measured with
# 1 KiB payloads: 1.2 kB per entry): the entry's id, its field names and timestamp, the tree
ENTRY_OVERHEAD = 180


def _memory_per_message(target: Target, workload: Workload) -> int | None:
    """A stream keeps every entry in the server's memory, unless maxlen= trims it."""
    if int(target.options.get("maxlen") or 0):
        return None
    return workload.message_size + ENTRY_OVERHEAD


def _server_version(path: str) -> str | None:
    return tool_version([path, "--version"], r"v=(\S+)")


PLATFORMS = [
    Platform(
        name="redis",
        summary="Redis Streams (XADD / XREADGROUP + XACK); a partition is a stream",
        options={
            "aof": OptionSpec("append-only file on (fsync per `fsync`, default every second)",
                              default=False, parse=parse_bool, flag=True),
            "fsync": OptionSpec("appendfsync policy with aof",
                                default="everysec", choices=("always", "everysec", "no"),
                                needs="aof"),
            "port": OptionSpec("loopback port of the redis-server (default: a free one)",
                               default=0, parse=parse_port),
            "maxlen": OptionSpec("trim each stream to about this many entries (0 = never)",
                                 default=0, parse=parse_non_negative),
            **runtime_options(("docker", "local")),
            **REDIS_SECURITY_OPTIONS,
            "conf": namespace("conf.DIRECTIVE=VALUE: a directive of the redis-server streambench "
                              "starts (e.g. conf.appendfsync=always)",
                              names_check(REDIS_DIRECTIVES, "redis-server directive",
                                          _SET_BY_STREAMBENCH), broker=True),
            "profile": profile_option(PROFILES),
            "config": config_option(),
            "driver": driver_option(named_driver(REDIS_FIELDS)),
        },
        runtimes=("docker", "local", "external"),
        broker_settings_runtimes=("docker", "local"),
        make_stack=_stack,
        docker_images=file_images("redis.yml"),
        lag_per_partition=True, keyed=True, settings_read_back=("conf",),
        proxied_endpoints=("redis",),
        make_driver=_driver,
        make_collectors=_collectors,
        broker_metrics=BROKER_METRICS,
        loss_hint=_loss_hint,
        memory_per_message=_memory_per_message,
        memory_relief="the target option maxlen= trims the stream",
        prerequisites=(Prerequisite("redis-server", ("local",), lambda: shutil.which("redis-server"),
                                    _server_version,
                                    "Debian/Ubuntu: apt-get install redis-server"),),
    ),
]
