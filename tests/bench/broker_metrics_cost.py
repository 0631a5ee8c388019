"""Benchmark: what reading a platform's broker metrics once per tick costs, and what showing them
costs the dashboard.

Redis: a redis-server of its own on loopback, with a stream of 20,000 entries so INFO has
something to count. Three figures, each beside an independent one:

- the collector's CPU per read (RedisMetrics.read(): five INFO sections in one pipelined write,
  parsed), from this process's CPU time (time.process_time) over N back-to-back reads, beside
  the wall time per read;
- the server's CPU per read, from the server process's CPU time (psutil, user + system) over
  the same N reads, beside what the server itself accounts for its INFO commands (INFO
  commandstats `cmdstat_info` usec / calls, which leaves out reading the request and writing the
  reply);
- the server's CPU over 20 s of a steady load (XADD at 2,000 msg/s from this process) with
  the metrics read once a second and without, as % of one core, side by side: the difference
  is the cost at one read per tick (small against the noise of a shared machine: the per-read
  figure above times one read a second is the better estimate).

Kafka: a one-broker KRaft cluster streambench starts (local runtime, its JMX exporter agent
attached), idle, after 300 reads to warm the JVM's compiler up. The collector's CPU per read
(every broker's exporter endpoint over HTTP, the text parsed, the MBeans' values and rates
worked out) from this process's CPU time, beside the wall time per read and the bytes read;
the broker's CPU per read from the JVM's CPU time over the N reads less its CPU over as long
a time without reads (an idle broker still works: its background threads are measured in the
same run), beside what the agent says its own MBean
collection took (its `jmx_scrape_duration_seconds`, which leaves out the HTTP and the text).

With `--pulsar URL` (a Pulsar broker's web service, e.g. of a `streambench run pulsar` going on)
or `--rabbitmq URL` (a RabbitMQ node's management API): the same two per-read figures for that
platform's collector (the broker's `/metrics`, parsed for the run's topics; the four
management API requests), the broker's CPU from the process listening on the URL's port, read
while the broker carries its load (that load's own CPU is in the figure too: the printed
figure is the broker's whole CPU over the reads, and its rate beside it, without reads, over
as long).

Then the detail screen's broker-metrics panel: the CPU per render of the panel (redis, 8
metrics, a sparkline) over N renders, which the detail screen pays once per repaint (at most
four a second). The machine's load average is printed beside each figure."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from typing import Any

import psutil
import redis

from collectors.kafka_metrics import kafka_metrics
from collectors.scrape import fetch, named_endpoints, parse
from compose.kafka import KafkaLocalStack
from compose.process import free_port
from loadgen.core.histogram import HistogramSnapshot
from loadgen.core.target import parse_target
from loadgen.core.ticks import BrokerMetricValues, Phase, Resources, Tick
from loadgen.platforms import option_tables
from loadgen.platforms.redis_metrics import METRICS, SECTIONS, RedisMetrics
from tui.detail import broker_metrics_panel
from tui.history import TargetHistory


def load() -> str:
    return f"(load average {os.getloadavg()[0]:.2f})"


def server_cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def start_server(tmp: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--dir", tmp],
                            stdout=subprocess.DEVNULL)
    client = redis.Redis(port=port)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            return proc, port
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise SystemExit("redis-server did not start") from None
            time.sleep(0.05)


async def timed_reads(port: int, n: int, server: psutil.Process
                      ) -> tuple[float, float, float]:
    """(this process's CPU, wall, the server's CPU) over n reads, after 10 to warm up."""
    collector = RedisMetrics("127.0.0.1", port)
    try:
        for _ in range(10):
            await collector.read()
        redis.Redis(port=port).config_resetstat()
        cpu0, wall0, srv0 = time.process_time(), time.perf_counter(), server_cpu(server)
        for _ in range(n):
            await collector.read()
        return (time.process_time() - cpu0, time.perf_counter() - wall0,
                server_cpu(server) - srv0)
    finally:
        await collector.close()


def per_read(proc: psutil.Process, client: redis.Redis, port: int, n: int) -> None:
    cpu, wall, srv = asyncio.run(timed_reads(port, n, proc))
    info = client.info("commandstats")["cmdstat_info"]
    own = info["usec"] / info["calls"] * len(SECTIONS)
    print(f"collector: {cpu / n * 1e6:7.0f} µs CPU per read, {wall / n * 1e6:7.0f} µs wall per "
          f"read, over {n:,} reads {load()}")
    print(f"server:    {srv / n * 1e6:7.0f} µs CPU per read (process CPU time); its own "
          f"accounting of the {len(SECTIONS)} INFO commands {own:5.0f} µs per read "
          f"({info['calls']:,} INFO calls) {load()}")
    print(f"at one read per tick: collector {cpu / n * 100:.3f} % of a core, server "
          f"{srv / n * 100:.3f} % of a core")


async def steady(port: int, seconds: float, rate: float, with_reads: bool) -> int:
    """XADD at `rate` msg/s (batches of rate/100 every 10 ms) and, with_reads, the metrics
    read once a second."""
    import redis.asyncio as aioredis

    client = aioredis.Redis(port=port)
    collector = RedisMetrics("127.0.0.1", port)
    batch = max(1, int(rate / 100))
    sent = 0
    start = time.monotonic()
    next_read = start
    while (now := time.monotonic()) - start < seconds:
        pipe = client.pipeline(transaction=False)
        for _ in range(batch):
            pipe.xadd("load", {"p": b"x" * 100}, maxlen=10_000, approximate=True)
        await pipe.execute()
        sent += batch
        if with_reads and now >= next_read:
            await collector.read()
            next_read += 1.0
        await asyncio.sleep(max(0.0, 0.01 - (time.monotonic() - now)))
    await collector.close()
    await client.aclose()
    return sent


def with_and_without(proc: psutil.Process, port: int, seconds: float, rate: float) -> None:
    for with_reads in (False, True, False, True):
        srv0, t0 = server_cpu(proc), time.monotonic()
        sent = asyncio.run(steady(port, seconds, rate, with_reads))
        took = time.monotonic() - t0
        pct = (server_cpu(proc) - srv0) / took * 100
        what = "with one read a second" if with_reads else "without reads         "
        print(f"server under {sent / took:,.0f} XADD/s {what}: {pct:5.2f} % of a core "
              f"{load()}")


def listener(url: str) -> psutil.Process:
    """The process listening on the URL's port (the broker)."""
    port = int(url.rstrip("/").rsplit(":", 1)[1])
    pid = next(c.pid for c in psutil.net_connections("tcp")
               if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid)
    return psutil.Process(pid)


