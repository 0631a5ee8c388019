"""Run directories on disk: finding them (globs), checking them, and reading their tables.

Tables are read by column name with the reader's schema (`analysis.schema`): a column the
reader knows but an older run lacks reads as null, and a column a newer run added that the
reader does not know is left out. Runs of different schema versions therefore read together
as long as each run's `min_reader_version` is one this reader meets (docs/run-format.md).
"""

from __future__ import annotations

import glob
from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from analysis.journal import journal_rows, table_files
from analysis.runmeta import read_run_meta
from analysis.schema import SCHEMAS
from loadgen.core.errors import ReportError

_GLOB_CHARS = frozenset("*?[")
_FALSE = frozenset({"false", "0", "no", "off"})


@dataclass(frozen=True)
class RunInfo:
    """One run directory and its run.json."""

    path: Path
    run_id: str
    meta: dict[str, Any]

    def table_dir(self, table: str) -> Path:
        return self.path / table

    def has_files(self, table: str) -> bool:
        """Whether the table has rows on disk: a closed Parquet file, or a journal left by a
        killed run (analysis.journal)."""
        parquet, journals = table_files(self.table_dir(table))
        return bool(parquet) or any(p.is_file() and p.stat().st_size > 0 for p in journals)

    @property
    def workload(self) -> dict[str, Any]:
        w = self.meta.get("workload")
        return w if isinstance(w, dict) else {}

    def target_meta(self, target: str) -> dict[str, Any]:
        """The run.json entry of one target ({} when the run does not list it)."""
        for t in self.meta.get("targets") or []:
            if isinstance(t, dict) and str(t.get("label")) == target:
                return t
        return {}

    def target_labels(self) -> list[str]:
        labels = []
        for t in self.meta.get("targets") or []:
            label = t.get("label") if isinstance(t, dict) else t
            if label is not None:
                labels.append(str(label))
        return labels

    def persistent(self, target: str) -> bool:
        """False when the target's config or options say its topics are non-persistent
        (Pulsar `persistent: false`): such a target keeps no data on disk."""
        meta = self.target_meta(target)
        for key in ("config", "options"):
            section = meta.get(key)
            if isinstance(section, dict) and "persistent" in section:
                return str(section["persistent"]).strip().lower() not in _FALSE
        return True


def expand_run_args(args: Sequence[Path | str]) -> list[Path]:
    """Run directories from the command line: a name with *, ? or [ that is not itself an
    existing path is a glob pattern (expanded here: not every shell does it), sorted, and
    only directories count. Raises ReportError for a pattern that matches no directory."""
    out: list[Path] = []
    for arg in args:
        text = str(arg)
        if _GLOB_CHARS.isdisjoint(text) or Path(text).exists():
            out.append(Path(text))
            continue
        matches = sorted(Path(m) for m in glob.glob(text) if Path(m).is_dir())
        if not matches:
            raise ReportError(f"no run directory matches {text}")
        out.extend(matches)
    return out


def _read_meta(path: Path) -> dict[str, Any]:
    return read_run_meta(path, ReportError)


def load_runs(run_dirs: Sequence[Path]) -> list[RunInfo]:
    """Check each directory is a run with ticks; read its run.json. Raises ReportError."""
    if not run_dirs:
        raise ReportError("no run directory given: name at least one RUN directory")
    runs: list[RunInfo] = []
    seen_paths: set[Path] = set()
    seen_ids: dict[str, Path] = {}
    for given in run_dirs:
        path = Path(given)
        try:
            is_dir = path.is_dir()
        except OSError as exc:  # e.g. a name too long for the file system
            raise ReportError(f"{str(path)[:100]} is not a run directory ({exc.strerror or exc})") from None
        if not is_dir:
            raise ReportError(f"{path} is not a run directory (no such directory)")
        resolved = path.resolve()
        if resolved in seen_paths:
            continue
        seen_paths.add(resolved)
        meta = _read_meta(path)
        run_id = str(meta.get("run_id") or path.name)
        if run_id in seen_ids:
            raise ReportError(
                f"run id {run_id} appears twice ({seen_ids[run_id]} and {path}): "
                "give each run once"
            )
        seen_ids[run_id] = path
        run = RunInfo(path=path, run_id=run_id, meta=meta)
        if not run.has_files("ticks"):
            failed = meta.get("failed")
            raise ReportError(
                f"run {run_id} ({path}) failed before its first second: {failed}" if failed else
                f"run {run_id} ({path}) has no ticks: it stopped before its first second "
                "was written"
            )
        runs.append(run)
    return runs


# -- reading tables -------------------------------------------------------------------------

_ARROW_TO_SPARK: dict[str, T.DataType] = {
    "string": T.StringType(),
    "int64": T.LongType(),
    "int32": T.IntegerType(),
    "double": T.DoubleType(),
    "bool": T.BooleanType(),
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


def read_table(
    spark: SparkSession, runs: Sequence[RunInfo], table: str, schema: pa.Schema | None = None
) -> DataFrame:
    """One table of every run as one DataFrame with the reader's columns (`schema`, by
    default this version's): Spark's Parquet reader matches columns by name, gives null for
    a column a file lacks and skips columns a file has beyond the schema. The rows of a
    journal a killed run left (analysis.journal) are read with pyarrow and join them. run_id
    is taken from run.json. Missing or empty table directories give no rows."""
    arrow_schema = schema if schema is not None else SCHEMAS[table]
    sschema = spark_schema(arrow_schema)
    frames = []
    for run in runs:
        parquet, journals = table_files(run.table_dir(table))
        parts = [spark.read.schema(sschema).parquet(str(run.table_dir(table)))] if parquet else []
        if journals:
            rows = journal_rows(run.table_dir(table),
                                pa.schema([f.with_nullable(True) for f in arrow_schema]))
            if rows.num_rows:
                parts.append(spark.createDataFrame(rows, schema=sschema))
        frames += [f.withColumn("run_id", F.lit(run.run_id)) for f in parts]
    if not frames:
        # built in the JVM from typed nulls: no Python worker, so it runs on any cluster
        return spark.range(0).select(
            *(F.lit(None).cast(f.dataType).alias(f.name) for f in sschema.fields)
        )
    return reduce(DataFrame.unionByName, frames)
