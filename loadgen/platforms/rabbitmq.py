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
deduplicated by the server.

rbfly is GPL-3.0-or-later, rstream MIT. streambench is Apache-2.0, so rbfly is opt-in: the
`rabbitmq` extra installs it (pip install 'streambench[rabbitmq]'), and everything that uses it
(the client, the producer, the consumer) is in loadgen.platforms.rabbitmq_client, which
client_module() imports when a RabbitMQ run starts: loading this module (the platform registry
does for every command) never imports rbfly. Without rbfly a RabbitMQ run ends before anything
starts, with one line naming the install command; `streambench platforms` says it is missing.

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
last message they handed over every `store_interval_ms` and on close.

Settings: `broker.KEY=VALUE` is a rabbitmq.conf key of a node streambench starts, checked against
RabbitMQ 3.10.8's schema (loadgen.platforms.setting_names.rabbitmq); `topic.NAME=VALUE` an argument
each stream is created with; `producer.NAME=VALUE` and `consumer.NAME=VALUE` keyword arguments of
rbfly's StreamsClient.publisher() and subscribe(), the few of them a TARGET can give (the
publisher's class, the subscription's timeout; the rest streambench sets itself or take Python
objects). There is no durable profile: RabbitMQ streams do not fsync a write (NO_DURABLE)."""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import enum
import importlib
import json
import logging
import math
import re
import urllib.parse
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from rstream.client import Client, ClientPool
from rstream.exceptions import StreamAlreadyExists

from collectors.rabbitmq import METRICS as RABBIT_METRICS
from collectors.rabbitmq import METRICS_SOURCE, RabbitMetrics, RabbitTelemetry, management_get
from collectors.resources import resource_collectors
from compose.docker import file_images
from compose.net import connect_failure
from compose.rabbitmq import (
    RabbitDockerStack,
    RabbitExternalStack,
    RabbitLocalStack,
    parse_address,
    read_node_settings,
)
from compose.rabbitmq import script as rabbitmq_script
from loadgen.core.brokermetrics import BrokerMetrics
from loadgen.core.collector import Collector
from loadgen.core.driver import Consumer, Driver, Producer
from loadgen.core.errors import DriverError, StackError, TargetError
from loadgen.core.platform import OptionalClient, Platform, Prerequisite, parse_non_negative, parse_port
from loadgen.core.security import REDIS_SECURITY_OPTIONS, read_secret
from loadgen.core.settings import SettingsRecord, config_option, kwargs_check, namespace, settings_of
from loadgen.core.stack import Stack, StackDescription
from loadgen.core.target import OptionSpec, Target, join_host_port, whole_in
from loadgen.omb_driver import RABBITMQ_FIELDS, driver_option, named_driver
from loadgen.platforms.runtime import runtime_options
from loadgen.platforms.setting_names.rabbitmq import RABBITMQ_CONF, RABBITMQ_OTHER_PLUGINS

if TYPE_CHECKING:
    import rbfly.streams as rbs

CONNECT_TIMEOUT_S = 10.0
RECONNECT_PAUSE_S = 0.5
# rbfly (GPL-3.0-or-later) is not a dependency of a plain install: the `rabbitmq` extra adds it
CLIENT = OptionalClient(module="rbfly", what="the RabbitMQ Streams client rbfly (GPL-3.0-or-later)",
                        extra="rabbitmq")
CLIENT_MODULE = "loadgen.platforms.rabbitmq_client"

# both clients log every connection they lose at warning level and above; a benchmark breaks
# connections on purpose (faults), and the run records what matters as events
for _name in ("rbfly", "rstream"):
    logging.getLogger(_name).setLevel(logging.CRITICAL)


def client_module() -> ModuleType:
    """loadgen.platforms.rabbitmq_client (rbfly's producer and consumer), imported on first use;
    without rbfly one line says how to install it."""
    try:
        return importlib.import_module(CLIENT_MODULE)
    except ImportError as exc:
        raise TargetError(CLIENT.unavailable("rabbitmq", exc)) from None


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


# ---- settings -------------------------------------------------------------------------------

def _close(name: str, known: list[str]) -> str:
    found = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return f" (did you mean {found[0]}?)" if found else ""


def _schema_key(name: str, keys: list[str]) -> str | None:
    """The schema key `name` is: itself, or a key with `$var` segments (listeners.tcp.$name)
    whose other segments it matches."""
    if name in keys:
        return name
    parts = name.split(".")
    for key in keys:
        if "$" not in key:
            continue
        pattern = key.split(".")
        if len(pattern) == len(parts) and all(p.startswith("$") or p == q
                                              for p, q in zip(pattern, parts, strict=True)):
            return key
    return None


_KNOWN_KEYS = sorted(RABBITMQ_CONF)
_LISTENERS = "the node's listeners are streambench's, on loopback ports it picks (rabbitmq:port=N "
_LISTENERS += "for the stream port)"
_BROKER_SET_BY_STREAMBENCH_PREFIXES = {
    "listeners.": _LISTENERS, "stream.listeners.": _LISTENERS,
    "management.tcp.": "the management API listens on a loopback port streambench picks",
    "management.ssl.": "the management API listens on a loopback port streambench picks",
    "management.listener.": "the management API listens on a loopback port streambench picks",
    "distribution.listener.": "Erlang distribution is on a loopback port streambench picks",
    "loopback_users": "streambench's clients sign in as guest, which RabbitMQ lets in on "
                      "loopback only",
}
_BROKER_SET_BY_STREAMBENCH = {
    **{k: "clients are told 127.0.0.1 and the node's stream port"
       for k in ("stream.advertised_host", "stream.advertised_port", "stream.advertised_tls_host",
                 "stream.advertised_tls_port")},
    **{k: "each node has a data and log directory of its own" for k in ("raft.data_dir", "log.dir")},
    **{k: "streambench keeps the node's log (its console output) with the run"
       for k in ("log.file", "log.console")},
    **{k: "streambench's clients sign in as guest on the vhost /"
       for k in ("default_user", "default_pass", "default_vhost")},
}


def check_broker(name: str, raw: str) -> tuple[str, str]:
    """`broker.KEY`: a rabbitmq.conf key of RabbitMQ 3.10's schema that a node streambench
    starts loads (loadgen.platforms.setting_names.rabbitmq), not one streambench sets itself."""
    if name in _BROKER_SET_BY_STREAMBENCH:
        raise ValueError(f"{name} is set by streambench: {_BROKER_SET_BY_STREAMBENCH[name]}")
    for prefix, why in _BROKER_SET_BY_STREAMBENCH_PREFIXES.items():
        if name.startswith(prefix) or name == prefix.rstrip("."):
            raise ValueError(f"{name} is set by streambench: {why}")
    if _schema_key(name, _KNOWN_KEYS) is None:
        for plugin, keys in RABBITMQ_OTHER_PLUGINS.items():
            if _schema_key(name, sorted(keys)) is not None:
                raise ValueError(f"{name} is a key of the {plugin} plugin, which the node "
                                 "streambench starts does not enable (only rabbitmq_stream and "
                                 "rabbitmq_stream_management)")
        raise ValueError(f"not a rabbitmq.conf key of RabbitMQ 3.10{_close(name, _KNOWN_KEYS)}")
    value = raw.strip()
    if not value or "\n" in value or "\r" in value:
        raise ValueError("expected one value on one line")
    return name, value


# a stream's arguments at creation (RabbitMQ 3.10's stream protocol takes these, and stores
# them as the queue's x- arguments): name -> whether the value is a whole number
STREAM_ARGUMENTS = {"max-length-bytes": True, "max-age": False, "stream-max-segment-size-bytes": True,
                    "initial-cluster-size": True, "queue-leader-locator": False}
# the plain options that stand for one of them
PLAIN_ARGUMENTS = {"max_length_bytes": "max-length-bytes", "segment_bytes": "stream-max-segment-size-bytes"}


def check_topic(name: str, raw: str) -> tuple[str, Any]:
    """`topic.NAME`: a stream argument, with or without its x- (recorded with it, as the
    server lists a stream's arguments)."""
    bare = name.removeprefix("x-")
    if bare not in STREAM_ARGUMENTS:
        known = [f"x-{k}" for k in STREAM_ARGUMENTS]
        raise ValueError(f"not a stream argument RabbitMQ takes at creation"
                         f"{_close(f'x-{bare}', known)}; known: {', '.join(known)}")
    value = raw.strip()
    if STREAM_ARGUMENTS[bare]:
        if not value.isdigit() or int(value) < 1:
            raise ValueError("expected a whole number of at least 1")
        return f"x-{bare}", int(value)
    if bare == "max-age" and not re.fullmatch(r"\d+[YMDhms]", value):
        raise ValueError("expected a whole number and a unit (Y, M, D, h, m or s), e.g. 7D")
    if not value:
        raise ValueError("expected a value")
    return f"x-{bare}", value


class PublisherClass(enum.Enum):
    """The rbfly publisher classes a producer can use (`producer.cls=NAME`), by rbfly's names."""

    # streambench's: a batch is queued whole and flushed, one confirm awaited per batch
    PublisherBatchFast = "PublisherBatchFast"
    # each message published alone, its confirm awaited before the next is sent
    Publisher = "Publisher"


# the parameters of rbfly 0.10's StreamsClient.publisher() and StreamsClient.subscribe() with
# their defaults (subscribe's timeout as a float: it is seconds), written out so that settings
# are checked without rbfly installed; a test compares them with rbfly's own signatures
PUBLISHER_PARAMETERS: dict[str, Any] = {"stream": None, "name": None, "filter_extract": None,
                                        "cls": PublisherClass.Publisher}
SUBSCRIBE_PARAMETERS: dict[str, Any] = {"stream": None, "offset": None, "filter": None,
                                        "timeout": 0.0, "amqp": True}
_CLIENT_SET_BY_STREAMBENCH = {
    "stream": "a producer publishes to every partition stream, a consumer reads those dealt to it",
    "name": "one per producer and stream (the server deduplicates by it after a reconnection)",
    "offset": "a subscription goes on after its stored offset (kept under the subscription's "
              "name), else from the stream's first message",
    "amqp": "streambench reads each message's send time from its AMQP application properties",
}
_FILTERING = "stream filtering, which RabbitMQ has from 3.13 on"
_CLIENT_UNSETTABLE = {
    "filter_extract": f"it takes a Python function ({_FILTERING})",
    "filter": f"it takes a MessageFilter object ({_FILTERING})",
}
# rbfly's other publisher classes, and why a producer does not use them
_OTHER_PUBLISHERS = {
    "PublisherBatchLimit": "its batch() waits for room below a max_len, but streambench hands "
                           "each batch over whole before it flushes (use PublisherBatchFast)",
    "PublisherBatchMem": "rbfly's old name of PublisherBatchLimit, which streambench does not use",
    "PublisherBatch": "rbfly's old name of PublisherBatchFast (use that)",
    "PublisherBin": "it sends bodies without AMQP properties, and a message carries its send "
                    "time as one",
    "PublisherBinBatch": "it sends bodies without AMQP properties, and a message carries its "
                         "send time as one",
}
_check_publisher = kwargs_check(PUBLISHER_PARAMETERS, "rbfly's publisher",
                                controlled=_CLIENT_SET_BY_STREAMBENCH,
                                unsettable=_CLIENT_UNSETTABLE)
_check_subscribe = kwargs_check(SUBSCRIBE_PARAMETERS, "rbfly's subscribe",
                                controlled=_CLIENT_SET_BY_STREAMBENCH,
                                unsettable=_CLIENT_UNSETTABLE)


def check_producer(name: str, raw: str) -> tuple[str, Any]:
    """`producer.NAME`: a keyword argument of rbfly's StreamsClient.publisher() (the class)."""
    if name == "cls" and raw.strip() in _OTHER_PUBLISHERS:
        raise ValueError(f"{raw.strip()}: {_OTHER_PUBLISHERS[raw.strip()]}")
    return _check_publisher(name, raw)


def check_consumer(name: str, raw: str) -> tuple[str, Any]:
    """`consumer.NAME`: a keyword argument of rbfly's StreamsClient.subscribe() (the timeout)."""
    keyword, value = _check_subscribe(name, raw)
    if keyword == "timeout" and not (math.isfinite(value) and value >= 0):
        raise ValueError("expected seconds: 0 (never) or more")
    return keyword, value


NO_DURABLE = ("RabbitMQ streams do not fsync a write: osiris, the stream log of RabbitMQ 3.10, "
              "writes each chunk to its segment file and leaves flushing to the operating system; "
              "a stream is made durable by replication over nodes (x-initial-cluster-size), so "
              "there is no durable profile")


def _no_profile(name: str) -> str:
    if name == "durable":
        raise ValueError(NO_DURABLE)
    raise ValueError("RabbitMQ has no profiles (durable: RabbitMQ streams do not fsync a write)")


@dataclass(frozen=True)
class RabbitOptions:
    """The client and stream settings of a RabbitMQ target, typed once from its options."""

    user: str
    password: str
    store_interval_ms: int
    max_length_bytes: int  # 0: no limit
    segment_bytes: int  # 0: the server's default
    # `topic.` settings: stream arguments, (x-NAME, value)
    topic: tuple[tuple[str, Any], ...] = ()
    # `producer.` and `consumer.` settings: rbfly's publisher() and subscribe() keyword arguments
    producer: tuple[tuple[str, Any], ...] = ()
    consumer: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, target: Target) -> RabbitOptions:
        check_options(target)
        o = target.options
        secret = read_secret(target, "password")
        topic = settings_of(target, "topic")
        both = [f"{option} and topic.x-{argument}" for option, argument in PLAIN_ARGUMENTS.items()
                if option in target.explicit and f"x-{argument}" in topic]
        if both:
            raise TargetError(f"target {target.spec!r}: {both[0]} set the same stream argument; "
                              "give one of them")
        return cls(str(o.get("user") or "guest"), secret.reveal() if secret else "guest",
                   int(o.get("store_interval_ms") or 0), int(o.get("max_length_bytes") or 0),
                   int(o.get("segment_bytes") or 0), tuple(topic.items()),
                   tuple(settings_of(target, "producer").items()),
                   tuple(settings_of(target, "consumer").items()))

    def publisher_class(self) -> PublisherClass:
        found: PublisherClass = dict(self.producer).get("cls", PublisherClass.PublisherBatchFast)
        return found

    def subscribe_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of each subscribe() besides streambench's own."""
        return dict(self.consumer)

    def stream_arguments(self) -> dict[str, Any]:
        """The arguments each stream is created with, as the stream protocol names them."""
        args: dict[str, Any] = {}
        if self.max_length_bytes:
            args["max-length-bytes"] = self.max_length_bytes
        if self.segment_bytes:
            args["stream-max-segment-size-bytes"] = self.segment_bytes
        for name, value in self.topic:
            args[name.removeprefix("x-")] = value
        return args


class RabbitStreamsDriver(Driver):
    def __init__(self, host: str, port: int, options: RabbitOptions, target: Target | None = None,
                 desc: StackDescription | None = None) -> None:
        self._host = host
        self._port = port
        self._opts = options
        self._target = target
        self._desc = desc
        self._pool: ClientPool | None = None
        self._admin: Client | None = None
        self._version = ""
        self._partitions: dict[str, int] = {}
        self._consumers = 1

    def _where(self) -> str:
        return join_host_port(self._host, self._port)

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

    async def settings_in_force(self) -> dict[str, dict[str, Any]]:
        """The node's rabbitmq.conf settings as it holds them (a node streambench started: its
        application parameters, through rabbitmqctl) and the arguments of the run's first
        stream as the management API lists them; what neither tells, as requested."""
        if self._target is None:
            return {}
        record = SettingsRecord(self._target)
        desc = self._desc
        written = dict(desc.broker_settings) if desc is not None else {}
        in_container = desc is not None and desc.runtime == "docker" and bool(desc.container_ids)
        if desc is not None and (in_container or (desc.runtime == "local" and desc.config.get("node"))):
            # the platform's defaults of keys that set a parameter of their own (keys sharing one,
            # e.g. vm_memory_high_watermark.relative and .absolute, only when set)
            targets = list(RABBITMQ_CONF.values())
            wanted = {k: t for k, t in RABBITMQ_CONF.items()
                      if "$" not in k and (targets.count(t) == 1 or k in written)}
            try:
                values = await asyncio.to_thread(
                    read_node_settings, dict(desc.config), wanted, self._target.label,
                    desc.container_ids[0] if in_container else "")
            except StackError:
                values = {}
            record.add("broker", dict(sorted(values.items())), read_back=True, streambench=written)
        rest = {k: v for k, v in written.items() if f"broker.{k}" not in record.entries}
        record.add("broker", rest, read_back=False, streambench=written)
        # the clients' keyword arguments that are not per client (stream, name, offset)
        record.add("producer", {"cls": self._opts.publisher_class()}, read_back=False,
                   streambench=["cls"])
        record.add("consumer", {"amqp": True, "timeout": 0, **self._opts.subscribe_kwargs()},
                   read_back=False, streambench=["amqp"])
        plain = [f"x-{a}" for option, a in PLAIN_ARGUMENTS.items() if option in self._target.explicit]
        arguments = await self._stream_arguments()
        if arguments is not None:
            record.add("topic", arguments, read_back=True, streambench=["x-queue-type", *plain],
                       user=plain)
        else:
            record.add("topic", {f"x-{k}": v for k, v in self._opts.stream_arguments().items()},
                       read_back=False, streambench=plain, user=plain)
        record.add_requested()
        return record.result()

    async def _stream_arguments(self) -> dict[str, Any] | None:
        """The arguments of the run's first stream, as the management API lists them; None
        when there is no such API or it does not answer."""
        base = self._desc.endpoints.get("management") if self._desc is not None else None
        if not base or not self._partitions:
            return None
        stream = stream_names(next(iter(self._partitions)), 1)[0]
        path = f"/api/queues/%2F/{urllib.parse.quote(stream, safe='')}"
        try:
            body = await asyncio.to_thread(management_get, base, path, self._opts.user,
                                           self._opts.password, 5.0)
            arguments = json.loads(body).get("arguments")
        except (OSError, ValueError, AttributeError):
            return None
        return dict(sorted(arguments.items())) if isinstance(arguments, dict) else None

    def _uri(self) -> str:
        from urllib.parse import quote

        host = f"[{self._host}]" if ":" in self._host else self._host
        return (f"rabbitmq-stream://{quote(self._opts.user, safe='')}:"
                f"{quote(self._opts.password, safe='')}@{host}:{self._port}/")

    async def _client(self) -> rbs.StreamsClient:
        client: rbs.StreamsClient = await client_module().connect(self._uri(), self._where())
        return client

    def _streams(self, topic: str) -> list[str]:
        return stream_names(topic, self._partitions.get(topic, 1))

    def topic_layout(self, name: str, partitions: int) -> dict[str, Any]:
        return {"partitions": partitions, "streams": stream_names(name, partitions)}

    async def producer(self, topic: str, index: int) -> Producer:
        client = await self._client()
        made: Producer = await client_module().producer(client, topic, self._streams(topic), index,
                                                        self._where(),
                                                        self._opts.publisher_class().value)
        return made

    async def consumer(self, topic: str, subscription: str, index: int, track_ids: bool) -> Consumer:
        streams = self._streams(topic)
        mine = {p: streams[p] for p in assigned(len(streams), self._consumers, index)}
        client = await self._client()
        made: Consumer = client_module().RabbitConsumer(client, mine, subscription, track_ids,
                                                        self._opts.store_interval_ms / 1000.0,
                                                        self._opts.subscribe_kwargs())
        return made

    async def close(self) -> None:
        if self._pool is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._pool.close(), 5.0)
            self._pool = self._admin = None


