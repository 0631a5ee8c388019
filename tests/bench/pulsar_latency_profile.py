"""Benchmark: what `pulsar:profile=latency` does to the end-to-end latency of a local Pulsar
standalone at a low rate: a run with the stock waits (managedLedgerNewEntriesCheckDelayInMillis=10,
journalMaxGroupWaitMSec=1, the producer's 1 ms batching delay), then one with the profile (both
waits 0, batching off), each on a standalone of its own (one at a time), 1,000 msg/s × 1 KiB.
The journal fsync is off in both (`fsync=false`), so that the comparison is of the waits alone.

Each run's end-to-end and publish p50 and p99 come from its latency histograms (numpy over the
Parquet files, not the report), next to the median of the per-second p50s (less swayed by a
few seconds of a busy machine); the check delay in force is read from run.json. Prints the
figures, the machine's load average, and the ratio default / latency of the e2e p50, against a
goal of at least 3."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds

CLI = [sys.executable, "-m", "tui.cli"]
COMMON = "runtime=local,heap=512m,fsync=false"
GOAL = 3.0


def percentile(values: np.ndarray, counts: np.ndarray, q: float) -> float:
    order = np.argsort(values)
    cumulative = np.cumsum(counts[order])
    return float(values[order][np.searchsorted(cumulative, cumulative[-1] * q)]) / 1e6


def figures(run_dir: Path) -> dict[str, float]:
    t = ds.dataset(run_dir / "latency", format="parquet").to_table().to_pydict()
    out = {}
    for kind in ("e2e", "publish"):
        rows = [i for i, (k, p) in enumerate(zip(t["kind"], t["phase"], strict=True))
                if k == kind and p == "measuring"]
        values = np.array([t["value_ns"][i] for i in rows])
        counts = np.array([t["count"][i] for i in rows])
        out[f"{kind} p50"] = percentile(values, counts, 0.5)
        out[f"{kind} p99"] = percentile(values, counts, 0.99)
        if kind == "e2e":
            seconds = sorted({t["seq"][i] for i in rows})
            per_second = [percentile(values[[t["seq"][i] == s for i in rows]],
                                     counts[[t["seq"][i] == s for i in rows]], 0.5)
                          for s in seconds]
            out["e2e p50 median of seconds"] = float(np.median(per_second))
    return out


def run(spec: str, out: Path, duration: int) -> tuple[dict[str, float], str]:
    res = subprocess.run([*CLI, "run", spec, "--rate", "1000", "--size", "1024", "--duration",
                          str(duration), "--warmup", "5", "--headless", "--out", str(out)],
                         capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL,
                         env={**os.environ, "STREAMBENCH_READY_TIMEOUT": "300"})
    if res.returncode != 0:
        sys.exit(f"{spec}: the run failed: {res.stderr.strip().splitlines()[-1:]}")
    (target,) = json.loads((out / "run.json").read_text())["targets"]
    delay = target["settings"]["broker.managedLedgerNewEntriesCheckDelayInMillis"]
    return figures(out), f"{delay['value']} ({delay['source']})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=30, help="measured seconds per run")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="streambench-bench-") as root:
        for name, spec in (("default", f"pulsar:{COMMON}"),
                           ("latency", f"pulsar:{COMMON},profile=latency")):
            load = os.getloadavg()[0]
            results[name], delay = run(spec, Path(root) / name, args.duration)
            shown = ", ".join(f"{k} {v:.2f} ms" for k, v in results[name].items())
            print(f"{name:8} check delay {delay}; {shown} (load average {load:.1f} at start)")
    ratio = results["default"]["e2e p50"] / results["latency"]["e2e p50"]
    per_second = (results["default"]["e2e p50 median of seconds"]
                  / results["latency"]["e2e p50 median of seconds"])
    verdict = "meets" if ratio >= GOAL else "misses"
    print(f"e2e p50 default / latency: {ratio:.2f} ({verdict} the goal of {GOAL:g}); "
          f"median of per-second p50s: {per_second:.2f}")


if __name__ == "__main__":
    main()
