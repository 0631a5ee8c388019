"""Benchmark: what `--hdr-log` costs the coordinator, the process that receives the ticks and
writes the run files (its event loop and the Parquet writer thread; the load runs in other
processes).

Runs `streambench run redis --runtime local --headless` at RATE msg/s, alternately without
and with --hdr-log (ROUNDS of each, side by side), and reads the coordinator's own CPU time
(user + system of its threads, not its children) from /proc at its first and its last
measuring status line: the CPU of the measuring phase, per second of it. Also prints the load
generator's own CPU (the ticks' loadgen_cpu_percent, its worker processes) and the machine's
load average. Not a test: it prints figures.

    python tests/bench/hdr_log_cpu.py [--rate 5000] [--seconds 30] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pyarrow.dataset as ds

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "tui.cli"]


def one_run(rate: float, seconds: int, hdr_log: bool, out: Path) -> tuple[float, float, float]:
    """(coordinator CPU % of a core over the measuring phase, its length in s, the load
    generator's mean CPU %)."""
    args = [*CLI, "run", "redis", "--runtime", "local", "--headless", "--rate", f"{rate:g}",
            "--warmup", "2", "--duration", str(seconds), "--out", str(out)]
    if hdr_log:
        args.append("--hdr-log")
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, start_new_session=True)
    me = psutil.Process(proc.pid)
    first: tuple[float, float] | None = None
    last: tuple[float, float] | None = None
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            if line.startswith("measuring"):
                times = me.cpu_times()
                mark = (time.monotonic(), times.user + times.system)
                if first is None:
                    first = mark
                last = mark
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    assert first is not None and last is not None and last[0] > first[0]
    ticks = ds.dataset(out / "ticks", format="parquet").to_table().to_pydict()
    gen = [c for c, p in zip(ticks["loadgen_cpu_percent"], ticks["phase"], strict=True)
           if p == "measuring" and c is not None]
    wall = last[0] - first[0]
    return 100 * (last[1] - first[1]) / wall, wall, sum(gen) / len(gen)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=5000)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    opts = parser.parse_args()
    results: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="hdr-log-cpu-") as tmp:
        for i in range(opts.rounds):
            for hdr_log in (False, True):
                load = os.getloadavg()[0]
                cpu, wall, gen = one_run(opts.rate, opts.seconds, hdr_log,
                                         Path(tmp) / f"run-{i}-{int(hdr_log)}")
                results[hdr_log].append((cpu, wall, gen))
                print(f"round {i + 1} {'--hdr-log' if hdr_log else 'without  '}: coordinator "
                      f"{cpu:5.2f} % of a core over {wall:.0f} s measuring, load generator "
                      f"{gen:5.1f} %, load average before {load:.2f}", flush=True)
    for hdr_log, rows in results.items():
        cpus = sorted(r[0] for r in rows)
        print(f"{'--hdr-log' if hdr_log else 'without  '}: coordinator median "
              f"{cpus[len(cpus) // 2]:.2f} % (runs {', '.join(f'{c:.2f}' for c in cpus)}), load "
              f"generator mean {sum(r[2] for r in rows) / len(rows):.1f} %")


if __name__ == "__main__":
    main()
