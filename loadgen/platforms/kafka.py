"""Kafka-API driver for Apache Kafka in KRaft and ZooKeeper mode and for Redpanda: a topic is a
Kafka topic created through the admin API, a subscription is a consumer group. Producers and
consumers are aiokafka's by default, librdkafka's with `client=librdkafka` (kafka_rdkafka.py);
the admin client is aiokafka's either way.

Each record carries its intended send time in ns as the decimal ASCII value of header `t`; the
payload is exactly `messageSize` bytes. Consumers commit automatically every
`commit_interval_ms` and on close, so the group's committed lag drains to 0 after a run."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError, for_code
from aiokafka.partitioner import DefaultPartitioner

from collectors.kafka import KafkaLag, TopicActivity, topic_activity
from collectors.kafka_metrics import METRICS as KAFKA_METRICS
from collectors.kafka_metrics import SOURCE as KAFKA_METRICS_SOURCE
from collectors.kafka_metrics import kafka_metrics
from collectors.redpanda_metrics import METRICS as REDPANDA_METRICS
from collectors.redpanda_metrics import SOURCE as REDPANDA_METRICS_SOURCE
from collectors.redpanda_metrics import redpanda_metrics
from collectors.resources import resource_collectors
from collectors.scrape import named_endpoints
from compose.java import parse_heap
from compose.jmx import METRICS_ENDPOINT
from compose.kafka import (
    KAFKA_3,
    KafkaDockerStack,
    KafkaExternalStack,
    KafkaLocalStack,
    RedpandaDockerStack,
    kafka_images,
    parse_version,
    parse_zookeeper_version,
)
from compose.net import connect_failure
from loadgen.core.brokermetrics import BrokerMetrics
from loadgen.core.collector import Collector
from loadgen.core.driver import Consumer, Driver, OutMessage, Producer, ReceivedBatch
from loadgen.core.errors import DriverError, TargetError
from loadgen.core.platform import Platform, parse_non_negative, parse_port
from loadgen.core.security import KAFKA_SECURITY_OPTIONS, ClientSecurity
from loadgen.core.settings import (
    SettingsRecord,
    config_option,
    kwargs_check,
    names_check,
    namespace,
    profile_option,
    settings_of,
    signature_defaults,
)
from loadgen.core.stack import Stack, StackDescription
from loadgen.core.target import (
    INT32_MAX,
    OptionSpec,
    Target,
    parse_bool,
    parse_positive_int,
    whole_in,
)
from loadgen.omb_driver import driver_option, kafka_driver
from loadgen.platforms import kafka_rdkafka
from loadgen.platforms.runtime import runtime_options
from loadgen.platforms.setting_names.kafka import KAFKA_BROKER, KAFKA_TOPIC
from loadgen.platforms.tools import JAVA, MAVEN

INTENDED_HEADER = "t"
RECEIVE_TIMEOUT_MS = 100
ASSIGNMENT_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_MS = 30_000


@dataclass(frozen=True)
class KafkaClientOptions:
    """The client and topic settings of a Kafka-API target, typed once from its options."""

    acks: str | int  # "all", 0 or 1
    linger_ms: int
    batch_size: int
    compression: str | None  # None: no compression
    idempotence: bool
    fetch_min_bytes: int
    fetch_max_wait_ms: int
    commit_interval_ms: int
    replication: int  # 0: as many brokers as there are, up to 3
    flush_messages: int | None
    flush_ms: int | None
    topic: str | None  # a topic the user named (it outlives the run)
    reuse_topic: bool
    security: ClientSecurity  # SASL and TLS of every client (existing clusters)
    librdkafka: bool  # producers and consumers on librdkafka instead of aiokafka
    # `producer.`, `consumer.`, `admin.` settings (aiokafka keyword arguments over streambench's
    # own) and `topic.` settings (topic configs at creation), (name, value)
    producer: tuple[tuple[str, Any], ...] = ()
    consumer: tuple[tuple[str, Any], ...] = ()
    admin: tuple[tuple[str, Any], ...] = ()
    topic_configs: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, target: Target) -> KafkaClientOptions:
        o = target.options

        def maybe_int(name: str) -> int | None:
            return None if o.get(name) is None else int(o[name])

        return cls(
            acks="all" if o["acks"] == "all" else int(o["acks"]),
            linger_ms=int(o["linger_ms"]), batch_size=int(o["batch_size"]),
            compression=None if o["compression"] == "none" else str(o["compression"]),
            idempotence=bool(o["idempotence"]), fetch_min_bytes=int(o["fetch_min_bytes"]),
            fetch_max_wait_ms=int(o["fetch_max_wait_ms"]),
            commit_interval_ms=int(o["commit_interval_ms"]),
            replication=int(o.get("replication") or 0), flush_messages=maybe_int("flush_messages"),
            flush_ms=maybe_int("flush_ms"), topic=str(o["topic"]) if o.get("topic") else None,
            reuse_topic=bool(o.get("reuse_topic")), security=ClientSecurity.of(target),
            librdkafka=o.get("client") == "librdkafka",
            producer=tuple(settings_of(target, "producer").items()),
            consumer=tuple(settings_of(target, "consumer").items()),
            admin=tuple(settings_of(target, "admin").items()),
            topic_configs=tuple((k, str(v)) for k, v in settings_of(target, "topic").items()),
        )

    def client(self) -> dict[str, Any]:
        """Keyword arguments every aiokafka client of the target takes: security protocol,
        SSL context, SASL mechanism and credentials."""
        return self.security.kafka_kwargs()


def topic_name(target: Target, run_topic: str) -> str:
    """The Kafka topic behind one of the run's topics: the run's own unique name, or the
    `topic` option (`NAME`, then `NAME-1`, `NAME-2` … for further topics of the workload)."""
    chosen = target.options.get("topic")
    if not chosen:
        return run_topic
    index = run_topic.rsplit("-", 1)[-1]
    return f"{chosen}-{index}" if index.isdigit() and index != "0" else chosen


def group_id(topic: str, subscription: str) -> str:
    """Consumer groups are per topic, so targets sharing a cluster never share a group."""
    return f"{topic}.{subscription}"


def _failure(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class KafkaProducer(Producer):
    """One AIOKafkaProducer. Small batches (what a paced run hands over) go record by record
    into the client's accumulator, which batches per partition by its own rules (batch_size,
    linger_ms). Large batches (a maximum-rate run) are built into record batches of at most
    batch_size bytes here, one partition at a time, and handed over whole: one future per
    record batch instead of one per record, which is most of the client's cost per message."""

    max_in_flight = 16
    # below this many records a batch goes record by record, so linger_ms still applies
    WHOLE_BATCH_MIN = 32

    def __init__(self, producer: AIOKafkaProducer, topic: str, partitions: list[int]) -> None:
        self._producer = producer
        self._topic = topic
        self._partitions = partitions
        self._next = 0
        # Batches in flight are tasks of their own; one hands its records to the client at a
        # time, in the order the batches were made, so that a producer's records keep their
        # order in each partition (two batches handing over at once interleaved them: the
        # delivery audit saw a producer's sequence go backwards within a partition). It also
        # keeps to one hand-over per partition at a time, which the client needs: it queues one
        # handed-over batch per partition and makes the next wait for it to drain (its wait
        # loop also counts elapsed time twice, so many waiters time out early).
        self._handing_over = asyncio.Lock()

    async def send_batch(self, batch: Sequence[OutMessage]) -> None:
        # unkeyed records stick to one partition per batch and the batches take turns, like
        # the Java client's sticky partitioner; keyed records go by murmur2 of the key
        self._next = (self._next + 1) % len(self._partitions)
        sticky = self._partitions[self._next]
        if len(batch) >= self.WHOLE_BATCH_MIN:
            await self._send_whole(batch, sticky)
            return
        send = self._producer.send
        topic = self._topic
        acks = []
        async with self._handing_over:
            for m in batch:
                acks.append(await send(topic, m.payload, key=m.key,
                                       partition=sticky if m.key is None else None,
                                       headers=[(INTENDED_HEADER, b"%d" % m.intended_ns)]))
        log = self.acks
        for ack, m in zip(acks, batch, strict=True):
            meta = await ack
            if log is not None:
                log.one(meta.partition, meta.offset, m.intended_ns)

    async def _send_whole(self, batch: Sequence[OutMessage], sticky: int) -> None:
        by_partition: dict[int, list[OutMessage]] = {}
        by_key, parts = DefaultPartitioner(), self._partitions  # what send() does for keys
        for m in batch:
            partition = sticky if m.key is None else by_key(m.key, parts, parts)
            by_partition.setdefault(partition, []).append(m)
        producer, topic = self._producer, self._topic
        built: list[tuple[int, list[OutMessage], list[Any], list[int]]] = []
        for partition, records in by_partition.items():
            builders = [producer.create_batch()]
            starts = [0]  # each builder's first record
            for i, m in enumerate(records):
                header = [(INTENDED_HEADER, b"%d" % m.intended_ns)]
                if builders[-1].append(timestamp=None, key=m.key, value=m.payload,
                                       headers=header) is None:  # full: start the next
                    builders.append(producer.create_batch())
                    starts.append(i)
                    builders[-1].append(timestamp=None, key=m.key, value=m.payload, headers=header)
            starts.append(len(records))
            built.append((partition, records, builders, starts))
        acks = []
        async with self._handing_over:  # every partition's part before the next batch's
            for partition, records, builders, starts in built:
                for k, builder in enumerate(builders):
                    first, last = records[starts[k]], records[starts[k + 1] - 1]
                    acks.append((await producer.send_batch(builder, topic, partition=partition),
                                 partition, starts[k + 1] - starts[k], first.intended_ns,
                                 last.intended_ns))
        log = self.acks
        for ack, partition, count, first_ns, last_ns in acks:
            meta = await ack  # the batch's base offset
            if log is not None:
                log.run(partition, meta.offset, count, first_ns, last_ns)

    async def close(self) -> None:
        await self._producer.stop()


