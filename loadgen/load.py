"""One target's load: its stack, driver, paced producers, consumers, collectors and the
counters and histograms of the current interval. It runs in a worker process of its own
(loadgen/worker.py), so targets side by side never share an event loop."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from collectors.base import Collector, Reading
from compose.docker import FAULTS
from compose.stack import Stack, StackContext, StackDescription
from loadgen.errors import StackError
from loadgen.histogram import Histogram
from loadgen.pacing import Schedule
from loadgen.platforms import PLATFORMS
from loadgen.platforms.base import Consumer, Driver, OutMessage, Producer
from loadgen.selfwatch import SelfWatch
from loadgen.target import Target
from loadgen.tick import BusItem, Phase, RawSamples, Resources, RunEvent, Tick
from loadgen.workload import Workload

READY_TIMEOUT_S = 60.0
READY_TIMEOUT_ENV = "STREAMBENCH_READY_TIMEOUT"  # seconds; slow machines, or tests of the time-out
PAYLOAD_POOL_BYTES = 64 * 1024 * 1024
PACED_BATCH_LIMIT = 2000
MAX_RATE_BATCH = 256
MAX_RATE_BATCH_BYTES = 1 << 20  # large messages go in smaller batches at maximum rate

Publish = Callable[[BusItem], None]


def _payload_pool(size: int) -> list[bytes]:
    count = max(1, min(64, PAYLOAD_POOL_BYTES // size))
    return [os.urandom(size) for _ in range(count)]


def _key_source(distributor: str) -> Callable[[int], bytes] | None:
    """The key of message n, or None for unkeyed messages (NO_KEY)."""
    if distributor == "KEY_ROUND_ROBIN":
        return lambda n: str(n % 10_000).encode()
    if distributor == "RANDOM_NANO":
        return lambda n: str(time.perf_counter_ns()).encode()
    return None


def _nan_if_none(x: float | None) -> float:
    return float("nan") if x is None else float(x)


@dataclass
class TargetTotals:
    """A target's counters at the end of the run."""

    label: str
    produced: int = 0
    consumed: int = 0
    send_errors: int = 0
    receive_errors: int = 0
    duplicates: int = 0
    expected: int = 0  # produced × subscriptions: what the consumers must have read
    final_lag: int | None = None
    drained: bool = False


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

    async def tick(self, seq: int, time_ns: int, phase: Phase, elapsed_s: float) -> Tick:
        """Close the interval and return its Tick; raw samples, when recorded, are published
        on the bus before it returns."""
        ...

    async def close(self) -> None: ...


