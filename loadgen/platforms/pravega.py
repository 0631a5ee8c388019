"""Pravega driver (the `pravega` Python client, Rust underneath): a topic is a stream with a
fixed scaling policy whose segments are the workload's partitions, a subscription is a reader
group, a consumer is a reader in it. The client runs in a process of its own
(loadgen.platforms.pravega_host says why), one per driver.

Every event starts with a header (intended send time in ns, partition, producer id, producer
sequence number, the delivery audit's code), then the payload. The client's readers do not say
which segment an event came from, so the header carries the partition; producer id and number
are the event's position as the audit's examples show it.

Routing: the client maps a routing key to a segment by Pravega's own hash (Murmur3 x64-128 of
the key's UTF-16LE code units, seeded with "EventRouter".hashCode(), its top 52 bits as a
fraction in [0, 1)); with a fixed policy of N segments, segment i takes keys in [i/N, (i+1)/N).
An event with a key is routed by the key; one without goes round robin over the partitions, each
partition written with a routing key the hash places on it. The tests check the mapping against
a real standalone.

Acknowledgement: a batch is acknowledged when the writer's flush after it returns (every event
written so far is durable in the segment store). The client's only awaitable write takes str
events (UTF-8 encoded, which would change the size of binary payloads), so writes are the
blocking byte writes, on a writer thread in the client process.

A lost broker: the client itself never gives up (a flush waits as long as the segment store is
gone, a reader's next slice too), so the driver asks the broker itself. When a batch is not
acknowledged within LIVENESS_AFTER_S, or a reader has sent nothing for as long, it opens a TCP
connection to the controller (one at a time per driver); refused (the standalone was killed, or
is not started again yet), the producer fails its batches in flight with ConnectionError and
takes no more, the consumer raises ConnectionError, and the load opens new ones with a growing
pause. A new producer or consumer is refused at once while the controller refuses connections,
and re-creates the stream (and its reader group) if the broker lost them: a standalone started
again comes back empty. A paused broker still takes connections (its kernel accepts them): its
batches fail after SEND_TIMEOUT_S and go on once it is resumed.

Not offered by the client, so not by the driver: transactions, reading from a chosen position,
a consumer pause that keeps its segments (a stopped consumer's reader goes offline and its
segments move to the group's other readers).

The client is the `pravega` extra (CLIENT): only the client host processes use it, so a run
imports it once before anything starts (the stack's checks), and without it ends there with
one line naming the install command.

Settings: `broker.COMPONENT.NAME=VALUE` is a property of the local standalone's config file,
checked against the properties Pravega 0.13.0 defines (loadgen.platforms.setting_names.pravega).
`producer.NAME=VALUE` is a parameter of the client's create_writer (max_inflight_events, the one
the driver does not set otherwise); `consumer.NAME=VALUE` would be one of create_reader_group's,
each of which the driver sets itself or takes an object, so every such name is refused with why.
There is no durable profile: the standalone keeps its durable log in memory (NO_DURABLE)."""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import importlib
import itertools
import os
import random
import re
import struct
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from collectors.resources import resource_collectors
from compose.docker import file_images
from compose.java import parse_heap
from compose.pravega import (
    CONTROLLER_ENDPOINT,
    PRAVEGA_VERSION,
    SEGMENT_STORE_ENDPOINT,
    PravegaDockerStack,
    PravegaExternalStack,
    PravegaLocalStack,
    controller_answers,
)
from loadgen.core.audit import STAMP_BASE
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
from loadgen.core.platform import OptionalClient, Platform, parse_port
from loadgen.core.settings import SettingsRecord, config_option, kwargs_check, namespace, settings_of
from loadgen.core.stack import Stack, StackDescription
from loadgen.core.target import OptionSpec, Target
from loadgen.platforms.pravega_host import HEADER, WRITER_INFLIGHT, ClientHost
from loadgen.platforms.pravega_telemetry import PravegaTelemetry, reader_group_name
from loadgen.platforms.runtime import runtime_options
from loadgen.platforms.setting_names.pravega import PRAVEGA_COMPONENTS
from loadgen.platforms.tools import JAVA, MAVEN

