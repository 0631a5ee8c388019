"""The report's delivery section: the delivery audit's verdict (`--audit`, run.json
`totals[].audit`) per target, the whole run and each fault window, with the first examples."""

from __future__ import annotations

from typing import Any

from analysis.compute import ReportData, TargetReport
from analysis.document import Block, Section, Table
from analysis.faultwindows import target_audit
from loadgen.core.audit import CATEGORIES

HEADERS = ["window", "acknowledged", "failed", "consumed", *CATEGORIES]


def _audit(data: ReportData, t: TargetReport) -> dict[str, Any] | None:
    return target_audit(data.run(t.run_id).meta, t.target)


def _row(name: str, v: dict[str, Any]) -> list[str]:
    return [name, *(f"{int(v.get(k) or 0):,}" for k in ("acknowledged", "failed", "consumed",
                                                          *CATEGORIES))]


def delivery_section(data: ReportData) -> Section | None:
    """One table per audited target: the whole run, then each fault window (from a fault or
    the run's start to the next fault), messages dated by their intended send time."""
    blocks: list[Block] = []
    for t in data.targets:
        audit = _audit(data, t)
        if audit is None:
            continue
        clean = not any(audit.get(k) for k in CATEGORIES)
        blocks.append(f"{t.label}: {'clean' if clean else 'NOT clean'}.")
        windows = [w for w in audit.get("windows") or [] if isinstance(w, dict)]
        rows = [_row("whole run", audit)]
        if len(windows) > 1:
            rows += [_row(str(w.get("name", "")), w) for w in windows]
        blocks.append(Table(HEADERS, rows))
        for kind, shown in (audit.get("examples") or {}).items():
            blocks.append(f"First {kind}: {', '.join(str(s) for s in shown)}.")
    if not blocks:
        return None
    blocks.append(
        "The delivery audit (--audit): lost = acknowledged and consumed by no subscription; "
        "unexpected = consumed but never acknowledged (its send failed or went unanswered); "
        "duplicated = one producer sequence consumed twice by a subscription (read again, or "
        "stored twice); reordered = consumed after a later sequence of its producer in the "
        "same partition by the same consumer; unseen = consumed by some subscription but not "
        "by another that should have read it. A window runs from a fault to the next; a "
        "message belongs to the window its intended send time falls in (to within 0.1 s).")
    return Section("Delivery", blocks)
