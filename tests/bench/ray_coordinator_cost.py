"""Benchmark: what one node's tick costs the coordinator. One Redis target at a fixed rate with
its load on 1, 2 and 3 Ray nodes of this machine (--cluster, loopback; one actor per node)
against the local placement with as many worker processes (--processes N), every run with one
producer and one consumer per node or process.

For each run it prints the coordinator's CPU over the measuring phase (this process's user +
system time, every thread's, read with nanosecond resolution: the run loop, the Parquet
writer and, with Ray, the driver's threads) per tick,
and per tick and node; the bytes of one node's tick reply (the tick and its counts, pickled as
Ray and the local pipes carry them: kept during the run, measured after it, so that measuring
costs the coordinator nothing while it is timed); and the marginal cost of a node (the slope
from 1 to 3 nodes), from which docs/architecture.md works out 100 nodes x 3 targets. Each run's
produced count is checked against the server's XADD calls and its consumed count against its
produced count.

The Ray runs are made three times side by side: with the run's nodes' ticks gathered by one
tick relay (`ray-relay`, --tick-group N on N nodes: one tick call a second whatever N), each
node asked directly as the coordinator works now (`ray`), and as it did before
(`ray-before`): each node's reply awaited on its own (a wake-up of the event loop for
each), each clock exchange of a burst awaited on the loop, and a burst every
clocks.CLOCK_EVERY_S whatever the offset does; now the replies asked for together are waited
for together in a thread, a burst runs in that thread, and bursts are spaced to
clocks.STEADY_EVERY_S once a node's offset holds still. The warm-up (20 s by default) is longer
than the bursts take to be spaced, so that the measuring phase sees the cadence a run has
after its first seconds. Each run's CPU is also split by thread (each thread's own CPU time
from /proc, exact, grouped by the thread's name: the event loop, the Parquet writer, Ray's
threads), printed for the runs on 3 nodes. `--profile` samples this process with py-spy
(every thread, only while it runs) over the measuring phase of both Ray runs on 3 nodes and
prints the functions in most samples."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import pickle
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import loadgen.clocks as clocks_module
import loadgen.worker as worker_module
from analysis.sink import ParquetSink
from loadgen.clocks import BURST, Exchange, estimate
from loadgen.cluster import Cluster, LoadActorHandle, Replies
from loadgen.core.events import PhaseChange
from loadgen.core.target import unique_labels
from loadgen.core.ticks import NodeClock, Phase
from loadgen.core.workload import Workload
from loadgen.pacing import run_precise
from loadgen.platforms import resolve_target
from loadgen.run import Run
from loadgen.tick_relay import GROUP_AUTO
from tests.conftest import redis_server
from tests.integration.ray_support import ray_start, two_node_cluster

RATE_PER_NODE = 1000.0
# --total-rate: the same rate on any number of nodes (the machine's load then the same too)
TOTAL_RATE: list[float] = [0.0]
REPLIES: list[Any] = []  # the last tick replies of a run, measured after it


def xadd_calls(port: int) -> int:
    out = subprocess.run(["redis-cli", "-p", str(port), "INFO", "commandstats"],
                         capture_output=True, text=True, check=True).stdout
    m = re.search(r"cmdstat_xadd:calls=(\d+)", out)
    return int(m.group(1)) if m else 0


async def _awaited(ref: Any) -> Any:
    return await ref


async def _burst_on_the_loop(self: LoadActorHandle) -> NodeClock:
    """A clock burst as it was made before: each exchange awaited on the event loop."""
    burst = []
    for _ in range(BURST):
        t1 = time.time_ns()
        t2, t3 = await self._actor.wall.remote()
        burst.append(Exchange(t1, t2, t3, time.time_ns()))
    offset, bound = estimate(burst)
    clock = NodeClock(self.where["node_id"], offset, bound, time.time_ns())
    self.clocks.append(clock)
    return clock


@contextlib.contextmanager
def coordinator_before() -> Iterator[None]:
    """The coordinator's Ray calls as they were made before (see the module's text)."""
    saved = (Replies.get, LoadActorHandle._wall_clock, clocks_module.STEADY_EVERY_S)
    Replies.get = lambda self, ref: asyncio.ensure_future(_awaited(ref))  # type: ignore[method-assign]
    LoadActorHandle._wall_clock = _burst_on_the_loop  # type: ignore[method-assign]
    clocks_module.STEADY_EVERY_S = clocks_module.CLOCK_EVERY_S
    try:
        yield
    finally:
        Replies.get, LoadActorHandle._wall_clock, clocks_module.STEADY_EVERY_S = saved  # type: ignore[method-assign]


RELAYED: list[bool] = [False]  # the run's nodes' ticks gathered by one relay (ray-relay)


@contextlib.contextmanager
def relayed() -> Iterator[None]:
    """The run's nodes in one tick relay group (--tick-group N on N nodes)."""
    RELAYED[0] = True
    try:
        yield
    finally:
        RELAYED[0] = False


