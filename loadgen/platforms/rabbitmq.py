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
last message they handed over every `store_interval_ms` and on close."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from rstream.client import Client, ClientPool
from rstream.exceptions import StreamAlreadyExists

from collectors.base import Collector
from collectors.rabbitmq import RabbitTelemetry
from collectors.resources import resource_collectors
from compose.net import connect_failure
from compose.rabbitmq import RabbitDockerStack, RabbitExternalStack, RabbitLocalStack, parse_address
from compose.stack import Stack, StackDescription
from loadgen.errors import DriverError, TargetError
from loadgen.omb_driver import RABBITMQ_FIELDS, driver_option, named_driver
from loadgen.platforms.base import Consumer, Driver, Producer
from loadgen.platforms.runtime import runtime_options
from loadgen.platforms.spec import OptionalClient, Platform, parse_non_negative, parse_port
from loadgen.security import REDIS_SECURITY_OPTIONS, read_secret
from loadgen.target import OptionSpec, Target

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
        client: rbs.StreamsClient = await client_module().connect(self._uri(), self._where())
        return client

    def _streams(self, topic: str) -> list[str]:
        return stream_names(topic, self._partitions.get(topic, 1))

    def topic_layout(self, name: str, partitions: int) -> dict[str, Any]:
        return {"partitions": partitions, "streams": stream_names(name, partitions)}

    async def producer(self, topic: str, index: int) -> Producer:
        client = await self._client()
        made: Producer = await client_module().producer(client, topic, self._streams(topic), index,
                                                        self._where())
        return made

    async def consumer(self, topic: str, subscription: str, index: int, track_ids: bool) -> Consumer:
        streams = self._streams(topic)
        mine = {p: streams[p] for p in assigned(len(streams), self._consumers, index)}
        client = await self._client()
        made: Consumer = client_module().RabbitConsumer(client, mine, subscription, track_ids,
                                                        self._opts.store_interval_ms / 1000.0)
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
            "driver": driver_option(named_driver(RABBITMQ_FIELDS)),
        },
        runtimes=("docker", "local", "external"),
        make_stack=_stack,
        make_driver=_driver,
        make_collectors=_collectors,
        address_example=f"HOST:PORT (the stream port, e.g. 127.0.0.1:{5552})",
        optional_client=CLIENT,
    ),
]
