"""NATS JetStream driver (nats-py): a topic with N partitions is one stream whose subjects are
`<stream>.0` … `<stream>.<N-1>`, a partition per subject; a subscription is one durable pull
consumer with explicit acknowledgement, which every consumer of the subscription pulls from.

Each message carries its intended send time in ns as the decimal ASCII value of header `t`; the
payload is exactly `messageSize` bytes. A message counts as produced when the server's publish
acknowledgement (the JetStream PubAck: stored in the stream) arrives; consumers pull in
batches and acknowledge every message (+ACK) before the batch is counted."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import itertools
import json
import re
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    PersistMode,
    RetentionPolicy,
    StorageType,
    StoreCompression,
    StreamConfig,
)
from nats.js.errors import APIError, NotFoundError

from collectors.nats import METRICS as NATS_METRICS
from collectors.nats import METRICS_SOURCE, NatsMetrics, NatsTelemetry, monitor_get
from collectors.resources import resource_collectors
from compose.docker import file_images
from compose.nats import (
    MONITOR_ENDPOINT,
    Callback,
    ConnectFailed,
    NatsDockerStack,
    NatsExternalStack,
    NatsLocalStack,
    find_server,
    version_text,
)
from compose.nats import open_connection as _open_connection
from loadgen.core.brokermetrics import BrokerMetrics
from loadgen.core.collector import Collector
from loadgen.core.driver import Consumer, Driver, OutMessage, Producer, ReceivedBatch
from loadgen.core.errors import DriverError, TargetError
from loadgen.core.platform import Platform, Prerequisite, parse_non_negative, parse_port, tool_version
from loadgen.core.settings import (
    SettingsRecord,
    config_option,
    hint,
    kwargs_check,
    namespace,
    profile_option,
    settings_of,
    signature_defaults,
)
from loadgen.core.stack import Stack, StackDescription
from loadgen.core.target import INT64_MAX, OptionSpec, Target, parse_positive_int, whole_in
from loadgen.platforms.runtime import runtime_options
from loadgen.platforms.setting_names.nats import (
    NATS_JETSTREAM,
    NATS_SERVER,
    NATS_SERVER_BLOCKS,
)

INTENDED_HEADER = "t"
ACK_TIMEOUT_S = 30.0  # a batch with publish acknowledgements missing this long has failed
RECEIVE_WAIT_S = 0.1
PULL_EXPIRES_S = 1.0  # a pull request the server holds this long, then answers 408
PULL_GRACE_S = 0.5  # a pull request unanswered this long after it expired is taken as lost
CLOSE_FLUSH_S = 2.0  # at most this long for the server to take back what a closing consumer holds
API_TIMEOUT_S = 10.0
_STATUS = "Status"
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def stream_name(topic: str) -> str:
    """The stream behind one of the run's topics (stream names allow no `.`, `*`, `>`)."""
    return _NAME_UNSAFE.sub("_", topic)


def subjects(stream: str, partitions: int) -> list[str]:
    return [f"{stream}.{p}" for p in range(partitions)]


def _failure(exc: BaseException) -> str:
    if isinstance(exc, APIError) and exc.description:
        return f"{exc.description} (code {exc.err_code})"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class PublishRefused(Exception):
    """The server answered a publish with an error instead of a PubAck."""


@dataclass
class _Awaited:
    """A batch whose PubAcks are awaited."""

    left: int
    done: asyncio.Future[None]
    timer: asyncio.TimerHandle


