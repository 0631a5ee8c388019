"""The report's figures on synthetic runs whose truth is known (real local Spark, no mocks)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from analysis.compute import (
    ALL_PERCENTILES,
    BOX_PERCENTILES,
    LATENCY_PERCENTILES,
    OMB_PERCENTILES,
    PERIOD_TICKS,
    ReportData,
    TargetReport,
    compute_report,
    resolve_baseline,
)
from analysis.report import build_report, default_out_dir, parse_formats
from analysis.runs import expand_run_args, load_runs, read_table
from analysis.schema import LATENCY_KINDS
from analysis.sections import fmt
from analysis.sink import ParquetSink, write_run_json
from analysis.stats import t_quantile
from loadgen.core.errors import OutputError, ReportError
from loadgen.core.histogram import bucket_bounds, bucket_index
from loadgen.core.ticks import Tick
from tests.analysis.conftest import (
    LAG_GROWTH,
    MEMORY_GROWTH,
    MODELS,
    NET_FACTOR,
    TRUE_SLOPE,
    Computed,
)
from tests.analysis.synthetic_runs import MESSAGE_SIZE, SyntheticRun, write_synthetic_run

pytestmark = pytest.mark.spark


def _target(data: ReportData, name: str) -> TargetReport:
    (t,) = [t for t in data.targets if t.target == name]
    return t


def _measuring(synthetic: SyntheticRun, name: str) -> list[Tick]:
    return sorted(synthetic.measuring(name), key=lambda t: t.seq)


def _raw_from_table(run_dir: Path, target: str, kind: str) -> np.ndarray:
    raw = ds.dataset(run_dir / "raw", format="parquet").to_table()
    keep = pc.and_(
        pc.and_(pc.equal(raw["target"], target), pc.equal(raw["kind"], kind)),
        pc.equal(raw["phase"], "measuring"),
    )
    return raw.filter(keep)["value_ns"].to_numpy()


def _tolerance(truth: float) -> float:
    """Bucket midpoints are within 0.05 % of every value in the bucket; interpolating
    between neighbouring samples can add up to one bucket width."""
    width = float(bucket_bounds(bucket_index(np.array([round(truth)])))[1][0])
    return max(1e-3 * truth, width)


def test_targets_labels_and_persistence(report: Computed) -> None:
    data = report.data
    assert [(t.run_id, t.label) for t in data.targets] == [("run-a", "alpha"), ("run-a", "beta")]
    alpha, beta = data.targets
    assert alpha.persistent and alpha.heading == "alpha"
    assert not beta.persistent and beta.heading == "beta (non-persistent)"
    assert data.baseline is alpha  # the first target unless one is named


def test_progress_names_steps_and_counts_stages(report: Computed) -> None:
    steps = report.steps
    names = ["reading runs", "per-second series and trends", "events and segments",
             "latency percentiles", "OpenMessaging-Benchmark periods"]
    # then the fault windows, the broker metrics and the load nodes (none in these runs: those
    # steps may run no Spark stage)
    assert [s for s in steps if ":" not in s] == [*names, "fault windows", "broker metrics",
                                                  "load nodes"]
    for name in names:
        lines = [s for s in steps if s.startswith(f"{name}: Spark stages ")]
        assert lines, name
        done, total = lines[-1].split("Spark stages ")[1].split(",")[0].split("/")
        assert done == total and int(total) > 0, lines[-1]  # each step ends complete
        assert steps.index(lines[-1]) > steps.index(name)


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("kind", LATENCY_KINDS)
def test_latency_matches_raw_samples(report: Computed, synthetic: SyntheticRun, name: str,
                                     kind: str) -> None:
    raw = _raw_from_table(synthetic.run_dir, name, kind)
    np.testing.assert_array_equal(np.sort(raw), np.sort(synthetic.raw_values(name, kind)))
    stats = _target(report.data, name).latency[kind]
    n = len(raw)
    assert stats.samples == n == 60 * 1000
    assert stats.min_ms == raw.min() / 1e6
    assert stats.max_ms == raw.max() / 1e6
    assert stats.mean_ms == pytest.approx(raw.mean() / 1e6, rel=1e-12)  # exact sums
    assert set(stats.percentiles_ms) == set(ALL_PERCENTILES)
    checked = {*LATENCY_PERCENTILES, *BOX_PERCENTILES, 0.0, 20.567177, 99.99369}
    for p in checked:
        truth = float(np.percentile(raw, p))
        got = stats.percentiles_ms[p] * 1e6
        assert abs(got - truth) <= _tolerance(truth), (kind, p, got, truth)
    # the samples each percentile rests on: those at or above its rank
    for p in LATENCY_PERCENTILES:
        assert stats.beyond(p) == n - math.ceil(p / 100 * (n - 1))
    assert stats.beyond(50.0) == 30_000 and stats.beyond(99.999) == 1


def test_throughput_and_network_bytes(report: Computed, synthetic: SyntheticRun) -> None:
    for name in MODELS:
        ticks = _measuring(synthetic, name)
        tp = _target(report.data, name).throughput
        seconds = sum(t.interval_s for t in ticks)
        assert tp.ticks == 60
        assert tp.seconds == pytest.approx(seconds, rel=1e-12)
        assert tp.produced == sum(t.produced for t in ticks)
        assert tp.produce_msg_s == pytest.approx(tp.produced / seconds, rel=1e-12)
        assert tp.produce_mb_s == pytest.approx(
            sum(t.produced_bytes for t in ticks) / seconds / 1e6, rel=1e-12)
        assert tp.consume_mb_s == pytest.approx(
            sum(t.consumed_bytes for t in ticks) / seconds / 1e6, rel=1e-12)
        assert tp.message_bytes == MESSAGE_SIZE
        rx = sum(t.resources.net_rx_bytes for t in ticks)
        assert tp.net_rx_bytes == rx
        assert tp.net_tx_bytes == sum(t.resources.net_tx_bytes for t in ticks)
    alpha, beta = (_target(report.data, n) for n in ("alpha", "beta"))
    assert alpha.throughput.network_known
    assert alpha.throughput.net_rx_mb_s == pytest.approx(alpha.throughput.produce_mb_s
                                                         * NET_FACTOR, rel=1e-4)
    assert not beta.throughput.network_known and math.isnan(beta.throughput.net_rx_mb_s)
    assert "net_rx_mb_s" in alpha.series and "net_rx_mb_s" not in beta.series


def _series_truth(ticks: list[Tick], name: str) -> np.ndarray:
    values = {
        "produce_msg_s": [t.produced / t.interval_s for t in ticks],
        "produce_mb_s": [t.produced_bytes / t.interval_s / 1e6 for t in ticks],
        "consume_mb_s": [t.consumed_bytes / t.interval_s / 1e6 for t in ticks],
        "net_rx_mb_s": [t.resources.net_rx_bytes / t.interval_s / 1e6 for t in ticks],
        "net_tx_mb_s": [t.resources.net_tx_bytes / t.interval_s / 1e6 for t in ticks],
        "lag": [t.lag.total for t in ticks if t.lag is not None],
        "lag_s": [t.lag_s for t in ticks if t.lag is not None],
        "cpu_percent": [t.resources.cpu_percent for t in ticks],
        "memory_mb": [t.resources.memory_bytes / 1e6 for t in ticks],
    }
    return np.array(values[name], dtype=float)


@pytest.mark.parametrize("series", ["produce_msg_s", "produce_mb_s", "consume_mb_s",
                                    "net_rx_mb_s", "lag", "lag_s", "cpu_percent", "memory_mb"])
def test_per_second_distributions(report: Computed, synthetic: SyntheticRun,
                                  series: str) -> None:
    for name in MODELS:
        t = _target(report.data, name)
        if series not in t.series:
            assert series == "net_rx_mb_s" and name == "beta"
            continue
        y = _series_truth(_measuring(synthetic, name), series)
        s = t.series[series]
        assert s.points == len(y) == 60
        assert s.mean == pytest.approx(y.mean(), rel=1e-12)
        assert s.dist["min"] == pytest.approx(y.min(), rel=1e-12)
        assert s.dist["max"] == pytest.approx(y.max(), rel=1e-12)
        for p in (5, 50, 95):
            assert s.dist[f"p{p}"] == pytest.approx(np.percentile(y, p), rel=1e-9)
        np.testing.assert_allclose(t.timeline.values[series], y, rtol=1e-12)


def _ols(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float, float]:
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (slope * x + intercept)
    r2 = 1.0 - (resid**2).sum() / ((y - y.mean()) ** 2).sum()
    stderr = math.sqrt((resid**2).sum() / (len(x) - 2) / ((x - x.mean()) ** 2).sum())
    return slope, intercept, r2, stderr


@pytest.mark.parametrize(("name", "series", "truth"), [
    ("alpha", "produce_mb_s", TRUE_SLOPE),
    ("alpha", "consume_mb_s", TRUE_SLOPE),
    ("alpha", "net_rx_mb_s", TRUE_SLOPE * NET_FACTOR),
    ("beta", "produce_mb_s", 0.0),
    ("alpha", "memory_mb", MEMORY_GROWTH),
    ("alpha", "lag", LAG_GROWTH),
])
def test_trends(report: Computed, synthetic: SyntheticRun, name: str, series: str,
                truth: float) -> None:
    ticks = _measuring(synthetic, name)
    x = np.array([t.elapsed_s / 60.0 for t in ticks])
    y = _series_truth(ticks, series)
    slope, intercept, r2, stderr = _ols(x, y)
    tr = _target(report.data, name).series[series].trend
    assert tr.points == 60
    assert tr.slope == pytest.approx(slope, rel=1e-9)
    assert tr.intercept == pytest.approx(intercept, rel=1e-9)
    assert tr.stderr == pytest.approx(stderr, rel=1e-9)
    assert tr.r2 == pytest.approx(r2, rel=1e-9)
    half = t_quantile(0.975, 58) * stderr
    assert tr.low == pytest.approx(slope - half, rel=1e-9)
    assert tr.high == pytest.approx(slope + half, rel=1e-9)
    assert tr.low < truth < tr.high
    i, j = np.triu_indices(len(x), k=1)
    assert tr.theil_sen == pytest.approx(np.median((y[j] - y[i]) / (x[j] - x[i])), rel=1e-12)
    assert tr.per_hour_pct(tr.slope) == pytest.approx(slope * 60 / y.mean() * 100, rel=1e-9)
    if truth == 0.0:
        assert tr.verdict == "no significant trend" and not tr.significant
    else:
        assert tr.verdict == ("falling" if truth < 0 else "rising") and tr.significant


def test_omb_periods(report: Computed, synthetic: SyntheticRun) -> None:
    for name in MODELS:
        ticks = _measuring(synthetic, name)
        periods = _target(report.data, name).periods
        assert [p.index for p in periods] == list(range(60 // PERIOD_TICKS))
        for p in periods:
            span = ticks[p.index * PERIOD_TICKS:(p.index + 1) * PERIOD_TICKS]
            seconds = sum(t.interval_s for t in span)
            assert p.seconds == pytest.approx(seconds, rel=1e-12)
            assert p.publish_rate == pytest.approx(sum(t.produced for t in span) / seconds)
            assert p.consume_rate == pytest.approx(sum(t.consumed for t in span) / seconds)
            assert p.error_rate == pytest.approx(sum(t.send_errors for t in span) / seconds)
            assert span[-1].lag is not None and p.backlog == span[-1].lag.total
            for kind in LATENCY_KINDS:
                first = (span[0].seq - ticks[0].seq)
                raw = np.concatenate(synthetic.raw[name][kind][first:first + len(span)])
                lat = p.latency[kind]
                assert lat.samples == len(raw)
                assert lat.mean_ms == pytest.approx(raw.mean() / 1e6, rel=1e-12)
                assert lat.max_ms == raw.max() / 1e6
                for q in OMB_PERCENTILES:
                    truth = float(np.percentile(raw, q))
                    assert abs(lat.percentiles_ms[q] * 1e6 - truth) <= _tolerance(truth)


def test_send_errors(report: Computed, synthetic: SyntheticRun) -> None:
    for name in MODELS:
        t = _target(report.data, name)
        assert t.send_errors_measuring == sum(k.send_errors for k in _measuring(synthetic, name))
        assert t.send_errors_total == sum(k.send_errors for k in synthetic.ticks
                                          if k.target == name)
        assert t.send_errors_total > t.send_errors_measuring > 0


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

    # rotations at 3, 6 and 9 s: seconds 0-8 are in closed files, 9-11 in the journals
    on_disk = sum(pq.read_metadata(p).num_rows for p in ticks_dir.glob("part-*.parquet"))
    assert on_disk == 9 < len(run.ticks) == 12
    for p in ticks_dir.glob("part-*.parquet"):
        assert p.read_bytes()[-4:] == b"PAR1"
    journal = ticks_dir / "_journal-00003.arrows"
    assert ds.dataset(ticks_dir, format="parquet").count_rows() == 9  # a journal is no Parquet

    runs = load_runs([run_dir])
    assert read_table(spark, runs, "ticks").count() == 12
    # killed inside its last write: the stream is read up to its last whole batch
    batches = list(pa.ipc.open_stream(journal.read_bytes()))
    kept = 9 + sum(b.num_rows for b in batches[:-1])
    journal.write_bytes(journal.read_bytes()[:-10])
    ticks = read_table(spark, runs, "ticks")
    assert sorted(r.seq for r in ticks.select("seq").collect()) == list(range(kept))

    data = compute_report(spark, runs)
    (t,) = data.targets
    assert t.throughput.ticks == kept - 2  # the measuring phase from second 2
    assert t.latency["e2e"].samples == 10 * 100  # the latency journal was not cut


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
    with pytest.raises(ReportError) as exc:
        build_report([str(tmp_path / "nothing-*")], tmp_path / "out")
    assert _one_line(exc) == f"no run directory matches {tmp_path / 'nothing-*'}"
    assert not (tmp_path / "out").exists()


def test_bad_run_json(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text("{not json")
    with pytest.raises(ReportError) as exc:
        build_report([tmp_path], tmp_path / "out")
    assert "run.json is not valid JSON (line 1, column 2: expecting property name" \
        in _one_line(exc)
    (tmp_path / "run.json").write_text(json.dumps({"schema_version": 99, "run_id": "x"}))
    with pytest.raises(ReportError) as exc:
        build_report([tmp_path], tmp_path / "out")
    assert "schema version 99" in _one_line(exc) and "upgrade streambench" in str(exc.value)


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
                        measuring_s=0, draining_s=0, samples_per_tick=10, raw=False)
    with pytest.raises(ReportError) as exc:
        build_report([run_dir], tmp_path / "out")
    assert "has no measuring phase" in _one_line(exc)
    assert not (tmp_path / "out").exists()  # the report directory made for it is gone


def test_unknown_baseline_lists_the_targets(synthetic: SyntheticRun, tmp_path: Path) -> None:
    with pytest.raises(ReportError) as exc:
        build_report([synthetic.run_dir], tmp_path / "out", baseline="gamma")
    assert _one_line(exc).startswith(
        "baseline 'gamma' is not a target of these runs; the targets are: alpha, beta (give "
    )
    assert not (tmp_path / "out").exists()


def test_resolve_baseline() -> None:
    labels = {("r1", "alpha"): "alpha (r1)", ("r1", "beta"): "beta", ("r2", "alpha"): "alpha (r2)"}
    assert resolve_baseline("beta", labels) == ("r1", "beta")
    assert resolve_baseline("alpha (r2)", labels) == ("r2", "alpha")
    assert resolve_baseline("r1/alpha", labels) == ("r1", "alpha")
    with pytest.raises(ReportError, match=r"ambiguous: .* \(alpha \(r1\), alpha \(r2\)\)"):
        resolve_baseline("alpha", labels)  # in two runs: which one?


def test_unwritable_report_directory(synthetic: SyntheticRun, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OutputError) as exc:
        build_report([synthetic.run_dir], blocker)
    assert str(blocker) in _one_line(exc)


def test_unreadable_file_fails_the_job_with_one_line(spark, tmp_path: Path) -> None:
    run_dir = tmp_path / "broken"
    write_synthetic_run(run_dir, "broken", {"alpha": MODELS["alpha"]}, warmup_s=1,
                        measuring_s=3, draining_s=0, samples_per_tick=10, raw=False)
    (run_dir / "latency" / "part-00077.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(ReportError) as exc:
        build_report([run_dir], None)  # default: report/ inside the run
    msg = _one_line(exc)
    assert msg.startswith("the Spark job failed: ") and "part-00077.parquet" in msg
    assert not (run_dir / "report").exists()  # no report, no log, no empty folder


def test_bad_format() -> None:
    assert parse_formats(None) == ("md", "html", "json")
    assert parse_formats("html, md,html") == ("html", "md")
    with pytest.raises(ReportError, match="unknown report format 'pdf': choose from md, html"):
        parse_formats("md,pdf")
    with pytest.raises(ReportError, match="no report format"):
        parse_formats("")


def test_globs_are_expanded(tmp_path: Path) -> None:
    for name in ("run-2", "run-1", "other"):
        (tmp_path / name).mkdir()
    (tmp_path / "run-3.txt").write_text("not a directory")
    literal = tmp_path / "odd[name]"
    literal.mkdir()
    got = expand_run_args([str(tmp_path / "run-*"), tmp_path / "other", str(literal)])
    assert got == [tmp_path / "run-1", tmp_path / "run-2", tmp_path / "other", literal]


def test_default_out_dir_and_number_format(tmp_path: Path, monkeypatch) -> None:
    from datetime import UTC, datetime

    assert default_out_dir([tmp_path / "r1"]) == tmp_path / "r1" / "report"
    monkeypatch.chdir(tmp_path)
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert default_out_dir([tmp_path / "r1", tmp_path / "r2"], now) == Path(
        "report-20260102T030405Z")
    Path("report-20260102T030405Z").mkdir()
    assert default_out_dir([Path("a"), Path("b")], now) == Path("report-20260102T030405Z-2")
    cases = {
        0.0: "0.000", 0.002953: "0.002953", 0.0447: "0.04470", 2.396: "2.396",
        12.52: "12.52", 150.7: "150.7", 999.96: "1000", 48904.3: "48,904", -1.663: "-1.663",
        float("nan"): "n/a", None: "n/a", 5: "5", 1234567: "1,234,567",
    }
    for value, text in cases.items():
        assert fmt(value) == text, value
    assert fmt(59.84, 1) == "59.8"


def test_a_cluster_runs_load_nodes(spark, tmp_path: Path) -> None:
    """A run on a 3-node Ray cluster, its last node lost from tick 40: the report's Load
    nodes rows add up the nodes table over the measuring phase, node by node, as the ticks
    have it; a run without nodes has no such section (the report tests above)."""
    nodes = ("node-aaaaaaaaaaaa1", "node-bbbbbbbbbbbb2", "node-cccccccccccc3")
    run = write_synthetic_run(tmp_path / "cluster", "cluster", {"alpha": MODELS["alpha"]},
                              warmup_s=2, measuring_s=50, draining_s=0, samples_per_tick=50,
                              raw=False, nodes=nodes)
    data = compute_report(spark, load_runs([run.run_dir]))
    measuring = _measuring(run, "alpha")
    assert [n.node for n in data.nodes] == list(nodes)
    for row in data.nodes:
        mine = [s for t in measuring for s in t.nodes if s.node == row.node]
        clocks = [c for t in measuring for c in t.clocks if c.node == row.node]
        assert row.produced == sum(s.produced for s in mine) > 0
        assert row.consumed == sum(s.consumed for s in mine)
        assert row.saturated_ticks == sum(1 for s in mine if s.saturated)
        assert row.memory_bytes == max(s.memory_bytes for s in mine)
        assert row.cpu_percent == pytest.approx(sum(s.cpu_percent for s in mine) / len(mine))
        assert (row.offset_min_ns, row.offset_max_ns) == (min(c.offset_ns for c in clocks),
                                                          max(c.offset_ns for c in clocks))
        assert row.bound_max_ns == max(c.bound_ns for c in clocks)
        assert row.below_zero == sum(t.e2e_below_zero for t in measuring)
        assert row.nodes_lost == 1
        # the node's own e2e figures, from its histograms, against numpy on its raw samples
        raw = np.concatenate(run.node_e2e[row.node])
        for got, p in ((row.e2e_p50_ns, 50.0), (row.e2e_p99_ns, 99.0)):
            truth = float(np.percentile(raw, p))
            assert abs(got - truth) <= _tolerance(truth), (row.node, p, got, truth)
    p50s = [n.e2e_p50_ns for n in data.nodes]
    assert p50s == sorted(p50s) and p50s[0] < p50s[-1]  # node 0 got the lowest samples
    # the target's e2e figures are every node's once, not the node rows again beside them
    assert data.targets[0].latency["e2e"].samples == sum(t.e2e_latency.total for t in measuring)
    assert sum(n.produced for n in data.nodes) == data.targets[0].throughput.produced
    text = build_document_text(data)
    section = text[text.index("## Load nodes"):]
    assert "| alpha | node-bbbbbbb | host-1 |" in section
    row = next(line for line in section.splitlines() if "| node-bbbbbbb |" in line)
    node = next(n for n in data.nodes if n.node.startswith("node-bbbbbbb"))
    assert row.rstrip(" |").endswith(f"| {node.e2e_p50_ns / 1e6:,.3f} | {node.e2e_p99_ns / 1e6:,.3f}")
    assert f"alpha: {sum(t.e2e_below_zero for t in measuring):,} end-to-end samples below zero " \
           "(counted as 0), 1 load node(s) lost." in section


def build_document_text(data: ReportData) -> str:
    from analysis.markdown import render_markdown
    from analysis.sections import build_document

    return render_markdown(build_document(data))
