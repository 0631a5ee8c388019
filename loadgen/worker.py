"""Each target's load runs in a worker process of its own, so that targets side by side never
share an event loop (one slow broker cannot delay another target's sends or timestamps) and
the dashboard's drawing never delays either.

The coordinator (Run) talks to a worker through `TargetWorker`, which is a LoadHandle like
TargetLoad; requests (an allowlist of operations) and replies cross a pipe. Interval counters,
histograms and telemetry are summarised in the worker and cross once per tick as a Tick (the
coordinator merges summaries; raw samples, a test switch, go straight to the bus).
CLOCK_MONOTONIC is shared by all processes, so schedule times pass as they are. A worker whose
coordinator disappears (killed outright: its end of the pipe closes at once) kills the brokers
it started, removes their data and exits within ORPHAN_CLOSE_S: nobody is left to read what
they hold, and a broker's graceful stop takes Kafka about 10 s."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from compose.process import abandon
from loadgen.assignments import AssignmentWatch
from loadgen.clocks import BoundWatch
from loadgen.core.audit import AuditLedger, merge
from loadgen.core.errors import NodeLost, StackError, StreambenchError
from loadgen.core.events import EventKind, RunEvent
from loadgen.core.fdwatch import watch_readable
from loadgen.core.histogram import HistogramSnapshot
from loadgen.core.interventions import Intervention
from loadgen.core.stack import StackDescription
from loadgen.core.target import Target
from loadgen.core.ticks import LoadgenHealth, NodeClock, NodeStat, Phase, Tick
from loadgen.core.workload import Workload
from loadgen.load import (
    DROPPED_SLOTS,
    STACK_ONLY,
    LoadHandle,
    Publish,
    TargetLoad,
    TargetTotals,
    dropped_slots,
)
from loadgen.pacing import run_precise
from loadgen.placement import Placement, place
from loadgen.timelag import TimeLagBook

_CLOSE_TIMEOUT_S = 120.0
# how long a target's tick waits for its load nodes' (on a cluster) after asking them, or
# until the stack's own tick is in if that comes later: a slower node's share is counted in
# the tick its answer comes by, and marked late till then
NODE_TICK_WAIT_S = 0.5
ORPHAN_CLOSE_S = 2.0  # what an orphaned worker gives its clients and stack to close


def picklable(exc: BaseException) -> StreambenchError:
    if isinstance(exc, StreambenchError):
        return exc
    return StackError(f"{type(exc).__name__}: {exc}")


class _OncePerSecond(logging.Filter):
    """Lets a repeated log message through once a second, with how often it was held back: a
    dead broker's connection must not flood the terminal with one line per attempted send."""

    def __init__(self) -> None:
        super().__init__()
        self._last: dict[str, tuple[float, int]] = {}  # message -> (time let through, held back)

    def filter(self, record: logging.LogRecord) -> bool:
        key = record.getMessage()[:200]
        now = time.monotonic()
        last, held = self._last.get(key, (0.0, 0))
        if now - last < 1.0:
            self._last[key] = (last, held + 1)
            return False
        if held:
            record.msg = f"{record.getMessage()} (and {held} more like it in the last second)"
            record.args = ()
        self._last[key] = (now, 0)
        return True


class _OneLine(logging.Formatter):
    """A library's log record (asyncio's "Future exception was never retrieved" after a broker
    died, say) as one line: its message, and for an exception its type and text, without the
    traceback, which belongs to the library, not to the run on the terminal."""

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            text += f" ({type(exc).__name__}: {exc})"
        return " ".join(text.split())


def quiet_asyncio_log() -> None:
    logger = logging.getLogger("asyncio")
    logger.addFilter(_OncePerSecond())
    handler = logging.StreamHandler()
    handler.setFormatter(_OneLine())
    logger.addHandler(handler)
    logger.propagate = False


def open_files_to_hard_limit() -> None:
    """A load process holds a socket per producer and consumer (10,000 subscriptions: 10,000
    of them): its limit of open files goes up to the hard limit, which the system lets any
    process take (the soft limit is often 1,024)."""
    with contextlib.suppress(ImportError, ValueError, OSError):
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _worker_main(conn: Connection, index: int, target: Target, workload: Workload, run_id: str,
                 record_raw: bool, audit: bool, share: tuple[int, int],
                 log_dir: Path | None) -> None:
    # The coordinator decides when to stop: a signal to the whole process group (Ctrl-C,
    # `timeout`, `kill -TERM -- -PGID`, a dropped SSH session) must not end the worker before the
    # coordinator has drained and collected it. A worker whose coordinator is gone sees its pipe
    # close and stops by itself.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    quiet_asyncio_log()
    open_files_to_hard_limit()
    run_precise(_serve(conn, TargetLoad(index, target.label, target, workload, run_id, record_raw,
                                        audit, lambda e: _send(conn, e), share, log_dir)))