class _Assignments(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.assigned = asyncio.Event()

    async def on_partitions_revoked(self, revoked: Any) -> None:
        return None

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.assigned.set()


class KafkaConsumer(Consumer):
    def __init__(self, consumer: AIOKafkaConsumer, group: str, activity: TopicActivity,
                 track_ids: bool) -> None:
        self._consumer = consumer
        self._group = group
        self._activity = activity
        self._track = track_ids
        activity.attach(group, consumer)

    def partitions(self) -> tuple[int, ...] | None:
        # the group coordinator's latest assignment, as the client holds it (no request)
        return tuple(sorted(tp.partition for tp in self._consumer.assignment()))

    async def receive(self) -> ReceivedBatch | None:
        data = await self._consumer.getmany(timeout_ms=RECEIVE_TIMEOUT_MS)
        if not data:
            return None
        receive_ns = time.time_ns()
        intended: list[int] = []
        created: list[int] = []
        size = 0
        ids: list[tuple[int, str]] | None = [] if self._track else None
        for tp, records in data.items():
            for r in records:
                for key, value in r.headers:
                    if key == INTENDED_HEADER:
                        intended.append(int(value))
                        break
                else:
                    raise DriverError(f"record {tp.topic}/{tp.partition}@{r.offset} has no "
                                      f"'{INTENDED_HEADER}' header: was it written by streambench?")
                if r.timestamp_type == 0:  # CreateTime (not the broker's LogAppendTime)
                    created.append(r.timestamp)
                size += len(r.value)
            if ids is not None:
                ids.extend((tp.partition, str(r.offset)) for r in records)
        self._activity.record_createtime(receive_ns / 1e6, created)
        return ReceivedBatch(receive_ns, intended, size, ids)

    async def close(self) -> None:
        self._activity.detach(self._group, self._consumer)
        await self._consumer.stop()  # commits what was consumed, leaves the group


class KafkaDriver(Driver):
    def __init__(self, target: Target, bootstrap: str, product: str,
                 desc: StackDescription | None = None) -> None:
        self._target = target
        self._bootstrap = bootstrap
        self._product = product
        self._opts = KafkaClientOptions.of(target)
        self._admin: AIOKafkaAdminClient | None = None
        self._brokers = 0
        self._created: set[str] = set()
        # per topic made or reused: its replication and partition leaders, as the broker told them
        self._layout: dict[str, dict[str, Any]] = {}
        self._broker_written = dict(desc.broker_settings) if desc is not None else {}

    def _where(self) -> str:
        return f"{self._product} at {self._bootstrap}"

    async def connect(self) -> None:
        self._admin = AIOKafkaAdminClient(**self._admin_kwargs())
        deadline = time.monotonic() + 15
        try:
            await asyncio.wait_for(self._admin.start(), 15)
            while True:
                try:
                    cluster = await asyncio.wait_for(self._admin.describe_cluster(), 15)
                    break
                except KafkaError as exc:
                    # a cluster that has just started: the node asked may not take requests
                    # yet (NodeNotReadyError), which passes once the client is connected to it
                    if not exc.retriable or time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.2)
        except (KafkaError, OSError, TimeoutError) as exc:
            admin, self._admin = self._admin, None
            with contextlib.suppress(Exception):
                await admin.close()
            raise DriverError(f"cannot reach {self._where()}: "
                              f"{connect_failure(exc, self._opts.security.tls is not None)}") from None
        self._brokers = len(cluster["brokers"])

    def topic_layout(self, name: str, partitions: int) -> dict[str, Any]:
        topic = topic_name(self._target, name)
        return {"name": topic, "partitions": partitions, **self._layout.get(topic, {})}

    def _replication(self) -> int:
        return self._opts.replication or min(3, max(1, self._brokers))

    def _topic_configs(self) -> dict[str, str]:
        configs = {}
        if self._opts.flush_messages is not None:
            configs["flush.messages"] = str(self._opts.flush_messages)
        if self._opts.flush_ms is not None:
            configs["flush.ms"] = str(self._opts.flush_ms)
        return {**configs, **dict(self._opts.topic_configs)}

    def _admin_kwargs(self) -> dict[str, Any]:
        return {"bootstrap_servers": self._bootstrap, "request_timeout_ms": REQUEST_TIMEOUT_MS,
                "client_id": "streambench-admin", **dict(self._opts.admin), **self._opts.client()}

    def _producer_kwargs(self, index: int) -> dict[str, Any]:
        """AIOKafkaProducer's keyword arguments: streambench's, then the `producer.` settings."""
        opts = self._opts
        return {"bootstrap_servers": self._bootstrap, "client_id": f"streambench-producer-{index}",
                "acks": opts.acks, "linger_ms": opts.linger_ms, "max_batch_size": opts.batch_size,
                "compression_type": opts.compression, "enable_idempotence": opts.idempotence,
                "request_timeout_ms": REQUEST_TIMEOUT_MS, **dict(opts.producer), **opts.client()}

    def _consumer_kwargs(self, group: str, index: int) -> dict[str, Any]:
        """AIOKafkaConsumer's keyword arguments: streambench's, then the `consumer.` settings."""
        opts = self._opts
        return {"bootstrap_servers": self._bootstrap, "group_id": group,
                "client_id": f"streambench-consumer-{index}", "enable_auto_commit": True,
                "auto_commit_interval_ms": opts.commit_interval_ms,
                "auto_offset_reset": "earliest", "fetch_min_bytes": opts.fetch_min_bytes,
                "fetch_max_wait_ms": opts.fetch_max_wait_ms, "heartbeat_interval_ms": 1000,
                "request_timeout_ms": REQUEST_TIMEOUT_MS, **dict(opts.consumer), **opts.client()}

    def _rdkafka_producer_config(self, index: int) -> dict[str, Any]:
        """A librdkafka producer's properties: streambench's, then the `producer.` settings."""
        opts = self._opts
        return {"bootstrap.servers": self._bootstrap, "client.id": f"streambench-producer-{index}",
                "acks": str(opts.acks), "linger.ms": opts.linger_ms, "batch.size": opts.batch_size,
                "compression.type": opts.compression or "none",
                "enable.idempotence": opts.idempotence,
                # keyed records on the partition the Java client would choose
                "partitioner": "murmur2_random",
                # librdkafka leaves Nagle's algorithm on: a small request then waits for the
                # broker's delayed ACK (40 ms tails at a few thousand msg/s on loopback)
                "socket.nagle.disable": True,
                # a message is given up after this long unanswered, as aiokafka does
                "request.timeout.ms": REQUEST_TIMEOUT_MS, "message.timeout.ms": REQUEST_TIMEOUT_MS,
                **kafka_rdkafka.translated(opts.producer),
                **kafka_rdkafka.security_config(opts.security)}

    def _rdkafka_consumer_config(self, group: str, index: int) -> dict[str, Any]:
        """A librdkafka consumer's properties: streambench's, then the `consumer.` settings."""
        opts = self._opts
        return {"bootstrap.servers": self._bootstrap, "group.id": group,
                "client.id": f"streambench-consumer-{index}", "enable.auto.commit": True,
                "auto.commit.interval.ms": opts.commit_interval_ms,
                "auto.offset.reset": "earliest", "fetch.min.bytes": opts.fetch_min_bytes,
                "fetch.wait.max.ms": opts.fetch_max_wait_ms, "heartbeat.interval.ms": 1000,
                "socket.nagle.disable": True,
                **kafka_rdkafka.translated(opts.consumer),
                **kafka_rdkafka.security_config(opts.security)}

    async def settings_in_force(self) -> dict[str, dict[str, Any]]:
        """The clients' keyword arguments, and the broker's and the topic's configs as the
        first broker describes them (DescribeConfigs)."""
        record = SettingsRecord(self._target)
        explicit = self._target.explicit
        # keyword arguments that follow a plain option of the target
        plain = {"acks": "acks", "linger_ms": "linger_ms", "max_batch_size": "batch_size",
                 "compression_type": "compression", "enable_idempotence": "idempotence",
                 "fetch_min_bytes": "fetch_min_bytes", "fetch_max_wait_ms": "fetch_max_wait_ms",
                 "auto_commit_interval_ms": "commit_interval_ms",
                 "flush.messages": "flush_messages", "flush.ms": "flush_ms",
                 # librdkafka's names
                 "linger.ms": "linger_ms", "batch.size": "batch_size",
                 "compression.type": "compression", "enable.idempotence": "idempotence",
                 "fetch.min.bytes": "fetch_min_bytes", "fetch.wait.max.ms": "fetch_max_wait_ms",
                 "auto.commit.interval.ms": "commit_interval_ms"}
        user = [k for k, option in plain.items() if option in explicit]
        secret = {*self._opts.client(), *kafka_rdkafka.SECRET_PROPERTIES}
        clients = ((("producer", self._rdkafka_producer_config(0)),
                    ("consumer", self._rdkafka_consumer_config("GROUP", 0)))
                   if self._opts.librdkafka else
                   (("producer", self._producer_kwargs(0)),
                    ("consumer", self._consumer_kwargs("GROUP", 0))))
        for space, kwargs in (*clients, ("admin", self._admin_kwargs())):
            # the address and the names are in the run files already
            shown = {k: v for k, v in kwargs.items()
                     if k not in secret and k not in ("client_id", "group_id", "bootstrap_servers",
                                                      "client.id", "group.id",
                                                      "bootstrap.servers")}
            record.add(space, shown, read_back=False, streambench=shown, user=user)
        if self._admin is not None:
            for space, configs in await self._described_configs():
                record.add(space, {k: v for k, (v, _d) in sorted(configs.items())}, read_back=True,
                           streambench=self._written(space),
                           defaults=[k for k, (_v, d) in configs.items() if d], user=user)
        record.add_requested()
        return record.result()

    def _written(self, space: str) -> dict[str, str]:
        if space == "broker":
            return self._broker_written
        return self._topic_configs()

    async def _described_configs(self) -> list[tuple[str, dict[str, tuple[str, bool]]]]:
        """(namespace, name -> (value, is the platform's default)) of the first broker and of
        the run's first topic; nothing when the cluster refuses (e.g. no DESCRIBE_CONFIGS ACL)."""
        assert self._admin is not None
        resources = []
        try:
            cluster = await self._admin.describe_cluster()
            node = min(int(b["node_id"]) for b in cluster["brokers"])
            resources.append(("broker", ConfigResource(ConfigResourceType.BROKER, str(node))))
        except (KafkaError, OSError, ValueError, KeyError):
            pass
        if self._created or self._opts.topic:
            topic = sorted(self._created)[0] if self._created else str(self._opts.topic)
            resources.append(("topic", ConfigResource(ConfigResourceType.TOPIC, topic)))
        found = []
        for space, resource in resources:
            try:
                (response,) = await asyncio.wait_for(self._admin.describe_configs([resource]), 15)
            except (KafkaError, OSError, TimeoutError, ValueError):
                continue
            for error_code, _message, _type, _name, entries in response.resources:
                if error_code:
                    continue
                configs = {}
                for entry in entries:
                    name, value, source = entry[0], entry[1], entry[3]
                    # v0 tells is_default; later versions the source (4 static broker config,
                    # 5 default: for a topic both are the broker's, not the topic's)
                    default = bool(source) if response.API_VERSION == 0 else (
                        source == 5 or (space == "topic" and source in (3, 4, 5)))
                    configs[name] = ("(sensitive)" if value is None and entry[4] else value or "",
                                     default)
                found.append((space, configs))
        return found

    async def create_topic(self, name: str, partitions: int, subscriptions: list[str]) -> None:
        assert self._admin is not None
        topic = topic_name(self._target, name)
        replication = self._replication()
        try:
            existing = topic in await self._admin.list_topics()
            if existing:
                await self._check_shape(topic, partitions, replication)
            else:
                response = await self._admin.create_topics(
                    [NewTopic(topic, partitions, replication, topic_configs=self._topic_configs())])
                for entry in response.topic_errors:
                    code, message = entry[1], (entry[2] if len(entry) > 2 else "") or ""
                    if code:
                        raise DriverError(f"cannot create topic {topic} ({partitions} partitions, "
                                          f"replication {replication}) on {self._where()}: "
                                          f"{for_code(code).__name__} {message}".rstrip())
                if not self._opts.topic:
                    self._created.add(topic)  # a topic the user named outlives the run
            await self._wait_leaders(topic, partitions)
            await self._start_groups_at_end(topic, partitions,
                                            [group_id(topic, s) for s in subscriptions])
        except KafkaError as exc:
            raise DriverError(f"cannot set up topic {topic} on {self._where()}: {_failure(exc)}") from None

    async def _describe(self, topic: str) -> dict[str, Any]:
        assert self._admin is not None
        (described,) = await self._admin.describe_topics([topic])
        return dict(described)

    async def _check_shape(self, topic: str, partitions: int, replication: int) -> None:
        """An existing topic must have the workload's partitions, and the replication factor
        when the target sets one."""
        described = await self._describe(topic)
        have_p = len(described["partitions"])
        have_r = max((len(p["replicas"]) for p in described["partitions"]), default=0)
        if "replication" not in self._target.explicit:
            replication = have_r
        if (have_p, have_r) != (partitions, replication):
            raise TargetError(f"topic {topic} exists with {have_p} partitions and replication "
                              f"{have_r}, but the run needs {partitions} partitions and replication "
                              f"{replication}: choose another topic= or match its shape")
        if not self._opts.reuse_topic:
            raise TargetError(f"topic {topic} already exists on {self._where()}; add reuse_topic "
                              "to run on it, or choose another topic=")

    async def _wait_leaders(self, topic: str, partitions: int) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while True:
            described = await self._describe(topic)
            found = described.get("partitions", [])
            leaders = [p["leader"] for p in found]
            if len(leaders) == partitions and all(leader >= 0 for leader in leaders):
                self._layout[topic] = {
                    "replication": max((len(p["replicas"]) for p in found), default=0),
                    "leaders": {str(p["partition"]): f"broker {p['leader']}" for p in found}}
                return
            if loop.time() > deadline:
                raise DriverError(f"topic {topic} on {self._where()} has no leader for every "
                                  "partition after 30 s")
            await asyncio.sleep(0.1)

    async def _start_groups_at_end(self, topic: str, partitions: int, groups: list[str]) -> None:
        """Commit the log-end offsets for each group before any consumer runs, so the groups
        read exactly what this run produces (a reused topic's older records are skipped)."""
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        for group in groups:
            consumer = AIOKafkaConsumer(bootstrap_servers=self._bootstrap, group_id=group,
                                        enable_auto_commit=False, client_id="streambench-admin",
                                        request_timeout_ms=REQUEST_TIMEOUT_MS, **self._opts.client())
            try:
                await consumer.start()
                consumer.assign(tps)
                ends = await consumer.end_offsets(tps)
                await consumer.commit({tp: ends[tp] for tp in tps})
            finally:
                await consumer.stop()

    async def producer(self, topic: str, index: int) -> Producer:
        name = topic_name(self._target, topic)
        if self._opts.librdkafka:
            return await kafka_rdkafka.producer(self._rdkafka_producer_config(index), name,
                                                self._where())
        try:
            producer = AIOKafkaProducer(**self._producer_kwargs(index))
        except (ValueError, RuntimeError, TypeError, AssertionError) as exc:
            raise DriverError(f"cannot make a Kafka producer with {self._target.spec}: {exc}") from None
        try:
            await producer.start()
            partitions = sorted(await producer.partitions_for(name))
        except KafkaError as exc:
            await producer.stop()
            raise DriverError(f"cannot start a producer on {self._where()}: {_failure(exc)}") from None
        return KafkaProducer(producer, name, partitions)

    async def consumer(self, topic: str, subscription: str, index: int, track_ids: bool) -> Consumer:
        name = topic_name(self._target, topic)
        group = group_id(name, subscription)
        if self._opts.librdkafka:
            return await kafka_rdkafka.consumer(
                self._rdkafka_consumer_config(group, index), name, group, index, self._where(),
                topic_activity(self._bootstrap, name), track_ids, ASSIGNMENT_TIMEOUT_S)
        try:
            consumer = AIOKafkaConsumer(**self._consumer_kwargs(group, index))
        except (ValueError, RuntimeError, TypeError, AssertionError) as exc:
            raise DriverError(f"cannot make a Kafka consumer with {self._target.spec}: {exc}") from None
        assignments = _Assignments()
        consumer.subscribe([name], listener=assignments)
        try:
            await consumer.start()
            # the group settles before the load starts: no rebalance in the measurement
            await asyncio.wait_for(assignments.assigned.wait(), ASSIGNMENT_TIMEOUT_S)
        except (KafkaError, TimeoutError) as exc:
            await consumer.stop()
            reason = "no partitions assigned" if isinstance(exc, TimeoutError) else _failure(exc)
            raise DriverError(f"consumer {index} of group {group} on {self._where()} did not "
                              f"start: {reason}") from None
        return KafkaConsumer(consumer, group, topic_activity(self._bootstrap, name), track_ids)

    async def delete_topic(self, name: str) -> None:
        topic = topic_name(self._target, name)
        if self._admin is not None and topic in self._created:
            await self._admin.delete_topics([topic])
            self._created.discard(topic)

    async def close(self) -> None:
        if self._admin is not None:
            await self._admin.close()
            self._admin = None