RECEIVE_WAIT_S = 0.1
CALL_TIMEOUT_S = 30.0
MAX_IN_FLIGHT = 8
SEND_TIMEOUT_S = 10.0  # a batch not acknowledged by then fails (the client itself waits on)
LIVENESS_AFTER_S = 0.5  # a batch unanswered, or a reader silent, this long: is the broker there?
LIVENESS_PROBE_S = 1.0  # how long the TCP connection to the controller may take
# the `pravega` package (Apache-2.0, a Rust wheel), which only the `pravega` extra installs
CLIENT = OptionalClient(module="pravega_client", what="the Pravega Python client pravega (Apache-2.0)",
                        extra="pravega")


def check_client() -> None:
    """Import the client once, in this process, before anything starts: the client host
    processes would otherwise fail on it only after the broker is up."""
    try:
        importlib.import_module(CLIENT.module)
    except ImportError as exc:
        raise TargetError(CLIENT.unavailable("pravega", exc)) from None

# ---- routing ----------------------------------------------------------------------------------

_M64 = (1 << 64) - 1
_C1 = 0x87C37B91114253D5
_C2 = 0x4CF5AD432745937F


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _fmix(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & _M64
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & _M64
    return k ^ (k >> 33)


def murmur3_x64_128_low(data: bytes, seed: int) -> int:
    """The first 64 bits (h1) of MurmurHash3 x64-128, as Guava's asLong() reads them."""
    h1 = h2 = seed & _M64
    n = len(data)
    blocks = n // 16
    for i in range(blocks):
        k1 = int.from_bytes(data[16 * i:16 * i + 8], "little")
        k2 = int.from_bytes(data[16 * i + 8:16 * i + 16], "little")
        h1 ^= (_rotl((k1 * _C1) & _M64, 31) * _C2) & _M64
        h1 = (((_rotl(h1, 27) + h2) & _M64) * 5 + 0x52DCE729) & _M64
        h2 ^= (_rotl((k2 * _C2) & _M64, 33) * _C1) & _M64
        h2 = (((_rotl(h2, 31) + h1) & _M64) * 5 + 0x38495AB5) & _M64
    rest = data[16 * blocks:]
    if len(rest) > 8:
        h2 ^= (_rotl((int.from_bytes(rest[8:], "little") * _C2) & _M64, 33) * _C1) & _M64
    if rest:
        h1 ^= (_rotl((int.from_bytes(rest[:8], "little") * _C1) & _M64, 31) * _C2) & _M64
    h1 ^= n
    h2 ^= n
    h1 = (h1 + h2) & _M64
    h2 = (h2 + h1) & _M64
    h1, h2 = _fmix(h1), _fmix(h2)
    return (h1 + h2) & _M64


def _java_string_hash(text: str) -> int:
    h = 0
    for ch in text:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


ROUTER_SEED = _java_string_hash("EventRouter")


def key_fraction(key: str) -> float:
    """Where Pravega places a routing key in the key space [0, 1)."""
    bits = (murmur3_x64_128_low(key.encode("utf-16-le"), ROUTER_SEED) >> 12) & ((1 << 52) - 1)
    return float(struct.unpack("<d", struct.pack("<Q", 0x3FF0000000000000 | bits))[0] - 1.0)


def segment_of(key: str, segments: int) -> int:
    """The segment of a stream with a fixed policy of `segments` that takes `key`."""
    return min(int(key_fraction(key) * segments), segments - 1)


def partition_keys(partitions: int) -> list[str]:
    """A routing key per partition, each one hashing onto its partition's segment."""
    keys: list[str | None] = [None] * partitions
    left = partitions
    for n in itertools.count():
        key = f"p{n}"
        p = segment_of(key, partitions)
        if keys[p] is None:
            keys[p] = key
            left -= 1
            if left == 0:
                return [k for k in keys if k is not None]
    raise AssertionError("unreachable")


# ---- names ------------------------------------------------------------------------------------

def parse_scope(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.-]*", text) or len(text) > 200:
        raise ValueError("expected a Pravega scope name: letters, digits, '.' and '-'")
    return text


# ---- a lost broker ------------------------------------------------------------------------------

class Liveness:
    """Whether the broker still takes connections, asked when a client has waited longer than it
    should: one TCP connection to the controller at a time per driver, its answer shared by
    every client that asks meanwhile. "" while it answers, else why not."""

    def __init__(self, controller: str) -> None:
        self.controller = controller
        self._probe: asyncio.Task[str] | None = None
        self._answered = 0.0  # when the last probe ended

    def check(self, max_age_s: float = LIVENESS_AFTER_S) -> asyncio.Future[str]:
        """The probe under way, or a new one; an answer younger than max_age_s is reused (a
        paused broker's kernel queues every connection until the broker accepts it)."""
        probe = self._probe
        if probe is None or (probe.done() and time.monotonic() - self._answered >= max_age_s):
            probe = self._probe = asyncio.get_running_loop().create_task(self._ask())
        return asyncio.shield(probe)

    async def _ask(self) -> str:
        try:
            return await controller_answers(self.controller, LIVENESS_PROBE_S)
        finally:
            self._answered = time.monotonic()

    def lost(self, why: str) -> ConnectionError:
        return ConnectionError(f"the Pravega controller at {self.controller} does not take "
                               f"connections: {why}")

    async def ensure(self) -> None:
        """Raise ConnectionError at once while the controller refuses connections (a new client
        would otherwise wait on it inside the client process); a fresh answer, not one from
        before the broker was started again."""
        why = await self.check(max_age_s=0.0)
        if why:
            raise self.lost(why)

    def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()


# ---- producer ---------------------------------------------------------------------------------

class PravegaProducer(Producer):
    """One event writer in the client process; batches are handed over without a task each."""

    max_in_flight = MAX_IN_FLIGHT
    submits = True

    def __init__(self, host: ClientHost, wid: int, scope: str, stream: str, partitions: int,
                 liveness: Liveness) -> None:
        self._host = host
        self._wid = wid
        self._liveness = liveness
        # batches handed over and not answered yet: when each was, and how to fail it
        self._in_flight: dict[int, tuple[float, Any]] = {}
        self._batches = itertools.count()
        self._watch: asyncio.TimerHandle | None = None
        self._checking = False
        self._lost: ConnectionError | None = None
        self._scope = scope
        self._stream = stream
        self._partitions = partitions
        self._keys = partition_keys(partitions)
        self._id = random.getrandbits(63)
        self._seq = 0
        self._next = 0
        self._key_cache: dict[bytes, tuple[int, str]] = {}
        self._closed = False

    def _route(self, key: bytes | None) -> tuple[int, str]:
        if key is None:
            p = self._next
            self._next = (p + 1) % self._partitions
            return p, self._keys[p]
        found = self._key_cache.get(key)
        if found is None:
            text = key.decode("latin-1")
            found = (segment_of(text, self._partitions), text)
            if len(self._key_cache) < 100_000:
                self._key_cache[key] = found
        return found

    def submit(self, batch: Sequence[OutMessage], done: Acknowledged) -> None:
        if self._lost is not None:
            raise self._lost
        if self._closed:
            raise DriverError("the producer is closed")
        if self._host.gone:
            raise ConnectionError(self._host.gone)
        events: list[bytes] = []
        keys: list[str] = []
        pack = HEADER.pack
        for m in batch:
            p, routing = self._route(m.key)
            self._seq += 1
            code, intended = divmod(m.intended_ns, STAMP_BASE)
            events.append(pack(intended, p, self._id, self._seq, code) + m.payload)
            keys.append(routing)
        loop = asyncio.get_running_loop()
        settled = False
        token = next(self._batches)

        def settle(error: BaseException | None) -> None:
            nonlocal settled
            if not settled:
                settled = True
                timer.cancel()
                self._in_flight.pop(token, None)
                done(error)

        def answer(error: str, _result: Any) -> None:
            if error and error == self._host.gone:  # the client process ended
                loop.call_soon(settle, ConnectionError(error))
            else:
                loop.call_soon(settle, DriverError(error) if error else None)

        # a broker that stops answering leaves the flush waiting: the batch fails after a while
        timer = loop.call_later(SEND_TIMEOUT_S, settle, DriverError(
            f"messages not acknowledged within {SEND_TIMEOUT_S:g} s"))
        self._in_flight[token] = (time.monotonic(), settle)
        if self._watch is None:
            self._watch = loop.call_later(LIVENESS_AFTER_S, self._overdue)
        self._host.post("write", (self._wid, events, keys), answer)

    def _overdue(self) -> None:
        """While batches are in flight: when the oldest has waited LIVENESS_AFTER_S, ask whether
        the broker still takes connections."""
        self._watch = None
        if not self._in_flight or self._lost is not None or self._closed:
            return
        oldest = min(at for at, _settle in self._in_flight.values())
        waited = time.monotonic() - oldest
        loop = asyncio.get_running_loop()
        if waited < LIVENESS_AFTER_S:
            self._watch = loop.call_later(LIVENESS_AFTER_S - waited, self._overdue)
            return
        if not self._checking:
            self._checking = True
            self._liveness.check().add_done_callback(self._checked)
        # a broker that answers but does not acknowledge (paused): asked again after as long
        self._watch = loop.call_later(LIVENESS_AFTER_S, self._overdue)

    def _checked(self, probe: asyncio.Future[str]) -> None:
        self._checking = False
        why = "" if probe.cancelled() or probe.exception() is not None else probe.result()
        if why and self._lost is None and not self._closed:
            self._lose(self._liveness.lost(why))

    def _lose(self, error: ConnectionError) -> None:
        """The broker is gone: every batch in flight fails now, and no more are taken."""
        self._lost = error
        for _at, settle in list(self._in_flight.values()):
            settle(error)

    async def send_batch(self, batch: Sequence[OutMessage]) -> None:
        finished: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()

        def done(error: BaseException | None) -> None:
            if not finished.done():
                finished.set_result(error)

        self.submit(batch, done)
        error = await finished
        if error is not None:
            raise error

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._watch is not None:
                self._watch.cancel()
            if self._lost is None:  # a lost broker has nothing to flush to
                with contextlib.suppress(DriverError, TimeoutError):
                    await self._host.call("close_writer", self._wid, timeout_s=2.0)
            await self._host.close(grace_s=0.5 if self._lost is None else 0.0)


# ---- consumer ---------------------------------------------------------------------------------

class PravegaConsumer(Consumer):
    """A reader in the client process, which sends what it reads as it reads it."""

    def __init__(self, host: ClientHost, rid: int, liveness: Liveness,
                 on_lost: Callable[[], None] = lambda: None) -> None:
        self._host = host
        self._rid = rid
        self._liveness = liveness
        # its connection lost: the driver's note that the group's next reader takes it offline
        # (the broker may still be there, beyond a network partition)
        self._on_lost = on_lost
        self._inbox: deque[Any] = deque()
        self._arrived = asyncio.Event()
        self._heard = time.monotonic()  # the last batch (or error) from the reader
        self._probe: asyncio.Future[str] | None = None
        self._lost: ConnectionError | None = None
        host.subscribe(rid, self._deliver)

    def _deliver(self, item: Any) -> None:
        self._inbox.append(item)
        self._heard = time.monotonic()
        self._arrived.set()

    def _silent(self) -> None:
        """Nothing read for LIVENESS_AFTER_S: ask (in the background) whether the broker still
        takes connections; the answer is looked at by the next receive."""
        probe = self._probe
        if probe is not None and probe.done():
            self._probe = None
            why = "" if probe.cancelled() or probe.exception() is not None else probe.result()
            if why:
                self._lost = self._liveness.lost(why)
                self._on_lost()
                raise self._lost
            self._heard = time.monotonic()  # it answers: ask again after as long
        elif probe is None and time.monotonic() - self._heard >= LIVENESS_AFTER_S:
            self._probe = self._liveness.check()

    async def receive(self) -> ReceivedBatch | None:
        if self._lost is not None:
            raise self._lost
        if not self._inbox:
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), RECEIVE_WAIT_S)
            if not self._inbox:
                self._silent()
                return None
        item = self._inbox.popleft()
        if isinstance(item, str):
            if item == self._host.gone:  # the client process ended
                self._on_lost()
                raise ConnectionError(item)
            raise DriverError(item)
        self._host.tell("take", self._rid)  # its slice may be released now
        receive_ns, intended, size, ids = item
        return ReceivedBatch(receive_ns, intended, size, ids)

    async def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
        if self._lost is None:  # a reader of a lost broker cannot go offline there
            with contextlib.suppress(DriverError, TimeoutError):  # the group notices a gone reader itself
                await self._host.call("close_reader", self._rid, timeout_s=3.0)
        await self._host.close(grace_s=0.5 if self._lost is None else 0.0)


