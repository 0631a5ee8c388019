"""The Parquet sink: rotation, atomic rename, round trip through pyarrow, error lines."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent import futures
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import analysis.sink as sink_module
from analysis.schema import LATENCY_KINDS, SCHEMA_VERSION, SCHEMAS
from analysis.sink import SMALL_FILE_ROWS, ParquetSink, _repeated, write_run_json
from loadgen.core.errors import OutputError
from loadgen.core.events import PhaseChange, RunEvent
from loadgen.core.histogram import HistogramSnapshot, bucket_value, percentiles
from loadgen.core.ticks import Phase, Resources, Tick
from tests.analysis.synthetic_runs import T0_NS, FakeClock, TargetModel, write_synthetic_run

TABLES = ("ticks", "latency", "lag", "broker", "events", "raw")
MODELS = {
    "alpha": TargetModel(mb_s=lambda m: 40.0 - 2.0 * m),
    "beta": TargetModel(mb_s=lambda m: 20.0, e2e_median_ns=8e5),
}


def _visible(table_dir: Path) -> list[Path]:
    return sorted(p for p in table_dir.iterdir() if not p.name.startswith((".", "_")))


def _hidden(table_dir: Path) -> list[Path]:
    return sorted(p for p in table_dir.iterdir() if p.name.startswith("."))


def rows_time(t) -> object:
    """A tick's time as a row read back holds it (microseconds, UTC)."""
    return pa.scalar(t.time_ns // 1000, pa.timestamp("us", tz="UTC")).as_py()


def _read(table_dir: Path) -> pa.Table:
    return ds.dataset(table_dir, format="parquet").to_table()


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory):
    run_dir = tmp_path_factory.mktemp("sink") / "run"
    run = write_synthetic_run(
        run_dir, "run-sink", MODELS, warmup_s=2, measuring_s=6, draining_s=1,
        samples_per_tick=200, rotate_s=2.0,
    )
    return run


def test_rotation_writes_closed_files_only(small_run) -> None:
    run_dir = small_run.run_dir
    # 9 seconds, rotation every 2 s (at seconds 2, 4, 6, 8) plus the final flush on close
    ticks = _visible(run_dir / "ticks")
    assert [p.name for p in ticks] == [f"part-{i:05d}.parquet" for i in range(5)]
    for table in TABLES:
        table_dir = run_dir / table
        assert _hidden(table_dir) == []
        files = _visible(table_dir)
        assert files, table
        for f in files:
            data = f.read_bytes()
            assert data[:4] == b"PAR1" and data[-4:] == b"PAR1", f
            meta = pq.read_metadata(f)
            assert meta.num_rows > 0
            # zstd, but snappy for a small file (zstd's set-up per column costs more there)
            codec = "ZSTD" if meta.num_rows >= SMALL_FILE_ROWS else "SNAPPY"
            assert meta.row_group(0).column(0).compression == codec, (f, meta.num_rows)
            assert meta.schema.to_arrow_schema().metadata[b"streambench.schema_version"] == (
                str(SCHEMA_VERSION).encode()
            )


