"""The metadata view and the broker log pane drawn from fixed data, compared with committed SVG
snapshots at 80×24 and 120×40: the recorded run of tests/tui/recorded.py with a run.json that
describes its two Redis targets as a run does, and a log file of fixed lines.

After an intended change: `pytest tests/tui/test_metadata_snapshot.py --snapshot-update`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from tests.tui.recorded import LABELS, WORKLOAD, write_recorded_run
from tests.tui.screen import screen_lines, wait_until
from tui.app import DashboardApp
from tui.bench.recording import load_recording
from tui.logs import LogScreen
from tui.metadata import MetadataScreen, RunDescription
from tui.replay import ReplayApp

SIZES = [(80, 24), (120, 40)]
LOG = [f"4242:M 15 Jan 2027 08:00:{s:02d}.000 * {what}" for s, what in enumerate([
    "Server initialized", "Ready to accept connections tcp",
    "DB saved on disk", "Background append only file rewriting started"])]


def described(i: int, label: str) -> dict[str, Any]:
    """A target as TargetLoad.describe() leaves it in run.json (a Redis stack of the local
    runtime, the second with AOF)."""
    aof = label.endswith(":aof")
    topic = f"streambench-recorded-{i}-0"
    settings = {"conf.port": {"value": str(6400 + i), "source": "streambench default",
                              "read_back": True},
                "conf.appendonly": {"value": "yes" if aof else "no",
                                    "source": "user" if aof else "streambench default",
                                    "read_back": True},
                "conf.maxmemory": {"value": "0", "source": "platform default", "read_back": True}}
    return {"label": label, "platform": "redis", "runtime": "local",
            "endpoints": {"redis": f"127.0.0.1:{6400 + i}"}, "pids": [4242 + i], "containers": [],
            "version": "7.0.15", "config": {"appendonly": "yes" if aof else "no",
                                            "data_dir": f"/tmp/streambench-redis-{i}"},
            "settings": settings, "topics": [topic], "subscriptions": ["streambench-sub-0"],
            "layout": {topic: {"partitions": 2, "streams": [f"{topic}-0", f"{topic}-1"]}},
            "logs": [f"/tmp/streambench-redis-{i}/redis.log"]}


@pytest.fixture(scope="module")
def described_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = write_recorded_run(tmp_path_factory.mktemp("meta") / "run")
    doc = json.loads((run_dir / "run.json").read_text())
    doc |= {"targets": [described(i, label) for i, label in enumerate(LABELS)],
            "load_processes": 1, "load_placement": [{"producers": [0], "consumers": [0]}]}
    (run_dir / "run.json").write_text(json.dumps(doc))
    return run_dir


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_metadata_view(snap_compare, described_run: Path, size: tuple[int, int]) -> None:
    app = ReplayApp(load_recording(described_run), playing=False)

    async def before(pilot: Pilot) -> None:
        await pilot.press("end", "i")
        await wait_until(pilot, lambda: isinstance(app.screen, MetadataScreen), "the metadata")
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=before)


class FixedLogApp(DashboardApp):
    """A dashboard without a run whose first target's log is a given file."""

    def __init__(self, log: Path) -> None:
        super().__init__(None, LABELS, WORKLOAD)
        self.log_file = log

    def run_description(self) -> RunDescription:
        return {"targets": [{**described(0, LABELS[0]), "logs": [str(self.log_file)]}]}


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_log_pane_filtered(snap_compare, tmp_path: Path, size: tuple[int, int]) -> None:
    log = tmp_path / "redis.log"
    log.write_text("\n".join(LOG) + "\n")
    app = FixedLogApp(log)

    async def before(pilot: Pilot) -> None:
        await pilot.press("l")
        await wait_until(pilot, lambda: isinstance(app.screen, LogScreen) and bool(app.screen.lines),
                         "the log lines")
        await pilot.press("slash", *"ready", "enter")
        await wait_until(pilot, lambda: isinstance(app.screen, LogScreen)
                         and app.screen.filter == "ready", "the filter")
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=before)


class ExternalApp(DashboardApp):
    """A dashboard without a run whose first target is an existing cluster."""

    def run_description(self) -> RunDescription:
        return {"targets": [{"label": LABELS[0], "platform": "redis", "runtime": "external",
                             "endpoints": {"redis": "127.0.0.1:6379"}}]}


async def test_an_existing_cluster_says_it_has_no_broker_log() -> None:
    app = ExternalApp(None, LABELS, WORKLOAD)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("l")
        await wait_until(pilot, lambda: any("no broker log is available" in ln
                                            for ln in screen_lines(app)), "the one line")
