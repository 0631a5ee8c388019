"""Benchmark: streambench's Kafka driver next to Kafka's own tools, on one local KRaft broker
started for the purpose, in the same run.

1. End-to-end latency (first, on the fresh broker): a streambench run at a fixed rate (default
   5,000 msg/s, 1 producer, 1 consumer, 1 partition) next to
   `org.apache.kafka.tools.EndToEndLatency`, which sends one record at a time and waits for it
   to come back (a round-trip latency at whatever rate that allows, so comparable in the low
   percentiles only; it prints whole milliseconds).
2. Publish latency (send → acknowledgement) of a producer-only streambench run (no consumers,
   as the tool has none) next to `ProducerPerformance` at the same fixed rate, record size and
   client settings (it prints whole milliseconds but an exact average).
3. Maximum produce rate: a streambench run at rate 0 with no consumers against
   `org.apache.kafka.tools.ProducerPerformance` with the same record size, acks, batch.size,
   linger.ms and compression. streambench's acknowledged count is checked against the
   topic's log-end offsets.
4. Maximum rate with the consumer running: streambench at rate 0 with one producer and one
   consumer in one load process (`--pc-processes 2`: one each): produced and consumed msg/s
   over the measuring phase (the consumer keeps up when they are within 5 %), against the
   same ProducerPerformance figure,
   with the CPU-seconds per 100,000 messages of each (streambench's load process, the
   ProducerPerformance JVM); and ProducerPerformance while `ConsumerPerformance` reads the
   same topic (the Java tools doing the same work).

Parts 1, 2 and 4 and streambench's side of 3 run once per client (`--clients`, default both:
aiokafka, librdkafka). Prints the figures and their ratios."""

from __future__ import annotations

import argparse
import asyncio
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.dataset as ds
from aiokafka import AIOKafkaConsumer, TopicPartition
from redis_consume import measuring_rates, worker_cpu_s  # the bench next to this one (scripts run from here)

from analysis.sink import ParquetSink
from compose.kafka import KAFKA_3, KafkaLocalStack, KafkaRuntime, kafka_runtime
from loadgen.core.events import PhaseChange
from loadgen.core.histogram import HistogramSnapshot, percentiles
from loadgen.core.target import unique_labels
from loadgen.core.ticks import Phase, Tick
from loadgen.core.workload import Workload
from loadgen.pacing import run_precise
from loadgen.platforms import resolve_target
from loadgen.run import Run

PERCENTILES = [50.0, 99.0, 99.9]


def progress(message: str) -> None:
    print(f"  {message}", file=sys.stderr)


def measured_rate(run_dir: Path) -> float:
    ticks = ds.dataset(run_dir / "ticks", format="parquet").to_table().to_pydict()
    rows = [i for i, p in enumerate(ticks["phase"]) if p == "measuring"]
    return sum(ticks["produced"][i] for i in rows) / sum(ticks["interval_s"][i] for i in rows)


async def log_end_total(bootstrap: str, topic: str, partitions: int) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
        return sum(ends.values())
    finally:
        await consumer.stop()


def client_options(args: argparse.Namespace) -> str:
    return (f"client={args.client},acks={args.acks},linger_ms={args.linger_ms},"
            f"batch_size={args.batch_size},compression={args.compression}")


def streambench_max_rate(bootstrap: str, args: argparse.Namespace, out: Path) -> float:
    topic = f"bench-produce-{time.time_ns()}"
    workload = Workload(name="bench-kafka-produce", rate=0, message_size=args.size,
                        producers=args.producers, subscriptions=0, duration_s=args.seconds,
                        warmup_s=3)
    target = resolve_target(f"kafka:{client_options(args)},topic={topic}@{bootstrap}")
    summary = run_precise(Run(workload, unique_labels([target]), out_dir=out,
                              processes=args.processes, recorder=ParquetSink).execute())
    acked, errors = summary.targets[0].produced, summary.targets[0].send_errors
    stored = asyncio.run(log_end_total(bootstrap, topic, 1))
    if errors or stored != acked:
        raise SystemExit(f"count mismatch: streambench acked {acked} (+{errors} errors), "
                         f"the topic holds {stored} records")
    return measured_rate(out)


