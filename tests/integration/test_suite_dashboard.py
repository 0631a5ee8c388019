"""The suite's dashboard with real redis-servers: a 2-cell suite fills its matrix with each
cell's figures as read from its run files (the same as the end table the cell printed), and
the suite ends with the report suite.json names; `q` mid-suite stops it as Ctrl-C does and
leaves a suite.json that --resume finishes; in a real terminal SIGTERM stops it the same way
(exit 143)."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
from textual.message import Message

from tests.conftest import run_cli, run_json
from tests.integration.test_dashboard_exit import PtyRun
from tests.tui.screen import screen_lines, wait_until
from tui.bench.suite import CellChanged, CellOutput, prepare_suite
from tui.suiteview import FRAME_S, SuiteApp, SuiteProgress

SHORT = "{name: %s, producerRate: 300, messageSize: 100, testDurationSeconds: %d, warmupDurationSeconds: 0}"


def suite_file(tmp_path: Path, targets: list[str], durations: dict[str, int]) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text("name: redis-pair\ndescription: a small matrix\n"
                    f"targets: [{', '.join(repr(t) for t in targets)}]\nworkloads:\n"
                    + "".join(f"  - {SHORT % (name, seconds)}\n" for name, seconds in durations.items()))
    return path


def end_table_value(log: Path, row: str) -> str:
    """A row's value in the end table a cell's run printed (one target: one value)."""
    for line in log.read_text().splitlines():
        if line.startswith(row + " "):
            return line[len(row):].strip()
    raise AssertionError(f"no {row!r} row in {log}")


def column_of(lines: list[str], target: str) -> int:
    header = next(line for line in lines if target in line and "SUITE" not in line)
    return header.index(target)


def cell_text(lines: list[str], workload: str, column: int, width: int = 14) -> list[str]:
    """The lines of the matrix cell in `column` of the row of `workload`."""
    row = next(i for i, line in enumerate(lines) if line.lstrip().startswith(workload[:10]))
    return [line[column:column + width].strip() for line in lines[row:row + 3]]


async def test_the_matrix_fills_in_with_each_cell_s_figures_and_the_report(
        tmp_path: Path, no_leftover_redis: None) -> None:
    spec = suite_file(tmp_path, ["redis", "redis:aof"], {"small": 4})
    suite = prepare_suite(str(spec), [], tmp_path / "suite", 0.5, None)
    app = SuiteApp(suite, report=True)
    seen: list[Message] = []
    repaints: list[float] = []
    repaint = app.repaint

    def counted() -> None:
        repaints.append(time.monotonic())
        repaint()

    app.repaint = counted  # type: ignore[method-assign]
    target_columns: dict[str, int] = {}
    async with app.run_test(size=(80, 24), message_hook=seen.append) as pilot:
        # the running cell's own status line, live, under the matrix
        await wait_until(pilot, lambda: any("measuring" in line and " pub " in line
                                            for line in screen_lines(app)),
                         "the first cell's status line", timeout_s=60)
        lines = screen_lines(app)
        assert "cell 1 of 2" in lines[0] and "left" in lines[0], lines[0]
        assert any("▶ cell 1/2 redis × small" in line for line in lines), lines
        # the matrix fills in: the first cell done while the second runs
        await wait_until(pilot, lambda: app.board.running == 1, "the second cell", timeout_s=60)
        await wait_until(pilot, lambda: "✓ done" in "\n".join(screen_lines(app))
                         and "▶ running" in "\n".join(screen_lines(app)), "cell 1 done, 2 running")
        await wait_until(pilot, lambda: app.over, "the suite and its report", timeout_s=400)
        await pilot.pause(2 * FRAME_S)
        lines = screen_lines(app)
        for target in ("redis", "redis:aof"):
            target_columns[target] = column_of(lines, target)
        matrix = {t: cell_text(lines, "small", c, 19) for t, c in target_columns.items()}
        status = "\n".join(lines)
        assert "SUITE DONE" in lines[0] and "2 of 2 cells" in lines[0], lines[0]
        assert any("2 of 2 cells done, 0 failed · q quits" in line for line in lines), lines
        await pilot.press("q")
        await wait_until(pilot, lambda: not app.is_running, "the app to quit")
    assert app.return_value == 0 and app.error is None

    state = json.loads((suite.root / "suite.json").read_text())
    assert [c["state"] for c in state["cells"]] == ["done", "done"]
    # each cell shows the throughput and e2e p50 its run printed at its end
    for k, cell in enumerate(state["cells"]):
        log = suite.root / f"cell-{k:03d}.log"
        rate = end_table_value(log, "consumed msg/s")
        p50 = end_table_value(log, "e2e p50 ms")
        assert matrix[cell["target"]][0].startswith("✓ done"), matrix
        assert matrix[cell["target"]][1:] == [f"{rate} msg/s", f"p50 {p50} ms"], (matrix, rate, p50)
        assert run_json(Path(cell["run_dir"]))["totals"][0]["consumed"] == 300
    # the report suite.json names is the one shown, over both cells
    report = Path(state["report"])
    assert report == suite.root / "report" / "report.md"
    assert app.board.report == f"report: {report}"
    assert str(report) in "".join(line.strip() for line in status.splitlines())  # folded
    text = report.read_text()
    for cell in state["cells"]:
        assert run_json(Path(cell["run_dir"]))["run_id"] in text
    # every state change reached the app in order, and the child's lines were handed over live
    changes = [(m.event.index, m.event.cell["state"]) for m in seen
               if isinstance(m, SuiteProgress) and isinstance(m.event, CellChanged)]
    assert changes == [(0, "running"), (0, "done"), (1, "running"), (1, "done")]
    assert sum(isinstance(m, SuiteProgress) and isinstance(m.event, CellOutput)
               and not m.event.stderr for m in seen) >= 2
    # repainted on a frame: never more than four times in any second (1 ms for the clock
    # read after the frame's own)
    assert repaints
    assert max(sum(1 for t in repaints if s <= t < s + 0.999) for s in repaints) <= 4


async def test_q_mid_suite_leaves_a_resumable_suite(tmp_path: Path, no_leftover_redis: None) -> None:
    spec = suite_file(tmp_path, ["redis"], {"short": 2, "long": 10})
    suite = prepare_suite(str(spec), [], tmp_path / "suite", 1.0, None)
    app = SuiteApp(suite, report=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: app.board.running == 1
                         and app.board.status_line.startswith("measuring"),
                         "the second cell measuring", timeout_s=90)
        await pilot.press("q")
        await wait_until(pilot, lambda: any("stopping: the cell finishes its files" in line
                                            for line in screen_lines(app)), "stopping shown")
        await wait_until(pilot, lambda: not app.is_running, "the suite to stop", timeout_s=60)
    assert app.return_value == 130  # as Ctrl-C headless
    state = json.loads((suite.root / "suite.json").read_text())
    assert "stopped" in state and "ended" not in state
    assert [c["state"] for c in state["cells"]] == ["done", "stopped"]
    stopped = Path(state["cells"][1]["run_dir"])
    assert run_json(stopped)["stopped_early"] is True  # it finished its files
    done_mtime = (Path(state["cells"][0]["run_dir"]) / "run.json").stat().st_mtime

    # --resume keeps the cell done and runs the stopped one again, from its start
    res = run_cli(["suite", "ignored", "--resume", str(suite.root), "--no-report"], timeout_s=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "cell 1/2 redis × short: done before" in res.stdout
    assert re.search(r"cell 2/2 redis × long: done, \d+ s", res.stdout), res.stdout
    state = json.loads((suite.root / "suite.json").read_text())
    assert [c["state"] for c in state["cells"]] == ["done", "done"] and "stopped" not in state
    assert (Path(state["cells"][0]["run_dir"]) / "run.json").stat().st_mtime == done_mtime


def test_sigterm_in_a_terminal_stops_the_suite_resumably(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_leftover_redis: None) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    spec = suite_file(tmp_path, ["redis"], {"long": 60, "short": 2})
    out = tmp_path / "suite"
    suite = PtyRun(["suite", str(spec), "--out", str(out), "--no-report"])
    try:
        log = out / "cell-000.log"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "measuring" not in (
                log.read_text() if log.exists() else ""):
            suite.read_for(0.5)
        assert b"SUITE" in suite.screen and b"cell 1 of 2" in suite.screen, suite.screen[-2000:]
        os.kill(suite.pid, signal.SIGTERM)
        assert suite.wait_exit(60) == 143
    finally:
        suite.close()
    state = json.loads((out / "suite.json").read_text())
    assert [c["state"] for c in state["cells"]] == ["stopped", "pending"] and "stopped" in state
    assert run_json(Path(state["cells"][0]["run_dir"]))["stopped_early"] is True
    assert f"stopped: resume with --resume {out}".encode() in suite.screen
