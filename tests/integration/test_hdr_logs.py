"""HdrHistogram interval logs of a real Redis run (`run --hdr-log`, stopped by SIGTERM), read
back by HdrHistogram's own Java HistogramLogProcessor (org.hdrhistogram:HdrHistogram from Maven
Central, assembled into streambench's cache) and by the Python hdrhistogram reader: the counts
per tag equal the run's exactly, and the percentiles they print are streambench's buckets, as
each tool defines a percentile; `report --hdr-log` writes the same file from the run files."""

from __future__ import annotations

import asyncio
import math
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

from analysis.hdrlog import SERIES, tick_times_us
from compose.maven import assemble, classpath
from loadgen.core.histogram import MAX_VALUE, HistogramSnapshot, bucket_bounds, percentiles
from loadgen.core.ticks import Phase, Tick
from tests.conftest import none_left
from tests.integration.conftest import CliRun, run_cli, run_json
from tui.bench import exits
from tui.bench.recording import load_recording, read_table

pytestmark = pytest.mark.integration

HDRHISTOGRAM = "org.hdrhistogram:HdrHistogram:2.2.2"
PERCENTILES = (50.0, 99.0, 99.9)
# the log's tag of each latency kind the run files name
KINDS = {"e2e": "e2e", "publish": "publish", "publish-delay": "delay"}


@pytest.fixture(scope="module")
def hdr_classpath() -> str:
    jars = asyncio.run(assemble("hdrhistogram-2.2.2", [HDRHISTOGRAM], lambda _line: None,
                                what="HdrHistogram 2.2.2"))
    return classpath(jars)


SPAN_MARGIN_S = 0.010  # around the measuring ticks' starts, for the readers' -start/-end


@pytest.fixture(scope="module")
def hdr_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run at 2,000 msg/s on a local redis-server, stopped with SIGTERM in its measuring
    phase: the logs must be complete after the drain all the same."""
    run_dir = tmp_path_factory.mktemp("hdr") / "run"
    with none_left("redis-server"):
        cli = CliRun(["run", "redis", "--runtime", "local", "--headless", "--hdr-log",
                      "--rate", "2000", "--warmup", "1", "--duration", "60",
                      "--out", str(run_dir)])
        try:
            for _ in range(4):
                cli.wait_for_line("measuring", 90)
        finally:
            cli.signal(signal.SIGTERM)
        code, _out, err = cli.finish()
    assert code == exits.SIGNAL_EXIT[signal.SIGTERM], err
    return run_dir


def _ticks(run_dir: Path) -> list[Tick]:
    return [item for item in load_recording(run_dir).items if isinstance(item, Tick)]


def _snapshot(ticks: list[Tick], attr: str) -> HistogramSnapshot:
    return HistogramSnapshot.merge([getattr(t, attr) for t in ticks])


def _bucket_at(snap: HistogramSnapshot, rank: int) -> tuple[int, int]:
    """(lowest, highest) value of the bucket holding the sample of 1-based rank `rank`."""
    i = int(np.searchsorted(np.cumsum(snap.count), rank))
    lower, width = bucket_bounds(snap.index[i:i + 1])
    return int(lower[0]), int(lower[0] + width[0] - 1)


def java_rank(p: float, n: int) -> int:
    """HdrHistogram 2.2's getValueAtPercentile: the count at p rounded up, one ulp under p."""
    return max(1, math.ceil(math.nextafter(p, -math.inf) * n / 100))


def python_rank(p: float, n: int) -> int:
    """hdrhistogram 0.10.8's get_value_at_percentile: the count at p rounded half up."""
    return max(1, int(p * n / 100 + 0.5))


def check_percentile(got: float, snap: HistogramSnapshot, p: float,
                     rank: Callable[[float, int], int]) -> None:
    """`got`, a tool's percentile, is the highest value of the bucket of the sample the tool's
    rank names; streambench's own figure (linear between the two samples around p, at their
    buckets' midpoints) lies between those two samples' buckets, which hold the tool's too."""
    n = snap.total
    assert got == _bucket_at(snap, rank(p, n))[1], f"p{p}"
    below = math.floor(p / 100 * (n - 1))
    low = _bucket_at(snap, below + 1)[0]
    high = _bucket_at(snap, min(below + 2, n))[1]
    ours = float(percentiles(snap, [p])[0])
    assert low <= ours <= high and low <= got <= high, f"p{p}: {got} vs {ours}"