def remote_collector(kind: str, url: str) -> Any:
    if kind == "pulsar":
        from collectors.pulsar import PulsarMetrics
        from compose.pulsar import PulsarAdmin
        with urllib.request.urlopen(f"{url}/metrics/", timeout=5) as reply:
            text = reply.read().decode()
        # the run's topics: their partitions' series, the partition's suffix cut off
        topics = sorted({t.rpartition("-partition-")[0] for t in
                         re.findall(r'topic="(persistent://public/default/streambench-[^"]+)"',
                                    text)})
        return PulsarMetrics(PulsarAdmin(url, timeout_s=0.8), topics)
    from collectors.rabbitmq import RabbitMetrics
    return RabbitMetrics(url, "guest", "guest")


async def remote_reads(kind: str, url: str, n: int, broker: psutil.Process) -> None:
    collector = remote_collector(kind, url)
    await collector.start()
    for _ in range(5):
        await collector.sample()
    srv0, t0 = server_cpu(broker), time.perf_counter()
    await asyncio.sleep(n * 0.05)  # as long without reads: the broker's CPU under its load alone
    idle = (server_cpu(broker) - srv0) / (time.perf_counter() - t0)
    cpu0, wall0, srv0 = time.process_time(), time.perf_counter(), server_cpu(broker)
    for _ in range(n):
        reading = await collector.sample()
    cpu, wall, srv = (time.process_time() - cpu0, time.perf_counter() - wall0,
                      server_cpu(broker) - srv0)
    extra = max(0.0, srv - idle * wall)
    print(f"{kind} collector: {cpu / n * 1e6:7.0f} µs CPU per read, {wall / n * 1e6:7.0f} µs wall "
          f"per read, {len(next(iter((reading.metrics or {}).values()), {}))} metrics, over "
          f"{n:,} reads {load()}")
    print(f"{kind} broker: {srv / wall * 100:5.1f} % of a core while read back to back, "
          f"{idle * 100:5.1f} % without reads: {extra / n * 1e6:7.0f} µs CPU per read "
          f"{load()}")
    print(f"at one read per tick: collector {cpu / n * 100:.3f} % of a core, broker "
          f"{extra / n * 100:.3f} % of a core")


