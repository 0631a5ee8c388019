"""The broker log pane (l) of a docker stack: the redis-server container's own output, as
`docker logs` gives it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from analysis.sink import ParquetSink
from loadgen.core.target import unique_labels
from loadgen.core.workload import Workload
from loadgen.platforms import resolve_target
from loadgen.run import Run
from tests.tui.screen import screen_lines, wait_until
from tui.app import DashboardApp

READY = "Ready to accept connections"


async def test_the_log_pane_shows_the_container_output(tmp_path: Path, docker_images) -> None:
    workload = Workload(name="docker-log", rate=100, duration_s=60, warmup_s=0, message_size=100)
    run = Run(workload, unique_labels([resolve_target("redis:runtime=docker")]),
              out_dir=tmp_path / "run", recorder=ParquetSink)
    app = DashboardApp(run, run.labels, run.workload)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: bool(run.runners[0].describe().get("containers")),
                         "the container up", timeout_s=120)
        (container,) = run.runners[0].describe()["containers"]
        await pilot.press("l")
        await wait_until(pilot, lambda: any(READY in ln for ln in screen_lines(app)),
                         "the container's log line")
        line = next(ln for ln in screen_lines(app) if READY in ln).strip(" │╰╭")
        logs = subprocess.run(["docker", "logs", container], capture_output=True, text=True,
                              timeout=30)
        assert line in logs.stdout + logs.stderr
        assert "docker logs of" in "\n".join(screen_lines(app))
        await pilot.press("escape", "q", "q")
        await wait_until(pilot, lambda: not app.is_running, "the run to end", timeout_s=120)