def keep_replies() -> None:
    """TargetWorker.tick's per-node replies, kept (a list append) to be pickled later."""
    node_ticks = worker_module.TargetWorker._node_ticks

    async def kept(self: Any, *args: Any) -> Any:
        answer = await node_ticks(self, *args)
        # on a cluster channel 0 is the stack's own process, which runs no client
        REPLIES.extend(reply for i, reply in answer[0] if i > 0 or not self._shares)
        del REPLIES[:-50]
        return answer

    worker_module.TargetWorker._node_ticks = kept  # type: ignore[method-assign]


def profile_lines(raw: Path, ticks: int, nodes: int, top: int = 14) -> list[str]:
    """py-spy's raw samples (one line per stack: `frame;frame;… count`, the innermost last)
    summed per function: the functions in most samples, inclusive and self, as a share of the
    samples and as CPU per node tick (py-spy records threads only while they run)."""
    inclusive: dict[str, int] = {}
    own: dict[str, int] = {}
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [f.split(" (")[0] + " (" + f.split(" (")[-1].split(":")[0].rsplit("/", 1)[-1] + ")"
                  if " (" in f else f for f in stack.split(";")]
        for f in set(frames):
            inclusive[f] = inclusive.get(f, 0) + n
        own[frames[-1]] = own.get(frames[-1], 0) + n
    if not total:
        return ["  no samples"]
    per_node_tick = 1000 / RATE_HZ / ticks / nodes  # ms of CPU per sample per node tick
    out = [f"  {total:,} samples at {RATE_HZ} Hz over {ticks} ticks"]
    for title, table in (("inclusive", inclusive), ("self", own)):
        out.append(f"  {title}:")
        for f, n in sorted(table.items(), key=lambda kv: -kv[1])[:top]:
            out.append(f"    {n / total:6.1%} {n * per_node_tick:6.2f} ms/node tick  {f}")
    return out


RATE_HZ = 200  # py-spy's samples a second


