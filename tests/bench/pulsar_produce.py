"""Benchmark: maximum produce rate of streambench's Pulsar driver next to Pulsar's own
`pulsar-perf produce`, on one local Pulsar standalone started for the purpose, in the same run.

Both send messages of the same size to a topic with the same number of partitions, with the
same producer batching (max messages, max bytes, delay), as fast as the broker acknowledges:
streambench as a run at rate 0 with no consumers, pulsar-perf with a rate far beyond reach. streambench's
acknowledged count is checked against the topic's msgInCounter. (streambench's messages also
carry their send time in a property; pulsar-perf's carry nothing.)

A third figure is the ceiling of the Python client library itself: a bare loop that builds and
sends messages of the same size with one property, with the same batching, from one process
(no pacing, no bookkeeping; an acknowledgement callback on every 1,000th message only, as the
driver asks for one per partition and hand-over), so the gap to pulsar-perf splits into what
the client library costs and what streambench adds.

Then the maximum rate with the consumer running: streambench at rate 0 with one producer and
one consumer (`--pc-processes 1`: in one load process; 2: one each), produced and consumed msg/s
over the measuring phase (the consumer keeps up when they are within 5 %), against
pulsar-perf's produce-only rate as above, and against `pulsar-perf produce` while
`pulsar-perf consume` reads the same topic (the same work in the Java tools). CPU-seconds per
100,000 messages are printed beside each: the load processes' over the measuring phase,
pulsar-perf's JVMs over their whole runs.

Prints the rates and their ratios."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pyarrow.dataset as ds
from redis_consume import measuring_rates, worker_cpu_s  # the bench next to this one (scripts run from here)

from analysis.sink import ParquetSink
from compose.pulsar import ADMIN_ENDPOINT, PULSAR_VERSION, PulsarLocalStack, distribution, topic_path
from loadgen.core.events import PhaseChange
from loadgen.core.target import unique_labels
from loadgen.core.ticks import Phase
from loadgen.core.workload import Workload
from loadgen.pacing import run_precise
from loadgen.platforms import resolve_target
from loadgen.run import Run

# pulsar-perf always paces with a rate limiter (it refuses 0): a rate no broker here reaches
UNLIMITED_RATE = 100_000_000


def progress(message: str) -> None:
    print(f"  {message}", file=sys.stderr)


def measured_rate(run_dir: Path) -> float:
    ticks = ds.dataset(run_dir / "ticks", format="parquet").to_table().to_pydict()
    rows = [i for i, p in enumerate(ticks["phase"]) if p == "measuring"]
    return sum(ticks["produced"][i] for i in rows) / sum(ticks["interval_s"][i] for i in rows)


def admin_json(admin: str, path: str, method: str = "GET", body: object = None) -> object:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{admin}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read()
    return json.loads(text) if text else None


def batching_options(args: argparse.Namespace) -> str:
    if not args.batching:
        return "batching=false"
    return (f"batching=true,batch_max_messages={args.batch_max_messages},"
            f"batch_max_bytes={args.batch_max_bytes},batch_delay_ms={args.batch_delay_ms}")


def streambench_max_rate(service: str, admin: str, args: argparse.Namespace, out: Path,
                         consumers: int = 0, processes: int | None = None) -> dict[str, float]:
    """Produced and consumed msg/s over the measuring phase, and the load processes' CPU-seconds
    per 100,000 produced messages over it."""
    workload = Workload(name="bench-pulsar-produce", rate=0, message_size=args.size,
                        partitions=args.partitions, producers=args.producers if not consumers else 1,
                        consumers=consumers, subscriptions=1 if consumers else 0,
                        duration_s=args.seconds, warmup_s=3, drain_timeout_s=60)
    target = resolve_target(f"pulsar:{batching_options(args)}@{service},{admin}")
    run = Run(workload, unique_labels([target]), out_dir=out,
              processes=processes or args.processes, recorder=ParquetSink)
    # the run deletes its topic from an existing cluster when it closes: count before that
    topic = f"streambench-{run.run_id}-0-0"
    counted: dict[str, int] = {}
    cpu: list[float] = []

    def marks(item: object) -> None:
        if isinstance(item, PhaseChange) and item.phase in (Phase.MEASURING, Phase.DRAINING):
            cpu.append(worker_cpu_s())
        if isinstance(item, PhaseChange) and item.phase is Phase.WRITING and not counted:
            stats = admin_json(admin, f"/admin/v2/{topic_path(True, 'public/default', topic)}"
                                      "/partitioned-stats")
            assert isinstance(stats, dict)
            counted["in"] = int(stats["msgInCounter"])

    run.subscribe(marks)
    summary = run_precise(run.execute())
    acked, errors = summary.targets[0].produced, summary.targets[0].send_errors
    stored = counted.get("in")
    if errors or (stored is not None and stored != acked):
        raise SystemExit(f"count mismatch: streambench acked {acked} (+{errors} errors), "
                         f"the broker counted {stored} messages in")
    print(f"  streambench acked {acked:,} messages; the broker's msgInCounter: {stored:,}"
          if stored is not None else f"  streambench acked {acked:,} messages")
    return measuring_rates(out, cpu)


def bare_client(service: str, args: argparse.Namespace, seconds: float) -> float:
    """Messages per second of a bare send loop on the Python client, one partition."""
    import _pulsar
    import pulsar

    client = pulsar.Client(service, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(
            f"persistent://public/default/bench-bare-{time.time_ns()}",
            batching_enabled=args.batching, batching_max_messages=args.batch_max_messages,
            batching_max_allowed_size_in_bytes=args.batch_max_bytes,
            batching_max_publish_delay_ms=args.batch_delay_ms, block_if_queue_full=True)
        raw = producer._producer
        payload = os.urandom(args.size)
        failed: list[object] = []

        def acked(result: object, _message_id: object) -> None:
            if result != _pulsar.Result.Ok:
                failed.append(result)

        sent, start = 0, time.perf_counter()
        deadline = start + seconds
        while time.perf_counter() < deadline:
            for i in range(1000):
                builder = _pulsar.MessageBuilder()
                builder.content(payload)
                builder.property("t", str(time.time_ns()))
                raw.send_async(builder.build(), acked if i == 999 else None)
            sent += 1000
        producer.flush()
        elapsed = time.perf_counter() - start
        if failed:
            raise SystemExit(f"bare client: {len(failed)} messages failed ({failed[0]})")
        return sent / elapsed
    finally:
        client.close()


def pulsar_perf(home: Path, service: str, admin: str, args: argparse.Namespace, work: Path,
                topic: str | None = None) -> tuple[float, float, float]:
    """Its msg/s, the CPU-seconds of its JVM per 100,000 messages sent, and the messages sent."""
    if topic is None:
        topic = f"bench-perf-{time.time_ns()}"
        admin_json(admin, f"/admin/v2/{topic_path(True, 'public/default', topic)}/partitions",
                   "PUT", args.partitions)
    argv = [str(home / "bin" / "pulsar-perf"), "produce", "-u", service, "-au", admin,
            "-r", str(UNLIMITED_RATE), "-s", str(args.size), "-n", str(args.producers),
            "-time", str(int(args.seconds + 3)), "--warmup-time", "3"]
    if args.batching:
        argv += ["-bm", str(args.batch_max_messages), "-bb", str(args.batch_max_bytes),
                 "-b", str(args.batch_delay_ms)]
    else:
        argv += ["-db"]
    env = {**os.environ, "PULSAR_LOG_DIR": str(work), "PULSAR_MEM": "-Xms512m -Xmx512m"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([*argv, f"persistent://public/default/{topic}"], capture_output=True,
                         text=True, env=env, timeout=args.seconds + 120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    text = out.stdout + out.stderr
    # "Aggregated throughput stats --- N records sent --- R msg/s --- …"
    found = re.findall(r"Aggregated throughput stats --- ([\d,]+) records sent --- ([\d.,]+) msg/s", text)
    if not found:
        raise SystemExit(f"pulsar-perf printed no summary (exit {out.returncode}): {text[-2000:]}")
    records = float(found[-1][0].replace(",", ""))
    return float(found[-1][1].replace(",", "")), cpu / records * 1e5, records


def pulsar_perf_with_consumer(home: Path, service: str, admin: str, args: argparse.Namespace,
                              work: Path) -> dict[str, float]:
    """pulsar-perf produce as above while `pulsar-perf consume` reads the same topic (a shared
    subscription, the receiver queue streambench's consumer gets for the message size): what
    the Java tools reach doing the same work as streambench's run with its consumer. Produced
    msg/s, messages received against sent, and both JVMs' CPU-seconds per 100,000 messages."""
    topic = f"bench-perf-pc-{time.time_ns()}"
    admin_json(admin, f"/admin/v2/{topic_path(True, 'public/default', topic)}/partitions", "PUT",
               args.partitions)
    queue = max(1000, min(10_000, 32 * 1024 * 1024 // args.size))
    env = {**os.environ, "PULSAR_LOG_DIR": str(work), "PULSAR_MEM": "-Xms512m -Xmx512m"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    consumer = subprocess.Popen(
        [str(home / "bin" / "pulsar-perf"), "consume", "-u", service, "-ss", "bench-perf",
         "-st", "Shared", "-q", str(queue), "-time", str(int(args.seconds + 25)),
         f"persistent://public/default/{topic}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        # the subscription exists once the consumer is connected: wait for it before producing
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            subs = admin_json(admin, f"/admin/v2/{topic_path(True, 'public/default', topic)}"
                                     "/partitioned-stats")
            if isinstance(subs, dict) and subs.get("subscriptions"):
                break
            time.sleep(0.5)
        else:
            raise SystemExit("pulsar-perf consume did not subscribe within 60 s")
        rate, _, sent = pulsar_perf(home, service, admin, args, work, topic)
        text, _ = consumer.communicate(timeout=args.seconds + 120)
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    found = re.findall(r"Aggregated throughput stats --- ([\d,]+) records received", text)
    if not found:
        raise SystemExit(f"pulsar-perf consume printed no summary: {text[-2000:]}")
    received = float(found[-1].replace(",", ""))
    return {"produced": rate, "received_over_sent": received / sent, "cpu_per_100k": cpu / sent * 1e5}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=15, help="measured seconds per run")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--producers", type=int, default=1)
    parser.add_argument("--no-batching", dest="batching", action="store_false")
    parser.add_argument("--batch-max-messages", type=int, default=1000)
    parser.add_argument("--batch-max-bytes", type=int, default=128 * 1024)
    parser.add_argument("--batch-delay-ms", type=int, default=1)
    parser.add_argument("--heap", default="1g")
    parser.add_argument("--processes", type=int, default=1,
                        help="streambench load processes (the producers are spread over them)")
    parser.add_argument("--pc-processes", type=int, default=1,
                        help="load processes for the run with the consumer (1: producer and "
                             "consumer share one; 2: one each)")
    args = parser.parse_args()
    args.producers = max(args.producers, args.processes)

    stack = PulsarLocalStack(resolve_target(f"pulsar:heap={args.heap},runtime=local"), "bench")
    work = Path(tempfile.mkdtemp(prefix="streambench-bench-"))
    try:
        home = asyncio.run(distribution(progress, "bench"))
        asyncio.run(stack.up(progress))
        asyncio.run(stack.ready(120, progress))
        desc = stack.describe()
        service, admin = desc.endpoints["pulsar"], desc.endpoints[ADMIN_ENDPOINT]
        print(f"Pulsar {PULSAR_VERSION} standalone (heap {args.heap}), {args.size} B messages, "
              f"{args.partitions} partition(s), {args.producers} producer(s) in "
              f"{args.processes} streambench process(es), "
              f"{batching_options(args)}")
        ours = streambench_max_rate(service, admin, args, work / "max-rate")
        bare = bare_client(service, args, args.seconds)
        theirs, theirs_cpu, _ = pulsar_perf(home, service, admin, args, work)
        both = streambench_max_rate(service, admin, args, work / "produce-consume", consumers=1,
                                    processes=args.pc_processes)
        theirs_both = pulsar_perf_with_consumer(home, service, admin, args, work)
        print(f"\nmaximum produce rate{'':16} msg/s       MB/s  CPU-s/100k msgs")
        for name, rate, cpu in (("streambench", ours["produced"], ours["cpu_per_100k"]),
                                ("bare Python client loop", bare, float("nan")),
                                ("pulsar-perf produce", theirs, theirs_cpu)):
            print(f"  {name:28} {rate:>10,.0f} {rate * args.size / 1e6:9.1f} {cpu:>11.3f}")
        print(f"  ratio streambench / pulsar-perf: {ours['produced'] / theirs:.2f}")
        print(f"  ratio streambench / bare Python client loop: {ours['produced'] / bare:.2f}")
        print(f"\nmaximum rate with the consumer running (streambench: 1 producer + 1 consumer in "
              f"{args.pc_processes} load process(es); pulsar-perf as above, no consumer)")
        print(f"  {'streambench produced':28} {both['produced']:>10,.0f} "
              f"{both['produced'] * args.size / 1e6:9.1f} {both['cpu_per_100k']:>11.3f}"
              "   (producer and consumer)")
        print(f"  {'streambench consumed':28} {both['consumed']:>10,.0f} "
              f"{both['consumed'] * args.size / 1e6:9.1f}")
        print(f"  consumed / produced {both['consumed'] / both['produced']:.3f}; "
              f"produced / pulsar-perf {both['produced'] / theirs:.2f}")
        print(f"  {'pulsar-perf produce + consume':28} {theirs_both['produced']:>10,.0f} "
              f"{theirs_both['produced'] * args.size / 1e6:9.1f} "
              f"{theirs_both['cpu_per_100k']:>11.3f}   (both JVMs, whole runs)")
        print(f"  pulsar-perf received / sent {theirs_both['received_over_sent']:.3f} (sent leaves "
              f"out its 3 s warm-up, received does not); "
              f"streambench produced / pulsar-perf produced, each with its consumer "
              f"{both['produced'] / theirs_both['produced']:.2f}")
    finally:
        asyncio.run(stack.down())
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
