"""The run loop: bring every target up, drive it with paced producers and consumers, publish
one Tick per target per second on the bus, drain, write the files, bring everything down.

The same Run serves the dashboard and --headless: both are subscribers of the bus."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import platform as host_platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from analysis.sink import ParquetSink, RawSamples, write_run_json
from collectors.base import Collector, Reading
from compose.stack import Stack, StackDescription
from loadgen.errors import OutputError, StackError, StreambenchError
from loadgen.histogram import Histogram
from loadgen.pacing import Schedule, now_ns
from loadgen.platforms import PLATFORMS
from loadgen.platforms.base import Consumer, Driver, OutMessage, Producer
from loadgen.tick import LagSnapshot, Phase, PhaseChange, Resources, RunEvent, Tick
from loadgen.workload import Workload

BusItem = Tick | PhaseChange | RunEvent | RawSamples
Subscriber = Callable[[BusItem], None]

READY_TIMEOUT_S = 60.0
PAYLOAD_POOL_BYTES = 64 * 1024 * 1024
PACED_BATCH_LIMIT = 2000
MAX_RATE_BATCH = 256


def default_run_dir(workload: Workload, started: datetime, root: Path = Path("runs")) -> Path:
    return root / f"{started.strftime('%Y%m%dT%H%M%SZ')}-{workload.name}"


def _payload_pool(size: int) -> list[bytes]:
    count = max(1, min(64, PAYLOAD_POOL_BYTES // size))
    return [os.urandom(size) for _ in range(count)]


def _key_source(distributor: str) -> Callable[[int], bytes | None]:
    if distributor == "KEY_ROUND_ROBIN":
        return lambda n: str(n % 10_000).encode()
    if distributor == "RANDOM_NANO":
        return lambda n: str(time.perf_counter_ns()).encode()
    return lambda n: None


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


@dataclass
class RunSummary:
    run_dir: Path
    run_id: str
    stopped_early: bool
    targets: list[TargetTotals] = field(default_factory=list)
    measured_ticks: int = 0


def check_run_dir(run_dir: Path) -> None:
    """Create the run directory, or raise OutputError if it is taken or cannot be written."""
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        raise OutputError(f"output directory {run_dir} exists and is not empty; choose another --out")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise OutputError(f"cannot write the run directory {run_dir}: {exc.strerror or exc}") from None


class TargetRunner:
    """One target's stack, driver, producers, consumers, collectors and interval counters."""

    def __init__(self, index: int, label: str, target: Any, workload: Workload, run_id: str,
                 record_raw: bool, track_ids: bool, publish: Subscriber) -> None:
        self.index = index
        self.label = label
        self.target = target
        self.platform = PLATFORMS[target.platform]
        self.workload = workload
        self.topics = [f"streambench-{run_id}-{index}-{t}" for t in range(workload.topics)]
        self.subscriptions = [f"streambench-sub-{s}" for s in range(workload.subscriptions)]
        self._record_raw = record_raw
        self._track_ids = track_ids
        self._publish = publish
        self.stack: Stack | None = None
        self.desc: StackDescription | None = None
        self.driver: Driver | None = None
        self.producers: list[Producer] = []
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
        self._last_reading = Reading()
        self._reset_interval()
        self.totals = TargetTotals(label)

    def _reset_interval(self) -> None:
        self.produced = 0
        self.produced_bytes = 0
        self.consumed = 0
        self.consumed_bytes = 0
        self.errors = 0

    # ---- set-up -------------------------------------------------------------------------

    async def start(self, progress: Callable[[str], None]) -> None:
        self.stack = self.platform.make_stack(self.target)
        await self.stack.up(progress)
        progress(f"{self.label}: waiting for the broker to answer")
        await self.stack.ready(READY_TIMEOUT_S, progress)
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
        for topic in self.topics:
            for sub in self.subscriptions:
                for i in range(w.consumers):
                    self.consumers.append(
                        await self.driver.consumer(topic, sub, i, self._track_ids))
            for i in range(w.producers):
                self.producers.append(await self.driver.producer(topic, i))
        progress(f"{self.label}: ready ({self.desc.runtime}, {self.desc.version or 'version unknown'})")

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

    # ---- load ---------------------------------------------------------------------------

    def start_load(self, t0_mono: int, t0_wall: int, end_mono: int) -> None:
        for c in self.consumers:
            self._consumer_tasks.append(asyncio.create_task(self._consume(c)))
        n = len(self.producers)
        per_rate = self.workload.rate / n
        payloads = _payload_pool(self.workload.message_size)
        for i, p in enumerate(self.producers):
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
        limit = PACED_BATCH_LIMIT if sched.rate > 0 else MAX_RATE_BATCH
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
            batch = [OutMessage(payloads[(n + i) % pool], key_of(n + i), t) for i, t in enumerate(due)]
            n += len(batch)
            self._delay.record_many([send_wall - t for t in due])
            if self._record_raw:
                self._raw["delay"].extend(send_wall - t for t in due)
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

    def drained(self, lag: LagSnapshot | None) -> bool:
        expected = self.totals.produced * len(self.subscriptions)
        self.totals.expected = expected
        lag_clear = lag is None or lag.total == 0
        return self.totals.consumed >= expected and lag_clear

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

    async def tick(self, seq: int, time_ns: int, interval_s: float, phase: Phase,
                   elapsed_s: float) -> Tick:
        produced, produced_bytes = self.produced, self.produced_bytes
        consumed, consumed_bytes, errors = self.consumed, self.consumed_bytes, self.errors
        self._reset_interval()
        pub, delay, e2e = (self._pub.snapshot_and_reset(), self._delay.snapshot_and_reset(),
                           self._e2e.snapshot_and_reset())
        raw = {k: np.asarray(v, dtype=np.int64) for k, v in self._raw.items()}
        for v in self._raw.values():
            v.clear()
        reading = await self._sample()
        self._last_reading = reading
        def nan_if_none(x):
            return (float("nan") if x is None else float(x))
        tick = Tick(
            target=self.label, seq=seq, time_ns=time_ns, interval_s=interval_s, phase=phase,
            elapsed_s=elapsed_s, produced=produced, produced_bytes=produced_bytes,
            consumed=consumed, consumed_bytes=consumed_bytes, send_errors=errors,
            target_rate=self.workload.rate, publish_latency=pub, publish_delay=delay,
            e2e_latency=e2e, lag=reading.lag,
            resources=Resources(
                cpu_percent=nan_if_none(reading.cpu_percent),
                memory_bytes=reading.memory_bytes or 0,
                disk_read_bytes=reading.disk_read_bytes or 0,
                disk_write_bytes=reading.disk_write_bytes or 0,
                net_rx_bytes=reading.net_rx_bytes or 0,
                net_tx_bytes=reading.net_tx_bytes or 0,
            ),
            broker=dict(reading.broker),
            produced_total=self.totals.produced,
            consumed_total=self.totals.consumed,
        )
        self._publish(tick)
        if self._record_raw:
            for kind, values in raw.items():
                self._publish(RawSamples(self.label, seq, time_ns, phase, kind, values))
        return tick

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
        closers = [c.close() for c in self.producers] + [c.close() for c in self.consumers]
        closers += [c.close() for c in self.collectors]
        for closing in closers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(closing, 5)
        if self.driver is not None:
            if self.desc is not None and self.desc.runtime == "external":
                for topic in self.topics:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(self.driver.delete_topic(topic), 10)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.driver.close(), 5)
        if self.stack is not None:
            with contextlib.suppress(Exception):
                await self.stack.down()


