"""Benchmark: what the dashboard costs the process that shows it, with several targets.

Runs N local redis-server targets (default 3; 1,000 msg/s each, 100 partitions, 2 consumers,
15 s measured after a 2 s warm-up; the load in worker processes, one per target) four ways:

- headless: the run loop and the Parquet sink alone in this process (no dashboard);
- dashboard: the same with the dashboard (Textual, headless driver at 120×40: every frame is
  composed and rendered as on a terminal, then dropped);
- dashboard + detail: the same with the detail screen of the first target open (per-partition
  rates and lag, latency percentiles merged over the chart window, refreshed with the columns);
- on a terminal: `streambench run` itself in a child process whose terminal is a pseudo-
  terminal of 120×40 (the real terminal driver: its input thread, and every frame written to
  the terminal, which this process reads and drops); the goal's figure.

and prints for each the CPU of the process (user + system, psutil) over the measuring phase
as % of one core, the dashboard's share (minus the headless figure), the main thread's share
of it (the event loop; the rest is the Parquet writer thread and, on a terminal, the driver's
threads) and how many times a second the main thread went to sleep and woke up again (its
voluntary context switches: on a virtual machine each wake-up costs CPU of its own), and for
the in-process modes the most repaints any one panel made in a second of the measuring phase
(the goal: at most 4). CPU figures on a shared machine depend on what else runs: the load
average is printed beside each run; `--repeat` runs each mode again."""
from __future__ import annotations

import argparse
import asyncio
import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from memory_recall import recall_us  # the bench next to this one (scripts run from here)

from analysis.sink import ParquetSink
from loadgen.core.bus import BusItem
from loadgen.core.events import PhaseChange
from loadgen.core.target import unique_labels
from loadgen.core.ticks import Phase
from loadgen.core.workload import Workload
from loadgen.pacing import run_precise
from loadgen.platforms import resolve_target
from loadgen.run import Run
from tui import widgets
from tui.app import DashboardApp
from tui.detail import DetailScreen

MAX_REPAINTS_PER_S = 4


class Meter:
    """A process's CPU seconds and the wall clock between the start of measuring and the
    drain: this process's, taken at the run's phase changes on the bus, or (`pid`) another's,
    taken when its terminal shows the phases."""

    def __init__(self, pid: int | None = None) -> None:
        self.proc = psutil.Process(pid)
        main = pid if pid is not None else threading.main_thread().native_id
        self.main = Path(f"/proc/{self.proc.pid}/task/{main}")
        self.start: tuple[float, float, float, int] | None = None
        self.end: tuple[float, float, float, int] | None = None
        self.measuring = asyncio.Event()

    def _now(self) -> tuple[float, float, float, int]:
        """CPU seconds of the process and of its main thread, the wall clock, and the main
        thread's voluntary context switches."""
        t = self.proc.cpu_times()
        main_s = int((self.main / "schedstat").read_text().split()[0]) / 1e9
        switches = next(int(line.split()[1])
                        for line in (self.main / "status").read_text().splitlines()
                        if line.startswith("voluntary_ctxt_switches"))
        return t.user + t.system, time.monotonic(), main_s, switches

    def __call__(self, item: BusItem) -> None:
        if not isinstance(item, PhaseChange):
            return
        self.phase(item.phase)

    def phase(self, phase: Phase) -> None:
        if phase is Phase.MEASURING and self.start is None:
            self.start = self._now()
            self.measuring.set()
        elif phase is Phase.DRAINING and self.end is None:
            self.end = self._now()

    def _span(self) -> tuple[tuple[float, float, float, int], tuple[float, float, float, int]]:
        assert self.start is not None and self.end is not None, "the run did not measure"
        return self.start, self.end

    @property
    def cpu_percent(self) -> float:
        start, end = self._span()
        return (end[0] - start[0]) / (end[1] - start[1]) * 100

    @property
    def main_percent(self) -> float:
        start, end = self._span()
        return (end[2] - start[2]) / (end[1] - start[1]) * 100

    @property
    def wakeups_per_s(self) -> float:
        start, end = self._span()
        return (end[3] - start[3]) / (end[1] - start[1])


def count_repaints(measuring: Callable[[], bool]
                   ) -> tuple[Counter[tuple[int, int]], Callable[[], None]]:
    """Counts the repaints of each panel per (panel, second) while `measuring()` (the
    start-up's layout passes are not repaints of the figures): a repaint is a refresh, of
    the whole panel or of the lines that changed; returns the counter and the undo."""
    counts: Counter[tuple[int, int]] = Counter()
    original = widgets.PanelView.refresh

    def refresh(self: widgets.PanelView, *args: Any, **kwargs: Any) -> Any:
        if measuring():
            counts[(id(self), int(time.monotonic()))] += 1
        return original(self, *args, **kwargs)

    widgets.PanelView.refresh = refresh  # type: ignore[method-assign]

    def undo() -> None:
        widgets.PanelView.refresh = original  # type: ignore[method-assign]

    return counts, undo


