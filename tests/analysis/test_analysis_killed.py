"""A real run killed outright (SIGKILL) in its measuring phase: the journal keeps its ticks
up to the last one, and replay and the report read them."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import psutil

from analysis.compute import compute_report
from analysis.report import write_outputs
from analysis.runs import load_runs
from loadgen.core.ticks import Phase, Tick
from tests.conftest import CliRun
from tui.bench.recording import load_recording, read_table

KILLED_AFTER_S = 10.0


def test_a_run_killed_10_s_into_measuring_keeps_those_ticks(spark: Any, tmp_path: Path) -> None:
    run_dir = tmp_path / "killed"
    cli = CliRun(["run", "redis:runtime=local", "--headless", "--rate", "500", "--warmup", "2",
                  "--duration", "60", "--out", str(run_dir)])
    try:
        cli.wait_for_line("measuring", 90)
        measuring_from = time.monotonic()
        while time.monotonic() - measuring_from < KILLED_AFTER_S:
            cli.wait_for_line("measuring", 10)
    finally:
        started: list[psutil.Process] = []
        with contextlib.suppress(psutil.NoSuchProcess):  # its broker and workers among them
            started = psutil.Process(cli.proc.pid).children(recursive=True)
        os.killpg(cli.proc.pid, signal.SIGKILL)  # the CLI leads its own session
        cli.finish(timeout_s=30)
        for child in started:
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
    ticks = read_table(run_dir, "ticks")
    measured = sorted(s for s, p in zip(ticks["seq"].to_pylist(), ticks["phase"].to_pylist(),
                                        strict=True) if p == Phase.MEASURING.value)
    # one tick a second for 10 s; the one being handed over when the kill came may be lost
    assert len(measured) >= KILLED_AFTER_S - 1
    assert measured == list(range(measured[0], measured[0] + len(measured)))  # no gap
    assert any(p.name.startswith("_journal-") for p in (run_dir / "ticks").iterdir())

    rec = load_recording(run_dir)
    assert not rec.complete
    assert sorted(i.seq for i in rec.items
                  if isinstance(i, Tick) and i.phase is Phase.MEASURING) == measured

    data = compute_report(spark, load_runs([run_dir]))
    (target,) = data.targets
    assert target.throughput.ticks == len(measured)
    assert target.latency["e2e"].samples > 0
    report = write_outputs(data, tmp_path / "report", ("md",)).read_text()
    assert "start-up or warm-up" not in report
