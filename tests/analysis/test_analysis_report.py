"""The PySpark report on synthetic runs whose truth is known (real local Spark, no mocks)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from analysis.report import (
    LATENCY_PERCENTILES,
    ReportData,
    build_report,
    compute_report,
    default_out_dir,
    fmt,
    load_runs,
    read_table,
)
from analysis.schema import LATENCY_KINDS
from analysis.sink import ParquetSink, write_run_json
from loadgen.errors import OutputError, ReportError
from loadgen.histogram import bucket_bounds, bucket_index
from loadgen.tick import Phase
from tests.analysis.synthetic_runs import (
    MESSAGE_SIZE,
    SyntheticRun,
    TargetModel,
    write_synthetic_run,
)

pytestmark = pytest.mark.spark

TRUE_SLOPE = -2.0  # MB/s per minute for "alpha"
MODELS = {
    "alpha": TargetModel(mb_s=lambda m: 50.0 + TRUE_SLOPE * m, cpu=150.0),
    "beta": TargetModel(
        mb_s=lambda m: 30.0, e2e_median_ns=7e5, publish_median_ns=2e5, cpu=80.0,
        memory_bytes=300_000_000,
    ),
}


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> SyntheticRun:
    run_dir = tmp_path_factory.mktemp("report") / "run-a"
    return write_synthetic_run(run_dir, "run-a", MODELS, warmup_s=5, measuring_s=60,
                               draining_s=3)


@pytest.fixture(scope="module")
def report(spark, synthetic: SyntheticRun) -> ReportData:
    steps: list[str] = []
    data = compute_report(spark, load_runs([synthetic.run_dir]), steps.append)
    assert steps[0] == "reading runs" and "latency percentiles" in steps
    return data


def _target(report: ReportData, name: str):
    (t,) = [t for t in report.targets if t.target == name]
    return t


def _measuring(synthetic: SyntheticRun, name: str):
    return [t for t in synthetic.ticks if t.target == name and t.phase == Phase.MEASURING]


def _raw_from_table(run_dir: Path, target: str, kind: str) -> np.ndarray:
    raw = ds.dataset(run_dir / "raw", format="parquet").to_table()
    keep = pc.and_(
        pc.and_(pc.equal(raw["target"], target), pc.equal(raw["kind"], kind)),
        pc.equal(raw["phase"], "measuring"),
    )
    return raw.filter(keep)["value_ns"].to_numpy()


def test_targets_in_run_order(report: ReportData) -> None:
    assert [(t.run_id, t.label) for t in report.targets] == [("run-a", "alpha"),
                                                             ("run-a", "beta")]


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("kind", LATENCY_KINDS)
def test_latency_matches_raw_samples(report: ReportData, synthetic: SyntheticRun, name: str,
                                     kind: str) -> None:
    raw = _raw_from_table(synthetic.run_dir, name, kind)
    np.testing.assert_array_equal(np.sort(raw), np.sort(synthetic.raw_values(name, kind)))
    stats = _target(report, name).latency[kind]
    assert stats.samples == len(raw) == 60 * 1000
    assert stats.min_ms == raw.min() / 1e6
    assert stats.max_ms == raw.max() / 1e6
    assert stats.mean_ms == pytest.approx(raw.mean() / 1e6, rel=1e-3)
    for p in LATENCY_PERCENTILES:
        truth = float(np.percentile(raw, p))
        got = stats.percentiles_ms[p] * 1e6
        # bucket midpoints are within 0.05 % of every value in the bucket; interpolating
        # between neighbouring samples can add up to one bucket width
        width = float(bucket_bounds(bucket_index(np.array([round(truth)])))[1][0])
        tolerance = max(1e-3 * truth, width)
        assert abs(got - truth) <= tolerance, (kind, p, got, truth)


def test_throughput(report: ReportData, synthetic: SyntheticRun) -> None:
    for name in MODELS:
        ticks = _measuring(synthetic, name)
        tp = _target(report, name).throughput
        seconds = sum(t.interval_s for t in ticks)
        assert tp.ticks == 60
        assert tp.seconds == pytest.approx(seconds, rel=1e-12)
        assert tp.produced == sum(t.produced for t in ticks)
        assert tp.produce_msg_s == pytest.approx(tp.produced / seconds, rel=1e-12)
        assert tp.produce_mb_s == pytest.approx(
            sum(t.produced_bytes for t in ticks) / seconds / 1e6, rel=1e-12
        )
        assert tp.consume_msg_s == pytest.approx(sum(t.consumed for t in ticks) / seconds,
                                                 rel=1e-12)
        assert tp.produce_mb_s == pytest.approx(tp.produce_msg_s * MESSAGE_SIZE / 1e6)
        for side, rates in (
            ("produce", np.array([t.produced / t.interval_s for t in ticks])),
            ("consume", np.array([t.consumed / t.interval_s for t in ticks])),
        ):
            dist = getattr(tp, f"{side}_rate")
            assert dist["min"] == pytest.approx(rates.min())
            assert dist["max"] == pytest.approx(rates.max())
            for p in (5, 50, 95):
                assert dist[f"p{p}"] == pytest.approx(np.percentile(rates, p), rel=1e-9)


def test_degradation_slope(report: ReportData, synthetic: SyntheticRun) -> None:
    for name, truth in (("alpha", TRUE_SLOPE), ("beta", 0.0)):
        d = _target(report, name).degradation
        ticks = _measuring(synthetic, name)
        x = np.array([t.elapsed_s / 60.0 for t in ticks])
        y = np.array([t.produced_bytes / t.interval_s / 1e6 for t in ticks])
        slope, intercept = np.polyfit(x, y, 1)
        resid = y - (slope * x + intercept)
        r2 = 1.0 - (resid**2).sum() / ((y - y.mean()) ** 2).sum()
        stderr = math.sqrt((resid**2).sum() / (len(x) - 2) / ((x - x.mean()) ** 2).sum())
        assert d.points == 60
        assert d.slope == pytest.approx(slope, rel=1e-9)
        assert d.intercept == pytest.approx(intercept, rel=1e-9)
        assert d.stderr == pytest.approx(stderr, rel=1e-9)
        # t(0.975, 58) = 2.0017
        assert (d.ci_high - d.ci_low) / 2 == pytest.approx(2.0017 * stderr, rel=1e-4)
        assert d.ci_low < truth < d.ci_high
        assert d.ci_high - d.ci_low < 1.5
        assert abs(d.theil_sen - truth) < 1.0
        if name == "alpha":
            assert d.r2 == pytest.approx(r2, rel=1e-9)
            assert d.ci_high < 0  # the decline is detected
            assert d.relative_pct_per_min == pytest.approx(d.slope / y.mean() * 100, rel=1e-9)


def test_resources_lag_and_errors(report: ReportData, synthetic: SyntheticRun) -> None:
    for name in MODELS:
        ticks = _measuring(synthetic, name)
        t = _target(report, name)
        lag = np.array([tk.lag.total for tk in ticks])
        cpu = np.array([tk.resources.cpu_percent for tk in ticks])
        mem = np.array([tk.resources.memory_bytes for tk in ticks]) / 1e6
        assert t.resources.lag_mean == pytest.approx(lag.mean())
        assert t.resources.lag_max == lag.max()
        assert t.resources.cpu_mean == pytest.approx(cpu.mean())
        assert t.resources.cpu_max == pytest.approx(cpu.max())
        assert t.resources.memory_mean_mb == pytest.approx(mem.mean())
        assert t.resources.memory_max_mb == pytest.approx(mem.max())
        every = [tk for tk in synthetic.ticks if tk.target == name]
        assert t.send_errors_measuring == sum(tk.send_errors for tk in ticks) == 6
        assert t.send_errors_total == sum(tk.send_errors for tk in every) > 6


def test_report_markdown(spark, synthetic: SyntheticRun, tmp_path: Path) -> None:
    # a second run with the same target names: columns must name the run too
    other = write_synthetic_run(tmp_path / "run-b", "run-b", {"alpha": MODELS["alpha"]},
                                warmup_s=1, measuring_s=5, draining_s=0, samples_per_tick=50)
    steps: list[str] = []
    out = tmp_path / "out" / "nested"
    path = build_report([synthetic.run_dir, other.run_dir], out, progress=steps.append)
    assert path == out / "report.md"
    text = path.read_text()
    assert text.startswith("# streambench report: run-a, run-b (synthetic)")
    for heading in ("## Throughput", "## End-to-end latency (ms)", "## Publish latency (ms)",
                    "## Publish delay (ms)", "## Degradation rate", "## Resources and lag",
                    "## Errors"):
        assert heading in text
    header = next(line for line in text.splitlines() if line.startswith("|  | "))
    assert header == "|  | alpha (run-a) | beta | alpha (run-b) |"
    assert "| p99.99 |" in text and "| 95 % CI (MB/s per min) |" in text
    assert steps[:3] == ["checking runs", "starting Spark", "reading runs"]
    assert steps[-1] == "writing report.md"
    assert [p.name for p in out.iterdir()] == ["report.md"]
    assert spark.range(3).count() == 3  # the shared session was reused, not stopped


def test_killed_run_is_still_readable(spark, tmp_path: Path) -> None:
    run_dir = tmp_path / "killed"
    run = write_synthetic_run(run_dir, "killed", {"alpha": MODELS["alpha"]}, warmup_s=2,
                              measuring_s=10, draining_s=0, samples_per_tick=100, rotate_s=3.0,
                              close=False)
    ticks_dir = run_dir / "ticks"
    # the file being written when the process died: no footer, hidden name
    first = sorted(ticks_dir.glob("part-*.parquet"))[0].read_bytes()
    (ticks_dir / ".part-00099.parquet.inprogress").write_bytes(first[: len(first) // 2])
    (run_dir / "latency" / ".part-00099.parquet.inprogress").write_bytes(b"PAR1")

    # rotations at 3, 6 and 9 s: seconds 0-8 are on disk, 9-11 were still buffered
    on_disk = sum(pq.read_metadata(p).num_rows for p in ticks_dir.glob("part-*.parquet"))
    assert on_disk == 9 < len(run.ticks)
    for p in ticks_dir.glob("part-*.parquet"):
        assert p.read_bytes()[-4:] == b"PAR1"

    runs = load_runs([run_dir])
    assert read_table(spark, runs, "ticks").count() == 9
    assert ds.dataset(ticks_dir, format="parquet").count_rows() == 9

    data = compute_report(spark, runs)
    (t,) = data.targets
    assert t.throughput.ticks == 7  # seconds 2-8 of the measuring phase
    assert t.latency["e2e"].samples == 7 * 100


# -- bad input ------------------------------------------------------------------------------


def _one_line(exc: pytest.ExceptionInfo[Exception]) -> str:
    msg = str(exc.value)
    assert msg and "\n" not in msg
    return msg


def test_not_a_run_directory(tmp_path: Path) -> None:
    with pytest.raises(ReportError) as exc:
        build_report([tmp_path], tmp_path / "out")
    assert f"{tmp_path} is not a run directory (no run.json)" == _one_line(exc)
    with pytest.raises(ReportError) as exc:
        build_report([tmp_path / "missing"], tmp_path / "out")
    assert "missing is not a run directory" in _one_line(exc)
    with pytest.raises(ReportError, match="no run directory"):
        build_report([], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_bad_run_json(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text("{not json")
    with pytest.raises(ReportError) as exc:
        build_report([tmp_path], tmp_path / "out")
    assert "run.json cannot be read" in _one_line(exc)
    (tmp_path / "run.json").write_text(json.dumps({"schema_version": 99, "run_id": "x"}))
    with pytest.raises(ReportError) as exc:
        build_report([tmp_path], tmp_path / "out")
    assert "schema version 99" in _one_line(exc)


def test_empty_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "empty"
    ParquetSink(run_dir, "empty").close()
    write_run_json(run_dir, {"run_id": "empty"})
    with pytest.raises(ReportError) as exc:
        build_report([run_dir], tmp_path / "out")
    assert _one_line(exc).startswith("run empty (") and "has no ticks" in str(exc.value)


def test_run_without_measuring_phase(spark, tmp_path: Path) -> None:
    run_dir = tmp_path / "short"
    write_synthetic_run(run_dir, "short", {"alpha": MODELS["alpha"]}, warmup_s=3,
                        measuring_s=0, draining_s=0, samples_per_tick=10)
    with pytest.raises(ReportError) as exc:
        build_report([run_dir], tmp_path / "out")
    assert "has no measuring phase" in _one_line(exc)


def test_unwritable_report_directory(synthetic: SyntheticRun, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OutputError) as exc:
        build_report([synthetic.run_dir], blocker)
    assert str(blocker) in _one_line(exc)


def test_unreadable_file_fails_the_job_with_one_line(spark, tmp_path: Path) -> None:
    run_dir = tmp_path / "broken"
    write_synthetic_run(run_dir, "broken", {"alpha": MODELS["alpha"]}, warmup_s=1,
                        measuring_s=3, draining_s=0, samples_per_tick=10)
    (run_dir / "latency" / "part-00077.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(ReportError) as exc:
        build_report([run_dir], None)  # default: report/ inside the run
    msg = _one_line(exc)
    assert msg.startswith("the Spark job failed: ") and "part-00077.parquet" in msg
    assert [p.name for p in (run_dir / "report").iterdir()] == []  # no report.md, no log


def test_default_out_dir_and_number_format(tmp_path: Path) -> None:
    assert default_out_dir([tmp_path / "r1"]) == tmp_path / "r1" / "report"
    assert default_out_dir([tmp_path / "r1", tmp_path / "r2"]) == Path("report")
    cases = {
        0.0: "0.000", 0.002953: "0.002953", 0.0447: "0.04470", 2.396: "2.396",
        12.52: "12.52", 150.7: "150.7", 999.96: "1000", 48904.3: "48,904", -1.663: "-1.663",
        float("nan"): "n/a", None: "n/a", 5: "5", 1234567: "1,234,567",
    }
    for value, text in cases.items():
        assert fmt(value) == text, value
    assert fmt(59.84, 1) == "59.8"