def thread_cpu() -> dict[tuple[int, str], float]:
    """CPU seconds of each thread of this process so far, by (thread id, group): a Python
    thread's name (the event loop runs in MainThread), else the kernel's name of the thread
    (Ray's own threads), trailing numbers dropped."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[tuple[int, str], float] = {}
    for task in Path("/proc/self/task").iterdir():
        tid = int(task.name)
        try:
            ns = int((task / "schedstat").read_text().split()[0])
            comm = (task / "comm").read_text().strip()
        except OSError:  # it ended meanwhile
            continue
        name = names.get(tid) or comm
        out[(tid, re.sub(r"[_-]?\d+(_\d+)?$", "", name.split(" (")[0]))] = ns / 1e9
    return out


def by_thread(start: dict[tuple[int, str], float], end: dict[tuple[int, str], float],
              ticks: int) -> dict[str, float]:
    """ms of CPU per tick of each group of threads between two thread_cpu() readings (a
    thread started meanwhile counts from 0, one ended meanwhile is missing)."""
    groups: dict[str, float] = {}
    for key, cpu in end.items():
        groups[key[1]] = groups.get(key[1], 0.0) + (cpu - start.get(key, 0.0)) * 1000 / ticks
    return dict(sorted(groups.items(), key=lambda kv: -kv[1]))


def one_run(port: int, gcs: str | None, nodes: int, seconds: float, warmup: float,
            out: Path, profile: Path | None = None
            ) -> tuple[float, int, float, dict[str, float]]:
    """(coordinator CPU seconds over the measuring phase, measuring ticks, bytes per node
    tick reply, ms of CPU per tick by thread group) of one run; with `profile`, py-spy
    samples this process over the measuring phase into that file."""
    rate = TOTAL_RATE[0] or RATE_PER_NODE * nodes
    workload = Workload(name="bench-coord", rate=rate, message_size=256,
                        partitions=nodes, producers=nodes, consumers=nodes, duration_s=seconds,
                        warmup_s=warmup)
    cluster = None
    if gcs is not None:
        cluster = Cluster(gcs, nodes=nodes, strategy="spread",
                          tick_group=nodes if RELAYED[0] else 0)
        cluster.connect()
    marks: dict[str, Any] = {}
    ticks: list[int] = []

    def watch(item: object) -> None:
        if isinstance(item, PhaseChange) and item.phase is Phase.MEASURING:
            marks["start"] = time.process_time()
            marks["threads"] = thread_cpu()
            if profile is not None:
                marks["spy"] = subprocess.Popen(
                    [str(Path(sys.executable).with_name("py-spy")), "record", "--pid",
                     str(os.getpid()), "--rate", str(RATE_HZ), "--format", "raw", "--threads",
                     "--nonblocking", "--duration", str(round(seconds)), "--output",
                     str(profile)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if isinstance(item, PhaseChange) and item.phase is Phase.DRAINING:
            marks["end"] = time.process_time()
            marks["threads_end"] = thread_cpu()
        if getattr(item, "phase", None) is Phase.MEASURING and hasattr(item, "produced"):
            ticks.append(1)

    before_xadd = xadd_calls(port)
    REPLIES.clear()
    run = Run(workload, unique_labels([resolve_target(f"redis@127.0.0.1:{port}")]),
              out_dir=out, processes=nodes, cluster=cluster, recorder=ParquetSink)
    run.subscribe(watch)
    summary = run_precise(run.execute())
    if "spy" in marks:
        marks["spy"].wait(60)
    (t,) = summary.targets
    server = xadd_calls(port) - before_xadd
    if server != t.produced + t.send_errors or t.send_errors or t.consumed != t.produced:
        raise SystemExit(f"count mismatch: produced {t.produced:,} (+{t.send_errors} errors), "
                         f"consumed {t.consumed:,}, the server executed {server:,} XADDs")
    start, end = marks["start"], marks["end"]
    cpu = end - start
    # replies of the load processes or actors (not the stack's own process, which ticks too)
    sizes = [len(pickle.dumps(r, protocol=5)) for r in REPLIES]
    threads = by_thread(marks["threads"], marks["threads_end"], len(ticks))
    if cluster is not None:  # the clock bursts each node had over the whole run
        bursts = [len(h.clocks) for h in cluster.handles]
        print(f"  clock bursts per node over the run: {bursts}", flush=True)
    return cpu, len(ticks), statistics.median(sizes) if sizes else float("nan"), threads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20, help="measuring phase of each run")
    parser.add_argument("--warmup", type=float, default=20,
                        help="warm-up of each run: the clock bursts are spaced after it")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the nine runs")
    parser.add_argument("--profile", action="store_true",
                        help="sample the coordinator with py-spy in the Ray runs on 3 nodes and "
                             "print where its CPU goes")
    parser.add_argument("--total-rate", type=float, default=0.0,
                        help="msg/s of the target on any number of nodes (default: 1,000 a "
                             "node): the machine's load stays the same as nodes are added, so "
                             "that the slope is the coordinator's own and not the busier "
                             "machine's")
    parser.add_argument("--skip-two", action="store_true",
                        help="runs on 1 and 3 nodes only (the slope needs no more)")
    parser.add_argument("--without-before", action="store_true",
                        help="leave out the Ray runs as the coordinator was (ray-before)")
    args = parser.parse_args()
    TOTAL_RATE[0] = args.total_rate
    keep_replies()
    results: dict[tuple[str, int], list[tuple[float, int, float, dict[str, float]]]] = {}
    # the cluster's network namespace holds the nodes, the redis-server and this process's
    # runs: loopback is its only address
    with two_node_cluster() as cluster, cluster.net.entered(), redis_server() as port, \
            tempfile.TemporaryDirectory() as tmp:
        # a third node of the same cluster (its processes are the cluster's: stopped with it)
        ray_start(cluster.net, [f"--address={cluster.gcs}", '--resources={"sb_node_2": 1}'])
        # the Ray runs as the coordinator was (ray-before) and as it is, side by side
        placements = (("local", None, contextlib.nullcontext),
                      ("ray-before", cluster.gcs, coordinator_before),
                      ("ray", cluster.gcs, contextlib.nullcontext),
                      ("ray-relay", cluster.gcs, relayed))
        if args.without_before:
            placements = tuple(p for p in placements if p[0] != "ray-before")
        for k in range(args.rounds):
            for nodes in (1, 3) if args.skip_two else (1, 2, 3):
                for name, gcs, path in placements:
                    load = os.getloadavg()[0]
                    spy = (Path(tmp) / f"profile-{name}-{k}.txt"
                           if args.profile and gcs is not None and nodes == 3 else None)
                    with path():
                        r = one_run(port, gcs, nodes, args.seconds, args.warmup,
                                    Path(tmp) / f"{name}-{nodes}-{k}", spy)
                    results.setdefault((name, nodes), []).append(r)
                    cpu, n, size, threads = r
                    print(f"round {k + 1} {name:10} {nodes} node(s)/process(es): coordinator "
                          f"{cpu / n * 1000:6.2f} ms CPU per tick, {cpu / n / nodes * 1000:6.2f} "
                          f"ms per node tick, {size:,.0f} bytes per node tick "
                          f"(load {load:.1f} before)", flush=True)
                    if nodes in (1, 3):
                        print("  by thread, ms of CPU per tick: " + ", ".join(
                            f"{group} {ms:.2f}" for group, ms in threads.items() if ms >= 0.05),
                            flush=True)
                    if spy is not None and spy.exists():
                        print("\n".join(profile_lines(spy, n, nodes)), flush=True)
    print(f"\n{'placement':12}{'nodes':>6}{'CPU ms/tick':>13}{'ms/node tick':>14}"
          f"{'bytes/node tick':>17}")
    per_tick: dict[tuple[str, int], float] = {}
    for (name, nodes), rows in sorted(results.items()):
        per_tick[(name, nodes)] = statistics.median(r[0] / r[1] for r in rows) * 1000
        size = statistics.median(r[2] for r in rows)
        print(f"{name:12}{nodes:>6}{per_tick[(name, nodes)]:>13.2f}"
              f"{per_tick[(name, nodes)] / nodes:>14.2f}{size:>17,.0f}")
    for name, _, _ in placements:
        slope = (per_tick[(name, 3)] - per_tick[(name, 1)]) / 2
        print(f"{name}: marginal coordinator CPU per node tick (1 -> 3 nodes) {slope:.2f} ms; "
              f"100 nodes x 3 targets at 1 tick/s: {slope * 300 / 1000:.2f} core(s) "
              f"+ the fixed {per_tick[(name, 1)] - slope:.2f} ms per target tick")
    for name, _, _ in placements:
        by_nodes = {}
        for nodes in (1, 3):
            rows = results[(name, nodes)]
            groups = {g for r in rows for g in r[3]}
            by_nodes[nodes] = {g: statistics.median(r[3].get(g, 0.0) for r in rows)
                               for g in groups}
        medians = by_nodes[3]
        print(f"{name}, 3 nodes, by thread (medians, ms of CPU per tick): " + ", ".join(
            f"{g} {ms:.2f}" for g, ms in sorted(medians.items(), key=lambda kv: -kv[1])
            if ms >= 0.05))
        # where a node more goes: each thread group's slope from 1 to 3 nodes
        slopes = {g: (medians.get(g, 0.0) - by_nodes[1].get(g, 0.0)) / 2
                  for g in set(medians) | set(by_nodes[1])}
        print(f"{name}, by thread, ms of CPU per tick a node more (1 -> 3 nodes): " + ", ".join(
            f"{g} {ms:+.2f}" for g, ms in sorted(slopes.items(), key=lambda kv: -kv[1])
            if abs(ms) >= 0.02))
    print(f"ratio Ray / local per node tick at 3 nodes: "
          f"{per_tick[('ray', 3)] / per_tick[('local', 3)]:.2f}" + (
              f"; Ray now / before: {per_tick[('ray', 3)] / per_tick[('ray-before', 3)]:.2f}"
              if ("ray-before", 3) in per_tick else ""))
    if ("ray-relay", 3) in per_tick:
        relay = (per_tick[("ray-relay", 3)] - per_tick[("ray-relay", 1)]) / 2
        direct = (per_tick[("ray", 3)] - per_tick[("ray", 1)]) / 2
        groups = 3 * -(-100 // GROUP_AUTO)
        print(f"ray-relay / ray per tick at 3 nodes: "
              f"{per_tick[('ray-relay', 3)] / per_tick[('ray', 3)]:.2f}; a node more in a "
              f"relay's group {relay:.2f} ms against {direct:.2f} ms asked directly; 100 nodes "
              f"x 3 targets in groups of {GROUP_AUTO}: 300 x {relay:.2f} ms + {groups} relay "
              f"calls at most a direct node's {direct:.2f} ms = "
              f"{(300 * relay + groups * direct) / 1000:.2f} core(s)")


if __name__ == "__main__":
    main()
