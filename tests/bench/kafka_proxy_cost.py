"""Benchmark: what the proxy in front of a Kafka broker costs with no toxic on it (the network
fault layer, docs/network-faults.md), on one local KRaft broker started with its links behind
Toxiproxy. The same broker serves both paths: its DIRECT listener (what the collectors use)
and its client listener through the proxy, so the two are measured against one broker, in
alternated rounds.

1. Produce round trips: one aiokafka producer per path (acks=1, linger 0) sends and awaits
   ROUND messages at a time, alternating paths, ROUNDS rounds; the p50 of each path's raw
   samples (numpy) and of streambench's own histogram of them.
2. streambench's publish latency: runs of its load generator at RATE msg/s against each path
   as an existing cluster (kafka@ADDRESS; the proxy's address makes the broker's metadata
   name the proxy), alternated; the p50 of each run's every publish sample (--record-raw).

Cross-checks: each producer's metadata names the addresses of its path (the proxy's port or
the broker's own); the partition's log-end offset equals every message sent by both. Prints
the figures and the differences side by side."""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from analysis.sink import ParquetSink
from compose.kafka import KafkaLocalStack
from loadgen.core.histogram import Histogram
from loadgen.core.interventions import PROXIED_OPTION
from loadgen.core.target import unique_labels
from loadgen.core.workload import Workload
from loadgen.pacing import run_precise
from loadgen.platforms import resolve_target
from loadgen.run import Run

TOPIC = "proxy-cost"


async def _round_trips(producer: AIOKafkaProducer, n: int) -> list[int]:
    samples = []
    for _ in range(n):
        start = time.perf_counter_ns()
        await producer.send_and_wait(TOPIC, b"x" * 100)
        samples.append(time.perf_counter_ns() - start)
    return samples


async def _producer(bootstrap: str) -> tuple[AIOKafkaProducer, set[int]]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=0)
    await producer.start()
    await producer.send_and_wait(TOPIC, b"warm")
    return producer, {b.port for b in producer.client.cluster.brokers()}


async def produce_rounds(direct: str, proxied: str, rounds: int, each: int) -> dict[str, list[int]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=direct)
    await admin.start()
    await admin.create_topics([NewTopic(TOPIC, 1, 1)])
    await admin.close()
    paths = {"direct": await _producer(direct), "proxied": await _producer(proxied)}
    for name, (_p, ports) in paths.items():  # each path's metadata names its own addresses
        want = {int(a.rsplit(":", 1)[1]) for a in (direct if name == "direct" else proxied).split(",")}
        if ports != want:
            raise SystemExit(f"{name}: the broker's metadata names ports {ports}, not {want}")
    samples: dict[str, list[int]] = {"direct": [], "proxied": []}
    try:
        for _ in range(rounds):
            for name, (producer, _ports) in paths.items():
                samples[name] += await _round_trips(producer, each)
    finally:
        for producer, _ports in paths.values():
            await producer.stop()
    return samples


async def log_end(bootstrap: str) -> int:
    reader = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await reader.start()
    try:
        tp = TopicPartition(TOPIC, 0)
        return int((await reader.end_offsets([tp]))[tp])
    finally:
        await reader.stop()


def streambench_p50(address: str, rate: float, seconds: float, out: Path) -> tuple[float, int]:
    """p50 (ms) of every publish sample of a measuring phase, and how many there were."""
    workload = Workload(name="proxy-cost", rate=rate, message_size=100, duration_s=seconds,
                        warmup_s=2, partitions=1)
    run = Run(workload, unique_labels([resolve_target(f"kafka:acks=1@{address}")]), out_dir=out,
              record_raw=True, recorder=ParquetSink)
    run_precise(run.execute())
    raw = ds.dataset(out / "raw", format="parquet").to_table().to_pydict()
    values = [v for v, k, p in zip(raw["value_ns"], raw["kind"], raw["phase"], strict=True)
              if k == "publish" and p == "measuring"]
    return float(np.median(values)) / 1e6, len(values)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--each", type=int, default=2000, help="round trips per path per round")
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--runs", type=int, default=2, help="streambench runs per path")
    args = ap.parse_args()
    target = resolve_target("kafka:runtime=local,heap=512M")
    target.options[PROXIED_OPTION] = True
    stack = KafkaLocalStack(target, "kafka", zookeeper=False)
    try:
        asyncio.run(stack.up(lambda m: print(m, file=sys.stderr)))
        asyncio.run(stack.ready(180, lambda m: print(m, file=sys.stderr)))
        desc = stack.describe()
        direct, proxied = desc.endpoints["kafka"], desc.client_endpoints["kafka"]
        samples = asyncio.run(produce_rounds(direct, proxied, args.rounds, args.each))
        print(f"produce round trips (acks=1, 100 B), {args.rounds} rounds of {args.each:,} "
              "alternated, p50 ms:")
        p50 = {}
        for name, values in samples.items():
            hist = Histogram()
            hist.record_many(values)
            p50[name] = float(np.median(values)) / 1e6
            print(f"  {name:8} numpy {p50[name]:.3f}  histogram "
                  f"{hist.snapshot_and_reset().percentile(50) / 1e6:.3f}"
                  f"  (p99 {np.percentile(values, 99) / 1e6:.3f}, n {len(values):,})")
        print(f"  proxy adds {p50['proxied'] - p50['direct']:+.3f} ms at p50 "
              f"(ratio {p50['proxied'] / p50['direct']:.2f})")
        runs: dict[str, list[float]] = {"direct": [], "proxied": []}
        counted = 0
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(args.runs):
                for name, address in (("direct", direct), ("proxied", proxied)):
                    value, n = streambench_p50(address, args.rate, args.seconds,
                                               Path(tmp) / f"{name}-{i}")
                    runs[name].append(value)
                    counted += n
        print(f"streambench publish p50 ms at {args.rate:g} msg/s, {args.runs} runs per path "
              "alternated:")
        for name, values in runs.items():
            print(f"  {name:8} " + "  ".join(f"{v:.3f}" for v in values))
        diffs = [p - d for d, p in zip(runs["direct"], runs["proxied"], strict=True)]
        print("  proxy adds " + ", ".join(f"{d:+.3f}" for d in diffs) + " ms at p50 (pairs)")
        end = asyncio.run(log_end(direct))
        sent = sum(len(v) for v in samples.values()) + 2
        print(f"log-end offset of the round trips' topic {end:,}: sent {sent:,} "
              f"({'equal' if end == sent else 'NOT equal'}); streambench publish samples "
              f"measured {counted:,}")
    finally:
        asyncio.run(stack.down())


if __name__ == "__main__":
    main()
