"""Benchmark: what serving a run to Prometheus (`run --metrics`) costs the load generator.

Starts one local redis-server and runs streambench on it (1 producer, 1 consumer, one worker
process, 5,000 msg/s of 1 KiB by default, 2 s warm-up, 15 s measured) alternately without and
with the metrics endpoint, the endpoint scraped once a second by a separate process (plain HTTP,
as Prometheus does). Per run it prints the CPU over the measuring phase of the load worker
process and of the coordinator (this process: the ticks, the bus, the collector, the HTTP
server), as % of one core (beside the worker's CPU as its ticks report it, and the rate they measured),
the number of scrapes served, and the load average; then the medians
of each side and their difference. The goal: within noise, at most +1 % of a core."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from paced_cost import load_average  # the benches next to this one (scripts run from here)
from redis_consume import worker_cpu_s

from analysis.sink import ParquetSink
from compose.process import free_port, start_process, stop_process
from loadgen.core.bus import BusItem
from loadgen.core.target import unique_labels
from loadgen.core.ticks import Phase, Tick
from loadgen.core.workload import Workload
from loadgen.exporter import serve
from loadgen.pacing import run_precise, tune_process
from loadgen.platforms import resolve_target
from loadgen.run import Run

GOAL_EXTRA_PCT = 1.0  # % of one core

SCRAPER = """
import sys, time, urllib.request
url, every = sys.argv[1], float(sys.argv[2])
deadline = time.monotonic() + 600
while time.monotonic() < deadline:
    started = time.monotonic()
    try:
        urllib.request.urlopen(url, timeout=2).read()
    except OSError:
        pass
    time.sleep(max(0.0, every - (time.monotonic() - started)))
"""


class MeasuringCpu:
    """The worker's and this process's CPU-seconds at the first and last measuring tick, and
    the ticks themselves (their own reading of the worker's CPU, the cross-check)."""

    def __init__(self) -> None:
        self.marks: list[tuple[float, float, float]] = []
        self.ticks: list[Tick] = []
        self.me = psutil.Process()

    def __call__(self, item: BusItem) -> None:
        if isinstance(item, Tick) and item.phase is Phase.MEASURING:
            t = self.me.cpu_times()
            self.marks.append((time.monotonic(), worker_cpu_s(), t.user + t.system))
            self.ticks.append(item)

    def ticks_say(self) -> tuple[float, float]:
        """The measured rate and the worker's CPU % as the ticks after the first report them."""
        counted = self.ticks[1:]
        seconds = sum(t.interval_s for t in counted)
        cpu_s = sum(t.loadgen.cpu_percent / 100 * t.interval_s for t in counted)
        return sum(t.produced for t in counted) / seconds, cpu_s / seconds * 100

    def percent(self) -> tuple[float, float]:
        (w0, worker0, me0), (w1, worker1, me1) = self.marks[0], self.marks[-1]
        return (worker1 - worker0) / (w1 - w0) * 100, (me1 - me0) / (w1 - w0) * 100


def run_once(port: int, rate: float, size: int, seconds: float, out: Path,
             metrics: bool) -> dict[str, float]:
    workload = Workload(name="bench-metrics-cost", rate=rate, message_size=size, producers=1,
                        consumers=1, subscriptions=1, duration_s=seconds, warmup_s=2,
                        drain_timeout_s=20)
    run = Run(workload, unique_labels([resolve_target(f"redis@127.0.0.1:{port}")]), out_dir=out,
              recorder=ParquetSink)
    cpu = MeasuringCpu()
    run.subscribe(cpu)
    scraper: subprocess.Popen[bytes] | None = None
    scrapes = 0
    if metrics:
        endpoint = serve(run, "127.0.0.1", free_port())
        scraper = subprocess.Popen([sys.executable, "-c", SCRAPER, endpoint.url, "1"])
    try:
        summary = run_precise(run.execute())
    finally:
        if scraper is not None:
            scraper.terminate()
            scraper.wait()
    if metrics:
        scrapes = endpoint.collector.scrapes_served
    totals = summary.targets[0]
    if totals.send_errors or totals.receive_errors:
        raise SystemExit(f"{totals.send_errors} send errors, {totals.receive_errors} receive errors")
    worker, coordinator = cpu.percent()
    rate_seen, ticks_cpu = cpu.ticks_say()
    return {"worker": worker, "coordinator": coordinator, "scrapes": scrapes,
            "load": float(load_average()), "rate": rate_seen, "ticks_cpu": ticks_cpu}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=5000.0)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--pairs", type=int, default=3, help="without/with pairs, alternated")
    args = parser.parse_args()
    if shutil.which("redis-server") is None:
        print("redis-server is needed (apt-get install redis-server)")
        return 2
    work = Path(tempfile.mkdtemp(prefix="streambench-bench-"))
    port = free_port()
    proc = start_process(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                          "--appendonly", "no", "--dir", str(work)], work / "redis.log")
    rows: list[tuple[bool, dict[str, float]]] = []
    try:
        time.sleep(0.5)
        tune_process()
        for i in range(args.pairs):
            for metrics in (False, True):
                result = run_once(port, args.rate, args.size, args.seconds,
                                  work / f"run-{i}-{int(metrics)}", metrics)
                rows.append((metrics, result))
                print(f"{'with' if metrics else 'without':>7} --metrics: worker "
                      f"{result['worker']:5.1f} % (ticks: {result['ticks_cpu']:5.1f} %), "
                      f"coordinator {result['coordinator']:5.1f} %, {result['rate']:,.0f} msg/s, "
                      f"{int(result['scrapes'])} scrapes, load {result['load']:.2f}", flush=True)
    finally:
        stop_process(proc)
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{args.rate:,.0f} msg/s, {args.size} B, {args.seconds:g} s measured, {args.pairs} "
          f"pairs on {os.cpu_count()} cores; medians (% of one core):")
    for key in ("worker", "coordinator"):
        off = statistics.median(r[key] for m, r in rows if not m)
        on = statistics.median(r[key] for m, r in rows if m)
        print(f"  {key:<12} without {off:5.1f}  with {on:5.1f}  difference {on - off:+5.2f}")
    total_off = statistics.median(r["worker"] + r["coordinator"] for m, r in rows if not m)
    total_on = statistics.median(r["worker"] + r["coordinator"] for m, r in rows if m)
    extra = total_on - total_off
    print(f"  {'generator':<12} without {total_off:5.1f}  with {total_on:5.1f}  difference "
          f"{extra:+5.2f} (goal: at most +{GOAL_EXTRA_PCT:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
