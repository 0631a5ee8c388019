"""Benchmark: what paced load costs the load generator, and how close its latency gets to the
client's own round trip.

Starts one local redis-server (as tests/bench/redis_produce.py does), measures the raw XADD
round trip on it (one command at a time on a blocking socket, 1 KiB payload, the same fields as
streambench's entries), then runs streambench with 1 producer and 1 consumer (one worker
process) at each fixed rate (default 1,000 and 5,000 msg/s, 1 KiB messages, 20 s measured after
a 2 s warm-up) and prints per rate, beside the goal figures:

- worker CPU: the load worker process's CPU (user + system, psutil) over the measuring phase,
  as % of one core and as CPU-seconds per 100,000 messages (each produced and consumed);
- redis-server CPU over the same interval (% of one core);
- end-to-end latency p50 / p99 (receive − intended send time) and publish delay p50 / p99
  (actual − intended send time);
- e2e p50 / raw XADD round trip p50, and / the same through streambench's client; also the raw
  round trip when one XADD goes out per millisecond (both processes wake from idle each time,
  as in a paced run at 1,000 msg/s);
- the CPU of a minimal asyncio client at the same rate on the same server (asyncio_floor.py:
  one XADD per slot from a timer, a blocking XREADGROUP, hiredis, nothing recorded), the floor
  of a one-wake-up-per-message design in CPython on this machine, and the worker's CPU over it;
- the CPU of a C client of the same design (c_floor.c, built with the system's C compiler when
  there is one: threads blocking in the kernel, no event loop, no interpreter), and of the
  same number of timed wake-ups a second with nothing else to do: what the machine itself
  charges for the design;
- the load process's and the minimal client's CPU again on the standard asyncio event loop
  (STREAMBENCH_EVENT_LOOP=asyncio) where the default is uvloop, with the latencies that change
  with the loop (`--no-standard-loop` leaves these runs out).

CPU figures on a shared machine depend on what else runs: the load average is printed beside
each run; `--repeat` runs each rate several times. `--profile RATE` instead runs one target's
load in this process under cProfile (no worker process, no ticks to a run directory) and
prints where its CPU goes."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import json
import os
import pstats
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from memory_recall import recall_us  # the benches next to this one (scripts run from here)
from redis_consume import worker_cpu_s

from analysis.sink import ParquetSink
from compose.process import free_port, start_process, stop_process
from loadgen.core.audit import CATEGORIES
from loadgen.core.bus import BusItem
from loadgen.core.histogram import HistogramSnapshot
from loadgen.core.target import unique_labels
from loadgen.core.ticks import Phase, Tick
from loadgen.core.workload import Workload
from loadgen.pacing import EVENT_LOOP_ENV, event_loop_kind, run_precise, tune_process
from loadgen.platforms import resolve_target
from loadgen.run import Run

GOAL_CPU = {1000: 8.0, 5000: 25.0}  # % of one core
GOAL_RATIO = 2.0  # e2e p50 / raw round trip p50, at 1,000 msg/s
GOAL_DELAY_P50_US = 30.0
GOAL_DELAY_P99_US = 1000.0


def load_average() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def raw_rtt_ns(port: int, size: int, count: int, every_s: float = 0.0) -> list[int]:
    """Round trips of XADD one at a time on a blocking socket (the floor any client has);
    with `every_s`, one every so often, sleeping in between (as a paced run's sends are)."""
    payload = os.urandom(size)
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out = []
    next_at = time.monotonic()
    try:
        for _ in range(count + 1000):
            if every_s:
                next_at += every_s
                time.sleep(max(0.0, next_at - time.monotonic()))
            t = b"%d" % time.time_ns()
            cmd = (b"*7\r\n$4\r\nXADD\r\n$8\r\nrtt-test\r\n$1\r\n*\r\n$1\r\nt\r\n$%d\r\n%s\r\n"
                   b"$1\r\np\r\n$%d\r\n%s\r\n" % (len(t), t, size, payload))
            start = time.perf_counter_ns()
            sock.sendall(cmd)
            reply = b""
            while not reply.endswith(b"\r\n") or reply.count(b"\r\n") < 2:
                chunk = sock.recv(4096)
                if not chunk:
                    raise SystemExit("redis-server closed the connection")
                reply += chunk
            out.append(time.perf_counter_ns() - start)
    finally:
        sock.close()
    return out[1000:]  # the first thousand warm the connection and the caches


def client_rtt_ns(port: int, size: int, count: int) -> list[int]:
    """Round trips of XADD one at a time through streambench's own client (RespConnection on
    the precise event loop): the floor for the same client stack the load uses."""
    from loadgen.platforms.redis_resp import RespConnection

    async def loop() -> list[int]:
        conn = await RespConnection.open("127.0.0.1", port)
        payload = os.urandom(size)
        out = []
        try:
            for _ in range(count + 1000):
                start = time.perf_counter_ns()
                await conn.call("XADD", "rtt-test", "*", "t", time.time_ns(), "p", payload)
                out.append(time.perf_counter_ns() - start)
        finally:
            await conn.close()
        return out[1000:]

    return run_precise(loop())


@dataclass
class Measured:
    """Per-tick figures of one run: the worker's and the server's CPU read as each tick arrives."""

    server: psutil.Process
    ticks: list[tuple[Tick, float, float, float]] = field(default_factory=list)

    def _server_cpu(self) -> float:
        t = self.server.cpu_times()
        return t.user + t.system

    def __call__(self, item: BusItem) -> None:
        if isinstance(item, Tick):
            self.ticks.append((item, time.monotonic(), worker_cpu_s(), self._server_cpu()))

    def summary(self) -> dict[str, float]:
        rows = [i for i, (t, *_) in enumerate(self.ticks) if t.phase is Phase.MEASURING]
        if len(rows) < 2:
            raise SystemExit("not enough measuring ticks")
        # CPU between the first and the last measuring tick's arrival
        first, last = self.ticks[rows[0]], self.ticks[rows[-1]]
        wall = last[1] - first[1]
        worker, server = last[2] - first[2], last[3] - first[3]
        counted = [self.ticks[i][0] for i in rows[1:]]
        seconds = sum(t.interval_s for t in counted)
        produced = sum(t.produced for t in counted)
        consumed = sum(t.consumed for t in counted)
        every = [self.ticks[i][0] for i in rows]
        e2e = HistogramSnapshot.merge([t.e2e_latency for t in every])
        delay = HistogramSnapshot.merge([t.publish_delay for t in every])
        return {
            "rate": produced / seconds,
            "consumed": consumed / seconds,
            "worker_pct": worker / wall * 100,
            "server_pct": server / wall * 100,
            "cpu_per_100k": worker / produced * 100_000 if produced else float("nan"),
            "e2e_p50_us": e2e.percentile(50) / 1e3,
            "e2e_p99_us": e2e.percentile(99) / 1e3,
            "delay_p50_us": delay.percentile(50) / 1e3,
            "delay_p99_us": delay.percentile(99) / 1e3,
        }


def run_once(port: int, server: psutil.Process, rate: float, size: int, seconds: float,
             out: Path, window_ms: float, audit: bool = False) -> dict[str, float]:
    workload = Workload(name="bench-paced-cost", rate=rate, message_size=size, producers=1,
                        consumers=1, subscriptions=1, duration_s=seconds, warmup_s=2,
                        drain_timeout_s=20, pacing_window_ms=window_ms)
    run = Run(workload, unique_labels([resolve_target(f"redis@127.0.0.1:{port}")]), out_dir=out,
              recorder=ParquetSink, audit=audit)
    measured = Measured(server)
    run.subscribe(measured)
    summary = run_precise(run.execute())
    totals = summary.targets[0]
    if totals.send_errors or totals.receive_errors:
        raise SystemExit(f"{totals.send_errors} send errors, {totals.receive_errors} receive errors")
    if audit:  # the delivery audit's verdict: every message acknowledged and consumed once
        v = totals.audit or {}
        bad = {k: v.get(k) for k in CATEGORIES if v.get(k)}
        if bad or v.get("acknowledged") != totals.produced:
            raise SystemExit(f"the audit is not clean: {v}")
    return measured.summary()


def profile(port: int, rate: float, size: int, seconds: float, top: int,
            window_ms: float) -> None:
    """One target's load in this process, under cProfile: where the worker's CPU goes."""
    from loadgen.load import TargetLoad
    from loadgen.pacing import now_ns

    async def main() -> None:
        (target,) = unique_labels([resolve_target(f"redis@127.0.0.1:{port}")])
        workload = Workload(name="bench-paced-profile", rate=rate, message_size=size,
                            pacing_window_ms=window_ms)
        load = TargetLoad(0, target.label, target, workload, f"prof{os.getpid()}", False, False,
                          lambda item: None)
        await load.start(lambda line: None)
        mono, wall = now_ns()
        end = mono + int((seconds + 1) * 1e9)
        profiler = cProfile.Profile(time.process_time)  # CPU time, not waiting
        cpu0 = time.process_time()
        profiler.enable()
        load.start_load(mono, wall, end)
        for seq in range(int(seconds)):
            await asyncio.sleep(1)
            await load.tick(seq, time.time_ns(), Phase.MEASURING, seq + 1.0)
        profiler.disable()
        cpu = time.process_time() - cpu0
        await load.close()
        produced = load.totals.produced
        print(f"profiled {seconds:.0f} s at {rate:,.0f} msg/s: {produced:,} produced, "
              f"{load.totals.consumed:,} consumed, {cpu:.2f} CPU-s with the profiler on "
              f"(load {load_average()})")
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text)
        stats.sort_stats("tottime").print_stats(top)
        stats.sort_stats("cumulative").print_stats(top)
        if os.environ.get("PROFILE_CALLERS"):
            stats.print_callers(os.environ["PROFILE_CALLERS"])
        print(text.getvalue())

    run_precise(main())


