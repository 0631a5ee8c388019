"""Benchmark: what `--report` does to the run it reports on.

Runs `streambench run redis --runtime local` with the dashboard on a pseudo-terminal of 120×40
(as a user starts it: `--report` only starts Spark ahead of the report in the dashboard), the
same run without and with `--report`, in N alternating pairs (default 5; 5,000 msg/s, 1 KiB,
1 producer and 1 consumer, 20 s measured after a 5 s warm-up), and prints per pair and as
medians:

- end-to-end latency p99 and p99.9 over the measuring phase, computed here with numpy from the
  run's latency table (every histogram bucket's value repeated by its count, numpy's "linear"
  percentile), not taken from the tool's figures; each run's p99 is checked against the one of
  the end-of-run table the run prints in the terminal (within 1 %, the buckets' width plus the
  table's rounding);
- the broker's CPU (% of one core) over the measuring phase: the mean of the measuring ticks'
  `cpu_percent` (the resources the collector read every second);
- the ratio with / without `--report` of each;
- with `--report`: the seconds from the end of the measuring phase (the run's `draining`
  event) to `report.md` written, and whether a Spark JVM (a java process under the run's
  process) was alive while the run measured, sampled every 0.2 s.

Figures on a shared machine depend on what else runs: the load average is printed beside each
run. The pairs alternate (without, with) so that a drift of the machine falls on both sides."""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import re
import select
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import psutil
import pyarrow.parquet as pq

CHECK_TOLERANCE = 0.01  # the numpy p99 against the end-of-run table's


@dataclass
class Outcome:
    p99_ms: float
    p999_ms: float
    table_p99_ms: float
    broker_cpu: float
    load: float
    spark_in_measuring: bool
    report_s: float | None  # end of measuring -> report.md written


def _time_s(value: datetime) -> float:
    return value.timestamp()


def phase_times(run_dir: Path) -> tuple[float, float]:
    """The start and end of the measuring phase (its phase events), as Unix seconds."""
    events = pq.read_table(run_dir / "events", columns=["time", "kind", "detail"]).to_pylist()
    starts = {e["detail"].partition(":")[0]: _time_s(e["time"])
              for e in events if e["kind"] == "phase"}
    return starts["measuring"], starts["draining"]


def e2e_percentiles_ms(run_dir: Path) -> tuple[float, float]:
    table = pq.read_table(run_dir / "latency", columns=["phase", "kind", "value_ns", "count"],
                          filters=[("phase", "=", "measuring"), ("kind", "=", "e2e")])
    values = np.repeat(table.column("value_ns").to_numpy(), table.column("count").to_numpy())
    p99, p999 = np.percentile(values, [99.0, 99.9])
    return float(p99) / 1e6, float(p999) / 1e6


def broker_cpu(run_dir: Path) -> float:
    ticks = pq.read_table(run_dir / "ticks", columns=["phase", "cpu_percent"],
                          filters=[("phase", "=", "measuring")])
    return float(np.mean(ticks.column("cpu_percent").to_numpy(zero_copy_only=False)))


def table_p99_ms(screen: str) -> float:
    match = re.search(r"e2e p99 ms\s+([\d.,]+)", screen)
    if match is None:
        raise SystemExit("the end-of-run table has no e2e p99 line")
    return float(match.group(1).replace(",", ""))


def java_children(pid: int) -> list[psutil.Process]:
    try:
        return [p for p in psutil.Process(pid).children(recursive=True)
                if p.name() == "java"]
    except psutil.Error:
        return []


