"""The measurements on the bus: one Tick per target per second (rates, latency histograms,
lag, resources, the generator's own health) and, when raw recording is on, every latency value
of an interval. The run's phases are named here too. Imports nothing of streambench's but the
histograms."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from loadgen.core.histogram import HistogramSnapshot


class Phase(StrEnum):
    STARTING = "starting"
    WARMUP = "warm-up"
    MEASURING = "measuring"
    DRAINING = "draining"
    WRITING = "writing"
    REPORT = "report"
    DONE = "done"


@dataclass(frozen=True, slots=True)
class Resources:
    """Broker resource use over the interval (sum over the broker's processes/containers)."""

    cpu_percent: float = float("nan")  # 100 % = one core
    memory_bytes: int = 0
    disk_read_bytes: int = 0  # during the interval
    disk_write_bytes: int = 0
    net_rx_bytes: int = 0
    net_tx_bytes: int = 0


@dataclass(frozen=True, slots=True)
class LoadgenHealth:
    """The load generator watching itself over the interval (summed over a target's worker
    processes): when it, not the broker, is the bottleneck, `saturated` says why."""

    cpu_percent: float = float("nan")  # the worker processes' CPU, 100 % = one core
    loop_lag_ms: float = float("nan")  # the longest an event loop was late waking up
    saturated: str = ""  # why the generator is the bottleneck; empty when it is not

    @staticmethod
    def merge(parts: list[LoadgenHealth]) -> LoadgenHealth:
        known = [p for p in parts if p.cpu_percent == p.cpu_percent]
        if not known:
            return parts[0] if parts else LoadgenHealth()
        return LoadgenHealth(
            cpu_percent=sum(p.cpu_percent for p in known),
            loop_lag_ms=max(p.loop_lag_ms for p in known),
            saturated="; ".join(p.saturated for p in known if p.saturated),
        )


class LagStatus(StrEnum):
    """A subscription's state over the last ticks, after Burrow's consumer lag evaluation
    rules (LinkedIn, Burrow wiki, "Consumer Lag Evaluation Rules")."""

    OK = "OK"  # caught up at some point of the window, or catching up
    WARN = "WARN"  # reading, but the lag never went down over the window
    STALL = "STALL"  # its consumers read, but a partition's position stood still with lag
    STOP = "STOP"  # its consumers read nothing over the window, with lag


@dataclass(frozen=True, slots=True)
class TimeLag:
    """The exact time lag: how old the oldest message not yet consumed is (now − its intended
    send time), found from the producers' acknowledged positions and the consumers' positions
    (loadgen.timelag). Seconds; NaN where not known."""

    seconds: float  # the oldest over every subscription and partition
    per_partition: dict[int, float] = field(default_factory=dict)  # oldest over subscriptions
    per_subscription: dict[str, float] = field(default_factory=dict)  # oldest over partitions
    # the figures are within this many seconds of the truth (0: every position was sampled;
    # else the gap between the samples around a position); NaN when unbounded
    bound_s: float = 0.0
    trend: float = float("nan")  # seconds of time lag gained per second, over the last ticks
    drain_s: float = float("nan")  # to read the lag at the net consume rate; inf: growing
    status: dict[str, LagStatus] = field(default_factory=dict)  # per subscription


@dataclass(frozen=True, slots=True)
class LagSnapshot:
    """Consumer lag (messages not yet consumed) per subscription, summed and per partition."""

    total: int
    per_partition: dict[int, int] = field(default_factory=dict)
    source: str = ""  # what the figure comes from, e.g. "XINFO GROUPS lag+pending"
    # how long the figure may trail consumption (a source the readers write their positions
    # back to periodically): up to this many seconds of consumption can still count as lag
    trails_s: float = 0.0
    # where collectors know them: the topic they read, and per subscription and partition
    # the consumers' position (loadgen.core.acklog) and the messages not yet consumed there
    topic: str = ""
    positions: dict[str, dict[int, int]] = field(default_factory=dict)
    unread: dict[str, dict[int, int]] = field(default_factory=dict)
    # the position is the last message delivered (a Redis group's last-delivered-id), not the
    # first one not yet consumed (a Kafka offset)
    positions_after: bool = False
    read_ns: int = 0  # wall clock when the positions were read
    leaderless: tuple[int, ...] = ()  # partitions with no leader at the reading
    time: TimeLag | None = None  # filled by the coordinator

    def plus(self, other: LagSnapshot) -> LagSnapshot:
        """The lag of a target with several topics, from its topics' own: the totals summed,
        partition p of every topic summed into p. The positions are per topic, so they are
        left out, and the time lag of such a target is the estimate (labelled as such)."""
        parts = dict(self.per_partition)
        for p, n in other.per_partition.items():
            parts[p] = parts.get(p, 0) + n
        sources = [s for s in dict.fromkeys((self.source, other.source)) if s]
        return LagSnapshot(self.total + other.total, parts, ", ".join(sources),
                           max(self.trails_s, other.trails_s),
                           read_ns=max(self.read_ns, other.read_ns),
                           leaderless=tuple(sorted({*self.leaderless, *other.leaderless})))


def partition_list(partitions: tuple[int, ...]) -> str:
    """`0-3, 6, 8-9`: runs of consecutive partitions as ranges; `none` for no partition."""
    if not partitions:
        return "none"
    runs: list[list[int]] = []
    for p in partitions:
        if runs and p == runs[-1][1] + 1:
            runs[-1][1] = p
        else:
            runs.append([p, p])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


@dataclass(frozen=True, slots=True)
class ConsumerStat:
    """One consumer over the interval: what it read and the partitions it holds at the tick."""

    topic: int  # the topic's number within the target (0 … topics-1)
    subscription: str
    index: int  # the consumer's number within its subscription
    consumed: int  # messages in the interval
    # the partitions it holds at the end of the interval, as its client or driver knows them
    # (sorted); None when the broker deals them and does not tell
    partitions: tuple[int, ...] | None = None
    shared: bool = False  # it reads them together with the subscription's other consumers

    @property
    def name(self) -> str:
        """`sub-0/1`: consumer 1 of subscription streambench-sub-0 (`t1 sub-0/1` on topic 1)."""
        sub = self.subscription.removeprefix("streambench-")
        return f"{f't{self.topic} ' if self.topic else ''}{sub}/{self.index}"


@dataclass(frozen=True, slots=True)
class BrokerMetricValues:
    """The platform's broker metrics (loadgen.core.brokermetrics) at a tick: per broker, by
    streambench's name, in base units. A broker whose read failed (paused, dead, no answer in
    time) keeps the last values read, listed in `stale`, with what failed in `problem`."""

    values: dict[str, dict[str, float]] = field(default_factory=dict)  # broker -> name -> value
    stale: tuple[str, ...] = ()  # the brokers whose values are the last ones read
    problem: str = ""  # why they are stale: the failed read's error


@dataclass(frozen=True, slots=True)
class NodeClock:
    """A node's wall clock against the coordinator's, as last estimated by a burst of clock
    exchanges (loadgen.clocks): the node's wall clock minus the coordinator's, and the most
    that estimate can be wrong by (half the round trip of the burst's fastest exchange)."""

    node: str  # the node's id (a Ray node id)
    offset_ns: int
    bound_ns: int
    estimated_ns: int  # the coordinator's wall clock when the burst ended


@dataclass(frozen=True, slots=True)
class NodeStat:
    """One load node's share of a target over the interval, on a cluster: what its load actor
    produced and consumed, and the actor process watching itself."""

    node: str  # the node's id (a Ray node id)
    host: str  # its host name
    produced: int
    consumed: int
    cpu_percent: float = float("nan")  # the actor process's CPU, 100 % = one core
    loop_lag_ms: float = float("nan")
    memory_bytes: int = 0  # the actor process's resident memory at the tick
    saturated: str = ""  # why this node's load generator is the bottleneck; empty when not
    # the node's own share of the target's latency histograms over the interval: filled in by
    # the coordinator from the node's tick when it merges it (not sent twice); None elsewhere
    e2e_latency: HistogramSnapshot | None = None
    publish_latency: HistogramSnapshot | None = None
    publish_delay: HistogramSnapshot | None = None


@dataclass(frozen=True, slots=True)
class Tick:
    """What happened to one target during one interval (normally one second)."""

    target: str  # the target's label, unique within the run
    seq: int  # 0, 1, 2 … per target
    time_ns: int  # wall clock at the end of the interval
    interval_s: float  # actual length of the interval
    phase: Phase
    elapsed_s: float  # since the load started
    produced: int  # messages acknowledged by the broker in the interval
    produced_bytes: int  # payload bytes of those
    consumed: int
    consumed_bytes: int
    send_errors: int
    target_rate: float  # msg/s the producers aim for (0 = as fast as possible)
    publish_latency: HistogramSnapshot  # send -> ack, ns
    publish_delay: HistogramSnapshot  # actual - intended send time, ns
    e2e_latency: HistogramSnapshot  # receive - intended send time, ns
    lag: LagSnapshot | None
    resources: Resources
    broker: dict[str, float] = field(default_factory=dict)  # broker-native counters (deltas)
    produced_total: int = 0
    consumed_total: int = 0
    loadgen: LoadgenHealth = LoadgenHealth()
    consumers: tuple[ConsumerStat, ...] = ()  # every consumer of the target, in name order
    # with the delivery audit (--audit): reads of a message already read, and messages read
    # after a later one of their producer in their partition, found in the interval
    duplicates: int = 0
    reordered: int = 0
    # the platform's broker metrics; None when it declares none
    broker_metrics: BrokerMetricValues | None = None
    # e2e samples below zero (recorded as 0 in e2e_latency, counted here): a receive time
    # before the intended send time, which only a clock error can give
    e2e_below_zero: int = 0
    # the largest clock error bound applied to the interval's e2e samples (their consumer's
    # node's offset bound); 0 when every sample was timed on the coordinator's own clock
    e2e_clock_bound_ns: int = 0
    clocks: tuple[NodeClock, ...] = ()  # each node's clock estimate in force, on a cluster
    nodes: tuple[NodeStat, ...] = ()  # each load node's share, on a cluster
    # load nodes of the target lost by this tick (their share is missing from it and after)
    nodes_lost: int = 0
    # load nodes whose tick was not in when this one was due: their share of the interval is
    # missing from it, and counted in the tick their answer comes by (nodes_late_counted)
    nodes_late: int = 0
    nodes_late_counted: int = 0  # late node ticks of earlier intervals counted in this one
    # the producers' acknowledged (partition, position, intended ns) samples of the interval,
    # per topic (loadgen.core.acklog); the coordinator takes them off the tick
    acked: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)

    @property
    def produce_rate(self) -> float:
        return self.produced / self.interval_s if self.interval_s > 0 else 0.0

    @property
    def consume_rate(self) -> float:
        return self.consumed / self.interval_s if self.interval_s > 0 else 0.0

    @property
    def lag_s_exact(self) -> bool:
        """lag_s is the exact time lag (else the estimate, or NaN)."""
        return self.lag is not None and self.lag.time is not None and \
            self.lag.time.seconds == self.lag.time.seconds

    @property
    def lag_s(self) -> float:
        """Seconds behind: the exact time lag where known, else an estimate, the lag over the
        consume rate (NaN when either is unknown or nothing is consumed)."""
        if self.lag_s_exact:
            assert self.lag is not None and self.lag.time is not None
            return self.lag.time.seconds
        return self.lag_estimate_s

    @property
    def lag_estimate_s(self) -> float:
        """The lag over the consume rate (NaN when either is unknown or nothing is consumed)."""
        rate = self.consume_rate
        return self.lag.total / rate if self.lag is not None and rate > 0 else float("nan")

    @property
    def produce_mb_s(self) -> float:
        return self.produced_bytes / self.interval_s / 1e6 if self.interval_s > 0 else 0.0

    @property
    def consume_mb_s(self) -> float:
        return self.consumed_bytes / self.interval_s / 1e6 if self.interval_s > 0 else 0.0


@dataclass(frozen=True, slots=True)
class RawSamples:
    """Every latency value of one interval, unbinned: published on the bus only when raw
    recording is on (a test switch used to check the report against exact percentiles)."""

    target: str
    seq: int
    time_ns: int
    phase: Phase
    kind: str  # "e2e" | "publish" | "delay"
    values: npt.NDArray[np.int64]  # nanoseconds