def _send(conn: Connection, item: object) -> None:
    with contextlib.suppress(OSError, ValueError):
        conn.send(item)


# The operations a coordinator may ask of a worker, each with the reply it gets.
Handler = Callable[..., Awaitable[Any]]


async def _start(load: TargetLoad, conn: Connection) -> tuple[dict[str, Any], StackDescription | None]:
    await load.start(lambda msg: _send(conn, ("progress", msg)))
    return load.describe(), load.client_desc  # further processes' clients go where its own go


async def _join(load: TargetLoad, conn: Connection, desc: StackDescription) -> None:
    await load.join(desc)


async def _tick(load: TargetLoad, conn: Connection, seq: int, time_ns: int, phase: Phase,
                elapsed_s: float) -> tuple[Tick, TargetTotals]:
    return await load.tick(seq, time_ns, phase, elapsed_s), load.totals


async def _stop_producers(load: TargetLoad, conn: Connection) -> TargetTotals:
    await load.stop_producers()
    return load.totals


async def _start_load(load: TargetLoad, conn: Connection, t0_mono: int, t0_wall: int,
                      end_mono: int) -> None:
    load.start_load(t0_mono, t0_wall, end_mono)


async def _stop_producing_at(load: TargetLoad, conn: Connection, end_mono: int) -> None:
    load.stop_producing_at(end_mono)


async def _fault(load: TargetLoad, conn: Connection, action: str, broker: str) -> None:
    await load.fault(action, broker)


async def _network_fault(load: TargetLoad, conn: Connection, item: Intervention) -> str:
    return await load.network_fault(item)


async def _collect_audit(load: TargetLoad, conn: Connection) -> AuditLedger | None:
    return await load.collect_audit()


async def _control(load: TargetLoad, conn: Connection, item: Intervention) -> str:
    return await load.control(item)


async def _clock(load: TargetLoad, conn: Connection, clock: NodeClock) -> None:
    load.set_clock(clock)


async def _same_node(load: TargetLoad, conn: Connection, producers: frozenset[int]) -> None:
    load.time_same_node(producers)


HANDLERS: dict[str, Handler] = {
    "start": _start,
    "join": _join,
    "tick": _tick,
    "stop_producers": _stop_producers,
    "start_load": _start_load,
    "stop_producing_at": _stop_producing_at,
    "fault": _fault,
    "network_fault": _network_fault,
    "control": _control,
    "collect_audit": _collect_audit,
    "clock": _clock,
    "same_node": _same_node,
}


async def _serve(conn: Connection, load: TargetLoad) -> None:
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[tuple[int, str, tuple[Any, ...]]] = asyncio.Queue()

    def on_request() -> None:
        try:
            inbox.put_nowait(conn.recv())
        except (EOFError, OSError):
            loop.remove_reader(conn.fileno())
            inbox.put_nowait((-1, "gone", ()))  # the coordinator's end closed

    watch_readable(loop, conn.fileno(), on_request)
    tasks: set[asyncio.Task[None]] = set()

    async def handle(req_id: int, op: str, args: tuple[Any, ...]) -> None:
        try:
            handler = HANDLERS.get(op)
            if handler is None:
                raise StackError(f"unknown request {op!r}")
            _send(conn, (req_id, True, await handler(load, conn, *args)))
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            _send(conn, (req_id, False, picklable(exc)))

    while True:
        req_id, op, args = await inbox.get()
        if op == "gone":
            abandon()  # its brokers first, at once (SIGKILL), and their data dirs
            for t in tasks:
                t.cancel()
            with contextlib.suppress(Exception):  # what else it started (clients, containers)
                await asyncio.wait_for(asyncio.gather(*tasks, load.close(), return_exceptions=True),
                                       ORPHAN_CLOSE_S)
            os._exit(0)  # not waiting on a thread still stopping something for nobody
        if op == "close":
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await load.close()
            _send(conn, (req_id, True, load.totals))
            return
        task = asyncio.create_task(handle(req_id, op, args))
        tasks.add(task)
        task.add_done_callback(tasks.discard)