# ---- driver -----------------------------------------------------------------------------------

class PravegaDriver(Driver):
    def __init__(self, controller: str, scope: str, version: str = "", target: Target | None = None,
                 desc: StackDescription | None = None) -> None:
        self._target = target
        self._desc = desc
        self._controller = controller
        self._scope = scope
        self._version = version
        self._host: ClientHost | None = None
        self._partitions: dict[str, int] = {}
        self._groups: dict[str, list[str]] = {}
        self._ids = itertools.count()
        self._liveness = Liveness(controller)
        # reader group → its readers closed after their connection was lost (PravegaConsumer)
        self._stale: dict[str, set[str]] = {}

    async def connect(self) -> None:
        why = await controller_answers(self._controller)
        if why:
            raise DriverError(f"cannot reach the Pravega controller at {self._controller}: {why}")
        host = ClientHost(self._controller)
        await host.start()
        self._host = host

    def version(self) -> str:
        return self._version

    async def settings_in_force(self) -> dict[str, dict[str, Any]]:
        """What the standalone's config file holds (streambench's settings and the target's
        `broker.` ones), as written: neither the controller nor the segment store tells its
        configuration over the network."""
        if self._target is None:
            return {}
        record = SettingsRecord(self._target)
        written = dict(self._desc.broker_settings) if self._desc is not None else {}
        record.add("broker", written, read_back=False, streambench=written)
        # the writers' and reader groups' parameters that are not per client (names)
        record.add("producer", self._writer_kwargs(), read_back=False,
                   streambench=["max_inflight_events"])
        record.add("consumer", {"read_from_tail": False}, read_back=False,
                   streambench=["read_from_tail"])
        record.add_requested()
        return record.result()

    def _writer_kwargs(self) -> dict[str, Any]:
        """create_writer's keyword arguments: streambench's, then the `producer.` settings."""
        given = settings_of(self._target, "producer") if self._target is not None else {}
        return {"max_inflight_events": WRITER_INFLIGHT, **given}

    def _client(self) -> ClientHost:
        if self._host is None:
            raise DriverError("not connected to Pravega")
        return self._host

    def adopt_topic(self, name: str, partitions: int) -> None:
        self._partitions[name] = partitions

    async def create_topic(self, name: str, partitions: int, subscriptions: list[str]) -> None:
        self.adopt_topic(name, partitions)
        groups = [reader_group_name(name, s) for s in subscriptions]
        try:
            await self._client().call("create_topic", self._scope, name, partitions, groups)
        except (DriverError, TimeoutError) as exc:
            raise DriverError(f"cannot create stream {self._scope}/{name} with {partitions} "
                              f"segments: {exc}") from None
        self._groups[name] = groups

    async def delete_topic(self, name: str) -> None:
        with contextlib.suppress(DriverError, TimeoutError):
            await self._client().call("delete_topic", self._scope, name, self._groups.pop(name, []))

    async def _own_host(self) -> ClientHost:
        """A client host for one producer or consumer (see loadgen.platforms.pravega_host); refused
        at once while the controller does not take connections."""
        self._client()
        await self._liveness.ensure()
        host = ClientHost(self._controller)
        await host.start()
        return host

    async def producer(self, topic: str, index: int) -> Producer:
        wid = next(self._ids)
        host = await self._own_host()
        partitions = self._partitions.get(topic, 1)
        try:
            await host.call("writer", wid, self._scope, topic, partitions, self._writer_kwargs())
        except (DriverError, TimeoutError) as exc:
            await host.close(grace_s=0.5)
            raise DriverError(f"cannot create a writer on {self._scope}/{topic}: {exc}") from None
        return PravegaProducer(host, wid, self._scope, topic, partitions, self._liveness)

    async def consumer(self, topic: str, subscription: str, index: int, track_ids: bool) -> Consumer:
        group = reader_group_name(topic, subscription)
        rid = next(self._ids)
        name = f"{subscription}-{index}-{os.getpid()}-{rid}"
        host = await self._own_host()
        stale = self._stale.setdefault(group, set())
        offline = tuple(sorted(stale))
        try:
            await host.call("reader", rid, self._scope, topic, self._partitions.get(topic, 1), group,
                            name, track_ids, offline)
        except (DriverError, TimeoutError) as exc:
            await host.close(grace_s=0.5)
            raise DriverError(f"cannot join reader group {group} of {self._scope}/{topic}: {exc}") from None
        stale.difference_update(offline)
        return PravegaConsumer(host, rid, self._liveness, lambda: stale.add(name))

    async def close(self) -> None:
        self._liveness.close()
        host, self._host = self._host, None
        if host is not None:
            await host.close()


