"""`streambench replay` on the fixed recorded run written by the Parquet sink: the recording
reads back as the ticks that were written, the player keys move through it, the charts share
one y scale, the detail screen and the screenshot key work, bad run directories are refused."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from textual.containers import VerticalScroll

from loadgen.core.histogram import Histogram
from loadgen.core.ticks import ConsumerStat, LagSnapshot, Tick, partition_list
from tests.conftest import run_cli
from tests.tui.recorded import LABELS, T0_NS, TICKS, WORKLOAD, recorded_tick, write_recorded_run
from tests.tui.screen import screen_lines, wait_until
from tui.bench.recording import load_recording
from tui.detail import (
    DetailScreen,
    broker_rows,
    consumer_rows,
    held_text,
    nines_curve,
    partition_rows,
    sort_consumers,
    sort_rows,
)
from tui.history import WINDOWS
from tui.replay import ReplayApp


@pytest.fixture(scope="module")
def recorded_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_recorded_run(tmp_path_factory.mktemp("replay") / "run")


def test_the_recording_reads_back_the_ticks_that_were_written(recorded_dir: Path) -> None:
    rec = load_recording(recorded_dir)
    assert rec.labels == LABELS and rec.complete and not rec.notes
    ticks = [i for i in rec.items if isinstance(i, Tick)]
    assert len(ticks) == TICKS * len(LABELS)
    assert rec.times == sorted(rec.times)
    read = next(t for t in ticks if t.target == "redis:aof" and t.seq == 25)
    written = recorded_tick("redis:aof", 25)
    assert (read.time_ns, read.produced, read.send_errors) == (written.time_ns, written.produced, 3)
    # the histograms come back bucket for bucket
    assert read.e2e_latency.total == written.e2e_latency.total
    assert read.e2e_latency.percentile(99) == written.e2e_latency.percentile(99)
    assert read.lag is not None and read.lag.per_partition == written.lag.per_partition
    assert read.broker["partition.1.produced"] == written.produced // 2
    assert read.loadgen.cpu_percent == written.loadgen.cpu_percent


async def test_player_keys_move_through_the_run(recorded_dir: Path) -> None:
    app = ReplayApp(load_recording(recorded_dir), playing=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.histories["redis"].ticks == 0  # paused at the start
        await pilot.press("end")
        assert all(h.ticks == TICKS for h in app.histories.values())
        assert app.histories["redis:aof"].send_errors_total == 3
        assert app.histories["redis"].marks  # the rate change is marked on the charts
        await pilot.press("home", "right")  # 10 s after the first item (3 s before the ticks)
        first_tick_s = (T0_NS + 1_000_000_000 - app.recording.start_ns) / 1e9
        expected = int(10.0 - first_tick_s) + 1
        assert app.histories["redis"].ticks == expected
        await pilot.press("left_square_bracket")  # back again: rebuilt from the start
        assert app.histories["redis"].ticks == 0
        await pilot.press("n", "n", "n")  # phase changes: warm-up, measuring, then the rate
        await pilot.pause()
        assert app.position_ns == T0_NS + 21 * 1_000_000_000  # the rate change after seq 20
        assert app.histories["redis"].ticks == 21
        text = "\n".join(screen_lines(app))
        assert "replay 0:24 / 0:33 · paused 1×" in text
        assert "q quit" in screen_lines(app)[-1]


async def test_playing_at_60x_reaches_the_end_and_stops(recorded_dir: Path) -> None:
    app = ReplayApp(load_recording(recorded_dir), playing=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("3", "space")
        assert app.playing and app.speed == 60
        await wait_until(pilot, lambda: not app.playing, "the end of the run", 10)
        assert app.position_ns == app.recording.end_ns
        assert all(h.ticks == TICKS for h in app.histories.values())


async def test_side_by_side_charts_share_one_scale_until_a_column_takes_its_own(
        recorded_dir: Path) -> None:
    app = ReplayApp(load_recording(recorded_dir), playing=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("end", "g")  # (at 80×24 the lag chart is among the second two)
        lag = {label: app.view.scale(label, "lag") for label in LABELS}
        # redis:aof's lag is 200 above redis's: one top for both
        assert lag["redis"].top == lag["redis:aof"].top == lag["redis:aof"].high
        assert lag["redis"].high < lag["redis"].top and lag["redis"].shared
        captions = [ln for ln in screen_lines(app) if "lag  " in ln and "↑" in ln]
        assert captions and all(ln.count(" all ") == 2 for ln in captions)
        await pilot.press("y")  # the selected column (redis) takes its own scale
        own = app.view.scale("redis", "lag")
        assert not own.shared and own.top == own.high == lag["redis"].high
        assert app.view.scale("redis:aof", "lag").top == lag["redis:aof"].top
        await pilot.pause()
        assert any(" own" in ln for ln in screen_lines(app) if "lag  " in ln)
        # the recorded run is planned for 70 s: its charts show that from its start
        assert app.view.run_window and app.view.window_s == WORKLOAD.warmup_s + WORKLOAD.duration_s
        await pilot.press("w", "w", "w")  # then 1 min, 5 min, whole run
        assert app.view.window_s == WINDOWS[2] is None  # whole run
        start, end = app.view.span()
        assert end - start == pytest.approx(TICKS)  # 30 one-second ticks
        assert any("-0:30" in ln and "whole run" in ln for ln in screen_lines(app))


async def test_detail_screen_lists_partitions_consumers_brokers_latency_and_events(
        recorded_dir: Path) -> None:
    app = ReplayApp(load_recording(recorded_dir), playing=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("end", "tab", "enter")
        await wait_until(pilot, lambda: isinstance(app.screen, DetailScreen), "the detail")
        assert app.screen.history.label == "redis:aof"
        text = "\n".join(screen_lines(app))
        assert "redis:aof · detail" in text
        assert "lag ▼" in text  # sorted by lag first
        assert "e2e" in text and "p99.99" in text
        # the recorded consumers: a Redis Streams group, both reading both streams
        consumers = [ln for ln in screen_lines(app) if "sub-0/" in ln]
        assert [ln.split()[1:5] for ln in consumers] == [
            ["sub-0/0", "2", "0-1", "shared"], ["sub-0/1", "2", "0-1", "shared"]]
        assert "consumer ▲" in text
        await pilot.press("o")  # then by time lag, then by partition
        assert app.screen.sort == "behind"
        await pilot.press("o")
        assert app.screen.sort == "partition"
        await pilot.press("O", "O")  # the consumers: by partitions held, then by rate
        assert app.screen.consumer_sort == "consume"
        await pilot.pause()
        rates = [ln.split()[1] for ln in screen_lines(app) if "sub-0/" in ln]
        assert rates == ["sub-0/1", "sub-0/0"]  # consumer 1 read more in the recorded ticks
        app.screen.query_one("#detail", VerticalScroll).scroll_end(animate=False)
        await pilot.pause()
        assert "send-error" in "\n".join(screen_lines(app))
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, DetailScreen), "the columns")


def test_consumer_rows_follow_a_rebalance_and_sum_the_lag_of_what_each_holds() -> None:
    sub = "streambench-sub-0"
    first = dataclasses.replace(recorded_tick("redis", 20), consumers=(
        ConsumerStat(0, sub, 0, 3000, (0, 1, 2, 3)), ConsumerStat(0, sub, 1, 0, None)))
    # a rebalance: consumer 1 joined and took partitions 2 and 3
    second = dataclasses.replace(
        recorded_tick("redis", 21), lag=LagSnapshot(70, {0: 10, 1: 20, 2: 30, 3: 10}),
        consumers=(ConsumerStat(0, sub, 0, 1000, (0, 1)), ConsumerStat(0, sub, 1, 1400, (2, 3))))
    rows = consumer_rows([first, second])
    assert [(r.name, r.partitions, r.consume, r.lag) for r in rows] == [
        ("sub-0/0", (0, 1), 2000.0, 30.0), ("sub-0/1", (2, 3), 700.0, 40.0)]
    assert [r.name for r in sort_consumers(rows, "lag")] == ["sub-0/1", "sub-0/0"]
    assert [r.name for r in sort_consumers(rows, "consume")] == ["sub-0/0", "sub-0/1"]
    # partitions read by the whole group, or a second subscription: no lag of its own
    shared = dataclasses.replace(second, consumers=tuple(
        dataclasses.replace(c, shared=True) for c in second.consumers))
    assert [held_text(r) for r in consumer_rows([shared])] == ["0-1 shared", "2-3 shared"]
    assert all(math.isnan(r.lag) for r in consumer_rows([shared]))
    two = dataclasses.replace(second, consumers=(*second.consumers,
                                                  ConsumerStat(0, "streambench-sub-1", 0, 5, (0, 1, 2, 3))))
    assert all(math.isnan(r.lag) for r in consumer_rows([two]))
    assert next(r.name for r in sort_consumers(consumer_rows([two]), "held")) == "sub-1/0"
    unknown = dataclasses.replace(second, consumers=(ConsumerStat(0, sub, 0, 1, None),))
    assert [held_text(r) for r in consumer_rows([unknown])] == ["broker assigns"]
    assert consumer_rows([dataclasses.replace(first, consumers=())]) == []


def test_partition_lists_are_written_as_ranges() -> None:
    assert partition_list((0, 1, 2, 3, 6, 8, 9)) == "0-3, 6, 8-9"
    assert partition_list((5,)) == "5"
    assert partition_list(()) == "none"


def test_partition_rates_add_up_to_the_targets_rate() -> None:
    ticks = [recorded_tick("redis:aof", seq) for seq in range(20, 30)]
    rows = partition_rows(ticks)
    assert [r.partition for r in rows] == [0, 1]
    seconds = sum(t.interval_s for t in ticks)
    assert math.isclose(sum(r.produce for r in rows), sum(t.produced for t in ticks) / seconds)
    assert math.isclose(sum(r.consume for r in rows), sum(t.consumed for t in ticks) / seconds)
    assert rows[1].lag == 200
    assert [r.partition for r in sort_rows(rows, "lag")] == [1, 0]
    assert [r.partition for r in sort_rows(rows, "produce")] == [0, 1]


async def test_screenshot_key_writes_an_svg_into_the_run_directory(tmp_path: Path) -> None:
    run_dir = write_recorded_run(tmp_path / "run")
    app = ReplayApp(load_recording(run_dir), playing=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("end", "x")
        await pilot.pause()
        shots = list(run_dir.glob("screenshot-*.svg"))
        assert len(shots) == 1 and shots[0].read_text().startswith("<svg")
        assert app.status.message == f"screenshot: {shots[0]}"
        assert "redis:aof" in shots[0].read_text()  # the screen as it was
        await pilot.press("x", "x")  # within the same second or not: no file is overwritten
        await pilot.pause()
        assert len(list(run_dir.glob("screenshot-*.svg"))) == 3
        assert "screenshot:" in screen_lines(app)[0]


def _killed_copy(src: Path, dst: Path) -> Path:
    """The run as a killed process leaves it: no end in run.json, a half-written file."""
    import shutil

    shutil.copytree(src, dst)
    doc = json.loads((dst / "run.json").read_text())
    for key in ("ended", "stopped_early", "totals"):
        doc.pop(key, None)
    (dst / "run.json").write_text(json.dumps(doc))
    (dst / "ticks" / ".part-00001.parquet.inprogress").write_bytes(b"PAR1 cut short")
    return dst


async def test_a_killed_run_replays_and_says_so(recorded_dir: Path, tmp_path: Path) -> None:
    rec = load_recording(_killed_copy(recorded_dir, tmp_path / "killed"))
    assert not rec.complete and "killed" in rec.notes[0]
    app = ReplayApp(rec, playing=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("end")
        await pilot.pause()
        assert "KILLED" in screen_lines(app)[0]
        assert app.histories["redis"].ticks == TICKS


@pytest.mark.parametrize("make, message", [
    (lambda d: None, "no such directory"),
    (lambda d: d.mkdir(), "no run.json"),
    (lambda d: (d.mkdir(), (d / "run.json").write_text("{")),
     "is not valid JSON (line 1, column 2"),
    (lambda d: (d.mkdir(), (d / "run.json").write_bytes(b"\xff{")), "is not UTF-8 text"),
    (lambda d: (d.mkdir(), (d / "run.json").write_text(
        '{"schema_version": 9, "min_reader_version": 9}')), "upgrade streambench"),
    (lambda d: (d.mkdir(), (d / "run.json").write_text('{"schema_version": 2}')), "has no ticks"),
    (lambda d: (d.mkdir(), (d / "run.json").write_text('{"schema_version": 2}'),
                (d / "ticks").mkdir(), (d / "ticks" / "part-00000.parquet").write_bytes(b"PAR1 no")),
     "cannot be read"),
])
def test_a_bad_run_directory_is_one_line_and_exit_2(tmp_path: Path, make, message: str) -> None:
    run_dir = tmp_path / "run"
    make(run_dir)
    res = run_cli(["replay", str(run_dir)], timeout_s=60)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in res.stderr, res.stderr


def test_brokers_are_listed_one_by_one_where_the_collector_reports_them() -> None:
    tick = dataclasses.replace(recorded_tick("redis", 3), interval_s=2.0)
    r = tick.resources
    (whole,) = broker_rows(tick)
    assert (whole.name, whole.cpu, whole.memory) == ("all brokers", r.cpu_percent,
                                                     float(r.memory_bytes))
    assert (whole.disk_read, whole.disk_write) == (r.disk_read_bytes / 2, r.disk_write_bytes / 2)
    per_broker = dataclasses.replace(tick, broker={
        "broker.broker-2.cpu_percent": 30.0, "broker.broker-2.memory_bytes": 2e8,
        "broker.broker-1.cpu_percent": 10.0, "broker.broker-1.memory_bytes": 1e8,
        "broker.broker-1.disk_write_bytes": 4e6, "broker.broker-2.net_rx_bytes": 1e6,
        "partition.0.produced": 5.0})
    first, second = broker_rows(per_broker)
    assert (first.name, first.cpu, first.memory, first.disk_write) == ("broker-1", 10.0, 1e8, 2e6)
    assert (second.name, second.cpu, second.memory, second.net_rx) == ("broker-2", 30.0, 2e8, 5e5)
    assert math.isnan(first.net_rx) and math.isnan(second.disk_write)  # not reported: unknown


def test_the_nines_curve_draws_each_percentile_on_one_log_scale() -> None:
    e2e = Histogram()
    publish = Histogram()
    e2e.record_many([v * 1000 for v in range(1, 100_001)])  # 1 µs … 100 ms, evenly
    publish.record_many([v * 100 for v in range(1, 100_001)])
    curve = nines_curve(e2e.snapshot_and_reset(), publish.snapshot_and_reset(), width=40)
    header, *rows, note = curve.plain.split("\n")
    assert header.split() == ["ms"]
    cells = [row.split() for row in rows]  # (label,) name, ms, bar: the label on e2e's rows
    labels = [c[0] for c in cells[0::2]]
    assert labels == ["p50", "p90", "p99", "p99.9", "p99.99", "max"]
    assert {c[-3] for c in cells[0::2]} == {"e2e"} and {c[0] for c in cells[1::2]} == {"publish"}
    drawn = [c[-1] for c in cells]
    assert all(set(b) <= {"█"} for b in drawn[0::2]) and all(set(b) <= {"░"} for b in drawn[1::2])
    # longer bars for higher percentiles; the largest value fills the width
    e2e_bars = [len(b) for b in drawn[0::2]]
    assert e2e_bars == sorted(e2e_bars) and max(e2e_bars) == 40
    assert float(cells[0][2]) == pytest.approx(50.0, rel=0.02)  # e2e p50: 50 ms
    assert note.split()[:2] == ["log", "scale"]
    # the bars start in one column, left-aligned
    assert len({row.index(bar) for row, bar in zip(rows, drawn, strict=True)}) == 1
    empty = nines_curve(Histogram().snapshot_and_reset(), Histogram().snapshot_and_reset())
    assert empty.plain.split("\n")[1].split() == ["–", "no", "samples", "yet"]


def test_the_consumers_table_of_a_hundred_consumers_is_text_with_cut_partition_lists() -> None:
    """A hundred consumers are a hundred rows of text (laid out without Rich's table); a
    partition list longer than its column is cut with an ellipsis; the names are left-aligned,
    the figures right-aligned."""
    sub = "streambench-sub-0"
    consumers = tuple(ConsumerStat(0, sub, i, 10 * i, tuple(range(i, 1000, 100)))
                      for i in range(100))
    tick = dataclasses.replace(recorded_tick(LABELS[0], 1), consumers=consumers)
    screen = DetailScreen.__new__(DetailScreen)
    screen.consumer_sort = "consumer"
    table = screen.consumers_table([tick])
    header, *rows = table.plain.split("\n")
    assert header.split() == ["consumer", "▲", "held", "partitions", "consume/s", "lag"]
    assert len(rows) == 100
    assert rows[0].split()[:2] == ["sub-0/0", "10"]
    assert "  0, 100, 200, 300, 400, …  " in rows[0]  # 24 cells of "0, 100, … 900"
    assert len({row.index("…") for row in rows}) == 1  # one column, cut at one width
    assert [row.split()[0] for row in rows[:3]] == ["sub-0/0", "sub-0/1", "sub-0/2"]
    assert len({len(row.rstrip()) for row in rows}) == 1  # the figures end in one column
