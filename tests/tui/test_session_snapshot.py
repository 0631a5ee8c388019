"""The session's screens compared with committed SVG snapshots (pytest-textual-snapshot), at
80×24 and 120×40: the launcher with a refused target, the platform list, the end of a run
with the runs of the session side by side, from fixed recorded data, and a report's document.

After an intended change: `pytest tests/tui/test_session_snapshot.py --snapshot-update`, then
review the new files under __snapshots__/."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.pilot import Pilot

from loadgen.core.ticks import Tick
from loadgen.load import TargetTotals
from loadgen.run import RunSummary
from tests.tui.recorded import LABELS, TICKS, WARMUP_TICKS, recorded_items
from tests.tui.screen import screen_lines, wait_until
from tui.bench.endsummary import EndSummary
from tui.launcher import LauncherScreen, LaunchSettings, PickScreen, Problem
from tui.session import EndScreen, ReportScreen, SessionApp, SessionRun

SIZES = [(80, 24), (120, 40)]


async def settled(pilot: Pilot, app: SessionApp, footer: str) -> None:
    """Wait until the bottom line shows `footer` (drawn after the screen's content)."""
    await wait_until(pilot, lambda: footer in "".join(screen_lines(app)[-1:]), "the footer")
    await pilot.pause()
SETTINGS = LaunchSettings(targets=["redis", "redis:aof,fsync=sometimes"],
                          workload="redis-latency-1kb", overrides={"rate": "5000", "duration": "20"})


def recorded_run(number: int, labels: list[str], stopped_early: bool = False) -> SessionRun:
    """A session's run made of the recorded ticks of `labels`."""
    end = EndSummary(labels)
    totals = {label: TargetTotals(label) for label in labels}
    for item in recorded_items():
        end(item)
        if isinstance(item, Tick) and item.target in totals:
            totals[item.target].produced += item.produced
            totals[item.target].consumed += item.consumed
    for t in totals.values():
        t.expected, t.drained, t.final_lag = t.produced, True, 0
    run_dir = Path(f"runs/2027011{number}T080000Z-recorded")
    summary = RunSummary(run_dir, "recorded", stopped_early, list(totals.values()),
                         measured_ticks=TICKS - WARMUP_TICKS)
    settings = LaunchSettings(targets=labels, overrides={"rate": "5000", "duration": "20"})
    return SessionRun(number, settings, run_dir, labels, end, summary)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_launcher_with_a_refused_target(snap_compare, size: tuple[int, int]) -> None:
    app = SessionApp(SETTINGS)

    async def before(pilot: Pilot) -> None:
        await wait_until(pilot, lambda: isinstance(app.screen, LauncherScreen), "the launcher")
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: any(p.has_class("-shown") for p in app.screen.query(Problem)),
                         "the error")
        # off the target fields: their hint lists the platform's options, which change as
        # platforms grow
        app.screen.query_one("#workload").focus()
        await settled(pilot, app, "^r start")

    assert snap_compare(app, terminal_size=size, run_before=before)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_platform_list(snap_compare, size: tuple[int, int]) -> None:
    app = SessionApp(SETTINGS)

    async def before(pilot: Pilot) -> None:
        await wait_until(pilot, lambda: isinstance(app.screen, LauncherScreen), "the launcher")
        await pilot.press("ctrl+t")
        await wait_until(pilot, lambda: isinstance(app.screen, PickScreen), "the platforms")
        await settled(pilot, app, "^r start")

    assert snap_compare(app, terminal_size=size, run_before=before)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_end_of_a_run_with_the_session_runs(snap_compare, size: tuple[int, int]) -> None:
    app = SessionApp(SETTINGS)

    async def before(pilot: Pilot) -> None:
        await wait_until(pilot, lambda: isinstance(app.screen, LauncherScreen), "the launcher")
        app.runs = [recorded_run(1, LABELS), recorded_run(2, LABELS[:1], stopped_early=True)]
        failed = recorded_run(3, ["redis:aof"])
        failed.summary, failed.error = None, "redis:aof: redis-server did not start: port in use"
        app.runs.append(failed)
        app.show_end()
        await wait_until(pilot, lambda: isinstance(app.screen, EndScreen), "the end screen")
        await settled(pilot, app, "run again")

    assert snap_compare(app, terminal_size=size, run_before=before)


REPORT = """# streambench report: 20270111T080000Z, 20270112T080000Z (recorded)

## Headline

| target | run | consumed msg/s | e2e p99 ms |
|---|---|---|---|
| redis | 20270111T080000Z | 4,996 | 17.7 |
| redis | 20270112T080000Z | 4,996 | 17.7 |

- every run drained
"""


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_report_screen(snap_compare, size: tuple[int, int], tmp_path: Path,
                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    report = Path("report-20270115T080000Z/report.md")
    report.parent.mkdir()
    report.write_text(REPORT)
    app = SessionApp(SETTINGS)

    async def before(pilot: Pilot) -> None:
        await wait_until(pilot, lambda: isinstance(app.screen, LauncherScreen), "the launcher")
        app.push_screen(ReportScreen(report))
        await wait_until(pilot, lambda: isinstance(app.screen, ReportScreen), "the report")
        await settled(pilot, app, "back")

    assert snap_compare(app, terminal_size=size, run_before=before)
