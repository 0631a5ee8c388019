"""The driver interface every platform implements, in the spirit of OpenMessaging Benchmark's
driver SPI: connect, create a topic, make producers and consumers, close."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from loadgen.core.acklog import AckLog


@dataclass(slots=True)
class OutMessage:
    """A message to send. `intended_ns` is the wall-clock time its schedule slot falls on; the
    driver carries it with the message in the platform's native way (field, header, property)."""

    payload: bytes
    key: bytes | None
    intended_ns: int


@dataclass(slots=True)
class ReceivedBatch:
    """Messages one consumer read at once. They arrived together, so one receive time stands
    for all of them."""

    receive_ns: int
    intended_ns: list[int]
    payload_bytes: int
    # (partition, message id) of each message, filled only when the run tracks delivery
    ids: list[tuple[int, str]] | None = None

    @property
    def count(self) -> int:
        return len(self.intended_ns)


Acknowledged = Callable[[BaseException | None], None]
# the outcome of a read started with Consumer.deliver(): a batch, None (nothing came), or the
# exception that failed it
Delivered = Callable[[ReceivedBatch | BaseException | None], None]


# Set by the load on each producer and consumer: how a client that keeps its connection by
# itself (it reconnects on its own, so the load never opens a new one) says, on the event
# loop, that it lost every broker (`connection-lost`) and has one again (`reconnected`):
# notice(kind, detail).
ConnectionNotice = Callable[[str, str], None]


class Producer(ABC):
    # batches this producer may have awaiting acknowledgement at once
    max_in_flight: int = 1
    notice: ConnectionNotice | None = None
    # set by the load: where a producer that learns the positions its messages were stored at
    # notes them when they are acknowledged (the exact time lag; loadgen.core.acklog)
    acks: AckLog | None = None
    # True when submit() hands batches over without a task of their own
    submits: bool = False

    @abstractmethod
    async def send_batch(self, batch: Sequence[OutMessage]) -> None:
        """Send the messages in order; return when the broker acknowledged all of them."""

    def submit(self, batch: Sequence[OutMessage], done: Acknowledged) -> None:
        """Hand the messages to the client now, in order, without awaiting anything: `done(None)`
        once the broker acknowledged all of them, `done(error)` when they failed, called from
        the event loop and never before submit() returns (a batch refused outright may raise).
        Only producers with `submits`; the load awaits send_batch() in a task for the others."""
        raise NotImplementedError

    @abstractmethod
    async def close(self) -> None: ...


class Consumer(ABC):
    # True when the subscription's consumers all read the partitions they hold and the broker
    # deals the messages among them (a Redis Streams group, a Pulsar shared subscription)
    shared: bool = False
    notice: ConnectionNotice | None = None
    # True when deliver() can start reads whose outcome goes to a callback (no task wake-up
    # per read)
    delivers: bool = False

    def partitions(self) -> tuple[int, ...] | None:
        """The partitions this consumer holds now, sorted: after the group's latest rebalance
        where the broker assigns them, else as the driver dealt them. Called once per tick, so
        it must be cheap (no request to the broker). None when the broker assigns them and the
        client does not tell."""
        return None

    @abstractmethod
    async def receive(self) -> ReceivedBatch | None:
        """Wait briefly (about 100 ms at most) for messages; None when none came. Messages
        returned are acknowledged to the broker."""

    def deliver(self, outcome: Delivered) -> bool:
        """Start one read as receive() would, whose outcome goes to `outcome` from the event
        loop, never before deliver() returns. False when this read cannot be done so: the
        caller awaits receive() instead."""
        return False

    @abstractmethod
    async def close(self) -> None: ...

    def take_over(self, lost: Consumer) -> None:
        """This consumer replaces `lost`, whose connection was lost (the broker died or was
        restarted): carry over what `lost` still owed the broker, e.g. acknowledgements of
        messages it has counted. Default: nothing is owed."""


class Driver(ABC):
    """One connection family to one target's broker(s)."""

    @abstractmethod
    async def connect(self) -> None:
        """Reach the broker or raise DriverError with a line the user can act on."""

    @abstractmethod
    async def create_topic(self, name: str, partitions: int, subscriptions: list[str]) -> None:
        """Create the topic and the subscriptions (consumer groups) that will read it, so
        that nothing produced before the consumers start is missed."""

    def adopt_topic(self, name: str, partitions: int) -> None:
        """Take a topic another load process of the same target created, without touching the
        broker: remember what producers and consumers need to know about it."""

    def expect(self, message_size: int) -> None:
        """The workload's message size, told once right after the driver is made (before its
        settings are read and its clients made): a driver may size client buffers by it."""

    def plan(self, consumers_per_subscription: int) -> None:
        """How many consumers each subscription has over every load process, told before the
        first consumer is made: a platform whose broker does not share a subscription's
        partitions among its consumers deals them itself."""

    @abstractmethod
    async def producer(self, topic: str, index: int) -> Producer: ...

    @abstractmethod
    async def consumer(self, topic: str, subscription: str, index: int, track_ids: bool) -> Consumer: ...

    async def delete_topic(self, name: str) -> None:
        """Remove what the run created on a cluster that outlives it (external runtime)."""

    @abstractmethod
    async def close(self) -> None: ...

    def version(self) -> str:
        return ""

    def topic_layout(self, name: str, partitions: int) -> dict[str, Any]:
        """What the broker holds for a topic the run made, as far as the driver learnt it:
        `partitions`, and where the platform has them `name` (the broker's name of the topic),
        `streams` or `subjects` (the broker's own name of each partition), `replication`,
        `leaders` (partition number -> the broker leading it) or `leader` (of the whole topic)."""
        return {"partitions": partitions}

    async def settings_in_force(self) -> dict[str, dict[str, Any]]:
        """The target's settings in force, `NAMESPACE.NAME` -> {"value", "source",
        "read_back"} (loadgen.core.settings.SettingsRecord), read back from the broker where it
        tells them. Default: none known."""
        return {}