# ---- platforms ------------------------------------------------------------------------------

CLIENT_OPTIONS = {
    "client": OptionSpec("producer and consumer client: aiokafka (pure Python) or librdkafka "
                         "(confluent-kafka: batching, compression and fetch parsing in C, on "
                         "threads of its own; far less CPU per message at high rates)",
                         default="aiokafka", choices=("aiokafka", "librdkafka")),
    "acks": OptionSpec("producer acks: 0, 1 or all (all = every in-sync replica)", default="all",
                       choices=("0", "1", "all")),
    "linger_ms": OptionSpec("producer linger.ms: wait this long to fill a batch",
                            default=0, parse=whole_in(0, 900_000, "ms", "librdkafka's range")),
    "batch_size": OptionSpec("producer batch.size in bytes, per partition (aiokafka keeps one "
                             "request per broker in flight, so a batch is what gathers during "
                             "one round trip; OpenMessaging Benchmark's Kafka default)",
                             default=1024 * 1024, parse=whole_in(1, INT32_MAX, "bytes", "a 32-bit config")),
    "compression": OptionSpec("producer compression.type", default="none",
                              choices=("none", "gzip", "snappy", "lz4", "zstd")),
    "idempotence": OptionSpec("idempotent producer (needs acks=all)", default=False,
                              parse=parse_bool, flag=True, needs="acks=all"),
    "fetch_min_bytes": OptionSpec("consumer fetch.min.bytes", default=1,
                                  parse=whole_in(1, 100_000_000, "bytes", "librdkafka's range")),
    "fetch_max_wait_ms": OptionSpec("consumer fetch.max.wait.ms", default=500,
                                    parse=whole_in(0, 300_000, "ms", "librdkafka's range")),
    "commit_interval_ms": OptionSpec("consumer auto-commit interval (the group's committed lag "
                                     "trails by up to this much)", default=1000,
                                     parse=whole_in(1, 86_400_000, "ms", "librdkafka's range")),
}

