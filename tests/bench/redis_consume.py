"""Benchmark: can streambench's Redis Streams consumer keep up with its producer at maximum rate?

Starts one local redis-server (as tests/bench/redis_produce.py does), then runs streambench's
Redis producer and consumer against it at maximum rate (1 producer, 1 consumer, 1 KiB messages,
15 s measured after a 2 s warm-up), once per RESP reply reader:

- `hiredis`: the C parser (the default when the `hiredis` package is importable);
- `python`: the pure-Python fallback, forced with the environment variable
  `STREAMBENCH_RESP_READER=python` (`STREAMBENCH_RESP_READER=hiredis` insists on hiredis; unset
  or `auto` picks hiredis when it is importable). The variable is read when a connection
  opens, in the load worker process, which inherits it from this script.

Prints, side by side: produced msg/s and consumed msg/s over the measuring phase, their ratio,
the end-to-end latency p50 / p99 over the measuring phase, and the load worker process's
CPU-seconds (user + system) per 100,000 consumed messages over the measuring phase. The worker
runs both the producer and the consumer, so its CPU covers both. The goal: the consumer keeps
up (ratio close to 1), so lag and latency are the broker's, not the tool's.

Then, on the same server, `redis-benchmark` sending the same XADD from one connection, one
command at a time (`-P 1`) and pipelined as streambench's maximum-rate batches (`-P 256`), with
its CPU-seconds per 100,000 commands: streambench's produced rate with its consumer running
against redis-benchmark's produce-only rate (it has no consumer).

Last, the comparison with the same work on the server: redis-benchmark (`-P 256`, one
connection) writes into the stream of a streambench run whose consumer reads it (its own
producer sends one message a second), so the server serves one producer and one consumer as
in streambench's run. redis-benchmark's rate is the server's XADD count over that run's
measuring phase."""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pyarrow.dataset as ds

from analysis.sink import ParquetSink
from compose.process import free_port, start_process, stop_process
from loadgen.core.bus import BusItem
from loadgen.core.histogram import HistogramSnapshot
from loadgen.core.target import unique_labels
from loadgen.core.ticks import Phase, Tick
from loadgen.core.workload import Workload
from loadgen.load import MAX_RATE_BATCH
from loadgen.pacing import run_precise
from loadgen.platforms import resolve_target
from loadgen.run import Run

READERS = ("hiredis", "python")


def worker_cpu_s() -> float:
    """CPU-seconds (user + system) of this process's load worker processes so far."""
    total = 0.0
    for child in psutil.Process().children(recursive=False):
        try:
            cmd = " ".join(child.cmdline())
            if "multiprocessing" not in cmd or "resource_tracker" in cmd:
                continue
            t = child.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            continue
    return total


def measuring_rates(run_dir: Path, cpu: list[float]) -> dict[str, float]:
    """Produced and consumed msg/s over a run's measuring phase (from its tick files), and the
    load processes' CPU-seconds per 100,000 produced messages between the two `cpu` readings
    taken when the measuring phase began and ended."""
    ticks = ds.dataset(run_dir / "ticks", format="parquet").to_table().to_pydict()
    rows = [i for i, p in enumerate(ticks["phase"]) if p == "measuring"]
    seconds = sum(ticks["interval_s"][i] for i in rows)
    produced = sum(ticks["produced"][i] for i in rows)
    return {"produced": produced / seconds,
            "consumed": sum(ticks["consumed"][i] for i in rows) / seconds,
            "cpu_per_100k": (cpu[1] - cpu[0]) / produced * 1e5 if len(cpu) == 2 else float("nan")}