class NatsProducer(Producer):
    """One connection; a batch goes out as publishes with one reply subject of its own, and the
    server's PubAck for each of its messages arrives on that subject (no request, future or
    task per message). A batch is done when every PubAck came back; a refused message, a lost
    connection or ACK_TIMEOUT_S without all of them fail it."""

    max_in_flight = 8

    def __init__(self, nc: NATS, partition_subjects: list[str]) -> None:
        self._nc = nc
        self._subjects = partition_subjects
        self._inbox = nc.new_inbox()
        self._awaited: dict[str, _Awaited] = {}
        self._numbers = itertools.count()
        self._next = 0
        self._loop = asyncio.get_running_loop()

    async def start(self) -> None:
        await self._nc.subscribe(f"{self._inbox}.*", cb=self._on_ack, pending_msgs_limit=-1,
                                 pending_bytes_limit=-1)

    def _partition(self, key: bytes | None) -> int:
        if key is None:
            self._next = (self._next + 1) % len(self._subjects)
            return self._next
        return zlib.crc32(key) % len(self._subjects)

    def _finish(self, token: str, error: BaseException | None) -> None:
        awaited = self._awaited.pop(token, None)
        if awaited is None or awaited.done.done():
            return
        awaited.timer.cancel()
        if error is None:
            awaited.done.set_result(None)
        else:
            awaited.done.set_exception(error)

    async def _on_ack(self, msg: Msg) -> None:
        token = msg.subject[len(self._inbox) + 1:]
        awaited = self._awaited.get(token)
        if awaited is None:
            return
        status = msg.headers.get(_STATUS) if msg.headers else None
        if status is not None:  # 503: no stream listens on the subject
            self._finish(token, PublishRefused(f"no stream answered (status {status})"))
            return
        if b'"error"' in msg.data:
            error = json.loads(msg.data).get("error") or {}
            self._finish(token, PublishRefused(f"{error.get('description', 'refused')} "
                                               f"(code {error.get('err_code', '?')})"))
            return
        awaited.left -= 1
        if awaited.left == 0:
            self._finish(token, None)

    def fail_all(self, error: BaseException) -> None:
        """Every awaited batch fails (the connection was lost: their PubAcks never come)."""
        for token in list(self._awaited):
            self._finish(token, error)

    async def send_batch(self, batch: Sequence[OutMessage]) -> None:
        token = str(next(self._numbers))
        done: asyncio.Future[None] = self._loop.create_future()
        timer = self._loop.call_later(
            ACK_TIMEOUT_S, self._finish, token,
            TimeoutError(f"no publish acknowledgement within {ACK_TIMEOUT_S:g} s"))
        self._awaited[token] = _Awaited(len(batch), done, timer)
        reply = f"{self._inbox}.{token}"
        publish, subjects_ = self._nc.publish, self._subjects
        try:
            for m in batch:
                await publish(subjects_[self._partition(m.key)], m.payload, reply=reply,
                              headers={INTENDED_HEADER: str(m.intended_ns)})
        except Exception as exc:
            self._finish(token, exc)
        await done

    async def close(self) -> None:
        self.fail_all(ConnectionError("producer closed"))
        with contextlib.suppress(Exception):
            await self._nc.close()