def _stack(target: Target) -> Stack:
    # its checks, before anything starts: the options, and a client that imports
    RabbitOptions.of(target)
    client_module()
    if target.runtime == "external":
        return RabbitExternalStack(target, target.label)
    if target.runtime == "docker":
        return RabbitDockerStack(target, target.label)
    return RabbitLocalStack(target, target.label)


def _driver(target: Target, desc: StackDescription) -> Driver:
    host, port = parse_address(desc.endpoints["stream"])
    return RabbitStreamsDriver(host, port, RabbitOptions.of(target), target, desc)


def _collectors(target: Target, desc: StackDescription, topic: str, partitions: int,
                subscriptions: list[str]) -> list[Collector]:
    host, port = parse_address(desc.endpoints["stream"])
    opts = RabbitOptions.of(target)
    found: list[Collector] = [RabbitTelemetry(host, port, opts.user, opts.password,
                                              stream_names(topic, partitions), subscriptions,
                                              desc.endpoints.get("management"),
                                              opts.store_interval_ms / 1000.0)]
    found[:0] = resource_collectors(target, desc)
    return found


def _metrics_collector(target: Target, desc: StackDescription, _topics: list[str]) -> Collector:
    opts = RabbitOptions.of(target)
    return RabbitMetrics(desc.endpoints.get("management"), opts.user, opts.password)


