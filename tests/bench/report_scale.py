"""Benchmark: the report job at scale, on local[2].

Writes synthetic runs straight to Parquet (the run-file schema, files rotated and compressed as
the sink does): each run is one target, one minute of warm-up then MINUTES of measuring at one tick
per second, with end-to-end, publish and publish-delay latency histograms per tick. The
samples per tick are chosen so that all runs together hold SAMPLES latency samples; being
histograms, that is a matter of bucket counts, but every tick has its own few hundred
non-empty buckets per kind.

Then `python -m analysis.report` runs in a subprocess on the first run alone and on all of
them, and the benchmark prints the wall time and peak memory (resident set, sampled every
0.2 s) of the Python driver and of the Spark JVM it starts, and how they grow. Not a test: it
prints figures.

    python tests/bench/report_scale.py [--runs 10] [--minutes 30] [--samples 100000000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from analysis.schema import LATENCY_KINDS, SCHEMAS, SUMMARY_STATS  # noqa: E402
from analysis.sink import ROTATE_S, SMALL_FILE_ROWS, write_run_json  # noqa: E402
from loadgen.core.histogram import bucket_index, bucket_value  # noqa: E402

T0_US = 1_767_225_600_000_000
ROTATE_TICKS = int(ROTATE_S)
WARMUP_TICKS = 60
MESSAGE_SIZE = 1000


def _samples(rng: np.random.Generator, kind: str, n: int, minute: float) -> np.ndarray:
    """Latency samples (ns) of one tick: a few hundred distinct histogram buckets each."""
    if kind == "e2e":  # median 4 ms, drifting up slowly
        v = rng.lognormal(np.log(4e6 * (1 + 0.002 * minute)), 0.08, n)
    elif kind == "publish":
        v = rng.lognormal(np.log(1e6), 0.05, n)
    else:  # publish delay: a few hundred nanoseconds
        v = 200 + rng.exponential(150.0, n)
    return np.rint(v).astype(np.int64)


def _write(path: Path, table: pa.Table) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path,
                   compression="zstd" if table.num_rows >= SMALL_FILE_ROWS else "snappy")


def write_run(run_dir: Path, run_id: str, minutes: int, per_tick: int, seed: int) -> int:
    """One synthetic run; returns the number of latency bucket rows."""
    rng = np.random.default_rng(seed)
    ticks_total = WARMUP_TICKS + minutes * 60
    ticks_schema, latency_schema = SCHEMAS["ticks"], SCHEMAS["latency"]
    bucket_rows = 0
    produced_total = 0
    for part, start in enumerate(range(0, ticks_total, ROTATE_TICKS)):
        seqs = np.arange(start, min(start + ROTATE_TICKS, ticks_total))
        tick_cols: dict[str, list] = {f.name: [] for f in ticks_schema}
        lat: dict[str, list[np.ndarray]] = {n: [] for n in ("seq", "kind", "bucket", "count")}
        for seq in seqs:
            phase = "warm-up" if seq < WARMUP_TICKS else "measuring"
            minute = max(seq - WARMUP_TICKS, 0) / 60.0
            rate = per_tick * (1.0 - 0.001 * minute) + rng.normal(0, 20)
            produced = int(rate)
            produced_total += produced
            row = {
                "run_id": run_id, "target": "kafka", "seq": int(seq),
                "time": T0_US + int(seq) * 1_000_000, "interval_s": 1.0, "phase": phase,
                "elapsed_s": float(seq + 1), "produced": produced,
                "produced_bytes": produced * MESSAGE_SIZE, "consumed": per_tick,
                "consumed_bytes": per_tick * MESSAGE_SIZE, "send_errors": 0,
                "target_rate": 0.0, "produced_total": produced_total,
                "consumed_total": int(seq + 1) * per_tick,
                "lag_total": int(rng.integers(0, 500)),
                "cpu_percent": 40.0 + float(rng.normal(0, 3)),
                "memory_bytes": int(2e9 + 1e6 * minute), "disk_read_bytes": 0,
                "disk_write_bytes": produced * MESSAGE_SIZE,
                "net_rx_bytes": int(produced * MESSAGE_SIZE * 1.05),
                "net_tx_bytes": int(per_tick * MESSAGE_SIZE * 1.05),
            }
            for kind in LATENCY_KINDS:
                values = _samples(rng, kind, per_tick, minute)
                idx, counts = np.unique(bucket_index(values), return_counts=True)
                p50, p99, p999 = np.percentile(values, [50, 99, 99.9])
                stats = {"count": per_tick, "sum": int(values.sum()), "min": int(values.min()),
                         "p50": float(p50), "p99": float(p99), "p999": float(p999),
                         "max": int(values.max())}
                for stat, _ in SUMMARY_STATS:
                    row[f"{kind}_{stat}"] = stats[stat]
                lat["seq"].append(np.full(len(idx), seq))
                lat["kind"].append(np.full(len(idx), kind))
                lat["bucket"].append(idx)
                lat["count"].append(counts)
            for field in ticks_schema:  # the columns the bench has no figure for are null
                tick_cols[field.name].append(row.get(field.name))
        name = f"part-{part:05d}.parquet"
        _write(run_dir / "ticks" / name, pa.table(tick_cols, schema=ticks_schema))
        seq_col = np.concatenate(lat["seq"])
        bucket = np.concatenate(lat["bucket"])
        n = len(bucket)
        bucket_rows += n
        phase_col = np.where(seq_col < WARMUP_TICKS, "warm-up", "measuring")
        latency = pa.table(
            {
                "run_id": pa.array([run_id] * n),
                "target": pa.array(["kafka"] * n),
                "seq": pa.array(seq_col, pa.int64()),
                "time": pa.array(T0_US + seq_col * 1_000_000, pa.int64()).cast(
                    latency_schema.field("time").type),
                "phase": pa.array(phase_col),
                "kind": pa.array(np.concatenate(lat["kind"])),
                "bucket": pa.array(bucket, pa.int64()),
                "value_ns": pa.array(bucket_value(bucket), pa.int64()),
                "count": pa.array(np.concatenate(lat["count"]), pa.int64()),
            },
            schema=latency_schema,
        )
        _write(run_dir / "latency" / name, latency)
    write_run_json(run_dir, {
        "run_id": run_id, "started": "2026-01-01T00:00:00+00:00",
        "workload": {"name": "report-scale", "messageSize": MESSAGE_SIZE, "producerRate": 0,
                     "partitionsPerTopic": 1},
        "targets": [{"label": "kafka", "platform": "synthetic"}],
    })
    return bucket_rows


@dataclass
class Measured:
    wall_s: float
    driver_peak_mb: float
    jvm_peak_mb: float
    steps: list[tuple[float, str]]


def measure_report(runs: list[Path], out: Path, master: str) -> Measured:
    cmd = [sys.executable, "-m", "analysis.report", *map(str, runs), "--out", str(out),
           "--master", master]
    env = {**os.environ, "PYTHONPATH": str(REPO), "SPARK_LOCAL_IP": "127.0.0.1"}
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    peaks = {"driver": 0, "jvm": 0}
    steps: list[tuple[float, str]] = []
    done = threading.Event()

    def sample() -> None:
        root = psutil.Process(proc.pid)
        while not done.wait(0.2):
            try:
                peaks["driver"] = max(peaks["driver"], root.memory_info().rss)
                jvm = sum(c.memory_info().rss for c in root.children(recursive=True)
                          if "java" in c.name())
                peaks["jvm"] = max(peaks["jvm"], jvm)
            except psutil.Error:
                pass

    def read_steps() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            line = line.rstrip()
            if line.startswith("report: ") and "Spark stages" not in line:
                t = time.monotonic() - started
                steps.append((t, line[8:]))
                print(f"    {t:7.1f} s  {line[8:]}", flush=True)
            elif line.startswith("error:"):
                print(f"    {line}", flush=True)

    threads = [threading.Thread(target=sample, daemon=True),
               threading.Thread(target=read_steps, daemon=True)]
    for t in threads:
        t.start()
    proc.wait()
    wall = time.monotonic() - started
    done.set()
    for t in threads:
        t.join(timeout=5)
    if proc.returncode:
        raise SystemExit(f"the report failed (exit code {proc.returncode})")
    return Measured(wall, peaks["driver"] / 1e6, peaks["jvm"] / 1e6, steps)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--minutes", type=int, default=30)
    parser.add_argument("--samples", type=int, default=100_000_000,
                        help="latency samples over all runs, measuring phase")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--dir", type=Path, default=None, help="keep the data here")
    args = parser.parse_args()

    measuring_ticks = args.minutes * 60
    per_tick = round(args.samples / (args.runs * measuring_ticks * len(LATENCY_KINDS)))
    base = args.dir or Path(tempfile.mkdtemp(prefix="report-scale-"))
    print(f"writing {args.runs} runs × {args.minutes} min (+1 min warm-up) × "
          f"{len(LATENCY_KINDS)} kinds × {per_tick} samples per tick into {base}", flush=True)
    started = time.monotonic()
    runs, rows = [], 0
    for i in range(args.runs):
        run_dir = base / f"run-{i:02d}"
        if not (run_dir / "run.json").exists():
            rows += write_run(run_dir, f"run-{i:02d}", args.minutes, per_tick, seed=i)
        runs.append(run_dir)
    if rows:
        print(f"  {rows:,} latency bucket rows "
              f"({rows / (args.runs * (measuring_ticks + WARMUP_TICKS) * 3):.0f} per tick and "
              f"kind) in {time.monotonic() - started:.0f} s", flush=True)
    disk = sum(p.stat().st_size for p in base.rglob("*.parquet"))
    print(f"  {disk / 1e6:.0f} MB of Parquet in "
          f"{sum(1 for _ in base.rglob('*.parquet')):,} files", flush=True)

    results = []
    for count in sorted({1, args.runs}):
        samples = count * measuring_ticks * len(LATENCY_KINDS) * per_tick
        print(f"report over {count} run(s), {samples / 1e6:g} M latency samples, "
              f"{args.master} (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} "
              "cores):", flush=True)
        m = measure_report(runs[:count], base / f"report-{count}", args.master)
        results.append((count, samples, m))
        summary = pq.read_table(base / f"report-{count}" / "summary.parquet").to_pylist()
        print(f"  wall {m.wall_s:.1f} s, driver peak RSS {m.driver_peak_mb:.0f} MB, "
              f"JVM peak RSS {m.jvm_peak_mb:.0f} MB; e2e p99 of run-00 "
              f"{summary[0]['e2e_p99_ms']:.3f} ms", flush=True)
    print()
    print("| runs | latency samples | wall (s) | driver peak RSS (MB) | JVM peak RSS (MB) |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for count, samples, m in results:
        print(f"| {count} | {samples / 1e6:g} M | {m.wall_s:.1f} | {m.driver_peak_mb:.0f} | "
              f"{m.jvm_peak_mb:.0f} |")
    if len(results) > 1:
        (_, s0, m0), (_, s1, m1) = results[0], results[-1]
        print(f"\n{s1 / s0:.0f}× the samples: wall ×{m1.wall_s / m0.wall_s:.2f}, driver memory "
              f"×{m1.driver_peak_mb / m0.driver_peak_mb:.2f}, JVM memory "
              f"×{m1.jvm_peak_mb / m0.jvm_peak_mb:.2f}")
    print(json.dumps({"per_tick": per_tick, "results": [
        {"runs": c, "samples": s, "wall_s": round(m.wall_s, 1),
         "driver_peak_mb": round(m.driver_peak_mb), "jvm_peak_mb": round(m.jvm_peak_mb)}
        for c, s, m in results]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