class NatsConsumer(Consumer):
    """Pulls from the subscription's durable consumer: one pull request at a time for up to
    `fetch` messages, held by the server for up to PULL_EXPIRES_S, its messages delivered to
    this consumer's inbox as they are stored. receive() returns what arrived (waiting up to
    RECEIVE_WAIT_S for the first), after acknowledging each message."""

    shared = True  # the subscription's consumers pull from one durable consumer

    def __init__(self, nc: NATS, stream: str, durable: str, fetch: int, track_ids: bool,
                 partitions: int = 1) -> None:
        self._all = tuple(range(partitions))
        self._nc = nc
        self._stream = stream
        self._next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}"
        self._fetch = fetch
        self._track = track_ids
        self._inbox = nc.new_inbox()
        self._arrived: list[Msg] = []
        self._wake = asyncio.Event()
        self._open_until = 0.0  # monotonic time after which the open pull request is lost
        self._left = 0  # messages the open pull request may still deliver
        self._prefix = len(stream) + 1
        self._sub: Any = None  # the inbox's subscription, once started

    async def start(self) -> None:
        self._sub = await self._nc.subscribe(self._inbox, cb=self._on_msg, pending_msgs_limit=-1,
                                             pending_bytes_limit=-1)

    def forget_request(self) -> None:
        """The open pull request is gone (the connection was lost): pull again."""
        self._open_until = 0.0

    async def _on_msg(self, msg: Msg) -> None:
        if msg.headers and _STATUS in msg.headers and not msg.reply:
            # 408 request expired, 404 no messages, 409 e.g. too many waiting: the request
            # is over; 100 is an idle heartbeat
            if msg.headers[_STATUS] != "100":
                self._open_until = 0.0
                self._wake.set()  # receive() pulls again at once
            return
        self._arrived.append(msg)
        self._left -= 1
        if self._left <= 0:
            self._open_until = 0.0
        self._wake.set()

    async def _pull(self) -> None:
        if time.monotonic() < self._open_until:
            return
        self._left = self._fetch
        self._open_until = time.monotonic() + PULL_EXPIRES_S + PULL_GRACE_S
        request = b'{"batch":%d,"expires":%d}' % (self._fetch, int(PULL_EXPIRES_S * 1e9))
        await self._nc.publish(self._next_subject, request, reply=self._inbox)

    def partitions(self) -> tuple[int, ...] | None:
        return self._all

    async def receive(self) -> ReceivedBatch | None:
        await self._pull()
        if not self._arrived:
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), RECEIVE_WAIT_S)
            if not self._arrived:
                return None
        receive_ns = time.time_ns()
        msgs, self._arrived = self._arrived, []
        intended: list[int] = []
        size = 0
        publish = self._nc.publish
        for m in msgs:
            try:
                intended.append(int(m.headers[INTENDED_HEADER]))  # type: ignore[index]
            except (TypeError, KeyError, ValueError):
                raise DriverError(f"message {m.subject} in stream {self._stream} has no "
                                  f"'{INTENDED_HEADER}' header: was it written by streambench?") from None
            size += len(m.data)
            await publish(m.reply, b"+ACK")
        if not self._track:
            return ReceivedBatch(receive_ns, intended, size)
        ids = [(int(m.subject[self._prefix:]), _stream_sequence(m.reply)) for m in msgs]
        return ReceivedBatch(receive_ns, intended, size, ids)

    async def close(self) -> None:
        # messages delivered to this consumer and not yet read: handed back at once (a
        # negative acknowledgement), or the server would deliver them again only ack_wait
        # after, and a drain would wait that long for them
        with contextlib.suppress(Exception):
            if self._sub is not None:
                # first no more deliveries (the server drops the open pull request), and every
                # message that came before that handed to _on_msg: a drain, not an unsubscribe,
                # which drops what the client has read from the socket and not yet dispatched
                # (on a busy machine, part of a batch), left delivered and unacknowledged
                await asyncio.wait_for(self._sub.drain(), CLOSE_FLUSH_S)
        left, self._arrived = self._arrived, []
        with contextlib.suppress(Exception):
            for m in left:
                if m.reply:
                    await self._nc.publish(m.reply, b"-NAK")
            if left:
                await asyncio.wait_for(self._nc.flush(), CLOSE_FLUSH_S)
        with contextlib.suppress(Exception):
            await self._nc.close()


def _stream_sequence(reply: str) -> str:
    """The stream sequence of a delivered message, from its ack subject
    `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>`
    (servers with domains add `<domain>.<account hash>` after ACK and a token at the end)."""
    tokens = reply.split(".")
    return tokens[5] if len(tokens) == 9 else tokens[7]


