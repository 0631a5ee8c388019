"""The PySpark report job: reads one or many run directories and writes report.md.

The job is split in three layers so further outputs (charts, HTML, JSON, summary.parquet) can
reuse the same figures:

- `load_runs` checks the run directories (no Spark needed);
- `compute_report` runs the Spark aggregations and returns plain dataclasses (`ReportData`);
- `render_markdown` turns those into text.

`build_report` ties them together. Every figure covers the measuring phase only (after the
warm-up). Latency percentiles are exact over the histogram buckets (Spark's weighted
`percentile`); degradation is the OLS slope of per-second produce MB/s over time.

Run it as `spark-submit analysis/report.py RUN_DIR... --out DIR`; the master then comes from
spark-submit. The job uses no Python UDFs, so executors need no project code.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run as a script (spark-submit analysis/report.py)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import contextlib
import json
import math
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import reduce
from typing import Any

import pyarrow as pa
from py4j.protocol import Py4JError
from pyspark import SparkConf, SparkContext
from pyspark.errors import PySparkException
from pyspark.java_gateway import launch_gateway
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from analysis.schema import LATENCY_KINDS, SCHEMA_VERSION, SCHEMAS
from analysis.stats import SlopeCI, ols_slope_ci, theil_sen_slope
from loadgen.errors import OutputError, ReportError

MEASURING = "measuring"
LATENCY_PERCENTILES: tuple[float, ...] = (50.0, 75.0, 90.0, 95.0, 99.0, 99.9, 99.99)
RATE_PERCENTILES: tuple[float, ...] = (5.0, 50.0, 95.0)
LATENCY_TITLES = {
    "e2e": "End-to-end latency",
    "publish": "Publish latency",
    "delay": "Publish delay",
}

Progress = Callable[[str], None]

# -- runs on disk ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RunInfo:
    """One run directory and its run.json."""

    path: Path
    run_id: str
    meta: dict[str, Any]

    def table_dir(self, table: str) -> Path:
        return self.path / table

    def has_files(self, table: str) -> bool:
        d = self.table_dir(table)
        return d.is_dir() and any(_visible_parquet(d))

    @property
    def workload(self) -> dict[str, Any]:
        w = self.meta.get("workload")
        return w if isinstance(w, dict) else {}


def _visible_parquet(d: Path) -> Iterable[Path]:
    """Closed data files: what Spark reads (it skips names starting with '.' or '_')."""
    return (
        p for p in d.iterdir()
        if p.is_file() and p.suffix == ".parquet" and not p.name.startswith((".", "_"))
    )


def load_runs(run_dirs: Sequence[Path]) -> list[RunInfo]:
    """Check each directory is a run with ticks; read its run.json. Raises ReportError."""
    if not run_dirs:
        raise ReportError("no run directory given: name at least one RUN directory")
    runs: list[RunInfo] = []
    seen_paths: set[Path] = set()
    seen_ids: dict[str, Path] = {}
    for given in run_dirs:
        path = Path(given)
        if not path.is_dir():
            raise ReportError(f"{path} is not a run directory (no such directory)")
        resolved = path.resolve()
        if resolved in seen_paths:
            continue
        seen_paths.add(resolved)
        run_json = path / "run.json"
        if not run_json.is_file():
            raise ReportError(f"{path} is not a run directory (no run.json)")
        try:
            meta = json.loads(run_json.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ReportError(f"{run_json} cannot be read: {exc}") from None
        if not isinstance(meta, dict):
            raise ReportError(f"{run_json} is not a run description (expected a JSON object)")
        version = meta.get("schema_version")
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise ReportError(
                f"{path} has run-file schema version {version!r}; this streambench reads "
                f"version {SCHEMA_VERSION} and older: upgrade streambench"
            )
        run_id = str(meta.get("run_id") or path.name)
        if run_id in seen_ids:
            raise ReportError(
                f"run id {run_id} appears twice ({seen_ids[run_id]} and {path}): "
                "give each run once"
            )
        seen_ids[run_id] = path
        run = RunInfo(path=path, run_id=run_id, meta=meta)
        if not run.has_files("ticks"):
            raise ReportError(
                f"run {run_id} ({path}) has no ticks: it stopped before its first second "
                "was written"
            )
        runs.append(run)
    return runs


# -- Spark session --------------------------------------------------------------------------

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
            f"cannot start Spark with master {effective}: {_first_line(exc)}"
        ) from None
    spark.sparkContext.setLogLevel("ERROR")
    return spark, True


def _first_line(exc: BaseException) -> str:
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


# -- reading tables -------------------------------------------------------------------------

_ARROW_TO_SPARK: dict[str, T.DataType] = {
    "string": T.StringType(),
    "int64": T.LongType(),
    "int32": T.IntegerType(),
    "double": T.DoubleType(),
}


def spark_schema(schema: pa.Schema) -> T.StructType:
    """The Spark schema of a run table (all columns nullable, as Spark reads Parquet)."""
    fields = []
    for f in schema:
        if pa.types.is_timestamp(f.type):
            dtype: T.DataType = T.TimestampType()
        else:
            dtype = _ARROW_TO_SPARK[str(f.type)]
        fields.append(T.StructField(f.name, dtype, True))
    return T.StructType(fields)


def read_table(spark: SparkSession, runs: Sequence[RunInfo], table: str) -> DataFrame:
    """One table of every run as one DataFrame; run_id is taken from run.json. Missing or
    empty table directories give no rows."""
    schema = spark_schema(SCHEMAS[table])
    frames = [
        spark.read.schema(schema)
        .parquet(str(run.table_dir(table)))
        .withColumn("run_id", F.lit(run.run_id))
        for run in runs
        if run.has_files(table)
    ]
    if not frames:
        return spark.createDataFrame([], schema)
    return reduce(DataFrame.unionByName, frames)


# -- results --------------------------------------------------------------------------------


@dataclass
class Throughput:
    ticks: int
    seconds: float
    produced: int
    produced_bytes: int
    consumed: int
    consumed_bytes: int
    target_rate: float  # mean msg/s the producers aimed for (0 = as fast as possible)
    produce_msg_s: float
    produce_mb_s: float
    consume_msg_s: float
    consume_mb_s: float
    # per-second rates: "min", "p5", "p50", "p95", "max" -> msg/s
    produce_rate: dict[str, float] = field(default_factory=dict)
    consume_rate: dict[str, float] = field(default_factory=dict)


@dataclass
class LatencyStats:
    samples: int
    mean_ms: float
    min_ms: float
    max_ms: float
    percentiles_ms: dict[float, float]  # percentile (0-100) -> ms


@dataclass
class Degradation:
    points: int
    slope: float  # produce MB/s per minute
    ci_low: float
    ci_high: float
    stderr: float
    r2: float
    intercept: float
    mean_mb_s: float
    theil_sen: float

    @property
    def relative_pct_per_min(self) -> float:
        if not self.mean_mb_s or math.isnan(self.mean_mb_s):
            return float("nan")
        return self.slope / self.mean_mb_s * 100.0


@dataclass
class ResourceStats:
    lag_mean: float
    lag_max: float
    cpu_mean: float
    cpu_max: float
    memory_mean_mb: float
    memory_max_mb: float


@dataclass
class TargetReport:
    run_id: str
    target: str
    label: str  # column heading: the target, or "target (run)" when targets repeat
    throughput: Throughput
    latency: dict[str, LatencyStats]  # by kind: e2e, publish, delay
    degradation: Degradation
    resources: ResourceStats
    send_errors_measuring: int
    send_errors_total: int


@dataclass
class ReportData:
    runs: list[RunInfo]
    targets: list[TargetReport]


# -- Spark aggregations ---------------------------------------------------------------------

Key = tuple[str, str]  # (run_id, target)


def _key(row: Any) -> Key:
    return (str(row["run_id"]), str(row["target"]))


def _num(value: Any) -> float:
    return float("nan") if value is None else float(value)


def _rate(numerator: Column | str, denominator: Column | str) -> Column:
    num = F.col(numerator) if isinstance(numerator, str) else numerator
    den = F.col(denominator) if isinstance(denominator, str) else denominator
    return F.try_divide(num.cast("double"), den.cast("double"))


def _check_phases(ticks: DataFrame, runs: Sequence[RunInfo]) -> None:
    rows = {
        r["run_id"]: r
        for r in ticks.groupBy("run_id")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.sum(F.when(F.col("phase") == MEASURING, 1).otherwise(0)).alias("measuring"),
        )
        .collect()
    }
    for run in runs:
        row = rows.get(run.run_id)
        if row is None or not row["n"]:
            raise ReportError(
                f"run {run.run_id} ({run.path}) has no ticks: it stopped before its first "
                "second was written"
            )
        if not row["measuring"]:
            raise ReportError(
                f"run {run.run_id} ({run.path}) has no measuring phase: it ended during "
                "start-up or warm-up, so there is nothing to report"
            )


def _throughput(measuring: DataFrame) -> dict[Key, Throughput]:
    produce = _rate("produced", "interval_s")
    consume = _rate("consumed", "interval_s")
    fractions = [p / 100.0 for p in RATE_PERCENTILES]
    rows = (
        measuring.groupBy("run_id", "target")
        .agg(
            F.count(F.lit(1)).alias("ticks"),
            F.sum("interval_s").alias("seconds"),
            F.sum("produced").alias("produced"),
            F.sum("produced_bytes").alias("produced_bytes"),
            F.sum("consumed").alias("consumed"),
            F.sum("consumed_bytes").alias("consumed_bytes"),
            F.avg("target_rate").alias("target_rate"),
            F.min(produce).alias("p_min"),
            F.max(produce).alias("p_max"),
            F.percentile(produce, fractions).alias("p_pct"),
            F.min(consume).alias("c_min"),
            F.max(consume).alias("c_max"),
            F.percentile(consume, fractions).alias("c_pct"),
        )
        .collect()
    )
    out: dict[Key, Throughput] = {}
    for r in rows:
        seconds = _num(r["seconds"])

        def per_s(total: Any, scale: float = 1.0, seconds: float = seconds) -> float:
            return _num(total) / seconds / scale if seconds > 0 else float("nan")

        def dist(lo: Any, pct: Any, hi: Any) -> dict[str, float]:
            d = {"min": _num(lo)}
            for p, v in zip(RATE_PERCENTILES, pct or [None] * len(RATE_PERCENTILES),
                            strict=True):
                d[f"p{p:g}"] = _num(v)
            d["max"] = _num(hi)
            return d

        out[_key(r)] = Throughput(
            ticks=int(r["ticks"]),
            seconds=seconds,
            produced=int(r["produced"] or 0),
            produced_bytes=int(r["produced_bytes"] or 0),
            consumed=int(r["consumed"] or 0),
            consumed_bytes=int(r["consumed_bytes"] or 0),
            target_rate=_num(r["target_rate"]),
            produce_msg_s=per_s(r["produced"]),
            produce_mb_s=per_s(r["produced_bytes"], 1e6),
            consume_msg_s=per_s(r["consumed"]),
            consume_mb_s=per_s(r["consumed_bytes"], 1e6),
            produce_rate=dist(r["p_min"], r["p_pct"], r["p_max"]),
            consume_rate=dist(r["c_min"], r["c_pct"], r["c_max"]),
        )
    return out


def _latency(measuring: DataFrame, latency: DataFrame) -> dict[Key, dict[str, LatencyStats]]:
    # exact min / max of each kind, from the tick summaries; bucket values are clamped to them
    bounds = reduce(
        DataFrame.unionByName,
        [
            measuring.groupBy("run_id", "target").agg(
                F.lit(kind).alias("kind"),
                F.min(f"{kind}_min").alias("lo"),
                F.max(f"{kind}_max").alias("hi"),
            )
            for kind in LATENCY_KINDS
        ],
    )
    value = F.least(F.greatest(F.col("value_ns"), F.col("lo")), F.col("hi")).cast("double")
    fractions = [p / 100.0 for p in LATENCY_PERCENTILES]
    rows = (
        latency.where(F.col("phase") == MEASURING)
        .join(F.broadcast(bounds), ["run_id", "target", "kind"], "left")
        .withColumn("v", F.coalesce(value, F.col("value_ns").cast("double")))
        .groupBy("run_id", "target", "kind")
        .agg(
            F.sum("count").alias("n"),
            _rate(F.sum(F.col("v") * F.col("count")), F.sum("count")).alias("mean"),
            F.percentile("v", fractions, F.col("count")).alias("pct"),
            F.first("lo", ignorenulls=True).alias("lo"),
            F.first("hi", ignorenulls=True).alias("hi"),
            F.min("v").alias("v_min"),
            F.max("v").alias("v_max"),
        )
        .collect()
    )
    out: dict[Key, dict[str, LatencyStats]] = {}
    for r in rows:
        lo = r["lo"] if r["lo"] is not None else r["v_min"]
        hi = r["hi"] if r["hi"] is not None else r["v_max"]
        out.setdefault(_key(r), {})[r["kind"]] = LatencyStats(
            samples=int(r["n"] or 0),
            mean_ms=_num(r["mean"]) / 1e6,
            min_ms=_num(lo) / 1e6,
            max_ms=_num(hi) / 1e6,
            percentiles_ms={
                p: _num(v) / 1e6 for p, v in zip(LATENCY_PERCENTILES, r["pct"], strict=True)
            },
        )
    return out


def _degradation(measuring: DataFrame) -> dict[Key, Degradation]:
    points = measuring.select(
        "run_id",
        "target",
        (F.col("elapsed_s") / 60.0).alias("x"),
        (_rate("produced_bytes", "interval_s") / 1e6).alias("y"),
    ).where(F.col("y").isNotNull())
    rows = (
        points.groupBy("run_id", "target")
        .agg(
            F.regr_count("y", "x").alias("n"),
            F.regr_slope("y", "x").alias("slope"),
            F.regr_intercept("y", "x").alias("intercept"),
            F.regr_r2("y", "x").alias("r2"),
            F.regr_sxx("y", "x").alias("sxx"),
            F.regr_syy("y", "x").alias("syy"),
            F.regr_sxy("y", "x").alias("sxy"),
            F.avg("y").alias("mean_y"),
        )
        .collect()
    )
    # Theil–Sen cross-check on the driver: one point per second is small
    series: dict[Key, tuple[list[float], list[float]]] = {}
    for p in points.orderBy("run_id", "target", "x").collect():
        xs, ys = series.setdefault(_key(p), ([], []))
        xs.append(p["x"])
        ys.append(p["y"])
    out: dict[Key, Degradation] = {}
    for r in rows:
        n = int(r["n"] or 0)
        slope = _num(r["slope"])
        ci: SlopeCI = ols_slope_ci(slope, n, _num(r["sxx"]), _num(r["syy"]), _num(r["sxy"]))
        xs, ys = series.get(_key(r), ([], []))
        out[_key(r)] = Degradation(
            points=n,
            slope=slope,
            ci_low=ci.low,
            ci_high=ci.high,
            stderr=ci.stderr,
            r2=_num(r["r2"]),
            intercept=_num(r["intercept"]),
            mean_mb_s=_num(r["mean_y"]),
            theil_sen=theil_sen_slope(xs, ys),
        )
    return out


def _resources(measuring: DataFrame) -> dict[Key, ResourceStats]:
    memory = F.when(F.col("memory_bytes") > 0, F.col("memory_bytes") / 1e6)  # 0 = not measured
    rows = (
        measuring.groupBy("run_id", "target")
        .agg(
            F.avg("lag_total").alias("lag_mean"),
            F.max("lag_total").alias("lag_max"),
            F.avg("cpu_percent").alias("cpu_mean"),
            F.max("cpu_percent").alias("cpu_max"),
            F.avg(memory).alias("mem_mean"),
            F.max(memory).alias("mem_max"),
        )
        .collect()
    )
    return {
        _key(r): ResourceStats(
            lag_mean=_num(r["lag_mean"]),
            lag_max=_num(r["lag_max"]),
            cpu_mean=_num(r["cpu_mean"]),
            cpu_max=_num(r["cpu_max"]),
            memory_mean_mb=_num(r["mem_mean"]),
            memory_max_mb=_num(r["mem_max"]),
        )
        for r in rows
    }


def _send_errors(ticks: DataFrame) -> dict[Key, tuple[int, int]]:
    rows = (
        ticks.groupBy("run_id", "target")
        .agg(
            F.sum(F.when(F.col("phase") == MEASURING, F.col("send_errors")).otherwise(0)).alias(
                "measuring"
            ),
            F.sum("send_errors").alias("total"),
        )
        .collect()
    )
    return {_key(r): (int(r["measuring"] or 0), int(r["total"] or 0)) for r in rows}


def _empty_latency() -> LatencyStats:
    nan = float("nan")
    return LatencyStats(0, nan, nan, nan, {p: nan for p in LATENCY_PERCENTILES})


def _target_order(runs: Sequence[RunInfo], keys: Iterable[Key]) -> list[Key]:
    """Runs in the order given; targets in run.json order, then by name."""
    order: list[Key] = []
    remaining = set(keys)
    for run in runs:
        listed = []
        for t in run.meta.get("targets") or []:
            label = t.get("label") if isinstance(t, dict) else t
            if label is not None:
                listed.append(str(label))
        in_run = sorted(k for k in remaining if k[0] == run.run_id)
        ranked = sorted(
            in_run,
            key=lambda k: (listed.index(k[1]) if k[1] in listed else len(listed), k[1]),
        )
        order.extend(ranked)
        remaining.difference_update(ranked)
    return order + sorted(remaining)


def compute_report(
    spark: SparkSession, runs: Sequence[RunInfo], progress: Progress | None = None
) -> ReportData:
    """Every figure of the report, per (run, target), measuring phase only."""
    say = progress or (lambda _msg: None)
    say("reading runs")
    ticks = read_table(spark, runs, "ticks").cache()
    try:
        _check_phases(ticks, runs)
        measuring = ticks.where(F.col("phase") == MEASURING)
        say("throughput")
        throughput = _throughput(measuring)
        say("latency percentiles")
        latency = _latency(measuring, read_table(spark, runs, "latency"))
        say("degradation rate")
        degradation = _degradation(measuring)
        say("resources and lag")
        resources = _resources(measuring)
        errors = _send_errors(ticks)
    finally:
        ticks.unpersist()

    keys = _target_order(runs, throughput)
    names = [k[1] for k in keys]
    targets = []
    for key in keys:
        run_id, target = key
        label = target if names.count(target) == 1 else f"{target} ({run_id})"
        lat = latency.get(key, {})
        measuring_errors, total_errors = errors.get(key, (0, 0))
        targets.append(
            TargetReport(
                run_id=run_id,
                target=target,
                label=label,
                throughput=throughput[key],
                latency={k: lat.get(k, _empty_latency()) for k in LATENCY_KINDS},
                degradation=degradation[key],
                resources=resources[key],
                send_errors_measuring=measuring_errors,
                send_errors_total=total_errors,
            )
        )
    return ReportData(runs=list(runs), targets=targets)


# -- markdown -------------------------------------------------------------------------------


def fmt(value: float | int | None, digits: int | None = None) -> str:
    """A number for a report cell: n/a for missing, thousands separators, about four
    significant digits (fixed notation) unless `digits` decimals are asked for."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if isinstance(value, int):
        return f"{value:,}"
    if digits is not None:
        return f"{value:,.{digits}f}"
    a = abs(value)
    if a >= 1000:
        return f"{value:,.0f}"
    if a == 0:
        return "0.000"
    places = min(max(3 - math.floor(math.log10(a)), 0), 9)
    text = f"{value:.{places}f}"
    if places and len(text.lstrip("-").replace(".", "").lstrip("0")) > 4:
        text = f"{value:.{places - 1}f}"  # rounding carried into a new digit (999.96)
    return text


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], text_columns: int = 1) -> str:
    """A markdown table; the first `text_columns` columns left-aligned, the rest right."""

    def esc(cell: str) -> str:
        return cell.replace("|", "\\|")

    align = ["---" if i < text_columns else "---:" for i in range(len(headers))]
    lines = [
        "| " + " | ".join(esc(h) for h in headers) + " |",
        "| " + " | ".join(align) + " |",
    ]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


