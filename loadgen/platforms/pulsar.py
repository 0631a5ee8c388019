"""Apache Pulsar driver (pulsar-client): a topic is a partitioned topic created through the
admin REST API, a subscription is a Pulsar subscription (shared by default, so that its
consumers split the messages like a consumer group), each message carries its intended send
time in ns in the property `t` (on non-persistent topics also a per-producer number, `n`:
there a batch's messages share one message id).

Connections, producers, consumers and closing use `pulsar.asyncio`. The hot path uses the
callback methods of the objects underneath it, for what the asyncio API lacks:
- sending: `Producer.send` resolves one future per message through `call_soon_threadsafe`, a
  wake-up of the event loop per message, and every callback makes the client's I/O thread wait
  for the GIL. The driver keeps one producer per partition and routes itself (round robin that
  stays on a partition for a batch window, like the client's batching-aware router; by key hash
  when there is a key), so that acknowledgements arrive in send order per producer: only the
  last message of a batch per partition carries a callback, and the loop wakes once per batch
  (100 B messages, 2 cores: about 60,000 msg/s, against 14,000 with a callback per message and
  9,000 with the asyncio API). A failed send fails every message queued behind it, so the last
  message's result stands for the batch.
- receiving: the blocking receives (`receive(timeout)`, `batch_receive`) would stall the loop
  or, with a batch policy, hold messages until its timeout, and cancelling a pending
  `Consumer.receive` loses the message the client delivers to it later (unacknowledged until
  redelivery). The consumer keeps one `receive_async` outstanding while it waits; once a
  message has come, it asks again, and when that completes inline (more are queued) it takes
  the rest of the queue with `receive(0)`, which returns at once (a third less CPU per
  message than a callback each: 3.3 against 5.0 µs on 2 cores). It acknowledges without a
  callback.
`Producer.flush_async` is not used: it holds the GIL while taking the producer's lock, which
deadlocks against an I/O thread that holds that lock and waits for the GIL."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import sys
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import _pulsar
import pulsar
import pulsar.asyncio as pulsar_asyncio

from collectors.pulsar import METRICS as PULSAR_METRICS
from collectors.pulsar import METRICS_SOURCE, PulsarMetrics, PulsarTelemetry
from collectors.resources import resource_collectors
from compose.docker import file_images
from compose.java import parse_heap
from compose.net import probe_tcp
from compose.pulsar import (
    ADMIN_ENDPOINT,
    DEFAULT_SERVICE_PORT,
    AdminError,
    PulsarAdmin,
    PulsarDockerStack,
    PulsarExternalStack,
    PulsarLocalStack,
    PulsarTargetConfig,
    host_port,
    parse_namespace,
    topic_name,
    topic_path,
    unreachable,
)
from loadgen.core.brokermetrics import BrokerMetrics
from loadgen.core.collector import Collector
from loadgen.core.driver import (
    Acknowledged,
    Consumer,
    Driver,
    OutMessage,
    Producer,
    ReceivedBatch,
)
from loadgen.core.errors import DriverError, TargetError
from loadgen.core.platform import Platform, parse_port
from loadgen.core.security import PLAINTEXT, PULSAR_SECURITY_OPTIONS, ClientSecurity
from loadgen.core.settings import (
    SettingsRecord,
    config_option,
    kwargs_check,
    names_check,
    namespace,
    profile_option,
    signature_defaults,
)
from loadgen.core.stack import Stack, StackDescription
from loadgen.core.target import INT32_MAX, OptionSpec, Target, parse_bool, whole_in
from loadgen.omb_driver import driver_option, pulsar_driver
from loadgen.platforms.runtime import runtime_options
from loadgen.platforms.setting_names.pulsar import PULSAR_BROKER
from loadgen.platforms.tools import JAVA, MAVEN

SEND_TIME = "t"
# non-persistent topics give every message of a batch the same ledger and entry id: there the
# producer numbers its messages, so that delivery tracking can tell them apart
SEQUENCE = "n"
RECEIVE_WAIT_S = 0.1
READ_LIMIT = 1000
# the consumers' receiver queue, in messages: the client's own default (1,000) for messages of
# RECEIVER_QUEUE_BYTES / 1,000 and more; for smaller ones up to RECEIVER_QUEUE_MAX, as many as
# fit in RECEIVER_QUEUE_BYTES. With 1,000 queued 1 KiB messages a consumer at maximum rate waits
# on its flow permits and reads 15,500 msg/s against 39,600 produced; with 10,000 it keeps up.
RECEIVER_QUEUE = 1000
RECEIVER_QUEUE_MAX = 10_000
RECEIVER_QUEUE_BYTES = 32 * 1024 * 1024
# the client's memory limit for pending messages is 64 MB (not configurable from Python) and a
# send beyond it fails at once: keep max_in_flight batches of at most this many bytes pending
CHUNK_BYTES = 6 * 1024 * 1024
MAX_IN_FLIGHT = 8
MAX_PENDING = 50_000
UNBATCHED_SWITCH_INTERVAL_S = 0.0002

SUBSCRIPTION_TYPES = {
    "shared": pulsar.ConsumerType.Shared,
    "key_shared": pulsar.ConsumerType.KeyShared,
    "failover": pulsar.ConsumerType.Failover,
    "exclusive": pulsar.ConsumerType.Exclusive,
}
_OK = _pulsar.Result.Ok


def _client_logger() -> Any:
    # The client logs INFO lines to stdout by default, which garbles the dashboard; a Python
    # logger would make the client's threads take the GIL under its own locks. Errors reach
    # streambench as results and exceptions.
    return pulsar.FileLogger(pulsar.LoggerLevel.Error, os.devnull)


def _wake(loop: asyncio.AbstractEventLoop, callback: Any, *args: Any) -> None:
    """From a client thread: run callback on the loop (a closed loop means the run is over;
    an exception escaping into the client's thread would abort the process)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _failure(results: list[Any]) -> DriverError | None:
    """What the client's results for a chunk's tracked messages say went wrong, if anything."""
    failed = [r for r in results if r != _OK]
    return DriverError(f"messages not acknowledged: {failed[0].name}") if failed else None


class PulsarProducer(Producer):
    """One streambench producer: a Pulsar producer per partition of the topic. Batches are
    handed to the client's callback API directly (submit), without a task each."""

    max_in_flight = MAX_IN_FLIGHT
    submits = True

    def __init__(self, handles: list[pulsar_asyncio.Producer], numbered: bool, run_length: int,
                 window_ms: int) -> None:
        self._handles = handles
        self._raws: list[_pulsar.Producer] = [h._producer for h in handles]
        self._tasks: set[asyncio.Task[None]] = set()  # batches of several chunks
        self._numbered = numbered
        self._sent = 0
        # round robin: stay on a partition for up to run_length messages within one window
        self._run_length = run_length
        self._window_ns = window_ms * 1_000_000
        self._partition = len(handles) - 1
        self._in_run = run_length
        self._run_started = 0

    def _route(self, chunk: Sequence[OutMessage]) -> list[int]:
        n = len(self._raws)
        if n == 1:
            return [0] * len(chunk)
        now = time.monotonic_ns()
        if now - self._run_started >= self._window_ns:
            self._in_run = self._run_length  # the window closed: move on with the next message
        parts = []
        for m in chunk:
            if m.key is not None:
                parts.append(zlib.crc32(m.key) % n)
                continue
            if self._in_run >= self._run_length:
                self._partition = (self._partition + 1) % n
                self._in_run = 0
                self._run_started = now
            self._in_run += 1
            parts.append(self._partition)
        return parts

    async def send_batch(self, batch: Sequence[OutMessage]) -> None:
        start = 0
        while start < len(batch):
            end, size = start, 0
            while end < len(batch) and (end == start or size + len(batch[end].payload) <= CHUNK_BYTES):
                size += len(batch[end].payload)
                end += 1
            await self._send_chunk(batch[start:end])
            start = end

    def submit(self, batch: Sequence[OutMessage], done: Acknowledged) -> None:
        if len(batch) > 1 and sum(len(m.payload) for m in batch) > CHUNK_BYTES:
            # several chunks, handed over one after another: a task of their own
            task = asyncio.get_running_loop().create_task(self._send_reporting(batch, done))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return
        self._start_chunk(batch, lambda results: done(_failure(results)))

    async def _send_reporting(self, batch: Sequence[OutMessage], done: Acknowledged) -> None:
        error: BaseException | None = None
        try:
            await self.send_batch(batch)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = exc
        done(error)

    def _start_chunk(self, chunk: Sequence[OutMessage], finished: Callable[[list[Any]], None]) -> None:
        """Hand one chunk to the client: `finished(results)` runs once on the event loop when
        every partition's last message of it is answered. Raises DriverError when the client
        refuses a message outright (and `finished` is then never called)."""
        loop = asyncio.get_running_loop()
        results: list[Any] = []
        parts = self._route(chunk)
        last = {p: i for i, p in enumerate(parts)}
        tracked = set(last.values())
        need = len(tracked)
        over = [False]  # finished() called, or the chunk refused

        def complete() -> None:
            if not over[0]:
                over[0] = True
                finished(results)

        def acked(result: Any, _message_id: Any) -> None:
            # on the client's I/O thread (or inline, for a send that fails at once); append is
            # atomic, and the loop is woken by whichever thread sees the count complete
            results.append(result)
            if len(results) >= need:
                _wake(loop, complete)

        raws = self._raws
        numbered = self._numbered
        try:
            for i, m in enumerate(chunk):
                builder = _pulsar.MessageBuilder()
                builder.content(m.payload)
                builder.property(SEND_TIME, str(m.intended_ns))
                if numbered:
                    self._sent += 1
                    builder.property(SEQUENCE, str(self._sent))
                if m.key is not None:
                    builder.partition_key(m.key.decode("latin-1"))
                raws[parts[i]].send_async(builder.build(), acked if i in tracked else None)
        except Exception as exc:  # the client refused a message outright
            over[0] = True
            raise DriverError(f"send failed: {exc}") from None

    async def _send_chunk(self, chunk: Sequence[OutMessage]) -> None:
        done: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()

        def finished(results: list[Any]) -> None:
            if not done.done():
                done.set_result(results)

        self._start_chunk(chunk, finished)
        error = _failure(await done)
        if error is not None:
            raise error

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for handle in self._handles:
            await handle.close()


class PulsarConsumer(Consumer):
    def __init__(self, handle: pulsar_asyncio.Consumer, track_ids: bool, numbered: bool,
                 held: tuple[int, ...] | None = None, shared: bool = False) -> None:
        self._held = held
        self.shared = shared
        self._handle = handle
        self._raw: _pulsar.Consumer = handle._consumer
        self._track = track_ids
        self._numbered = numbered
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self._inbox: deque[tuple[Any, Any]] = deque()
        self._arrived = asyncio.Event()
        self._pending = False  # a receive_async whose callback has not run yet
        self._error: Any = None

    def _on_message(self, result: Any, message: Any) -> None:
        self._inbox.append((result, message))
        self._pending = False
        if threading.get_ident() != self._thread:
            _wake(self._loop, self._arrived.set)

    def _ask(self) -> None:
        if not self._pending:
            self._pending = True
            # completes inline when a message is already queued, else later on an I/O thread
            self._raw.receive_async(self._on_message)

    def partitions(self) -> tuple[int, ...] | None:
        return self._held

    async def receive(self) -> ReceivedBatch | None:
        if self._error is not None:
            error, self._error = self._error, None
            raise DriverError(f"receive failed: {error}")
        if not self._inbox:
            self._arrived.clear()
            self._ask()
            if not self._inbox:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._arrived.wait(), RECEIVE_WAIT_S)
                if not self._inbox:
                    return None
        receive_ns = time.time_ns()
        intended: list[int] = []
        size = 0
        ids: list[tuple[int, str]] | None = [] if self._track else None
        raw = self._raw
        queued = False  # a receive completed inline: take the rest of the queue synchronously
        while len(intended) < READ_LIMIT:
            if self._inbox:
                result, message = self._inbox.popleft()
                if result != _OK:
                    self._error = result.name
                    break
            elif queued:
                # receive(0) returns a queued message or raises Timeout at once: no callback,
                # no result object (a third less CPU per message than a receive_async each)
                try:
                    message = raw.receive(0)
                except _pulsar.Timeout:
                    break
                except _pulsar.PulsarException as exc:
                    self._error = str(exc) or type(exc).__name__
                    break
            else:
                self._ask()
                if not self._inbox:
                    break  # nothing queued: the receive stays outstanding
                queued = True
                continue
            properties = message.properties()
            intended.append(int(properties[SEND_TIME]))
            size += message.length()
            if ids is not None:
                mid = message.message_id()
                if self._numbered:
                    ids.append((mid.partition(), f"{message.producer_name()}:{properties[SEQUENCE]}"))
                else:
                    ids.append((mid.partition(), f"{mid.ledger_id()}:{mid.entry_id()}:{mid.batch_index()}"))
            # no callback (the client takes None for none): a lost acknowledgement leaves the
            # message in the backlog, where the lag shows it
            raw.acknowledge_async(message, None)
        if not intended:
            return await self.receive()
        return ReceivedBatch(receive_ns, intended, size, ids)

    async def close(self) -> None:
        await self._handle.close()