def start_redis() -> tuple[Path, int, subprocess.Popen[bytes]] | None:
    """A redis-server without persistence on a free loopback port, its files in a temporary
    directory: (that directory, the port, its process); None, said, when there is none."""
    if shutil.which("redis-server") is None:
        print("redis-server is needed (apt-get install redis-server)")
        return None
    work = Path(tempfile.mkdtemp(prefix="streambench-bench-"))
    port = free_port()
    proc = start_process(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                          "--appendonly", "no", "--dir", str(work)], work / "redis.log")
    return work, port, proc


@contextlib.contextmanager
def event_loop(kind: str | None) -> Iterator[None]:
    """Load processes started meanwhile (and this one's runs) on the event loop `kind`
    ("uvloop", "asyncio"); None: the default."""
    before = os.environ.get(EVENT_LOOP_ENV)
    if kind is not None:
        os.environ[EVENT_LOOP_ENV] = kind
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(EVENT_LOOP_ENV, None)
        else:
            os.environ[EVENT_LOOP_ENV] = before


def floor_cpu(port: int, rate: float, seconds: float) -> dict[str, float]:
    """asyncio_floor.py at `rate` for `seconds`: its CPU as % of one core."""
    out = subprocess.run([sys.executable, str(Path(__file__).with_name("asyncio_floor.py")),
                          str(port), str(rate), str(seconds)],
                         capture_output=True, text=True, timeout=seconds + 60, check=True)
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    if figures["consumed"] < rate * seconds:
        raise SystemExit(f"the minimal client consumed {figures['consumed']} of "
                         f"{rate * seconds:.0f} messages")
    return {"floor_pct": (figures["user_s"] + figures["system_s"]) / seconds * 100}


