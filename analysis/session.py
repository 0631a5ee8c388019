"""The Spark side of the report: the session (local by default, or the master given or set by
spark-submit) and the progress of its jobs, polled from SparkContext.statusTracker."""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from py4j.protocol import Py4JError
from pyspark import SparkConf, SparkContext
from pyspark.errors import PySparkException
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from loadgen.core.errors import ReportError

Progress = Callable[[str], None]

_QUIET_LOG4J2 = """\
# Errors only. Spark's own loggers get an explicit level equal to the root's, so its shell
# logging set-up keeps that level and has nothing to announce.
status = error
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.spark.name = org.apache.spark
logger.spark.level = error
logger.sparkproject.name = org.sparkproject
logger.sparkproject.level = error
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = error
logger.parquet.name = org.apache.parquet
logger.parquet.level = error
logger.netty.name = io.netty
logger.netty.level = error
"""


def _first_log_line(path: Path | None) -> str:
    """The first telling line the JVM start-up left in its log (shell prefixes removed)."""
    if path is None:
        return ""
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines()]
    except OSError:
        return ""
    for line in lines:
        if line and not line.startswith("WARNING: Using incubator"):
            return re.sub(r"^\S+: line \d+: ", "", line)[:300]
    return ""


def _launch_gateway(log_path: Path | None) -> None:
    """Start the Spark JVM with error-level logging, its output going to log_path (so nothing
    lands on a terminal a dashboard is drawing on), unless a gateway already exists, as under
    spark-submit, whose own logging configuration then applies."""
    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        SparkContext._ensure_initialized()
        return
    fd, name = tempfile.mkstemp(prefix="streambench-log4j2-", suffix=".properties")
    log = None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(_QUIET_LOG4J2)
        conf = SparkConf(loadDefaults=False)
        conf.set("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{name}")
        popen_kwargs: dict[str, Any] = {}
        if log_path is not None:
            log = open(log_path, "ab")  # noqa: SIM115 - handed to the JVM process
            popen_kwargs = {"stdout": log, "stderr": log}
        try:
            gateway = launch_gateway(conf, popen_kwargs)
        except Exception as exc:  # Java missing or broken: pyspark says "gateway exited"
            detail = _first_log_line(log_path) or str(exc).splitlines()[0]
            raise ReportError(
                f"cannot start Spark ({detail}): install a Java 17 or newer runtime "
                "(java on PATH or JAVA_HOME set)"
            ) from None
        SparkContext._ensure_initialized(gateway=gateway)
    finally:
        if log is not None:
            log.close()
        os.unlink(name)


def spark_session(
    master: str | None = None, log_path: Path | None = None
) -> tuple[SparkSession, bool]:
    """The session the report runs in, and whether it was created here (then the caller stops
    it). An active session is reused when no master is asked for. The master is set only when
    given or when nothing (spark-submit, spark-defaults.conf) configured one. When this call
    starts the JVM, its output goes to log_path (None: inherited stderr)."""
    active = SparkSession.getActiveSession()
    if active is not None and master is None:
        return active, False
    _launch_gateway(log_path)
    configured = SparkConf().get("spark.master", None)
    effective = master or configured or "local[*]"
    builder = (
        SparkSession.builder.appName("streambench-report")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        # run tables are many small files (one per table every few seconds): let one task
        # read many of them rather than one task per few files
        .config("spark.sql.files.openCostInBytes", str(256 * 1024))
        .config("spark.sql.session.timeZone", "UTC")
    )
    if master or configured is None:
        builder = builder.master(effective)
    if effective.startswith("local"):
        builder = builder.config("spark.driver.bindAddress", "127.0.0.1").config(
            "spark.driver.host", "127.0.0.1"
        )
    try:
        spark = builder.getOrCreate()
    except (PySparkException, Py4JError) as exc:
        raise ReportError(
            f"cannot start Spark with master {effective}: {first_line(exc)}"
        ) from None
    spark.sparkContext.setLogLevel("ERROR")
    return spark, True


def stop_active() -> None:
    """Stop the session active in this thread, if any (one started ahead of a report)."""
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()


def first_line(exc: BaseException) -> str:
    """The telling line of a Spark error: the Java exception's message when there is one,
    without the exception class name."""
    text = str(exc)
    java = getattr(exc, "java_exception", None)
    if java is not None:
        with contextlib.suppress(Exception):  # the gateway may be gone
            text = str(java.toString())
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    line = lines[0] if lines else type(exc).__name__
    head, sep, rest = line.partition(": ")
    if sep and "." in head and " " not in head:  # "org.apache.spark.SparkException: …"
        line = rest
    return line[:300]


