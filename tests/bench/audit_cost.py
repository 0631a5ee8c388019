"""Benchmark: what the delivery audit (--audit) costs the load generator.

Starts one local redis-server and runs streambench against it (1 producer, 1 consumer, one
worker process, 1 KiB messages) at a fixed rate (default 5,000 msg/s), in pairs without and
with --audit, alternated (off, on, on, off, …) so that a change of the machine's load falls on
both sides. For each run it prints the worker's CPU (psutil, user + system, between the first
and the last measuring tick) as % of one core and as CPU-microseconds per message (each
message produced once and consumed once), and at the end the medians of both sides, their
difference per message and their ratio.

Cross-check: the audit's work on the hot path is two places, the stamp in the producer's
batch and AuditLedger.read() in the consumer; both are timed here alone on the same machine
(time.process_time over 200,000 messages in batches like a paced run's), and their sum per
message is printed beside the difference the runs measured. Each audited run's verdict must
be clean (its messages all acknowledged and consumed once), or the figures are not kept.
On a machine shared with other work the runs' CPU per message moves with its load by more than
the audit costs: the range of the runs without it is printed, and a difference inside it is
not resolved; the steps timed alone then give the cost."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time

import psutil
from paced_cost import load_average, run_once, start_redis  # the benches next to this one

from compose.process import stop_process
from loadgen.core.audit import SEQ_STEP, STAMP_BASE, AuditLedger
from loadgen.core.workload import Workload
from loadgen.pacing import tune_process


def alone_us(batch: int, count: int = 200_000) -> tuple[float, float]:
    """CPU-µs per message of the audit's two hot-path steps timed alone: stamping a batch of
    intended times, and AuditLedger.read() of the stamps (one partition)."""
    base = time.time_ns()
    due = [base + i * 200_000 for i in range(batch)]
    ledger = AuditLedger()
    start = time.process_time()
    stamps: list[int] = []
    for n in range(0, count, batch):
        b = 7 * STAMP_BASE + (n + 1) * SEQ_STEP
        stamps += [t + b + i * SEQ_STEP for i, t in enumerate(due)]
    stamp_s = time.process_time() - start
    where = [(0, "0-0")] * batch
    start = time.process_time()
    for n in range(0, count, batch):
        ledger.read(0, 0, "sub", stamps[n:n + batch], where)
    read_s = time.process_time() - start
    assert ledger.duplicated == ledger.reordered == 0
    return stamp_s / count * 1e6, read_s / count * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=5000.0)
    parser.add_argument("--seconds", type=float, default=15.0, help="measured seconds per run")
    parser.add_argument("--pairs", type=int, default=3, help="pairs of runs (off and on)")
    args = parser.parse_args()
    started = start_redis()
    if started is None:
        return 2
    work, port, proc = started
    runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    try:
        time.sleep(0.5)
        server = psutil.Process(proc.pid)
        tune_process()  # the timer slack the worker has, as paced_cost.py does
        order = [flag for k in range(args.pairs) for flag in ((False, True) if k % 2 == 0
                                                               else (True, False))]
        for i, audit in enumerate(order):
            r = run_once(port, server, args.rate, 1024, args.seconds, work / f"run-{i}",
                         Workload.pacing_window_ms, audit)
            r["us_per_msg"] = r["cpu_per_100k"] / 100_000 * 1e6
            runs[audit].append(r)
            print(f"audit {'on ' if audit else 'off'}: {r['rate']:,.0f} msg/s, worker "
                  f"{r['worker_pct']:.1f} % of a core, {r['us_per_msg']:.2f} CPU-µs/msg, e2e p50 "
                  f"{r['e2e_p50_us']:.0f} µs (load {load_average()})", flush=True)
    finally:
        stop_process(proc)
        shutil.rmtree(work, ignore_errors=True)
    off = statistics.median(r["us_per_msg"] for r in runs[False])
    on = statistics.median(r["us_per_msg"] for r in runs[True])
    batch = max(1, round(args.rate / 1000))  # a paced run's batches: about 1 ms of slots
    stamp_us, read_us = alone_us(batch)
    print(f"\nat {args.rate:,.0f} msg/s, medians of {args.pairs} runs each (load {load_average()}, "
          f"{os.cpu_count()} CPUs):")
    print(f"  without --audit {off:.2f} CPU-µs/msg, with {on:.2f}: {on - off:+.2f} µs/msg "
          f"({on / off:.3f}×)")
    spread = [min(r["us_per_msg"] for r in runs[False]), max(r["us_per_msg"] for r in runs[False])]
    print(f"  runs without --audit ranged {spread[0]:.2f}–{spread[1]:.2f} CPU-µs/msg: a difference "
          f"smaller than that range is not resolved by these runs")
    print(f"  timed alone: stamping {stamp_us:.3f} µs/msg + recording the read {read_us:.3f} "
          f"µs/msg = {stamp_us + read_us:.3f} µs/msg (batches of {batch})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
