"""Soak benchmark: does anything grow over a long run?

Runs `streambench run redis --headless` at 10,000 msg/s × 1 KiB (1 producer, 1 consumer) for 60
minutes (`--minutes`) against a local redis-server that streambench starts, and once a minute
prints the resident memory (RSS) of the streambench main process, of its load worker
process(es) and of the broker, plus the run's own produced and consumed counts from its status
line. The broker's streams are trimmed (`maxlen`) so that its memory measures the broker, not
the data kept.

At the end it prints, for each process, the RSS growth from minute 5 (start-up and warm caches
are over by then) to the last minute, and the largest RSS seen after minute 5 over minute 5's:
the goal is < 5 % for each. It also checks that the run ended with exit 0, complete run files
and every message consumed. Not part of `make test`: `make soak`."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

BASELINE_MINUTE = 5
GOAL = 0.05


def _rss(proc: psutil.Process) -> int:
    try:
        return int(proc.memory_info().rss)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0


def _groups(main: psutil.Process) -> dict[str, int]:
    """RSS of the main process, its Python worker processes and the broker, in bytes."""
    out = {"main": _rss(main), "workers": 0, "broker": 0}
    try:
        children = main.children(recursive=True)
    except psutil.NoSuchProcess:
        return out
    for child in children:
        try:
            name = child.name()
        except psutil.NoSuchProcess:
            continue
        if name.startswith("redis"):
            out["broker"] += _rss(child)
        elif name.startswith("python") or name.startswith("streambench"):
            out["workers"] += _rss(child)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=int, default=60)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--baseline", type=int, default=BASELINE_MINUTE,
                        help="the minute growth is measured from")
    args = parser.parse_args()
    if args.minutes <= args.baseline:
        parser.error(f"--minutes must be more than --baseline ({args.baseline})")

    work = Path(tempfile.mkdtemp(prefix="streambench-soak-"))
    run_dir = work / "run"
    cmd = [sys.executable, "-m", "tui.cli", "run", "redis:maxlen=200000", "--headless",
           "--rate", str(args.rate), "--size", "1024", "--warmup", "5",
           "--duration", str(args.minutes * 60), "--out", str(run_dir)]
    print(f"soak: {' '.join(cmd[3:])}", flush=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    last_status: list[str] = [""]
    err_lines: list[str] = []

    def read_out() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(("measuring", "warm-up", "draining")):
                last_status[0] = line.strip()
            else:
                sys.stdout.write(line)

    def read_err() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            err_lines.append(line)

    threads = [threading.Thread(target=read_out, daemon=True),
               threading.Thread(target=read_err, daemon=True)]
    for t in threads:
        t.start()
    main_proc = psutil.Process(proc.pid)
    samples: list[dict[str, int]] = []
    started = time.monotonic()
    print(f"{'minute':>6} {'main MiB':>9} {'workers MiB':>12} {'broker MiB':>11}  status", flush=True)
    try:
        for minute in range(1, args.minutes + 1):
            deadline = started + 60 * minute + 5  # after the 5 s warm-up
            while time.monotonic() < deadline and proc.poll() is None:
                time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
            if proc.poll() is not None:
                break
            s = _groups(main_proc)
            samples.append(s)
            status = re.sub(r"\s+", " ", last_status[0])[:90]
            print(f"{minute:>6} {s['main'] / 2**20:>9.1f} {s['workers'] / 2**20:>12.1f} "
                  f"{s['broker'] / 2**20:>11.1f}  {status}", flush=True)
        code = proc.wait(timeout=300)
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(timeout=300)
    for t in threads:
        t.join(timeout=5)
    sys.stdout.write("".join(err_lines[-8:]))

    ok = code == 0
    print(f"exit code {code}")
    try:
        meta = json.loads((run_dir / "run.json").read_text())
        totals = meta["totals"][0]
        print(f"produced {totals['produced']:,}, consumed {totals['consumed']:,}, "
              f"drained {totals['drained']}, ended {'ended' in meta}")
        ok = ok and totals["drained"] and totals["produced"] == totals["consumed"] and "ended" in meta
    except (OSError, KeyError, ValueError) as exc:
        print(f"run files incomplete: {exc}")
        ok = False
    if len(samples) > args.baseline:
        base = samples[args.baseline - 1]
        later = samples[args.baseline - 1:]
        print(f"RSS growth from minute {args.baseline} to minute {len(samples)} "
              f"(goal < {GOAL:.0%}):")
        for key in ("main", "workers", "broker"):
            if not base[key]:
                continue
            growth = samples[-1][key] / base[key] - 1
            peak = max(s[key] for s in later) / base[key] - 1
            verdict = "ok" if growth < GOAL and peak < GOAL else "OVER"
            ok = ok and verdict == "ok"
            print(f"  {key:8} {base[key] / 2**20:8.1f} MiB -> {samples[-1][key] / 2**20:8.1f} MiB: "
                  f"{growth:+.1%} (peak {peak:+.1%}) {verdict}")
    else:
        print("too short to measure growth")
        ok = False
    shutil.rmtree(work, ignore_errors=True)
    print("soak:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
