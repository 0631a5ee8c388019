"""Ray as a placement of a target's load (`streambench run --cluster`): each target's producers
and consumers run in Ray actors on the cluster's nodes, one actor per node of a placement group,
dealt over them as over local worker processes (loadgen.placement). The coordinator, the
dashboard, the run files and the stacks stay where streambench runs: a local worker process
owns each target's stack and collectors (share STACK_ONLY) and runs no client.

The coordinator reaches an actor through `LoadActorHandle`, which answers the requests of a
local worker process (loadgen.worker), so TargetWorker drives both alike. Bus items an actor
publishes come back with its replies and through a poll that also serves as its lease: an actor
that hears nothing from its coordinator for LEASE_S (the coordinator killed, its connection
lost) closes its clients and exits; Ray itself ends the actors of a driver that is gone.

Ray is imported only here, and only when a run asks for a cluster: the local placement needs
none of it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from loadgen.clocks import (
    BURST,
    CLOCK_EVERY_S,
    WALL_SHIFT_ENV,
    ClockCadence,
    Exchange,
    estimate,
    shift_wall_clock,
)
from loadgen.core.errors import NodeLost, StackError, StreambenchError
from loadgen.core.events import EventKind, RunEvent
from loadgen.core.target import Target
from loadgen.core.ticks import NodeClock
from loadgen.core.workload import Workload
from loadgen.load import Publish, TargetLoad, TargetTotals
from loadgen.pacing import run_precise
from loadgen.tick_relay import RelayGroup, TickRelay, group_size, groups
from loadgen.worker import (
    HANDLERS,
    ORPHAN_CLOSE_S,
    open_files_to_hard_limit,
    picklable,
    quiet_asyncio_log,
)

NAMESPACE = "streambench"
LEASE_S = 10.0  # an actor that hears nothing from its coordinator for this long ends itself
# how long a poll waits for bus items before it answers empty: an item is sent at once, and
# the ticks renew the lease each second, so the poll's own round trip is needed only for the
# lease while no tick comes (under LEASE_S) and for the items between ticks
POLL_S = 4.0
CONNECT_TIMEOUT_S = 30.0  # for the cluster to answer and the placement group to be placed
_CLOSE_TIMEOUT_S = 60.0
_CLOCK_EXCHANGES = 5
STRATEGIES = {"spread": "STRICT_SPREAD", "pack": "PACK"}
CLIENT_ATTEMPTS = 3


class ClusterError(StreambenchError):
    """The cluster cannot be used: unreachable, another Ray version, too few nodes."""


def _boot_id() -> str:
    """The kernel's boot id: two processes with the same one share CLOCK_MONOTONIC."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _check_answers(address: str) -> None:
    """One TCP connection to the head first: Ray itself retries an address nothing answers
    at for a minute, saying so in lines of its own."""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=3):
            pass
    except ValueError:
        raise ClusterError(f"--cluster {address}: expected ray://HOST:PORT, HOST:PORT or auto") from None
    except OSError as exc:
        raise ClusterError(f"cannot reach the Ray cluster at {address}: "
                           f"{exc.strerror or exc}") from None


def _join(ray: Any, address: str) -> None:
    """ray.init, given CLIENT_ATTEMPTS through Ray Client: its server starts a server process
    per client, which on a loaded head can fail to come up ("Starting Ray client server
    failed") where the next one does."""
    attempts = CLIENT_ATTEMPTS if address.startswith("ray://") else 1
    for attempt in range(1, attempts + 1):
        try:
            ray.init(address=address, namespace=NAMESPACE, log_to_driver=False,
                     configure_logging=False)
            return
        except Exception as exc:
            with contextlib.suppress(Exception):
                ray.shutdown()
            if attempt == attempts or "client server failed" not in str(exc):
                raise
            time.sleep(1.0)


def client_modules(platform: str) -> list[str]:
    """What a node must import to run a platform's clients: the module its driver is made in
    (which imports the client library) and its optional client, if it declares one."""
    from loadgen.platforms import PLATFORMS

    record = PLATFORMS[platform]
    modules = [record.make_driver.__module__]
    if record.optional_client is not None:
        modules.append(record.optional_client.module)
    return modules