@dataclass(frozen=True)
class NatsClientOptions:
    """The stream, consumer and client settings of a NATS target, typed once from its options."""

    storage: str  # file | memory
    max_msgs: int  # 0: no limit
    fetch: int
    max_ack_pending: int
    ack_wait_s: int
    # `topic.` settings (StreamConfig fields) and `consumer.` settings (ConsumerConfig fields of
    # each subscription's durable consumer), over streambench's own: (name, value)
    stream: tuple[tuple[str, Any], ...] = ()
    consumer: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, target: Target) -> NatsClientOptions:
        o = target.options
        return cls(str(o["storage"]), int(o["max_msgs"]), int(o["fetch"]),
                   int(o["max_ack_pending"]), int(o["ack_wait"]),
                   tuple(settings_of(target, "topic").items()),
                   tuple(settings_of(target, "consumer").items()))

    def stream_config(self, stream: str) -> dict[str, Any]:
        """add_stream's keyword arguments: streambench's, then the `topic.` settings."""
        return {"name": stream, "subjects": [f"{stream}.*"], "storage": StorageType(self.storage),
                "num_replicas": 1, "max_msgs": self.max_msgs or -1, "discard": DiscardPolicy.OLD,
                **dict(self.stream)}

    def consumer_config(self, durable: str) -> dict[str, Any]:
        """add_consumer's keyword arguments: streambench's, then the `consumer.` settings."""
        return {"durable_name": durable, "ack_policy": AckPolicy.EXPLICIT,
                "deliver_policy": DeliverPolicy.ALL, "ack_wait": self.ack_wait_s,
                "max_ack_pending": self.max_ack_pending, "max_waiting": 512, **dict(self.consumer)}


def _config_values(config: Any) -> dict[str, Any]:
    """The plain fields of a StreamConfig / ConsumerConfig the server answered with (enums by
    value, nothing for fields it left unset or that hold objects)."""
    found: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if isinstance(value, enum.Enum):
            value = value.value
        if value is None or isinstance(value, (list, dict)) or dataclasses.is_dataclass(value):
            continue
        found[f.name] = value
    return found


def _duration(ns: Any) -> str:
    """A Go duration of the monitoring endpoint (ns) as the configuration file writes it."""
    value = int(ns or 0)
    if value % 1_000_000_000 == 0:
        return f"{value // 1_000_000_000}s"
    return f"{value / 1e6:g}ms"


def varz_settings(varz: dict[str, Any]) -> dict[str, str]:
    """The settings the server's /varz tells, by their configuration file names."""
    found: dict[str, str] = {}
    for name in ("max_connections", "max_subscriptions", "ping_max", "max_control_line",
                 "max_payload", "max_pending", "server_name"):
        if name in varz:
            found[name] = str(varz[name])
    for name in ("ping_interval", "write_deadline"):
        if name in varz:
            found[name] = _duration(varz[name])
    config = (varz.get("jetstream") or {}).get("config") or {}
    if "max_memory" in config:
        found["jetstream.max_memory_store"] = str(config["max_memory"])
    if "max_storage" in config:
        found["jetstream.max_file_store"] = str(config["max_storage"])
    if config.get("sync_always"):
        found["jetstream.sync_interval"] = "always"
    elif config.get("sync_interval"):
        found["jetstream.sync_interval"] = _duration(config["sync_interval"])
    for name in ("domain", "unique_tag"):
        if config.get(name):
            found[f"jetstream.{name}"] = str(config[name])
    return found


