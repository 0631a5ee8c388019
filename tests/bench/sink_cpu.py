"""Benchmark: the CPU the Parquet sink costs a run, in the thread that calls it (the event loop)
and in its writer thread.

Feeds TICKS seconds of TARGETS targets through a real ParquetSink (each tick with three latency
histograms of a few hundred buckets, lag of PARTITIONS partitions, two consumers and twenty
broker counters, as a local Redis run at a few thousand msg/s has them), one second of the run
every `--every` seconds of wall time (the sink's clock advances a second a round, so it rotates
as in a run). With `--nodes N` each target's load ran on N load nodes of a Ray cluster: its
tick carries each node's counts, clock and own three histograms (the target's are their
merge), which the sink writes as the `nodes` table's rows and the latency rows with a `node`.
The ticks are built before the clock starts. Prints the CPU seconds of the calling thread and
of the writer thread per minute of the run, and the run's files. Not a test: it prints figures.

    python tests/bench/sink_cpu.py [--targets 3] [--ticks 300] [--partitions 100] [--every 0.05]
                                   [--nodes 0]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from analysis.sink import ParquetSink  # noqa: E402
from loadgen.core.events import PhaseChange  # noqa: E402
from loadgen.core.histogram import Histogram, HistogramSnapshot  # noqa: E402
from loadgen.core.ticks import (  # noqa: E402
    ConsumerStat,
    LagSnapshot,
    NodeClock,
    NodeStat,
    Phase,
    Resources,
    Tick,
)

T0_NS = 1_767_225_600_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def node_id(k: int) -> str:
    return f"{k:056x}"  # as long as a Ray node id


def ticks(targets: int, seconds: int, partitions: int, nodes: int = 0) -> list[list[Tick]]:
    rng = np.random.default_rng(3)
    hist = Histogram()
    out = []
    for seq in range(seconds):
        row = []
        for t in range(targets):
            shares = []  # each node's (or the one process's) three histograms
            for _ in range(max(1, nodes)):
                share = []
                for median in (2e6, 1e6, 3e3):
                    hist.record_many(np.rint(rng.lognormal(np.log(median), 0.3,
                                                           3000 // max(1, nodes))).astype(
                        np.int64).tolist())
                    share.append(hist.snapshot_and_reset())
                shares.append(share)
            snaps = [HistogramSnapshot.merge([s[i] for s in shares]) for i in range(3)]
            node_stats = tuple(
                NodeStat(node_id(k), f"host-{k}", 3000 // nodes, 3000 // nodes, 30.0, 0.5,
                         80 << 20, "", *shares[k]) for k in range(nodes))
            clocks = tuple(NodeClock(node_id(k), 12_345 * k, 400_000, T0_NS) for k in range(nodes))
            lag = {p: int(v) for p, v in enumerate(rng.integers(0, 50, partitions))}
            row.append(Tick(
                target=f"redis-{t}", seq=seq, time_ns=T0_NS + seq * 10**9, interval_s=1.0,
                phase=Phase.MEASURING, elapsed_s=float(seq), produced=3000,
                produced_bytes=3_072_000, consumed=3000, consumed_bytes=3_072_000,
                send_errors=0, target_rate=3000.0, e2e_latency=snaps[0],
                publish_latency=snaps[1], publish_delay=snaps[2],
                lag=LagSnapshot(sum(lag.values()), lag, "XINFO GROUPS lag+pending"),
                resources=Resources(cpu_percent=40.0, memory_bytes=50 << 20),
                consumers=tuple(ConsumerStat(0, "streambench-sub-0", i, 1500) for i in range(2)),
                broker={f"counter_{i}": float(seq * i) for i in range(20)},
                produced_total=3000 * seq, consumed_total=3000 * seq,
                nodes=node_stats, clocks=clocks,
            ))
        out.append(row)
    return out


def thread_cpu_s(native_id: int) -> float:
    return int(Path(f"/proc/self/task/{native_id}/schedstat").read_text().split()[0]) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, default=3)
    parser.add_argument("--ticks", type=int, default=300)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--every", type=float, default=0.05)
    parser.add_argument("--nodes", type=int, default=0,
                        help="load nodes per target (a Ray cluster's); 0: the local placement")
    args = parser.parse_args()
    rounds = ticks(args.targets, args.ticks, args.partitions, args.nodes)
    with tempfile.TemporaryDirectory() as tmp:
        clock = Clock()
        sink = ParquetSink(Path(tmp) / "run", "bench", clock=clock)
        sink(PhaseChange(Phase.MEASURING, T0_NS))
        sink.flush()  # the events file: the writer thread exists from here on
        sink.wait()
        writer = next(t for t in threading.enumerate() if t.name.startswith("parquet-sink"))
        assert writer.native_id is not None
        calling = 0.0
        writer_start = thread_cpu_s(writer.native_id)
        wall = time.monotonic()
        for row in rounds:
            started = time.thread_time()
            for tick in row:
                sink(tick)
            calling += time.thread_time() - started
            clock.now += 1.0
            time.sleep(args.every)
        started = time.thread_time()
        sink.flush()  # the last rows, as close() writes them, with the writer still there
        sink.wait()
        calling += time.thread_time() - started
        wall = time.monotonic() - wall
        writer_s = thread_cpu_s(writer.native_id) - writer_start
        sink.close()
        files = sorted((Path(tmp) / "run").rglob("*"))
        n_files = sum(1 for p in files if p.suffix == ".parquet")
        size = sum(p.stat().st_size for p in files if p.is_file())
    per_min = 60 / args.ticks
    print(f"{args.targets} targets x {args.ticks} ticks ({args.partitions} partitions, "
          f"{args.nodes} load nodes) in "
          f"{wall:.1f} s wall: calling thread {calling * per_min * 1000:.1f} ms, writer thread "
          f"{writer_s * per_min * 1000:.1f} ms of CPU per minute of the run "
          f"({(calling + writer_s) * per_min / 60 * 100:.3f} % of a core); "
          f"{n_files} Parquet files, {size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
