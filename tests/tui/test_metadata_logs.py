"""The metadata view (i) and the broker log pane (l) on a real run against a local redis-server
started by the run, and the metadata view in a replay of a recorded run."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.sink import ParquetSink
from loadgen.core.target import unique_labels
from loadgen.core.workload import Workload
from loadgen.pacing import run_precise
from loadgen.platforms import resolve_target
from loadgen.run import Run
from tests.tui.screen import screen_lines, wait_until
from tui.app import DashboardApp
from tui.bench.recording import load_recording
from tui.logs import LogScreen
from tui.metadata import MetadataScreen
from tui.replay import ReplayApp

pytestmark = pytest.mark.integration

WORKLOAD = Workload(name="meta", rate=200, duration_s=60, warmup_s=0, message_size=100,
                    partitions=2)
READY = "Ready to accept connections"  # what redis-server logs once it listens


def shown(app: DashboardApp) -> str:
    return "\n".join(screen_lines(app))


async def test_metadata_and_the_broker_log_of_a_live_run(tmp_path: Path) -> None:
    run = Run(WORKLOAD, unique_labels([resolve_target("redis:runtime=local")]),
              out_dir=tmp_path / "run", recorder=ParquetSink)
    app = DashboardApp(run, run.labels, run.workload)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: "endpoints" in run.runners[0].describe(), "the broker up")
        described = run.runners[0].describe()
        address = described["endpoints"]["redis"]
        streams = described["layout"][described["topics"][0]]["streams"]
        assert address.startswith("127.0.0.1:") and len(streams) == 2

        await pilot.press("i")
        await wait_until(pilot, lambda: isinstance(app.screen, MetadataScreen), "the metadata")
        text = shown(app)
        assert f"redis {address}" in text
        assert all(stream in text for stream in streams)
        assert "conf.appendonly" in text and "streambench default" in text
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, MetadataScreen), "esc")

        await pilot.press("l")
        await wait_until(pilot, lambda: READY in shown(app), "the redis-server log line")
        line = next(ln for ln in screen_lines(app) if READY in ln).strip(" │╰╭")
        log_file = Path(described["logs"][0])
        assert line in log_file.read_text(), (line, log_file)
        await pilot.press("slash", *"ready", "enter")
        await wait_until(pilot, lambda: "filter 'ready'" in shown(app), "the filter")
        screen = app.screen
        assert isinstance(screen, LogScreen)
        assert screen.lines and all("ready" in ln.lower() for ln in screen.query_one("Log").lines)
        assert run.rates[run.labels[0]] == WORKLOAD.rate  # `/` filtered, it did not halve the rate
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, LogScreen), "esc")
        await pilot.press("q", "q")
        await wait_until(pilot, lambda: not app.is_running, "the run to end", timeout_s=60)


@pytest.fixture(scope="module")
def recorded_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("meta") / "run"
    workload = Workload(name="meta", rate=200, duration_s=1, warmup_s=0, message_size=100,
                        partitions=2)
    run = Run(workload, unique_labels([resolve_target("redis:runtime=local")]), out_dir=run_dir,
              recorder=ParquetSink)
    run_precise(run.execute())
    return run_dir


async def test_metadata_in_a_replay_comes_from_run_json(recorded_run: Path) -> None:
    rec = load_recording(recorded_run)
    target = rec.meta["targets"][0]
    app = ReplayApp(rec, playing=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("i")
        await wait_until(pilot, lambda: isinstance(app.screen, MetadataScreen), "the metadata")
        text = shown(app)
        assert f"redis {target['endpoints']['redis']}" in text
        assert all(s in text for s in target["layout"][target["topics"][0]]["streams"])
        assert f"version {target['version']}" in text
        kept = recorded_run / "logs" / "0-redis_runtime_local" / "redis.log"
        assert kept.is_file() and str(kept) in text
        await pilot.press("i")
        await wait_until(pilot, lambda: not isinstance(app.screen, MetadataScreen), "i closes")
        await pilot.press("l")  # the broker log the run kept, the data dir being gone
        await wait_until(pilot, lambda: READY in shown(app), "the kept log line")
        line = next(ln for ln in screen_lines(app) if READY in ln).strip(" │╰╭")
        assert line in kept.read_text()
        assert "kept: redis.log" in shown(app)
