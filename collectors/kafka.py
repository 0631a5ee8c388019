"""Kafka-API telemetry: consumer lag per partition, live from the run's consumers (log-end
offset − their position) or from the group's committed offsets (log-end offset − committed
offset), with the positions for the exact time lag (loadgen.timelag), and the broker-side
CreateTime latency of what the consumers received.

The run makes collectors and consumers separately; they meet in a `TopicActivity`, one per
(bootstrap servers, topic), which the driver's consumers register with."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from loadgen.core.collector import Collector, Reading
from loadgen.core.security import PLAINTEXT, ClientSecurity
from loadgen.core.ticks import LagSnapshot

END_OFFSETS_S = 0.3  # how long the live lag waits for the log-end offsets
LIVE_SOURCE = "log-end offset − consumer position"
COMMITTED_SOURCE = "log-end offset − committed offset"
MIXED_SOURCE = "log-end offset − consumer position, committed offsets where no consumer is assigned"


@dataclass
class TopicActivity:
    """What the consumers of one topic report between two ticks."""

    consumers: dict[str, list[AIOKafkaConsumer]] = field(default_factory=dict)  # group -> live
    createtime_sum_ms: float = 0.0
    createtime_count: int = 0
    createtime_max_ms: float = 0.0

    def attach(self, group: str, consumer: AIOKafkaConsumer) -> None:
        self.consumers.setdefault(group, []).append(consumer)

    def detach(self, group: str, consumer: AIOKafkaConsumer) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.consumers[group].remove(consumer)

    def record_createtime(self, receive_ms: float, create_ms: Iterable[int]) -> None:
        """Receive time − the record's CreateTime (ms, set by the producer client at send)."""
        n = 0
        total = 0
        oldest = None
        for t in create_ms:
            n += 1
            total += t
            if oldest is None or t < oldest:
                oldest = t
        if n:
            self.createtime_count += n
            self.createtime_sum_ms += receive_ms * n - total
            assert oldest is not None
            self.createtime_max_ms = max(self.createtime_max_ms, receive_ms - oldest)

    def take_createtime(self) -> dict[str, float]:
        if not self.createtime_count:
            return {}
        out = {"createtime_latency_ms_mean": self.createtime_sum_ms / self.createtime_count,
               "createtime_latency_ms_max": self.createtime_max_ms,
               "createtime_latency_count": float(self.createtime_count)}
        self.createtime_sum_ms = 0.0
        self.createtime_count = 0
        self.createtime_max_ms = 0.0
        return out


_ACTIVITY: dict[tuple[str, str], TopicActivity] = {}


def topic_activity(bootstrap: str, topic: str) -> TopicActivity:
    return _ACTIVITY.setdefault((bootstrap, topic), TopicActivity())


async def _live_position(consumer: AIOKafkaConsumer, tp: TopicPartition) -> tuple[int, int] | None:
    """(highwater, position) of a partition the consumer owns, None while either is unknown."""
    try:
        highwater = consumer.highwater(tp)
        if highwater is None:
            return None
        # position() waits while the consumer has no position yet (just assigned): don't
        # (a librdkafka consumer's view answers None instead)
        position = await asyncio.wait_for(consumer.position(tp), 0.05)
        return None if position is None else (highwater, position)
    except (AssertionError, TimeoutError, KafkaError):  # unassigned meanwhile, or no position
        return None