@dataclass
class Measured:
    """Per-tick figures of one run; the CPU reading is taken when each tick arrives."""

    ticks: list[tuple[Tick, float]] = field(default_factory=list)
    server: psutil.Process | None = None
    server_cpu: list[float] = field(default_factory=list)  # at each tick, when given a server

    def __call__(self, item: BusItem) -> None:
        if isinstance(item, Tick):
            self.ticks.append((item, worker_cpu_s()))
            if self.server is not None:
                t = self.server.cpu_times()
                self.server_cpu.append(t.user + t.system)

    def summary(self) -> dict[str, float]:
        rows = [(i, t) for i, (t, _) in enumerate(self.ticks) if t.phase is Phase.MEASURING]
        if not rows:
            raise SystemExit("no measuring ticks")
        first, last = rows[0][0], rows[-1][0]
        seconds = sum(t.interval_s for _, t in rows)
        produced = sum(t.produced for _, t in rows)
        consumed = sum(t.consumed for _, t in rows)
        cpu_before = self.ticks[first - 1][1] if first > 0 else 0.0
        cpu = self.ticks[last][1] - cpu_before
        e2e = HistogramSnapshot.merge([t.e2e_latency for _, t in rows])
        server = float("nan")
        if self.server_cpu and first > 0:
            server = (self.server_cpu[last] - self.server_cpu[first - 1]) / seconds * 100
        return {
            "server_cpu": server,
            "produced": produced / seconds,
            "consumed": consumed / seconds,
            "ratio": consumed / produced if produced else float("nan"),
            "cpu_per_100k": cpu / consumed * 100_000 if consumed else float("nan"),
            "p50_ms": e2e.percentile(50) / 1e6,
            "p99_ms": e2e.percentile(99) / 1e6,
        }


def redis_benchmark(port: int, size: int, pipeline: int, requests: int) -> tuple[float, float]:
    """redis-benchmark's XADD rate from one connection and its CPU-seconds per 100k commands."""
    from redis_produce import redis_benchmark_rate  # the bench next to this one

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    rate = redis_benchmark_rate(port, size, 1, pipeline, requests)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return rate, cpu / requests * 1e5


