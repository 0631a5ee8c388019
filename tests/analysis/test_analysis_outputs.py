"""The report's files: report.md, a self-contained report.html, PNG charts, summary.parquet and
.csv, and OpenMessaging-Benchmark result JSON, from one full build over two runs."""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import re
import warnings
from pathlib import Path

import numpy as np
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from matplotlib import image as mpimg
from matplotlib.lines import Line2D

from analysis.charts import CHARTS, PANEL_IN
from analysis.compute import NINES_PERCENTILES, OMB_PERCENTILES, TargetReport
from analysis.report import main, write_outputs
from analysis.schema import LATENCY_KINDS
from tests.analysis.conftest import Built, Computed
from tests.analysis.synthetic_runs import SyntheticRun

pytestmark = pytest.mark.spark

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
OMB_FILES = ["run-a--alpha.json", "run-a--beta.json", "run-b--alpha.json"]


def _target(report: Computed, name: str) -> TargetReport:
    (t,) = [t for t in report.data.targets if t.target == name]
    return t


@pytest.mark.parametrize("chart", list(CHARTS))
def test_many_targets_keep_their_panels_and_colours(report: Computed, chart: str) -> None:
    """A report of 13 targets with a run's id in each name (as a comparison of many runs has
    them): every panel keeps its height, every legend is clear of every panel and inside the
    picture, and no two targets share a colour (a legend of 26 entries once covered the
    panel under it, and the 11th target took the 1st one's colour)."""
    base = report.data.targets
    many = [dataclasses.replace(base[i % len(base)], label=f"redis (20261207T2145{i:02d}Z-8b1929)")
            for i in range(13)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warns when a layout leaves a panel no room
        fig = CHARTS[chart](dataclasses.replace(report.data, targets=many))
        fig.canvas.draw()
    axes = [ax for ax in fig.axes if ax.get_visible()]
    picture = fig.bbox
    for ax in axes:
        box = ax.get_window_extent()
        assert box.height >= 0.8 * PANEL_IN * fig.dpi, (chart, box.height / fig.dpi)
        legend = ax.get_legend()
        if legend is None:
            continue
        where = legend.get_window_extent()
        assert picture.x0 - 1 <= where.x0 and where.x1 <= picture.x1 + 1, (chart, where)
        assert picture.y0 - 1 <= where.y0 and where.y1 <= picture.y1 + 1, (chart, where)
        assert not any(where.overlaps(other.get_window_extent()) for other in axes
                       if other is not ax), chart
        colours = [h.get_color() for h in legend.legend_handles if isinstance(h, Line2D)]
        assert len(colours) == len(many) and len(set(colours)) == len(many), (chart, colours)
    # the box plot names its targets on its axis; every other chart has a legend
    assert chart == "latency_boxplot" or any(ax.get_legend() is not None for ax in axes)


def test_every_file_is_written(built: Built) -> None:
    out = built.out
    assert built.main == out / "report.md"
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert names == sorted([
        "report.md", "report.html", "summary.parquet", "summary.csv",
        *(f"charts/{c}.png" for c in CHARTS), *(f"omb/{f}" for f in OMB_FILES),
    ])
    steps = built.steps
    assert steps[:3] == ["checking runs", "starting Spark", "reading runs"]
    assert steps.index("drawing charts") > steps.index("OpenMessaging-Benchmark periods")
    assert steps[-1] == "writing report.md"


@pytest.mark.parametrize("chart", list(CHARTS))
def test_charts_are_valid_non_trivial_pngs(built: Built, chart: str) -> None:
    path = built.out / "charts" / f"{chart}.png"
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    pixels = mpimg.imread(path)  # decodes the PNG
    height, width = pixels.shape[:2]
    assert width >= 800 and height >= 250
    assert float(pixels[..., :3].var()) > 0.001  # not a blank image
    colours = np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)
    assert len(colours) > 50, len(colours)  # lines, text and fills, not a flat picture