def missing_clients(modules: dict[str, list[str]]) -> tuple[str, str, dict[str, str]]:
    """Run on a node (a Ray task): its id, host name and, per platform, the first module it
    cannot import and why."""
    import importlib

    import ray

    missing: dict[str, str] = {}
    for platform, names in modules.items():
        for name in names:
            try:
                importlib.import_module(name)
            except ImportError as exc:
                missing[platform] = f"{exc.name or name} ({exc})"
                break
    return ray.get_runtime_context().get_node_id(), socket.gethostname(), missing


class Replies:
    """Ray replies handed to the event loop in batches. The answers asked for in one turn of
    the loop (every node's tick, of every target) are waited for together by one `ray.wait`
    in a thread and handed over in one wake-up of the loop, not one each: awaiting each reply
    on its own wakes the loop, and Ray's I/O thread, once a node. What is not in after
    WAIT_SLICE_S (a late node) is left to Ray's own future of it, so that no thread waits on
    a stalled node; clock bursts run in threads of their own, each exchange given at most
    BURST_TIMEOUT_S."""

    WAIT_SLICE_S = 0.2  # under the ticks' wait for late nodes (worker.NODE_TICK_WAIT_S)
    BURST_TIMEOUT_S = 10.0

    def __init__(self) -> None:
        self._batch: list[tuple[Any, asyncio.Future[Any]]] = []
        self._threads = ThreadPoolExecutor(max_workers=2, thread_name_prefix="ray-replies")
        self._bursts = ThreadPoolExecutor(max_workers=4, thread_name_prefix="ray-clock")

    def get(self, ref: Any) -> asyncio.Future[Any]:
        """The future of the reply of `ref` (an ObjectRef)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self._batch.append((ref, fut))
        if len(self._batch) == 1:
            loop.call_soon(self._send, loop)
        return fut

    def _send(self, loop: asyncio.AbstractEventLoop) -> None:
        batch, self._batch = self._batch, []
        self._threads.submit(self._wait, loop, batch)

    def _wait(self, loop: asyncio.AbstractEventLoop,
              batch: list[tuple[Any, asyncio.Future[Any]]]) -> None:
        """In a thread: wait for the batch's replies for WAIT_SLICE_S, hand over those in,
        and chain the others to Ray's futures of them."""
        import ray

        pending = dict(batch)
        ready, late = ray.wait(list(pending), num_returns=len(pending),
                               timeout=self.WAIT_SLICE_S)
        answers: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = []
        for ref in ready:
            fut = pending.pop(ref)
            try:
                answers.append((fut, ray.get(ref), None))
            except Exception as exc:  # the actor is gone: its caller says so
                answers.append((fut, None, exc))
        if loop.is_closed():
            return
        if answers:
            loop.call_soon_threadsafe(self._resolve, answers)
        for ref in late:
            ref.future().add_done_callback(partial(self._late, loop, pending[ref]))

    def _late(self, loop: asyncio.AbstractEventLoop, fut: asyncio.Future[Any],
              done: Any) -> None:
        """A late reply, in whichever thread Ray completes its future."""
        if done.cancelled():
            return
        answer = (fut, None, done.exception()) if done.exception() else (fut, done.result(), None)
        if not loop.is_closed():
            loop.call_soon_threadsafe(self._resolve, [answer])

    @staticmethod
    def _resolve(answers: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
        for fut, value, exc in answers:
            if fut.done():  # its caller gave up on it
                continue
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(value)

    def burst(self, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        """`fn` (a clock burst: blocking Ray calls) in one of the burst threads."""
        return asyncio.wrap_future(self._bursts.submit(fn))

    def close(self) -> None:
        for threads in (self._threads, self._bursts):
            threads.shutdown(wait=False, cancel_futures=True)


class LoadActor:
    """One share of a target's clients on a node of the cluster (made a Ray actor by
    Cluster). The load runs on a precise event loop in a thread of its own, as in a worker
    process; Ray's calls hand their requests over to it."""

    def __init__(self, index: int, target: Target, workload: Workload, run_id: str,
                 record_raw: bool, audit: bool, share: tuple[int, int],
                 log_dir: Path | None, split_roles: bool = False) -> None:
        shift = os.environ.get(WALL_SHIFT_ENV)
        if shift:  # the test hook: this node's wall clock is wrong by that much
            shift_wall_clock(float(shift))
        self._items: list[object] = []  # bus items not yet handed to the coordinator
        self._split_roles = split_roles
        self._heard = time.monotonic()
        self._started = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._closed: asyncio.Event | None = None
        make = partial(TargetLoad, index, target.label, target, workload, run_id, record_raw,
                       audit, self._publish, share, log_dir, primary=False)
        threading.Thread(target=self._main, args=(make,), name="streambench-load",
                         daemon=True).start()
        self._started.wait()
        # the lease counts from now: making the load (its client's imports) can take seconds
        # on a busy node
        self._heard = time.monotonic()

    # ---- the load's thread ----------------------------------------------------------------

    def _main(self, make: Callable[[], TargetLoad]) -> None:
        quiet_asyncio_log()
        open_files_to_hard_limit()
        run_precise(self._serve(make))

    async def _serve(self, make: Callable[[], TargetLoad]) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake, self._closed = asyncio.Event(), asyncio.Event()
        self.load = make()
        self.load.split_roles = self._split_roles
        import ray

        self.load.node = (ray.get_runtime_context().get_node_id(), socket.gethostname())
        self._started.set()
        while not self._closed.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closed.wait(), 1.0)
            if time.monotonic() - self._heard > LEASE_S:  # the coordinator is gone
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self.load.close(), ORPHAN_CLOSE_S)
                os._exit(0)

    def _publish(self, item: object) -> None:
        self._items.append(item)
        assert self._wake is not None
        self._wake.set()

    def _take(self) -> list[object]:
        items, self._items = self._items, []
        assert self._wake is not None
        self._wake.clear()
        return items

    async def _handle(self, op: str, args: tuple[Any, ...]) -> tuple[list[object], bool, Any]:
        try:
            if op == "close":
                await self.load.close()
                assert self._closed is not None and self._wake is not None
                self._closed.set()
                items = self._take()
                self._wake.set()  # a poll waiting answers now
                return items, True, self.load.totals
            handler = HANDLERS.get(op)
            if handler is None or op == "start":  # the stack is the coordinator's, not here
                raise StackError(f"unknown request {op!r}")
            value = await handler(self.load, None, *args)
            return self._take(), True, value
        except Exception as exc:
            return self._take(), False, picklable(exc)

    async def _wait_items(self, wait_s: float) -> list[object]:
        assert self._wake is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), wait_s)
        return self._take()

    # ---- what Ray calls -------------------------------------------------------------------

    async def call(self, op: str, args: tuple[Any, ...]) -> tuple[list[object], bool, Any]:
        """One request of the worker protocol: (bus items, ok, value or error)."""
        self._heard = time.monotonic()
        assert self._loop is not None
        return await asyncio.wrap_future(
            asyncio.run_coroutine_threadsafe(self._handle(op, args), self._loop))

    async def poll(self, wait_s: float) -> list[object]:
        """The bus items published since the last answer, within `wait_s`; renews the
        lease; nothing once closed."""
        self._heard = time.monotonic()
        assert self._loop is not None and self._closed is not None
        if self._closed.is_set():
            return []
        return await asyncio.wrap_future(
            asyncio.run_coroutine_threadsafe(self._wait_items(wait_s), self._loop))

    def clock(self) -> int:
        now = time.monotonic_ns()
        self._heard = now / 1e9  # every call of the coordinator's renews the lease
        return now

    async def wall(self) -> tuple[int, int]:
        """This node's wall clock when the request came in and when it is answered (t2, t3
        of a clock exchange: loadgen.clocks)."""
        t2 = time.time_ns()
        self._heard = time.monotonic()
        return t2, time.time_ns()

    def where(self) -> dict[str, Any]:
        import ray

        self._heard = time.monotonic()
        return {"node_id": ray.get_runtime_context().get_node_id(),
                "hostname": socket.gethostname(), "pid": os.getpid(),
                "ray_version": ray.__version__, "boot_id": _boot_id()}