class TargetLoad:
    """One target's stack, driver, producers, consumers, collectors and interval counters.

    A target can spread its load over several processes (`share` = (this one, how many)): the
    first owns the stack, the topics and the collectors; every process runs the producers and
    consumers whose number modulo the count is its own."""

    def __init__(self, index: int, label: str, target: Target, workload: Workload, run_id: str,
                 record_raw: bool, track_ids: bool, publish: Publish,
                 share: tuple[int, int] = (0, 1), log_dir: Path | None = None) -> None:
        self.index = index
        self.share, self.shares = share
        self._log_dir = log_dir
        self.primary = self.share == 0
        self.label = label
        self.target = target
        self.platform = PLATFORMS[target.platform]
        self.workload = workload
        self.run_id = run_id
        self.topics = [f"streambench-{run_id}-{index}-{t}" for t in range(workload.topics)]
        self.subscriptions = [f"streambench-sub-{s}" for s in range(workload.subscriptions)]
        self._record_raw = record_raw
        self._track_ids = track_ids
        self._publish = publish
        self.stack: Stack | None = None
        self.desc: StackDescription | None = None
        self.driver: Driver | None = None
        self.producers: list[Producer] = []
        self._producer_numbers: list[int] = []  # each producer's number over all processes
        self.consumers: list[Consumer] = []
        self.collectors: list[Collector] = []
        self._producer_tasks: list[asyncio.Task[None]] = []
        self._consumer_tasks: list[asyncio.Task[None]] = []
        self._sends: set[asyncio.Task[None]] = set()
        self._schedules: list[Schedule] = []
        self._stop_consuming = False
        self._pub = Histogram()
        self._delay = Histogram()
        self._e2e = Histogram()
        self._raw: dict[str, list[int]] = {"e2e": [], "publish": [], "delay": []}
        self._seen: set[tuple[int, str]] = set()
        self._interval_start = time.monotonic_ns()
        self._watch = SelfWatch()
        self._saturated = ""
        self._reset_interval()
        self.totals = TargetTotals(label)

    def _reset_interval(self) -> None:
        self.produced = 0
        self.produced_bytes = 0
        self.consumed = 0
        self.consumed_bytes = 0
        self.errors = 0

    # ---- set-up -------------------------------------------------------------------------

    def _mine(self, number: int) -> bool:
        return number % self.shares == self.share

    async def start(self, progress: Callable[[str], None]) -> None:
        """The first process: bring the stack up, create the topics, start the collectors,
        then its share of consumers and producers."""
        self.stack = self.platform.make_stack(self.target)
        self.stack.attach(StackContext(self.run_id, self.index, self._stack_event, self._log_dir))
        await self.stack.up(progress)
        progress(f"{self.label}: waiting for the broker to answer")
        await self.stack.ready(float(os.environ.get(READY_TIMEOUT_ENV) or READY_TIMEOUT_S), progress)
        self.desc = self.stack.describe()
        self.driver = self.platform.make_driver(self.target, self.desc)
        await self.driver.connect()
        w = self.workload
        for topic in self.topics:
            await self.driver.create_topic(topic, w.partitions, self.subscriptions)
            self.collectors += self.platform.make_collectors(
                self.target, self.desc, topic, w.partitions, self.subscriptions)
        for c in self.collectors:
            await c.start()
        await self._start_clients()
        progress(f"{self.label}: ready ({self.desc.runtime}, {self.desc.version or 'version unknown'})")

    async def join(self, desc: StackDescription) -> None:
        """A further process: reach the stack the first one started, take its topics, start
        this process's share of consumers and producers."""
        self.desc = desc
        self.driver = self.platform.make_driver(self.target, desc)
        await self.driver.connect()
        for topic in self.topics:
            self.driver.adopt_topic(topic, self.workload.partitions)
        await self._start_clients()

    async def _start_clients(self) -> None:
        assert self.driver is not None
        w = self.workload
        for t, topic in enumerate(self.topics):
            for s, sub in enumerate(self.subscriptions):
                for i in range(w.consumers):
                    if self._mine((t * len(self.subscriptions) + s) * w.consumers + i):
                        self.consumers.append(
                            await self.driver.consumer(topic, sub, i, self._track_ids))
            for i in range(w.producers):
                if self._mine(t * w.producers + i):
                    self.producers.append(await self.driver.producer(topic, i))
                    self._producer_numbers.append(t * w.producers + i)

    def describe(self) -> dict[str, Any]:
        desc = self.desc
        return {
            "label": self.label,
            "spec": self.target.spec,
            "platform": self.target.platform,
            "options": {k: v for k, v in self.target.options.items()},
            "runtime": desc.runtime if desc else self.target.runtime,
            "endpoints": desc.endpoints if desc else {},
            "pids": list(desc.pids) if desc else [],
            "containers": list(desc.container_ids) if desc else [],
            "version": desc.version if desc else "",
            "config": desc.config if desc else {},
            "topics": self.topics,
            "subscriptions": self.subscriptions,
        }

    async def fault(self, action: str, broker: str) -> None:
        """One of the docker stack's fault hooks (compose.docker.FAULTS) on one broker."""
        hook = getattr(self.stack, action, None) if action in FAULTS else None
        if hook is None:
            raise StackError(f"{self.label}: cannot {action} a broker: fault injection needs the "
                             f"docker runtime ({', '.join(FAULTS)})")
        await hook(broker)

    def _stack_event(self, kind: str, detail: str) -> None:
        self._publish(RunEvent(time.time_ns(), self.label, kind, detail))

    # ---- load ---------------------------------------------------------------------------

    def start_load(self, t0_mono: int, t0_wall: int, end_mono: int) -> None:
        self._interval_start = t0_mono
        self._watch.start()
        for c in self.consumers:
            self._consumer_tasks.append(asyncio.create_task(self._consume(c)))
        n = len(self.topics) * self.workload.producers  # over every process of the target
        per_rate = self.workload.rate / n
        payloads = _payload_pool(self.workload.message_size)
        for i, p in zip(self._producer_numbers, self.producers, strict=True):
            # stagger producers across one slot so their sends interleave evenly
            phase = int(1e9 / per_rate * i / n) if per_rate > 0 else 0
            sched = Schedule(per_rate, t0_mono, t0_wall, end_mono, phase_ns=phase)
            self._schedules.append(sched)
            self._producer_tasks.append(asyncio.create_task(self._produce(p, sched, payloads)))

    def stop_producing_at(self, end_mono: int) -> None:
        for s in self._schedules:
            s.stop_at(end_mono)

    async def _produce(self, producer: Producer, sched: Schedule, payloads: list[bytes]) -> None:
        sem = asyncio.Semaphore(producer.max_in_flight)
        key_of = _key_source(self.workload.key_distributor)
        size = self.workload.message_size
        pool = len(payloads)
        limit = (PACED_BATCH_LIMIT if sched.rate > 0 else
                 max(1, min(MAX_RATE_BATCH, MAX_RATE_BATCH_BYTES // size)))
        n = 0
        while True:
            await sem.acquire()
            while True:
                mono = time.monotonic_ns()
                if sched.finished(mono):
                    sem.release()
                    await self._wait_sends()
                    return
                due = sched.due(mono, limit)
                if due:
                    break
                await asyncio.sleep(sched.seconds_until_next(mono))
            send_wall = time.time_ns()
            if key_of is None:
                batch = [OutMessage(payloads[(n + i) % pool], None, t) for i, t in enumerate(due)]
            else:
                batch = [OutMessage(payloads[(n + i) % pool], key_of(n + i), t)
                         for i, t in enumerate(due)]
            n += len(batch)
            delays = [send_wall - t for t in due]
            self._delay.record_many(delays)
            if self._record_raw:
                self._raw["delay"].extend(delays)
            task = asyncio.create_task(self._send(producer, batch, send_wall, size, sem))
            self._sends.add(task)
            task.add_done_callback(self._sends.discard)

    async def _send(self, producer: Producer, batch: list[OutMessage], send_wall: int, size: int,
                    sem: asyncio.Semaphore) -> None:
        try:
            await producer.send_batch(batch)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.errors += len(batch)
            self.totals.send_errors += len(batch)
            if self.totals.send_errors == len(batch):  # the first failure is worth an event
                self._publish(RunEvent(time.time_ns(), self.label, "send-error",
                                       f"{type(exc).__name__}: {exc}"))
            return
        finally:
            sem.release()
        latency = time.time_ns() - send_wall
        k = len(batch)
        self._pub.record_n(latency, k)
        if self._record_raw:
            self._raw["publish"].extend([latency] * k)
        self.produced += k
        self.produced_bytes += k * size
        self.totals.produced += k

    async def _wait_sends(self) -> None:
        while self._sends:
            await asyncio.gather(*list(self._sends), return_exceptions=True)

    async def _consume(self, consumer: Consumer) -> None:
        while not self._stop_consuming:
            try:
                batch = await consumer.receive()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.totals.receive_errors += 1
                if self.totals.receive_errors == 1:
                    self._publish(RunEvent(time.time_ns(), self.label, "receive-error",
                                           f"{type(exc).__name__}: {exc}"))
                await asyncio.sleep(0.1)
                continue
            if batch is None:
                continue
            rn = batch.receive_ns
            lat = [rn - t for t in batch.intended_ns]
            self._e2e.record_many(lat)
            if self._record_raw:
                self._raw["e2e"].extend(lat)
            k = batch.count
            self.consumed += k
            self.consumed_bytes += batch.payload_bytes
            self.totals.consumed += k
            if batch.ids is not None:
                before = len(self._seen)
                self._seen.update(batch.ids)
                self.totals.duplicates += len(batch.ids) - (len(self._seen) - before)

    async def stop_producers(self) -> None:
        for s in self._schedules:
            s.stop_at(time.monotonic_ns())
        await asyncio.gather(*self._producer_tasks, return_exceptions=True)

    # ---- ticks --------------------------------------------------------------------------

    async def _sample(self) -> Reading:
        reading = Reading()
        results = await asyncio.gather(
            *(asyncio.wait_for(c.sample(), 0.9) for c in self.collectors), return_exceptions=True)
        for c, r in zip(self.collectors, results, strict=True):
            if isinstance(r, Reading):
                reading = reading.merge(r)
            elif isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError):
                self._publish(RunEvent(time.time_ns(), self.label, "collector-error",
                                       f"{c.name}: {type(r).__name__}: {r}"))
        return reading

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
        pub, delay, e2e = (self._pub.snapshot_and_reset(), self._delay.snapshot_and_reset(),
                           self._e2e.snapshot_and_reset())
        produced_total, consumed_total = self.totals.produced, self.totals.consumed
        raw = {k: np.asarray(v, dtype=np.int64) for k, v in self._raw.items()}
        for v in self._raw.values():
            v.clear()
        health = self._watch.reading(loaded=bool(self._producer_tasks or self._consumer_tasks))
        self._note_saturation(health.saturated)
        # everything above is cut at one instant; the telemetry answers from the brokers follow
        reading = await self._sample()
        tick = Tick(
            target=self.label, seq=seq, time_ns=time_ns, interval_s=interval_s, phase=phase,
            elapsed_s=elapsed_s, produced=produced, produced_bytes=produced_bytes,
            consumed=consumed, consumed_bytes=consumed_bytes, send_errors=errors,
            target_rate=self.workload.rate, publish_latency=pub, publish_delay=delay,
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
        )
        if self._record_raw:
            for kind, values in raw.items():
                self._publish(RawSamples(self.label, seq, time_ns, phase, kind, values))
        return tick

    def _note_saturation(self, reason: str) -> None:
        """An event when the generator becomes the bottleneck, and one when it no longer is."""
        where = f" (load process {self.share + 1} of {self.shares})" if self.shares > 1 else ""
        if reason and not self._saturated:
            self._publish(RunEvent(time.time_ns(), self.label, "loadgen-saturated",
                                   f"{reason}{where}: figures describe the load generator, not "
                                   "the broker; add --processes or lower the rate"))
        elif self._saturated and not reason:
            self._publish(RunEvent(time.time_ns(), self.label, "loadgen-recovered",
                                   f"the load generator keeps up again{where}"))
        self._saturated = reason

    # ---- tear-down ----------------------------------------------------------------------

    async def close(self) -> None:
        """Stop everything this target started; never raises."""
        self._stop_consuming = True
        for s in self._schedules:
            s.stop_at(0)
        tasks = self._producer_tasks + self._consumer_tasks + list(self._sends)
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
        if self.stack is not None:
            with contextlib.suppress(Exception):
                await self.stack.down()