# ---- the platform -----------------------------------------------------------------------------

def _stack(target: Target) -> Stack:
    check_client()  # before anything starts
    if target.runtime == "external":
        return PravegaExternalStack(target, target.label)
    if target.runtime == "docker":
        return PravegaDockerStack(target, target.label)
    return PravegaLocalStack(target, target.label)


def _driver(target: Target, desc: StackDescription) -> Driver:
    return PravegaDriver(desc.endpoints[CONTROLLER_ENDPOINT], str(target.options["scope"]), desc.version,
                         target, desc)


# ---- settings ---------------------------------------------------------------------------------

_NOT_READ = {
    "controller": "a Pravega controller reads controller.* from Java system properties or its own "
                  "controller.config.properties, not from the standalone's file; the standalone's "
                  "controller is configured by the emulator (singlenode.*)",
    "bookkeeper": "the standalone runs no BookKeeper: its durable log is in memory",
}
# the components the standalone reads from its file: its own, and the segment store's
_COMPONENTS = {c: names for c, names in PRAVEGA_COMPONENTS.items() if c not in _NOT_READ}
_KNOWN = sorted(f"{c}.{n}" for c, names in _COMPONENTS.items() for n in names)
_LISTENERS_OFF = "the standalone's REST and admin listeners are off (streambench uses neither)"
_SEGMENT_STORE = "the segment store listens on 127.0.0.1, on pravega:segment_store_port=N"
_BROKER_SET_BY_STREAMBENCH = {
    "singlenode.zk.port": "the standalone's ZooKeeper is on a free loopback port",
    "singlenode.controller.rpc.port": "use pravega:port=N",
    "singlenode.segmentStore.port": "use pravega:segment_store_port=N",
    **{k: _LISTENERS_OFF for k in (
        "singlenode.controller.rest.enable", "singlenode.controller.rest.port",
        "singlenode.admin.gateway.enable", "singlenode.admin.gateway.port",
        "pravegaservice.admin.gateway.enable", "pravegaservice.admin.gateway.port",
        "pravegaservice.rest.listener.enable", "pravegaservice.rest.listener.host",
        "pravegaservice.rest.listener.port")},
    **{k: _SEGMENT_STORE for k in (
        "pravegaservice.service.listener.port", "pravegaservice.service.published.port",
        "pravegaservice.service.listener.host.nameOrIp",
        "pravegaservice.service.published.host.nameOrIp")},
    "pravegaservice.zk.connect.uri": "the segment store uses the standalone's own ZooKeeper",
}
# what the emulator itself fixes
_FIXED = {
    "pravegaservice.container.count": "the emulator gives the controller and the segment store "
                                      "the same count; the file would change the segment store's only",
    "pravegaservice.dataLog.impl.name": _NOT_READ["bookkeeper"],
}