def test_html_is_self_contained(built: Built) -> None:
    html = (built.out / "report.html").read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    assert "<title>streambench report: run-a, run-b (synthetic)</title>" in html
    for external in ("http://", "https://", "<script", "<link", 'src="charts/', "url("):
        assert external not in html, external
    images = re.findall(r'<img alt="[^"]*" src="data:image/png;base64,([A-Za-z0-9+/=]+)">', html)
    assert len(images) == len(CHARTS) == html.count("<img ")
    embedded = {base64.b64decode(data) for data in images}
    assert embedded == {(built.out / "charts" / f"{c}.png").read_bytes() for c in CHARTS}
    assert "<th>beta (non-persistent)</th>" in html
    md_tables = [ln for ln in (built.out / "report.md").read_text().splitlines()
                 if ln.startswith("| ---")]
    assert html.count("<table>") == len(md_tables)


def test_markdown(built: Built) -> None:
    text = (built.out / "report.md").read_text()
    assert text.startswith("# streambench report: run-a, run-b (synthetic)\n")
    for heading in ("Runs and targets", "Comparison", "Throughput", "End-to-end latency (ms)",
                    "Publish latency (ms)", "Publish delay (ms)", "Latency charts",
                    "Degradation rate", "Consumer lag, CPU and memory", "Errors and the load generator"):
        assert f"\n## {heading}\n" in text, heading
    header = "|  | alpha (run-a) | beta (non-persistent) | alpha (run-b) |"
    assert header in text
    for chart in CHARTS:
        assert f"(charts/{chart}.png)" in text
    assert "| beta (non-persistent) | run-a | synthetic |  |  | non-persistent" in text
    assert "the baseline, beta (non-persistent)" in text
    assert "| broker network bytes in (MB/s) |" in text  # alpha reports it
    assert "| p99.999 |" in text and "†)" in text


def _summary_rows(built: Built) -> dict[tuple[str, str], dict]:
    table = pq.read_table(built.out / "summary.parquet")
    return {(r["run_id"], r["target"]): r for r in table.to_pylist()}


def test_summary_parquet_matches_the_report(built: Built, report: Computed) -> None:
    rows = _summary_rows(built)
    assert list(rows) == [("run-a", "alpha"), ("run-a", "beta"), ("run-b", "alpha")]
    assert [r["label"] for r in rows.values()] == ["alpha (run-a)", "beta", "alpha (run-b)"]
    assert [r["baseline"] for r in rows.values()] == [False, True, False]
    assert [r["persistent"] for r in rows.values()] == [True, False, True]
    for name in ("alpha", "beta"):
        t = _target(report, name)  # the same run reported on its own
        row = rows[("run-a", name)]
        assert row["ticks"] == t.throughput.ticks
        assert row["produce_mb_s"] == pytest.approx(t.throughput.produce_mb_s, rel=1e-12)
        assert row["produce_mb_s_slope_per_min"] == pytest.approx(
            t.series["produce_mb_s"].trend.slope, rel=1e-9)
        assert row["produce_mb_s_trend"] == t.series["produce_mb_s"].trend.verdict
        for kind in LATENCY_KINDS:
            lat = t.latency[kind]
            assert row[f"{kind}_samples"] == lat.samples
            assert row[f"{kind}_p99_9_ms"] == lat.percentiles_ms[99.9]
            assert row[f"{kind}_p99_999_samples_beyond"] == lat.beyond(99.999)
            assert row[f"{kind}_max_ms"] == lat.max_ms
    beta = rows[("run-a", "beta")]
    assert beta["net_rx_mb_s"] is None and beta["net_rx_mb_s_slope_per_min"] is None
    assert rows[("run-a", "alpha")]["memory_mb_trend"] == "rising"


def test_summary_csv_equals_parquet(built: Built) -> None:
    parquet = pq.read_table(built.out / "summary.parquet")
    csv = pacsv.read_csv(built.out / "summary.csv")
    assert csv.column_names == parquet.column_names
    for name in parquet.column_names:
        a, b = parquet[name].to_pylist(), csv[name].to_pylist()
        for x, y in zip(a, b, strict=True):
            if isinstance(x, float):
                assert y == pytest.approx(x, rel=1e-12), name
            else:
                assert x == y or (x is None and y in (None, "")), name


def _strict_json(path: Path) -> dict:
    def refuse(name: str) -> None:
        raise AssertionError(f"{path.name} holds {name}")

    return json.loads(path.read_text(), parse_constant=refuse)


