"""Kafka-API producers and consumers on librdkafka (the confluent-kafka package), for targets
with `client=librdkafka`: the client's work per message (record batches, compression, fetch
parsing, acknowledgements) is done in C on its own threads, so a maximum-rate run costs the
load process far less than with aiokafka, which builds and parses every record in Python.

The event loop never blocks on the client:

- A producer hands every message to librdkafka at once (`produce()` only queues it); a thread
  of the producer serves the delivery reports (`poll()`), counts them per batch and wakes the
  loop once a batch is wholly acknowledged (or failed).
- A consumer's `consume()` runs on a thread of its own; what it returns is read there and
  handed to the loop as one ReceivedBatch.

Records look exactly as aiokafka's: the intended send time in header `t`, CreateTime set by
the client, unkeyed records on one partition per batch (sticky), keyed ones by murmur2 of the
key as the Java client places them. Admin work (topics, groups, configs) and the lag collector
stay on aiokafka."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Sequence
from typing import Any

from aiokafka import TopicPartition

from collectors.kafka import TopicActivity
from loadgen.core.driver import Acknowledged, Consumer, OutMessage, Producer, ReceivedBatch
from loadgen.core.errors import DriverError, TargetError
from loadgen.core.security import ClientSecurity
from loadgen.core.target import Target

INTENDED_HEADER = "t"
# messages one consume() returns at most (a maximum-rate consumer reads this many per wake-up)
READ_LIMIT = 10_000
RECEIVE_TIMEOUT_S = 0.1
POLL_TIMEOUT_S = 0.1
CLOSE_TIMEOUT_S = 10.0
# confluent-kafka's Message.timestamp() type of a producer-set timestamp
_CREATE_TIME = 1
_PARTITION_UNASSIGNED = -1

# aiokafka keyword arguments (`producer.`, `consumer.` settings, profiles) and the librdkafka
# property that means the same
RDKAFKA_NAMES = {
    "acks": "acks", "linger_ms": "linger.ms", "max_batch_size": "batch.size",
    "compression_type": "compression.type", "enable_idempotence": "enable.idempotence",
    "request_timeout_ms": "request.timeout.ms", "retry_backoff_ms": "retry.backoff.ms",
    "metadata_max_age_ms": "metadata.max.age.ms",
    "connections_max_idle_ms": "connections.max.idle.ms",
    "fetch_min_bytes": "fetch.min.bytes", "fetch_max_wait_ms": "fetch.wait.max.ms",
    "fetch_max_bytes": "fetch.max.bytes", "max_partition_fetch_bytes": "max.partition.fetch.bytes",
    "session_timeout_ms": "session.timeout.ms", "heartbeat_interval_ms": "heartbeat.interval.ms",
    "max_poll_interval_ms": "max.poll.interval.ms", "auto_offset_reset": "auto.offset.reset",
    "isolation_level": "isolation.level", "check_crcs": "check.crcs",
    "auto_commit_interval_ms": "auto.commit.interval.ms",
}


def check_settings(target: Target, settings: dict[str, dict[str, Any]]) -> None:
    """Refuse, in one line, a `producer.`/`consumer.` setting a librdkafka client cannot take."""
    for space, given in settings.items():
        for name in given:
            if name not in RDKAFKA_NAMES:
                raise TargetError(f"target {target.spec!r}: {space}.{name} has no librdkafka "
                                 f"property streambench maps it to (client=librdkafka takes "
                                 f"{', '.join(sorted(RDKAFKA_NAMES))}); use client=aiokafka")


def _value(value: Any) -> Any:
    return str(value).lower() if isinstance(value, bool) else value


def translated(settings: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    return {RDKAFKA_NAMES[name]: _value(value) for name, value in settings}


def security_config(security: ClientSecurity) -> dict[str, Any]:
    """The librdkafka properties of the target's TLS and SASL options."""
    if security.tls is None and security.mechanism is None:
        return {}
    config: dict[str, Any] = {
        "security.protocol": ("SASL_" if security.mechanism else "") +
                             ("SSL" if security.tls else "PLAINTEXT")}
    tls = security.tls
    if tls is not None:
        if tls.ca:
            config["ssl.ca.location"] = tls.ca
        if tls.cert:
            config["ssl.certificate.location"] = tls.cert
        if tls.key:
            config["ssl.key.location"] = tls.key
        config["ssl.endpoint.identification.algorithm"] = "https" if tls.verify_hostname else "none"
    if security.mechanism is not None:
        assert security.password is not None
        config.update({"sasl.mechanism": security.mechanism, "sasl.username": security.user or "",
                       "sasl.password": security.password.reveal()})
    return config