def check_broker(name: str, raw: str) -> tuple[str, str]:
    """`broker.COMPONENT.NAME`: a property the standalone reads from its config file
    (loadgen.platforms.setting_names.pravega), not one streambench sets itself."""
    if name in _BROKER_SET_BY_STREAMBENCH:
        raise ValueError(f"{name} is set by streambench: {_BROKER_SET_BY_STREAMBENCH[name]}")
    if name in _FIXED:
        raise ValueError(f"{name} is fixed by the standalone: {_FIXED[name]}")
    component, _, rest = name.partition(".")
    if component in _NOT_READ and rest in PRAVEGA_COMPONENTS[component]:
        raise ValueError(f"{name}: {_NOT_READ[component]}")
    if rest not in _COMPONENTS.get(component, ()):
        close = difflib.get_close_matches(name, _KNOWN, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ValueError(f"not a property of the Pravega {PRAVEGA_VERSION} standalone{hint}")
    value = raw.strip()
    if "\n" in value or "\r" in value:
        raise ValueError("a value is one line")
    return name, value


NO_DURABLE = ("the Pravega standalone keeps its durable log (tier 1) and its long-term storage in "
              "memory (LocalPravegaEmulator starts no BookKeeper), so no write reaches a disk to be "
              "fsynced: there is no durable profile; on a Pravega cluster with BookKeeper "
              "(pravega@tcp://HOST:9090) the bookies sync each write to their journal (BookKeeper's "
              "default)")


def _no_profile(name: str) -> str:
    if name == "durable":
        raise ValueError(NO_DURABLE)
    raise ValueError("the Pravega standalone has no profiles (durable: its log is in memory)")


# the parameters of the client's (pravega 0.3.8) StreamManager.create_writer and
# create_reader_group, with their defaults, written out so that settings are checked without the
# client installed; a test compares them with the client's own signatures
WRITER_PARAMETERS: dict[str, Any] = {"scope_name": None, "stream_name": None,
                                     "max_inflight_events": 0}
READER_GROUP_PARAMETERS: dict[str, Any] = {"reader_group_name": None, "scope_name": None,
                                           "stream_name": None, "read_from_tail": False,
                                           "stream_cut": None}
_CLIENT_SET_BY_STREAMBENCH = {
    "scope_name": "use pravega:scope=NAME", "stream_name": "a stream per topic of the run",
    "reader_group_name": "one reader group per topic and subscription",
    "read_from_tail": "a reader group starts at the stream's head, so nothing written before "
                      "its readers join is missed",
}
_CLIENT_UNSETTABLE = {"stream_cut": "it takes a StreamCut object (a position to read from, "
                                    "which streambench does not offer)"}
_check_writer = kwargs_check(WRITER_PARAMETERS, "the Pravega client's create_writer",
                             controlled=_CLIENT_SET_BY_STREAMBENCH, unsettable=_CLIENT_UNSETTABLE)
check_consumer = kwargs_check(READER_GROUP_PARAMETERS, "the Pravega client's create_reader_group",
                              controlled=_CLIENT_SET_BY_STREAMBENCH, unsettable=_CLIENT_UNSETTABLE)


def check_producer(name: str, raw: str) -> tuple[str, Any]:
    """`producer.NAME`: a keyword argument of the client's create_writer."""
    keyword, value = _check_writer(name, raw)
    if keyword == "max_inflight_events" and value < 0:
        raise ValueError("expected a whole number of at least 0")
    return keyword, value


def _collectors(target: Target, desc: StackDescription, topic: str, partitions: int,
                subscriptions: list[str]) -> list[Collector]:
    found: list[Collector] = [PravegaTelemetry(desc.endpoints[CONTROLLER_ENDPOINT],
                                               str(target.options["scope"]), topic, partitions,
                                               subscriptions)]
    found[:0] = resource_collectors(target, desc)
    return found


PLATFORMS = [
    Platform(
        name="pravega",
        summary="Pravega (a standalone from its Maven Central jars, or a cluster); a topic is a stream "
                "with a fixed segment per partition, a subscription is a reader group",
        options={
            "scope": OptionSpec("Pravega scope of the streams", default="streambench", parse=parse_scope),
            "heap": OptionSpec("JVM heap of the standalone (direct memory: the same)", default="512m",
                               parse=parse_heap),
            "port": OptionSpec("loopback controller port of the standalone (default: a free one)",
                               default=0, parse=parse_port),
            "segment_store_port": OptionSpec("loopback segment store port of the standalone "
                                             "(default: a free one)", default=0, parse=parse_port),
            **runtime_options(("docker", "local")),
            "broker": namespace("broker.COMPONENT.NAME=VALUE: a property of the local standalone's "
                                "config file (singlenode.*, pravegaservice.*, writer.*, …; e.g. "
                                "broker.writer.flush.threshold.milliseconds=1000)", check_broker,
                                broker=True),
            "producer": namespace("producer.NAME=VALUE: a keyword argument of the client's "
                                  "create_writer: producer.max_inflight_events=N, the events a "
                                  "writer has in flight before a write waits for the oldest one's "
                                  "acknowledgement (streambench: 10000; 0, the client's default, "
                                  "acknowledges each event before the next is written)",
                                  check_producer),
            "consumer": namespace("consumer.NAME=VALUE: a keyword argument of the client's "
                                  "create_reader_group; streambench sets each one itself "
                                  "(read_from_tail=false: from the stream's head) or it takes an "
                                  "object, so none can be given", check_consumer),
            "profile": OptionSpec("named set of settings: none for the standalone (durable: its "
                                  "log is in memory)", default=None, parse=_no_profile),
            "config": config_option(),
        },
        runtimes=("docker", "local", "external"),
        broker_settings_runtimes=("docker", "local"),
        address_example="tcp://HOST:9090",
        make_stack=_stack,
        docker_images=file_images("pravega.yml"),
        lag_per_partition=True, keyed=True,
        # the controller, and the segment store, whose published address is the proxy's
        proxied_endpoints=(CONTROLLER_ENDPOINT, SEGMENT_STORE_ENDPOINT),
        advertised_endpoints=(SEGMENT_STORE_ENDPOINT,), proxied_runtimes=("local",),
        make_driver=_driver,
        make_collectors=_collectors,
        optional_client=CLIENT,
        prerequisites=(JAVA, MAVEN),
    ),
]
