"""The dashboard's run in a child process: the bus crosses the pipe, stops reach the child."""

from __future__ import annotations

import asyncio

import pytest

from loadgen.errors import OutputError
from loadgen.isolated import RunProcess
from loadgen.platforms import resolve_target
from loadgen.target import unique_labels
from loadgen.tick import Phase, PhaseChange, Tick
from loadgen.workload import Workload

pytestmark = pytest.mark.integration


def _args(tmp_path, duration: float) -> dict:
    return dict(workload=Workload(name="child", rate=500, duration_s=duration, warmup_s=1,
                                  message_size=100),
                targets=unique_labels([resolve_target("redis")]), out_dir=tmp_path / "run")


def test_bus_and_summary_cross_the_pipe(tmp_path, no_leftover_redis):
    run = RunProcess(**_args(tmp_path, 3))
    items: list[object] = []
    run.subscribe(items.append)
    run.prepare()
    summary = asyncio.run(run.execute())
    ticks = [i for i in items if isinstance(i, Tick)]
    assert [t.phase for t in ticks][:4] == [Phase.WARMUP, Phase.MEASURING, Phase.MEASURING,
                                           Phase.MEASURING]
    assert sum(t.produced for t in ticks) == summary.targets[0].produced == 2000
    assert summary.targets[0].consumed == 2000
    assert any(isinstance(i, PhaseChange) and i.phase is Phase.DONE for i in items)
    assert (summary.run_dir / "run.json").exists()


def test_stop_request_reaches_the_child(tmp_path, no_leftover_redis):
    run = RunProcess(**_args(tmp_path, 60))
    seen: list[Tick] = []

    def on_item(item: object) -> None:
        if isinstance(item, Tick):
            seen.append(item)
            if len(seen) == 3:
                run.request_stop()

    run.subscribe(on_item)
    run.prepare()
    summary = asyncio.run(asyncio.wait_for(run.execute(), 60))
    assert summary.stopped_early
    assert summary.targets[0].consumed == summary.targets[0].produced
    assert len(seen) < 10


def test_taken_output_dir_fails_before_start(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "x").write_text("x")
    with pytest.raises(OutputError):
        RunProcess(**_args(tmp_path, 1)).prepare()
