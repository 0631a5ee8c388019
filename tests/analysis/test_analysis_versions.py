"""Runs of different run-file schema versions read together.

A synthetic next-version run is a run of today's version rewritten as a later writer would
write it: an extra column in its tables and `schema_version` one higher (with
`min_reader_version: 1`, since only columns were added). Today's reader reports it alongside
today's runs; a reader that knows the new column gets it from the new run and null from the
old one."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from analysis.compute import compute_report
from analysis.runs import load_runs, read_table
from analysis.schema import MIN_READER_VERSION, SCHEMA_VERSION, SCHEMAS
from analysis.sink import write_run_json
from loadgen.core.errors import ReportError
from tests.analysis.synthetic_runs import SyntheticRun

pytestmark = pytest.mark.spark

EXTRA = pa.field("gc_pause_ms", pa.float64(), nullable=True)
NEXT = SCHEMA_VERSION + 1


def _as_version_2(v1: Path, v2: Path, run_id: str, min_reader: int = 1) -> None:
    """Copy a run, adding EXTRA to its ticks and latency files and bumping its version."""
    shutil.copytree(v1, v2)
    for table in ("ticks", "latency"):
        for f in sorted((v2 / table).glob("part-*.parquet")):
            data = pq.read_table(f)
            extra = pc.multiply(pc.cast(data["seq"], pa.float64()), 0.5)
            data = data.append_column(EXTRA, extra)
            meta = dict(data.schema.metadata or {})
            meta[b"streambench.schema_version"] = str(NEXT).encode()
            codec = pq.read_metadata(f).row_group(0).column(0).compression
            pq.write_table(data.replace_schema_metadata(meta), f, compression=codec)
    doc = json.loads((v2 / "run.json").read_text())
    doc.update(schema_version=NEXT, min_reader_version=min_reader, run_id=run_id)
    (v2 / "run.json").write_text(json.dumps(doc))


def test_version_2_run_reads_alongside_version_1(spark, run_b: SyntheticRun,
                                                 tmp_path: Path) -> None:
    v2 = tmp_path / "run-v2"
    _as_version_2(run_b.run_dir, v2, "run-v2")
    assert "gc_pause_ms" in pq.read_schema(next((v2 / "ticks").glob("part-*.parquet"))).names
    runs = load_runs([run_b.run_dir, v2])
    data = compute_report(spark, runs)
    old, new = data.targets
    assert (old.label, new.label) == ("alpha (run-b)", "alpha (run-v2)")
    # the same measurements, whatever the file version (the seconds are a sum of floats,
    # whose order follows how Spark splits the files: equal to the last bit or two)
    assert dataclasses.asdict(new.throughput) == pytest.approx(
        dataclasses.asdict(old.throughput), rel=1e-12)
    for kind in old.latency:
        assert new.latency[kind] == old.latency[kind]
    assert new.series["produce_mb_s"].trend == old.series["produce_mb_s"].trend

    # a reader that knows the new column: null for the old run, the values for the new one
    future = SCHEMAS["ticks"].append(EXTRA)
    rows = read_table(spark, runs, "ticks", future).select("run_id", "seq", "gc_pause_ms")
    by_run: dict[str, list] = {}
    for r in rows.collect():
        by_run.setdefault(r["run_id"], []).append((r["seq"], r["gc_pause_ms"]))
    assert all(v is None for _, v in by_run["run-b"])
    assert all(v == seq * 0.5 for seq, v in by_run["run-v2"])
    assert len(by_run["run-b"]) == len(by_run["run-v2"]) == len(run_b.ticks)


def test_run_needing_a_newer_reader_is_refused(run_b: SyntheticRun, tmp_path: Path) -> None:
    v2 = tmp_path / "run-v2-only"
    _as_version_2(run_b.run_dir, v2, "run-v2-only", min_reader=NEXT)
    with pytest.raises(ReportError) as exc:
        load_runs([run_b.run_dir, v2])
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg == (f"{v2} has run-file schema version {NEXT} (readable from version {NEXT}); "
                   f"this streambench reads version {SCHEMA_VERSION}: upgrade streambench")


def test_run_json_says_which_reader_it_needs(run_b: SyntheticRun, tmp_path: Path) -> None:
    doc = json.loads((run_b.run_dir / "run.json").read_text())
    # 2 to 5 only added columns and tables; 6 added the latency table's per-node rows, which
    # a reader before 6 would count into the target's histograms: a run with load nodes needs
    # reader 6, a run without them (run_b) is read by every reader since 1
    assert (SCHEMA_VERSION, MIN_READER_VERSION) == (6, 6)
    assert (doc["schema_version"], doc["min_reader_version"]) == (SCHEMA_VERSION, 1)
    clustered = tmp_path / "clustered"
    write_run_json(clustered, {**doc, "cluster_placement": {"nodes": [{"node": "n1"}]}})
    assert json.loads((clustered / "run.json").read_text())["min_reader_version"] == 6
    meta = pq.read_schema(next((run_b.run_dir / "ticks").glob("part-*.parquet"))).metadata
    assert meta[b"streambench.min_reader_version"] == b"6"


def test_a_run_before_the_latency_node_column_reads_the_same(spark, run_b: SyntheticRun,
                                                               tmp_path: Path) -> None:
    """run_b rewritten as version 5 wrote it (no `node` column in latency): the same
    latency figures, the column read as null."""
    v5 = tmp_path / "run-v5"
    shutil.copytree(run_b.run_dir, v5)
    for f in sorted((v5 / "latency").glob("part-*.parquet")):
        data = pq.read_table(f)
        assert data["node"].null_count == len(data)  # a local run: the target's rows alone
        pq.write_table(data.drop_columns(["node"]), f)
    doc = json.loads((v5 / "run.json").read_text())
    doc.update(schema_version=5, min_reader_version=1, run_id="run-v5")
    (v5 / "run.json").write_text(json.dumps(doc))
    assert "node" not in pq.read_schema(next((v5 / "latency").glob("part-*.parquet"))).names
    old, new = compute_report(spark, load_runs([v5, run_b.run_dir])).targets
    assert old.latency and all(old.latency[k] == new.latency[k] for k in new.latency)