def client_security(security: ClientSecurity) -> dict[str, Any]:
    """Keyword arguments of the Pulsar client: token authentication, and TLS for a
    pulsar+ssl:// service URL (the CA, the host name check, a client certificate)."""
    kwargs: dict[str, Any] = {}
    if security.token is not None:
        kwargs["authentication"] = pulsar.AuthenticationToken(security.token.reveal())
    if security.tls is not None:
        t = security.tls
        kwargs.update(tls_validate_hostname=t.verify_hostname, tls_allow_insecure_connection=False)
        if t.ca:
            kwargs["tls_trust_certs_file_path"] = t.ca
        if t.cert:
            kwargs.update(tls_certificate_file_path=t.cert,
                          tls_private_key_file_path=t.key or t.cert)
    return kwargs


class PulsarDriver(Driver):
    def __init__(self, service_url: str, admin_url: str, config: PulsarTargetConfig,
                 security: ClientSecurity = PLAINTEXT, target: Target | None = None,
                 desc: StackDescription | None = None) -> None:
        self._target = target
        self._desc = desc
        self._service_url = service_url
        self._admin = PulsarAdmin(admin_url, security=security)
        self._config = config
        self._security = security
        self._client: pulsar_asyncio.Client | None = None
        self._version = ""
        self._partitions: dict[str, int] = {}
        self._receiver_queue = RECEIVER_QUEUE

    def expect(self, message_size: int) -> None:
        fits = RECEIVER_QUEUE_BYTES // max(1, message_size)
        self._receiver_queue = max(RECEIVER_QUEUE, min(RECEIVER_QUEUE_MAX, fits))

    async def connect(self) -> None:
        try:
            self._version = await self._admin.version()
        except (OSError, AdminError, ValueError) as exc:
            raise DriverError(f"cannot reach the Pulsar admin API at {self._admin.url}: "
                              f"{unreachable(exc)}") from None
        host, port = host_port(self._service_url, DEFAULT_SERVICE_PORT)
        try:
            await probe_tcp(host, port, 10.0)
        except (OSError, TimeoutError) as exc:
            raise DriverError(f"cannot reach Pulsar at {self._service_url}: {unreachable(exc)}") from None
        if not self._config.batching:
            # every message is its own entry: the client's I/O threads run a Python callback
            # per message and wait for the GIL each time; at the default 5 ms switch interval
            # they get it a few hundred times a second while the event loop is busy
            sys.setswitchinterval(min(sys.getswitchinterval(), UNBATCHED_SWITCH_INTERVAL_S))
        # through a proxy the standalone advertises (network faults), lookups name its listener
        listener = self._desc.config.get("client_listener") if self._desc is not None else None
        self._client = pulsar_asyncio.Client(self._service_url, logger=_client_logger(),
                                             operation_timeout_seconds=30,
                                             **({"listener_name": listener} if listener else {}),
                                             **client_security(self._security))

    def version(self) -> str:
        return self._version

    def _path(self, topic: str) -> str:
        return f"/admin/v2/{topic_path(self._config.persistent, self._config.namespace, topic)}"

    def _name(self, topic: str) -> str:
        return topic_name(self._config.persistent, self._config.namespace, topic)

    def adopt_topic(self, name: str, partitions: int) -> None:
        self._partitions[name] = partitions

    async def create_topic(self, name: str, partitions: int, subscriptions: list[str]) -> None:
        self.adopt_topic(name, partitions)
        try:
            await self._admin.put(f"{self._path(name)}/partitions", partitions)
            # a durable subscription keeps what is produced before its consumers connect; a
            # non-persistent topic has none (its subscriptions live while consumers are attached)
            if self._config.persistent:
                for sub in subscriptions:
                    await self._admin.put(f"{self._path(name)}/subscription/{sub}")
        except (OSError, AdminError, ValueError) as exc:
            raise DriverError(f"cannot create topic {self._name(name)} with {partitions} partitions: "
                              f"{unreachable(exc)}") from None

    async def delete_topic(self, name: str) -> None:
        with contextlib.suppress(AdminError):
            await self._admin.delete(f"{self._path(name)}/partitions?force=true")

    def producer_kwargs(self) -> dict[str, Any]:
        """create_producer's keyword arguments: streambench's, then the `producer.` settings."""
        c = self._config
        return {
            "batching_enabled": c.batching,
            "batching_max_messages": c.batch_max_messages,
            "batching_max_allowed_size_in_bytes": c.batch_max_bytes,
            "batching_max_publish_delay_ms": c.batch_delay_ms,
            # key_shared consumers get whole batches: batch per key so keys stay together
            "batching_type": (pulsar.BatchingType.KeyBased if c.subscription == "key_shared"
                              else pulsar.BatchingType.Default),
            "max_pending_messages": MAX_PENDING,
            "block_if_queue_full": False,  # never block the event loop's thread
            **dict(c.producer),
        }

    def consumer_kwargs(self) -> dict[str, Any]:
        """subscribe's keyword arguments: streambench's, then the `consumer.` settings."""
        return {"consumer_type": SUBSCRIPTION_TYPES[self._config.subscription],
                "receiver_queue_size": self._receiver_queue,
                "initial_position": pulsar.InitialPosition.Earliest, **dict(self._config.consumer)}

    async def settings_in_force(self) -> dict[str, dict[str, Any]]:
        if self._target is None:
            return {}
        record = SettingsRecord(self._target)
        explicit = self._target.explicit
        old = {"batching_enabled": "batching", "batching_max_messages": "batch_max_messages",
               "batching_max_allowed_size_in_bytes": "batch_max_bytes",
               "batching_max_publish_delay_ms": "batch_delay_ms"}
        user = [k for k, option in old.items() if option in explicit]
        record.add("producer", self.producer_kwargs(), read_back=False,
                   streambench=self.producer_kwargs(), user=user)
        record.add("consumer", self.consumer_kwargs(), read_back=False,
                   streambench=self.consumer_kwargs(),
                   user=["consumer_type"] if "subscription" in explicit else [])
        written = self._desc.broker_settings if self._desc is not None else {}
        try:
            # the values the broker runs with (superuser only on a cluster with authorization)
            runtime = await self._admin.get("/admin/v2/brokers/configuration/runtime")
        except (OSError, AdminError, ValueError):
            runtime = None
        if isinstance(runtime, dict):
            record.add("broker", {k: runtime[k] for k in sorted(runtime)}, read_back=True,
                       streambench=written, user=["journalSyncData"] if "fsync" in explicit else [])
        # what the standalone.conf sets that the broker's runtime configuration does not list
        # (the in-process bookie's settings, e.g. journalSyncData)
        rest = {k: v for k, v in written.items() if f"broker.{k}" not in record.entries}
        record.add("broker", rest, read_back=False, streambench=written,
                   user=["journalSyncData"] if "fsync" in explicit else [])
        record.add_requested()
        return record.result()

    async def producer(self, topic: str, index: int) -> Producer:
        assert self._client is not None
        c = self._config
        kwargs = self.producer_kwargs()
        handles = []
        try:
            for partition in range(self._partitions.get(topic, 1)):
                handles.append(await self._client.create_producer(
                    f"{self._name(topic)}-partition-{partition}", **kwargs))
        except (pulsar_asyncio.PulsarException, TypeError, ValueError) as exc:
            for handle in handles:
                with contextlib.suppress(pulsar_asyncio.PulsarException):
                    await handle.close()
            raise DriverError(f"cannot create a producer on {self._name(topic)}: {exc}") from None
        return PulsarProducer(handles, numbered=not c.persistent,
                              run_length=c.batch_max_messages if c.batching else 1,
                              window_ms=c.batch_delay_ms if c.batching else 0)

    async def consumer(self, topic: str, subscription: str, index: int, track_ids: bool) -> Consumer:
        assert self._client is not None
        kind = self._config.subscription
        if kind == "exclusive" and index > 0:
            raise TargetError("pulsar:subscription=exclusive admits one consumer per subscription; "
                              "use consumerPerSubscription 1 (--consumers 1) or subscription=shared, "
                              "key_shared or failover")
        try:
            handle = await self._client.subscribe(
                self._name(topic), subscription, consumer_name=f"{subscription}-{index}",
                **self.consumer_kwargs())
        except (pulsar_asyncio.PulsarException, TypeError, ValueError) as exc:
            raise DriverError(f"cannot subscribe {subscription} ({kind}) to {self._name(topic)}: "
                              f"{exc}") from None
        every = tuple(range(self._partitions.get(topic, 1)))
        # failover: the broker makes one consumer per partition the active one, unseen here
        return PulsarConsumer(handle, track_ids, numbered=not self._config.persistent,
                              held=None if kind == "failover" else every,
                              shared=kind in ("shared", "key_shared"))

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()


