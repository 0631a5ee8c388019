"""One target's load: its stack, driver, paced producers, consumers, collectors and the
counters and histograms of the current interval. It runs in a worker process of its own
(loadgen/worker.py), so targets side by side never share an event loop."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from compose.toxiproxy import VERSION, Toxiproxy, split_endpoint
from loadgen.core.acklog import AckLog
from loadgen.core.audit import PRODUCER_MASK, SEQ_STEP, STAMP_BASE, AuditLedger, ProducerRecord
from loadgen.core.bus import BusItem
from loadgen.core.collector import Collector, Reading
from loadgen.core.driver import Consumer, Driver, OutMessage, Producer, ReceivedBatch
from loadgen.core.errors import StackError
from loadgen.core.events import RunEvent
from loadgen.core.histogram import Histogram
from loadgen.core.interventions import PROXIED_OPTION, Intervention
from loadgen.core.stack import Stack, StackContext, StackDescription
from loadgen.core.target import Target
from loadgen.core.ticks import (
    BrokerMetricValues,
    ConsumerStat,
    NodeClock,
    NodeStat,
    Phase,
    RawSamples,
    Resources,
    Tick,
)
from loadgen.core.workload import Workload
from loadgen.pacing import Schedule, TimerHandle, precise_call_at
from loadgen.placement import place
from loadgen.platforms import PLATFORMS
from loadgen.selfwatch import SelfWatch

READY_TIMEOUT_S = 60.0
READY_TIMEOUT_ENV = "STREAMBENCH_READY_TIMEOUT"  # seconds; slow machines, or tests of the time-out
PACED_BATCH_LIMIT = 2000
MAX_RATE_BATCH = 256
MAX_RATE_BATCH_BYTES = 1 << 20  # large messages go in smaller batches at maximum rate
# send-error events in one spell of failing sends (each a different error)
SEND_ERRORS_SAID = 5
# how a rate change that dropped slots says so (a worker process's answer, summed over them)
DROPPED_SLOTS = "slots owed at the old rate dropped"


def dropped_slots(detail: str) -> int:
    """The slots a rate change's text says it dropped (`…; 1,200 slots owed at the old rate
    dropped`); 0 when it dropped none."""
    if not detail.endswith(DROPPED_SLOTS):
        return 0
    return int(detail.rpartition("; ")[2].split(" ", 1)[0].replace(",", ""))
# a client whose connection was lost is opened again after this pause, doubling up to the max
RECONNECT_FIRST_S = 0.1
# receive errors are said once per kind: the first this many characters of `Type: message`
RECEIVE_ERROR_KEY = 40
RECONNECT_MAX_S = 0.5  # small: it adds to the recovery time measured after a restart

Publish = Callable[[BusItem], None]


def _key_source(distributor: str) -> Callable[[int], bytes] | None:
    """The key of message n, or None for unkeyed messages (NO_KEY)."""
    if distributor == "KEY_ROUND_ROBIN":
        return lambda n: str(n % 10_000).encode()
    if distributor == "RANDOM_NANO":
        return lambda n: str(time.perf_counter_ns()).encode()
    return None


def _nan_if_none(x: float | None) -> float:
    return float("nan") if x is None else float(x)


def subscription_names(count: int) -> list[str]:
    """The subscriptions (consumer groups) of each topic."""
    return [f"streambench-sub-{s}" for s in range(count)]

_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def _resident_bytes() -> int:
    """This process's resident memory (Linux /proc; 0 where it cannot be read)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE_BYTES
    except (OSError, IndexError, ValueError):
        return 0


# the share of the process that owns a target's stack and runs none of its clients (they run
# on a cluster's nodes: loadgen.cluster)
STACK_ONLY = (0, 0)


@dataclass
class TargetTotals:
    """A target's counters at the end of the run."""

    label: str
    produced: int = 0
    consumed: int = 0
    send_errors: int = 0
    receive_errors: int = 0
    consumers_failed: int = 0  # consumers that ended on an unexpected error (no more reads)
    # with the delivery audit (loadgen.core.audit): messages read again and messages read after
    # a later one of their producer in their partition, as found so far (live, per tick); the
    # verdict at the end (`audit`) counts them over every process
    duplicates: int = 0
    reordered: int = 0
    expected: int = 0  # produced × subscriptions: what the consumers must have read
    final_lag: int | None = None
    drained: bool = False
    # acknowledged messages the drain found gone: the broker showed nothing left to read and
    # nothing came for LOSS_AFTER_S (loadgen.run) with these unread (a broker that lost them)
    lost: int = 0
    # a search for the highest sustainable rate (--max-rate=search): its result, the
    # acknowledged msg/s over the measured periods that kept up, and whether it converged
    sustainable_rate: float | None = None
    search_converged: bool | None = None
    # the delivery audit's verdict (loadgen.core.audit.Verdict.to_json, with `windows`: one
    # per fault window)
    audit: dict[str, Any] | None = None


class LoadHandle(Protocol):
    """What the run loop drives for one target: the in-process TargetLoad and the coordinator's
    proxy to worker processes (loadgen.worker.TargetWorker) both are one."""

    label: str
    totals: TargetTotals

    async def start(self, progress: Callable[[str], None]) -> None: ...

    def describe(self) -> dict[str, Any]: ...

    def start_load(self, t0_mono: int, t0_wall: int, end_mono: int) -> None: ...

    def stop_producing_at(self, end_mono: int) -> None: ...

    async def stop_producers(self) -> None: ...

    async def fault(self, action: str, broker: str) -> None: ...

    async def network_fault(self, item: Intervention) -> str: ...

    async def collect_audit(self) -> AuditLedger | None:
        """The delivery audit's records so far (every process's, merged); None without it."""
        ...

    async def control(self, item: Intervention) -> str:
        """Change the load (rate, producers or consumers stopped or started); returns what
        changed, as `old → new`."""
        ...

    async def tick(self, seq: int, time_ns: int, phase: Phase, elapsed_s: float) -> Tick:
        """Close the interval and return its Tick; raw samples, when recorded, are published
        on the bus before it returns."""
        ...

    async def close(self) -> None: ...


class TargetLoad:
    """One target's stack, driver, producers, consumers, collectors and interval counters.

    A target can spread its load over several processes (`share` = (this one, how many)): the
    first owns the stack, the topics and the collectors; every process runs the producers and
    consumers whose number modulo the count is its own. On a cluster (loadgen.cluster) the
    clients run in actors that are not primary, and the local process that owns the stack
    takes the share STACK_ONLY: no clients of its own."""

    def __init__(self, index: int, label: str, target: Target, workload: Workload, run_id: str,
                 record_raw: bool, audit: bool, publish: Publish,
                 share: tuple[int, int] = (0, 1), log_dir: Path | None = None,
                 primary: bool | None = None) -> None:
        self.index = index
        self.share, self.shares = share
        self._log_dir = log_dir
        self.primary = self.share == 0 if primary is None else primary
        self.label = label
        self.target = target
        self.platform = PLATFORMS[target.platform]
        self.workload = workload
        self.run_id = run_id
        self.topics = [f"streambench-{run_id}-{index}-{t}" for t in range(workload.topics)]
        self._topic_index = {t: i for i, t in enumerate(self.topics)}
        self.subscriptions = subscription_names(workload.subscriptions)
        self._record_raw = record_raw
        # the delivery audit's records (loadgen.core.audit); consumers then hand over where
        # each message was read (Driver.consumer's track_ids)
        self.ledger: AuditLedger | None = AuditLedger() if audit else None
        self._track_ids = audit
        self._publish = publish
        self.stack: Stack | None = None
        self._stack_watch: asyncio.Task[None] | None = None
        self.desc: StackDescription | None = None
        # what the clients reach: the stack's description with its proxied endpoints replaced by
        # the proxies' (the same as desc without network faults)
        self.client_desc: StackDescription | None = None
        self._toxiproxy: Toxiproxy | None = None
        self.driver: Driver | None = None
        self.producers: list[Producer] = []
        self._producer_numbers: list[int] = []  # each producer's number over all processes
        self._producer_specs: list[tuple[str, int]] = []  # (topic, index) of each producer
        self._consumer_specs: list[tuple[str, str, int]] = []  # (topic, subscription, index)
        self.consumers: list[Consumer] = []
        self._slot_consumed: list[int] = []  # per consumer, in the interval
        self.collectors: list[Collector] = []
        # collectors whose latest sample failed: index → (what failed, failed samples, since ns)
        self._collector_trouble: dict[int, tuple[str, int, int]] = {}
        # the broker metrics' collector (its index in collectors) and the values it read last
        self._metrics_at: int | None = None
        self._metric_values: dict[str, dict[str, float]] = {}
        # failed sends since a tick interval last passed without one: (the error said last,
        # messages failed, since ns, errors said); None while sends succeed
        self._send_trouble: tuple[str, int, int, int] | None = None
        self._consumer_tasks: list[asyncio.Task[None]] = []
        self._pacers: list[_Pacer] = []
        self._rate = workload.rate  # aggregate msg/s over every process; 0 = maximum rate
        self._producers_paused = False
        self._stop_consuming = False
        self._consuming = asyncio.Event()  # cleared while the user has the consumers stopped
        self._consuming.set()
        self._pub = Histogram()
        self._delay = Histogram()
        self._e2e = Histogram()
        self._raw: dict[str, list[int]] = {"e2e": [], "publish": [], "delay": []}
        # this node's wall clock against the coordinator's (loadgen.clocks): receive times are
        # taken back by its offset; None on the coordinator's own clock
        self._clock: NodeClock | None = None
        self.node: tuple[str, str] | None = None  # (node id, host name) on a cluster's node
        self.split_roles = False  # producers and consumers dealt to different processes
        self._below_zero = 0  # e2e samples of the interval below zero
        # --same-node-latency: the producers whose messages are timed (this node's); None: all
        self._same_node: frozenset[int] | None = None
        self._mono_to_wall = 0
        self._clock_bound = 0  # the largest bound applied to the interval's e2e samples
        self._interval_start = time.monotonic_ns()
        self._live_before = (0, 0)  # the audit's (duplicates, reorders) at the last tick
        self._watch = SelfWatch()
        self._saturated = ""
        self._reset_interval()
        self.totals = TargetTotals(label)
        self._receive_errors_said: set[str] = set()
        self.settings: dict[str, dict[str, Any]] = {}  # in force (loadgen.core.settings)
        self._acks: dict[str, AckLog] = {}  # per topic: the producers' acknowledged positions

    def _reset_interval(self) -> None:
        self.produced = 0
        self.produced_bytes = 0
        self.consumed = 0
        self.consumed_bytes = 0
        self.errors = 0

    # ---- set-up -------------------------------------------------------------------------

    async def start(self, progress: Callable[[str], None]) -> None:
        """The first process: bring the stack up, create the topics, start the collectors,
        then its share of consumers and producers."""
        self.stack = self.platform.make_stack(self.target)
        advertised = await self._proxies_ahead(progress)
        self.stack.attach(StackContext(self.run_id, self.index, self._stack_event, self._log_dir,
                                       advertised))
        await self.stack.up(progress)
        progress(f"{self.label}: waiting for the broker to answer")
        await self.stack.ready(float(os.environ.get(READY_TIMEOUT_ENV) or READY_TIMEOUT_S), progress)
        self.desc = self.stack.describe()
        self._stack_watch = asyncio.create_task(self.stack.watch())  # brokers that die
        self.client_desc = await self._proxied(self.desc, progress)
        self.driver = self.platform.make_driver(self.target, self.client_desc)
        self.driver.expect(self.workload.message_size)
        await self.driver.connect()
        w = self.workload
        for topic in self.topics:
            await self.driver.create_topic(topic, w.partitions, self.subscriptions)
            self.collectors += self.platform.make_collectors(
                self.target, self.desc, topic, w.partitions, self.subscriptions)
        if (metrics := self.platform.broker_metrics) is not None:
            self._metrics_at = len(self.collectors)
            self.collectors.append(metrics.make_collector(self.target, self.desc, self.topics))
        self.settings = await self.driver.settings_in_force()
        for c in self.collectors:
            await c.start()
        await self._start_clients()
        progress(f"{self.label}: ready ({self.desc.runtime}, {self.desc.version or 'version unknown'})")

    async def _proxies_ahead(self, progress: Callable[[str], None]) -> dict[str, str]:
        """With network faults asked for on a stack streambench starts: the Toxiproxy and one
        proxy per proxied endpoint, before the brokers, since some brokers must be told the
        proxy's address to hand it to their clients; returns those (endpoint key → the proxy's
        HOST:PORT) for the stack (StackContext.advertised)."""
        if self.target.options.get(PROXIED_OPTION) is not True or not self.platform.proxied_endpoints:
            return {}  # not asked for, or a stack that proxies its own links (Kafka)
        self._toxiproxy = Toxiproxy(self.label)
        await self._toxiproxy.start(progress)
        links = {key: await self._toxiproxy.reserve(key) for key in self.platform.proxied_endpoints}
        return {key: links[key].listen for key in self.platform.advertised_endpoints}

    async def _proxied(self, desc: StackDescription, progress: Callable[[str], None]) -> StackDescription:
        """With network faults asked for, the proxies made before the stack forward to its
        proxied endpoints, and the description the clients get has the proxies' addresses. An
        existing cluster's address is already the user's proxy (--network-faults=URL)."""
        proxied = self.target.options.get(PROXIED_OPTION)
        if not proxied:
            return desc
        if desc.client_endpoints:  # the stack's own proxies, in front of every link
            return dataclasses.replace(desc, endpoints={**desc.endpoints, **desc.client_endpoints})
        if isinstance(proxied, str):  # an existing cluster behind the user's own Toxiproxy
            self._toxiproxy = await Toxiproxy.attach(self.label, proxied, {
                key: desc.endpoints[key] for key in self.platform.proxied_endpoints})
            return desc
        assert self._toxiproxy is not None
        endpoints = dict(desc.endpoints)
        for key in self.platform.proxied_endpoints:
            scheme, address = split_endpoint(desc.endpoints[key])
            link = await self._toxiproxy.route(key, address)
            endpoints[key] = scheme + link.listen
        links = "; ".join(f"{k} {v}" for k, v in self._toxiproxy.describe().items())
        progress(f"{self.label}: clients through Toxiproxy {VERSION}: {links}")
        return dataclasses.replace(desc, endpoints=endpoints)

    async def join(self, desc: StackDescription) -> None:
        """A further process: reach the stack the first one started, take its topics, start
        this process's share of consumers and producers."""
        self.desc = desc
        self.driver = self.platform.make_driver(self.target, desc)
        self.driver.expect(self.workload.message_size)
        await self.driver.connect()
        for topic in self.topics:
            self.driver.adopt_topic(topic, self.workload.partitions)
        await self._start_clients()

    async def _start_clients(self) -> None:
        """This process's producers and consumers, as loadgen.placement deals them."""
        assert self.driver is not None
        if (self.share, self.shares) == STACK_ONLY:
            return
        w = self.workload
        subs = len(self.subscriptions)
        mine = place(len(self.topics) * w.producers, len(self.topics) * subs * w.consumers,
                     self.shares, self.split_roles)[self.share]
        self.driver.plan(w.consumers)
        for number in mine.consumers:
            t, rest = divmod(number, subs * w.consumers)
            s, i = divmod(rest, w.consumers)
            self.consumers.append(await self.driver.consumer(self.topics[t], self.subscriptions[s],
                                                             i, self._track_ids))
            self.consumers[-1].notice = self._notice(f"consumer {i} of {self.subscriptions[s]}")
            self._consumer_specs.append((self.topics[t], self.subscriptions[s], i))
            self._slot_consumed.append(0)
        for number in mine.producers:
            t, i = divmod(number, w.producers)
            self.producers.append(await self.driver.producer(self.topics[t], i))
            self.producers[-1].notice = self._notice(f"producer {i}")
            self.producers[-1].acks = self._acks_of(self.topics[t])
            self._producer_numbers.append(number)
            self._producer_specs.append((self.topics[t], i))

    def _acks_of(self, topic: str) -> AckLog:
        """The log of acknowledged positions the producers of `topic` keep (one per topic)."""
        log = self._acks.get(topic)
        if log is None:
            log = self._acks[topic] = AckLog(self.workload.partitions)
        return log

    def describe(self) -> dict[str, Any]:
        desc = self.desc
        return {
            "label": self.label,
            "spec": self.target.spec,
            "platform": self.target.platform,
            "options": {k: v for k, v in self.target.options.items()},
            "runtime": desc.runtime if desc else self.target.runtime,
            "endpoints": desc.endpoints if desc else {},
            **({"proxies": self._toxiproxy.describe()} if self._toxiproxy is not None else
               {"proxies": desc.proxies} if desc is not None and desc.proxies else {}),
            "pids": list(desc.pids) if desc else [],
            "containers": list(desc.container_ids) if desc else [],
            "version": desc.version if desc else "",
            "config": desc.config if desc else {},
            "settings": self.settings,
            "topics": self.topics,
            "subscriptions": self.subscriptions,
            # what the broker holds for each topic, as the driver learnt it (Driver.topic_layout)
            "layout": ({t: self.driver.topic_layout(t, self.workload.partitions) for t in self.topics}
                       if self.driver is not None else {}),
            "logs": [str(p) for p in self.stack.log_files()] if self.stack is not None else [],
            # what the broker_metrics table's names are: the broker's own name of each
            **({"broker_metrics": self.platform.broker_metrics.describe()}
               if self.platform.broker_metrics is not None else {}),
        }

    async def fault(self, action: str, broker: str) -> None:
        """One fault (loadgen.core.stack.FAULTS) on one of the stack's brokers; the stack records
        it as an event."""
        if self.stack is None:
            raise StackError(f"{self.label}: no stack to {action} a broker of (not started here)")
        await self.stack.fault(action, broker)

    async def network_fault(self, item: Intervention) -> str:
        """One network fault (NETWORK_ACTIONS) on the target's proxied links; returns what it
        did, for its event. A stack with proxies of its own takes one on one broker (the
        stack's name for it in `broker`) and one side of it."""
        if self.desc is not None and self.desc.client_endpoints:
            assert self.stack is not None
            return await self.stack.network_fault(item, item.broker, item.side)
        if item.broker is not None or item.side == "peers":
            raise StackError(f"{self.label}: {item.describe()}: the proxy stands in front of "
                             "the target's client listeners, not of one broker or its peers")
        if self._toxiproxy is None:
            raise StackError(f"{self.label}: {item.describe()}: its clients do not go through a "
                             "proxy (start the run with --network-faults)")
        return await self._toxiproxy.apply(item)

    async def collect_audit(self) -> AuditLedger | None:
        # a copy: a cluster actor's reply is pickled outside this loop, whose consumers go on
        return copy.deepcopy(self.ledger)

    async def control(self, item: Intervention) -> str:
        """Change this process's share of the load; returns what changed (old → new). The run
        records it as one event for the target, whatever the number of processes."""
        if item.action == "rate":
            assert item.rate is not None
            old, new, dropped = self.set_rate(item.rate, item.drop_owed)
            text = f"{_rate_text(old)} → {_rate_text(new)}"
            return f"{text}; {dropped:,} {DROPPED_SLOTS}" if dropped else text
        if item.action == "producers":
            was = "stopped" if self._producers_paused else "running"
            if item.state == "stop":
                self.pause_producers()
            else:
                self.resume_producers()
            return f"{was} → {'stopped' if self._producers_paused else 'running'}"
        if item.action == "consumers":
            was = "running" if self._consuming.is_set() else "stopped"
            if item.state == "stop":
                self.pause_consumers()
            else:
                self.resume_consumers()
            return f"{was} → {'running' if self._consuming.is_set() else 'stopped'}"
        raise StackError(f"{self.label}: {item.describe()} is not a change of the load")

    def _stack_event(self, kind: str, detail: str) -> None:
        self._publish(RunEvent(time.time_ns(), self.label, kind, detail))

    # ---- load ---------------------------------------------------------------------------

    def _producer_count(self) -> int:
        return len(self.topics) * self.workload.producers  # over every process of the target

    def start_load(self, t0_mono: int, t0_wall: int, end_mono: int) -> None:
        self._interval_start = t0_mono
        self._mono_to_wall = t0_wall - t0_mono  # the schedule's: intended = mono + this
        self._watch.start()
        for slot in range(len(self.consumers)):
            task = asyncio.create_task(self._consume(slot))
            task.add_done_callback(partial(self._consumer_ended, slot))
            self._consumer_tasks.append(task)
        n = self._producer_count()
        per_rate = self._rate / n
        payloads = self.workload.payloads()
        for slot, (i, p) in enumerate(zip(self._producer_numbers, self.producers, strict=True)):
            # stagger producers across one slot so their sends interleave evenly
            sched = Schedule(per_rate, t0_mono, t0_wall, end_mono, stagger=i / n)
            if self._producers_paused:
                sched.pause(t0_mono)
            pacer = _Pacer(self, p, sched, payloads, slot)
            self._pacers.append(pacer)
            pacer.start()

    def stop_producing_at(self, end_mono: int) -> None:
        for p in self._pacers:
            p.sched.stop_at(end_mono)
            p.wake()

    def _sent(self, k: int, send_wall: int, error: BaseException | None) -> None:
        """A batch of k messages handed over at send_wall was acknowledged, or failed."""
        if error is not None:
            self.errors += k
            self.totals.send_errors += k
            self._send_failed(k, f"{type(error).__name__}: {error}")
            return
        latency = time.time_ns() - send_wall
        self._pub.record_n(latency, k)
        if self._record_raw:
            self._raw["publish"].extend([latency] * k)
        self.produced += k
        self.produced_bytes += k * self.workload.message_size
        self.totals.produced += k

    # ---- live changes -------------------------------------------------------------------

    def set_rate(self, rate: float, drop_owed: bool = False) -> tuple[float, float, int]:
        """Change the target's aggregate rate (msg/s over every producer of every process; 0 =
        maximum rate) now; this process's producers take their share, as at the start. Each
        schedule is re-anchored at the change: no slot dropped or bunched, intended times
        exact; with drop_owed (a rate search giving the old rate up), the slots the producers
        still owe from before the change are dropped instead. Returns (old, new, slots
        dropped)."""
        old, rate = self._rate, max(0.0, float(rate))
        at = time.monotonic_ns()
        per_rate = rate / self._producer_count()
        dropped = 0
        for p in self._pacers:
            if drop_owed:
                dropped += p.sched.forgive(at)
            p.sched.set_rate(per_rate, at)
            p.wake()
        self._rate = rate
        return old, rate, dropped

    def pause_producers(self) -> None:
        """Producers send nothing from now on (slots already due still go out) until
        resume_producers()."""
        if self._producers_paused:
            return
        self._producers_paused = True
        at = time.monotonic_ns()
        for p in self._pacers:
            p.sched.pause(at)
            p.wake()

    def resume_producers(self) -> None:
        """Producers go on from now at the rate in force, without the paused interval's slots."""
        if not self._producers_paused:
            return
        self._producers_paused = False
        at = time.monotonic_ns()
        for p in self._pacers:
            p.sched.resume(at)
            p.wake()

    def pause_consumers(self) -> None:
        """Consumers stop asking for messages once their current receive is done (what it
        returns is counted): a backlog builds on the broker."""
        if not self._consuming.is_set():
            return
        self._consuming.clear()

    def resume_consumers(self) -> None:
        if self._consuming.is_set():
            return
        self._consuming.set()

    def _notice(self, what: str) -> Callable[[str, str], None]:
        """How one client says it lost its brokers or has them back (see ConnectionNotice)."""

        def say(kind: str, detail: str) -> None:
            self._publish(RunEvent(time.time_ns(), self.label, kind, f"{what}: {detail}"))

        return say

    async def reopen(self, what: str, open_: Callable[[], Awaitable[Any]],
                     done: Callable[[], bool]) -> Any | None:
        """A new client for one whose connection was lost (the broker died, or was killed or
        restarted by a fault): tried again with a growing pause (RECONNECT_FIRST_S doubling up
        to RECONNECT_MAX_S) until it opens or `done()`; None then. One event when the
        connection is lost and one when it is back."""
        lost = time.monotonic()
        self._publish(RunEvent(time.time_ns(), self.label, "connection-lost",
                               f"{what}: reconnecting"))
        pause, attempts = RECONNECT_FIRST_S, 0
        while not done():
            await asyncio.sleep(pause)
            attempts += 1
            try:
                client = await open_()
            except asyncio.CancelledError:
                raise
            except Exception:
                pause = min(pause * 2, RECONNECT_MAX_S)
                continue
            self._publish(RunEvent(time.time_ns(), self.label, "reconnected",
                                   f"{what}: after {time.monotonic() - lost:.1f} s, "
                                   f"{attempts} attempt(s)"))
            return client
        return None

    def _consumers_stopping(self) -> bool:
        return self._stop_consuming

    def _consumer_ended(self, slot: int, task: asyncio.Task[None]) -> None:
        """A consumer's loop ended: cancelled or stopped at the end of the run, or killed by an
        error no part of the loop expected (its receive errors are caught inside). Such a
        consumer reads nothing more, so it is counted and said once, as a `consumer-failed`
        event; otherwise the run would only show its consumption stopping."""
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        self.totals.consumers_failed += 1
        topic, subscription, index = self._consumer_specs[slot]
        what = " ".join(f"{type(exc).__name__}: {exc}".split())  # one line
        self._publish(RunEvent(time.time_ns(), self.label, "consumer-failed",
                               f"consumer {index} of {subscription} (topic "
                               f"{self.topics.index(topic) if topic in self.topics else topic}): "
                               f"{what}; it reads no more messages"))

    async def _consume(self, slot: int) -> None:
        while not self._stop_consuming:
            consumer = self.consumers[slot]
            if not self._consuming.is_set():
                await self._consuming.wait()  # stopped by the user: a backlog builds
                continue
            try:
                if consumer.delivers and await self._pump(slot, consumer):
                    continue
                batch = await consumer.receive()
            except asyncio.CancelledError:
                raise
            except _CountingFailed as failed:
                raise failed.error from None  # not the read's: this consumer's task ends
            except Exception as exc:
                await self._receive_failed(slot, consumer, exc)
                continue
            if batch is not None:
                self._count(slot, batch)

    def _pump(self, slot: int, consumer: Consumer) -> asyncio.Future[bool]:
        """Reads by `consumer` one after the other, each started from the previous one's
        outcome, without waking this slot's task. Done with True when reading stops (the user
        stopped the consumers, the run ends), False when the consumer asks for receive() next,
        or with the exception that failed a read."""
        ended: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

        def outcome(result: ReceivedBatch | BaseException | None) -> None:
            if ended.done():
                return  # the task was cancelled: the run is closing
            if isinstance(result, BaseException):
                ended.set_exception(result)
                return
            if result is not None:
                try:
                    self._count(slot, result)
                except Exception as exc:
                    ended.set_exception(_CountingFailed(exc))
                    return
            if (self._stop_consuming or not self._consuming.is_set()
                    or self.consumers[slot] is not consumer):
                ended.set_result(True)
            else:
                try:
                    more = consumer.deliver(outcome)
                except Exception as exc:
                    ended.set_exception(exc)
                    return
                if not more:
                    ended.set_result(False)

        if not consumer.deliver(outcome):
            ended.set_result(False)
        return ended

    async def _receive_failed(self, slot: int, consumer: Consumer, exc: Exception) -> None:
        self.totals.receive_errors += 1
        what = f"{type(exc).__name__}: {exc}"
        # each kind of error once (the first words say which), a few kinds at most
        kind = what[:RECEIVE_ERROR_KEY]
        if kind not in self._receive_errors_said and len(self._receive_errors_said) < 5:
            self._receive_errors_said.add(kind)
            self._publish(RunEvent(time.time_ns(), self.label, "receive-error", what))
        if isinstance(exc, ConnectionError) and self.driver is not None:
            # no more reads on a dead connection: a new one, when the broker is back
            topic, subscription, index = self._consumer_specs[slot]
            fresh = await self.reopen(
                f"consumer {index} of {subscription}",
                partial(self.driver.consumer, topic, subscription, index, self._track_ids),
                self._consumers_stopping)
            if fresh is not None:
                fresh.take_over(consumer)
                self.consumers[slot] = fresh
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(consumer.close(), 5)
            return
        await asyncio.sleep(0.1)

    def set_clock(self, clock: NodeClock) -> None:
        """The latest estimate of this node's wall clock against the coordinator's: the e2e
        samples from now on are timed on the coordinator's clock through it."""
        self._clock = clock

    def time_same_node(self, producers: frozenset[int]) -> None:
        """--same-node-latency: time only the messages of these producers (those of this
        node), on this node's own clock; the audit's stamps say each message's producer."""
        if self.ledger is None:
            raise StackError("--same-node-latency needs the messages stamped with their "
                             "producer (the delivery audit)")
        self._same_node = producers

    def _count(self, slot: int, batch: ReceivedBatch) -> None:
        rn = batch.receive_ns
        clock = self._clock
        same = self._same_node
        if same is not None:
            # the receive time through this node's monotonic clock into the schedule's time
            # base, where its producers' intended times are: one clock, no offset, no bound
            rn += self._mono_to_wall - (time.time_ns() - time.monotonic_ns())
        elif clock is not None:
            rn -= clock.offset_ns
            self._clock_bound = max(self._clock_bound, clock.bound_ns)
        stamps = intended = batch.intended_ns
        if self.ledger is not None:  # the values are stamps: record them, keep their times
            topic, subscription, _ = self._consumer_specs[slot]
            where = batch.ids or [(-1, "")] * len(intended)
            intended = self.ledger.read(slot, self._topic_index[topic], subscription, intended, where)
            self.totals.duplicates, self.totals.reordered = self.ledger.live()
        if same is not None:
            intended = [t for t, v in zip(intended, stamps, strict=True)
                        if (v // STAMP_BASE) & PRODUCER_MASK in same]
        lat = [rn - t for t in intended]
        if lat and min(lat) < 0:  # recorded as 0 by the histogram, counted here
            self._below_zero += sum(1 for v in lat if v < 0)
        self._e2e.record_many(lat)
        if self._record_raw:
            self._raw["e2e"].extend(lat)
        k = len(stamps)  # every message read counts, timed or not
        self.consumed += k
        self._slot_consumed[slot] += k
        self.consumed_bytes += batch.payload_bytes
        self.totals.consumed += k

    async def stop_producers(self) -> None:
        self.stop_producing_at(time.monotonic_ns())
        await asyncio.gather(*(p.finished for p in self._pacers), return_exceptions=True)

    # ---- ticks --------------------------------------------------------------------------

    async def _sample(self) -> Reading:
        reading = Reading()
        results = await asyncio.gather(
            *(asyncio.wait_for(c.sample(), 0.9) for c in self.collectors), return_exceptions=True)
        for i, (c, r) in enumerate(zip(self.collectors, results, strict=True)):
            if isinstance(r, Reading):
                reading = reading.merge(r)
                self._collector_answered(i, c.name)
            elif isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError):
                problem = str(r) or ("no answer within 0.9 s" if isinstance(r, TimeoutError) else "")
                self._collector_failed(i, c.name, f"{type(r).__name__}: {problem}")
        return reading

    def _broker_metrics(self, reading: Reading) -> BrokerMetricValues | None:
        """The tick's broker metrics: as read now, and for each broker that did not answer
        this time the last values read, stale (the collector's trouble says why)."""
        if self._metrics_at is None:
            return None
        fresh = reading.metrics or {}
        stale = tuple(b for b in self._metric_values if b not in fresh)
        self._metric_values = {**self._metric_values, **fresh}
        trouble = self._collector_trouble.get(self._metrics_at)
        problem = trouble[0] if trouble is not None else ("not read" if stale else "")
        return BrokerMetricValues(dict(self._metric_values), stale, problem)

    def _send_failed(self, k: int, problem: str) -> None:
        """k messages failed: a send-error when sends start failing, and when they fail another
        way (at most SEND_ERRORS_SAID per spell), not for every failed batch."""
        now = time.time_ns()
        said, count, since, n_said = self._send_trouble or ("", 0, now, 0)
        if problem != said and n_said < SEND_ERRORS_SAID:
            more = ("" if n_said + 1 < SEND_ERRORS_SAID
                    else " (no other send error said until sends succeed again)")
            self._publish(RunEvent(now, self.label, "send-error", problem + more))
            said, n_said = problem, n_said + 1
        self._send_trouble = (said, count + k, since, n_said)

    def _sends_settled(self, failed: int, acknowledged: int) -> None:
        """At a tick: a send-recovered once a whole interval had acknowledgements and no
        failure (messages that fail on some partitions and not on others keep one spell)."""
        trouble = self._send_trouble
        if trouble is None or failed or not acknowledged:
            return
        self._send_trouble = None
        now = time.time_ns()
        _, count, since, _ = trouble
        self._publish(RunEvent(now, self.label, "send-recovered",
                               f"sends acknowledged again after {count:,} failed message"
                               f"{'s' if count != 1 else ''} over {(now - since) / 1e9:.1f} s"))

    def _collector_failed(self, i: int, name: str, problem: str) -> None:
        """A collector's sample failed: said when it starts failing or fails another way, not
        at every tick while it keeps failing the same way (a dead broker's telemetry)."""
        now = time.time_ns()
        said, count, since = self._collector_trouble.get(i, ("", 0, now))
        if problem != said:
            self._publish(RunEvent(now, self.label, "collector-error", f"{name}: {problem}"))
        self._collector_trouble[i] = (problem, count + 1, since)

    def _collector_answered(self, i: int, name: str) -> None:
        trouble = self._collector_trouble.pop(i, None)
        if trouble is not None:
            now = time.time_ns()
            _, count, since = trouble
            self._publish(RunEvent(now, self.label, "collector-recovered",
                                   f"{name}: answering again after {count:,} failed sample"
                                   f"{'s' if count != 1 else ''} over {(now - since) / 1e9:.1f} s"))

    async def tick(self, seq: int, time_ns: int, phase: Phase, elapsed_s: float) -> Tick:
        """Close the interval: counters and histograms since the previous tick, telemetry now.
        The interval is measured here, where the counting happens. Raw samples, when recorded,
        are published before the tick is returned."""
        mono = time.monotonic_ns()
        interval_s = (mono - self._interval_start) / 1e9
        self._interval_start = mono
        produced, produced_bytes = self.produced, self.produced_bytes
        consumed, consumed_bytes, errors = self.consumed, self.consumed_bytes, self.errors
        self._reset_interval()
        self._sends_settled(errors, produced)
        pub, delay, e2e = (self._pub.snapshot_and_reset(), self._delay.snapshot_and_reset(),
                           self._e2e.snapshot_and_reset())
        below_zero, clock_bound = self._below_zero, self._clock_bound
        self._below_zero = self._clock_bound = 0
        produced_total, consumed_total = self.totals.produced, self.totals.consumed
        raw = {k: np.asarray(v, dtype=np.int64) for k, v in self._raw.items()}
        for v in self._raw.values():
            v.clear()
        consumers = self._consumer_stats()
        health = self._watch.reading(loaded=bool(self._pacers or self._consumer_tasks))
        if self.node is not None and health.saturated:
            health = dataclasses.replace(
                health, saturated=f"{health.saturated} on node {self.node[0][:12]} ({self.node[1]})")
        self._note_saturation(health.saturated)
        # everything above is cut at one instant; the telemetry answers from the brokers follow
        reading = await self._sample()
        tick = Tick(
            target=self.label, seq=seq, time_ns=time_ns, interval_s=interval_s, phase=phase,
            elapsed_s=elapsed_s, produced=produced, produced_bytes=produced_bytes,
            consumed=consumed, consumed_bytes=consumed_bytes, send_errors=errors,
            target_rate=self._rate, publish_latency=pub, publish_delay=delay,
            e2e_latency=e2e, lag=reading.lag,
            resources=Resources(
                cpu_percent=_nan_if_none(reading.cpu_percent),
                memory_bytes=reading.memory_bytes or 0,
                disk_read_bytes=reading.disk_read_bytes or 0,
                disk_write_bytes=reading.disk_write_bytes or 0,
                net_rx_bytes=reading.net_rx_bytes or 0,
                net_tx_bytes=reading.net_tx_bytes or 0,
            ),
            broker=dict(reading.broker),
            produced_total=produced_total,
            consumed_total=consumed_total,
            loadgen=health,
            consumers=consumers,
            **self._audit_found(),
            broker_metrics=self._broker_metrics(reading),
            e2e_below_zero=below_zero,
            e2e_clock_bound_ns=clock_bound,
            clocks=() if self._clock is None else (self._clock,),
            nodes=() if self.node is None else (NodeStat(
                *self.node, produced, consumed, health.cpu_percent, health.loop_lag_ms,
                _resident_bytes(), health.saturated),),
            acked={topic: samples for topic, log in self._acks.items() if (samples := log.take())},
        )
        if self._record_raw:
            for kind, values in raw.items():
                self._publish(RawSamples(self.label, seq, time_ns, phase, kind, values))
        return tick

    def _audit_found(self) -> dict[str, int]:
        """The audit's duplicates and reorders found since the last tick."""
        if self.ledger is None:
            return {}
        now, before = self.ledger.live(), self._live_before
        self._live_before = now
        return {"duplicates": now[0] - before[0], "reordered": now[1] - before[1]}

    def _consumer_stats(self) -> tuple[ConsumerStat, ...]:
        """Each consumer's count since the last tick and the partitions it holds now (the
        coordinator tells them as `assignment` events: loadgen.assignments)."""
        stats = []
        counts, self._slot_consumed = self._slot_consumed, [0] * len(self._slot_consumed)
        for slot, consumer in enumerate(self.consumers):
            topic, subscription, index = self._consumer_specs[slot]
            try:
                held = consumer.partitions()
            except Exception:
                held = None  # a client in the middle of closing
            stats.append(ConsumerStat(self.topics.index(topic), subscription, index,
                                      counts[slot], held, consumer.shared))
        return tuple(stats)

    def _note_saturation(self, reason: str) -> None:
        """An event when the generator becomes the bottleneck, and one when it no longer is."""
        # on a cluster's node the reason names the node (tick)
        where = (f" (load process {self.share + 1} of {self.shares})"
                 if self.shares > 1 and self.node is None else "")
        if reason and not self._saturated:
            self._publish(RunEvent(time.time_ns(), self.label, "loadgen-saturated",
                                   f"{reason}{where}: figures describe the load generator, not "
                                   f"the broker; add {'--nodes' if self.node else '--processes'} "
                                   "or lower the rate"))
        elif self._saturated and not reason:
            self._publish(RunEvent(time.time_ns(), self.label, "loadgen-recovered",
                                   f"the load generator keeps up again{where}"))
        self._saturated = reason

    # ---- tear-down ----------------------------------------------------------------------

    async def close(self) -> None:
        """Stop everything this target started; never raises."""
        self._stop_consuming = True
        for p in self._pacers:
            p.cancel()
        tasks = self._consumer_tasks + [t for p in self._pacers for t in p.tasks]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._watch.stop()
        closers = [c.close() for c in self.producers] + [c.close() for c in self.consumers]
        closers += [c.close() for c in self.collectors]
        for closing in closers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(closing, 5)
        if self.driver is not None:
            if self.primary and self.desc is not None and self.desc.runtime == "external":
                for topic in self.topics:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(self.driver.delete_topic(topic), 10)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.driver.close(), 5)
        if self._stack_watch is not None:
            self._stack_watch.cancel()
            await asyncio.gather(self._stack_watch, return_exceptions=True)
        if self._toxiproxy is not None:
            with contextlib.suppress(Exception):
                await self._toxiproxy.stop(self._log_dir)
        if self.stack is not None:
            with contextlib.suppress(Exception):
                await self.stack.down()


class _CountingFailed(Exception):
    """A batch a consumer read could not be counted (a bug of the load): the consumer's task
    ends with `error`, as when it counts a batch from receive()."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _rate_text(rate: float) -> str:
    return "max" if rate <= 0 else f"{rate:,.6g} msg/s"


class _Pacer:
    """One producer on its schedule, driven by event-loop callbacks instead of a task: a timer
    for the next slot (or for the last of those due within the workload's pacing window after
    it, so that they go out together, each at or after its own time), and the acknowledgements, which
    free room for the next batch when max_in_flight batches are out. A batch goes to the
    producer's submit() when it has one, else to a task awaiting send_batch()."""

    def __init__(self, load: TargetLoad, producer: Producer, sched: Schedule,
                 payloads: list[bytes], slot: int = 0) -> None:
        self._load = load
        self.producer = producer
        self._slot = slot  # its place in load.producers
        # the error that lost the producer's connection, while a new one is being opened
        self._lost: BaseException | None = None
        self.sched = sched
        self._payloads = payloads
        self._key_of = _key_source(load.workload.key_distributor)
        size = load.workload.message_size
        self._max_batch = max(1, min(MAX_RATE_BATCH, MAX_RATE_BATCH_BYTES // size))
        # paced slots due within this long after the next one go out with it
        self._window_ns = round(load.workload.pacing_window_ms * 1e6)
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | TimerHandle | None = None
        self._in_flight = 0
        self._n = 0  # messages handed over so far: picks payloads and keys
        # with the audit, message n (from 0) goes out as sequence n + 1 of this producer,
        # stamped (loadgen.core.audit.stamp): intended time + _stamp_base + (n + 1) × SEQ_STEP
        self._record: ProducerRecord | None = None
        self._stamp_base = 0
        if load.ledger is not None:
            number = load._producer_numbers[slot]
            self._record = load.ledger.producer(number)
            self._stamp_base = number * STAMP_BASE
        self.tasks: set[asyncio.Task[None]] = set()  # send_batch() of producers without submit()
        # done once the schedule is finished and every batch has been answered
        self.finished: asyncio.Future[None] = self._loop.create_future()

    def start(self) -> None:
        self._fire()

    def wake(self) -> None:
        """The schedule changed: look at it now, not at the time the old one gave."""
        if self.finished.done():
            return
        if self._timer is not None:
            self._timer.cancel()
        self._fire()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self.finished.done():
            self.finished.set_result(None)

    def _fire(self) -> None:
        self._timer = None
        sched = self.sched
        limit_max = self.producer.max_in_flight
        now = time.monotonic_ns()
        while self._in_flight < limit_max:
            if sched.finished(now):
                if not self._in_flight and not self.finished.done():
                    self.finished.set_result(None)
                return
            if self._lost is not None and sched.rate <= 0:
                return  # as fast as possible: nothing to send until the connection is back
            due = sched.due(now, PACED_BATCH_LIMIT if sched.rate > 0 else self._max_batch)
            if due and self._lost is not None:
                # slots due while the connection is lost fail without a write to it
                first, self._n = self._n + 1, self._n + len(due)
                if self._record is not None:
                    self._record.handed(first, due)
                self._audit(first, len(due), self._lost)
                self._load._sent(len(due), time.time_ns(), self._lost)
                continue
            if not due:
                wake = sched.next_mono_ns(self._window_ns)
                if wake is None or wake > sched.end_mono_ns:
                    wake = sched.end_mono_ns  # nothing due before the end: finish then
                self._timer = precise_call_at(self._loop, wake, self._fire)
                return
            self._hand_over(due)
            now = time.monotonic_ns()
            if sched.rate > 0:
                # A slot that fell due while this batch was handed over (a write can take a
                # slot's interval on a busy machine) waits for the rest of its window instead
                # of going out alone: one write and one delivery fewer, and it is still sent
                # within the window of its time. Behind by a whole window: catch up now.
                wake = sched.next_mono_ns(self._window_ns)
                if wake is not None and now < wake <= sched.end_mono_ns:
                    self._timer = precise_call_at(self._loop, wake, self._fire)
                    return
        # max_in_flight batches are out: the next acknowledgement fires again

    def _hand_over(self, due: list[int]) -> None:
        load = self._load
        payloads, n, key_of = self._payloads, self._n, self._key_of
        pool = len(payloads)
        stamps = due
        if self._record is not None:
            base = self._stamp_base + (n + 1) * SEQ_STEP
            stamps = [t + base + i * SEQ_STEP for i, t in enumerate(due)]
        if key_of is None:
            batch = [OutMessage(payloads[(n + i) % pool], None, t) for i, t in enumerate(stamps)]
        else:
            batch = [OutMessage(payloads[(n + i) % pool], key_of(n + i), t)
                     for i, t in enumerate(stamps)]
        k = len(batch)
        self._n = n + k
        self._in_flight += 1
        send_wall = time.time_ns()
        if self._record is not None:
            self._record.handed(n + 1, due)
        if self.producer.submits:
            try:
                self.producer.submit(batch, partial(self._acked, k, send_wall, n + 1))
            except Exception as exc:
                self._loop.call_soon(self._acked, k, send_wall, n + 1, exc)
        else:
            task = self._loop.create_task(self._send(batch, send_wall, n + 1))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        # the intended times are on the coordinator's clock: the send time is taken there too
        sent = send_wall if load._clock is None else send_wall - load._clock.offset_ns
        delays = [sent - t for t in due]
        load._delay.record_many(delays)
        if load._record_raw:
            load._raw["delay"].extend(delays)

    async def _reconnect(self) -> None:
        load = self._load
        assert load.driver is not None
        topic, index = load._producer_specs[self._slot]
        fresh = await load.reopen(f"producer {index}", partial(load.driver.producer, topic, index),
                                  self.finished.done)
        if fresh is None:
            return
        old, self.producer = self.producer, fresh
        fresh.acks = load._acks_of(topic)
        load.producers[self._slot] = fresh
        self._lost = None
        with contextlib.suppress(Exception):
            await asyncio.wait_for(old.close(), 5)
        self.wake()

    async def _send(self, batch: list[OutMessage], send_wall: int, first: int) -> None:
        error: BaseException | None = None
        try:
            await self.producer.send_batch(batch)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = exc
        self._acked(len(batch), send_wall, first, error)

    def _audit(self, first: int, k: int, error: BaseException | None) -> None:
        """The audit's record of sequences first ..< first + k: acknowledged, or failed."""
        record = self._record
        if record is None:
            return
        if error is None:
            record.acked.add(first, first + k)
        else:
            record.failed.add(first, first + k)

    def _acked(self, k: int, send_wall: int, first: int, error: BaseException | None) -> None:
        self._in_flight -= 1
        self._audit(first, k, error)
        self._load._sent(k, send_wall, error)
        if isinstance(error, ConnectionError) and self._lost is None and not self.finished.done():
            self._lost = error
            task = self._loop.create_task(self._reconnect())
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        if self._timer is None and not self.finished.done():
            self._fire()