Row = tuple[str, list[str]]  # metric name, one cell per target


def _metric_table(targets: Sequence[TargetReport], rows: Sequence[Row]) -> str:
    headers = ["", *(t.label for t in targets)]
    return _table(headers, [[name, *cells] for name, cells in rows])


def _whole(value: float) -> str:
    """A count held as float (NaN when missing)."""
    return "n/a" if math.isnan(value) else fmt(round(value))


def _runs_table(runs: Sequence[RunInfo], data: ReportData) -> str:
    rows = []
    for run in runs:
        w = run.workload
        labels = [t.label for t in data.targets if t.run_id == run.run_id]
        rate = w.get("producerRate")
        rows.append(
            [
                run.run_id,
                str(w.get("name", "")),
                str(run.meta.get("started") or run.meta.get("started_at") or ""),
                ("max" if rate == 0 else fmt(rate)) if rate is not None else "",
                fmt(w["messageSize"]) if isinstance(w.get("messageSize"), int) else "",
                fmt(w["partitionsPerTopic"]) if isinstance(w.get("partitionsPerTopic"), int)
                else "",
                ", ".join(labels),
            ]
        )
    return _table(
        ["run", "workload", "started", "rate (msg/s)", "message (B)", "partitions", "targets"],
        rows,
        text_columns=3,
    )