def test_round_trip_counts_and_values(small_run) -> None:
    run_dir = small_run.run_dir
    ticks = _read(run_dir / "ticks")
    assert ticks.num_rows == len(small_run.ticks) == 18
    assert ticks.schema.field("time").type == pa.timestamp("us", tz="UTC")
    assert ticks.schema.equals(SCHEMAS["ticks"], check_metadata=False)

    by_key = {(t.target, t.seq): t for t in small_run.ticks}
    rows = ticks.to_pylist()
    for row in rows:
        t = by_key[(row["target"], row["seq"])]
        assert row["run_id"] == "run-sink"
        time_us = pc.cast(pa.array([row["time"]], pa.timestamp("us", tz="UTC")), pa.int64())
        assert time_us[0].as_py() == t.time_ns // 1000
        assert row["phase"] == t.phase.value
        assert row["produced"] == t.produced
        assert row["produced_bytes"] == t.produced_bytes
        assert row["interval_s"] == t.interval_s
        assert row["lag_total"] == t.lag.total
        assert row["cpu_percent"] == t.resources.cpu_percent
        for kind, snap in (("e2e", t.e2e_latency), ("publish", t.publish_latency),
                           ("delay", t.publish_delay)):
            assert row[f"{kind}_count"] == snap.total == 200
            assert row[f"{kind}_min"] == snap.min
            assert row[f"{kind}_max"] == snap.max
            assert row[f"{kind}_sum"] == snap.sum
            p50, p99, p999 = percentiles(snap, [50, 99, 99.9])
            assert row[f"{kind}_p50"] == pytest.approx(p50)
            assert row[f"{kind}_p99"] == pytest.approx(p99)
            assert row[f"{kind}_p999"] == pytest.approx(p999)

    latency = _read(run_dir / "latency")
    assert latency.schema.field("time").type == pa.timestamp("us", tz="UTC")
    np.testing.assert_array_equal(
        latency["value_ns"].to_numpy(), bucket_value(latency["bucket"].to_numpy())
    )
    for target in MODELS:
        for kind in LATENCY_KINDS:
            mask = pc.and_(pc.equal(latency["target"], target), pc.equal(latency["kind"], kind))
            assert pc.sum(latency.filter(mask)["count"]).as_py() == 9 * 200

    raw = _read(run_dir / "raw")
    assert raw.num_rows == 2 * 3 * 9 * 200
    measuring = raw.filter(
        pc.and_(
            pc.and_(pc.equal(raw["target"], "alpha"), pc.equal(raw["kind"], "e2e")),
            pc.equal(raw["phase"], "measuring"),
        )
    )
    np.testing.assert_array_equal(
        np.sort(measuring["value_ns"].to_numpy()), np.sort(small_run.raw_values("alpha", "e2e"))
    )

    # rows written a group per tick (latency buckets, lag, broker counters) carry their own
    # tick's keys and values, whichever files and rotations they fell in
    buckets: dict[tuple[str, int, str], dict[int, int]] = {}
    for row in latency.to_pylist():
        t = by_key[(row["target"], row["seq"])]
        assert (row["run_id"], row["phase"]) == ("run-sink", t.phase.value)
        assert row["time"] == rows_time(t)
        buckets.setdefault((row["target"], row["seq"], row["kind"]), {})[row["bucket"]] = (
            row["count"])
    for t in small_run.ticks:
        for kind, snap in (("e2e", t.e2e_latency), ("publish", t.publish_latency),
                           ("delay", t.publish_delay)):
            assert buckets[(t.target, t.seq, kind)] == dict(
                zip(snap.index.tolist(), snap.count.tolist(), strict=True))

    lag = _read(run_dir / "lag")
    assert lag.num_rows == 18 * 3
    assert lag.schema.field("partition").type == pa.int32()
    assert set(lag["source"].to_pylist()) == {"test lag"}
    lags: dict[tuple[str, int], dict[int, int]] = {}
    for row in lag.to_pylist():
        t = by_key[(row["target"], row["seq"])]
        assert (row["phase"], row["time"]) == (t.phase.value, rows_time(t))
        lags.setdefault((row["target"], row["seq"]), {})[row["partition"]] = row["lag"]
    assert lags == {(t.target, t.seq): t.lag.per_partition for t in small_run.ticks}
    broker = _read(run_dir / "broker")
    assert broker.num_rows == 18 * 2
    assert set(broker["name"].to_pylist()) == {"bytes_in", "requests"}
    counters: dict[tuple[str, int], dict[str, float]] = {}
    for row in broker.to_pylist():
        t = by_key[(row["target"], row["seq"])]
        assert (row["phase"], row["time"]) == (t.phase.value, rows_time(t))
        counters.setdefault((row["target"], row["seq"]), {})[row["name"]] = row["value"]
    assert counters == {(t.target, t.seq): t.broker for t in small_run.ticks}

    events = _read(run_dir / "events").sort_by("time").to_pylist()
    phases = [e["detail"].split(":")[0] for e in events if e["kind"] == "phase"]
    assert phases == ["warm-up", "measuring", "draining", "done"]
    assert all(e["target"] == "" for e in events if e["kind"] == "phase")
    (fault,) = [e for e in events if e["kind"] == "fault"]
    assert fault["detail"] == "pause broker 1 s"
    assert fault["phase"] == "measuring"


def _tick(seq: int, **kw: object) -> Tick:
    empty = HistogramSnapshot.empty()
    base: dict[str, object] = dict(
        target="t", seq=seq, time_ns=T0_NS + seq * 10**9, interval_s=1.0,
        phase=Phase.MEASURING, elapsed_s=float(seq), produced=10, produced_bytes=100,
        consumed=10, consumed_bytes=100, send_errors=0, target_rate=10.0,
        publish_latency=empty, publish_delay=empty, e2e_latency=empty, lag=None,
        resources=Resources(),
    )
    base.update(kw)
    return Tick(**base)  # type: ignore[arg-type]