def build_c_floor(work: Path) -> Path | None:
    """c_floor.c compiled into `work`, or None without a C compiler."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    exe = work / "c_floor"
    subprocess.run([compiler, "-O2", "-pthread", "-o", str(exe),
                    str(Path(__file__).with_name("c_floor.c"))], check=True)
    return exe


def c_floor_cpu(exe: Path | None, port: int, rate: float, seconds: float) -> dict[str, float]:
    """The C client's CPU at `rate` for `seconds`, and that of the wake-ups alone (5 s), as %
    of one core; NaN without a compiler."""
    if exe is None:
        return {"c_floor_pct": float("nan"), "wakeups_pct": float("nan")}
    figures = {}
    for key, first, secs in (("c_floor_pct", str(port), seconds), ("wakeups_pct", "wakeups", 5.0)):
        out = subprocess.run([str(exe), first, str(rate), str(secs)], capture_output=True,
                             text=True, timeout=secs + 60, check=True)
        result = json.loads(out.stdout.strip().splitlines()[-1])
        if key == "c_floor_pct" and result["consumed"] < rate * seconds:
            raise SystemExit(f"the C client consumed {result['consumed']} of "
                             f"{rate * seconds:.0f} messages")
        figures[key] = (result["user_s"] + result["system_s"]) / secs * 100
    return figures


def fmt(value: float, spec: str) -> str:
    return format(value, spec) if value == value else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", type=float, nargs="+", default=[1000.0, 5000.0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--pacing-window", type=float, default=Workload.pacing_window_ms,
                        metavar="MS", help="the producer's pacing window (default: streambench's)")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--rtt-count", type=int, default=20_000)
    parser.add_argument("--profile", type=float, metavar="RATE",
                        help="profile one in-process load at RATE msg/s instead")
    parser.add_argument("--top", type=int, default=35)
    parser.add_argument("--standard-loop", action=argparse.BooleanOptionalAction, default=True,
                        help="also run the load and the minimal client on the standard asyncio "
                             "event loop (default: yes)")
    args = parser.parse_args()
    started = start_redis()
    if started is None:
        return 2
    work, port, proc = started
    results: list[tuple[float, str, dict[str, float]]] = []
    c_floor: Path | None = None
    try:
        time.sleep(0.5)
        server = psutil.Process(proc.pid)
        if args.profile is not None:
            profile(port, args.profile, args.size, args.seconds, args.top, args.pacing_window)
            return 0
        c_floor = build_c_floor(work)
        rtt = raw_rtt_ns(port, args.size, args.rtt_count)
        rtt_p50 = statistics.median(rtt) / 1e3
        client = client_rtt_ns(port, args.size, args.rtt_count)
        client_p50 = statistics.median(client) / 1e3
        tune_process()  # the timer slack the worker has, for the paced loop's sleeps
        paced = raw_rtt_ns(port, args.size, args.rtt_count // 4, every_s=0.001)
        paced_p50 = statistics.median(paced) / 1e3
        rtt_load = load_average()
        recall = recall_us()
        subprocess.run(["redis-cli", "-p", str(port), "DEL", "rtt-test"], capture_output=True)
        for _ in range(args.repeat):
            for rate in args.rates:
                before = load_average()
                figures = run_once(port, server, rate, args.size, args.seconds,
                                   work / f"run-{rate:.0f}-{len(results)}", args.pacing_window)
                figures |= floor_cpu(port, rate, args.seconds)
                if args.standard_loop:
                    with event_loop("asyncio"):
                        std = run_once(port, server, rate, args.size, args.seconds,
                                       work / f"run-{rate:.0f}-{len(results)}-asyncio",
                                       args.pacing_window)
                        figures["std_worker_pct"] = std["worker_pct"]
                        figures["std_floor_pct"] = floor_cpu(port, rate, args.seconds)["floor_pct"]
                        figures["std_delay_p50_us"] = std["delay_p50_us"]
                        figures["std_e2e_p50_us"] = std["e2e_p50_us"]
                    subprocess.run(["redis-cli", "-p", str(port), "FLUSHALL"],
                                   capture_output=True)
                else:
                    figures |= {k: float("nan") for k in ("std_worker_pct", "std_floor_pct",
                                                          "std_delay_p50_us", "std_e2e_p50_us")}
                figures |= c_floor_cpu(c_floor, port, rate, args.seconds)
                figures["over_floor"] = figures["worker_pct"] / figures["floor_pct"]
                results.append((rate, f"{before}→{load_average()}", figures))
                subprocess.run(["redis-cli", "-p", str(port), "FLUSHALL"], capture_output=True)
    finally:
        stop_process(proc)
        shutil.rmtree(work, ignore_errors=True)
    print(f"paced produce + consume: 1 producer, 1 consumer, one worker process, {args.size} B "
          f"messages, {args.seconds:.0f} s measured, {os.cpu_count()} CPUs shared with "
          f"redis-server; event loop: {event_loop_kind()}; pacing window "
          f"{args.pacing_window:g} ms")
    print(f"raw XADD round trip (blocking socket, one at a time, {len(rtt):,} calls): "
          f"p50 {rtt_p50:.1f} µs, p99 {sorted(rtt)[int(len(rtt) * 0.99)] / 1e3:.1f} µs "
          f"(load {rtt_load})")
    print(f"client XADD round trip (streambench's RESP client on its event loop, one at a time): "
          f"p50 {client_p50:.1f} µs, p99 {sorted(client)[int(len(client) * 0.99)] / 1e3:.1f} µs")
    print(f"raw XADD round trip one per ms (blocking socket, sleeping in between, {len(paced):,} "
          f"calls): p50 {paced_p50:.1f} µs, p99 {sorted(paced)[int(len(paced) * 0.99)] / 1e3:.1f} µs "
          "(both processes wake from idle for each)")
    print(f"memory left alone 1 s takes {recall:.1f} µs a page to touch again on this machine "
          "(memory_recall.py: the worker's once-a-second tick pays it)")
    if c_floor is None:
        print("no C compiler (cc): the C client's rows are empty")
    columns = [f"{r:,.0f}/s #{i + 1}" for i, (r, _, _) in enumerate(results)]
    print(f"{'':<32}" + "".join(f"{c:>16}" for c in columns) + "   goal")
    rows = [
        ("load average 1 min, start→end", None, "", lambda r: ""),
        ("achieved msg/s", "rate", ",.0f", lambda r: f"{r:,.0f} ± 2 %"),
        ("consumed msg/s", "consumed", ",.0f", lambda r: ""),
        ("worker CPU % of a core", "worker_pct", ".1f",
         lambda r: f"≤ {GOAL_CPU[int(r)]:.0f} %" if int(r) in GOAL_CPU else ""),
        ("minimal asyncio client CPU %", "floor_pct", ".1f", lambda r: ""),
        ("worker CPU / minimal client", "over_floor", ".2f", lambda r: ""),
        ("worker, standard loop, CPU %", "std_worker_pct", ".1f", lambda r: ""),
        ("minimal client, std loop, CPU %", "std_floor_pct", ".1f", lambda r: ""),
        ("C client, same design, CPU %", "c_floor_pct", ".1f", lambda r: ""),
        ("its timed wake-ups alone CPU %", "wakeups_pct", ".1f", lambda r: ""),
        ("redis-server CPU %", "server_pct", ".1f", lambda r: ""),
        ("worker CPU-s per 100k msgs", "cpu_per_100k", ".3f", lambda r: ""),
        ("e2e p50 µs", "e2e_p50_us", ".0f", lambda r: ""),
        ("e2e p99 µs", "e2e_p99_us", ".0f", lambda r: ""),
        ("publish delay p50 µs", "delay_p50_us", ".1f", lambda r: f"≤ {GOAL_DELAY_P50_US:.0f} µs"),
        ("publish delay p99 µs", "delay_p99_us", ".1f", lambda r: f"≤ {GOAL_DELAY_P99_US:.0f} µs"),
        ("std loop: e2e p50 µs", "std_e2e_p50_us", ".0f", lambda r: ""),
        ("std loop: publish delay p50 µs", "std_delay_p50_us", ".1f", lambda r: ""),
        ("raw XADD RTT p50 µs", "rtt", ".1f", lambda r: ""),
        ("client XADD RTT p50 µs", "client", ".1f", lambda r: ""),
        ("raw XADD RTT 1/ms p50 µs", "paced", ".1f", lambda r: ""),
        ("e2e p50 / raw RTT p50", "ratio", ".2f", lambda r: ""),
        ("e2e p50 / client RTT p50", "client_ratio", ".2f",
         lambda r: f"≤ {GOAL_RATIO:.0f} (at 1,000/s)"),
    ]
    for title, key, spec, goal in rows:
        cells = []
        for _, load, figures in results:
            if key is None:
                cells.append(load)
            elif key == "rtt":
                cells.append(fmt(rtt_p50, spec))
            elif key == "client":
                cells.append(fmt(client_p50, spec))
            elif key == "paced":
                cells.append(fmt(paced_p50, spec))
            elif key == "ratio":
                cells.append(fmt(figures["e2e_p50_us"] / rtt_p50, spec))
            elif key == "client_ratio":
                cells.append(fmt(figures["e2e_p50_us"] / client_p50, spec))
            else:
                cells.append(fmt(figures[key], spec))
        goals = [g for g in dict.fromkeys(goal(r) for r, _, _ in results) if g]
        print(f"{title:<32}" + "".join(f"{c:>16}" for c in cells) + "   " + ", ".join(goals))
    return 0


if __name__ == "__main__":
    sys.exit(main())