def throughput_rows(targets: Sequence[TargetReport]) -> list[Row]:
    tps = [t.throughput for t in targets]
    rows: list[Row] = [
        ("measured time (s)", [fmt(x.seconds, 1) for x in tps]),
        ("target rate (msg/s)", ["max" if x.target_rate == 0 else fmt(x.target_rate)
                                 for x in tps]),
        ("messages produced", [fmt(x.produced) for x in tps]),
        ("messages consumed", [fmt(x.consumed) for x in tps]),
        ("produce mean (msg/s)", [fmt(x.produce_msg_s) for x in tps]),
        ("produce mean (MB/s)", [fmt(x.produce_mb_s) for x in tps]),
        ("consume mean (msg/s)", [fmt(x.consume_msg_s) for x in tps]),
        ("consume mean (MB/s)", [fmt(x.consume_mb_s) for x in tps]),
    ]
    stats = ("min", *(f"p{p:g}" for p in RATE_PERCENTILES), "max")
    for side in ("produce", "consume"):
        dists = [x.produce_rate if side == "produce" else x.consume_rate for x in tps]
        for stat in stats:
            rows.append((f"{side} per second {stat} (msg/s)",
                         [fmt(d.get(stat, float("nan"))) for d in dists]))
    return rows


def latency_rows(targets: Sequence[TargetReport], kind: str) -> list[Row]:
    lats = [t.latency[kind] for t in targets]
    rows: list[Row] = [
        ("samples", [fmt(x.samples) for x in lats]),
        ("mean", [fmt(x.mean_ms) for x in lats]),
        ("min", [fmt(x.min_ms) for x in lats]),
    ]
    rows += [(f"p{p:g}", [fmt(x.percentiles_ms[p]) for x in lats]) for p in LATENCY_PERCENTILES]
    rows.append(("max", [fmt(x.max_ms) for x in lats]))
    return rows