class Alongside(Measured):
    """A run whose own producer sends one message a second while `redis-benchmark` sends XADDs
    pipelined `pipeline` deep into the same stream from one connection, started when the first
    tick arrives; streambench's consumer reads them all. Each tick also takes the server's XADD
    count, so that redis-benchmark's rate is the server's own figure over the measuring phase
    (its consumer running all along)."""

    def __init__(self, port: int, size: int, pipeline: int, server: psutil.Process) -> None:
        super().__init__(server=server)
        self.port, self.size, self.pipeline = port, size, pipeline
        self.xadds: list[int] = []
        self.bench: subprocess.Popen[bytes] | None = None
        self.bench_cpu = 0.0

    def __call__(self, item: BusItem) -> None:
        super().__call__(item)
        if not isinstance(item, Tick):
            return
        from redis_produce import xadd_calls  # the bench next to this one

        self.xadds.append(xadd_calls(self.port))
        if self.bench is None:
            keys = subprocess.run(["redis-cli", "-p", str(self.port), "--scan", "--pattern",
                                   "streambench-*"], capture_output=True, text=True).stdout.split()
            if len(keys) != 1:
                raise SystemExit(f"expected one stream of the run, found {keys}")
            self.bench = subprocess.Popen(
                ["redis-benchmark", "-p", str(self.port), "-c", "1", "-n", "2000000000",
                 "-P", str(self.pipeline), "-q", "XADD", keys[0], "*", "t", str(time.time_ns()),
                 "p", "x" * self.size], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop_bench(self) -> None:
        if self.bench is None:
            return
        with contextlib.suppress(psutil.Error):
            t = psutil.Process(self.bench.pid).cpu_times()
            self.bench_cpu = t.user + t.system
        self.bench.terminate()
        self.bench.wait(10)

    def summary(self) -> dict[str, float]:
        figures = super().summary()
        rows = [i for i, (t, _) in enumerate(self.ticks) if t.phase is Phase.MEASURING]
        first, last = rows[0], rows[-1]
        if first == 0:
            raise SystemExit("redis-benchmark was not running before the measuring phase")
        seconds = sum(self.ticks[i][0].interval_s for i in rows)
        xadds = self.xadds[last] - self.xadds[first - 1]
        return figures | {"bench_produced": xadds / seconds,
                          "bench_ratio": figures["consumed"] * seconds / xadds,
                          "bench_cpu_per_100k": self.bench_cpu / (self.xadds[-1] or 1) * 1e5}


def alongside(port: int, size: int, seconds: float, out: Path, server: psutil.Process,
              pipeline: int = MAX_RATE_BATCH) -> dict[str, float]:
    """redis-benchmark producing, streambench's consumer (hiredis) consuming, in one run."""
    os.environ["STREAMBENCH_RESP_READER"] = "hiredis"
    workload = Workload(name="bench-redis-alongside", rate=1, message_size=size, producers=1,
                        consumers=1, subscriptions=1, duration_s=seconds, warmup_s=2,
                        drain_timeout_s=20)
    run = Run(workload, unique_labels([resolve_target(f"redis@127.0.0.1:{port}")]), out_dir=out,
              recorder=ParquetSink)
    measured = Alongside(port, size, pipeline, server)
    run.subscribe(measured)
    try:
        summary = run_precise(run.execute())
    finally:
        measured.stop_bench()
    totals = summary.targets[0]
    if totals.send_errors or totals.receive_errors:
        raise SystemExit(f"alongside redis-benchmark: {totals.send_errors} send errors, "
                         f"{totals.receive_errors} receive errors")
    return measured.summary()


def run_once(port: int, reader: str, size: int, seconds: float, out: Path,
             processes: int = 1, server: psutil.Process | None = None) -> dict[str, float]:
    os.environ["STREAMBENCH_RESP_READER"] = reader
    workload = Workload(name="bench-redis-consume", rate=0, message_size=size, producers=1,
                        consumers=1, subscriptions=1, duration_s=seconds, warmup_s=2,
                        drain_timeout_s=20)
    run = Run(workload, unique_labels([resolve_target(f"redis@127.0.0.1:{port}")]), out_dir=out,
              recorder=ParquetSink, processes=processes)
    measured = Measured(server=server)
    run.subscribe(measured)
    summary = run_precise(run.execute())
    totals = summary.targets[0]
    if totals.send_errors or totals.receive_errors:
        raise SystemExit(f"{reader}: {totals.send_errors} send errors, "
                         f"{totals.receive_errors} receive errors")
    return measured.summary()


def reader_available(reader: str) -> bool:
    if reader != "hiredis":
        return True
    try:
        import hiredis  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--readers", nargs="+", choices=READERS, default=list(READERS))
    parser.add_argument("--processes", type=int, default=1,
                        help="load processes (1: producer and consumer share one; 2: one each)")
    parser.add_argument("--pairs", type=int, default=1, metavar="N",
                        help="N pairs of runs with the same consumer (streambench's producer, then "
                             "redis-benchmark's; the order alternates from pair to pair), each "
                             "pair's ratio and their median printed: one pair's ratio moves with "
                             "the machine by about a tenth")
    args = parser.parse_args()
    if args.pairs < 1:
        print("--pairs must be at least 1")
        return 2
    if shutil.which("redis-server") is None:
        print("redis-server is needed (apt-get install redis-server)")
        return 2
    work = Path(tempfile.mkdtemp(prefix="streambench-bench-"))
    port = free_port()
    server = start_process(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                            "--appendonly", "no", "--dir", str(work)], work / "redis.log")
    results: dict[str, dict[str, float] | None] = {}
    try:
        time.sleep(0.5)
        for reader in args.readers:
            if not reader_available(reader):
                results[reader] = None
                continue
            results[reader] = run_once(port, reader, args.size, args.seconds, work / f"run-{reader}",
                                       args.processes, psutil.Process(server.pid))
            subprocess.run(["redis-cli", "-p", str(port), "FLUSHALL"], capture_output=True)
        fastest = max((f["produced"] for f in results.values() if f), default=0.0)
        theirs = {p: redis_benchmark(port, args.size, p, max(200_000, int(fastest * 10)))
                  for p in (1, MAX_RATE_BATCH)}
        subprocess.run(["redis-cli", "-p", str(port), "FLUSHALL"], capture_output=True)
        beside = alongside(port, args.size, args.seconds, work / "run-alongside",
                           psutil.Process(server.pid))
        subprocess.run(["redis-cli", "-p", str(port), "FLUSHALL"], capture_output=True)
        pairs: list[tuple[float, float]] = []
        first = results.get("hiredis")
        if first:
            pairs.append((first["produced"], beside["bench_produced"]))
        for i in range(1, args.pairs if pairs else 0):
            order = ("theirs", "ours") if i % 2 else ("ours", "theirs")
            got: dict[str, float] = {}
            for who in order:
                if who == "ours":
                    got[who] = run_once(port, "hiredis", args.size, args.seconds,
                                        work / f"run-pair{i}", args.processes,
                                        psutil.Process(server.pid))["produced"]
                else:
                    got[who] = alongside(port, args.size, args.seconds,
                                         work / f"run-alongside{i}",
                                         psutil.Process(server.pid))["bench_produced"]
                subprocess.run(["redis-cli", "-p", str(port), "FLUSHALL"], capture_output=True)
            pairs.append((got["ours"], got["theirs"]))
    finally:
        stop_process(server)
        shutil.rmtree(work, ignore_errors=True)
    print(f"max rate, 1 producer, 1 consumer, {args.size} B messages, {args.seconds:.0f} s measured, "
          f"{os.cpu_count()} CPUs shared with redis-server")
    rows = [("produced msg/s", "produced", "{:,.0f}"), ("consumed msg/s", "consumed", "{:,.0f}"),
            ("consumed/produced", "ratio", "{:.2f}"),
            ("worker CPU-s per 100k msgs", "cpu_per_100k", "{:.3f}"),
            ("redis-server CPU % of a core", "server_cpu", "{:.0f}"),
            ("e2e p50 ms", "p50_ms", "{:.1f}"), ("e2e p99 ms", "p99_ms", "{:.1f}")]
    print(f"{'RESP reader':<28}" + "".join(f"{r:>14}" for r in results))
    for title, key, fmt in rows:
        cells = []
        for figures in results.values():
            cells.append("not installed" if figures is None else fmt.format(figures[key]))
        print(f"{title:<28}" + "".join(f"{c:>14}" for c in cells))
    print("\nredis-benchmark XADD, same server, 1 connection, no consumer:")
    for p, (rate, cpu) in theirs.items():
        ratios = "; ".join(f"streambench {r} produced / it {f['produced'] / rate:.2f}"
                           for r, f in results.items() if f)
        print(f"  -P {p:<4} {rate:>10,.0f} msg/s  {cpu:.3f} CPU-s per 100k   {ratios}")
    print(f"\nredis-benchmark XADD -P {MAX_RATE_BATCH}, 1 connection, with streambench's consumer "
          f"(hiredis) reading the same stream in the same run (its rate: the server's XADD count "
          f"over the measuring phase):")
    print(f"  produced {beside['bench_produced']:,.0f} msg/s, consumed {beside['consumed']:,.0f} "
          f"(consumed/produced {beside['bench_ratio']:.2f}), redis-server "
          f"{beside['server_cpu']:.0f} % of a core, redis-benchmark "
          f"{beside['bench_cpu_per_100k']:.3f} CPU-s per 100k, streambench's consumer "
          f"{beside['cpu_per_100k']:.3f}")
    for r, f in results.items():
        if f:
            print(f"  streambench ({r}) produced with its consumer / redis-benchmark with the same "
                  f"consumer: {f['produced']:,.0f} / {beside['bench_produced']:,.0f} = "
                  f"{f['produced'] / beside['bench_produced']:.2f}")
    if len(pairs) > 1:
        pair_ratios = [mine / bench for mine, bench in pairs]
        print(f"\n{len(pairs)} pairs with the same consumer (streambench hiredis / redis-benchmark "
              f"-P {MAX_RATE_BATCH}, msg/s produced):")
        for n, ((mine, bench), ratio) in enumerate(zip(pairs, pair_ratios, strict=True), 1):
            print(f"  pair {n}: {mine:,.0f} / {bench:,.0f} = {ratio:.2f}")
        print(f"  median ratio {statistics.median(pair_ratios):.2f} (lowest "
              f"{min(pair_ratios):.2f}, highest {max(pair_ratios):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