class Run:
    """One benchmark run over one or more targets side by side."""

    def __init__(self, workload: Workload, targets: list[Any], out_dir: Path | None = None,
                 record_raw: bool = False, track_ids: bool = False, tick_s: float = 1.0,
                 argv: list[str] | None = None, run_id: str | None = None) -> None:
        self.workload = workload
        self.targets = targets
        self.started = datetime.now(UTC)
        self.run_id = run_id or self.started.strftime("%Y%m%dT%H%M%SZ")
        self.run_dir = out_dir if out_dir is not None else default_run_dir(workload, self.started)
        self.tick_s = tick_s
        self.phase = Phase.STARTING
        self.record_raw = record_raw
        self._argv = argv or []
        self._subscribers: list[Subscriber] = []
        self._stop_requests = 0
        self._stop_event = asyncio.Event()
        self._sink: ParquetSink | None = None
        self.runners = [
            TargetRunner(i, t.label, t, workload, self.run_id, record_raw, track_ids, self.publish)
            for i, t in enumerate(targets)
        ]
        self.warmup_ticks = math.ceil(workload.warmup_s / tick_s)
        self.measure_ticks = math.ceil(workload.duration_s / tick_s)

    @property
    def labels(self) -> list[str]:
        return [r.label for r in self.runners]

    def subscribe(self, fn: Subscriber) -> None:
        self._subscribers.append(fn)

    def publish(self, item: BusItem) -> None:
        for fn in self._subscribers:
            fn(item)

    def _set_phase(self, phase: Phase, message: str = "") -> None:
        self.phase = phase
        self.publish(PhaseChange(phase, time.time_ns(), message))

    def progress(self, message: str) -> None:
        self.publish(PhaseChange(self.phase, time.time_ns(), message))

    def request_stop(self) -> None:
        """First call: end the load at the next tick and drain. Second: skip the drain."""
        self._stop_requests += 1
        self._stop_event.set()

    @property
    def stop_requested(self) -> bool:
        return self._stop_requests > 0

    def prepare(self) -> None:
        """Create the run directory and the sink; raises OutputError before anything starts."""
        if self._sink is not None:
            return
        check_run_dir(self.run_dir)
        self._sink = ParquetSink(self.run_dir, self.run_id, raw=self.record_raw)
        self.subscribe(self._sink)

    def _meta(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        from importlib.metadata import PackageNotFoundError, version

        try:
            sb_version = version("streambench")
        except PackageNotFoundError:
            sb_version = "unknown"
        meta = {
            "run_id": self.run_id,
            "started": self.started.isoformat(),
            "workload": self.workload.to_omb(),
            "targets": [r.describe() for r in self.runners],
            "tick_s": self.tick_s,
            "warmup_ticks": self.warmup_ticks,
            "measure_ticks": self.measure_ticks,
            "record_raw": self.record_raw,
            "command": self._argv,
            "host": {"hostname": host_platform.node(), "cpus": os.cpu_count(),
                     "python": host_platform.python_version(), "system": host_platform.platform()},
            "streambench_version": sb_version,
        }
        meta.update(extra or {})
        return meta

    async def execute(self) -> RunSummary:
        self.prepare()
        assert self._sink is not None
        summary = RunSummary(self.run_dir, self.run_id, stopped_early=False)
        try:
            self._set_phase(Phase.STARTING, "starting brokers")
            await self._start_all()
            write_run_json(self.run_dir, self._meta())
            measured = await self._drive()
            summary.measured_ticks = measured
            summary.stopped_early = self.stop_requested
            self._set_phase(Phase.WRITING, "writing run files")
            summary.targets = [r.totals for r in self.runners]
            write_run_json(self.run_dir, self._meta({
                "ended": datetime.now(UTC).isoformat(),
                "stopped_early": summary.stopped_early,
                "measured_ticks": measured,
                "totals": [json.loads(json.dumps(t.__dict__)) for t in summary.targets],
            }))
        finally:
            await asyncio.gather(*(r.close() for r in self.runners), return_exceptions=True)
            self._sink.close()
        self._set_phase(Phase.DONE, f"run files in {self.run_dir}")
        return summary

    async def _start_all(self) -> None:
        results = await asyncio.gather(*(r.start(self.progress) for r in self.runners),
                                       return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                if isinstance(r, StreambenchError | asyncio.CancelledError):
                    raise r
                raise StackError(f"start-up failed: {type(r).__name__}: {r}") from r

    async def _drive(self) -> int:
        """Warm-up, measuring and drain; returns the number of measuring ticks."""
        loop = asyncio.get_running_loop()
        t0_mono, t0_wall = now_ns()
        tick_ns = int(self.tick_s * 1e9)
        warm_end = self.warmup_ticks
        measure_end = self.warmup_ticks + self.measure_ticks
        for r in self.runners:
            r.start_load(t0_mono, t0_wall, t0_mono + measure_end * tick_ns)
        self._set_phase(Phase.WARMUP if warm_end > 0 else Phase.MEASURING)
        seq = 0
        measured = 0
        last_mono = t0_mono
        drain_deadline: float | None = None
        while True:
            boundary = t0_mono + (seq + 1) * tick_ns
            if self._stop_requests and measure_end > seq + 1:
                # a stop ends the load at this tick's boundary, then the drain starts
                measure_end = seq + 1
                warm_end = min(warm_end, measure_end)
                for r in self.runners:
                    r.stop_producing_at(boundary)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wait_stop_change(),
                                       max(0.0, (boundary - time.monotonic_ns()) / 1e9))
            if time.monotonic_ns() < boundary:
                continue  # woken by a stop request: re-plan this tick's end
            mono, wall = now_ns()
            k = seq + 1
            phase = (Phase.WARMUP if k <= warm_end else
                     Phase.MEASURING if k <= measure_end else Phase.DRAINING)
            if phase is Phase.MEASURING:
                measured += 1
            ticks = await asyncio.gather(*(
                r.tick(seq, wall, (mono - last_mono) / 1e9, phase, (mono - t0_mono) / 1e9)
                for r in self.runners))
            last_mono = mono
            seq += 1
            if k == warm_end and measure_end > warm_end:
                self._set_phase(Phase.MEASURING)
            if k == measure_end:
                self._set_phase(Phase.DRAINING, "waiting for consumers to catch up")
                await asyncio.gather(*(r.stop_producers() for r in self.runners))
                drain_deadline = loop.time() + self.workload.drain_timeout_s
            if drain_deadline is not None and k > measure_end:
                done = [r.drained(t.lag) for r, t in zip(self.runners, ticks, strict=True)]
                for r, d, t in zip(self.runners, done, ticks, strict=True):
                    r.totals.drained = d
                    r.totals.final_lag = t.lag.total if t.lag is not None else None
                if all(done) or self._stop_requests > 1 or loop.time() > drain_deadline:
                    if not all(done):
                        self.publish(RunEvent(time.time_ns(), "", "drain-incomplete",
                                              "stopped before every message was consumed"))
                    return measured

    async def _wait_stop_change(self) -> None:
        seen = self._stop_requests
        while self._stop_requests == seen:
            self._stop_event.clear()
            await self._stop_event.wait()
