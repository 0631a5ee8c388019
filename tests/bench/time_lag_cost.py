"""Benchmark: what the exact time lag costs the producers.

The producers note, from their acknowledgements, the intended send time at acknowledged
positions (loadgen/core/acklog.py). This runs one target's real load in this process (the
paced producer of loadgen.load with its pacing, send and acknowledgement, no consumer) against
a local redis-server and a local Kafka broker, with the producers' ack log on and off (the load
sets `Producer.acks`; off, it is taken away after the start), alternating, several times, and
prints the process's CPU per message (user + system, psutil) beside each other and their ratio,
at a paced rate and at maximum rate. The messages counted are the load's acknowledged count,
checked against the broker's own (Redis INFO commandstats `xadd` calls, Kafka's log-end
offsets). Then the ack log's own calls alone, as the drivers make them (`each` per Redis batch,
`one` per Kafka record, `run` per Kafka record batch), in ns per message.

CPU on a shared machine depends on what else runs: the load average is printed beside each
figure, and the ratio of the medians over `--repeat` alternating runs is the figure to read."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from compose.kafka import KAFKA_3, KafkaLocalStack, kafka_runtime
from compose.process import free_port, start_process, stop_process
from loadgen.core.acklog import AckLog, stream_position
from loadgen.core.target import Target, unique_labels
from loadgen.core.ticks import Phase
from loadgen.core.workload import Workload
from loadgen.load import TargetLoad
from loadgen.pacing import now_ns, run_precise
from loadgen.platforms import resolve_target

PARTITIONS = 4


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


async def produced_on_broker(target: Target, topic: str) -> int:
    """What the broker itself counts as stored: Redis's XADD calls, Kafka's log-end offsets."""
    if target.platform == "redis":
        from loadgen.platforms.redis_resp import RespConnection, encode

        assert target.address is not None
        host, port = target.address.rsplit(":", 1)
        conn = await RespConnection.open(host, int(port), 2.0)
        (info,) = await conn.pipeline(encode(["INFO", "commandstats"]), 1)
        await conn.close(1.0)
        for line in bytes(info).split(b"\r\n"):
            if line.startswith(b"cmdstat_xadd:"):
                return int(line.split(b"calls=")[1].split(b",")[0])
        return 0  # no XADD yet
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=target.address)
    await consumer.start()
    try:
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in range(PARTITIONS)])
        return sum(ends.values())
    finally:
        await consumer.stop()


def one_run(target: Target, rate: float, seconds: float, with_log: bool, run_id: str) -> dict[str, float]:
    """CPU-seconds of this process and messages acknowledged over `seconds` of load."""
    out: dict[str, float] = {}

    async def main() -> None:
        workload = Workload(name="bench-time-lag", rate=rate, message_size=100,
                            partitions=PARTITIONS, subscriptions=0)
        load = TargetLoad(0, target.label, target, workload, run_id, False, False, lambda item: None)
        await load.start(lambda line: None)
        if not with_log:
            for p in load.producers:
                p.acks = None
        before = await produced_on_broker(target, load.topics[0])
        proc = psutil.Process()
        mono, wall = now_ns()
        end = mono + int(seconds * 1e9)
        cpu0 = sum(proc.cpu_times()[:2])
        load.start_load(mono, wall, end)
        samples = 0
        for seq in range(int(seconds)):
            await asyncio.sleep(max(0.0, (mono + (seq + 1) * 1e9 - time.monotonic_ns()) / 1e9))
            tick = await load.tick(seq, time.time_ns(), Phase.MEASURING, seq + 1.0)
            samples += sum(len(taken) for taken in tick.acked.values())
        await load.stop_producers()
        out["cpu_s"] = sum(proc.cpu_times()[:2]) - cpu0
        out["produced"] = load.totals.produced
        out["broker"] = await produced_on_broker(target, load.topics[0]) - before
        out["samples"] = samples
        await load.close()

    run_precise(main())
    return out


def log_calls_ns(count: int = 200_000) -> dict[str, float]:
    """CPU ns per message of the ack log's calls alone (their arguments built beforehand), at
    100,000 msg/s of intended time."""
    step = 10_000  # ns of intended time between messages
    ids = [b"1700000000000-%d" % i for i in range(count)]
    batches = [([i % PARTITIONS for i in range(a, a + 64)], ids[a:a + 64],
                [i * step for i in range(a, a + 64)]) for a in range(0, count, 64)]
    runs = [(a // 256 % PARTITIONS, a, 256, a * step, (a + 255) * step)
            for a in range(0, count, 256)]
    records = [(i % PARTITIONS, i, i * step) for i in range(count)]
    out: dict[str, float] = {}

    def timed(name: str, body: Callable[[AckLog], None]) -> None:
        log = AckLog(PARTITIONS)
        t0 = time.process_time_ns()
        body(log)
        out[name] = (time.process_time_ns() - t0) / count

    # the load takes the samples once a tick: once per 100,000 messages here
    def each(log: AckLog) -> None:  # a Redis batch of 64, round robin over the streams
        for k, (partitions, positions, intended) in enumerate(batches):
            if log.wanted(intended[-1]):  # as the driver asks before listing the streams
                log.each(partitions, positions, intended, stream_position)
            if k % (100_000 // 64) == 0:
                log.take()

    def one(log: AckLog) -> None:  # Kafka, record by record
        for partition, position, intended in records:
            log.one(partition, position, intended)
            if position % 100_000 == 0:
                log.take()

    def run(log: AckLog) -> None:  # Kafka, a record batch of 256 at a time
        for k, (partition, first, n, first_ns, last_ns) in enumerate(runs):
            log.run(partition, first, n, first_ns, last_ns)
            if k % (100_000 // 256) == 0:
                log.take()

    def bare(log: AckLog) -> None:  # the loop over the records with no call: the floor
        for partition, position, intended in records:
            if intended < 0:
                log.one(partition, position, intended)

    timed("each (Redis batch of 64)", each)
    timed("one (Kafka record)", one)
    timed("run (Kafka record batch of 256)", run)
    timed("(the loop alone, no call)", bare)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rates", type=float, nargs="+", default=[5000.0, 0.0],
                        help="msg/s; 0 = maximum rate")
    parser.add_argument("--platforms", nargs="+", default=["redis", "kafka"])
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="streambench-bench-"))
    stops: list[Callable[[], None]] = []
    targets: dict[str, Target] = {}
    try:
        if "redis" in args.platforms:
            if shutil.which("redis-server") is None:
                print("redis-server is needed (apt-get install redis-server)")
                return 2
            port = free_port()
            server = start_process(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                    "--save", "", "--appendonly", "no", "--dir", str(work)],
                                   work / "redis.log")
            stops.append(lambda: stop_process(server))
            time.sleep(0.5)
            (targets["redis"],) = unique_labels([resolve_target(f"redis@127.0.0.1:{port}")])
        if "kafka" in args.platforms:
            asyncio.run(kafka_runtime(KAFKA_3, print))
            stack = KafkaLocalStack(resolve_target("kafka:runtime=local,heap=512M"), "bench-time-lag",
                                    zookeeper=False)
            stops.append(lambda: asyncio.run(stack.down()))
            asyncio.run(stack.up(print))
            asyncio.run(stack.ready(120, print))
            bootstrap = stack.describe().endpoints["kafka"]
            (targets["kafka"],) = unique_labels([resolve_target(f"kafka@{bootstrap}")])
        print(f"{PARTITIONS} partitions, 100 B messages, {args.seconds:.0f} s per run, "
              f"{args.repeat} runs alternating with and without the ack log")
        print(f"{'platform':<8} {'rate':>8} | {'CPU µs/msg without':>18} | {'with':>8} | "
              f"{'ratio':>5} | {'msg/s without':>13} | {'with':>8} | samples/s | load")
        n = 0
        for name, target in targets.items():
            for rate in args.rates:
                cpu: dict[bool, list[float]] = {False: [], True: []}
                rates: dict[bool, list[float]] = {False: [], True: []}
                samples = 0.0
                for _ in range(args.repeat):
                    for with_log in (False, True):
                        n += 1
                        r = one_run(target, rate, args.seconds, with_log, f"tlc{os.getpid()}x{n}")
                        if r["broker"] != r["produced"]:
                            raise SystemExit(f"{name}: the load counted {r['produced']:,.0f} "
                                             f"acknowledged, the broker {r['broker']:,.0f}")
                        cpu[with_log].append(r["cpu_s"] / r["produced"] * 1e6)
                        rates[with_log].append(r["produced"] / args.seconds)
                        if with_log:
                            samples = r["samples"]
                without, with_ = statistics.median(cpu[False]), statistics.median(cpu[True])
                label = "max" if rate == 0 else f"{rate:,.0f}"
                print(f"{name:<8} {label:>8} | {without:>18.2f} | {with_:>8.2f} | "
                      f"{with_ / without:>5.3f} | {statistics.median(rates[False]):>13,.0f} | "
                      f"{statistics.median(rates[True]):>8,.0f} | {samples / args.seconds:>9,.0f} | "
                      f"{load_average()}")
                print(f"{'':<17}   runs without: {', '.join(f'{c:.2f}' for c in cpu[False])}; "
                      f"with: {', '.join(f'{c:.2f}' for c in cpu[True])}")
        print(f"the ack log's calls alone, ns per message (load {load_average()}):")
        for call, ns in log_calls_ns().items():
            print(f"  {call:<32} {ns:6.1f}")
    finally:
        for stop in reversed(stops):
            stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