class _PulsarDockerStack(PulsarDockerStack):
    """The docker runtime's standalone, its description labelled like the local one's."""

    def describe(self) -> StackDescription:
        desc = super().describe()
        return dataclasses.replace(desc, config={**desc.config,
                                                 **PulsarTargetConfig.of(self._target).describe()})


_LOCAL_ONLY = ("admin_port", "heap", "fsync")


def _stack(target: Target) -> Stack:
    if target.runtime == "external":
        return PulsarExternalStack(target, target.label)
    if target.runtime == "docker":
        misplaced = sorted(k for k in _LOCAL_ONLY if k in target.explicit)
        if misplaced:
            raise TargetError(f"target {target.spec!r}: {', '.join(misplaced)} apply to the local "
                              "standalone (runtime=local)")
        return _PulsarDockerStack(target, target.label)
    return PulsarLocalStack(target, target.label)


def _driver(target: Target, desc: StackDescription) -> Driver:
    return PulsarDriver(desc.endpoints["pulsar"], desc.endpoints[ADMIN_ENDPOINT],
                        PulsarTargetConfig.of(target), ClientSecurity.of(target), target, desc)


def _collectors(target: Target, desc: StackDescription, topic: str, partitions: int,
                subscriptions: list[str]) -> list[Collector]:
    c = PulsarTargetConfig.of(target)
    admin = PulsarAdmin(desc.endpoints[ADMIN_ENDPOINT], timeout_s=2.0,
                        security=ClientSecurity.of(target))
    found: list[Collector] = [PulsarTelemetry(admin, c.persistent, c.namespace, topic, partitions,
                                              subscriptions, c.batching)]
    found[:0] = resource_collectors(target, desc)
    return found