def degradation_rows(targets: Sequence[TargetReport]) -> list[Row]:
    degs = [t.degradation for t in targets]

    def ci(d: Degradation) -> str:
        return "n/a" if math.isnan(d.ci_low) else f"{fmt(d.ci_low)} … {fmt(d.ci_high)}"

    return [
        ("slope (MB/s per min)", [fmt(d.slope) for d in degs]),
        ("95 % CI (MB/s per min)", [ci(d) for d in degs]),
        ("relative (% of mean per min)", [fmt(d.relative_pct_per_min) for d in degs]),
        ("R²", [fmt(d.r2, 3) for d in degs]),
        ("Theil–Sen slope (MB/s per min)", [fmt(d.theil_sen) for d in degs]),
        ("points (s)", [fmt(d.points) for d in degs]),
    ]


def resource_rows(targets: Sequence[TargetReport]) -> list[Row]:
    res = [t.resources for t in targets]
    return [
        ("consumer lag mean (msg)", [fmt(r.lag_mean) for r in res]),
        ("consumer lag max (msg)", [_whole(r.lag_max) for r in res]),
        ("CPU mean (%)", [fmt(r.cpu_mean) for r in res]),
        ("CPU max (%)", [fmt(r.cpu_max) for r in res]),
        ("memory mean (MB)", [fmt(r.memory_mean_mb) for r in res]),
        ("memory max (MB)", [fmt(r.memory_max_mb) for r in res]),
    ]


