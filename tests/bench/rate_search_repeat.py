"""Benchmark: does the search for the highest sustainable rate find the same rate twice?

For each target (default: a local Redis and a local single-broker Kafka), runs
`streambench run TARGET --max-rate=search --headless` twice, one after the other, each with its
own broker started and stopped, 1 producer, 1 consumer, 1 KiB messages, for `--seconds` (warm-up
included; the search decides every 3 s). Prints per run the rate the search converged on (its
`rate-search-converged` event; "no" when it did not), the rate it held at the end, the search's
result (the median acknowledged msg/s of the measured periods that kept up, from its
`rate-search-result` event) and the load average; then per target the difference between the
two runs' results, and between their rates held at the end, as a share of their mean. The goal:
the two results agree within 5 % on a quiet machine. Not part of `make test`."""

from __future__ import annotations

import argparse
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
    sustained = _number(re.search(r"; ([\d,.]+) msg/s acknowledged \(the median",  # type: ignore[union-attr]
                                  result).group(1))
    found = (_number(re.search(r"([\d,.]+) msg/s", converged[0]).group(1))  # type: ignore[union-attr]
             if converged else None)
    return {"found": found, "held": held, "sustained": sustained, "load": os.getloadavg()[0]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", default=["redis:runtime=local",
                                                       "kafka:runtime=local"])
    parser.add_argument("--seconds", type=int, default=75, help="each run, warm-up included")
    parser.add_argument("--warmup", type=int, default=15)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="streambench-search-"))
    print(f"{'target':<24} {'run':>3} {'converged on':>13} {'held at end':>11} "
          f"{'sustained':>10} {'load':>5}")
    verdicts = []
    for target in args.targets:
        held, sustained = [], []
        for n in (1, 2):
            r = search(target, args.seconds, args.warmup, work / f"{target.split(':')[0]}-{n}")
            found = f"{r['found']:,.0f}" if r["found"] is not None else "no"
            print(f"{target:<24} {n:>3} {found:>13} {r['held']:>11,.0f} "
                  f"{r['sustained']:>10,.0f} {r['load']:>5.1f}", flush=True)
            held.append(float(r["held"]))  # type: ignore[arg-type]
            sustained.append(float(r["sustained"]))  # type: ignore[arg-type]
        spread = abs(held[0] - held[1]) / (sum(held) / 2)
        result = abs(sustained[0] - sustained[1]) / (sum(sustained) / 2)
        verdicts.append(result <= GOAL)
        print(f"{target:<24} sustained rates (the result) differ by {result:.1%}, the rates "
              f"held at the end by {spread:.1%} (goal ≤ {GOAL:.0%})", flush=True)
    return 0 if all(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