def make_run(args: argparse.Namespace, out: Path) -> tuple[Run, Meter]:
    workload = Workload(name="dashboard-cpu", rate=args.rate, duration_s=args.duration,
                        warmup_s=2, message_size=1024, partitions=args.partitions, consumers=2)
    targets = unique_labels([resolve_target("redis:runtime=local") for _ in range(args.targets)])
    run = Run(workload, targets, out_dir=out, recorder=ParquetSink, processes=1)
    meter = Meter()
    run.subscribe(meter)
    return run, meter


async def with_dashboard(run: Run, meter: Meter, detail: bool) -> None:
    """The dashboard until the run ends and it exits by itself (nothing else wakes this
    process: no polling loop beside it)."""
    app = DashboardApp(run, run.labels, run.workload)

    async def open_detail() -> None:
        await meter.measuring.wait()
        app.call_later(app.action_detail)  # run by the app, as the enter key would
        await asyncio.sleep(0.5)
        assert isinstance(app.screen, DetailScreen), app.screen

    opener = asyncio.create_task(open_detail()) if detail else None
    await app.run_async(headless=True, size=(120, 40))
    if opener is not None:
        await opener


def one(args: argparse.Namespace, mode: str) -> tuple[Meter, int]:
    with tempfile.TemporaryDirectory() as tmp:
        run, meter = make_run(args, Path(tmp) / "run")
        counts, undo = count_repaints(lambda: meter.start is not None and meter.end is None)
        try:
            if mode == "headless":
                run_precise(run.execute())
            else:
                asyncio.run(with_dashboard(run, meter, detail=mode == "dashboard + detail"))
        finally:
            undo()
        return meter, max(counts.values(), default=0)


def on_terminal(args: argparse.Namespace) -> Meter:
    """`streambench run` itself with the dashboard on a pseudo-terminal of 120×40: Textual's
    terminal driver (its input thread, its writer thread), every frame written to a terminal
    that this process reads and drops. The measuring phase is when the status bar says so."""
    argv = [sys.executable, "-m", "tui.cli", "run", *["redis"] * args.targets,
            "--rate", str(args.rate), "--size", "1024", "--partitions", str(args.partitions),
            "--consumers", "2", "--warmup", "2", "--duration", str(args.duration),
            "--processes", "1"]
    with tempfile.TemporaryDirectory() as tmp:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        env = {**os.environ, "TERM": "xterm-256color"}
        proc = subprocess.Popen([*argv, "--out", str(Path(tmp) / "run")], stdin=slave,
                                stdout=slave, stderr=slave, env=env, start_new_session=True)
        os.close(slave)
        meter = Meter(proc.pid)
        seen = b""
        deadline = time.monotonic() + args.duration + 120
        try:
            while proc.poll() is None and time.monotonic() < deadline:
                ready, _, _ = select.select([master], [], [], 0.5)
                if not ready:
                    continue
                try:
                    seen = seen[-32:] + os.read(master, 65536)
                except OSError:  # the terminal's other side is closed: the process is ending
                    break
                if meter.start is None and b" MEASURING " in seen:
                    meter.phase(Phase.MEASURING)
                elif meter.start is not None and b" DRAINING " in seen:
                    meter.phase(Phase.DRAINING)
        finally:
            if proc.poll() is None:
                proc.terminate()
            proc.wait(timeout=60)
            os.close(master)
        if proc.returncode != 0:
            raise SystemExit(f"streambench run exited {proc.returncode}")
        return meter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, default=3)
    parser.add_argument("--rate", type=float, default=1000.0, help="msg/s per target")
    parser.add_argument("--duration", type=float, default=15.0, help="measured seconds")
    parser.add_argument("--partitions", type=int, default=100, help="partitions per target")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    os.environ.setdefault("STREAMBENCH_RUNTIME", "local")
    print(f"{args.targets} redis targets × {args.rate:,.0f} msg/s, {args.partitions} partitions, "
          f"{args.duration:.0f} s measured; this process's CPU over the measuring phase")
    print(f"memory left alone 1 s takes {recall_us():.1f} µs a page to touch again on this "
          "machine (memory_recall.py: the dashboard's once-a-second work pays it)", flush=True)
    headless: list[float] = []
    for _ in range(args.repeat):
        for mode in ("headless", "dashboard", "dashboard + detail", "on a terminal"):
            load = os.getloadavg()[0]
            if mode == "on a terminal":
                meter, repaints = on_terminal(args), None
            else:
                meter, repaints = one(args, mode)
            cpu = meter.cpu_percent
            if mode == "headless":
                headless.append(cpu)
                extra = ""
            elif repaints is None:
                extra = f"  dashboard {cpu - headless[-1]:5.1f} %  (streambench run on a pty)"
            else:
                extra = (f"  dashboard {cpu - headless[-1]:5.1f} %"
                         f"  max repaints of a panel in a second {repaints}"
                         f" ({'ok' if repaints <= MAX_REPAINTS_PER_S else 'OVER'} ≤ "
                         f"{MAX_REPAINTS_PER_S})")
            print(f"{mode:<20} {cpu:5.1f} % of a core (main thread {meter.main_percent:4.1f} %, "
                  f"{meter.wakeups_per_s:3.0f} wake-ups/s){extra}  (load average {load:.2f})",
                  flush=True)


if __name__ == "__main__":
    main()