class NatsDriver(Driver):
    def __init__(self, target: Target, endpoint: str, desc: StackDescription | None = None) -> None:
        self._target = target
        self._endpoint = endpoint
        self._desc = desc
        self._opts = NatsClientOptions.of(target)
        self._admin: NATS | None = None
        self._version = ""
        self._partitions: dict[str, int] = {}
        self._leaders: dict[str, str] = {}  # topic -> the server leading its stream, when told
        self._created: set[str] = set()
        self._durables: dict[str, list[str]] = {}  # stream -> its subscriptions' consumers

    async def _connect(self, name: str, disconnected: Callback | None = None,
                       reconnected: Callback | None = None) -> NATS:
        try:
            return await _open_connection(self._endpoint, name, disconnected=disconnected,
                                          reconnected=reconnected)
        except ConnectFailed as exc:
            raise DriverError(f"cannot reach NATS at {self._endpoint}: {exc}") from None

    async def connect(self) -> None:
        self._admin = await self._connect("streambench-admin")
        self._version = version_text(self._admin)
        try:
            await self._admin.jsm().account_info()
        except (NatsError, TimeoutError) as exc:
            raise DriverError(f"the NATS server at {self._endpoint} has no JetStream "
                              f"({_failure(exc)}); start it with -js") from None

    def version(self) -> str:
        return self._version

    async def settings_in_force(self) -> dict[str, dict[str, Any]]:
        """The server's settings its monitoring endpoint tells (/varz), each with its source;
        the target's other settings as requested."""
        record = SettingsRecord(self._target)
        await self._stream_settings(record)
        monitor = self._desc.endpoints.get(MONITOR_ENDPOINT) if self._desc is not None else None
        if monitor:
            try:
                varz = await asyncio.to_thread(monitor_get, monitor, "/varz", 5.0)
            except (OSError, ValueError):
                varz = None
            if isinstance(varz, dict):
                written = self._desc.broker_settings if self._desc is not None else {}
                record.add("broker", varz_settings(varz), read_back=True, streambench=written)
        record.add_requested()
        return record.result()

    async def _stream_settings(self, record: SettingsRecord) -> None:
        """The run's first stream's configuration and its first subscription's consumer's, as
        the server answers them (as requested when it does not)."""
        if self._admin is None or not self._created:
            return
        stream = sorted(self._created)[0]
        explicit = self._target.explicit
        plain = [k for k in ("storage", "max_msgs") if k in explicit]
        jsm = self._admin.jsm()
        with contextlib.suppress(NatsError, TimeoutError):
            info = await jsm.stream_info(stream)
            record.add("topic", _config_values(info.config), read_back=True,
                       streambench=self._opts.stream_config(stream), user=plain)
        durable = next(iter(self._durables.get(stream, ())), None)
        if durable is not None:
            with contextlib.suppress(NatsError, TimeoutError):
                found = await jsm.consumer_info(stream, durable, timeout=API_TIMEOUT_S)
                user = [k for k in ("ack_wait", "max_ack_pending") if k in explicit]
                record.add("consumer", _config_values(found.config), read_back=True,
                           streambench=self._opts.consumer_config(durable), user=user)

    def adopt_topic(self, name: str, partitions: int) -> None:
        self._partitions[name] = partitions

    def topic_layout(self, name: str, partitions: int) -> dict[str, Any]:
        stream = stream_name(name)
        layout: dict[str, Any] = {"name": stream, "partitions": partitions,
                                  "subjects": subjects(stream, partitions),
                                  "replication": int(dict(self._opts.stream).get("num_replicas") or 1)}
        if self._leaders.get(name):
            layout["leader"] = self._leaders[name]
        return layout

    async def create_topic(self, name: str, partitions: int, subscriptions: list[str]) -> None:
        assert self._admin is not None
        self.adopt_topic(name, partitions)
        stream, opts = stream_name(name), self._opts
        jsm = self._admin.jsm()
        try:
            info = await jsm.add_stream(**opts.stream_config(stream))
        except (NatsError, TimeoutError, TypeError, ValueError) as exc:
            raise DriverError(f"cannot create stream {stream} on NATS at {self._endpoint}: "
                              f"{_failure(exc)}") from None
        self._created.add(stream)
        leader = info.cluster.leader if info.cluster is not None else None
        self._leaders[name] = leader or ""
        self._durables[stream] = list(subscriptions)
        for sub in subscriptions:
            try:
                await jsm.add_consumer(stream, **opts.consumer_config(sub), timeout=API_TIMEOUT_S)
            except (NatsError, TimeoutError, TypeError, ValueError) as exc:
                raise DriverError(f"cannot create consumer {sub} on stream {stream}: "
                                  f"{_failure(exc)}") from None

    async def delete_topic(self, name: str) -> None:
        stream = stream_name(name)
        if self._admin is not None and stream in self._created:
            with contextlib.suppress(NotFoundError):
                await self._admin.jsm().delete_stream(stream)
            self._created.discard(stream)

    async def producer(self, topic: str, index: int) -> Producer:
        stream = stream_name(topic)
        made: list[NatsProducer] = []

        async def lost() -> None:  # the PubAcks awaited on the lost connection never come
            for p in made:
                p.fail_all(ConnectionError("connection to the NATS server lost"))

        nc = await self._connect(f"streambench-producer-{index}", disconnected=lost)
        producer = NatsProducer(nc, subjects(stream, self._partitions.get(topic, 1)))
        made.append(producer)
        await producer.start()
        return producer

    async def consumer(self, topic: str, subscription: str, index: int, track_ids: bool) -> Consumer:
        stream = stream_name(topic)
        made: list[NatsConsumer] = []

        async def back() -> None:  # the pull request open on the lost connection is gone
            for c in made:
                c.forget_request()

        nc = await self._connect(f"streambench-consumer-{index}", reconnected=back)
        consumer = NatsConsumer(nc, stream, subscription, self._opts.fetch, track_ids,
                                self._partitions.get(topic, 1))
        made.append(consumer)
        try:
            await nc.jsm().consumer_info(stream, subscription, timeout=API_TIMEOUT_S)
        except (NatsError, TimeoutError) as exc:
            await nc.close()
            raise DriverError(f"consumer {index} of {subscription} on stream {stream}: "
                              f"{_failure(exc)}") from None
        await consumer.start()
        return consumer

    async def close(self) -> None:
        if self._admin is not None:
            await self._admin.close()
            self._admin = None


