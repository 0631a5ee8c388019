"""`streambench replay` on a real recorded run: a local redis-server driven at 1,000 msg/s over
two partitions, the rate doubled at 2 s by --at. The replay shows every tick the files hold;
the per-partition counters add up to what the load generator counted; the same run rewritten
as version 1 files (no loadgen_* columns) replays too, marked as older."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from textual.containers import VerticalScroll

from analysis.sink import ParquetSink
from loadgen.core.events import RunEvent
from loadgen.core.interventions import parse_at
from loadgen.core.target import unique_labels
from loadgen.core.ticks import Tick
from loadgen.core.workload import Workload
from loadgen.pacing import run_precise
from loadgen.platforms import resolve_target
from loadgen.run import Run
from tests.tui.screen import screen_lines, wait_until
from tui.bench.recording import load_recording, read_table
from tui.detail import DetailScreen, partition_rows
from tui.replay import ReplayApp

pytestmark = pytest.mark.integration

WORKLOAD = Workload(name="replayed", rate=1000, duration_s=6, warmup_s=1, message_size=200,
                    partitions=2, consumers=2, schedule=(parse_at("2s:rate=2000"),))


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("real") / "run"
    run = Run(WORKLOAD, unique_labels([resolve_target("redis:runtime=local")]), out_dir=run_dir,
              recorder=ParquetSink, processes=1)
    run_precise(run.execute())
    return run_dir


def _as_version_1(src: Path, dst: Path) -> Path:
    """The run as a version 1 writer left it: ticks without the loadgen_* columns."""
    shutil.copytree(src, dst)
    for f in sorted((dst / "ticks").glob("part-*.parquet")):
        table = pq.read_table(f)
        table = table.drop_columns([c for c in table.column_names if c.startswith("loadgen_")])
        meta = dict(table.schema.metadata or {})
        meta[b"streambench.schema_version"] = b"1"
        pq.write_table(table.replace_schema_metadata(meta), f)
    doc = json.loads((dst / "run.json").read_text())
    doc.update(schema_version=1, min_reader_version=1)
    (dst / "run.json").write_text(json.dumps(doc))
    return dst


async def test_a_real_run_replays_whole(real_run: Path) -> None:
    rows = ds.dataset(real_run / "ticks", format="parquet").to_table().to_pylist()
    rec = load_recording(real_run)
    ticks = [i for i in rec.items if isinstance(i, Tick)]
    assert len(ticks) == len(rows) and rec.complete
    # the per-partition counters of the collector against the load generator's own count
    produced = sum(t.produced for t in ticks)
    assert sum(r.produce for r in partition_rows(ticks)) * sum(t.interval_s for t in ticks) \
        == pytest.approx(produced, abs=2)
    assert sum(t.broker.get("partition.0.produced", 0) for t in ticks) > 0
    assert sum(t.broker.get("partition.1.produced", 0) for t in ticks) > 0
    # each consumer's count, kept in the consumers table, adds up to the tick's
    assert all(len(t.consumers) == 2 and sum(c.consumed for c in t.consumers) == t.consumed
               for t in ticks)
    assert all(c.consumed for c in ticks[-3].consumers)  # both read (the group deals entries)
    # the group's consumers read both streams: told once, together, as the first tick saw them
    told = [e.detail for e in rec.items if isinstance(e, RunEvent) and e.kind == "assignment"]
    assert told == ["2 consumers assigned 2 partitions: sub-0/0 to sub-0/1 0-1 shared"]

    app = ReplayApp(rec, playing=False)
    label = rec.labels[0]
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("3", "space")
        await wait_until(pilot, lambda: not app.playing, "the replay to end", 30)
        history = app.histories[label]
        assert history.ticks == len(rows)
        assert history.last is not None and history.last.produced_total == produced
        assert history.marks  # the rate change
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, DetailScreen), "the detail")
        consumers = [ln.split()[1:5] for ln in screen_lines(app) if "sub-0/" in ln]
        assert consumers == [["sub-0/0", "2", "0-1", "shared"], ["sub-0/1", "2", "0-1", "shared"]]
        app.screen.query_one("#detail", VerticalScroll).scroll_end(animate=False)
        await pilot.pause()
        text = "\n".join(screen_lines(app))
        assert "rate: 1,000 msg/s → 2,000 msg/s" in text


async def test_a_version_1_run_replays_marked_as_older(real_run: Path, tmp_path: Path) -> None:
    rec = load_recording(_as_version_1(real_run, tmp_path / "v1"))
    assert rec.schema_version == 1 and any("older" in n for n in rec.notes)
    ticks = [i for i in rec.items if isinstance(i, Tick)]
    assert all(t.loadgen.cpu_percent != t.loadgen.cpu_percent for t in ticks)  # NaN: not recorded
    app = ReplayApp(rec, playing=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("end")
        await pilot.pause()
        assert "files v1" in screen_lines(app)[0]
        assert app.histories[rec.labels[0]].ticks == len(ticks)


def test_a_real_run_killed_mid_way_replays_what_it_wrote(tmp_path: Path) -> None:
    import os
    import signal

    import psutil

    from analysis.sink import ROTATE_S
    from tests.conftest import CliRun

    run_dir = tmp_path / "killed"
    cli = CliRun(["run", "redis:runtime=local", "--headless", "--rate", "500", "--warmup", "1",
                  "--duration", "60", "--out", str(run_dir)])
    try:
        cli.wait_for_line("measuring", 60)
        for _ in range(int(ROTATE_S) + 3):  # past the sink's first rotation
            cli.wait_for_line("measuring", 10)
    finally:
        started: list[psutil.Process] = []
        with contextlib.suppress(psutil.NoSuchProcess):  # its broker among them
            started = psutil.Process(cli.proc.pid).children(recursive=True)
        os.killpg(cli.proc.pid, signal.SIGKILL)  # the CLI leads its own session
        cli.finish(timeout_s=30)
        for child in started:  # one in a session of its own outlives the group
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
    # the closed files and the journal of the ticks since (a kill loses at most one tick)
    closed = ds.dataset(run_dir / "ticks", format="parquet").to_table().num_rows
    rows = read_table(run_dir, "ticks").num_rows
    assert rows > closed >= 5
    rec = load_recording(run_dir)
    assert not rec.complete and "killed" in rec.notes[0]
    assert sum(isinstance(i, Tick) for i in rec.items) == rows