def _metrics_collector(target: Target, desc: StackDescription, topics: list[str]) -> Collector:
    c = PulsarTargetConfig.of(target)
    admin = PulsarAdmin(desc.endpoints[ADMIN_ENDPOINT], timeout_s=0.8,
                        security=ClientSecurity.of(target))
    return PulsarMetrics(admin, [topic_name(c.persistent, c.namespace, t) for t in topics])


_SET_BY_STREAMBENCH = {
    "topic": "the run's topics", "subscription_name": "the workload's subscriptions",
    "consumer_name": "one per consumer", "producer_name": "the client names each producer",
    "schema": "streambench sends bytes", "message_listener": "streambench receives itself",
    "message_router": "streambench routes itself", "crypto_key_reader": "not settable here",
    "properties": "not settable here", "batch_receive_policy": "not settable here",
    "key_shared_policy": "not settable here", "dead_letter_policy": "not settable here",
    "is_pattern_topic": "not settable here",
    "consumer_type": "use pulsar:subscription=shared|key_shared|failover|exclusive",
    "block_if_queue_full": "a full queue must never block the event loop's thread",
}
_BROKER_SET_BY_STREAMBENCH = {
    "bindAddress": "the standalone listens on 127.0.0.1",
    "advertisedAddress": "the standalone listens on 127.0.0.1",
    "brokerServicePort": "use pulsar:port=N", "webServicePort": "use pulsar:admin_port=N",
    "clusterName": "the standalone's cluster is 'standalone'",
    "listeningInterface": "the bookie listens on loopback",
    "functionsWorkerEnabled": "the function worker is off",
}
# the stock waits of a standalone at low rates (the README tells their measured effect)
PROFILES = {
    "latency": {"broker.managedLedgerNewEntriesCheckDelayInMillis": "0",
                "broker.journalMaxGroupWaitMSec": "0", "producer.batching_enabled": "false"},
    # larger producer batches given longer to fill, and a deeper consumer queue
    "throughput": {"producer.batching_enabled": "true",
                   "producer.batching_max_publish_delay_ms": "10",
                   "producer.batching_max_messages": "10000",
                   "producer.batching_max_allowed_size_in_bytes": "1048576",
                   "consumer.receiver_queue_size": "10000"},
    "durable": {"broker.journalSyncData": "true"},
    # the Pulsar-vs-Kafka latency study's "fsync off": the bookie journal written without fsync
    # (the suite fsync-partitions runs it beside the default)
    "omb-no-fsync": {"broker.journalSyncData": "false"},
}