class LoadActorHandle:
    """The coordinator's end of one LoadActor: the requests of loadgen.worker's _LoadProcess
    (request, close), so TargetWorker cannot tell them apart. Monotonic times cross as they
    are to a node of this machine and shifted by the node's estimated offset to another."""

    def __init__(self, cluster: Cluster, label: str, share: int, args: tuple[Any, ...],
                 publish: Publish) -> None:
        self.cluster = cluster
        self.label = label
        self.share = share
        self._args = args
        self._publish = publish
        self.progress: Callable[[str], None] = lambda _msg: None
        self._actor: Any = None
        self._ready: asyncio.Task[None] | None = None
        self._poller: asyncio.Task[None] | None = None
        self._offset_ns = 0  # the actor's monotonic clock minus the coordinator's
        self._mono_bound_ns = 0  # the most that offset can be wrong by
        self._closing = False
        self.lost = False  # it ran, then its node or process went
        self._clock_stop = asyncio.Event()
        self._clock_task: asyncio.Task[None] | None = None
        self.clocks: list[NodeClock] = []  # every estimate of the node's wall clock, in order
        self.where: dict[str, Any] = {}
        self.relay: RelayGroup | None = None  # the tick relay of its group (--tick-group)

    def spawn(self) -> None:
        if self._actor is None:
            self._actor = self.cluster.create_actor(self.share, self._args)
            if self.relay is not None:
                self.relay.member_spawned(self.share, self._actor)

    def _direct(self, op: str, args: tuple[Any, ...]) -> asyncio.Future[Any]:
        return self.cluster.replies.get(self._actor.call.remote(op, self._shifted(op, args)))

    async def _prepare(self) -> None:
        import ray

        where = await self._actor.where.remote()
        if where["boot_id"] != _boot_id() or not where["boot_id"]:
            best: tuple[int, int] | None = None  # (round trip, offset) of the fastest exchange
            for _ in range(_CLOCK_EXCHANGES):
                t1 = time.monotonic_ns()
                t2 = await self._actor.clock.remote()
                t4 = time.monotonic_ns()
                if best is None or t4 - t1 < best[0]:
                    best = (t4 - t1, t2 - (t1 + t4) // 2)
            assert best is not None
            self._mono_bound_ns, self._offset_ns = -(-best[0] // 2), best[1]
        node = self.cluster.node(where["node_id"])
        self.where = {"node_id": where["node_id"], "hostname": where["hostname"],
                      "ip": node.get("NodeManagerAddress", ""),
                      "cpus": node.get("Resources", {}).get("CPU", 0),
                      "ray_version": where["ray_version"], "pid": where["pid"]}
        if where["ray_version"] != ray.__version__:
            raise ClusterError(f"{self.label}: Ray {where['ray_version']} on node "
                             f"{where['node_id'][:12]}, {ray.__version__} here")
        if self._mono_bound_ns:
            self.where["monotonic_bound_ns"] = self._mono_bound_ns
        self._poller = asyncio.create_task(self._poll())
        clock = await self._wall_clock()
        await self._set_clock(clock)
        self._clock_task = asyncio.create_task(self._follow_clock(clock))

    def _burst(self) -> list[Exchange]:
        """A burst of clock exchanges, in one of the cluster's reply threads: each reply's
        t4 is read as it comes, not when the event loop gets to it, and the loop wakes once
        a burst, not once an exchange."""
        import ray

        burst = []
        for _ in range(BURST):
            t1 = time.time_ns()
            t2, t3 = ray.get(self._actor.wall.remote(), timeout=Replies.BURST_TIMEOUT_S)
            burst.append(Exchange(t1, t2, t3, time.time_ns()))
        return burst

    async def _wall_clock(self) -> NodeClock:
        """The node's wall clock against this one's, from a burst of exchanges."""
        offset, bound = estimate(await self.cluster.replies.burst(self._burst))
        clock = NodeClock(self.where["node_id"], offset, bound, time.time_ns())
        self.clocks.append(clock)
        return clock

    async def _set_clock(self, clock: NodeClock) -> None:
        items, ok, value = await self.cluster.replies.get(self._actor.call.remote("clock", (clock,)))
        for item in items:
            self._publish(item)
        if not ok:
            raise value

    async def _follow_clock(self, first: NodeClock) -> None:
        """A burst when the cadence says (every few seconds, less often while the node's
        offset holds still), its estimate handed to the actor, until closing."""
        cadence = ClockCadence()
        wait_s = cadence.next_in(first)
        while not self._clock_stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._clock_stop.wait(), wait_s)
                return
            try:
                clock = await self._wall_clock()
                await self._set_clock(clock)
            except TimeoutError:  # Ray's GetTimeoutError: a stalled node, tried again later
                wait_s = CLOCK_EVERY_S
                continue
            except Exception:
                return  # the actor is gone: the next request says so
            wait_s = cadence.next_in(clock)

    async def _poll(self) -> None:
        while not self._closing:
            try:
                items = await self._actor.poll.remote(POLL_S)
            except Exception:
                return  # the actor is gone: the next request says so
            for item in items:
                self._publish(item)

    def _shifted(self, op: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
        if op == "start_load":
            t0_mono, t0_wall, end_mono = args
            return (t0_mono + self._offset_ns, t0_wall, end_mono + self._offset_ns)
        if op == "stop_producing_at":
            return (args[0] + self._offset_ns,)
        return args

    async def _call(self, op: str, args: tuple[Any, ...]) -> Any:
        self.spawn()
        if self._ready is None:
            self._ready = asyncio.create_task(self._prepare())
        try:
            await asyncio.shield(self._ready)
            if op == "tick" and self.relay is not None:  # with the group's other nodes'
                reply = self.relay.ask(self.share, args, partial(self._direct, op, args))
            else:
                reply = self._direct(op, args)
            items, ok, value = await reply
        except StreambenchError:
            raise
        except Exception as exc:
            where = self.where.get("hostname") or "its node"
            ready = self._ready
            if ready.done() and not ready.cancelled() and ready.exception() is None:  # it ran
                self.lost = True
                raise NodeLost(f"the load actor on {where} (node "
                               f"{self.where.get('node_id', '')[:12]}) is gone "
                               f"({type(exc).__name__})") from None
            raise StackError(f"{self.label}: the load actor on {where} ended unexpectedly "
                             f"({type(exc).__name__})") from None
        for item in items:
            self._publish(item)
        if not ok:
            raise value
        return value

    def request(self, op: str, *args: Any) -> asyncio.Future[Any]:
        return asyncio.ensure_future(self._call(op, args))

    async def close(self) -> TargetTotals | None:
        """Stop the actor's load and the actor; never raises. Returns its final counts when it
        could still give them."""
        if self._actor is None:
            return None
        self._clock_stop.set()
        if self.relay is not None:  # no more ticks: the group's late calls end
            self.relay.cancel()
        if self._clock_task is not None:  # a burst under way takes milliseconds
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._clock_task), 10)
        final = None
        self._closing = True  # no poll after the one under way, which the close answers
        with contextlib.suppress(Exception):
            if not self.lost:
                final = await asyncio.wait_for(self._call("close", ()), _CLOSE_TIMEOUT_S)
        # the poll under way ends with the close, else within POLL_S: Ray Client reports a
        # call given up on (a cancelled await) as a traceback of its own
        if self._poller is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._poller), POLL_S + 5)
        self.cluster.kill(self._actor)
        self._actor = None
        return final


