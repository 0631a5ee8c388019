"""The warm-up of a report's Spark session (analysis/warmup.py): its tiny run is a run the
report reads like any other (figures as written), the warm-up runs to its end in a session,
it is started only once the followed run's measuring phase is over, and a stop cancels it
part-way, leaving the session fit for the real report."""

from __future__ import annotations

import glob
import tempfile
import threading
import time
from pathlib import Path

import pytest

from analysis.compute import compute_report
from analysis.runs import load_runs
from analysis.warmup import MEASURING_TICKS, RATE, WarmUp, write_tiny_run
from loadgen.core.events import PhaseChange
from loadgen.core.ticks import Phase


def _leftovers() -> set[str]:
    return set(glob.glob(str(Path(tempfile.gettempdir()) / "streambench-warm-up-*")))


def test_the_tiny_run_reads_as_written(spark, tmp_path):
    data = compute_report(spark, load_runs([write_tiny_run(tmp_path / "run")]))
    (target,) = data.targets
    assert target.throughput.produced == RATE * MEASURING_TICKS
    assert target.throughput.consumed == RATE * MEASURING_TICKS
    assert abs(target.series["produce_msg_s"].mean - RATE) < 1e-9
    e2e = target.latency["e2e"]
    assert e2e.samples == 99 * MEASURING_TICKS and e2e.percentiles_ms[50.0] == 1.1  # middle bucket
    assert len(target.segments) == 2  # the rate change half-way splits the measuring phase


def test_a_warm_up_runs_to_its_end(spark):
    before = _leftovers()
    warm = WarmUp()
    warm.run(spark)
    assert warm.outcome == "done" and warm.wait(0)
    assert _leftovers() == before  # its tiny run is deleted


@pytest.mark.parametrize("after", [Phase.DRAINING, Phase.WRITING])
def test_started_once_the_run_has_measured(after: Phase) -> None:
    """Nothing starts in the run's start, warm-up or measuring phase: `start` is called once,
    as the run leaves its measuring phase (the drain, or the files for a run without one)."""
    started: list[int] = []
    warm = WarmUp(lambda: started.append(1))
    for phase in (Phase.STARTING, Phase.WARMUP, Phase.MEASURING):
        warm.follow(PhaseChange(phase, 0))
        assert not started and not warm.started
    warm.follow(PhaseChange(after, 0))
    assert started == [1] and warm.started
    for phase in (Phase.WRITING, Phase.REPORT, Phase.DONE):
        warm.follow(PhaseChange(phase, 0))
    assert started == [1]  # once


def test_not_started_for_a_run_that_never_measured():
    """A run stopped in its warm-up drains and writes its files, and gets no report: no Spark."""
    started: list[int] = []
    warm = WarmUp(lambda: started.append(1))
    for phase in (Phase.STARTING, Phase.WARMUP, Phase.DRAINING, Phase.WRITING, Phase.DONE):
        warm.follow(PhaseChange(phase, 0))
    assert not started and not warm.started


def test_stopped_before_it_starts():
    """The report was due before Spark was up: the warm-up then does nothing."""
    warm = WarmUp()
    warm.stop()
    assert warm.stopped
    warm.run(None)  # type: ignore[arg-type]  # (never touches the session)
    assert warm.outcome == "stopped"


def test_a_stop_cancels_the_jobs_under_way(spark, tmp_path):
    """Stopped as its first Spark job runs: it returns within seconds, marked stopped, and the
    same session then computes a report."""
    warm = WarmUp()
    thread = threading.Thread(target=warm.run, args=(spark,))
    thread.start()
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + 60
    while not tracker.getActiveJobsIds() and time.monotonic() < deadline and not warm.wait(0):
        time.sleep(0.01)
    assert not warm.wait(0), "the warm-up ended before a job of it was seen"
    stopped_at = time.monotonic()
    warm.stop()
    thread.join(30)
    assert not thread.is_alive()
    assert warm.outcome == "stopped"
    assert time.monotonic() - stopped_at < 10
    data = compute_report(spark, load_runs([write_tiny_run(tmp_path / "run")]))
    assert data.targets[0].throughput.produced == RATE * MEASURING_TICKS