def streambench_produce_consume(bootstrap: str, args: argparse.Namespace, out: Path
                                ) -> dict[str, float]:
    """Maximum rate with one consumer: produced and consumed msg/s over the measuring phase and
    the load process's CPU-seconds over it."""
    workload = Workload(name="bench-kafka-produce-consume", rate=0, message_size=args.size,
                        producers=1, consumers=1, subscriptions=1, duration_s=args.seconds,
                        warmup_s=3, drain_timeout_s=60)
    target = resolve_target(f"kafka:{client_options(args)},topic=bench-pc-{time.time_ns()}"
                            f"@{bootstrap}")
    run = Run(workload, unique_labels([target]), out_dir=out, processes=args.pc_processes,
              recorder=ParquetSink)
    cpu: list[float] = []

    def mark(item: object) -> None:
        if isinstance(item, PhaseChange) and item.phase in (Phase.MEASURING, Phase.DRAINING):
            cpu.append(worker_cpu_s())

    run.subscribe(mark)
    run_precise(run.execute())
    return measuring_rates(out, cpu)


def _producer_performance(runtime: KafkaRuntime, bootstrap: str, args: argparse.Namespace,
                          records: int, throughput: float) -> str:
    compression = "none" if args.compression == "none" else args.compression
    argv = runtime.tool_argv(
        "org.apache.kafka.tools.ProducerPerformance", "--topic", f"bench-pp-{time.time_ns()}",
        "--num-records", str(records), "--record-size", str(args.size),
        "--throughput", str(int(throughput)) if throughput > 0 else "-1",
        "--producer-props", f"bootstrap.servers={bootstrap}", f"acks={args.acks}",
        f"batch.size={args.batch_size}", f"linger.ms={args.linger_ms}",
        f"compression.type={compression}", "enable.idempotence=false")
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def producer_performance(runtime: KafkaRuntime, bootstrap: str, args: argparse.Namespace,
                         records: int) -> tuple[float, float]:
    """Its records/sec and the CPU-seconds of its JVM per 100,000 records."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = _producer_performance(runtime, bootstrap, args, records, 0)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    # the last line is the summary: "N records sent, R records/sec (…)"
    return float(re.findall(r"records sent, ([\d.]+) records/sec", out)[-1]), cpu / records * 1e5


def producer_performance_with_consumer(runtime: KafkaRuntime, bootstrap: str,
                                       args: argparse.Namespace, records: int) -> dict[str, float]:
    """ProducerPerformance as above while `ConsumerPerformance` reads the same topic from its
    start (started first, it ends once it has read every record): the Java tools doing the
    same work as streambench's run with its consumer. The producer's records/sec, the records
    read against those sent, and both JVMs' CPU-seconds per 100,000 records."""
    topic = f"bench-ppc-{time.time_ns()}"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    consumer = subprocess.Popen(runtime.tool_argv(
        "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", bootstrap,
        "--topic", topic, "--messages", str(records), "--timeout", "60000",
        "--group", f"bench-cp-{time.time_ns()}"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        time.sleep(8)  # the consumer's JVM starts and joins its group
        compression = "none" if args.compression == "none" else args.compression
        out = subprocess.run(runtime.tool_argv(
            "org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
            "--num-records", str(records), "--record-size", str(args.size), "--throughput", "-1",
            "--producer-props", f"bootstrap.servers={bootstrap}", f"acks={args.acks}",
            f"batch.size={args.batch_size}", f"linger.ms={args.linger_ms}",
            f"compression.type={compression}", "enable.idempotence=false"),
            capture_output=True, text=True, check=True).stdout
        read, err = consumer.communicate(timeout=180)
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    rate = float(re.findall(r"records sent, ([\d.]+) records/sec", out)[-1])
    # the last line: start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, …
    rows = [line.split(",") for line in read.splitlines() if line.count(",") >= 5]
    if not rows or not rows[-1][4].strip().isdigit():
        raise SystemExit(f"ConsumerPerformance printed no summary: {(read + err)[-2000:]}")
    return {"produced": rate, "received_over_sent": int(rows[-1][4]) / records,
            "cpu_per_100k": cpu / records * 1e5}


def producer_performance_latency(runtime: KafkaRuntime, bootstrap: str, args: argparse.Namespace
                                 ) -> dict[str, float]:
    records = int(args.latency_rate * args.seconds)
    out = _producer_performance(runtime, bootstrap, args, records, args.latency_rate)
    m = re.findall(r"records sent, ([\d.]+) records/sec .*?, ([\d.]+) ms avg latency, [\d.]+ ms max "
                   r"latency, (\d+) ms 50th, \d+ ms 95th, (\d+) ms 99th, (\d+) ms 99.9th", out)
    assert m, out
    rate, avg, p50, p99, p999 = (float(x) for x in m[-1])
    return {"rate": rate, "avg": avg, "p50": p50, "p99": p99, "p99.9": p999}


def streambench_latency(bootstrap: str, args: argparse.Namespace, out: Path, consumers: bool = True
                        ) -> tuple[HistogramSnapshot, HistogramSnapshot]:
    workload = Workload(name="bench-kafka-e2e", rate=args.latency_rate, message_size=args.size,
                        duration_s=args.seconds, warmup_s=3, subscriptions=1 if consumers else 0)
    target = resolve_target(f"kafka:{client_options(args)}@{bootstrap}")
    run = Run(workload, unique_labels([target]), out_dir=out, recorder=ParquetSink)
    e2e: list[HistogramSnapshot] = []
    publish: list[HistogramSnapshot] = []

    def keep(item: object) -> None:
        if isinstance(item, Tick) and item.phase is Phase.MEASURING:
            e2e.append(item.e2e_latency)
            publish.append(item.publish_latency)

    run.subscribe(keep)
    run_precise(run.execute())
    return HistogramSnapshot.merge(e2e), HistogramSnapshot.merge(publish)


def end_to_end_latency(runtime: KafkaRuntime, bootstrap: str, args: argparse.Namespace
                       ) -> dict[str, float]:
    # EndToEndLatency broker_list topic num_messages producer_acks message_size_bytes
    argv = runtime.tool_argv("org.apache.kafka.tools.EndToEndLatency", bootstrap,
                             f"bench-e2e-{time.time_ns()}", str(args.e2e_messages), args.acks,
                             str(args.size))
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    avg = float(re.search(r"Avg latency: ([\d.]+) ms", out).group(1))  # type: ignore[union-attr]
    p = re.search(r"50th = ([\d.]+), 99th = ([\d.]+), 99.9th = ([\d.]+)", out)
    assert p is not None, out
    return {"avg": avg, "p50": float(p.group(1)), "p99": float(p.group(2)), "p99.9": float(p.group(3))}


def latency_table(ours: HistogramSnapshot, tool_name: str, tool: dict[str, float]) -> None:
    """avg, p50, p99 and p99.9 in ms: streambench's histogram and a tool's parsed figures."""
    ps = percentiles(ours, PERCENTILES) / 1e6
    print(f"  {'':24} {'avg':>8} {'p50':>8} {'p99':>8} {'p99.9':>8}")
    print(f"  {'streambench':24} {ours.mean / 1e6:8.3f} {ps[0]:8.3f} {ps[1]:8.3f} {ps[2]:8.3f}")
    print(f"  {tool_name:24} {tool['avg']:8.3f} {tool['p50']:8.3f} {tool['p99']:8.3f} "
          f"{tool['p99.9']:8.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", nargs="+", default=["aiokafka", "librdkafka"],
                        choices=("aiokafka", "librdkafka"))
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=15, help="measured seconds per run")
    parser.add_argument("--producers", type=int, default=1)
    parser.add_argument("--acks", default="all", choices=("0", "1", "all"))
    parser.add_argument("--linger-ms", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=1024 * 1024)
    parser.add_argument("--compression", default="none")
    parser.add_argument("--latency-rate", type=float, default=5000)
    parser.add_argument("--e2e-messages", type=int, default=5000)
    parser.add_argument("--version", default=KAFKA_3)
    parser.add_argument("--processes", type=int, default=1,
                        help="streambench load processes for the maximum rate (the producers "
                             "are spread over them)")
    parser.add_argument("--pc-processes", type=int, default=1,
                        help="load processes for the run with the consumer (1: producer and "
                             "consumer share one; 2: one each)")
    args = parser.parse_args()
    args.producers = max(args.producers, args.processes)

    target = resolve_target(f"kafka:runtime=local,version={args.version}")
    stack = KafkaLocalStack(target, "bench", zookeeper=False)
    work = Path(tempfile.mkdtemp(prefix="streambench-bench-"))
    try:
        runtime = asyncio.run(kafka_runtime(args.version, progress))
        asyncio.run(stack.up(progress))
        asyncio.run(stack.ready(120, progress))
        bootstrap = stack.describe().endpoints["kafka"]
        print(f"Kafka {args.version}, 1 KRaft broker (heap {target.options['heap']}), "
              f"{args.size} B records, acks={args.acks}, batch.size={args.batch_size}, "
              f"linger.ms={args.linger_ms}, compression={args.compression}")

        # latency first, on the fresh broker: the throughput runs leave it flushing
        # hundreds of MB of dirty pages for a while
        tool = end_to_end_latency(runtime, bootstrap, args)
        for client in args.clients:
            args.client = client
            e2e, _ = streambench_latency(bootstrap, args, work / f"latency-{client}")
            ps = percentiles(e2e, PERCENTILES) / 1e6
            print(f"\nend-to-end latency, ms (streambench, client={client}: "
                  f"{args.latency_rate:,.0f} msg/s paced, {e2e.total:,} messages; EndToEndLatency: "
                  f"{args.e2e_messages:,} sequential round trips)")
            latency_table(e2e, "EndToEndLatency", tool)
            if tool["p50"] > 0:
                print(f"  ratio p50 streambench / EndToEndLatency: {ps[0] / tool['p50']:.2f}")
            else:  # the tool prints whole milliseconds: a p50 under 1 ms reads 0
                print("  ratio p50 streambench / EndToEndLatency: none (the tool's p50 is under "
                      "its 1 ms resolution; compare the averages)")
                print(f"  ratio avg streambench / EndToEndLatency: "
                      f"{e2e.mean / 1e6 / tool['avg']:.2f}")

        pp = producer_performance_latency(runtime, bootstrap, args)
        for client in args.clients:
            args.client = client
            _, publish = streambench_latency(bootstrap, args, work / f"publish-{client}",
                                             consumers=False)
            print(f"\npublish latency (send → ack), ms, no consumers, both at "
                  f"{args.latency_rate:,.0f} msg/s paced, streambench client={client} "
                  f"(ProducerPerformance achieved {pp['rate']:,.0f} msg/s)")
            latency_table(publish, "ProducerPerformance", pp)
            print(f"  ratio avg streambench / ProducerPerformance: "
                  f"{publish.mean / 1e6 / pp['avg']:.2f}")

        ours = {}
        for client in args.clients:
            args.client = client
            ours[client] = streambench_max_rate(bootstrap, args, work / f"max-rate-{client}")
        theirs, theirs_cpu = producer_performance(runtime, bootstrap, args,
                                                  max(200_000, int(max(ours.values()) * args.seconds)))
        print(f"\nmaximum produce rate ({args.producers} streambench producer(s) in {args.processes} "
              f"process(es); the acked count checked against the log-end offsets)")
        rows = [*((f"streambench {c}", r) for c, r in ours.items()), ("ProducerPerformance", theirs)]
        for name, rate in rows:
            print(f"  {name:24} {rate:>10,.0f} msg/s  {rate * args.size / 1e6:7.1f} MB/s")
        for client, rate in ours.items():
            print(f"  ratio streambench {client} / ProducerPerformance: {rate / theirs:.2f}")

        print(f"\nmaximum rate with the consumer running (streambench: 1 producer + 1 consumer in "
              f"{args.pc_processes} load process(es); ProducerPerformance as above, no consumer)")
        print(f"  {'':34} {'msg/s':>10} {'CPU-s/100k':>11}")
        both_rates: dict[str, float] = {}
        for client in args.clients:
            args.client = client
            both = streambench_produce_consume(bootstrap, args, work / f"produce-consume-{client}")
            both_rates[client] = both["produced"]
            print(f"  {'streambench ' + client + ' produced':34} {both['produced']:>10,.0f} "
                  f"{both['cpu_per_100k']:>11.3f}   (producer and consumer)")
            print(f"  {'streambench ' + client + ' consumed':34} {both['consumed']:>10,.0f}")
            print(f"    {client}: consumed / produced {both['consumed'] / both['produced']:.3f} "
                  f"(goal ≥ 0.95); produced / ProducerPerformance "
                  f"{both['produced'] / theirs:.2f} (goal ≥ 1.0)")
        print(f"  {'ProducerPerformance':34} {theirs:>10,.0f} {theirs_cpu:>11.3f}")
        same = producer_performance_with_consumer(
            runtime, bootstrap, args, max(200_000, int(theirs * args.seconds)))
        print(f"  {'ProducerPerformance + consumer':34} {same['produced']:>10,.0f} "
              f"{same['cpu_per_100k']:>11.3f}   (both JVMs; ConsumerPerformance read "
              f"{same['received_over_sent']:.3f} of the records)")
        for client in both_rates:
            print(f"    streambench {client} produced / ProducerPerformance produced, each with "
                  f"its consumer: {both_rates[client] / same['produced']:.2f}")
    finally:
        asyncio.run(stack.down())
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