# ---- platform -------------------------------------------------------------------------------

LOCAL_ONLY = ("max_memory", "max_file", "version")


def _stack(target: Target) -> Stack:
    misplaced = sorted(target.explicit & set(LOCAL_ONLY))
    if target.runtime == "external":
        if misplaced:
            raise TargetError(f"target {target.spec!r}: {', '.join(misplaced)} configure a server "
                             "streambench starts; an @ADDRESS target uses an existing one")
        return NatsExternalStack(target, target.label)
    if target.runtime == "docker":
        if misplaced:
            raise TargetError(f"target {target.spec!r}: {', '.join(misplaced)} apply to the local "
                             "runtime; the container runs with the image's JetStream limits")
        return NatsDockerStack(target, target.label)
    if "monitor" in target.explicit:
        raise TargetError(f"target {target.spec!r}: monitor= names the monitoring endpoint of an "
                         "existing server (nats:monitor=URL@HOST:PORT); streambench finds its own")
    return NatsLocalStack(target, target.label)


def _driver(target: Target, desc: StackDescription) -> Driver:
    return NatsDriver(target, desc.endpoints["nats"], desc)


def _collectors(target: Target, desc: StackDescription, topic: str, partitions: int,
                subscriptions: list[str]) -> list[Collector]:
    found: list[Collector] = [NatsTelemetry(desc.endpoints["nats"], stream_name(topic), partitions,
                                            subscriptions, desc.endpoints.get(MONITOR_ENDPOINT))]
    found[:0] = resource_collectors(target, desc)
    return found


def _metrics_collector(target: Target, desc: StackDescription, topics: list[str]) -> Collector:
    return NatsMetrics(desc.endpoints.get(MONITOR_ENDPOINT), [stream_name(t) for t in topics])


def _parse_size(text: str) -> str:
    if not re.fullmatch(r"\d+[KMGT]?B?", text.upper()):
        raise ValueError("expected a size like 512M or 2G")
    return text.upper()


def _url(text: str) -> str:
    if not re.fullmatch(r"https?://[^/\s]+", text):
        raise ValueError("expected the monitoring endpoint's URL, e.g. http://127.0.0.1:8222")
    return text


_SET_BY_STREAMBENCH = {
    **{k: "the server listens on 127.0.0.1; use nats:port=N"
       for k in ("port", "listen", "host", "net", "client_advertise")},
    **{k: "streambench gives the server a monitoring port of its own on loopback"
       for k in ("http", "http_port", "https", "https_port", "monitor_port", "http_base_path")},
    **{k: "each server has a data directory of its own" for k in ("store_dir", "storedir")},
    **{k: "streambench keeps the server's log with the run" for k in ("log_file", "logfile")},
    **{k: "streambench runs the server" for k in ("pid_file", "pidfile", "ports_file_dir")},
    "jetstream": "give the block's settings one by one: broker.jetstream.NAME=VALUE",
}
_JS_SET_BY_STREAMBENCH = {
    **{k: "JetStream is on for every server streambench starts" for k in ("enable", "enabled")},
    **{k: "each server has a data directory of its own" for k in ("store", "store_dir", "storedir")},
    **{k: "use nats:max_memory=SIZE" for k in ("max_mem", "max_mem_store", "max_memory_store")},
    **{k: "use nats:max_file=SIZE" for k in ("max_file", "max_file_store")},
    **{k: "a secret is not taken on the command line"
       for k in ("ek", "key", "encryption_key", "prev_ek", "prev_key", "prev_encryption_key")},
}

