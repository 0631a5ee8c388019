"""--baseline RUN_DIR[:TARGET]: another run drawn under the charts as a ghost series, lined up
from the start of the load, with the difference of the means in %."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli
from tests.tui.recorded import LABELS, TICKS, recorded_tick, write_recorded_run
from tests.tui.screen import screen_lines
from tui.bench.recording import load_baselines, load_recording, split_baseline
from tui.charts import area_chart
from tui.replay import ReplayApp


@pytest.fixture(scope="module")
def recorded_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_recorded_run(tmp_path_factory.mktemp("baseline") / "run")


def test_run_dir_and_a_target_with_a_colon_are_told_apart(recorded_dir: Path) -> None:
    assert split_baseline(str(recorded_dir)) == (recorded_dir, None)
    assert split_baseline(f"{recorded_dir}:redis:aof") == (recorded_dir, "redis:aof")
    with pytest.raises(Exception, match="not a run directory"):
        split_baseline(f"{recorded_dir}-missing:redis")


async def test_ghost_and_delta_against_another_target(recorded_dir: Path) -> None:
    rec = load_recording(recorded_dir)
    app = ReplayApp(rec, playing=False, baselines=load_baselines(f"{recorded_dir}:redis", LABELS))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("end", "w")  # the whole run
        await pilot.pause()
        view = app.view
        start, end = view.span()
        ghost = view.ghost("redis:aof", "produce_rate", start, end)
        assert ghost is not None
        # lined up: the baseline's points at the same times as the column's own
        assert ghost[0] == app.histories["redis:aof"].series["produce_rate"].between(start, end)[0]
        assert ghost[1] == app.histories["redis"].series["produce_rate"].between(start, end)[1]
        aof = np.array([recorded_tick("redis:aof", s).produce_rate for s in range(TICKS)])
        base = np.array([recorded_tick("redis", s).produce_rate for s in range(TICKS)])
        expected = (aof.mean() / base.mean() - 1) * 100
        assert view.delta("redis:aof", "produce_rate") == pytest.approx(expected)
        assert view.delta("redis", "produce_rate") == pytest.approx(0.0)
        text = "\n".join(screen_lines(app))
        assert f"Δ{expected:+.0f}%" in text and "redis:aof vs recorded:redis" in text


def test_the_ghost_is_a_dotted_line_above_the_area() -> None:
    rows = area_chart([1.0, 1.0], width=1, height=1, top=4.0, ghost=[4.0, 4.0])
    assert rows == ["⣉"]  # both bottom dots (the area) and both top dots (the ghost)
    assert area_chart([4.0, 4.0], width=1, height=1, top=4.0, ghost=[1.0, 1.0]) == ["⣿"]


@pytest.mark.parametrize("spec, message", [
    ("{run}-missing", "not a run directory"),
    ("{run}:kafka", "has no target 'kafka'"),
])
def test_a_bad_baseline_is_one_line_and_exit_2(recorded_dir: Path, spec: str, message: str) -> None:
    res = run_cli(["replay", str(recorded_dir), "--baseline", spec.format(run=recorded_dir)],
                  timeout_s=60)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], res.stderr


async def test_the_live_dashboard_draws_the_baseline_too(recorded_dir: Path) -> None:
    from tests.tui.recorded import WORKLOAD, recorded_items
    from tests.tui.screen import wait_until
    from tui.app import REPAINT_S, DashboardApp, bus_message

    app = DashboardApp(None, LABELS, WORKLOAD, baselines=load_baselines(str(recorded_dir), LABELS))
    async with app.run_test(size=(80, 24)) as pilot:
        for item in recorded_items()[:40]:
            message = bus_message(item)
            assert message is not None
            app.post_message(message)
        await wait_until(pilot, lambda: app.histories["redis"].ticks > 10, "ticks")
        await pilot.pause(REPAINT_S)
        # the same run as its own baseline: no difference, whatever stretch has arrived
        assert app.view.delta("redis:aof", "lag") == pytest.approx(0.0)
        assert "redis:aof vs recorded:redis:aof" in "\n".join(screen_lines(app))