def test_omb_result_files(built: Built, report: Computed) -> None:
    doc = _strict_json(built.out / "omb" / "run-a--alpha.json")
    alpha = _target(report, "alpha")
    assert doc["workload"] == "synthetic" and doc["driver"] == "alpha (run-a)"
    assert doc["messageSize"] == 1000 and doc["partitions"] == 3
    per_period = ["publishRate", "publishErrorRate", "consumeRate", "backlog"]
    stems = ["publishLatency", "publishDelayLatency", "endToEndLatency"]
    suffixes = ["Avg", "50pct", "75pct", "95pct", "99pct", "999pct", "9999pct", "99999pct", "Max"]
    for key in per_period + [s + x for s in stems for x in suffixes]:
        assert len(doc[key]) == len(alpha.periods) == 6, key
    for stem in stems:
        agg = "aggregated" + stem[0].upper() + stem[1:]
        for x in suffixes:
            assert isinstance(doc[agg + x], int | float), agg + x
        quantiles = doc[agg + "Quantiles"]
        keys = [float(k) for k in quantiles]
        assert keys == sorted(keys) and keys[0] == 0.0 and keys[-1] == 100.0
        assert len(keys) == len(NINES_PERCENTILES) + 1
        values = list(quantiles.values())
        assert values == sorted(values)  # a quantile curve never falls
    assert doc["publishRate"] == pytest.approx([p.publish_rate for p in alpha.periods])
    assert doc["backlog"] == [round(p.backlog) for p in alpha.periods]
    e2e, delay = alpha.latency["e2e"], alpha.latency["delay"]
    assert doc["aggregatedEndToEndLatency99pct"] == e2e.percentiles_ms[99.0]  # ms
    assert doc["aggregatedEndToEndLatencyMax"] == e2e.max_ms
    assert doc["aggregatedEndToEndLatencyAvg"] == pytest.approx(e2e.mean_ms)
    # publish delay in whole microseconds, as OMB keeps it
    assert doc["aggregatedPublishDelayLatency99pct"] == round(delay.percentiles_ms[99.0] * 1000)
    assert all(isinstance(v, int) for v in doc["publishDelayLatency50pct"])
    for i, q in enumerate(OMB_PERCENTILES):
        name = f"{q:g}".replace(".", "") + "pct"
        assert doc[f"endToEndLatency{name}"][0] == alpha.periods[0].latency["e2e"].percentiles_ms[
            OMB_PERCENTILES[i]]
    short = _strict_json(built.out / "omb" / "run-b--alpha.json")
    assert len(short["publishRate"]) == math.ceil(25 / 10)  # the last period is partial


def test_formats_choose_the_documents(report: Computed, tmp_path: Path) -> None:
    main_doc = write_outputs(report.data, tmp_path / "html-only", ("html",))
    assert main_doc == tmp_path / "html-only" / "report.html"
    names = sorted(p.name for p in (tmp_path / "html-only").iterdir())
    assert names == ["charts", "report.html", "summary.csv", "summary.parquet"]
    assert write_outputs(report.data, tmp_path / "json-only", ["json"]) == tmp_path / "json-only"
    assert sorted(p.name for p in (tmp_path / "json-only" / "omb").iterdir()) == OMB_FILES[:2]


def test_command_line_errors_are_one_line(synthetic: SyntheticRun, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    run = str(synthetic.run_dir)
    assert main([run, "--out", str(tmp_path / "out"), "--baseline", "gamma"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("error: baseline 'gamma' is not a target of these runs; the "
                              "targets are: alpha, beta (give a label as shown, RUN_ID/TARGET")
    assert "report: starting Spark" not in err  # refused before Spark starts
    assert main([run, "--format", "pdf"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "error: unknown report format 'pdf': choose from md, html, json")


def test_streambench_report_arguments() -> None:
    from tui.cli import build_parser

    args = build_parser().parse_args(
        ["report", "runs/*", "runs/x", "--out", "o", "--baseline", "kafka", "--format", "md",
         "--master", "spark://h:7077"])
    assert args.runs == ["runs/*", "runs/x"] and args.out == Path("o")
    assert (args.baseline, args.format, args.master) == ("kafka", "md", "spark://h:7077")
    defaults = build_parser().parse_args(["report", "r"])
    assert (defaults.baseline, defaults.format, defaults.master) == (None, "md,html,json", None)