TOPIC_OPTIONS = {
    "replication": OptionSpec("topic replication factor (0 = as many brokers as there are, "
                              "at most 3)", default=0, parse=whole_in(0, 32_767, "", "a 16-bit field")),
    "flush_messages": OptionSpec("topic flush.messages: fsync after this many messages "
                                 "(unset = broker default, never forced)", default=None,
                                 parse=parse_positive_int),
    "flush_ms": OptionSpec("topic flush.ms: fsync after this many ms (0 = every write; "
                           "unset = broker default)", default=None, parse=parse_non_negative),
    "topic": OptionSpec("topic name (default: a new uniquely named topic per run)", default=None),
    "reuse_topic": OptionSpec("run on an existing topic of the same shape", default=False,
                              parse=parse_bool, flag=True),
}


_CLIENT_SET_BY_STREAMBENCH = {
    "loop": "streambench's event loop", "bootstrap_servers": "the target's address",
    "client_id": "one per client", "group_id": "one group per topic and subscription",
    "topics": "the run's topics", "key_serializer": "streambench sends bytes",
    "value_serializer": "streambench sends bytes", "key_deserializer": "streambench reads bytes",
    "value_deserializer": "streambench reads bytes", "partitioner": "not settable here",
    "partition_assignment_strategy": "not settable here",
    "enable_auto_commit": "the consumer group's committed lag counts on it",
    "sasl_oauth_token_provider": "not settable here",
    **{k: "use the TARGET's sasl=, user=, password_file=/password_env=, tls, ca=, cert= options"
       for k in ("security_protocol", "ssl_context", "sasl_mechanism", "sasl_plain_username",
                 "sasl_plain_password", "sasl_kerberos_service_name", "sasl_kerberos_domain_name")},
}
# Java client settings aiokafka lacks, with what comes closest
_NO_EQUIVALENT = {
    "buffer.memory": "aiokafka has no memory pool; max_batch_size bounds a partition's batch",
    "max.block.ms": "aiokafka does not block a send", "retries": "aiokafka retries until "
    "request_timeout_ms", "delivery.timeout.ms": "use request_timeout_ms",
    "max.in.flight.requests.per.connection": "aiokafka keeps one request per partition in flight",
    "partitioner.class": "aiokafka takes a partitioner object, not a class name",
    "send.buffer.bytes": "not configurable in aiokafka",
    "receive.buffer.bytes": "not configurable in aiokafka",
    "default.api.timeout.ms": "use request_timeout_ms",
    "allow.auto.create.topics": "streambench creates its topics",
    "client.dns.lookup": "not configurable in aiokafka",
}
_BROKER_SET_BY_STREAMBENCH = {
    **{k: "streambench lays out the brokers' loopback listeners (use port=N)"
       for k in ("listeners", "advertised.listeners", "controller.listener.names",
                 "controller.quorum.voters", "inter.broker.listener.name",
                 "listener.security.protocol.map", "zookeeper.connect")},
    **{k: "streambench numbers the brokers" for k in ("node.id", "broker.id")},
    "process.roles": "combined broker+controller nodes (kafka) or brokers (kafka-zk)",
    **{k: "each broker has a data directory of its own" for k in ("log.dirs", "log.dir")},
}
PROFILES = {
    # what streambench already does, spelled out: no linger, a fetch answered by the first byte
    "latency": {"producer.linger_ms": "0", "consumer.fetch_min_bytes": "1"},
    "throughput": {"producer.linger_ms": "10", "producer.max_batch_size": "1048576",
                   "consumer.fetch_min_bytes": "65536", "consumer.fetch_max_wait_ms": "100"},
    # fsync of every message before it is acknowledged
    "durable": {"topic.flush.messages": "1"},
    # the Pulsar-vs-Kafka latency study's "fsync on" (OpenMessaging Benchmark): every message and
    # at once (the suite fsync-partitions runs it beside the broker's default)
    "omb-fsync": {"topic.flush.messages": "1", "topic.flush.ms": "0"},
}