def _setting_options() -> dict[str, OptionSpec]:
    producer = signature_defaults(pulsar_asyncio.Client.create_producer)
    consumer = signature_defaults(pulsar_asyncio.Client.subscribe)
    checks = {"producer": kwargs_check(producer, "pulsar-client create_producer",
                                       controlled=_SET_BY_STREAMBENCH),
              "consumer": kwargs_check(consumer, "pulsar-client subscribe",
                                       controlled=_SET_BY_STREAMBENCH)}
    return {
        "broker": namespace("broker.KEY=VALUE: a standalone.conf key of the standalone "
                            "streambench starts",
                            names_check(PULSAR_BROKER, "key of Pulsar's standalone.conf or "
                                        "broker.conf", _BROKER_SET_BY_STREAMBENCH), broker=True),
        "producer": namespace("producer.NAME=VALUE: a keyword argument of pulsar-client's "
                              "create_producer (e.g. producer.batching_enabled=false)",
                              checks["producer"]),
        "consumer": namespace("consumer.NAME=VALUE: a keyword argument of pulsar-client's "
                              "subscribe (e.g. consumer.receiver_queue_size=100)",
                              checks["consumer"]),
        "profile": profile_option(PROFILES),
        "driver": driver_option(lambda path: pulsar_driver(path, checks)),
        "config": config_option(),
    }