class KafkaLag(Collector):
    """Lag of the run's consumer groups on one topic, summed over the groups per partition."""

    name = "kafka"

    def __init__(self, bootstrap: str, topic: str, partitions: int, groups: list[str],
                 security: ClientSecurity = PLAINTEXT) -> None:
        self._bootstrap = bootstrap
        self._security = security
        self._topic = topic
        self._tps = [TopicPartition(topic, p) for p in range(partitions)]
        self._groups = groups
        self._activity = topic_activity(bootstrap, topic)
        self._admin: AIOKafkaAdminClient | None = None
        self._offsets: AIOKafkaConsumer | None = None
        self._ends: dict[int, int] = {}  # the log-end offsets as last answered

    async def start(self) -> None:
        self._admin = AIOKafkaAdminClient(bootstrap_servers=self._bootstrap, request_timeout_ms=5000,
                                          client_id="streambench-lag",
                                          **self._security.kafka_kwargs())
        await self._admin.start()
        # a consumer outside any group, only for log-end offsets
        self._offsets = AIOKafkaConsumer(bootstrap_servers=self._bootstrap, request_timeout_ms=5000,
                                         client_id="streambench-lag", enable_auto_commit=False,
                                         **self._security.kafka_kwargs())
        await self._offsets.start()
        self._activity.take_createtime()

    async def committed_lag(self) -> dict[str, dict[int, tuple[int, int]]]:
        """Per group, per partition: (log-end offset − committed offset, the committed offset),
        the whole log when the group has committed nothing, as `kafka-consumer-groups.sh
        --describe` shows."""
        assert self._admin is not None and self._offsets is not None
        ends = await self._offsets.end_offsets(self._tps)
        out: dict[str, dict[int, tuple[int, int]]] = {}
        for group in self._groups:
            committed = await self._admin.list_consumer_group_offsets(group, partitions=self._tps)
            lags = {}
            for tp in self._tps:
                meta = committed.get(tp)
                offset = meta.offset if meta is not None and meta.offset >= 0 else 0
                lags[tp.partition] = (max(0, ends[tp] - offset), offset)
            out[group] = lags
        return out

    async def _live_lag(self) -> dict[str, dict[int, tuple[int, int]]]:
        """Per group, per partition its consumers own: (log end − position, position). A
        consumer's highwater is the log end as of its latest fetch, which stops with it (a
        stopped consumer's lag would stay as it was): the log-end offset is asked for."""
        assert self._offsets is not None
        # a broker that does not answer at once (paused, restarting, busy) leaves the last
        # answer and the highwaters
        with contextlib.suppress(TimeoutError, KafkaError):
            asked = await asyncio.wait_for(self._offsets.end_offsets(self._tps), END_OFFSETS_S)
            self._ends = {tp.partition: end for tp, end in asked.items()}
        ends = self._ends
        out: dict[str, dict[int, tuple[int, int]]] = {}
        for group in self._groups:
            lags: dict[int, tuple[int, int]] = {}
            for consumer in list(self._activity.consumers.get(group, ())):
                for tp in consumer.assignment():
                    if tp.topic != self._topic:
                        continue
                    known = await _live_position(consumer, tp)
                    if known is not None:
                        end = max(known[0], ends.get(tp.partition, 0))
                        lags[tp.partition] = (max(0, end - known[1]), known[1])
            out[group] = lags
        return out

    async def _leaderless(self) -> tuple[int, ...]:
        """Partitions the cluster's metadata, asked for once a tick (waited for END_OFFSETS_S
        at most, else the last answer), gives no leader."""
        assert self._offsets is not None
        client = self._offsets._client  # the consumer has no public view of the metadata
        client.add_topic(self._topic)
        with contextlib.suppress(TimeoutError, KafkaError):
            await asyncio.wait_for(client.force_metadata_update(), END_OFFSETS_S)
        cluster = client.cluster
        if cluster.partitions_for_topic(self._topic) is None:
            return ()
        return tuple(tp.partition for tp in self._tps if cluster.leader_for_partition(tp) == -1)

    async def lag(self) -> LagSnapshot:
        """Live where a consumer owns the partition, the group's committed lag elsewhere."""
        leaderless = await self._leaderless()
        asked = time.time_ns()
        live = await self._live_lag()
        partitions = [tp.partition for tp in self._tps]
        complete = all(p in live[g] for g in self._groups for p in partitions)
        committed = {} if complete else await self.committed_lag()
        read_ns = (asked + time.time_ns()) // 2
        per_partition = dict.fromkeys(partitions, 0)
        positions: dict[str, dict[int, int]] = {g: {} for g in self._groups}
        unread: dict[str, dict[int, int]] = {g: {} for g in self._groups}
        used_live = used_committed = False
        for group in self._groups:
            for p in partitions:
                if p in live[group]:
                    count, position = live[group][p]
                    used_live = True
                else:
                    count, position = committed[group][p]
                    used_committed = True
                per_partition[p] += count
                positions[group][p] = position
                unread[group][p] = count
        source = (MIXED_SOURCE if used_live and used_committed else
                  LIVE_SOURCE if used_live else COMMITTED_SOURCE)
        return LagSnapshot(sum(per_partition.values()), per_partition, source, topic=self._topic,
                           positions=positions, unread=unread, read_ns=read_ns,
                           leaderless=leaderless)

    async def sample(self) -> Reading:
        lag = await self.lag() if self._groups else None
        return Reading(lag=lag, broker=self._activity.take_createtime())

    async def close(self) -> None:
        _ACTIVITY.pop((self._bootstrap, self._topic), None)
        for client in (self._offsets, self._admin):
            if client is not None:
                with contextlib.suppress(Exception):
                    await (client.stop() if isinstance(client, AIOKafkaConsumer) else client.close())
        self._offsets = self._admin = None
