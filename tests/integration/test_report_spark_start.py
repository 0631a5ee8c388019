"""`run --report` in the dashboard on a local Redis: the report's Spark JVM starts only once the
run's measuring phase is over (never while it measures), and the report is written and the JVM
gone when the command ends."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow.parquet as pq

from tests.integration.conftest import run_json
from tests.integration.test_dashboard_exit import PtyRun


def _jvms(pid: int) -> list[psutil.Process]:
    try:
        return [p for p in psutil.Process(pid).children(recursive=True) if p.name() == "java"]
    except psutil.Error:
        return []


def _ended(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # (reaped by wait_exit)
    except psutil.NoSuchProcess:
        return True


def _started_at(pid: int) -> float:
    """A process's start as Unix seconds, to the kernel's 10 ms: now less its age (psutil's
    create_time adds its start to the boot time, which /proc gives in whole seconds)."""
    start_ticks = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19])
    uptime_s = float(Path("/proc/uptime").read_text().split()[0])
    return time.time() - (uptime_s - start_ticks / os.sysconf("SC_CLK_TCK"))


def _phase_starts(run_dir: Path) -> dict[str, float]:
    """Each phase's start (its phase event, the last one of a name), Unix seconds."""
    events = pq.read_table(run_dir / "events", columns=["time", "kind", "detail"]).to_pylist()
    return {e["detail"].partition(":")[0]: e["time"].timestamp()
            for e in events if e["kind"] == "phase"}


def test_spark_starts_after_the_measuring_phase_and_the_report_is_written(
        tmp_path: Path, no_leftover_redis: None) -> None:
    run_dir = tmp_path / "run"
    term = PtyRun(["run", "redis", "--rate", "2000", "--warmup", "2", "--duration", "4",
                   "--report", "--out", str(run_dir)])
    started: dict[int, float] = {}  # the Spark JVMs seen: pid -> the process's start time
    alive: list[float] = []  # when one was seen
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not _ended(term.pid):
            term.read_for(0.1)
            for jvm in _jvms(term.pid):
                try:
                    started.setdefault(jvm.pid, _started_at(jvm.pid))
                except (OSError, psutil.Error):  # gone meanwhile
                    continue
                alive.append(time.time())
        code = term.wait_exit(30)
    finally:
        term.close()
    assert code == 0, term.screen[-3000:]
    phases = _phase_starts(run_dir)
    measuring, drained = phases["measuring"], phases["draining"]
    assert drained - measuring > 3  # the run measured (4 s planned)
    assert started, "no Spark JVM was seen: the report was not computed by Spark here"
    assert all(at >= drained for at in started.values()), (started, measuring, drained)
    assert not [at for at in alive if measuring <= at <= drained]
    # the report, written after the run: it covers the measuring phase of this run
    report = (run_dir / "report" / "report.md").read_text()
    meta = run_json(run_dir)
    assert meta["run_id"] in report
    latency = pq.read_table(run_dir / "latency", columns=["count"],
                            filters=[("phase", "=", "measuring"), ("kind", "=", "e2e")])
    samples = int(np.sum(latency.column("count").to_numpy()))
    assert samples > 0 and f"{samples:,}" in report  # the e2e sample count the report rests on
    assert b"report: " in term.screen
    # the JVM goes with the command (it ends as its gateway closes: within seconds)
    for pid in started:
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(pid).wait(10)