class LoadChannel(Protocol):
    """What TargetWorker drives one share of a target's load through: a local worker
    process (_LoadProcess) or an actor on a cluster (loadgen.cluster.LoadActorHandle)."""

    progress: Callable[[str], None]

    def spawn(self) -> None: ...

    def request(self, op: str, *args: Any) -> asyncio.Future[Any]: ...

    async def close(self) -> TargetTotals | None: ...


class ClusterPlacement(Protocol):
    """A cluster whose nodes run a target's clients (loadgen.cluster.Cluster)."""

    split_roles: bool  # producers and consumers on different nodes
    same_node_latency: bool  # e2e of the messages produced on the consumer's node alone

    def load_workers(self, index: int, target: Target, workload: Workload, run_id: str,
                     record_raw: bool, audit: bool, log_dir: Path | None,
                     publish: Publish) -> Sequence[LoadChannel]: ...


class _LoadProcess:
    """One worker process of a target and the pipe to it."""

    def __init__(self, label: str, args: tuple[Any, ...], publish: Publish) -> None:
        self.label = label
        self._args = args
        self._publish = publish
        self.progress: Callable[[str], None] = lambda _msg: None
        self._conn: Connection | None = None
        self._proc: multiprocessing.process.BaseProcess | None = None
        self._ids = itertools.count()
        self._pending: dict[int, asyncio.Future[Any] | None] = {}
        self._reading = False

    def spawn(self) -> None:
        if self._proc is not None:
            return
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe(duplex=True)
        self._proc = ctx.Process(target=_worker_main, args=(child, *self._args),
                                 name=f"streambench-{self.label}")
        # multiprocessing hands sys.stderr's descriptor to its helper process; a dashboard
        # replaces sys.stderr with an object that has none, so start with the real one
        shown, sys.stderr = sys.stderr, sys.__stderr__
        try:
            self._proc.start()
        finally:
            sys.stderr = shown
        child.close()

    def _listen(self) -> None:
        if self._reading or self._conn is None:
            return
        self._reading = True
        watch_readable(asyncio.get_running_loop(), self._conn.fileno(), self._on_message)

    def _on_message(self) -> None:
        assert self._conn is not None
        try:
            message = self._conn.recv()
        except (EOFError, OSError):
            asyncio.get_running_loop().remove_reader(self._conn.fileno())
            self._reading = False
            code = self._proc.exitcode if self._proc is not None else None
            for fut in self._pending.values():
                if fut is not None and not fut.done():
                    fut.set_exception(StackError(
                        f"{self.label}: the target's worker process ended unexpectedly "
                        f"(exit code {code})"))
            self._pending.clear()
            return
        if not isinstance(message, tuple):
            self._publish(message)  # a bus item from the worker (run event, raw samples)
        elif message[0] == "progress":
            self.progress(message[1])
        else:
            req_id, ok, value = message
            waiter = self._pending.pop(req_id, None)
            if waiter is not None and not waiter.done():
                if ok:
                    waiter.set_result(value)
                else:
                    waiter.set_exception(value)

    def request(self, op: str, *args: Any) -> asyncio.Future[Any]:
        self.spawn()
        self._listen()
        assert self._conn is not None
        req_id = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[req_id] = fut
        try:
            self._conn.send((req_id, op, args))
        except OSError as exc:
            self._pending.pop(req_id, None)
            fut.set_exception(StackError(f"{self.label}: the worker process is gone ({exc})"))
        return fut

    async def close(self) -> TargetTotals | None:
        """Stop the process's load (and, for the first, the stack); never raises. Returns the
        process's final counts when it could still give them."""
        if self._proc is None:
            return None
        final = None
        if self._proc.is_alive():
            with contextlib.suppress(Exception):
                final = await asyncio.wait_for(self.request("close"), _CLOSE_TIMEOUT_S)
        proc = self._proc
        await asyncio.to_thread(proc.join, 10)
        if proc.is_alive():
            proc.kill()
            await asyncio.to_thread(proc.join, 5)
        if self._conn is not None:
            if self._reading:
                with contextlib.suppress(Exception):
                    asyncio.get_running_loop().remove_reader(self._conn.fileno())
            self._conn.close()
        self._reading = False
        self._proc = None
        self._conn = None
        return final