SECRET_PROPERTIES = ("sasl.password",)


def _quiet_logger() -> logging.Logger:
    """librdkafka logs to stderr by default, which garbles the dashboard; its errors reach
    streambench as delivery and consume errors."""
    logger = logging.getLogger("streambench.librdkafka")
    logger.propagate = False
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    return logger


def _wake(loop: asyncio.AbstractEventLoop, callback: Any, *args: Any) -> None:
    """From a client thread: run callback on the loop (a closed loop means the run is over)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)


def _kafka() -> Any:
    try:
        import confluent_kafka
    except ImportError:
        raise DriverError("client=librdkafka needs the confluent-kafka package "
                          "(pip install confluent-kafka)") from None
    return confluent_kafka


def _failure(error: Any) -> str:
    name = error.name() if hasattr(error, "name") else type(error).__name__
    text = error.str() if hasattr(error, "str") else str(error)
    return f"{name}: {text}" if text and text != name else name


def _take(client: Any) -> list[Any]:
    """What the consumer has: wait up to RECEIVE_TIMEOUT_S for one message, then take what
    else is queued without waiting (consume() with a timeout would wait for READ_LIMIT
    messages or the whole timeout, which would add up to 100 ms to every delivery)."""
    first = client.poll(RECEIVE_TIMEOUT_S)
    if first is None:
        return []
    return [first, *client.consume(READ_LIMIT - 1, 0)]


class _Reach:
    """Whether a librdkafka client reaches a broker. librdkafka reconnects by itself, so the
    load never sees a connection fail: its error callback (on the thread that polls) says when
    every broker is down, and the client's next answer from a broker (a delivery, a message, a
    commit) says it has one again. Each is said once, on the event loop, through the owner's
    `notice`."""

    def __init__(self) -> None:
        self.lost: float | None = None  # monotonic time every broker went down, while down
        self.owner: Producer | Consumer | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def error(self, error: Any) -> None:
        if self.lost is None and error.code() == _kafka().KafkaError._ALL_BROKERS_DOWN:
            self.lost = time.monotonic()
            self._say("connection-lost", "no broker reachable; librdkafka reconnects by itself")

    def answered(self) -> None:
        """A broker answered (only called while `lost` is set)."""
        lost, self.lost = self.lost, None
        if lost is not None:
            self._say("reconnected", f"after {time.monotonic() - lost:.1f} s")

    def committed(self, error: Any, _partitions: Any) -> None:
        if error is None and self.lost is not None:
            self.answered()

    def _say(self, kind: str, detail: str) -> None:
        if self.loop is not None:
            _wake(self.loop, self._tell, kind, detail)

    def _tell(self, kind: str, detail: str) -> None:
        notice = self.owner.notice if self.owner is not None else None
        if notice is not None:
            notice(kind, detail)


class _Batch:
    """The delivery reports one batch still awaits; its callback runs on the producer's poll
    thread (librdkafka serves reports there one by one)."""

    __slots__ = ("_done", "_error", "_left", "_loop", "_reach")

    def __init__(self, loop: asyncio.AbstractEventLoop, done: Acknowledged, count: int,
                 reach: _Reach) -> None:
        self._loop = loop
        self._done = done
        self._left = count
        self._error: BaseException | None = None
        self._reach = reach

    def delivered(self, error: Any, _message: Any) -> None:
        if error is not None and self._error is None:
            self._error = DriverError(f"message not acknowledged: {_failure(error)}")
        self._left -= 1
        if self._left == 0:
            if self._error is None and self._reach.lost is not None:
                self._reach.answered()
            _wake(self._loop, self._done, self._error)


class RdKafkaProducer(Producer):
    """One librdkafka producer. submit() queues the batch's messages in the client at once;
    the producer's poll thread wakes the loop when the last of them is answered."""

    max_in_flight = 64
    submits = True

    def __init__(self, client: Any, topic: str, partitions: list[int], reach: _Reach) -> None:
        self._client = client
        self._reach = reach
        reach.owner, reach.loop = self, asyncio.get_running_loop()
        self._topic = topic
        self._partitions = partitions
        self._next = 0
        self._closing = threading.Event()
        self._poller = threading.Thread(target=self._serve_reports, name="librdkafka-reports",
                                        daemon=True)
        self._poller.start()

    def _serve_reports(self) -> None:
        poll, closing = self._client.poll, self._closing
        while not closing.is_set():
            poll(POLL_TIMEOUT_S)

    def submit(self, batch: Sequence[OutMessage], done: Acknowledged) -> None:
        self._next = (self._next + 1) % len(self._partitions)
        sticky = self._partitions[self._next]
        report = _Batch(asyncio.get_running_loop(), done, len(batch), self._reach).delivered
        produce, topic = self._client.produce, self._topic
        for i, m in enumerate(batch):
            try:
                produce(topic, m.payload, m.key,
                        sticky if m.key is None else _PARTITION_UNASSIGNED,
                        on_delivery=report, headers=[(INTENDED_HEADER, b"%d" % m.intended_ns)])
            except BufferError:
                # the client's queue is full (it holds more than the in-flight batches need
                # only when the broker stopped answering): the rest of the batch fails
                self._refuse(batch, i, report, "the client's send queue is full")
                return
            except Exception as exc:
                if i == 0:
                    raise DriverError(f"send failed: {exc}") from None
                self._refuse(batch, i, report, str(exc))
                return

    @staticmethod
    def _refuse(batch: Sequence[OutMessage], start: int, report: Any, why: str) -> None:
        error = DriverError(f"send refused: {why}")
        for _ in range(start, len(batch)):
            report(error, None)

    async def send_batch(self, batch: Sequence[OutMessage]) -> None:
        done: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()

        def answered(error: BaseException | None) -> None:
            if not done.done():
                done.set_result(error)

        self.submit(batch, answered)
        error = await done
        if error is not None:
            raise error

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, self._client.flush, CLOSE_TIMEOUT_S)
        finally:
            self._closing.set()
            await loop.run_in_executor(None, self._poller.join, CLOSE_TIMEOUT_S)


