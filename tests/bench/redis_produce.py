"""Benchmark: maximum produce rate of streambench's Redis Streams driver against one local
redis-server, next to `redis-benchmark` sending the same XADD (same fields, same payload size,
same number of connections) to the same server in the same run.

Prints both rates and their ratio. The goal is that the load generator is never the
bottleneck (ratio >= 0.8)."""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.dataset as ds

from analysis.sink import ParquetSink
from compose.process import free_port, start_process, stop_process
from loadgen.core.target import unique_labels
from loadgen.core.workload import Workload
from loadgen.load import MAX_RATE_BATCH
from loadgen.pacing import run_precise
from loadgen.platforms import resolve_target
from loadgen.run import Run


def xadd_calls(port: int) -> int:
    """The server's own count of XADD commands executed (INFO commandstats)."""
    out = subprocess.run(["redis-cli", "-p", str(port), "INFO", "commandstats"], capture_output=True,
                         text=True, check=True).stdout
    m = re.search(r"cmdstat_xadd:calls=(\d+)", out)
    return int(m.group(1)) if m else 0


def streambench_rate(port: int, size: int, producers: int, seconds: float, out: Path) -> float:
    workload = Workload(name="bench-redis", rate=0, message_size=size, producers=producers,
                        subscriptions=0, duration_s=seconds, warmup_s=2)
    before = xadd_calls(port)
    run = Run(workload, unique_labels([resolve_target(f"redis@127.0.0.1:{port}")]), out_dir=out,
              recorder=ParquetSink)
    summary = run_precise(run.execute())
    acked, errors = summary.targets[0].produced, summary.targets[0].send_errors
    server = xadd_calls(port) - before
    if server != acked + errors or errors:
        raise SystemExit(f"count mismatch: streambench acked {acked} (+{errors} errors), "
                         f"the server executed {server} XADDs")
    ticks = ds.dataset(out / "ticks", format="parquet").to_table().to_pydict()
    rows = [i for i, p in enumerate(ticks["phase"]) if p == "measuring"]
    return sum(ticks["produced"][i] for i in rows) / sum(ticks["interval_s"][i] for i in rows)


def redis_benchmark_rate(port: int, size: int, clients: int, pipeline: int, requests: int) -> float:
    payload = "x" * size
    cmd = ["redis-benchmark", "-p", str(port), "-c", str(clients), "-n", str(requests),
           "-P", str(pipeline), "-q", "XADD", "bench-stream", "*", "t", str(time.time_ns()),
           "p", payload]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rates = re.findall(r"([\d.]+) requests per second", out.replace("\r", "\n"))
    return float(rates[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--connections", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args()
    if shutil.which("redis-benchmark") is None or shutil.which("redis-server") is None:
        print("redis-server and redis-benchmark are needed (apt-get install redis-server redis-tools)")
        return 2
    work = Path(tempfile.mkdtemp(prefix="streambench-bench-"))
    port = free_port()
    server = start_process(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                            "--appendonly", "no", "--dir", str(work)], work / "redis.log")
    try:
        time.sleep(0.5)
        print("streambench's acknowledged count is checked against the server's XADD counter")
        print(f"message size {args.size} B, {args.seconds:.0f} s measured per streambench run")
        print(f"{'connections':>11} | {'streambench':>12} | {'redis-benchmark -P 1':>20} | "
              f"{f'-P {MAX_RATE_BATCH}':>12} | ratio vs -P 1 | ratio vs -P {MAX_RATE_BATCH}")
        for n in args.connections:
            ours = streambench_rate(port, args.size, n, args.seconds, work / f"run-{n}")
            subprocess.run(["redis-cli", "-p", str(port), "FLUSHALL"], capture_output=True)
            p1 = redis_benchmark_rate(port, args.size, n, 1, max(50_000, int(ours * 5)))
            pn = redis_benchmark_rate(port, args.size, n, MAX_RATE_BATCH, max(200_000, int(ours * 10)))
            subprocess.run(["redis-cli", "-p", str(port), "FLUSHALL"], capture_output=True)
            print(f"{n:>11} | {ours:>10,.0f}/s | {p1:>18,.0f}/s | {pn:>10,.0f}/s | "
                  f"{ours / p1:>13.2f} | {ours / pn:>8.2f}")
    finally:
        stop_process(server)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
