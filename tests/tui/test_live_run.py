"""The real dashboard driving a real run against a local redis-server started by the run."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from textual.message import Message

from analysis.sink import ParquetSink
from loadgen.core.errors import OutputError
from loadgen.core.target import unique_labels
from loadgen.core.ticks import Phase
from loadgen.core.workload import Workload
from loadgen.platforms import resolve_target
from loadgen.run import Run, RunSummary
from tests.tui.screen import screen_lines, wait_until
from tui.app import DashboardApp, PhaseChanged, TickReceived

WORKLOAD = Workload(name="tui-test", rate=500, duration_s=4, warmup_s=1, message_size=100)


def process_gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.integration
async def test_q_ends_a_live_run_gracefully(tmp_path: Path) -> None:
    run = Run(WORKLOAD, unique_labels([resolve_target("redis")]), out_dir=tmp_path / "run",
              recorder=ParquetSink)
    app = DashboardApp(run, run.labels, run.workload)
    seen: list[Message] = []

    def produced_tick() -> bool:
        return any(isinstance(m, TickReceived) and m.tick.produced > 0 for m in seen)

    async with app.run_test(size=(80, 24), message_hook=seen.append) as pilot:
        await wait_until(pilot, produced_tick, "a tick with produced messages")

        def produce_line() -> str:
            return next(line for line in screen_lines(app) if "produce" in line)

        # the column repaints at most a few times a second, shortly after the tick arrives
        await wait_until(pilot, lambda: re.search(r"produce [1-9][\d,]*/s", produce_line()) is not None,
                         "the produce rate on the screen", timeout_s=5)
        screen = screen_lines(app)
        assert any(phase in screen[0] for phase in ("WARM-UP", "MEASURING")), screen[0]
        pids = run.runners[0].describe()["pids"]
        assert pids
        await pilot.press("q")
        await wait_until(pilot, lambda: not app.is_running, "the run to end after q")

    summary = app.return_value
    assert isinstance(summary, RunSummary), summary
    assert summary.stopped_early
    assert summary.targets[0].produced > 0
    assert all(process_gone(pid) for pid in pids), "redis-server is still running"
    phases = [m.change.phase for m in seen if isinstance(m, PhaseChanged)]
    assert phases[0] is Phase.STARTING and phases[-1] is Phase.DONE
    assert Phase.DRAINING in phases
    assert (tmp_path / "run" / "run.json").is_file()


async def test_a_user_error_ends_the_app_with_the_error(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "left-over").write_text("x")
    run = Run(WORKLOAD, unique_labels([resolve_target("redis")]), out_dir=out, recorder=ParquetSink)
    app = DashboardApp(run, run.labels, run.workload)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: not app.is_running, "the app to end")
    assert isinstance(app.return_value, OutputError)
    assert "not empty" in str(app.return_value)


async def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


@pytest.mark.integration
async def test_a_finished_run_shows_the_report_step_then_exits(tmp_path: Path) -> None:
    run = Run(WORKLOAD, unique_labels([resolve_target("redis")]), out_dir=tmp_path / "run",
              recorder=ParquetSink)
    reported: list[RunSummary] = []
    during: list[tuple[str, list[str]]] = []  # the status line and the column titles

    async def after_run(summary: RunSummary) -> str | None:
        reported.append(summary)
        await wait_for(lambda: app.status.phase is Phase.REPORT)
        app.report_progress("summary: Spark stages 1/3, tasks 2/8")
        during.append((app.status.message, [str(c.border_title) for c in app._columns.values()]))
        return str(summary.run_dir / "report.md")

    app = DashboardApp(run, run.labels, run.workload, after_run=after_run)
    seen: list[Message] = []
    async with app.run_test(size=(80, 24), message_hook=seen.append) as pilot:
        await wait_until(pilot, lambda: not app.is_running, "the run to finish", timeout_s=60)

    summary = app.return_value
    assert isinstance(summary, RunSummary) and not summary.stopped_early
    assert reported == [summary]
    assert summary.measured_ticks == run.measure_ticks
    assert app.report_path == str(tmp_path / "run" / "report.md")
    changes = [m.change for m in seen if isinstance(m, PhaseChanged)]
    phases = [c.phase for c in changes]
    assert phases.index(Phase.MEASURING) < phases.index(Phase.REPORT) < len(phases) - 1
    assert changes[-1].phase is Phase.DONE and changes[-1].message.startswith("report: ")
    # while the report is written the columns say their figures are final, and the status
    # line carries the report's progress
    (status, titles), = during
    assert status == "writing the report: summary: Spark stages 1/3, tasks 2/8"
    assert titles == ["redis · final"]


@pytest.mark.integration
async def test_an_app_that_ends_mid_run_still_closes_the_run(tmp_path: Path) -> None:
    """The dashboard ends while its run is measuring, without the run being stopped (an error
    in the interface, or a test that leaves early): Textual cancels the run's worker, and the
    run's own cleanup finishes before the app's loop does: the load process and the broker it
    started are gone, the files are closed and run.json says the run was cut short. (Before,
    the process was left waiting on its load process at exit, with the broker running.)"""
    import json
    import multiprocessing

    workload = Workload(name="tui-test", rate=500, duration_s=120, warmup_s=1, message_size=100)
    run = Run(workload, unique_labels([resolve_target("redis")]), out_dir=tmp_path / "run",
              recorder=ParquetSink)
    app = DashboardApp(run, run.labels, run.workload)
    seen: list[Message] = []
    async with app.run_test(size=(80, 24), message_hook=seen.append) as pilot:
        await wait_until(pilot, lambda: any(isinstance(m, TickReceived) and m.tick.phase == Phase.MEASURING
                                            for m in seen), "a measuring tick", timeout_s=30)
        pids = run.runners[0].describe()["pids"]
        assert pids and not run.finished.is_set()
        app.exit()
    assert run.finished.is_set()
    assert all(process_gone(pid) for pid in pids)
    assert multiprocessing.active_children() == []
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["stopped_early"] is True and "ended" in meta
