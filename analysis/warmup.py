"""Warming a report's Spark session before the report is due.

A fresh Spark JVM spends most of its first report loading and compiling its own code: on an
idle 2-core host the first report of a 60 s run takes about 15 s, the same report again in the
same session under 6 s. A dashboard session that starts Spark while the run goes on
(`--report`) therefore also computes one report of a tiny run written here, so the real
report after the run only pays for its own data. The tiny run goes through the same steps
(every table, a segment split, the charts) and is deleted afterwards; nothing of it is shown.

The warm-up takes both cores for several seconds, so it must not overlap the run's measuring
phase: `WarmUp.stop()` cancels its Spark jobs and skips what is left of it. Following a run,
it is stopped STOP_LEAD_S before the run's warm-up phase ends (cancelling takes about half a
second), or as soon as the run is past its warm-up.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from analysis.schema import LATENCY_KINDS, SCHEMAS, SUMMARY_STATS
from analysis.sink import write_run_json
from loadgen.core.events import PhaseChange
from loadgen.core.ticks import Phase

if TYPE_CHECKING:  # Spark is imported by the report thread, not by whoever makes a WarmUp
    from pyspark.sql import SparkSession

RUN_ID = "warm-up"
TARGET = "warm-up"
START_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z
WARMUP_TICKS = 2
MEASURING_TICKS = 20
RATE = 100
SIZE = 100
# a few latency buckets per kind and tick (bucket index, value ns); the report reads the
# values as recorded, so they need not be a histogram's exact boundaries
BUCKETS = ((1000, 1_000_000), (1010, 1_100_000), (1100, 2_000_000))
STOP_LEAD_S = 1.5


def _table(name: str, columns: dict[str, list[Any]]) -> pa.Table:
    schema = SCHEMAS[name]
    rows = len(next(iter(columns.values())))
    return pa.table({f.name: columns.get(f.name, [None] * rows) for f in schema}, schema=schema)


def write_tiny_run(run_dir: Path) -> Path:
    """A run of one target, WARMUP_TICKS + MEASURING_TICKS ticks at RATE msg/s, with latency
    buckets, broker figures and a rate change half-way through the measuring phase."""
    ticks: dict[str, list[Any]] = {f.name: [] for f in SCHEMAS["ticks"]}
    latency: dict[str, list[Any]] = {f.name: [] for f in SCHEMAS["latency"]}
    for seq in range(WARMUP_TICKS + MEASURING_TICKS):
        phase = "warm-up" if seq < WARMUP_TICKS else "measuring"
        time_us = START_US + (seq + 1) * 1_000_000
        row: dict[str, Any] = {
            "run_id": RUN_ID, "target": TARGET, "seq": seq, "time": time_us, "interval_s": 1.0,
            "phase": phase, "elapsed_s": float(seq + 1), "produced": RATE,
            "produced_bytes": RATE * SIZE, "consumed": RATE, "consumed_bytes": RATE * SIZE,
            "send_errors": 0, "target_rate": float(RATE), "produced_total": RATE * (seq + 1),
            "consumed_total": RATE * (seq + 1), "lag_total": seq % 3, "cpu_percent": 5.0,
            "memory_bytes": 50_000_000, "disk_read_bytes": 0, "disk_write_bytes": RATE * SIZE,
            "net_rx_bytes": RATE * SIZE, "net_tx_bytes": RATE * SIZE,
            "loadgen_cpu_percent": 3.0, "loadgen_loop_lag_ms": 0.1,
        }
        per_bucket = RATE // len(BUCKETS)
        count = per_bucket * len(BUCKETS)
        for kind in LATENCY_KINDS:
            stats = {"count": count, "sum": sum(v for _, v in BUCKETS) * per_bucket,
                     "min": BUCKETS[0][1], "p50": float(BUCKETS[1][1]),
                     "p99": float(BUCKETS[2][1]), "p999": float(BUCKETS[2][1]),
                     "max": BUCKETS[2][1]}
            for stat, _ in SUMMARY_STATS:
                row[f"{kind}_{stat}"] = stats[stat]
            for bucket, value in BUCKETS:
                for name, v in (("run_id", RUN_ID), ("target", TARGET), ("seq", seq),
                                ("time", time_us), ("phase", phase), ("kind", kind),
                                ("bucket", bucket), ("value_ns", value), ("count", per_bucket)):
                    latency[name].append(v)
        for name in ticks:
            ticks[name].append(row.get(name))
    change_us = START_US + (WARMUP_TICKS + MEASURING_TICKS // 2) * 1_000_000 + 500_000
    events: dict[str, list[Any]] = {"run_id": [RUN_ID], "target": [TARGET], "time": [change_us],
              "phase": ["measuring"], "kind": ["rate"], "detail": [f"{RATE} msg/s"]}
    broker: dict[str, list[Any]] = {"run_id": [RUN_ID] * 2, "target": [TARGET] * 2,
              "seq": [WARMUP_TICKS, WARMUP_TICKS + 1],
              "time": [START_US + (WARMUP_TICKS + 1) * 1_000_000] * 2,
              "phase": ["measuring"] * 2, "name": ["partition.0.produced"] * 2,
              "value": [float(RATE)] * 2}
    for name, columns in (("ticks", ticks), ("latency", latency), ("events", events),
                          ("broker", broker)):
        (run_dir / name).mkdir(parents=True, exist_ok=True)
        pq.write_table(_table(name, columns), run_dir / name / "part-00000.parquet")
    write_run_json(run_dir, {
        "run_id": RUN_ID, "started": "2026-01-01T00:00:00+00:00",
        "ended": "2026-01-01T00:00:22+00:00",
        "workload": {"name": RUN_ID, "messageSize": SIZE, "producerRate": RATE,
                     "partitionsPerTopic": 1, "subscriptionsPerTopic": 1},
        "targets": [{"label": TARGET, "platform": "warm-up"}],
    })
    return run_dir


def warm_up(spark: SparkSession, stopped: Callable[[], bool] = lambda: False) -> None:
    """One report of a tiny run in `spark` (and its charts drawn), every output discarded;
    the charts are skipped once `stopped()`."""
    # imported here: the report modules import matplotlib, which takes a moment to load
    from analysis.charts import render_charts
    from analysis.compute import compute_report
    from analysis.runs import load_runs

    where = Path(tempfile.mkdtemp(prefix="streambench-warm-up-"))
    try:
        run_dir = write_tiny_run(where / RUN_ID)
        data = compute_report(spark, load_runs([run_dir]))
        if not stopped():
            render_charts(data)
    finally:
        shutil.rmtree(where, ignore_errors=True)


class WarmUp:
    """A warm-up that another thread can stop: `run(spark)` in the thread the report will run
    in, `stop()` from anywhere (it does not wait), or `follow` subscribed to the run's bus."""

    CANCEL_EVERY_S = 0.05
    CANCEL_FOR_S = 30.0

    def __init__(self, warmup_s: float | None = None) -> None:
        """`warmup_s`: the followed run's warm-up phase, which the warm-up ends before."""
        self._warmup_s = warmup_s
        self._timer: threading.Timer | None = None
        self._stop = threading.Event()
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._spark: SparkSession | None = None
        self.outcome = "not started"  # then "done", "stopped" or "failed: …"

    def run(self, spark: SparkSession) -> None:
        """Warm `spark` up unless stopped before; any failure only ends the warm-up (the report
        itself says what is wrong with Spark when it runs)."""
        with self._lock:
            if self._stop.is_set():
                self.outcome = "stopped"
                self._done.set()
                return
            self._spark = spark
        try:
            warm_up(spark, self._stop.is_set)
            self.outcome = "stopped" if self._stop.is_set() else "done"
        except Exception as exc:
            self.outcome = "stopped" if self._stop.is_set() else f"failed: {type(exc).__name__}"
        finally:
            self._done.set()

    def stop(self) -> None:
        """No more warm-up: the Spark jobs under way are cancelled (again until the warm-up has
        returned, as one may start between two cancellations)."""
        with self._lock:
            if self._stop.is_set():
                return
            self._stop.set()
            spark = self._spark
            if self._timer is not None:
                self._timer.cancel()
        if spark is None or self._done.is_set():
            return
        threading.Thread(target=self._cancel, args=(spark,), name="warm-up-cancel",
                         daemon=True).start()

    def _cancel(self, spark: SparkSession) -> None:
        waited = 0.0
        while not self._done.is_set() and waited < self.CANCEL_FOR_S:
            try:
                spark.sparkContext.cancelAllJobs()
            except Exception:
                return  # the session is going away
            self._done.wait(self.CANCEL_EVERY_S)
            waited += self.CANCEL_EVERY_S

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def follow(self, item: object) -> None:
        """A run's bus subscriber: stops the warm-up STOP_LEAD_S before the run's warm-up phase
        ends, and at the latest when the run leaves its start and warm-up phases."""
        if not isinstance(item, PhaseChange) or item.phase == Phase.STARTING:
            return
        if item.phase != Phase.WARMUP or self._warmup_s is None:
            self.stop()
            return
        with self._lock:
            if self._timer is not None or self._stop.is_set():
                return
            self._timer = threading.Timer(max(0.0, self._warmup_s - STOP_LEAD_S), self.stop)
            self._timer.daemon = True
            self._timer.start()

    def wait(self, timeout_s: float | None = None) -> bool:
        """True once run() has returned."""
        return self._done.wait(timeout_s)
