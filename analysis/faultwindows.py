"""The report's fault windows: for each fault of a target (a broker's, `fault-*`, or its
links', `net-*`), the figures before it, during it (until the target was healthy again, as the
run loop's recovery measured) and after it, side by side, with the delivery audit's verdict
for the fault's window when the run had --audit.

Plain Python over rows already collected (the ticks of the faulted targets, one per second,
and the changes of the "Faults and changes" table); the exact latency percentiles of each
window are computed by the report's job (analysis.compute) from the buckets of its ticks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from analysis.events import ChangeRow, is_change, is_fault
from analysis.labels import Key
from loadgen.core.audit import CATEGORIES

# the faults that end another (a broker's process let go or started again, links healed),
# by the faults they end: they fall in the window of the fault they end rather than open one
ENDS = {"fault-resume": ("fault-pause",), "fault-start": ("fault-kill",),
        "net-heal": ("net-latency", "net-bandwidth", "net-partition")}
ENDING_KINDS = tuple(ENDS)
WINDOW_NAMES = ("before", "during", "after")
WINDOW_PERCENTILES = (50.0, 99.0)


@dataclass(frozen=True)
class Tick:
    """What a window needs of one measuring tick."""

    seq: int
    end_us: int
    interval_s: float
    produced: int
    consumed: int
    send_errors: int
    lag: int | None


@dataclass(frozen=True)
class Span:
    """One window of one fault: [start_us, end_us), the ticks whose middle falls in it."""

    fault: int  # the fault's index among the report's fault windows
    name: str  # before | during | after
    start_us: int
    end_us: int
    seqs: tuple[int, ...]


@dataclass
class WindowFigures:
    name: str
    seconds: float  # the ticks' intervals summed
    produce_msg_s: float
    consume_msg_s: float
    lag_mean: float | None
    lag_max: int | None
    send_errors: int
    e2e_ms: dict[float, float] = field(default_factory=dict)  # percentile → ms (NaN: no sample)


@dataclass
class FaultWindow:
    key: Key
    row: ChangeRow  # the fault, with its recovery
    windows: list[WindowFigures]
    audit: dict[str, Any] | None = None  # the audit's window of this fault (run.json)


def fault_spans(changes: Sequence[ChangeRow], ticks: Mapping[Key, Sequence[Tick]]
                ) -> list[tuple[ChangeRow, list[Span]]]:
    """Each fault that does not end another, of a target whose ticks are given, with its three
    windows: before (from the previous change, or the start of measuring, to the fault),
    during (to the later of the fault's end, the resume, start or heal that ends it, and the
    moment the target was healthy again; to the end of measuring when it was not) and after
    (from then to the next change, or the end)."""
    out: list[tuple[ChangeRow, list[Span]]] = []
    for row in changes:
        key = row.event.key
        if not is_fault(row.event.kind) or row.event.kind in ENDING_KINDS or not ticks.get(key):
            continue
        mine = ticks[key]
        first = mine[0].end_us - round(mine[0].interval_s * 1e6)
        last = mine[-1].end_us
        at = row.event.time_us
        changes_of_key = [r.event.time_us for r in changes
                          if r.event.key == key and is_change(r.event.kind)]
        before = max((t for t in changes_of_key if t < at), default=first)
        ended = next((r.event.time_us for r in changes if r.event.key == key
                      and r.event.time_us >= at and row.event.kind in ENDS.get(r.event.kind, ())),
                     at)
        healthy = (at + round(row.healthy_after_s * 1e6)
                   if row.recovery is not None and row.recovery.recovered
                   and row.healthy_after_s is not None else last)
        healthy = min(max(healthy, ended), last)
        after = min((t for t in changes_of_key if t > healthy), default=last)
        bounds = ((before, at), (at, healthy), (healthy, after))
        index = len(out)
        spans = [Span(index, name, lo, hi, _inside(mine, lo, hi))
                 for name, (lo, hi) in zip(WINDOW_NAMES, bounds, strict=True)]
        out.append((row, spans))
    return out


def _inside(ticks: Sequence[Tick], lo: int, hi: int) -> tuple[int, ...]:
    """The ticks whose middle lies in [lo, hi)."""
    return tuple(t.seq for t in ticks if lo <= t.end_us - round(t.interval_s * 5e5) < hi)


def figures(span: Span, ticks: Sequence[Tick], e2e_ms: Mapping[float, float]) -> WindowFigures:
    """A window's rates, lag and send errors from its ticks; its e2e percentiles as given."""
    chosen = [t for t in ticks if t.seq in set(span.seqs)]
    seconds = sum(t.interval_s for t in chosen)
    lags = [t.lag for t in chosen if t.lag is not None]
    return WindowFigures(
        span.name, seconds,
        sum(t.produced for t in chosen) / seconds if seconds else float("nan"),
        sum(t.consumed for t in chosen) / seconds if seconds else float("nan"),
        sum(lags) / len(lags) if lags else None, max(lags) if lags else None,
        sum(t.send_errors for t in chosen), dict(e2e_ms))


def target_audit(meta: Mapping[str, Any], target: str) -> dict[str, Any] | None:
    """A target's delivery audit in run.json (`totals[].audit`), None without --audit."""
    for entry in meta.get("totals") or []:
        if isinstance(entry, dict) and str(entry.get("label")) == target:
            audit = entry.get("audit")
            return audit if isinstance(audit, dict) else None
    return None


def audit_window(audit: Mapping[str, Any] | None, row: ChangeRow) -> dict[str, Any] | None:
    """The delivery audit's window that the fault opened (run.json `totals[].audit.windows`:
    from a fault to the next), found by its kind and its time (the event's, to the ms)."""
    for w in (audit or {}).get("windows") or []:
        if (isinstance(w, dict) and str(w.get("name", "")).startswith(row.event.kind + " ")
                and abs(int(w.get("start_ns") or 0) // 1000 - row.event.time_us) <= 1000):
            return w
    return None


def verdict_text(window: Mapping[str, Any] | None) -> str:
    """`clean (N acknowledged)` or the categories that are not, with their counts."""
    if window is None:
        return ""
    found = [f"{k} {int(window.get(k) or 0):,}" for k in CATEGORIES if window.get(k)]
    sent = f"{int(window.get('acknowledged') or 0):,} acknowledged"
    return f"NOT clean: {', '.join(found)} ({sent})" if found else f"clean ({sent})"