def _setting_options(local_brokers: bool) -> dict[str, OptionSpec]:
    checks = {
        "producer": kwargs_check(signature_defaults(AIOKafkaProducer.__init__), "aiokafka's producer",
                                 aliases={"batch.size": "max_batch_size"},
                                 no_equivalent=_NO_EQUIVALENT,
                                 controlled=_CLIENT_SET_BY_STREAMBENCH),
        "consumer": kwargs_check(signature_defaults(AIOKafkaConsumer.__init__), "aiokafka's consumer",
                                 no_equivalent=_NO_EQUIVALENT,
                                 controlled=_CLIENT_SET_BY_STREAMBENCH),
        "admin": kwargs_check(signature_defaults(AIOKafkaAdminClient.__init__),
                              "aiokafka's admin client", no_equivalent=_NO_EQUIVALENT,
                              controlled=_CLIENT_SET_BY_STREAMBENCH),
        "topic": names_check(KAFKA_TOPIC, "Kafka topic config"),
    }
    found = {
        "producer": namespace("producer.NAME=VALUE: an aiokafka producer setting (Java names "
                              "such as linger.ms map to linger_ms)", checks["producer"]),
        "consumer": namespace("consumer.NAME=VALUE: an aiokafka consumer setting",
                              checks["consumer"]),
        "admin": namespace("admin.NAME=VALUE: an aiokafka admin client setting", checks["admin"]),
        # "topic." beside the topic=NAME option of the topic's name
        "topic.": namespace("topic.NAME=VALUE: a topic config at creation (e.g. "
                           "topic.min.insync.replicas=2)", checks["topic"]),
        "profile": profile_option(PROFILES),
        "driver": driver_option(lambda path: kafka_driver(path, checks)),
        "config": config_option(),
    }
    if local_brokers:
        found["broker"] = namespace("broker.NAME=VALUE: a server.properties setting of the brokers "
                                    "streambench starts (e.g. broker.num.io.threads=8)",
                                    names_check(KAFKA_BROKER, "Kafka broker config",
                                                _BROKER_SET_BY_STREAMBENCH), broker=True)
    return found