def _check_broker(name: str, raw: str) -> tuple[str, Any]:
    """`broker.NAME` or `broker.jetstream.NAME`: one setting of the server's configuration file."""
    space, dot, rest = name.partition(".")
    if dot and space == "jetstream":
        if rest in _JS_SET_BY_STREAMBENCH:
            raise ValueError(f"jetstream.{rest} is set by streambench: {_JS_SET_BY_STREAMBENCH[rest]}")
        if rest == "limits":
            raise ValueError("jetstream.limits is a block of settings; streambench takes single "
                             "values")
        if rest not in NATS_JETSTREAM:
            raise ValueError(f"not a nats-server JetStream setting{hint(rest, NATS_JETSTREAM)}")
    elif dot:
        raise ValueError(f"not a nats-server setting: NAME or jetstream.NAME"
                         f"{hint(name, NATS_SERVER)}")
    elif name in _SET_BY_STREAMBENCH:
        raise ValueError(f"{name} is set by streambench: {_SET_BY_STREAMBENCH[name]}")
    elif name in NATS_SERVER_BLOCKS:
        raise ValueError(f"{name} is a block of settings; streambench takes single values")
    elif name not in NATS_SERVER:
        raise ValueError(f"not a nats-server setting{hint(name, NATS_SERVER)}")
    text = raw.strip()
    if not text or "\n" in text or "\r" in text:
        raise ValueError("expected one value")
    return name, text


def _parse_version(text: str) -> str:
    version = text.strip().lstrip("v")
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise ValueError("expected a nats-server release X.Y.Z, e.g. 2.10.27")
    if tuple(int(x) for x in version.split(".")[:2]) < (2, 9):
        raise ValueError("streambench needs nats-server 2.9 or newer")
    return version


_OBJECTS = "it holds a list or an object, which a TARGET does not give"
_STREAM_CHECK = kwargs_check(
    signature_defaults(StreamConfig), "a JetStream stream's configuration",
    controlled={"name": "one stream per topic, named by the run",
                "subjects": "a subject per partition of the topic",
                "storage": "use nats:storage=file|memory", "max_msgs": "use nats:max_msgs=N"},
    unsettable={k: _OBJECTS for k in ("placement", "mirror", "sources", "republish",
                                      "subject_transform", "metadata", "consumer_limits")},
    enums={"retention": RetentionPolicy, "compression": StoreCompression,
           "persist_mode": PersistMode})
_CONSUMER_CHECK = kwargs_check(
    signature_defaults(ConsumerConfig), "a JetStream consumer's configuration",
    controlled={"name": "one durable consumer per subscription",
                "durable_name": "one durable consumer per subscription",
                "ack_policy": "explicit: each message is acknowledged once counted",
                "deliver_policy": "all: a subscription reads the run's stream from its start",
                "opt_start_seq": "a subscription reads the run's stream from its start",
                "opt_start_time": "a subscription reads the run's stream from its start",
                "filter_subject": "a subscription reads every partition's subject",
                "headers_only": "streambench reads the payload",
                "ack_wait": "use nats:ack_wait=SECONDS",
                "max_ack_pending": "use nats:max_ack_pending=N"},
    unsettable={**{k: "streambench's consumers pull; it is a push consumer's setting"
                   for k in ("deliver_subject", "deliver_group", "flow_control", "idle_heartbeat",
                             "rate_limit_bps")},
                **{k: _OBJECTS for k in ("backoff", "filter_subjects", "metadata")}})