def _wide(buckets: int) -> HistogramSnapshot:
    """A histogram with `buckets` buckets of one value each (as many latency rows)."""
    index = np.arange(buckets, dtype=np.int64)
    return HistogramSnapshot(index, np.ones(buckets, dtype=np.int64), 0, buckets - 1,
                             int(index.sum()))


def test_small_files_are_snappy_and_large_ones_zstd(tmp_path: Path) -> None:
    sink = ParquetSink(tmp_path / "run", "r", rotate_s=60.0)
    sink(_tick(0, e2e_latency=_wide(SMALL_FILE_ROWS)))
    sink.close()
    (latency,) = _visible(tmp_path / "run" / "latency")
    (ticks,) = _visible(tmp_path / "run" / "ticks")
    assert pq.read_metadata(latency).num_rows == SMALL_FILE_ROWS
    assert {pq.read_metadata(latency).row_group(0).column(i).compression
            for i in range(pq.read_metadata(latency).num_columns)} == {"ZSTD"}
    assert pq.read_metadata(ticks).row_group(0).column(0).compression == "SNAPPY"
    assert _read(tmp_path / "run" / "latency")["count"].to_pylist() == [1] * SMALL_FILE_ROWS


def test_latency_buckets_are_delta_encoded_and_read_back_as_written(tmp_path: Path) -> None:
    """A latency row's bucket, value and count are written with Parquet's delta encoding (no
    dictionary: they seldom repeat), the key columns with a dictionary as in every table."""
    sink = ParquetSink(tmp_path / "run", "r", rotate_s=60.0)
    sink(_tick(0, e2e_latency=_wide(3000)))
    sink.close()
    (latency,) = _visible(tmp_path / "run" / "latency")
    meta = pq.read_metadata(latency).row_group(0)
    encodings = {meta.column(i).path_in_schema: set(meta.column(i).encodings)
                 for i in range(meta.num_columns)}
    for name in ("bucket", "value_ns", "count"):
        assert "DELTA_BINARY_PACKED" in encodings[name]
        assert "RLE_DICTIONARY" not in encodings[name]
    assert "RLE_DICTIONARY" in encodings["target"] and "RLE_DICTIONARY" in encodings["seq"]
    table = _read(tmp_path / "run" / "latency")
    assert table["bucket"].to_pylist() == list(range(3000))
    assert table["value_ns"].to_pylist() == bucket_value(np.arange(3000)).tolist()
    assert table["count"].to_pylist() == [1] * 3000