def error_rows(targets: Sequence[TargetReport]) -> list[Row]:
    return [
        ("send errors (measuring)", [fmt(t.send_errors_measuring) for t in targets]),
        ("send errors (whole run)", [fmt(t.send_errors_total) for t in targets]),
    ]


def render_markdown(data: ReportData) -> str:
    targets = data.targets
    run_ids = ", ".join(r.run_id for r in data.runs)
    workloads = sorted({str(r.workload.get("name")) for r in data.runs if r.workload.get("name")})
    title = f"# streambench report: {run_ids}"
    if workloads:
        title += f" ({', '.join(workloads)})"
    out = [
        title,
        "",
        _runs_table(data.runs, data),
        "",
        "All figures cover the measuring phase only (after warm-up). MB = 10^6 bytes of "
        "payload. Latency percentiles are exact over histogram buckets of at most 0.1 % "
        "relative width.",
        "",
        "## Throughput",
        "",
        _metric_table(targets, throughput_rows(targets)),
        "",
    ]
    for kind in LATENCY_KINDS:
        out += [
            f"## {LATENCY_TITLES[kind]} (ms)",
            "",
            _metric_table(targets, latency_rows(targets, kind)),
            "",
        ]
    out += [
        "## Degradation rate",
        "",
        "OLS slope of per-second produce throughput against time; negative means the "
        "platform slowed down during the run.",
        "",
        _metric_table(targets, degradation_rows(targets)),
        "",
        "## Resources and lag",
        "",
        _metric_table(targets, resource_rows(targets)),
        "",
        "## Errors",
        "",
        _metric_table(targets, error_rows(targets)),
        "",
    ]
    return "\n".join(out)


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.inprogress")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None


