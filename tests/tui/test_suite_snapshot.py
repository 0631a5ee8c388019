"""The suite's dashboard compared with committed SVG snapshots (pytest-textual-snapshot), at
80×24 and 120×40, from recorded events and a pinned clock: mid-suite (cells done with their
figures, one failed, one running with its status line, one pending), and the end with the
report. Nothing is run: the app is given the events the suite's loop would send.

After an intended change: `pytest tests/tui/test_suite_snapshot.py --snapshot-update`, then
review the new files under __snapshots__/."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.pilot import Pilot

from tests.tui.screen import screen_lines, wait_until
from tui.bench.suite import (
    CellChanged,
    CellOutput,
    ReportStep,
    ReportWritten,
    SuiteEnded,
    SuiteEvent,
    SuiteStarted,
    prepare_suite,
)
from tui.suiteview import SuiteApp, SuiteOver, SuiteProgress

SIZES = [(80, 24), (120, 40)]
ROOT = Path("runs/suite-20270115T080000Z-redis-modes")
TARGETS = ["redis", "redis:aof", "redis@127.0.0.1:6390"]
WORKLOADS = ["small", "large"]
ERROR = ("streambench: error: redis@127.0.0.1:6390: cannot reach redis at 127.0.0.1:6390 "
         "(connection refused)")
STATUS = ("measuring      7s redis        pub       150/s    0.60 MB/s (target 150/s) | "
          "cons       150/s | lag 0 | e2e ms p50 0.412 p99 1.20 p99.9 1.31 max 1.31 | "
          "pub p99 0.398 | cpu 3% mem 9MiB | gen cpu 12%")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def cells() -> list[dict[str, str]]:
    return [{"target": t, "workload": w, "state": "pending"} for w in WORKLOADS for t in TARGETS]


def ended(index: int, state: str, seconds: float) -> CellChanged:
    cell = {**cells()[index], "state": state, "seconds": seconds,
            "run_dir": str(ROOT / "cells" / f"{index:03d}")}
    if state == "failed":
        cell["error"] = ERROR
    return CellChanged(index, len(cells()), cell)


def figures(rate: str, p50: str) -> dict[str, str]:
    return {"consumed msg/s": rate, "e2e p50 ms": p50}


def mid_suite(clock: Clock) -> list[tuple[SuiteEvent, dict[str, str] | None]]:
    started = SuiteStarted("redis-modes", 0.5, ROOT, tuple(cells()), (2.0,) * 6)
    return [
        (started, None),
        (ended(0, "done", 7.4), figures("150", "0.412")),
        (ended(1, "done", 7.9), figures("150", "0.687")),
        (ended(2, "failed", 1.2), None),
        (ended(3, "done", 8.1), figures("100", "0.905")),
        (CellChanged(4, 6, {**cells()[4], "state": "running"}), None),
        (CellOutput(4, "[measuring] measuring for 2 s", stderr=True), None),
        (CellOutput(4, STATUS), None),
    ]


def the_end() -> list[tuple[SuiteEvent, dict[str, str] | None]]:
    return [
        (ended(4, "done", 7.6), figures("150", "0.433")),
        (ended(5, "failed", 1.1), None),
        (SuiteEnded("redis-modes", ROOT, 6, 4, 2, False), None),
        (ReportStep("reading 4 runs"), None),
        (ReportWritten(ROOT / "report" / "report.md",
                       ("- small, e2e_mean_ms: **not comparable: scaled**",),
                       ROOT / "published.md"), None),
    ]


def suite_app(tmp_path: Path, clock: Clock) -> SuiteApp:
    spec = tmp_path / "redis-modes.yaml"
    spec.write_text("name: redis-modes\nworkloads:\n"
                    "  - {name: small, producerRate: 300, testDurationSeconds: 4}\n"
                    "  - {name: large, producerRate: 200, testDurationSeconds: 4}\n")
    suite = prepare_suite(str(spec), TARGETS, tmp_path / "suite", 0.5, None)
    return SuiteApp(suite, report=True, clock=clock, run_cells=False)


async def shown(pilot: Pilot, app: SuiteApp, events: list[tuple[SuiteEvent, dict[str, str] | None]],
                expected: str, over: bool = False) -> None:
    for event, numbers in events:
        app.post_message(SuiteProgress(event, numbers))
    if over:
        app.post_message(SuiteOver())
    await wait_until(pilot, lambda: any(expected in line for line in screen_lines(app)), expected)
    await pilot.pause()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_suite_mid_way(snap_compare, size: tuple[int, int], tmp_path: Path) -> None:
    clock = Clock()
    app = suite_app(tmp_path, clock)

    async def before(pilot: Pilot) -> None:
        await shown(pilot, app, mid_suite(clock)[:5], "✓ done")
        clock.now += 26.0
        await shown(pilot, app, mid_suite(clock)[5:], "[measuring]")
        clock.now += 5.0
        await shown(pilot, app, [], "0:31 elapsed")

    assert snap_compare(app, terminal_size=size, run_before=before)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_suite_at_its_end(snap_compare, size: tuple[int, int], tmp_path: Path) -> None:
    clock = Clock()
    app = suite_app(tmp_path, clock)

    async def before(pilot: Pilot) -> None:
        await shown(pilot, app, mid_suite(clock), "[measuring]")
        clock.now += 48.0
        await shown(pilot, app, the_end(), "report.md", over=True)
        await wait_until(pilot, lambda: any(line.endswith("· q quits") for line in screen_lines(app)),
                         "q quits")

    assert snap_compare(app, terminal_size=size, run_before=before)