def panel_cost(n: int) -> None:
    history = TargetHistory("redis")
    empty = HistogramSnapshot.empty()
    values = {m.name: 1.0 + i for i, m in enumerate(METRICS.metrics)}
    for seq in range(60):
        history.add(Tick(target="redis", seq=seq, time_ns=(seq + 1) * 10**9, interval_s=1.0,
                         phase=Phase.MEASURING, elapsed_s=float(seq), produced=0, produced_bytes=0,
                         consumed=0, consumed_bytes=0, send_errors=0, target_rate=0.0,
                         publish_latency=empty, publish_delay=empty, e2e_latency=empty, lag=None,
                         resources=Resources(), broker_metrics=BrokerMetricValues(
                             {"redis": {k: v * (1 + seq % 7) for k, v in values.items()}})),
                    summarise=False)
    cpu0 = time.process_time()
    for _ in range(n):
        broker_metrics_panel(history, METRICS)
    cpu = time.process_time() - cpu0
    print(f"detail panel: {cpu / n * 1e6:7.0f} µs CPU per render ({n:,} renders); at 4 "
          f"repaints a second {cpu / n * 4 * 100:.3f} % of a core {load()}")


WARM_READS = 300


async def kafka_reads(urls: dict[str, str], pid: int, n: int) -> None:
    collector = kafka_metrics(urls)
    await collector.start()
    broker = psutil.Process(pid)
    url = next(iter(urls.values()))
    size = len(fetch(url + "?name[]=kafka_jmx").encode())
    whole = len(fetch(url).encode())
    # warm-up reads (the JVM compiles the agent's code as it runs), then the broker's CPU with
    # no reads, over about as long as the reads take
    for _ in range(WARM_READS):
        await collector.sample()
    wall0 = time.perf_counter()
    for _ in range(20):
        await collector.sample()
    took = (time.perf_counter() - wall0) / 20 * n
    srv0 = server_cpu(broker)
    await asyncio.sleep(took)
    idle = server_cpu(broker) - srv0
    cpu0, wall0, srv0 = time.process_time(), time.perf_counter(), server_cpu(broker)
    for _ in range(n):
        await collector.sample()
    cpu, wall, srv = (time.process_time() - cpu0, time.perf_counter() - wall0,
                      server_cpu(broker) - srv0)
    own = [s.value for s in parse(fetch(url + "?name[]=jmx_scrape_duration_seconds"))]
    print(f"kafka collector: {cpu / n * 1e6:7.0f} µs CPU per read, {wall / n * 1e6:7.0f} µs wall "
          f"per read, {size:,} bytes read (the agent's whole page: {whole:,}), over {n:,} reads "
          f"{load()}")
    print(f"kafka broker:    {(srv - idle * wall / took) / n * 1e6:7.0f} µs CPU per read (the JVM's "
          f"CPU time over the reads {srv:.2f} s less {idle * wall / took:.2f} s idle over as long); "
          f"the agent's own MBean collection {own[0] * 1e6 if own else float('nan'):5.0f} µs per "
          f"read {load()}")
    print(f"at one read per tick: collector {cpu / n * 100:.3f} % of a core, broker "
          f"{max(0.0, srv - idle * wall / took) / n * 100:.3f} % of a core")


async def kafka_cost(n: int) -> None:
    target = parse_target("kafka:runtime=local", option_tables())
    stack = KafkaLocalStack(target, "kafka", zookeeper=False)
    try:
        await stack.up(lambda message: None)
        await stack.ready(180, lambda message: None)
        desc = stack.describe()
        await kafka_reads(named_endpoints(desc.endpoints["metrics"]), desc.pids[0], n)
    finally:
        await stack.down()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=2000.0)
    parser.add_argument("--only", choices=("redis", "kafka"), default=None,
                        help="measure one platform's reads only")
    parser.add_argument("--pulsar", metavar="URL", help="a Pulsar broker's web service")
    parser.add_argument("--rabbitmq", metavar="URL", help="a RabbitMQ node's management API")
    args = parser.parse_args()
    for kind in ("pulsar", "rabbitmq"):
        if (url := getattr(args, kind)) is not None:
            asyncio.run(remote_reads(kind, url, min(args.reads, 200), listener(url)))
    if args.pulsar or args.rabbitmq:
        return
    if args.only != "redis":
        asyncio.run(kafka_cost(args.reads // 4))
    if args.only == "kafka":
        return
    tmp = tempfile.mkdtemp(prefix="streambench-metrics-cost-")
    proc, port = start_server(tmp)
    try:
        client = redis.Redis(port=port)
        pipe = client.pipeline(transaction=False)
        for i in range(20_000):
            pipe.xadd("s", {"p": str(i)})
        pipe.execute()
        server = psutil.Process(proc.pid)
        per_read(server, client, port, args.reads)
        with_and_without(server, port, args.seconds, args.rate)
        panel_cost(args.reads)
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
