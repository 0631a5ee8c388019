"""Reading the events of a steered run, the marks of runs that need care, and the --baseline
check, without Spark: the parsing of recovery and backlog figures, the segments a tick falls
in, the matching of faults with their recovery, and a bad --baseline refused before Spark
starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from analysis.events import (
    Event,
    SegmentStart,
    assignment_rows,
    change_rows,
    parse_backlog,
    parse_recovery,
    segment_starts,
    split_points,
)
from analysis.labels import resolve_baseline, run_marks, target_labels
from analysis.report import build_report, check_baseline
from analysis.runs import load_runs
from loadgen.assignments import AssignmentWatch
from loadgen.core.errors import ReportError
from loadgen.core.ticks import ConsumerStat
from tests.analysis.synthetic_runs import SyntheticRun

S = 1_000_000  # µs


def _event(t_s: float, kind: str, detail: str = "", target: str = "t", run: str = "r") -> Event:
    return Event(run, target, round(t_s * S), "measuring", kind, detail)


def test_recovery_figures_are_parsed() -> None:
    rec = parse_recovery(
        "recovered",
        "healthy again 12.3 s after kill kafka-2 (4.5 s after start kafka-2); lag peak 1,234 "
        "(before 0); longest publish stall 850 ms; late messages 2,300 (e2e over 100 ms); send "
        "errors 0")
    assert rec.recovered and rec.healthy_after_s == 12.3
    assert (rec.lag_peak, rec.lag_before, rec.stall_ms) == (1234, 0, 850.0)
    assert (rec.late, rec.late_over_ms, rec.send_errors) == (2300, 100.0, 0)
    gone = parse_recovery(
        "not-recovered",
        "not healthy again since pause redis; lag peak 1,000,000 (before 12); longest publish "
        "stall 12,345 ms; late messages 0 (e2e over 1,500 ms); send errors 3")
    assert not gone.recovered and gone.healthy_after_s is None
    assert (gone.lag_peak, gone.lag_before, gone.stall_ms) == (1_000_000, 12, 12345.0)
    assert (gone.late, gone.late_over_ms, gone.send_errors) == (0, 1500.0, 3)
    # a text that lacks a figure leaves it unknown
    odd = parse_recovery("recovered", "healthy again soon")
    assert odd.healthy_after_s is None and odd.lag_peak is None and odd.send_errors is None


def test_backlog_figures_are_parsed() -> None:
    b = parse_backlog("backlog of 12,345 drained in 3.2 s after the consumers resumed: 3,858 "
                      "msg/s consumed meanwhile")
    assert (b.backlog, b.drained_in_s, b.rate) == (12345, 3.2, 3858.0)
    assert parse_backlog("").backlog is None


def test_a_tick_belongs_to_the_segment_of_the_last_change_before_its_end() -> None:
    # ticks 5..14 end at 1 s, 2 s, … 10 s
    ticks = [(5 + i, (i + 1) * S) for i in range(10)]
    a = _event(2.5, "rate", "1 → 2")  # inside the third tick (2 s – 3 s)
    b = _event(6.0, "fault-kill", "x")  # exactly at the end of the sixth tick
    c = _event(6.2, "fault-start", "x")  # the same tick as b's successor: one segment
    d = _event(6.7, "consumers", "running → stopped")
    starts = segment_starts(ticks, [a, b, c, d])
    assert [(s.first_seq, s.started_by) for s in starts] == [
        (5, ()), (7, (a,)), (11, (b, c, d))]
    # a change inside the first tick opens the first segment
    first = segment_starts(ticks, [_event(0.5, "rate")])
    assert len(first) == 1 and first[0].started_by[0].time_us == S // 2
    assert segment_starts(ticks, []) == [SegmentStart(5, ())]


def test_split_points_keep_changes_inside_the_measuring_phase() -> None:
    events = [
        _event(0.5, "rate"), _event(1.5, "rate"), _event(1.6, "recovered"),
        _event(1.7, "loadgen-saturated"), _event(2.0, "fault-pause"), _event(9.0, "consumers"),
        _event(1.8, "producers", target="other"),
    ]
    got = split_points(events, {("r", "t"): (1 * S, 3 * S)})
    assert {k: [e.time_us for e in v] for k, v in got.items()} == {
        ("r", "t"): [int(1.5 * S), 2 * S]}


def test_faults_are_matched_with_the_recovery_that_follows() -> None:
    events = [
        _event(-2.0, "rate", "max → 1,000 msg/s"),
        _event(10.0, "fault-kill", "b-2"),
        _event(14.0, "fault-start", "b-2"),
        _event(15.0, "coordinator-late", "late", target=""),
        _event(20.0, "recovered", "healthy again 9.5 s after kill b-2 (5.5 s after start b-2); "
                                  "lag peak 10 (before 1); longest publish stall 5 ms; late "
                                  "messages 4 (e2e over 100 ms); send errors 2"),
        _event(22.0, "consumers", "running → stopped"),
        _event(25.0, "consumers", "stopped → running"),
        _event(26.0, "backlog-drained", "backlog of 500 drained in 1.0 s after the consumers "
                                        "resumed: 500 msg/s consumed meanwhile"),
        _event(30.0, "fault-pause", "b-1"),
        _event(31.0, "recovered", "healthy again 1.0 s after pause b-1; lag peak 0 (before 0)",
               target="other"),  # another target's
        _event(40.0, "not-recovered", "not healthy again since pause b-1; lag peak 99 (before "
                                      "0); longest publish stall 9 ms; late messages 0 (e2e over "
                                      "100 ms); send errors 0"),
        _event(41.0, "send-error", "ignored"),
        _event(5.0, "rate", "x", run="elsewhere"),  # a run not reported
    ]
    rows = change_rows(events, {("r", "t"): 0, ("r", "other"): -S})
    assert [(r.event.kind, r.at_s) for r in rows] == [
        ("rate", -2.0), ("fault-kill", 10.0), ("fault-start", 14.0),
        ("coordinator-late", 16.0),  # run-wide: from the earliest measuring start of its run
        ("consumers", 22.0), ("consumers", 25.0), ("fault-pause", 30.0)]
    kill, start, pause = rows[1], rows[2], rows[6]
    assert kill.recovery is start.recovery is not None and kill.recovery.recovered
    assert kill.healthy_after_s == pytest.approx(9.5)
    assert start.healthy_after_s == pytest.approx(5.5)  # from its own time
    assert (kill.recovery.lag_peak, kill.recovery.send_errors) == (10, 2)
    assert pause.recovery is not None and not pause.recovery.recovered
    assert pause.healthy_after_s is None and pause.recovery.lag_peak == 99
    assert rows[4].backlog is None  # consumers stopped: nothing drained after it
    assert rows[5].backlog is not None and rows[5].backlog.backlog == 500
    assert rows[0].recovery is None and rows[3].recovery is None


def test_assignment_events_are_read_as_the_load_writes_them() -> None:
    sub = "streambench-sub-0"
    watch = AssignmentWatch()
    (start_up,) = watch.changes([ConsumerStat(0, sub, 0, 0, (0, 1)), ConsumerStat(0, sub, 1, 0, (2, 3))])
    rebalance = watch.changes([ConsumerStat(0, sub, 0, 0, (0,)), ConsumerStat(0, sub, 1, 0, (2,))])
    (alone,) = AssignmentWatch().changes([ConsumerStat(1, sub, 0, 0, (0, 1, 2), shared=True)])
    events = [
        _event(-0.5, "assignment", start_up),
        *(_event(12.0, "assignment", d) for d in rebalance),
        _event(-0.4, "assignment", alone, target="other"),
        _event(3.0, "rate", "1 → 2"),  # a change: listed elsewhere
        _event(5.0, "assignment", "something else"),  # kept whole
        _event(1.0, "assignment", start_up, run="elsewhere"),  # a run not reported
    ]
    rows = assignment_rows(events, {("r", "t"): 0, ("r", "other"): -S})
    assert [(r.event.target, r.at_s, r.consumer, r.partitions, r.before) for r in rows] == [
        ("t", -0.5, "2 consumers", "sub-0/0 0-1; sub-0/1 2-3", ""),
        ("other", 0.6, "t1 sub-0/0", "0-2 shared", ""),
        ("t", 5.0, "", "something else", ""),
        ("t", 12.0, "sub-0/0", "0", "0-1"),
        ("t", 12.0, "sub-0/1", "2", "2-3"),
    ]
    # the faults-and-changes table leaves them out
    assert [r.event.kind for r in change_rows(events, {("r", "t"): 0})] == ["rate"]


def test_run_marks_come_from_run_json() -> None:
    ended = {"ended": "2026-01-01T00:00:00+00:00", "stopped_early": False,
             "totals": [{"label": "a", "drained": True}, {"label": "b", "drained": False}]}
    assert run_marks(ended, "a") == ()
    assert run_marks(ended, "b") == ("not drained",)
    assert run_marks({**ended, "stopped_early": True}, "b") == ("stopped early", "not drained")
    assert run_marks({"run_id": "x", "totals": []}, "a") == ("killed",)
    failed = {**ended, "stopped_early": True, "failed": "cannot write ticks: No space left"}
    assert run_marks(failed, "a") == ("failed", "stopped early")
    # an older run.json without drained gets no mark for it
    assert run_marks({"ended": "…", "totals": [{"label": "a"}]}, "a") == ()


def test_baseline_names() -> None:
    labels = target_labels([("r1", "alpha"), ("r1", "beta"), ("r2", "alpha")])
    assert labels == {("r1", "alpha"): "alpha (r1)", ("r1", "beta"): "beta",
                      ("r2", "alpha"): "alpha (r2)"}
    assert resolve_baseline("beta", labels) == ("r1", "beta")
    assert resolve_baseline("alpha (r2)", labels) == ("r2", "alpha")
    assert resolve_baseline("r1/alpha", labels) == ("r1", "alpha")
    with pytest.raises(ReportError) as exc:
        resolve_baseline("alpha", labels)
    assert str(exc.value) == (
        "baseline 'alpha' is ambiguous: runs r1, r2 each have a target alpha; give one as the "
        "report shows it (alpha (r1), alpha (r2)) or as RUN_ID/TARGET (r1/alpha, r2/alpha)")
    with pytest.raises(ReportError) as exc:
        resolve_baseline("gamma", labels)
    assert str(exc.value) == (
        "baseline 'gamma' is not a target of these runs; the targets are: alpha (r1), beta, "
        "alpha (r2) (give a label as shown, RUN_ID/TARGET such as r1/alpha, or a target name "
        "found in one run only)")


def test_bad_baseline_is_refused_before_spark_starts(
        synthetic: SyntheticRun, run_b: SyntheticRun, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    def no_spark(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("Spark was started")

    monkeypatch.setattr("analysis.report.spark_session", no_spark)
    out = tmp_path / "out"
    steps: list[str] = []
    with pytest.raises(ReportError) as exc:
        build_report([synthetic.run_dir], out, progress=steps.append, baseline="gamma")
    assert str(exc.value) == (
        "baseline 'gamma' is not a target of these runs; the targets are: alpha, beta (give a "
        "label as shown, RUN_ID/TARGET such as run-a/alpha, or a target name found in one run "
        "only)")
    with pytest.raises(ReportError) as exc:
        build_report([synthetic.run_dir, run_b.run_dir], out, progress=steps.append,
                     baseline="alpha")
    assert "\n" not in str(exc.value)
    assert str(exc.value).startswith("baseline 'alpha' is ambiguous: runs run-a, run-b")
    assert "(alpha (run-a), alpha (run-b))" in str(exc.value)
    assert steps == ["checking runs", "checking runs"]  # Spark was never asked for
    assert not out.exists()
    # every accepted form passes the check (the job would go on to start Spark)
    runs = load_runs([synthetic.run_dir, run_b.run_dir])
    for name in ("beta", "alpha (run-b)", "run-a/alpha", "run-a/beta", None):
        check_baseline(runs, name)
    with pytest.raises(AssertionError, match="Spark was started"):
        build_report([synthetic.run_dir], out, baseline="beta")