def _local_options(version: OptionSpec) -> dict[str, OptionSpec]:
    return {
        "brokers": OptionSpec("brokers of the cluster, each on its own loopback ports (docker: "
                              "1 or 3)",
                              default=1, parse=parse_positive_int),
        "version": version,
        "heap": OptionSpec("JVM heap of each broker (-Xmx/-Xms)", default="1G", parse=parse_heap),
        "port": OptionSpec("client port of the first broker, the next brokers take the next "
                           "ports (default: free ones)", default=0, parse=parse_port),
        **runtime_options(("docker", "local")),
    }


LOCAL_ONLY = ("brokers", "version", "heap")


def _check_client(target: Target) -> None:
    """With client=librdkafka, every `producer.`/`consumer.` setting must map to librdkafka."""
    if target.options.get("client") == "librdkafka":
        kafka_rdkafka.check_settings(target, {space: settings_of(target, space)
                                              for space in ("producer", "consumer")})


def _external(target: Target, product: str) -> Stack:
    misplaced = sorted(target.explicit & set(LOCAL_ONLY))
    if misplaced:
        raise TargetError(f"target {target.spec!r}: {', '.join(misplaced)} shape a cluster "
                         "streambench starts; an @ADDRESS target uses an existing one")
    return KafkaExternalStack(target, target.label, product)


