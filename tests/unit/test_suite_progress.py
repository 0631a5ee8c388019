"""A suite's progress events as its two views take them: the headless lines (as the suite
always printed them) and the dashboard's board (cell k of n, the time left)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tui.bench.suite import CellChanged, CellOutput, SuiteEnded, SuiteStarted, print_event
from tui.suiteview import SuiteBoard

ROOT = Path("runs/suite-x")
CELLS = ({"target": "redis", "workload": "small", "state": "pending"},
         {"target": "redis:aof", "workload": "small", "state": "pending"},
         {"target": "redis", "workload": "large", "state": "pending"})


def cell(index: int, **fields: object) -> CellChanged:
    return CellChanged(index, len(CELLS), {**CELLS[index], **fields})


def test_the_headless_lines(capsys: pytest.CaptureFixture[str]) -> None:
    for event in (SuiteStarted("pair", 0.5, ROOT, CELLS, (2.0, 2.0, 2.0)),
                  CellChanged(0, 3, {**CELLS[0], "state": "done"}, before=True),
                  cell(1, state="running"), CellOutput(1, "measuring 1s redis:aof pub 150/s"),
                  cell(1, state="failed", error="cannot reach redis", seconds=1.26),
                  cell(2, state="running"), cell(2, state="done", seconds=7.4),
                  SuiteEnded("pair", ROOT, 3, 2, 1, False)):
        print_event(event)
    assert capsys.readouterr().out.splitlines() == [
        f"suite pair (scaled ×0.5): 3 cells in {ROOT}",
        "cell 1/3 redis × small: done before",
        "cell 2/3 redis:aof × small: running",
        "cell 2/3 redis:aof × small: failed (cannot reach redis), 1 s",
        "cell 3/3 redis × large: running",
        "cell 3/3 redis × large: done, 7 s",
        "suite pair: 2 of 3 cells done, 1 failed",
    ]
    print_event(SuiteEnded("pair", ROOT, 3, 1, 0, True))
    assert capsys.readouterr().out == (f"suite pair: 1 of 3 cells done, 0 failed, stopped: "
                                       f"resume with --resume {ROOT}\n")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_cell_k_of_n_and_the_time_left() -> None:
    clock = Clock()
    board = SuiteBoard(clock)
    board.apply(SuiteStarted("pair", 1.0, ROOT, CELLS, (10.0, 10.0, 20.0)))
    assert board.position() == "0 of 3 cells"
    assert board.left_s() == (40.0, False)  # only the planned time: no cell has ended
    board.apply(cell(0, state="running"))
    clock.now = 4.0
    assert board.position() == "cell 1 of 3" and board.left_s() == (36.0, False)
    board.apply(cell(0, state="done", seconds=16.0), {"consumed msg/s": "1,000"})
    board.apply(cell(1, state="running"))
    clock.now = 12.0
    # 6 s beyond the plan per cell, from the one done: the running one (10 + 6 - 8 s it has
    # run), the one pending (20 + 6)
    assert board.position() == "cell 2 of 3" and board.left_s() == (34.0, True)
    board.apply(CellOutput(1, "measuring      3s redis:aof pub 150/s"))
    assert board.cells[1].phase == "measuring 3s" and board.status_line.startswith("measuring")
    board.apply(cell(1, state="failed", error="x", seconds=1.0))
    assert board.cells[0].figures == {"consumed msg/s": "1,000"} and board.running is None
    assert board.position() == "2 of 3 cells"