def _sum_totals(label: str, parts: list[TargetTotals]) -> TargetTotals:
    total = TargetTotals(label)
    for t in parts:
        total.produced += t.produced
        total.consumed += t.consumed
        total.send_errors += t.send_errors
        total.receive_errors += t.receive_errors
        total.consumers_failed += t.consumers_failed
        total.duplicates += t.duplicates
        total.reordered += t.reordered
    return total


def _with_latency(tick: Tick) -> tuple[NodeStat, ...]:
    """A load node's tick's NodeStat holding the node's own histograms (the merged tick's are
    every node's together)."""
    if len(tick.nodes) != 1:
        return tick.nodes
    return (dataclasses.replace(tick.nodes[0], e2e_latency=tick.e2e_latency,
                                publish_latency=tick.publish_latency,
                                publish_delay=tick.publish_delay),)


def _merge_ticks(ticks: list[Tick]) -> Tick:
    """The first process's tick (telemetry, lag, interval) with every process's counts,
    latencies and consumers."""
    if len(ticks) == 1:
        return ticks[0]
    first = ticks[0]
    return dataclasses.replace(
        first,
        produced=sum(t.produced for t in ticks),
        produced_bytes=sum(t.produced_bytes for t in ticks),
        consumed=sum(t.consumed for t in ticks),
        consumed_bytes=sum(t.consumed_bytes for t in ticks),
        send_errors=sum(t.send_errors for t in ticks),
        duplicates=sum(t.duplicates for t in ticks),
        reordered=sum(t.reordered for t in ticks),
        publish_latency=HistogramSnapshot.merge([t.publish_latency for t in ticks]),
        publish_delay=HistogramSnapshot.merge([t.publish_delay for t in ticks]),
        e2e_latency=HistogramSnapshot.merge([t.e2e_latency for t in ticks]),
        produced_total=sum(t.produced_total for t in ticks),
        consumed_total=sum(t.consumed_total for t in ticks),
        loadgen=LoadgenHealth.merge([t.loadgen for t in ticks]),
        consumers=tuple(sorted((c for t in ticks for c in t.consumers),
                               key=lambda c: (c.topic, c.subscription, c.index))),
        e2e_below_zero=sum(t.e2e_below_zero for t in ticks),
        e2e_clock_bound_ns=max(t.e2e_clock_bound_ns for t in ticks),
        clocks=tuple(c for t in ticks for c in t.clocks),
        nodes=tuple(n for t in ticks for n in _with_latency(t)),
        acked={topic: [s for t in ticks for s in t.acked.get(topic, ())]
               for topic in {topic for t in ticks for topic in t.acked}},
    )