def test_a_long_table_is_written_before_its_time(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A table that reaches ROTATE_ROWS rows is written at once (memory stays bounded at high
    rates), with the other tables' rows of the same rotation."""
    monkeypatch.setattr(sink_module, "ROTATE_ROWS", 500)
    clock = FakeClock()
    sink = ParquetSink(tmp_path / "run", "r", rotate_s=60.0, clock=clock)
    sink(_tick(0, e2e_latency=_wide(300)))
    sink.wait()
    assert _visible(tmp_path / "run" / "latency") == []  # 300 rows: no file yet
    sink(_tick(1, e2e_latency=_wide(300)))
    sink.wait()
    assert [pq.read_metadata(f).num_rows for f in _visible(tmp_path / "run" / "latency")] == [600]
    assert [pq.read_metadata(f).num_rows for f in _visible(tmp_path / "run" / "ticks")] == [2]
    sink(_tick(2, e2e_latency=_wide(300)))
    sink.close()
    assert [pq.read_metadata(f).num_rows for f in _visible(tmp_path / "run" / "latency")] == [
        600, 300]


def test_missing_values_are_null(tmp_path: Path) -> None:
    sink = ParquetSink(tmp_path / "run", "r", rotate_s=60.0)
    sink(_tick(0))
    sink.close()
    (row,) = _read(tmp_path / "run" / "ticks").to_pylist()
    assert row["lag_total"] is None
    assert row["cpu_percent"] is None  # NaN from the collector becomes null
    assert row["e2e_count"] == 0 and row["e2e_sum"] == 0
    assert row["e2e_p50"] is None and row["e2e_min"] is None and row["e2e_max"] is None
    assert not (tmp_path / "run" / "raw").exists()  # raw off: no raw table
    assert _visible(tmp_path / "run" / "latency") == []
    assert _visible(tmp_path / "run" / "lag") == []


def test_close_is_idempotent_and_final(tmp_path: Path) -> None:
    clock = FakeClock()
    sink = ParquetSink(tmp_path / "run", "r", rotate_s=5.0, clock=clock)
    sink(PhaseChange(Phase.MEASURING, T0_NS))
    sink(_tick(0))
    assert _visible(tmp_path / "run" / "ticks") == []  # nothing before the first rotation
    sink.close()
    written = sink.files_written
    assert written == 2  # ticks and events
    sink.close()
    clock.now += 100
    sink(_tick(1))
    sink(RunEvent(T0_NS, "t", "warning", "late"))
    sink.close()
    assert sink.files_written == written
    assert _read(tmp_path / "run" / "ticks").num_rows == 1


@pytest.mark.parametrize("background", [True, False])
def test_rotation_follows_the_clock(tmp_path: Path, background: bool) -> None:
    clock = FakeClock()
    sink = ParquetSink(tmp_path / "run", "r", rotate_s=5.0, clock=clock, background=background)
    for seq in range(12):
        sink(_tick(seq))
        clock.now += 1.0
    sink.wait()
    # the ticks arriving at 5 s and 10 s trigger a rotation and are written with those before
    files = _visible(tmp_path / "run" / "ticks")
    assert [pq.read_metadata(f).num_rows for f in files] == [6, 5]
    sink.close()
    assert _read(tmp_path / "run" / "ticks").num_rows == 12


def test_a_long_run_does_not_keep_a_handle_per_file_written(tmp_path: Path) -> None:
    """Every rotation hands files to the writer thread; those written are forgotten at the next
    rotation, so the sink's memory does not grow with the length of the run."""
    clock = FakeClock()
    sink = ParquetSink(tmp_path / "run", "r", rotate_s=1.0, clock=clock)
    for seq in range(200):
        sink(_tick(seq))
        clock.now += 1.0
        futures.wait(list(sink._pending))  # the writer keeps up, as between rotations of a run
    assert len(sink._pending) <= len(SCHEMAS)  # the last rotation's files at most
    sink.close()
    assert _read(tmp_path / "run" / "ticks").num_rows == 200


def test_reopened_run_does_not_overwrite_parts(tmp_path: Path) -> None:
    for start in (0, 1):
        sink = ParquetSink(tmp_path / "run", "r")
        sink(_tick(start))
        sink.close()
    names = [p.name for p in _visible(tmp_path / "run" / "ticks")]
    assert names == ["part-00000.parquet", "part-00001.parquet"]
    assert sorted(_read(tmp_path / "run" / "ticks")["seq"].to_pylist()) == [0, 1]


def test_unwritable_run_dir_is_one_clear_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(OutputError) as exc:
        ParquetSink(blocker, "r")
    msg = str(exc.value)
    assert str(blocker) in msg and "not a directory" in msg and "\n" not in msg

    with pytest.raises(OutputError) as exc:
        ParquetSink(blocker / "run", "r")
    msg = str(exc.value)
    assert str(blocker / "run") in msg and "\n" not in msg


def test_write_run_json(tmp_path: Path) -> None:
    run_dir = tmp_path / "new" / "run"
    path = write_run_json(run_dir, {"run_id": "r1", "workload": {"name": "w"}, "host": Path("/")})
    assert path == run_dir / "run.json"
    doc = json.loads(path.read_text())
    assert doc["schema_version"] == SCHEMA_VERSION
    assert doc["run_id"] == "r1" and doc["workload"] == {"name": "w"} and doc["host"] == "/"
    assert [p.name for p in run_dir.iterdir()] == ["run.json"]  # no temporary left behind
    write_run_json(run_dir, {"run_id": "r1", "schema_version": 99, "ended": True})
    doc = json.loads(path.read_text())
    assert doc["schema_version"] == SCHEMA_VERSION and doc["ended"] is True

    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OutputError, match="not a directory"):
        write_run_json(blocker, {"run_id": "r"})


