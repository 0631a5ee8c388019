"""Benchmark: maximum produce rate of streambench's RabbitMQ Streams driver against one local
RabbitMQ node, next to bare client loops sending the same messages (the payload as the AMQP
body, the send time as application property `t`, batches of MAX_RATE_BATCH, each awaited until
the broker confirmed it) to the same node in the same run: rbfly, the client the driver uses,
and rstream, the other maintained asyncio client (why the driver uses rbfly).

Prints the rates and the ratio streambench / bare rbfly. The goal is that the load generator is
never the bottleneck (ratio >= 0.8). Every count of confirmed messages is checked against the
node's own counter of the messages it confirmed to stream publishers (rabbit_global_counters,
read with rabbitmqctl eval). RabbitMQ's stream-perf-test is not on Maven Central, so it is not
run here."""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.dataset as ds

from analysis.sink import ParquetSink
from compose.rabbitmq import RabbitLocalStack, epmd_binary, script
from loadgen.core.target import unique_labels
from loadgen.core.workload import Workload
from loadgen.load import MAX_RATE_BATCH
from loadgen.pacing import run_precise
from loadgen.platforms import resolve_target
from loadgen.run import Run


def server_confirmed(stack: RabbitLocalStack) -> int:
    """The node's own count of messages it confirmed to stream-protocol publishers."""
    expr = ("maps:get(messages_confirmed_total, "
            "maps:get([{protocol, stream}], rabbit_global_counters:overview())).")
    return int(stack.cli("rabbitmqctl", "eval", expr).strip())


def streambench_rate(port: int, size: int, seconds: float, out: Path) -> tuple[int, float]:
    workload = Workload(name="bench-rabbitmq", rate=0, message_size=size, producers=1,
                        subscriptions=0, duration_s=seconds, warmup_s=2)
    target = resolve_target(f"rabbitmq@127.0.0.1:{port}")
    run = Run(workload, unique_labels([target]), out_dir=out, recorder=ParquetSink, run_id="bench")
    summary = run_precise(run.execute())
    acked, errors = summary.targets[0].produced, summary.targets[0].send_errors
    if errors:
        raise SystemExit(f"streambench: {errors} send errors")
    ticks = ds.dataset(out / "ticks", format="parquet").to_table().to_pydict()
    rows = [i for i, p in enumerate(ticks["phase"]) if p == "measuring"]
    return acked, sum(ticks["produced"][i] for i in rows) / sum(ticks["interval_s"][i] for i in rows)


async def rbfly_rate(port: int, stream: str, size: int, seconds: float) -> tuple[int, float]:
    import rbfly.streams as rbs

    client = rbs.streams_client(f"rabbitmq-stream://guest:guest@127.0.0.1:{port}/")
    await client.create_stream(stream)
    payload = b"x" * size
    sent = 0
    async with client.publisher(stream, name="bench-rbfly", cls=rbs.PublisherBatchFast) as pub:
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            for _ in range(MAX_RATE_BATCH):
                pub.batch(rbs.stream_message_ctx(payload, app_properties={"t": time.time_ns()}))
            await pub.flush()
            sent += MAX_RATE_BATCH
        elapsed = time.perf_counter() - start
    await client.disconnect()
    return sent, sent / elapsed


async def rstream_rate(port: int, stream: str, size: int, seconds: float) -> tuple[int, float]:
    from rstream import AMQPMessage, Producer

    payload = b"x" * size
    sent = 0
    async with Producer("127.0.0.1", port, username="guest", password="guest") as producer:
        await producer.create_stream(stream)
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            batch = [AMQPMessage(body=payload, application_properties={"t": time.time_ns()})
                     for _ in range(MAX_RATE_BATCH)]
            await producer._send_batch(stream, batch, sync=True, timeout=None)  # confirmed
            sent += MAX_RATE_BATCH
        elapsed = time.perf_counter() - start
    return sent, sent / elapsed


def checked(stack: RabbitLocalStack, before: int, sent: int, name: str) -> int:
    now = server_confirmed(stack)
    if now - before != sent:
        raise SystemExit(f"{name}: {sent} messages confirmed to the client, {now - before} by "
                         "the server's count")
    return now


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=10)
    args = parser.parse_args()
    if script("rabbitmq-server") is None or epmd_binary() is None:
        print("rabbitmq-server is needed (apt-get install rabbitmq-server)")
        return 2
    stack = RabbitLocalStack(resolve_target("rabbitmq"), "rabbitmq")
    asyncio.run(stack.up(print))
    try:
        port = int(stack.describe().endpoints["stream"].rsplit(":", 1)[1])
        out = Path(tempfile.mkdtemp(prefix="streambench-bench-")) / "run"
        print(f"RabbitMQ {stack.describe().version}, message size {args.size} B, "
              f"{args.seconds:.0f} s each, 1 producer, publish confirms awaited per batch of "
              f"{MAX_RATE_BATCH}; every count checked against the server's")
        count = server_confirmed(stack)
        ours_sent, ours = streambench_rate(port, args.size, args.seconds, out)
        count = checked(stack, count, ours_sent, "streambench")
        bare_sent, bare = asyncio.run(rbfly_rate(port, "bench-rbfly", args.size, args.seconds))
        count = checked(stack, count, bare_sent, "rbfly")
        other_sent, other = asyncio.run(rstream_rate(port, "bench-rstream", args.size, args.seconds))
        checked(stack, count, other_sent, "rstream")
        print(f"streambench (rbfly driver) {ours:>10,.0f} msg/s  ({ours_sent:,} confirmed)")
        print(f"bare rbfly loop            {bare:>10,.0f} msg/s")
        print(f"bare rstream loop          {other:>10,.0f} msg/s")
        print(f"ratio streambench / bare rbfly   {ours / bare:.2f}")
        print(f"ratio bare rstream / bare rbfly  {other / bare:.2f}")
    finally:
        asyncio.run(stack.down())
    return 0


if __name__ == "__main__":
    sys.exit(main())