class _LagView:
    """What the Kafka lag collector asks of a live consumer (as of an AIOKafkaConsumer): its
    assignment, a partition's high watermark and its position. librdkafka answers these on the
    consumer's own thread only (from another thread assignment() waits, holding the GIL, until
    the running consume() returns), so that thread copies them here after a consume(), at most
    every REFRESH_S, and the loop reads the copy."""

    REFRESH_S = 0.2

    def __init__(self) -> None:
        # while the consumer's partitions are paused the client fetches nothing, so its high
        # watermarks stand still: the collector then takes the group's committed lag
        self.paused = False
        self.partitions: tuple[int, ...] = ()
        self._topic = ""
        self._highwater: dict[int, int] = {}
        self._position: dict[int, int] = {}
        self._next = 0.0

    def refresh(self, client: Any, force: bool = False) -> None:
        """On the consumer's thread: copy the assignment and the offsets now and then."""
        now = time.monotonic()
        if now < self._next and not force:
            return
        self._next = now + self.REFRESH_S
        assigned = client.assignment()
        highwater: dict[int, int] = {}
        position: dict[int, int] = {}
        for tp in client.position(assigned) if assigned else ():
            self._topic = tp.topic
            if tp.offset >= 0:
                position[tp.partition] = tp.offset
            high = client.get_watermark_offsets(tp, cached=True)[1]
            if high >= 0:
                highwater[tp.partition] = high
        self._highwater, self._position = highwater, position
        self.partitions = tuple(sorted(tp.partition for tp in assigned))

    def assignment(self) -> set[TopicPartition]:
        return {TopicPartition(self._topic, p) for p in self.partitions}

    def highwater(self, tp: TopicPartition) -> int | None:
        return None if self.paused else self._highwater.get(tp.partition)

    async def position(self, tp: TopicPartition) -> int | None:
        return self._position.get(tp.partition)