def one(args: argparse.Namespace, report: bool) -> Outcome:
    """One `streambench run` on a pty, read until it exits."""
    argv = [sys.executable, "-m", "tui.cli", "run", "redis", "--runtime", "local",
            "--rate", str(args.rate), "--size", "1024", "--warmup", str(args.warmup),
            "--duration", str(args.duration), *(["--report"] if report else [])]
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        env = {**os.environ, "TERM": "xterm-256color"}
        proc = subprocess.Popen([*argv, "--out", str(run_dir)], stdin=slave, stdout=slave,
                                stderr=slave, env=env, start_new_session=True)
        os.close(slave)
        seen = bytearray()
        java_seen: list[float] = []  # times a Spark JVM was alive
        deadline = time.monotonic() + args.warmup + args.duration + 300
        try:
            while proc.poll() is None and time.monotonic() < deadline:
                ready, _, _ = select.select([master], [], [], 0.2)
                if ready:
                    try:
                        seen += os.read(master, 65536)
                    except OSError:  # the terminal's other side is closed: it is ending
                        break
                if java_children(proc.pid):
                    java_seen.append(time.time())
        finally:
            if proc.poll() is None:
                proc.terminate()
            proc.wait(timeout=60)
            os.close(master)
        screen = seen.decode(errors="replace")
        if proc.returncode != 0:
            raise SystemExit(f"streambench run exited {proc.returncode}: {screen[-2000:]}")
        start, end = phase_times(run_dir)
        p99, p999 = e2e_percentiles_ms(run_dir)
        shown = table_p99_ms(screen)
        if abs(p99 - shown) > CHECK_TOLERANCE * shown:
            raise SystemExit(f"numpy's e2e p99 {p99:.3f} ms is not the end table's {shown} ms")
        report_s = None
        if report:
            written = run_dir / "report" / "report.md"
            if not written.exists():
                raise SystemExit("--report wrote no report.md")
            report_s = written.stat().st_mtime - end
        json.loads((run_dir / "run.json").read_text())  # a complete run.json
        return Outcome(p99, p999, shown, broker_cpu(run_dir), load,
                       any(start <= t <= end for t in java_seen), report_s)


def row(without: Outcome, with_: Outcome) -> str:
    """The pair's p99, p99.9 and broker CPU side by side, each with its ratio with / without."""
    return (f"{without.p99_ms:9.2f}{with_.p99_ms:9.2f}{with_.p99_ms / without.p99_ms:8.2f}x"
            f"{without.p999_ms:9.2f}{with_.p999_ms:9.2f}{with_.p999_ms / without.p999_ms:8.2f}x"
            f"{without.broker_cpu:8.1f}{with_.broker_cpu:6.1f}"
            f"{with_.broker_cpu / without.broker_cpu:6.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--rate", type=float, default=5000.0, help="msg/s")
    parser.add_argument("--duration", type=float, default=20.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=5.0, help="warm-up seconds")
    args = parser.parse_args()
    print(f"redis (local) at {args.rate:,.0f} msg/s, 1 KiB, {args.warmup:.0f} s warm-up + "
          f"{args.duration:.0f} s measured, dashboard on a 120x40 pty; without / with --report; "
          "e2e percentiles from the latency table (numpy), broker CPU from the measuring ticks",
          flush=True)
    header = (f"{'pair':<7}{'e2e p99 ms':^27}{'e2e p99.9 ms':^27}{'broker CPU %':^21}"
              f"{'report s':>9}  JVM while measuring  load")
    print(header)
    print(f"{'':<7}{'without     with   ratio':>27}{'without     with   ratio':>27}"
          f"{'without  with ratio':>21}")
    pairs: list[tuple[Outcome, Outcome]] = []
    for n in range(1, args.pairs + 1):
        without = one(args, report=False)
        with_ = one(args, report=True)
        pairs.append((without, with_))
        print(f"{n:<7}{row(without, with_)}{with_.report_s or 0:9.1f}  "
              f"{'yes' if with_.spark_in_measuring else 'no':<19}"
              f"  {without.load:.2f} / {with_.load:.2f}", flush=True)

    def med(values: list[float]) -> float:
        return statistics.median(values)

    p99 = (med([a.p99_ms for a, _ in pairs]), med([b.p99_ms for _, b in pairs]))
    p999 = (med([a.p999_ms for a, _ in pairs]), med([b.p999_ms for _, b in pairs]))
    cpu = (med([a.broker_cpu for a, _ in pairs]), med([b.broker_cpu for _, b in pairs]))
    ratios = [med([b.p99_ms / a.p99_ms for a, b in pairs]),
              med([b.p999_ms / a.p999_ms for a, b in pairs]),
              med([b.broker_cpu / a.broker_cpu for a, b in pairs])]
    report_s = med([b.report_s or 0.0 for _, b in pairs])
    print(f"{'median':<7}{p99[0]:9.2f}{p99[1]:9.2f}{ratios[0]:8.2f}x"
          f"{p999[0]:9.2f}{p999[1]:9.2f}{ratios[1]:8.2f}x"
          f"{cpu[0]:8.1f}{cpu[1]:6.1f}{ratios[2]:6.2f}x{report_s:9.1f}  "
          f"{sum(b.spark_in_measuring for _, b in pairs)} of {len(pairs)} runs")
    print("(ratios: the median of the pairs' ratios; each p99 matched the end-of-run table's "
          f"within {CHECK_TOLERANCE:.0%})")


if __name__ == "__main__":
    main()
