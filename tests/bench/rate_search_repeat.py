"""Benchmark: does the search for the highest sustainable rate find the same rate twice?

For each target (default: a local Redis and a local single-broker Kafka), runs
`streambench run TARGET --max-rate=search --headless` twice, one after the other, each with its
own broker started and stopped, 1 producer, 1 consumer, 1 KiB messages, for `--seconds` (warm-up
included; the search decides every 3 s). Prints per run the rate the search converged on (its
`rate-search-converged` event; "no" when it did not), the rate it held at the end, the messages
produced per second over the measuring phase (run.json totals) and the load average; then per
target the difference between the two runs' held rates as a share of their mean. The goal: the
two runs agree within 5 % on a quiet machine. Not part of `make test`."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow.dataset as ds

GOAL = 0.05


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def search(target: str, seconds: int, warmup: int, out: Path) -> dict[str, object]:
    cmd = [sys.executable, "-m", "tui.cli", "run", target, "--max-rate=search", "--headless",
           "--size", "1024", "--warmup", str(warmup), "--duration", str(seconds - warmup),
           "--out", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 600,
                         stdin=subprocess.DEVNULL)
    if res.returncode != 0:
        lines = res.stderr.strip().splitlines()
        raise SystemExit(f"{target}: exit {res.returncode}: {lines[-1] if lines else ''}")
    events = ds.dataset(out / "events", format="parquet").to_table().to_pylist()
    converged = [e["detail"] for e in events if e["kind"] == "rate-search-converged"]
    (result,) = [e["detail"] for e in events if e["kind"] == "rate-search-result"]
    held = _number(re.search(r"held ([\d,.]+) msg/s", result).group(1))  # type: ignore[union-attr]
    found = (_number(re.search(r"([\d,.]+) msg/s", converged[0]).group(1))  # type: ignore[union-attr]
             if converged else None)
    meta = json.loads((out / "run.json").read_text())
    (totals,) = meta["totals"]
    measured = float(meta["workload"].get("testDurationSeconds") or (seconds - warmup))
    return {"found": found, "held": held, "produced_per_s": totals["produced"] / measured,
            "load": os.getloadavg()[0]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", default=["redis:runtime=local",
                                                       "kafka:runtime=local"])
    parser.add_argument("--seconds", type=int, default=75, help="each run, warm-up included")
    parser.add_argument("--warmup", type=int, default=15)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="streambench-search-"))
    print(f"{'target':<24} {'run':>3} {'converged on':>13} {'held':>10} {'measured':>10} {'load':>5}")
    verdicts = []
    for target in args.targets:
        held = []
        for n in (1, 2):
            r = search(target, args.seconds, args.warmup, work / f"{target.split(':')[0]}-{n}")
            found = f"{r['found']:,.0f}" if r["found"] is not None else "no"
            print(f"{target:<24} {n:>3} {found:>13} {r['held']:>10,.0f} "
                  f"{r['produced_per_s']:>10,.0f} {r['load']:>5.1f}", flush=True)
            held.append(float(r["held"]))  # type: ignore[arg-type]
        spread = abs(held[0] - held[1]) / (sum(held) / 2)
        verdicts.append(spread <= GOAL)
        print(f"{target:<24} held rates differ by {spread:.1%} (goal ≤ {GOAL:.0%})", flush=True)
    return 0 if all(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
