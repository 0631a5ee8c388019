"""A steered run reported (real local Spark): the faults and changes table, the figures of each
segment between two changes against the synthetic truth, and the marks of runs that were
stopped early, killed or not drained, in every table and chart legend."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from analysis.charts import CHARTS
from analysis.compute import SEGMENT_PERCENTILES, ReportData, TargetReport
from analysis.document import Document, Table
from analysis.events import ChangeRow
from analysis.markdown import render_markdown
from analysis.schema import LATENCY_KINDS
from analysis.sections import TOO_SHORT, build_document, fmt
from analysis.summary import summary_table
from loadgen.core.histogram import bucket_bounds, bucket_index
from loadgen.core.ticks import Tick
from tests.analysis.conftest import (
    DELTA_SEGMENTS,
    GAMMA_SEGMENTS,
    STEERED_EVENTS,
    STEERED_MEASURING_S,
    Computed,
    Steered,
)
from tests.analysis.synthetic_runs import SyntheticRun

pytestmark = pytest.mark.spark

HEADINGS = {
    "gamma": "gamma (stopped early)",
    "delta": "delta (stopped early, not drained)",
    "epsilon": "epsilon (stopped early)",
    "zeta": "zeta (non-persistent, killed)",
}


def _target(data: ReportData, name: str) -> TargetReport:
    (t,) = [t for t in data.targets if t.target == name]
    return t


def _ticks(run: SyntheticRun, name: str) -> list[Tick]:
    return sorted(run.measuring(name), key=lambda t: t.seq)


def _tolerance(truth: float) -> float:
    width = float(bucket_bounds(bucket_index(np.array([round(truth)])))[1][0])
    return max(1e-3 * truth, width)


def _table(doc: Document, title: str, index: int = 0) -> Table:
    (section,) = [s for s in doc.sections if s.title == title]
    return [b for b in section.blocks if isinstance(b, Table)][index]


@pytest.mark.parametrize(("name", "starts"), [("gamma", GAMMA_SEGMENTS),
                                              ("delta", DELTA_SEGMENTS)])
def test_segment_figures_match_the_truth(steered_report: Steered, steered: SyntheticRun,
                                         name: str, starts: tuple[int, ...]) -> None:
    t = _target(steered_report.data, name)
    ticks = _ticks(steered, name)
    origin = ticks[0].elapsed_s - ticks[0].interval_s
    bounds = [*starts, STEERED_MEASURING_S]
    changes = [e for e in STEERED_EVENTS if e.target == name and 0 < e.at_s < STEERED_MEASURING_S
               and (e.kind in ("rate", "producers", "consumers") or e.kind.startswith("fault-"))]
    assert [s.index for s in t.segments] == list(range(1, len(starts) + 1))
    for seg, first, end in zip(t.segments, bounds, bounds[1:], strict=False):
        span = ticks[first:end]
        assert (seg.first_seq, seg.last_seq) == (span[0].seq, span[-1].seq)
        assert seg.start_s == pytest.approx(
            min(k.elapsed_s - k.interval_s for k in span) - origin, abs=1e-9)
        assert seg.end_s == pytest.approx(max(k.elapsed_s for k in span) - origin, abs=1e-9)
        opened = [f"{e.kind} {e.detail}" for e in changes if first <= e.at_s < first + 1]
        assert list(seg.started_by) == (opened if first else [])
        seconds = sum(k.interval_s for k in span)
        tp = seg.throughput
        assert tp.ticks == len(span)
        assert tp.seconds == pytest.approx(seconds, rel=1e-12)
        assert tp.produced == sum(k.produced for k in span)
        assert tp.consumed == sum(k.consumed for k in span)
        assert tp.produce_msg_s == pytest.approx(tp.produced / seconds, rel=1e-12)
        assert tp.consume_msg_s == pytest.approx(tp.consumed / seconds, rel=1e-12)
        rates = [k.target_rate for k in span]
        assert (seg.target_rate_min, seg.target_rate_max) == (min(rates), max(rates))
        assert seg.send_errors == sum(k.send_errors for k in span)
        for kind in LATENCY_KINDS:
            raw = steered.raw_of(name, kind, first, end - 1)
            lat = seg.latency[kind]
            assert lat.samples == len(raw)
            assert lat.max_ms == raw.max() / 1e6 and lat.min_ms == raw.min() / 1e6
            assert lat.mean_ms == pytest.approx(raw.mean() / 1e6, rel=1e-12)
            for p in SEGMENT_PERCENTILES:
                truth = float(np.percentile(raw, p))
                got = lat.percentiles_ms[p] * 1e6
                assert abs(got - truth) <= _tolerance(truth), (seg.index, kind, p, got, truth)
    # the segments tell the steps apart: rates and latencies as the model set them
    if name == "gamma":
        produce = [round(s.throughput.produce_msg_s, -2) for s in t.segments]
        assert produce == [1000, 5000, 2000, 4800, 5000, 5000]
        assert [s.target_rate_max for s in t.segments] == [1000, 5000, 5000, 5000, 5000, 5000]
        assert t.segments[4].throughput.consumed == 0  # consumers stopped
        p50 = [s.latency["e2e"].percentiles_ms[50.0] for s in t.segments]
        assert p50[2] > 6 * p50[1] and p50[3] > 2 * p50[1]  # the kill, then the recovery


def test_one_segment_gives_no_table(steered_report: Steered, report: Computed) -> None:
    assert _target(steered_report.data, "epsilon").segments == []
    assert _target(steered_report.data, "zeta").segments == []
    # a run nobody steered: no faults and changes, no segments
    assert report.data.changes == [] and all(not t.segments for t in report.data.targets)
    titles = [s.title for s in build_document(report.data).sections]
    assert "Faults and changes" not in titles and "Segments between changes" not in titles


def _expected_rows(steered: SyntheticRun) -> list[tuple[str, str, float, str, str]]:
    listed = [e for e in STEERED_EVENTS if e.kind in ("rate", "consumers", "loadgen-saturated",
                                                       "coordinator-late")
              or e.kind.startswith("fault-")]
    starts = {n: steered.measuring_start_us(n) for n in ("gamma", "delta", "epsilon")}
    out = []
    for e, written in zip(sorted(listed, key=lambda e: e.at_s),
                          [w for w in steered.events if w.kind in {x.kind for x in listed}],
                          strict=True):
        start = starts[e.target] if e.target else min(starts.values())
        out.append((e.target, e.kind, (written.time_ns // 1000 - start) / 1e6, e.detail,
                    "warm-up" if e.at_s < 0 else "measuring"))
    return out


def test_faults_and_changes_rows(steered_report: Steered, steered: SyntheticRun) -> None:
    rows: list[ChangeRow] = steered_report.data.changes
    got = [(r.event.target, r.event.kind, r.at_s, r.event.detail, r.event.phase) for r in rows]
    want = _expected_rows(steered)
    assert [g[:2] for g in got] == [w[:2] for w in want]
    for g, w in zip(got, want, strict=True):
        assert g[2] == pytest.approx(w[2], abs=1e-6) and g[3:] == w[3:]
    assert [r.event.run_id for r in rows] == ["run-s"] * len(rows)  # the killed run has none
    by = {(r.event.target, r.event.kind, r.event.detail.split()[0]): r for r in rows}
    kill = by[("gamma", "fault-kill", "gamma-2")]
    start = by[("gamma", "fault-start", "gamma-2")]
    assert kill.recovery is not None and kill.recovery is start.recovery
    rec = kill.recovery
    assert rec.recovered and rec.healthy_after_s == 9.1
    assert (rec.lag_peak, rec.lag_before, rec.stall_ms, rec.late, rec.late_over_ms,
            rec.send_errors) == (12345, 10, 850.0, 2300, 100.0, 7)
    assert kill.healthy_after_s == pytest.approx(9.1)
    assert start.healthy_after_s == pytest.approx(9.1 - (start.at_s - kill.at_s))
    for kind in ("fault-pause", "fault-resume"):
        row = by[("delta", kind, "delta")]
        assert row.recovery is not None and not row.recovery.recovered
        assert row.healthy_after_s is None and row.recovery.lag_peak == 5000
    stop = by[("gamma", "consumers", "running")]
    resume = by[("gamma", "consumers", "stopped")]
    assert stop.backlog is None and resume.backlog is not None
    assert (resume.backlog.backlog, resume.backlog.drained_in_s, resume.backlog.rate) == (
        14000, 1.2, 11667.0)


def test_faults_and_segments_in_the_report(steered_report: Steered) -> None:
    text = (steered_report.out / "report.md").read_text()
    titles = [ln[3:] for ln in text.splitlines() if ln.startswith("## ")]
    assert titles.index("Comparison") < titles.index("Faults and changes") \
        < titles.index("Segments between changes") < titles.index("Throughput")
    assert ("| gamma (stopped early) | 20.4 | measuring | fault-kill | gamma-2 (pid 4242) | 9.1 "
            "| 12,345 (before 10) | 850.0 | 2,300 (over 100.0 ms) | 7 |  |") in text
    assert ("| gamma (stopped early) | 25.3 | measuring | fault-start | gamma-2 (pid 4243) | 4.2 "
            "| 12,345 (before 10) |") in text
    assert ("| delta (stopped early, not drained) | 5.5 | measuring | fault-pause | "
            "delta (pid 77) | not by the end of the run | 5,000 (before 3) | 3,000 | "
            "900 (over 100.0 ms) | 0 |  |") in text
    assert ("| gamma (stopped early) | 33.4 | measuring | consumers | stopped → running "
            "|  |  |  |  |  | 14,000 in 1.2 s (11,667 msg/s) |") in text
    assert "| gamma (stopped early) | -1.5 | warm-up | rate | max → 1,000 msg/s |" in text
    assert "| all targets (run-s) | 15.7 | measuring | coordinator-late |" in text
    assert "| gamma (stopped early) | 12.5 | measuring | loadgen-saturated |" in text
    # one segment table per target that has segments, named by its heading
    assert "\ngamma (stopped early):\n" in text and "\ndelta (stopped early, not drained):\n" in text
    assert "\nepsilon (stopped early):\n" not in text
    doc = build_document(steered_report.data)
    gamma, delta = (_table(doc, "Segments between changes", i) for i in (0, 1))
    assert [r[0] for r in gamma.rows] == ["1", "2", "3", "4", "5", "6"]
    assert [r[2] for r in gamma.rows] == [
        "start of measuring", "rate 1,000 → 5,000 msg/s", "fault-kill gamma-2 (pid 4242)",
        "fault-start gamma-2 (pid 4243)", "consumers running → stopped",
        "consumers stopped → running"]
    assert [r[3] for r in gamma.rows] == ["1,000"] + ["5,000"] * 5
    assert [r[3] for r in delta.rows] == ["max"] * 3
    seg = _target(steered_report.data, "gamma").segments[1]
    assert gamma.rows[1][1] == f"{seg.start_s:.1f}–{seg.end_s:.1f}"
    assert abs(seg.start_s - 10) < 0.5 and abs(seg.end_s - 20) < 0.5
    assert gamma.rows[1][8] == fmt(seg.latency["e2e"].percentiles_ms[99.0])
    assert gamma.rows[1][10] == fmt(seg.latency["e2e"].max_ms)
    assert gamma.rows[1][4] == fmt(seg.throughput.produce_msg_s)
    assert "## Faults and changes" in render_markdown(doc)
    html = (steered_report.out / "report.html").read_text()
    assert "<h2>Faults and changes</h2>" in html and "<h2>Segments between changes</h2>" in html


def test_progress_names_the_events_step(steered_report: Steered) -> None:
    names = [s for s in steered_report.steps if ":" not in s]
    assert names == ["reading runs", "per-second series and trends", "events and segments",
                     "latency percentiles", "OpenMessaging-Benchmark periods", "fault windows",
                     "broker metrics", "load nodes"]
    assert any(s.startswith("events and segments: Spark stages ") for s in steered_report.steps)


# -- marks ---------------------------------------------------------------------------------------


def test_marks_in_every_table(steered_report: Steered) -> None:
    data = steered_report.data
    assert {t.target: t.heading for t in data.targets} == HEADINGS
    text = (steered_report.out / "report.md").read_text()
    assert "|  | " + " | ".join(HEADINGS.values()) + " |" in text  # the per-target tables
    assert "| " + ", ".join(list(HEADINGS.values())[:3]) + " |" in text  # the runs table
    first_cells = [ln.split(" | ")[0][2:] for ln in text.splitlines() if ln.startswith("| ")]
    named = [c for c in first_cells if c.split(" ")[0] in HEADINGS]
    assert len(named) > 20
    for cell in named:  # a row about a target names it with its marks
        assert cell == HEADINGS[cell.split(" ")[0]], cell
    # each mark explained once
    for mark in ("(killed): run.json records no end", "(stopped early): the run was stopped",
                 "(not drained): the drain ended"):
        assert text.count(mark) == 1, mark
    assert "| run-s | synthetic |" in text and "| stopped early |" in text
    assert "| killed (no end recorded) |" in text


@pytest.mark.parametrize("chart", list(CHARTS))
def test_marks_in_every_chart_legend(steered_report: Steered, chart: str) -> None:
    fig = CHARTS[chart](steered_report.data)
    fig.canvas.draw()
    texts = []
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is not None:
            texts += [t.get_text() for t in legend.get_texts()]
        texts += [t.get_text() for t in ax.get_yticklabels()]
    named = [t for t in texts if t.split(" ")[0] in HEADINGS]
    assert named, texts
    for t in named:
        assert t.startswith(HEADINGS[t.split(" ")[0]]), t


def test_summary_carries_the_marks(steered_report: Steered, steered: SyntheticRun) -> None:
    rows = {r["target"]: r for r in summary_table(steered_report.data).to_pylist()}
    assert {n: (r["marks"], r["killed"], r["stopped_early"], r["drained"])
            for n, r in rows.items()} == {
        "gamma": ("stopped early", False, True, True),
        "delta": ("stopped early, not drained", False, True, False),
        "epsilon": ("stopped early", False, True, True),
        "zeta": ("killed", True, False, None),
    }
    assert {n: (r["segments"], r["changes"]) for n, r in rows.items()} == {
        "gamma": (6, 6), "delta": (3, 2), "epsilon": (1, 0), "zeta": (1, 0)}


def test_messages_without_an_end_to_end_sample(steered_report: Steered, steered: SyntheticRun,
                                               killed_run: SyntheticRun) -> None:
    data = steered_report.data
    for run in (steered, killed_run):
        for name in {t.target for t in run.ticks}:
            ticks = run.measuring(name)
            produced = sum(k.produced for k in ticks)
            sampled = sum(k.e2e_latency.total for k in ticks)
            t = _target(data, name)
            assert t.e2e_expected == produced  # one subscription
            assert t.e2e_unsampled == max(produced - sampled, 0) > 0
    doc = build_document(data)
    (row,) = [r for r in _table(doc, "End-to-end latency (ms)").rows
              if r[0] == "messages without a sample"]
    gamma = _target(data, "gamma")
    assert row[1].startswith(f"{gamma.e2e_unsampled:,} (")
    text = (steered_report.out / "report.md").read_text()
    assert (f"{HEADINGS['gamma']}: {gamma.e2e_unsampled:,} of {gamma.e2e_expected:,}") in text


# -- trends of short runs --------------------------------------------------------------------


def _rows(table: Table, first: str) -> list[list[str]]:
    return [r for r in table.rows if r[0] == first or (len(r) > 1 and r[1] == first)]


def test_short_runs_get_no_hourly_extrapolation(report: Computed) -> None:
    data = report.data  # 60 s measured
    assert not any(t.extrapolates for t in data.targets)
    doc = build_document(data)
    (trend,) = _rows(_table(doc, "Comparison"), "produce throughput trend (% per hour)")
    assert trend[1:] == [TOO_SHORT] * len(data.targets)
    degradation = _table(doc, "Degradation rate")
    pct = degradation.headers.index("% per hour")
    assert {r[pct] for r in degradation.rows} == {TOO_SHORT}
    assert {r[pct + 1] for r in degradation.rows} == {"n/a"}
    assert all(r[3] != "n/a" for r in degradation.rows)  # the slope per minute stays
    text = render_markdown(doc)
    assert "only for targets measured for at least 5 minutes" in text
    summary = summary_table(data).to_pylist()
    assert all(r["produce_mb_s_slope_pct_per_hour"] is None for r in summary)
    assert all(r["produce_mb_s_slope_per_min"] is not None for r in summary)

    # measured for 5 minutes or more: the figures are given
    longer = [dataclasses.replace(t, throughput=dataclasses.replace(t.throughput, seconds=300.0))
              for t in data.targets]
    long_data = dataclasses.replace(data, targets=longer, baseline=longer[0])
    doc = build_document(long_data)
    (trend,) = _rows(_table(doc, "Comparison"), "produce throughput trend (% per hour)")
    alpha = longer[0].series["produce_mb_s"].trend
    assert trend[1] == fmt(alpha.per_hour_pct(alpha.slope))
    assert TOO_SHORT not in {c for r in _table(doc, "Degradation rate").rows for c in r}
    assert "only for targets measured" not in " ".join(
        b for s in doc.sections if s.title == "Comparison" for b in s.blocks
        if isinstance(b, str))
    assert summary_table(long_data).to_pylist()[0]["produce_mb_s_slope_pct_per_hour"] == \
        pytest.approx(alpha.per_hour_pct(alpha.slope))