def _prepare_out_dir(out_dir: Path) -> None:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputError(
            f"cannot write report directory {out_dir}: it exists and is not a directory"
        ) from None
    except OSError as exc:
        raise OutputError(
            f"cannot write report directory {out_dir}: {exc.strerror or exc}"
        ) from None


def default_out_dir(run_dirs: Sequence[Path]) -> Path:
    """Where the report goes without --out: report/ inside the run, or ./report for several."""
    return Path(run_dirs[0]) / "report" if len(run_dirs) == 1 else Path("report")


def build_report(
    run_dirs: list[Path],
    out_dir: Path | None = None,
    master: str | None = None,
    progress: Progress | None = None,
) -> Path:
    """Read the runs, compute the report with Spark and write out_dir/report.md (its path is
    returned). out_dir None means `default_out_dir(run_dirs)`. Raises ReportError for bad runs
    or a failed Spark job, OutputError when out_dir cannot be written.

    When this call starts Spark, the JVM's own output goes to out_dir/spark.log, which is kept
    only when Spark fails."""
    say = progress or (lambda _msg: None)
    say("checking runs")
    runs = load_runs(run_dirs)
    out_dir = Path(out_dir) if out_dir is not None else default_out_dir(run_dirs)
    _prepare_out_dir(out_dir)
    log_path = out_dir / "spark.log"
    keep_log = False
    say("starting Spark")
    try:
        try:
            spark, created = spark_session(master, log_path)
        except ReportError:
            keep_log = True
            raise
        try:
            data = compute_report(spark, runs, say)
        except (PySparkException, Py4JError) as exc:
            keep_log = log_path.exists() and log_path.stat().st_size > 0
            where = f" (details in {log_path})" if keep_log else ""
            raise ReportError(f"the Spark job failed: {_first_line(exc)}{where}") from None
        finally:
            if created:
                spark.stop()
    finally:
        if not keep_log:
            log_path.unlink(missing_ok=True)
    say("writing report.md")
    path = out_dir / "report.md"
    _write_text(path, render_markdown(data))
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="report.py", description="Write report.md for one or more streambench runs."
    )
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="report directory (default: report/ inside the run; ./report "
                             "for several runs)")
    parser.add_argument("--master", default=None,
                        help="Spark master (default: spark-submit's, else local[*])")
    args = parser.parse_args(argv)

    def progress(msg: str) -> None:
        print(f"report: {msg}", file=sys.stderr, flush=True)

    try:
        path = build_report(args.runs, args.out, args.master, progress)
    except (ReportError, OutputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