PLATFORMS = [
    Platform(
        name="rabbitmq",
        summary="RabbitMQ Streams (stream protocol, publish confirms, stored consumer offsets); "
                "a partition is a stream",
        options={
            "port": OptionSpec("loopback stream-protocol port of the node (default: a free one)",
                               default=0, parse=parse_port),
            "store_interval_ms": OptionSpec("how often consumers store their offset (ms; always "
                                            "on close)", default=1000,
                                            parse=whole_in(0, 86_400_000, "ms")),
            "max_length_bytes": OptionSpec("retention: keep about this many bytes per stream "
                                           "(0 = no limit; the stream argument "
                                           "x-max-length-bytes)", default=0,
                                           parse=parse_non_negative),
            "segment_bytes": OptionSpec("size of a stream's segment files (0 = the server's "
                                        "default, 500 MB; x-stream-max-segment-size-bytes)",
                                        default=0, parse=parse_non_negative),
            "user": OptionSpec("existing server: user name (default: guest, which RabbitMQ lets "
                               "in on loopback only)", default=None),
            **{k: REDIS_SECURITY_OPTIONS[k] for k in ("password_file", "password_env", "password")},
            "management_port": OptionSpec("@ADDRESS: port of the management HTTP API on the same "
                                          "host, for broker counters (0 = none)", default=15672,
                                          parse=whole_in(0, 65_535)),
            **runtime_options(("docker", "local")),
            "broker": namespace("broker.KEY=VALUE: a rabbitmq.conf key of the local node "
                                "(e.g. broker.stream.frame_max=2097152)", check_broker, broker=True),
            "topic": namespace("topic.NAME=VALUE: an argument each stream is created with: "
                               + ", ".join(f"x-{k}" for k in STREAM_ARGUMENTS)
                               + " (e.g. topic.x-max-age=1h)", check_topic),
            "producer": namespace("producer.NAME=VALUE: a keyword argument of rbfly's publisher: "
                                  "producer.cls=PublisherBatchFast (streambench's: a batch sent "
                                  "whole, one confirm awaited per batch) or producer.cls=Publisher "
                                  "(each message sent alone, its confirm awaited before the next)",
                                  check_producer),
            "consumer": namespace("consumer.NAME=VALUE: a keyword argument of rbfly's subscribe: "
                                  "consumer.timeout=SECONDS (a subscription that receives nothing "
                                  "for that long fails, counted as a receive error, and subscribes "
                                  "again where it left off; 0 = never, rbfly's default)",
                                  check_consumer),
            "profile": OptionSpec("named set of settings: none for RabbitMQ (durable: RabbitMQ "
                                  "streams do not fsync a write)", default=None, parse=_no_profile),
            "config": config_option(),
            "driver": driver_option(named_driver(RABBITMQ_FIELDS)),
        },
        runtimes=("docker", "local", "external"),
        broker_settings_runtimes=("docker", "local"),
        make_stack=_stack,
        docker_images=file_images("rabbitmq.yml"),
        lag_per_partition=True, keyed=True, settings_read_back=("broker", "topic"),
        # the stream port, which the node advertises as the proxy's (stream.advertised_*)
        proxied_endpoints=("stream",), advertised_endpoints=("stream",), proxied_runtimes=("local",),
        make_driver=_driver,
        make_collectors=_collectors,
        broker_metrics=BrokerMetrics(METRICS_SOURCE, RABBIT_METRICS, _metrics_collector),
        address_example=f"HOST:PORT (the stream port, e.g. 127.0.0.1:{5552})",
        optional_client=CLIENT,
        prerequisites=(Prerequisite("rabbitmq-server", ("local",),
                                    lambda: rabbitmq_script("rabbitmq-server"),
                                    install="Debian/Ubuntu: apt-get install rabbitmq-server"),),
    ),
]