@dataclass
class Cluster:
    """A Ray cluster the run's load goes to: the connection, the placement group (one bundle
    per node the load takes) and the actors made in it."""

    # ray://HOST:PORT (Ray Client), HOST:PORT (the head's GCS) or auto; once connected, auto
    # becomes RAY_ADDRESS when that is set
    address: str
    nodes: int | None = None  # nodes the load takes; None: every node alive
    strategy: str = "spread"  # spread: one bundle per node; pack: as few nodes as fit
    targets: int = 1
    # custom resources each node must have (a node's share asks this much of each)
    resources: dict[str, float] = field(default_factory=dict)
    # producers on the first half of the nodes, consumers on the others (OMB's default)
    split_roles: bool = False
    # only messages whose producer ran on the consumer's node are timed (the swarm topology)
    same_node_latency: bool = False
    # the platforms whose clients the nodes run: checked on each node before any actor
    platforms: tuple[str, ...] = ()
    # nodes whose ticks a relay gathers (--tick-group; 0: none; None: tick_relay.group_size)
    tick_group: int | None = None
    ray_version: str = ""
    _group: Any = None
    _nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    _actor_class: Any = None
    handles: list[LoadActorHandle] = field(default_factory=list)
    # the actors' replies, handed to the event loop a batch at a time
    replies: Replies = field(default_factory=Replies)
    relays: list[RelayGroup] = field(default_factory=list)

    @property
    def workers(self) -> int:
        assert self.nodes is not None, "connect() first"
        return self.nodes

    def connect(self) -> None:
        """Reach the cluster and place the group; raises ClusterError with one line."""
        try:
            import ray
            from ray.util.placement_group import placement_group
        except ImportError:
            raise ClusterError("--cluster needs Ray: pip install 'streambench[cluster]'") from None
        self.ray_version = ray.__version__
        address = self.address = self._resolved_address()
        _check_answers(address)
        try:
            _join(ray, address)
        except ConnectionError as exc:
            if address != "auto":
                text = " ".join(str(exc).split()) or type(exc).__name__
                raise ClusterError(f"cannot reach the Ray cluster at {address}: {text[:300]}") from None
            raise ClusterError("--cluster auto: RAY_ADDRESS is not set and no Ray head runs on "
                               "this machine (ray start --head)") from None
        except Exception as exc:
            text = " ".join(str(exc).split()) or type(exc).__name__
            raise ClusterError(f"cannot use the Ray cluster at {address}: {text[:300]}") from None
        self._nodes = {n["NodeID"]: n for n in ray.nodes() if n.get("Alive")}
        alive = len(self._nodes)
        self.nodes = self.nodes or alive
        if self.split_roles and self.nodes < 2:
            self.close()
            raise ClusterError(f"--split-roles: producers and consumers need 2 nodes or more, "
                               f"the load takes {self.nodes}")
        if self.split_roles and self.same_node_latency:
            self.close()
            raise ClusterError("--same-node-latency with --split-roles times nothing: no node "
                               "both produces and consumes")
        if self.strategy == "spread" and self.nodes > alive:
            self.close()
            raise ClusterError(f"--nodes {self.nodes} --placement spread: the cluster at "
                               f"{address} has {alive} node{'s' if alive != 1 else ''} alive")
        # one actor per target on each bundle's node
        bundle = {"CPU": float(self.targets), **self.resources}
        self._group = placement_group([dict(bundle) for _ in range(self.nodes)],
                                      strategy=STRATEGIES[self.strategy],
                                      name=f"streambench-{os.getpid()}")
        try:
            ray.get(self._group.ready(), timeout=CONNECT_TIMEOUT_S)
        except Exception:
            self.close()
            asked = ", ".join(f"{v:g} {k}" for k, v in bundle.items())
            raise ClusterError(f"the Ray cluster at {address} cannot place {self.nodes} × "
                               f"{asked} ({self.strategy}) within {CONNECT_TIMEOUT_S:.0f} s: "
                               "too few nodes with those free") from None
        self._check_clients(ray)
        self._actor_class = ray.remote(num_cpus=1, max_restarts=0)(LoadActor)

    def _check_clients(self, ray: Any) -> None:
        """A small task on each node of the group: every platform's client imports there, or
        ClusterError names the node and the module, before any actor or broker starts."""
        if not self.platforms:
            return
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        modules = {name: client_modules(name) for name in self.platforms}
        task = ray.remote(num_cpus=1, max_retries=0)(missing_clients)
        refs = [task.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self._group, placement_group_bundle_index=k)).remote(modules)
                for k in range(self.workers)]
        try:
            answers = ray.get(refs, timeout=CONNECT_TIMEOUT_S)
        except Exception as exc:
            self.close()
            raise ClusterError(f"the nodes of the Ray cluster at {self.address} did not say "
                               f"within {CONNECT_TIMEOUT_S:.0f} s whether they have the "
                               f"clients ({type(exc).__name__})") from None
        for node, host, missing in answers:
            for platform, why in missing.items():
                self.close()
                raise ClusterError(f"{platform}: node {node[:12]} ({host}) cannot import its "
                                   f"client, {why}: install streambench with the same extras "
                                   "on every node")

    def _resolved_address(self) -> str:
        if self.address != "auto":
            return self.address
        return os.environ.get("RAY_ADDRESS") or "auto"

    def node(self, node_id: str) -> dict[str, Any]:
        return self._nodes.get(node_id, {})

    def create_actor(self, share: int, args: tuple[Any, ...]) -> Any:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        strategy = PlacementGroupSchedulingStrategy(self._group,
                                                    placement_group_bundle_index=share)
        return self._actor_class.options(scheduling_strategy=strategy).remote(*args)

    def kill(self, actor: Any) -> None:
        import ray

        with contextlib.suppress(Exception):
            ray.kill(actor, no_restart=True)

    def load_workers(self, index: int, target: Target, workload: Workload, run_id: str,
                     record_raw: bool, audit: bool, log_dir: Path | None,
                     publish: Publish) -> list[LoadActorHandle]:
        """The actors of one target, one per bundle, share k of `workers` on bundle k."""
        made = [LoadActorHandle(self, target.label, k,
                                (index, target, workload, run_id, record_raw, audit,
                                 (k, self.workers), log_dir, self.split_roles), publish)
                for k in range(self.workers)]
        size = self.group_size

        def gone(members: list[int], why: str) -> None:
            publish(RunEvent(time.time_ns(), target.label, EventKind.RELAY_LOST,
                             f"the tick relay of workers {', '.join(map(str, members))} is gone "
                             f"({why}): they are asked for their ticks directly from now on"))

        for members in groups(list(range(self.workers)), size) if size else ():
            relay = RelayGroup(len(members), self._create_relay, self.replies.get,
                               partial(gone, members))
            for k in members:
                made[k].relay = relay
            self.relays.append(relay)
        self.handles += made
        return made

    @property
    def group_size(self) -> int:
        """Nodes a tick relay gathers; 0: none."""
        return group_size(self.tick_group, self.workers)

    def _create_relay(self, actors: dict[int, Any], share: int) -> Any:
        """A group's TickRelay, with no CPU of its own, on share's node."""
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        strategy = PlacementGroupSchedulingStrategy(self._group,
                                                    placement_group_bundle_index=share)
        relay = ray.remote(num_cpus=0, max_restarts=0)(TickRelay)
        return relay.options(scheduling_strategy=strategy).remote(actors)

    def placement(self) -> dict[str, Any]:
        """run.json's cluster_placement: where every load actor ran."""
        return {"address": self.address, "strategy": self.strategy, "nodes": self.workers,
                "split_roles": self.split_roles, "same_node_latency": self.same_node_latency,
                "ray_version": self.ray_version, "tick_group": self.group_size,
                "workers": [{"target": h.label, "worker": h.share, **h.where,
                             "clock": [{"time_ns": c.estimated_ns, "offset_ns": c.offset_ns,
                                        "bound_ns": c.bound_ns} for c in h.clocks]}
                            for h in self.handles]}

    def close(self) -> None:
        """Remove the placement group and leave the cluster; never raises."""
        with contextlib.suppress(Exception):
            import ray
            from ray.util.placement_group import remove_placement_group

            self.replies.close()
            for relay in self.relays:
                if relay.relay is not None:
                    ray.kill(relay.relay, no_restart=True)
            if self._group is not None:
                remove_placement_group(self._group)
            self._group = None
            ray.shutdown()

