"""The run's event kinds are one enumeration (loadgen.core.events.EventKind): every kind the code
publishes is a member, every member has its place in the report (a table, or the log only), and
the end-of-run summary counts the faults the stacks record under the same names. A kind added
without a place, or spelled differently on one side, fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from analysis import events as report_events
from loadgen.core.events import FAULT_KINDS, EventKind, RunEvent, fault_kind
from loadgen.core.stack import FAULTS
from tui.bench.endsummary import EndSummary

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("loadgen", "compose", "collectors", "tui")  # analysis reads events, never makes them
# the callables that take an event's kind: RunEvent(time, target, KIND, …), and the stacks',
# clients' and loads' event hooks, whose first argument is the kind
KIND_AT = {"RunEvent": 2, "events": 0, "_stack_event": 0, "say": 0}


def _literal_kinds(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        at = KIND_AT.get(name)
        if at is None or len(node.args) <= at:
            continue
        arg = node.args[at]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            found.append((node.lineno, arg.value))
        elif isinstance(arg, ast.JoinedStr):
            found.append((node.lineno, ast.unparse(arg)))
    return found


def _every_literal_kind() -> list[tuple[str, int, str]]:
    return [(str(path.relative_to(ROOT)), line, kind)
            for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
            for line, kind in _literal_kinds(path)]


def test_every_kind_the_code_publishes_is_a_member() -> None:
    found = _every_literal_kind()
    assert len(found) > 20  # the walk sees the run loop's, the loads' and the stacks' events
    members = {k.value for k in EventKind}
    stray = [f"{path}:{line} {kind!r}" for path, line, kind in found if kind not in members]
    assert not stray, "event kinds outside EventKind: " + ", ".join(stray)


def test_the_scan_catches_a_stray_kind(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text('def f(publish, events, t):\n'
                     '    publish(RunEvent(t, "", "pause", ""))\n'
                     '    events(f"fault-{t}", "")\n', encoding="utf-8")
    kinds = [kind for _, kind in _literal_kinds(probe)]
    assert sorted(kinds) == ["f'fault-{t}'", "pause"]
    assert "pause" not in {k.value for k in EventKind}


def test_every_member_has_one_place_in_the_report() -> None:
    places = {
        "change": report_events.CHANGE_KINDS,
        "fault": tuple(k.value for k in FAULT_KINDS),
        "recovery": report_events.RECOVERY_KINDS,
        "backlog": (report_events.BACKLOG_KIND,),
        "note": report_events.NOTE_KINDS,
        "assignment": (report_events.ASSIGNMENT_KIND,),
        "log": report_events.LOG_KINDS,
    }
    seen: dict[str, list[str]] = {}
    for place, kinds in places.items():
        for kind in kinds:
            seen.setdefault(kind, []).append(place)
    assert set(seen) == {k.value for k in EventKind}, "members without a place: " + ", ".join(
        sorted({k.value for k in EventKind} - set(seen)))
    twice = {kind: where for kind, where in seen.items() if len(where) > 1}
    assert not twice
    # the faults are the report's faults, and they split the measuring phase
    assert all(report_events.is_fault(k) and report_events.is_change(k) for k in FAULT_KINDS)
    assert not any(report_events.is_fault(k) for k in report_events.NOTE_KINDS)


@pytest.mark.parametrize("action", FAULTS)
def test_each_fault_action_has_its_kind_and_the_summary_counts_it(action: str) -> None:
    kind = fault_kind(action)
    assert kind in FAULT_KINDS
    summary = EndSummary(["redis"])
    summary(RunEvent(1, "redis", kind, f"{action} redis"))
    summary(RunEvent(2, "redis", EventKind.RATE, "1,000 → 2,000 msg/s"))  # a change, not a fault
    summary(RunEvent(3, "other", kind, ""))  # another run's target
    assert summary.figures["redis"].faults == 1


def test_a_kind_read_back_from_a_run_file_is_counted() -> None:
    """Events replayed from the Parquet files carry plain strings, not members."""
    summary = EndSummary(["kafka"])
    for kind in ("fault-kill", "fault-start", "broker-died"):
        summary(RunEvent(1, "kafka", kind, ""))
    assert summary.figures["kafka"].faults == 3