# what one consume() gave: a batch (None when no message), its records' CreateTimes, the first
# error among the records
_Read = tuple[ReceivedBatch | None, list[int], DriverError | None]


class RdKafkaConsumer(Consumer):
    """One librdkafka consumer in its group, served by a thread of its own.

    librdkafka runs the group's rebalances only while the application polls the consumer, so a
    consumer the load is not reading from (just made, or paused by an intervention) must still
    be polled, or every other member's join waits for it. When no receive() came for
    IDLE_AFTER_S the thread pauses the consumer's partitions (librdkafka then fetches nothing
    and drops what it had queued for them; on resume it fetches again from the position) and
    polls on, which serves rebalances and heartbeats without reading a message: the lag the
    broker shows stays the lag of what the load has received."""

    IDLE_AFTER_S = 0.5
    IDLE_POLL_S = 0.05

    def __init__(self, client: Any, topic: str, group: str, activity: TopicActivity,
                 track_ids: bool, reach: _Reach) -> None:
        self._client = client
        self._reach = reach
        reach.owner, reach.loop = self, asyncio.get_running_loop()
        self._topic = topic
        self._group = group
        self._activity = activity
        self._track = track_ids
        self._early: list[Any] = []  # messages polled while idle, handed out first
        self._error: DriverError | None = None  # to raise at the next receive
        self._left: ReceivedBatch | None = None  # read for a receive() that was cancelled
        self._requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._paused = False
        self.assigned = threading.Event()
        self.failure: BaseException | None = None  # what ended the thread, if anything
        self._view = _LagView()
        self._thread = threading.Thread(target=self._serve, name="librdkafka-consume",
                                        daemon=True)

    def start(self) -> None:
        self._client.subscribe([self._topic], on_assign=self._on_assign)
        self._thread.start()
        self._activity.attach(self._group, self._view)

    def _on_assign(self, client: Any, partitions: Any) -> None:
        # on the consumer's thread, inside a poll
        client.assign(partitions)
        if self._paused and partitions:
            client.pause(partitions)
        self._view.refresh(client, force=True)
        self.assigned.set()

    def _pause(self, pause: bool) -> None:
        held = self._client.assignment()
        if held:
            (self._client.pause if pause else self._client.resume)(held)
        self._paused = self._view.paused = pause

    def _serve(self) -> None:
        client, requests = self._client, self._requests
        try:
            while True:
                try:
                    request = requests.get(timeout=0 if self._paused else self.IDLE_AFTER_S)
                except queue.Empty:
                    if not self._paused:
                        self._pause(True)
                    message = client.poll(self.IDLE_POLL_S)
                    if message is not None:
                        self._early.append(message)
                    self._view.refresh(client)
                    continue
                if request is None:
                    client.close()  # commits what was consumed and leaves the group
                    return
                loop, future = request
                if self._paused:
                    self._pause(False)
                try:
                    outcome: Any = self._read()
                except Exception as exc:
                    outcome = exc
                _wake(loop, self._settle, future, outcome)
        except Exception as exc:  # the client failed under the thread: receive() says so
            self.failure = exc
            self.assigned.set()

    def _settle(self, future: asyncio.Future[Any], outcome: Any) -> None:
        if future.done():  # receive() was cancelled: keep what was read for the next one
            if isinstance(outcome, tuple) and outcome[0] is not None:
                self._left = outcome[0]
                self._activity.record_createtime(outcome[0].receive_ns / 1e6, outcome[1])
            return
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)

    def partitions(self) -> tuple[int, ...] | None:
        return self._view.partitions

    def _read(self) -> _Read:
        """On the consumer's thread: one poll, what it returned as a batch, the CreateTimes
        of its records, and the first error among them."""
        messages = self._early or _take(self._client)
        self._early = []
        self._view.refresh(self._client)
        if not messages:
            return None, [], None
        if self._reach.lost is not None:
            self._reach.answered()
        receive_ns = time.time_ns()
        intended: list[int] = []
        created: list[int] = []
        ids: list[tuple[int, str]] | None = [] if self._track else None
        size = 0
        error: DriverError | None = None
        for m in messages:
            failed = m.error()
            if failed is not None:
                if error is None:
                    error = DriverError(f"consume failed: {_failure(failed)}")
                continue
            headers = m.headers()
            if headers and headers[0][0] == INTENDED_HEADER:
                intended.append(int(headers[0][1]))
            else:
                for key, value in headers or ():
                    if key == INTENDED_HEADER:
                        intended.append(int(value))
                        break
                else:
                    raise DriverError(f"record {m.topic()}/{m.partition()}@{m.offset()} has no "
                                      f"'{INTENDED_HEADER}' header: was it written by streambench?")
            kind, stamp = m.timestamp()
            if kind == _CREATE_TIME:
                created.append(stamp)
            size += len(m)  # the value's length, without copying it out
            if ids is not None:
                ids.append((m.partition(), str(m.offset())))
        if not intended:
            return None, [], error
        return ReceivedBatch(receive_ns, intended, size, ids), created, error

    async def receive(self) -> ReceivedBatch | None:
        if self._left is not None:
            left, self._left = self._left, None
            return left
        if self._error is not None:
            stashed, self._error = self._error, None
            raise stashed
        if not self._thread.is_alive():
            raise DriverError(f"consume failed: {self.failure or 'the consumer is closed'}")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_Read] = loop.create_future()
        self._requests.put((loop, future))
        batch, created, error = await future
        if batch is None:
            if error is not None:
                raise error
            return None
        self._error = error
        self._activity.record_createtime(batch.receive_ns / 1e6, created)
        return batch

    async def close(self) -> None:
        self._activity.detach(self._group, self._view)
        self._requests.put(None)
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join,
                                                         CLOSE_TIMEOUT_S)