# a write is on disk before its acknowledgement (nats-server 2.10 or newer)
PROFILES = {"durable": {"broker.jetstream.sync_interval": "always"}}

OPTIONS: dict[str, Any] = {
    "storage": OptionSpec("JetStream storage of the streams", default="file",
                          choices=("file", "memory")),
    "max_msgs": OptionSpec("keep at most this many messages per stream, the oldest dropped "
                           "(0 = no limit)", default=0, parse=parse_non_negative),
    "fetch": OptionSpec("messages a consumer asks for per pull request", default=1000,
                        parse=parse_positive_int),
    "max_ack_pending": OptionSpec("messages a subscription's consumer may have delivered and "
                                  "not yet acknowledged", default=20000, parse=parse_positive_int),
    "ack_wait": OptionSpec("seconds before an unacknowledged message is delivered again",
                           default=30,
                           parse=whole_in(1, INT64_MAX // 10**9, "s",
                                          "the server takes it in nanoseconds, signed 64-bit")),
    "port": OptionSpec("loopback client port of the nats-server (default: a free one)",
                       default=0, parse=parse_port),
    "max_memory": OptionSpec("local: JetStream memory store limit of the server", default="1G",
                             parse=_parse_size),
    "max_file": OptionSpec("local: JetStream file store limit of the server", default="10G",
                           parse=_parse_size),
    "monitor": OptionSpec("@ADDRESS: the server's monitoring endpoint, for its counters (e.g. "
                          "http://HOST:8222; default: none)", default=None, parse=_url),
    "version": OptionSpec("local: the nats-server release to run, built once with Go from "
                          "the module proxy (default: the nats-server installed)", default=None,
                          parse=_parse_version),
    **runtime_options(("docker", "local")),
    "topic": namespace("topic.NAME=VALUE: a field of each stream's configuration (nats-py's "
                       "StreamConfig, e.g. topic.max_bytes=1073741824, topic.retention=interest, "
                       "topic.duplicate_window=0)", _STREAM_CHECK),
    "consumer": namespace("consumer.NAME=VALUE: a field of each subscription's durable pull "
                          "consumer (nats-py's ConsumerConfig, e.g. consumer.max_deliver=3)",
                          _CONSUMER_CHECK),
    "broker": namespace("broker.NAME=VALUE or broker.jetstream.NAME=VALUE: a setting of the "
                        "nats-server streambench starts (its configuration file; e.g. "
                        "broker.jetstream.sync_interval=always, nats-server 2.10 or newer)",
                        _check_broker, broker=True),
    "profile": profile_option(PROFILES),
    "config": config_option(),
}

def _drain_stall_hint(target: Target) -> str:
    wait = NatsClientOptions.of(target).ack_wait_s  # consumer.ack_wait= is refused
    return (f"JetStream delivers a message again only ack_wait ({wait} s) after it was "
            "delivered without an acknowledgement (to a consumer whose connection was lost, as "
            "when the server is killed or restarted): the drain waits that long for those "
            "(nats:ack_wait= sets it)")


PLATFORMS = [
    Platform(
        name="nats",
        summary="NATS JetStream (nats-py): a stream per topic, a subject per partition, a durable "
                "pull consumer per subscription",
        options=OPTIONS,
        runtimes=("docker", "local", "external"),
        broker_settings_runtimes=("docker", "local"),
        make_stack=_stack,
        docker_images=file_images("nats.yml"),
        keyed=True, settings_read_back=("broker", "topic", "consumer"),
        proxied_endpoints=("nats",),
        make_driver=_driver,
        drain_stall_hint=_drain_stall_hint,
        make_collectors=_collectors,
        broker_metrics=BrokerMetrics(METRICS_SOURCE, NATS_METRICS, _metrics_collector),
        prerequisites=(Prerequisite("nats-server", ("local",), find_server,
                                    lambda path: tool_version([path, "--version"], r"v(\d\S*)"),
                                    "Debian/Ubuntu: apt-get install nats-server"),),
    ),
]
