"""Benchmark: maximum produce rate of streambench's Pravega driver next to a bare writer loop on
the same Python client (what an SBK-style Pravega writer does: write events back to back with
many in flight, flush at the end), on one local Pravega standalone started for the purpose.

Both write events of the same size to a stream with the same number of fixed segments, as fast
as the segment store takes them: streambench as a run at rate 0 with no consumers, the bare
loop from this process. streambench's acknowledged count is checked against the stream itself
(its tail: bytes written / bytes per event). streambench's events carry a 26-byte header (send
time, partition, producer id and number); the bare loop's carry the payload only.

Prints the rates and their ratio."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import time
from pathlib import Path
from tempfile import mkdtemp

import pyarrow.dataset as ds

from analysis.sink import ParquetSink
from compose.pravega import CONTROLLER_ENDPOINT, PRAVEGA_VERSION, PravegaLocalStack
from loadgen.core.target import unique_labels
from loadgen.core.workload import Workload
from loadgen.pacing import run_precise
from loadgen.platforms import resolve_target
from loadgen.platforms.pravega import partition_keys
from loadgen.platforms.pravega_host import EVENT_FRAME_BYTES, HEADER
from loadgen.run import Run

SCOPE = "streambench"


def progress(message: str) -> None:
    print(f"  {message}", file=sys.stderr)


def measured_rate(run_dir: Path) -> float:
    ticks = ds.dataset(run_dir / "ticks", format="parquet").to_table().to_pydict()
    rows = [i for i, p in enumerate(ticks["phase"]) if p == "measuring"]
    return sum(ticks["produced"][i] for i in rows) / sum(ticks["interval_s"][i] for i in rows)


def stream_bytes(controller: str, stream: str) -> int:
    """Bytes written to a stream, from its tail (a reader group created at the tail)."""
    import pravega_client

    manager = pravega_client.StreamManager(controller)
    name = f"bench-tail-{time.time_ns()}"
    cut = manager.create_reader_group(name, SCOPE, stream, True).get_streamcut().get_segment_offset_map()
    manager.delete_reader_group(name, SCOPE)
    return int(sum(cut.values()))


def streambench_max_rate(controller: str, args: argparse.Namespace, out: Path) -> float:
    workload = Workload(name="bench-pravega-produce", rate=0, message_size=args.size,
                        partitions=args.partitions, producers=args.producers, subscriptions=0,
                        duration_s=args.seconds, warmup_s=3)
    run = Run(workload, unique_labels([resolve_target(f"pravega@{controller}")]), out_dir=out,
              processes=args.processes, recorder=ParquetSink)
    summary = run_precise(run.execute())
    acked, errors = summary.targets[0].produced, summary.targets[0].send_errors
    # the stream's own figure: its tail in bytes, as the collector last read it (the run
    # deletes the stream from the cluster when it closes)
    broker = ds.dataset(out / "broker", format="parquet").to_table().to_pydict()
    written = max(v for n, v in zip(broker["name"], broker["value"], strict=True) if n == "stream_bytes")
    stored = int(written) // (EVENT_FRAME_BYTES + HEADER.size + args.size)
    if errors or stored > acked or stored < 0.99 * acked:
        raise SystemExit(f"count mismatch: streambench acked {acked} (+{errors} errors), "
                         f"the stream holds {stored} events")
    print(f"  streambench acked {acked:,} events; the stream's tail, last read: {stored:,} events")
    return measured_rate(out)


def bare_writer(controller: str, args: argparse.Namespace, seconds: float) -> float:
    """Events per second of a bare write loop (many in flight, round robin over the segments
    by routing key, one flush at the end)."""
    import pravega_client

    manager = pravega_client.StreamManager(controller)
    stream = f"bench-bare-{time.time_ns()}"
    manager.create_scope(SCOPE)
    manager.create_stream_with_policy(SCOPE, stream,
                                      pravega_client.StreamScalingPolicy.fixed_scaling_policy(args.partitions),
                                      pravega_client.StreamRetentionPolicy.none(), [])
    writer = manager.create_writer(SCOPE, stream, 10_000)
    keys = partition_keys(args.partitions)
    payload = os.urandom(args.size)
    write = writer.write_event_bytes
    for _ in range(1000):  # warm-up: the segment writers connect
        write(payload, keys[0])
    writer.flush()
    sent, start = 0, time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        for i in range(1000):
            write(payload, keys[i % len(keys)])
        sent += 1000
    writer.flush()
    elapsed = time.perf_counter() - start
    stored = (stream_bytes(controller, stream) - 1000 * (EVENT_FRAME_BYTES + args.size)) // (
        EVENT_FRAME_BYTES + args.size)
    if stored != sent:
        raise SystemExit(f"bare writer: wrote {sent} events, the stream holds {stored}")
    manager.seal_stream(SCOPE, stream)
    manager.delete_stream(SCOPE, stream)
    return sent / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=15, help="measured seconds per run")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--producers", type=int, default=1)
    parser.add_argument("--heap", default="512m")
    parser.add_argument("--processes", type=int, default=1,
                        help="streambench load processes (the producers are spread over them)")
    args = parser.parse_args()
    args.producers = max(args.producers, args.processes)

    stack = PravegaLocalStack(resolve_target(f"pravega:heap={args.heap},runtime=local"), "bench")
    work = Path(mkdtemp(prefix="streambench-bench-"))
    try:
        asyncio.run(stack.up(progress))
        asyncio.run(stack.ready(120, progress))
        controller = stack.describe().endpoints[CONTROLLER_ENDPOINT]
        print(f"Pravega {PRAVEGA_VERSION} standalone (heap {args.heap}), {args.size} B events, "
              f"{args.partitions} segment(s), {args.producers} producer(s) in "
              f"{args.processes} streambench process(es); load average {os.getloadavg()[0]:.1f}")
        ours = streambench_max_rate(controller, args, work / "max-rate")
        bare = bare_writer(controller, args, args.seconds)
        print("\nmaximum produce rate")
        for name, rate in (("streambench", ours), ("bare Python writer loop", bare)):
            print(f"  {name:24} {rate:>10,.0f} msg/s  {rate * args.size / 1e6:7.1f} MB/s")
        print(f"  ratio streambench / bare Python writer loop: {ours / bare:.2f}")
        print(f"  load average at the end: {os.getloadavg()[0]:.1f}")
    finally:
        asyncio.run(stack.down())
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