async def producer(config: dict[str, Any], topic: str, where: str) -> RdKafkaProducer:
    """A librdkafka producer, the topic's partitions known (metadata fetched on a thread)."""
    kafka = _kafka()
    reach = _Reach()
    try:
        client = kafka.Producer({**config, "logger": _quiet_logger(), "error_cb": reach.error})
    except (kafka.KafkaException, ValueError, TypeError) as exc:
        raise DriverError(f"cannot make a librdkafka producer for {where}: {exc}") from None
    loop = asyncio.get_running_loop()
    try:
        metadata = await loop.run_in_executor(None, lambda: client.list_topics(topic, 15))
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            raise DriverError(f"cannot start a producer on {where}: topic {topic} not found")
    except kafka.KafkaException as exc:
        raise DriverError(f"cannot start a producer on {where}: {exc}") from None
    return RdKafkaProducer(client, topic, sorted(found.partitions), reach)


async def consumer(config: dict[str, Any], topic: str, group: str, index: int, where: str,
                   activity: TopicActivity, track_ids: bool, timeout_s: float) -> RdKafkaConsumer:
    """A consumer in `group`, subscribed to `topic`, returned once the group gave it its
    partitions."""
    kafka = _kafka()
    reach = _Reach()
    try:
        client = kafka.Consumer({**config, "logger": _quiet_logger(), "error_cb": reach.error,
                                 "on_commit": reach.committed})
    except (kafka.KafkaException, ValueError, TypeError) as exc:
        raise DriverError(f"cannot make a librdkafka consumer for {where}: {exc}") from None
    made = RdKafkaConsumer(client, topic, group, activity, track_ids, reach)
    made.start()
    loop = asyncio.get_running_loop()
    settled = await loop.run_in_executor(None, made.assigned.wait, timeout_s)
    if not settled or made.failure is not None:
        await made.close()
        reason = made.failure or "no partitions assigned"
        raise DriverError(f"consumer {index} of group {group} on {where} did not start: "
                          f"{reason}")
    return made
