"""Benchmark: maximum produce rate of streambench's NATS JetStream driver against one local
nats-server, next to `nats bench js pub async` (the NATS CLI's own JetStream publisher, Go)
sending the same message size with the same number of connections to the same server in the
same run, each message acknowledged by a PubAck.

Prints both rates and their ratio. streambench's acknowledged count is checked against the
server's own count of messages received (/varz in_msgs, less the few JetStream API requests
the run makes). The `nats` CLI is looked for on PATH or given with --nats (it builds with
`go install github.com/nats-io/natscli/nats@latest`); without it only streambench's rate is
printed."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pyarrow.dataset as ds

from analysis.sink import ParquetSink
from compose.nats import find_server
from compose.process import free_port, port_in_use, start_process, stop_process
from loadgen.core.target import unique_labels
from loadgen.core.workload import Workload
from loadgen.pacing import run_precise
from loadgen.platforms import resolve_target
from loadgen.run import Run

API_REQUESTS_MAX = 20  # JetStream API requests of one run (account info, stream create/delete …)


def in_msgs(monitor_port: int) -> int:
    """The server's count of messages it received from clients."""
    with urllib.request.urlopen(f"http://127.0.0.1:{monitor_port}/varz", timeout=5) as resp:
        return int(json.loads(resp.read())["in_msgs"])


def streambench_rate(port: int, monitor_port: int, size: int, producers: int, seconds: float,
                     out: Path, processes: int) -> float:
    workload = Workload(name="bench-nats", rate=0, message_size=size, producers=producers,
                        subscriptions=0, duration_s=seconds, warmup_s=2)
    before = in_msgs(monitor_port)
    run = Run(workload, unique_labels([resolve_target(f"nats@127.0.0.1:{port}")]), out_dir=out,
              recorder=ParquetSink, processes=min(processes, producers))
    summary = run_precise(run.execute())
    acked, errors = summary.targets[0].produced, summary.targets[0].send_errors
    received = in_msgs(monitor_port) - before
    if errors or not 0 <= received - acked <= API_REQUESTS_MAX:
        raise SystemExit(f"count mismatch: streambench acked {acked} (+{errors} errors), the "
                         f"server received {received} messages")
    ticks = ds.dataset(out / "ticks", format="parquet").to_table().to_pydict()
    rows = [i for i, p in enumerate(ticks["phase"]) if p == "measuring"]
    return sum(ticks["produced"][i] for i in rows) / sum(ticks["interval_s"][i] for i in rows)


def nats_bench_rate(cli: str, port: int, size: int, clients: int, messages: int, stream: str) -> float:
    cmd = [cli, "-s", f"nats://127.0.0.1:{port}", "bench", "js", "pub", "async", "--clients",
           str(clients), "--msgs", str(messages), "--size", str(size), "--create", "--no-progress",
           "--stream", stream, f"{stream}.x"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=600).stdout
    found = re.findall(r"stats: ([\d,]+) msgs/sec", out)
    if not found:
        raise SystemExit(f"no rate in the output of {' '.join(cmd)}: {out[-500:]}")
    return float(found[-1].replace(",", ""))  # the aggregate line comes last


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--connections", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--nats", help="the nats CLI (default: `nats` on PATH)")
    parser.add_argument("--processes", type=int, default=1,
                        help="load processes of streambench's runs (at most one per connection)")
    args = parser.parse_args()
    server = find_server()
    if server is None:
        print("nats-server is needed (apt-get install nats-server)")
        return 2
    cli = args.nats or shutil.which("nats")
    work = Path(tempfile.mkdtemp(prefix="streambench-bench-"))
    port, monitor_port = free_port(), free_port()
    proc = start_process([server, "-js", "-sd", str(work / "store"), "-a", "127.0.0.1", "-p",
                          str(port), "-m", str(monitor_port)], work / "nats.log")
    try:
        deadline = time.monotonic() + 10
        while not port_in_use(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        version = subprocess.run([server, "--version"], capture_output=True, text=True).stdout.strip()
        print(f"{version}, file storage; message size {args.size} B, {args.seconds:.0f} s measured per "
              "streambench run")
        print("streambench's acknowledged count is checked against the server's in_msgs counter")
        if cli is None:
            print("no `nats` CLI found (--nats PATH): streambench's rate only")
        print(f"{'connections':>11} | {'streambench':>12} | {'nats bench js pub async':>24} | ratio")
        for n in args.connections:
            ours = streambench_rate(port, monitor_port, args.size, n, args.seconds, work / f"run-{n}",
                                    args.processes)
            if cli is None:
                print(f"{n:>11} | {ours:>10,.0f}/s | {'-':>24} | -")
                continue
            theirs = nats_bench_rate(cli, port, args.size, n, max(100_000, int(ours * 10)), f"bench{n}")
            print(f"{n:>11} | {ours:>10,.0f}/s | {theirs:>22,.0f}/s | {ours / theirs:.2f}")
    finally:
        stop_process(proc)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