# -- progress -------------------------------------------------------------------------------


FINISH_WAIT_S = 3.0  # the longest a step's last progress line waits for its last stage


class JobProgress:
    """Names the steps of the report job and tells how far Spark has got with each.

    Each step's jobs run in a job group of their own. A daemon thread polls the status tracker
    every `interval` seconds and reports `STEP: Spark stages DONE/TOTAL, tasks DONE/TOTAL`
    when a stage starts or ends, and every `task_every` seconds while only tasks advance; a
    step that completes ends with one such line. Stages a job skips (their shuffle output
    already exists) count as done, without tasks, once the job has succeeded. The total can
    grow while a step runs: adaptive execution submits its stages one after another."""

    def __init__(self, sc: SparkContext, say: Progress, interval: float = 0.5,
                 task_every: float = 5.0) -> None:
        self._sc = sc
        self._say = say
        self._interval = interval
        self._task_every = task_every
        self._prefix = f"streambench-report-{os.getpid()}-{id(self)}"
        self._lock = threading.Lock()
        self._steps = 0
        self._group: str | None = None
        self._name = ""
        self._shown: tuple[int, int, int, int] | None = None
        self._shown_at = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="spark-progress", daemon=True)

    def __enter__(self) -> JobProgress:
        self._thread.start()
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        self._stop.set()
        self._thread.join()
        if exc_type is None:
            self._finish()
        with contextlib.suppress(Py4JError, AttributeError):
            self._sc._jsc.clearJobGroup()

    def step(self, name: str) -> None:
        """Start a step: report the end of the previous one, then this one's name."""
        self._finish()
        with self._lock:
            self._steps += 1
            self._group = f"{self._prefix}-{self._steps}"
            self._name = name
            self._shown = None
        self._sc.setJobGroup(self._group, f"streambench report: {name}")
        self._say(name)

    def _finish(self) -> None:
        with self._lock:
            group = self._group
        if group is None:
            return
        with contextlib.suppress(Py4JError):
            # the step's jobs have returned, but the status tracker hears of their last stage
            # through Spark's listener bus, which a busy machine delays (a step once ended on
            # "stages 3/4"): it is given a moment to catch up
            deadline = time.monotonic() + FINISH_WAIT_S
            figures = self._figures(group)
            while figures[0] < figures[1] and time.monotonic() < deadline:
                time.sleep(0.05)
                figures = self._figures(group)
            self._show(group, figures, final=True)

    def _poll(self) -> None:
        while not self._stop.wait(self._interval):
            with self._lock:
                group = self._group
            if group is None:
                continue
            try:
                figures = self._figures(group)
            except Py4JError:  # the JVM is going away
                return
            self._show(group, figures)

    def _show(self, group: str, figures: tuple[int, int, int, int], final: bool = False) -> None:
        done, total, tasks_done, tasks = figures
        now = time.monotonic()
        with self._lock:
            if group != self._group or not total or figures == self._shown:
                return
            stages_moved = self._shown is None or self._shown[:2] != (done, total)
            if not (final or stages_moved or now - self._shown_at >= self._task_every):
                return
            self._shown, self._shown_at, name = figures, now, self._name
        self._say(f"{name}: Spark stages {done}/{total}, tasks {tasks_done}/{tasks}")

    def _figures(self, group: str) -> tuple[int, int, int, int]:
        """Stages done, stages known, tasks done, tasks known in one job group."""
        tracker = self._sc.statusTracker()
        seen: set[int] = set()
        done = tasks_done = tasks = 0
        for job_id in tracker.getJobIdsForGroup(group):
            job = tracker.getJobInfo(job_id)
            if job is None:
                continue
            for stage_id in job.stageIds:
                if stage_id in seen:
                    continue
                seen.add(stage_id)
                info = tracker.getStageInfo(stage_id)
                complete = info is not None and 0 < info.numTasks <= info.numCompletedTasks
                if complete or job.status != "SUCCEEDED":
                    if info is not None:
                        tasks += info.numTasks
                        tasks_done += info.numCompletedTasks
                    done += complete
                else:  # skipped: its output came from an earlier stage
                    done += 1
        return done, len(seen), tasks_done, tasks