class TargetWorker:
    """The coordinator's handle on one target's worker processes (one, or `processes` with the
    load spread over them); a LoadHandle like TargetLoad."""

    def __init__(self, index: int, target: Target, workload: Workload, run_id: str,
                 record_raw: bool, audit: bool, publish: Publish,
                 processes: int = 1, log_dir: Path | None = None,
                 cluster: ClusterPlacement | None = None) -> None:
        """`cluster`: the clients run in actors on its nodes (loadgen.cluster) and a local
        process owns only the stack; `processes` is then not used."""
        self.index = index
        self.target = target
        self.label: str = target.label
        self.totals = TargetTotals(self.label)
        self._publish = publish
        self._described: dict[str, Any] | None = None
        self._assignments = AssignmentWatch()
        self._clock_bound = BoundWatch(self.label, publish)
        # channels whose node was lost (a cluster's), with their last counts, and every
        # channel's last counts; each channel's clients, to say what a loss takes
        self._lost: dict[int, TargetTotals | None] = {}
        self._last: dict[int, TargetTotals] = {}
        self._shares: dict[int, Placement] = {}
        self._producers = 0
        self._time_lag = TimeLagBook()
        # each channel's tick asked and not yet counted: (the tick's seq, the answer to come)
        self._asked: dict[int, tuple[int, asyncio.Future[Any]]] = {}
        self._remote = cluster is not None  # load nodes a tick does not wait for past its due
        self._same_node = False  # --same-node-latency: each node told its own producers
        args = (index, target, workload, run_id, record_raw, audit)
        self._procs: list[LoadChannel]
        if cluster is None:
            self._procs = [_LoadProcess(self.label, (*args, (k, processes), log_dir), publish)
                           for k in range(processes)]
        else:
            self._procs = [_LoadProcess(self.label, (*args, STACK_ONLY, log_dir), publish),
                           *cluster.load_workers(*args, log_dir, publish)]
            self._same_node = cluster.same_node_latency
            w = workload
            shares = place(w.topics * w.producers, w.topics * w.subscriptions * w.consumers,
                           len(self._procs) - 1, cluster.split_roles)
            self._shares = {k + 1: share for k, share in enumerate(shares)}
            self._producers = w.topics * w.producers

    def spawn(self) -> None:
        """Start the worker processes. Done before a dashboard takes over the terminal:
        starting a process needs the real standard streams."""
        for p in self._procs:
            p.spawn()

    async def start(self, progress: Callable[[str], None]) -> None:
        first, *others = self._procs
        first.progress = progress
        self._described, desc = await first.request("start")
        if others:
            progress(f"{self.label}: starting {len(others)} more load process(es)")
            await asyncio.gather(*(p.request("join", desc) for p in others))
        if self._same_node:
            await self._time_same_node(others)

    async def _time_same_node(self, actors: list[LoadChannel]) -> None:
        """Tell each load actor the producers of its node (of every actor of the target
        there), whose messages alone its consumers time."""
        nodes = [getattr(a, "where", {}).get("node_id", "") for a in actors]
        on: dict[str, set[int]] = {}
        for k, node in enumerate(nodes, 1):
            on.setdefault(node, set()).update(self._shares[k].producers)
        await asyncio.gather(*(a.request("same_node", frozenset(on[node]))
                               for a, node in zip(actors, nodes, strict=True)))

    def describe(self) -> dict[str, Any]:
        if self._described is not None:
            return self._described
        return {"label": self.label, "spec": self.target.spec, "platform": self.target.platform,
                "options": dict(self.target.options), "runtime": self.target.runtime}

    def _alive(self) -> list[tuple[int, LoadChannel]]:
        return [(i, p) for i, p in enumerate(self._procs) if i not in self._lost]

    def _node_lost(self, i: int, why: str) -> None:
        """A cluster node's load actor is gone: said once; its clients are left out from now
        on (their share of the rate is lost, not dealt to the other nodes: each producer's
        schedule and message sequence were that actor's, and dealing them over would change
        the other nodes' producers and rates mid-run), its last counts kept."""
        if i in self._lost:
            return
        self._lost[i] = self._last.get(i)
        share = self._shares.get(i, Placement())
        part = len(share.producers) / self._producers if self._producers else 0.0
        self._publish(RunEvent(
            time.time_ns(), self.label, EventKind.NODE_LOST,
            f"{why}: its {len(share.producers)} producer(s) and {len(share.consumers)} "
            f"consumer(s) stop for the rest of the run, the rate loses their share "
            f"({part:.0%}); the other nodes go on"))

    def _noted(self, i: int, fut: asyncio.Future[Any]) -> None:
        """A request nobody waits for: a node lost meanwhile is said."""
        if not fut.cancelled() and isinstance(fut.exception(), NodeLost):
            self._node_lost(i, str(fut.exception()))

    def _send_all(self, op: str, *args: Any) -> None:
        for i, p in self._alive():
            p.request(op, *args).add_done_callback(partial(self._noted, i))

    async def _each(self, op: str, *args: Any) -> list[tuple[int, Any]]:
        """`op` on every channel still there, side by side: (channel, answer) of those that
        answered. A node lost meanwhile is said and left out from then on; any other failure
        is raised."""
        alive = self._alive()
        answers = await asyncio.gather(*(p.request(op, *args) for _, p in alive),
                                       return_exceptions=True)
        out: list[tuple[int, Any]] = []
        failed: BaseException | None = None
        for (i, _), answer in zip(alive, answers, strict=True):
            if isinstance(answer, NodeLost):
                self._node_lost(i, str(answer))
            elif isinstance(answer, BaseException):
                failed = failed or answer
            else:
                out.append((i, answer))
        if failed is not None:
            raise failed
        return out

    def start_load(self, t0_mono: int, t0_wall: int, end_mono: int) -> None:
        self._send_all("start_load", t0_mono, t0_wall, end_mono)

    def stop_producing_at(self, end_mono: int) -> None:
        self._send_all("stop_producing_at", end_mono)

    def _take_counts(self, parts: list[TargetTotals]) -> None:
        # keep the coordinator's drain bookkeeping, take the workers' counts (a lost node's
        # as it last gave them)
        parts = parts + [t for t in self._lost.values() if t is not None]
        totals = _sum_totals(self.label, parts)
        totals.expected, totals.drained, totals.final_lag, totals.lost, totals.audit = (
            self.totals.expected, self.totals.drained, self.totals.final_lag, self.totals.lost,
            self.totals.audit)
        self.totals = totals

    async def stop_producers(self) -> None:
        self._take_counts([totals for _, totals in await self._each("stop_producers")])

    async def fault(self, action: str, broker: str) -> None:
        """Pause, unpause, kill, start or restart one broker of the target (docker runtime);
        recorded as a run event."""
        await self._procs[0].request("fault", action, broker)

    async def network_fault(self, item: Intervention) -> str:
        """A network fault on the target's proxied links (the first process runs the proxy);
        returns what it did."""
        return str(await self._procs[0].request("network_fault", item))

    async def collect_audit(self) -> AuditLedger | None:
        """The audit's records of every process still there, merged (a lost node's records
        went with it: see docs/delivery-audit.md)."""
        parts = [p for _, p in await self._each("collect_audit") if p is not None]
        return merge(parts) if parts else None

    async def control(self, item: Intervention) -> str:
        """A change of the load (rate, producers or consumers stopped or started) in every
        process of the target; returns what changed (old → new)."""
        details = [str(d) for _, d in await self._each("control", item)]
        dropped = [d.split("; ", 1) for d in details if d.endswith(DROPPED_SLOTS)]
        if not dropped:
            return details[0]
        count = sum(dropped_slots(d) for d in details)
        return f"{dropped[0][0]}; {count:,} {DROPPED_SLOTS}"

    async def _node_ticks(self, seq: int, time_ns: int, phase: Phase,
                          elapsed_s: float) -> tuple[list[tuple[int, Any]], int, int]:
        """Every channel's tick, asked once: (channel, answer) of those in, in channel order;
        the load nodes whose answer is not in after NODE_TICK_WAIT_S (late: asked again only
        once it is in, and counted in the tick it comes in by); the late answers of earlier
        ticks counted in this one. The first channel (the stack's) is always waited for; the
        local placement's processes too (no deadline)."""
        alive = self._alive()
        for i, p in alive:
            if i not in self._asked:
                self._asked[i] = (seq, p.request("tick", seq, time_ns, phase, elapsed_s))
        futures = {i: self._asked[i][1] for i, _ in alive}
        first = futures.pop(alive[0][0])
        wait = NODE_TICK_WAIT_S if self._remote else None
        if futures:
            await asyncio.wait([first, *futures.values()], timeout=wait)
        await asyncio.wait([first])
        out: list[tuple[int, Any]] = []
        failed: BaseException | None = None
        late = counted = 0
        for i, _ in alive:
            asked_seq, fut = self._asked[i]
            if not fut.done():
                late += 1
                continue
            del self._asked[i]
            answer = fut.exception()
            if isinstance(answer, NodeLost):
                self._node_lost(i, str(answer))
            elif answer is not None:
                failed = failed or answer
            else:
                out.append((i, fut.result()))
                counted += asked_seq != seq
        if failed is not None:
            raise failed
        return out, late, counted

    async def tick(self, seq: int, time_ns: int, phase: Phase, elapsed_s: float) -> Tick:
        replies, late, counted = await self._node_ticks(seq, time_ns, phase, elapsed_s)
        for i, (_, totals) in replies:
            self._last[i] = totals
        self._take_counts([t for i, t in self._last.items() if i not in self._lost])
        tick = self._time_lag.resolve(_merge_ticks([t for _, (t, _) in replies]))
        if self._lost or late or counted:
            # a lost node's share is missing from now on, a late one's from this tick (and
            # counted in a later one): flagged, never filled in
            tick = dataclasses.replace(tick, nodes_lost=len(self._lost), nodes_late=late,
                                       nodes_late_counted=counted)
        self._clock_bound.check(tick)
        for detail in self._assignments.changes(tick.consumers):
            self._publish(RunEvent(time.time_ns(), self.label, "assignment", detail))
        return tick

    async def close(self) -> None:
        """Stop the load processes, then the first (brokers down); never raises."""
        for _, fut in self._asked.values():  # a node still late at the end: its final counts tell
            fut.cancel()
        self._asked.clear()
        first, *others = self._procs
        finals = list(await asyncio.gather(*(p.close() for p in others)))
        finals.insert(0, await first.close())
        if all(f is not None or i in self._lost for i, f in enumerate(finals)):
            self._take_counts([f for f in finals if f is not None])


if TYPE_CHECKING:  # mypy checks that both are LoadHandles
    _HANDLES: tuple[type[LoadHandle], ...] = (TargetLoad, TargetWorker)
