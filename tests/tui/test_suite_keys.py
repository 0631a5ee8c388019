"""The suite dashboard's keys, without a mouse, at 80×24 under NO_COLOR: `?` lists every key of
its table, Esc closes the list, the arrow keys scroll a matrix taller and wider than the screen,
and the cells' states read in words."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.containers import ScrollableContainer

from tests.tui.screen import screen_lines, wait_until
from tests.tui.test_suite_snapshot import Clock, figures
from tui.bench.suite import CellChanged, SuiteStarted, prepare_suite
from tui.keys import SUITE_KEY_TABLE
from tui.suiteview import SuiteApp, SuiteProgress
from tui.widgets import HelpScreen

TARGETS = ["redis", "redis:aof", "redis:aof,fsync=always", "redis:aof,fsync=no", "redis@127.0.0.1:6390"]
WORKLOADS = [f"workload-number-{i}" for i in range(8)]


async def test_help_and_scrolling_by_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    spec = tmp_path / "wide.yaml"
    spec.write_text("name: wide\nworkloads:\n" + "".join(
        f"  - {{name: {w}, producerRate: 100, testDurationSeconds: 2}}\n" for w in WORKLOADS))
    suite = prepare_suite(str(spec), TARGETS, tmp_path / "suite", 1.0, None)
    app = SuiteApp(suite, report=False, clock=Clock(), run_cells=False)
    assert app.no_color
    cells = tuple({"target": t, "workload": w, "state": "pending"} for w in WORKLOADS for t in TARGETS)
    async with app.run_test(size=(80, 24)) as pilot:
        app.post_message(SuiteProgress(SuiteStarted("wide", 1.0, Path("runs/s"), cells,
                                                    (2.0,) * len(cells))))
        app.post_message(SuiteProgress(CellChanged(0, len(cells), {**cells[0], "state": "done",
                                                                  "seconds": 5.0}),
                                       figures("100", "0.321")))
        await wait_until(pilot, lambda: "✓ done 0:05" in "\n".join(screen_lines(app)), "cell 1")
        lines = screen_lines(app)
        assert "100 msg/s" in "\n".join(lines) and "· pending" in "\n".join(lines)
        assert lines[-1].split() == ["q", "stop/quit", "?", "help"]

        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), "the help")
        shown = "\n".join(screen_lines(app))
        for key in SUITE_KEY_TABLE:
            assert key.shown[0] in shown and key.help.split()[0] in shown, key
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, HelpScreen), "the help closed")

        box = app.query_one("#matrix-box", ScrollableContainer)
        assert box.max_scroll_y > 0 and box.max_scroll_x > 0  # 8 rows × 5 targets: over 80×24
        for _ in range(3):
            await pilot.press("down")
        await pilot.press("right")
        await wait_until(pilot, lambda: box.scroll_y == 3 and box.scroll_x == 8, "scrolled")
        await wait_until(pilot, lambda: not any("✓ done" in line for line in screen_lines(app)),
                         "the first row scrolled out of sight")