def log_processor(cp: str, log: Path, tag: str, out: Path,
                  span: tuple[float, float] | None = None) -> list[list[float]]:
    """HistogramLogProcessor's CSV interval log (values in nanoseconds) of one tag: one row per
    interval, Timestamp, Int_Count, Int_50%, Int_90%, Int_Max, Total_Count, Total_50%,
    Total_90%, Total_99%, Total_99.9%, Total_99.99%, Total_Max."""
    args = ["java", "-cp", cp, "org.HdrHistogram.HistogramLogProcessor", "-i", str(log),
            "-tag", tag, "-csv", "-outputValueUnitRatio", "1", "-o", str(out)]
    if span is not None:
        args += ["-start", f"{span[0]:.4f}", "-end", f"{span[1]:.4f}"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = [line for line in out.read_text().splitlines()
            if line and not line.startswith(("#", '"'))]
    return [[float(v) for v in row.split(",")] for row in rows]


def test_the_java_tools_read_every_sample_and_streambenchs_buckets(
        hdr_run: Path, hdr_classpath: str, tmp_path: Path) -> None:
    log = hdr_run / "hdr" / "redis.hlog"
    ticks = _ticks(hdr_run)
    measuring = [t for t in ticks if t.phase is Phase.MEASURING]
    assert len(measuring) >= 3 and any(t.phase is Phase.DRAINING for t in ticks)
    lines = [line for line in log.read_text().splitlines() if line.startswith("Tag=")]
    assert len(lines) == 3 * len(ticks)  # complete after SIGTERM: every tick, every series
    latency = read_table(hdr_run, "latency").to_pydict()
    totals = run_json(hdr_run)["totals"][0]
    start_ms = tick_times_us(ticks[0])[0] // 1000
    offsets = [(tick_times_us(t)[1] - start_ms * 1000) / 1e6 for t in measuring]
    # the readers take an interval whose start, as the log writes it (to the millisecond),
    # lies in the span: a margin of a whole 10 ms (the ticks are a second apart), never the
    # half millisecond of the rounding itself, which the span's own digits and the readers'
    # (start + base − start) arithmetic could tip either way (a CI run lost the last tick so)
    span = (offsets[0] - SPAN_MARGIN_S, offsets[-1] + SPAN_MARGIN_S)
    for tag, attr in SERIES:
        rows = log_processor(hdr_classpath, log, tag, tmp_path / f"{tag}.csv")
        # the whole run: every sample of the latency table, each tick's on its own row
        in_table = sum(c for k, c in zip(latency["kind"], latency["count"], strict=True)
                       if k == KINDS[tag])
        assert rows[-1][5] == in_table == _snapshot(ticks, attr).total
        assert in_table == (totals["consumed"] if tag == "e2e" else totals["produced"])
        assert len(rows) == len(ticks)
        for row, tick in zip(rows, ticks, strict=True):
            snap: HistogramSnapshot = getattr(tick, attr)
            assert row[1] == snap.total
            assert abs(row[0] - (tick_times_us(tick)[2] / 1000 - start_ms) / 1000) < 0.002
            if snap.total:
                check_percentile(row[2], snap, 50.0, java_rank)
                check_percentile(row[3], snap, 90.0, java_rank)
                assert row[4] == _bucket_at(snap, snap.total)[1]
                assert _bucket_at(snap, snap.total)[0] <= snap.max <= row[4]
        # the measuring phase, as the run's summary and the report take it
        rows = log_processor(hdr_classpath, log, tag, tmp_path / f"{tag}-measuring.csv", span)
        snap = _snapshot(measuring, attr)
        assert len(rows) == len(measuring) and rows[-1][5] == snap.total
        for column, p in zip((6, 8, 9), (50.0, 99.0, 99.9), strict=True):
            check_percentile(rows[-1][column], snap, p, java_rank)
        assert rows[-1][11] == _bucket_at(snap, snap.total)[1] >= snap.max


def test_the_python_reader_reads_the_same(hdr_run: Path) -> None:
    log = hdr_run / "hdr" / "redis.hlog"
    ticks = _ticks(hdr_run)
    measuring = [t for t in ticks if t.phase is Phase.MEASURING]
    start_ms = tick_times_us(ticks[0])[0] // 1000
    first = (tick_times_us(measuring[0])[1] - start_ms * 1000) / 1e6
    last = (tick_times_us(measuring[-1])[1] - start_ms * 1000) / 1e6
    for span, chosen in (((0.0, math.inf), ticks),
                         ((first - SPAN_MARGIN_S, last + SPAN_MARGIN_S), measuring)):
        reader = HistogramLogReader(str(log), HdrHistogram(1, MAX_VALUE, 3))
        assert reader.get_start_time_sec() == 0.0  # read from the header at the first interval
        sums = {tag: HdrHistogram(1, MAX_VALUE, 3) for tag, _ in SERIES}
        seen = 0
        while (h := reader.get_next_interval_histogram(*span)) is not None:
            sums[h.get_tag()].add(h)
            seen += 1
        assert seen == 3 * len(chosen)
        assert reader.get_start_time_sec() == start_ms / 1000
        for tag, attr in SERIES:
            snap = _snapshot(chosen, attr)
            assert sums[tag].get_total_count() == snap.total
            for p in PERCENTILES:
                check_percentile(sums[tag].get_value_at_percentile(p), snap, p, python_rank)


def test_report_writes_the_live_runs_log_from_the_run_files(hdr_run: Path, tmp_path: Path) -> None:
    done = run_cli(["report", "--hdr-log", str(hdr_run), "--out", str(tmp_path / "again")])
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(tmp_path / "again" / "redis.hlog")]
    assert (tmp_path / "again" / "redis.hlog").read_text() == (hdr_run / "hdr" / "redis.hlog").read_text()


def test_report_hdr_log_of_a_directory_that_is_no_run(tmp_path: Path) -> None:
    done = run_cli(["report", "--hdr-log", str(tmp_path / "nothing")])
    assert done.returncode != 0
    assert done.stderr.count("\n") == 1 and "not a run directory" in done.stderr
    assert "Traceback" not in done.stderr