def _started(target: Target) -> None:
    """metrics= names an existing cluster's endpoints; streambench's own brokers have theirs."""
    if "metrics" in target.explicit:
        raise TargetError(f"target {target.spec!r}: metrics= names the Prometheus endpoints of "
                          f"an existing cluster ({target.platform}:metrics=URL[+URL…]@HOST:PORT); "
                          "the brokers streambench starts have their own")


def _metrics_urls(text: str) -> str:
    """metrics=URL[+URL…]: each broker's Prometheus endpoint (its whole URL, path included)."""
    urls = [u.strip() for u in text.split("+") if u.strip()]
    for url in urls:
        if not re.fullmatch(r"https?://[^/\s]+(/\S*)?", url):
            raise ValueError(f"{url!r} is not an http(s) URL; expected e.g. "
                             "http://HOST:7071/metrics")
    if not urls:
        raise ValueError("expected URL[+URL…], e.g. http://HOST:7071/metrics")
    return "+".join(urls)


def _metrics_endpoints(target: Target, desc: StackDescription) -> dict[str, str]:
    """broker -> its metrics URL: the stack's own, else the target's metrics= (named by their
    host:port), else none."""
    if METRICS_ENDPOINT in desc.endpoints:
        return named_endpoints(desc.endpoints[METRICS_ENDPOINT])
    given = target.options.get("metrics")
    return {urlsplit(u).netloc: u for u in str(given).split("+")} if given else {}


def _kafka_metrics(target: Target, desc: StackDescription, _topics: list[str]) -> Collector:
    return kafka_metrics(_metrics_endpoints(target, desc))


def _redpanda_metrics(target: Target, desc: StackDescription, _topics: list[str]) -> Collector:
    return redpanda_metrics(_metrics_endpoints(target, desc))


