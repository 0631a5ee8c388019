"""Warming a report's Spark session before the report is due.

A fresh Spark JVM spends most of its first report loading and compiling its own code. A run
with `--report` (and a session's first run with it) therefore starts Spark ahead of its
report, and computes one report of a tiny run written here while the run drains, writes its
files and stops its brokers, so that the real report finds the JVM up and, when there was
time, its code loaded. The tiny run goes through the same steps (every table, a segment
split, the charts) and is deleted afterwards; nothing of it is shown.

Nothing of it runs while the run measures: a JVM takes both cores for several seconds as it
starts, and goes on compiling and collecting for a while after its work is done (started in
a run's warm-up and stopped before its measuring phase, it still raised the measuring phase's
end-to-end p99 on a local Redis at 5,000 msg/s). `WarmUp.follow`, subscribed to the run's
bus, starts Spark only when the run leaves its measuring phase, and never for a run that did
not measure; `WarmUp.stop()`, called when the report is due, cancels what is left of the
warm-up so that the report does not wait for it.
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


def _table(name: str, columns: dict[str, list[Any]]) -> pa.Table:
    schema = SCHEMAS[name]
    rows = len(next(iter(columns.values())))
    # a column left empty (none of the tiny run's rows has it, e.g. latency's node) is null
    return pa.table({f.name: columns.get(f.name) or [None] * rows for f in schema}, schema=schema)


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


# the phases of a run that come after its measuring phase
AFTER_MEASURING = frozenset({Phase.DRAINING, Phase.WRITING, Phase.REPORT, Phase.DONE})


class WarmUp:
    """A warm-up that another thread can stop: `run(spark)` in the thread the report will run
    in, `stop()` from anywhere (it does not wait); `follow`, subscribed to the run's bus, calls
    `start` once the run's measuring phase is over."""

    CANCEL_EVERY_S = 0.05
    CANCEL_FOR_S = 30.0

    def __init__(self, start: Callable[[], object] | None = None) -> None:
        """`start()`: starts Spark and this warm-up (in the reports' thread, without waiting for
        it); `follow` calls it once, when the followed run leaves its measuring phase."""
        self._start = start
        self._measured = False
        self._stop = threading.Event()
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._spark: SparkSession | None = None
        self.started = False  # start() was called
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
        """No more warm-up (the report is due): the Spark jobs under way are cancelled (again
        until the warm-up has returned, as one may start between two cancellations)."""
        with self._lock:
            if self._stop.is_set():
                return
            self._stop.set()
            spark = self._spark
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
        """A run's bus subscriber: calls `start` as the run leaves its measuring phase (the
        drain, the files, the brokers' stop follow), never before, and not at all for a run
        that ended before it measured."""
        if not isinstance(item, PhaseChange):
            return
        if item.phase == Phase.MEASURING:
            self._measured = True
            return
        if not self._measured or item.phase not in AFTER_MEASURING:
            return
        with self._lock:
            if self.started:
                return
            self.started = True
        if self._start is not None:
            self._start()

    def wait(self, timeout_s: float | None = None) -> bool:
        """True once run() has returned."""
        return self._done.wait(timeout_s)