# the client's batching options are 32-bit integers
_CLIENT_INT = whole_in(1, INT32_MAX, whose="a 32-bit client option")


PLATFORMS = [
    Platform(
        name="pulsar",
        summary="Apache Pulsar (a standalone from the release on Maven Central, or a cluster); a topic is a "
                "partitioned topic, a subscription (shared by default) is a consumer group",
        options={
            "persistent": OptionSpec("persistent topics (false: non-persistent, nothing stored)",
                                     default=True, parse=parse_bool, flag=True),
            "subscription": OptionSpec("subscription type of the consumers",
                                       default="shared", choices=tuple(SUBSCRIPTION_TYPES)),
            "batching": OptionSpec("producer batching", default=True, parse=parse_bool, flag=True),
            "batch_max_messages": OptionSpec("most messages in one producer batch",
                                             default=1000, parse=_CLIENT_INT, needs="batching"),
            "batch_max_bytes": OptionSpec("most bytes in one producer batch",
                                          default=128 * 1024, parse=_CLIENT_INT,
                                          needs="batching"),
            "batch_delay_ms": OptionSpec("longest a producer batch waits to fill, in ms",
                                         default=1, parse=_CLIENT_INT, needs="batching"),
            "fsync": OptionSpec("bookie journal fsync per write (false: journalSyncData=false)",
                                default=True, parse=parse_bool, flag=True),
            "heap": OptionSpec("JVM heap of the local standalone (direct memory: twice that)",
                               default="1g", parse=parse_heap),
            "port": OptionSpec("loopback broker port of the standalone (default: a free one)",
                               default=0, parse=parse_port),
            "admin_port": OptionSpec("loopback admin/web port of the local standalone "
                                     "(default: a free one)", default=0, parse=parse_port),
            "namespace": OptionSpec("TENANT/NAMESPACE of the topics", default="public/default",
                                    parse=parse_namespace),
            **runtime_options(("docker", "local")),
            **PULSAR_SECURITY_OPTIONS,
            **_setting_options(),
        },
        runtimes=("docker", "local", "external"),
        broker_settings_runtimes=("docker", "local"),
        address_example="pulsar://HOST:6650,http://HOST:8080",
        make_stack=_stack,
        docker_images=file_images("pulsar.yml"),
        lag_per_partition=True, keyed=True, settings_read_back=("broker",),
        # the binary protocol (the admin API stays direct, for the collectors): the standalone
        # advertises the proxy as a listener of its own that the clients' lookups name
        proxied_endpoints=("pulsar",), advertised_endpoints=("pulsar",), proxied_runtimes=("local",),
        make_driver=_driver,
        make_collectors=_collectors,
        broker_metrics=BrokerMetrics(METRICS_SOURCE, PULSAR_METRICS, _metrics_collector),
        prerequisites=(JAVA, MAVEN),
    ),
]