METRICS_OPTION = OptionSpec(
    "@ADDRESS: each broker's Prometheus endpoint for its broker metrics, URL[+URL…] (Kafka: a "
    "JMX exporter agent with streambench's rules, see docs/metrics.md; Redpanda: "
    "http://HOST:9644/public_metrics); without it an existing cluster has no broker metrics",
    default=None, parse=_metrics_urls)


def _kafka_stack(target: Target) -> Stack:
    _check_client(target)
    if target.runtime == "external":
        return _external(target, "kafka")
    _started(target)
    if target.runtime == "docker":
        return KafkaDockerStack(target, target.label, zookeeper=False)
    return KafkaLocalStack(target, target.label, zookeeper=False)


def _kafka_zk_stack(target: Target) -> Stack:
    _check_client(target)
    if target.runtime == "external":
        return _external(target, "kafka")
    _started(target)
    if target.runtime == "docker":
        return KafkaDockerStack(target, target.label, zookeeper=True)
    return KafkaLocalStack(target, target.label, zookeeper=True)


def _redpanda_stack(target: Target) -> Stack:
    _check_client(target)
    if target.runtime == "external":
        return KafkaExternalStack(target, target.label, "redpanda")
    _started(target)
    return RedpandaDockerStack(target, target.label)


def _driver(product: str) -> Any:
    def make(target: Target, desc: StackDescription) -> Driver:
        return KafkaDriver(target, desc.endpoints["kafka"], product, desc)
    return make


def _collectors(target: Target, desc: StackDescription, topic: str, partitions: int,
                subscriptions: list[str]) -> list[Collector]:
    name = topic_name(target, topic)
    found: list[Collector] = [KafkaLag(desc.endpoints["kafka"], name, partitions,
                                       [group_id(name, s) for s in subscriptions],
                                       ClientSecurity.of(target))]
    found[:0] = resource_collectors(target, desc)
    return found


KAFKA_BROKER_METRICS = BrokerMetrics(KAFKA_METRICS_SOURCE, KAFKA_METRICS, _kafka_metrics)

PLATFORMS = [
    Platform(
        name="kafka",
        summary="Apache Kafka in KRaft mode (combined broker+controller nodes), aiokafka or "
                "librdkafka clients",
        options={
            **_local_options(OptionSpec("Kafka release: 3.9, 4 or an exact 3.9.x / 4.x.y",
                                        default=KAFKA_3, parse=parse_version)),
            **CLIENT_OPTIONS, **TOPIC_OPTIONS, **KAFKA_SECURITY_OPTIONS,
            "metrics": METRICS_OPTION,
            **_setting_options(local_brokers=True),
        },
        runtimes=("docker", "local", "external"),
        broker_settings_runtimes=("docker", "local"),
        address_example="HOST:PORT[,HOST:PORT...]",
        make_stack=_kafka_stack,
        docker_images=kafka_images,
        stack_proxies=("local",),
        lag_per_partition=True, keyed=True, settings_read_back=("broker", "topic"),
        make_driver=_driver("kafka"),
        make_collectors=_collectors,
        broker_metrics=KAFKA_BROKER_METRICS,
        prerequisites=(JAVA, MAVEN),
    ),
    Platform(
        name="kafka-zk",
        summary="Apache Kafka 3.9 with ZooKeeper, aiokafka or librdkafka clients",
        options={
            **_local_options(OptionSpec("Kafka release (ZooKeeper mode: 3.9 only)",
                                        default=KAFKA_3, parse=parse_zookeeper_version)),
            **CLIENT_OPTIONS, **TOPIC_OPTIONS, **KAFKA_SECURITY_OPTIONS,
            "metrics": METRICS_OPTION,
            **_setting_options(local_brokers=True),
        },
        runtimes=("docker", "local", "external"),
        broker_settings_runtimes=("docker", "local"),
        address_example="HOST:PORT[,HOST:PORT...]",
        make_stack=_kafka_zk_stack,
        docker_images=kafka_images,
        published_as="kafka",
        lag_per_partition=True, keyed=True, settings_read_back=("broker", "topic"),
        make_driver=_driver("kafka"),
        make_collectors=_collectors,
        broker_metrics=KAFKA_BROKER_METRICS,
        prerequisites=(JAVA, MAVEN),
    ),
    Platform(
        name="redpanda",
        summary="Redpanda through its Kafka API, aiokafka or librdkafka clients (existing "
                "cluster: redpanda@HOST:PORT)",
        options={
            "brokers": OptionSpec("brokers of the cluster: 1 or 3", default=1,
                                  parse=parse_positive_int),
            "port": OptionSpec("Kafka API port of the first broker, the next brokers take the "
                               "next ports (default: free ones)", default=0, parse=parse_port),
            **runtime_options(("docker",)),
            **CLIENT_OPTIONS, **TOPIC_OPTIONS, **KAFKA_SECURITY_OPTIONS,
            "metrics": METRICS_OPTION,
            **_setting_options(local_brokers=False),
        },
        runtimes=("docker", "external"),
        address_example="HOST:PORT[,HOST:PORT...]",
        make_stack=_redpanda_stack,
        docker_images=kafka_images,
        lag_per_partition=True, keyed=True, settings_read_back=("broker", "topic"),
        make_driver=_driver("redpanda"),
        make_collectors=_collectors,
        broker_metrics=BrokerMetrics(REDPANDA_METRICS_SOURCE, REDPANDA_METRICS, _redpanda_metrics),
    ),
]