@pytest.mark.parametrize("background", [True, False], ids=["writer-thread", "in-line"])
def test_write_failure_is_reported(tmp_path: Path, background: bool) -> None:
    clock = FakeClock()
    sink = ParquetSink(tmp_path / "run", "r", rotate_s=1.0, clock=clock, background=background)
    ticks_dir = tmp_path / "run" / "ticks"
    ticks_dir.rmdir()
    ticks_dir.write_text("in the way")  # the table directory is gone: writing must fail
    sink(PhaseChange(Phase.MEASURING, T0_NS))  # a row of the events table

    def second_tick() -> None:
        clock.now += 1.0
        sink(_tick(1))

    # the tick's rows go to the journal first: its failure is reported by the first call
    # that finds it failed (that one in-line, else the next item, or the close, which fails
    # at the file too)
    raised = []
    for step in (lambda: sink(_tick(0)), second_tick, sink.close):
        try:
            step()
        except OutputError as exc:
            raised.append(str(exc))
    assert raised, "the write failure was not reported"
    assert raised[0].startswith(f"cannot write {ticks_dir / '_journal-00000.arrows'}: ")
    assert all("\n" not in msg for msg in raised)
    # another table's file of the same rotation is written all the same
    assert [p.name for p in _visible(tmp_path / "run" / "events")] == ["part-00000.parquet"]
    sink.close()  # closed: nothing more to report


@pytest.mark.parametrize("type_", [pa.string(), pa.int64(), pa.timestamp("us", tz="UTC"),
                                   pa.int32(), pa.float64()])
def test_shared_values_are_repeated_row_for_row(type_: pa.DataType) -> None:
    """A group's shared values (run, target, seq, time...) repeated over its rows: built from
    buffers for strings, by numpy for 64-bit integers and timestamps, by pyarrow otherwise;
    each equals the plain list of values, including empty groups and non-ASCII text."""
    rng = np.random.default_rng(7)
    for _ in range(50):
        k = int(rng.integers(1, 12))
        lengths = rng.integers(0, 40, size=k)
        if pa.types.is_string(type_):
            values: list = ["é" * int(rng.integers(0, 3)) + str(v)
                            for v in rng.integers(0, 10**6, size=k)]
        elif pa.types.is_floating(type_):
            values = [float(v) for v in rng.normal(size=k)]
        else:
            values = [int(v) for v in rng.integers(-2**31, 2**31 - 1, size=k)]
        got = _repeated(values, lengths, type_)
        got.validate(full=True)
        assert got.type == type_
        want = pa.array([v for v, n in zip(values, lengths, strict=True) for _ in range(n)],
                        type=type_)
        assert got.equals(want)


def test_writing_files_does_not_import_pyarrow_compute(tmp_path: Path) -> None:
    """The writer thread builds its files without pyarrow.compute: its import costs about
    70 ms of CPU, which a run would pay during its measuring phase (a child process, so that
    this test's own imports do not count)."""
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from tests.analysis.synthetic_runs import write_synthetic_run, TargetModel\n"
        f"write_synthetic_run(Path({str(tmp_path / 'run')!r}), 'r1', "
        "{'alpha': TargetModel(mb_s=lambda m: 10.0)}, measuring_s=6)\n"
        "print('pyarrow.compute' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False"]
    assert ds.dataset(tmp_path / "run" / "latency").count_rows() > 0


def test_every_tick_is_in_the_journal_until_its_file_is_written(tmp_path: Path) -> None:
    """Each tick's rows reach the table's journal at once; a rotation writes them as a file
    and removes that journal; a run reopened after a kill leaves the journal's number alone."""
    from analysis.journal import journal_rows, table_files

    clock = FakeClock()
    ticks_dir = tmp_path / "run" / "ticks"
    sink = ParquetSink(tmp_path / "run", "r", rotate_s=5.0, clock=clock)
    for seq in range(7):
        sink(_tick(seq))
        sink.wait()
        parquet, journals = table_files(ticks_dir)
        closed = _read(ticks_dir)["seq"].to_pylist() if parquet else []
        journaled = journal_rows(ticks_dir, SCHEMAS["ticks"])["seq"].to_pylist()
        assert closed + journaled == list(range(seq + 1))
        # the tick at 5 s rotates: it is written with those before, and its journal removed
        assert [p.name for p in journals] == {5: [], 6: ["_journal-00001.arrows"]}.get(
            seq, ["_journal-00000.arrows"])
        clock.now += 1.0
    # killed here: a new sink in the same directory takes the next number
    reopened = ParquetSink(tmp_path / "run", "r")
    reopened(_tick(7))
    reopened.close()
    parquet, journals = table_files(ticks_dir)
    assert [p.name for p in parquet] == ["part-00000.parquet", "part-00002.parquet"]
    assert [p.name for p in journals] == ["_journal-00001.arrows"]
    sink.close()  # the first sink folds its journal too: nothing left but closed files
    parquet, journals = table_files(ticks_dir)
    assert len(parquet) == 3 and journals == []
    assert sorted(_read(ticks_dir)["seq"].to_pylist()) == list(range(8))
