"""The table a run leaves in the terminal's scrollback when it ends, as the brokers' own perf
tools do: per target the measuring phase's throughput, end-to-end and publish latency, the
load generator's publish delay (its wait from each slot's time to the send), lag,
broker CPU and memory, the load generator's own CPU, and whether it drained. It is built from
the run's bus (the same ticks the dashboard and the run files get), so the dashboard, the
headless mode and `--report` print the same figures."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadgen.core.audit import CATEGORIES
from loadgen.core.events import FAULT_KINDS, EventKind, RunEvent
from loadgen.core.histogram import HistogramSnapshot
from loadgen.core.ticks import Phase, Tick
from tui import formatting as fmt

if TYPE_CHECKING:
    from loadgen.run import RunSummary

NS_PER_MS = 1e6
E2E_PERCENTILES = (50.0, 99.0, 99.9, 99.99)
COLUMN = 16  # width of a target's column
NAME = 24  # width of the row names
WIDTH = 80  # targets are split into several tables to fit this


@dataclass
class TargetFigures:
    """What the measuring phase of one target added up to."""

    seconds: float = 0.0
    produced: int = 0
    consumed: int = 0
    produced_bytes: int = 0
    e2e: HistogramSnapshot = field(default_factory=HistogramSnapshot.empty)
    publish: HistogramSnapshot = field(default_factory=HistogramSnapshot.empty)
    # the generator's own wait: each message's send time minus its slot's (the pacing window,
    # a late wake-up, a saturated generator); counted in e2e, which starts at the slot
    delay: HistogramSnapshot = field(default_factory=HistogramSnapshot.empty)
    max_lag: int | None = None
    # the largest time lag, and whether every figure of it was exact (else the estimate)
    max_lag_s: float | None = None
    lag_s_exact: bool = True
    cpu: list[float] = field(default_factory=list)  # broker CPU per tick, % of a core
    max_memory: int = 0
    loadgen_cpu: list[float] = field(default_factory=list)
    saturated_s: float = 0.0
    faults: int = 0

    def add(self, tick: Tick) -> None:
        self.seconds += tick.interval_s
        self.produced += tick.produced
        self.consumed += tick.consumed
        self.produced_bytes += tick.produced_bytes
        self.e2e = HistogramSnapshot.merge([self.e2e, tick.e2e_latency])
        self.publish = HistogramSnapshot.merge([self.publish, tick.publish_latency])
        self.delay = HistogramSnapshot.merge([self.delay, tick.publish_delay])
        if tick.lag is not None:
            self.max_lag = max(self.max_lag or 0, tick.lag.total)
        if math.isfinite(tick.lag_s):
            self.max_lag_s = max(self.max_lag_s or 0.0, tick.lag_s)
            self.lag_s_exact = self.lag_s_exact and tick.lag_s_exact
        if math.isfinite(tick.resources.cpu_percent):
            self.cpu.append(tick.resources.cpu_percent)
        self.max_memory = max(self.max_memory, tick.resources.memory_bytes)
        if math.isfinite(tick.loadgen.cpu_percent):
            self.loadgen_cpu.append(tick.loadgen.cpu_percent)
        if tick.loadgen.saturated:
            self.saturated_s += tick.interval_s


class EndSummary:
    """A bus subscriber adding up each target's measuring phase."""

    # the faults injected (`f`, --at, a schedule) and the brokers that stopped by themselves
    FAULT_KINDS = FAULT_KINDS | {EventKind.BROKER_DIED}

    def __init__(self, labels: list[str]) -> None:
        self.figures = {label: TargetFigures() for label in labels}

    def __call__(self, item: Any) -> None:
        if isinstance(item, Tick) and item.phase is Phase.MEASURING and item.target in self.figures:
            self.figures[item.target].add(item)
        elif isinstance(item, RunEvent) and item.kind in self.FAULT_KINDS and item.target in self.figures:
            self.figures[item.target].faults += 1


def _ms(snap: HistogramSnapshot, p: float | None = None) -> str:
    if not snap.total:
        return "—"
    value = (snap.max if p is None else snap.percentile(p)) / NS_PER_MS
    return f"{value:,.3f}" if value < 10 else f"{value:,.1f}" if value < 1000 else f"{value:,.0f}"


def _rate(count: int, seconds: float) -> str:
    return f"{count / seconds:,.0f}" if seconds > 0 else "—"


def _cpu(values: list[float]) -> str:
    if not values:
        return "—"
    return f"{sum(values) / len(values):.0f} / {max(values):.0f}"


def _bytes(n: int) -> str:
    if n <= 0:
        return "—"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n} B"


def rows(figures: TargetFigures, totals: Any) -> list[tuple[str, str]]:
    """(row name, value) for one target; `totals` is its loadgen.load.TargetTotals."""
    f = figures
    out = [
        ("measured", f"{f.seconds:.0f} s"),
        ("produced msg/s", _rate(f.produced, f.seconds)),
        ("consumed msg/s", _rate(f.consumed, f.seconds)),
        ("produced MB/s", f"{f.produced_bytes / f.seconds / 1e6:,.2f}" if f.seconds > 0 else "—"),
    ]
    out += [(f"e2e p{p:g} ms", _ms(f.e2e, p)) for p in E2E_PERCENTILES]
    out += [
        ("e2e max ms", _ms(f.e2e)),
        ("publish p50 ms", _ms(f.publish, 50.0)),
        ("publish p99 ms", _ms(f.publish, 99.0)),
        ("publish delay p50 ms", _ms(f.delay, 50.0)),
        ("publish delay p99 ms", _ms(f.delay, 99.0)),
        ("max lag msgs", "—" if f.max_lag is None else f"{f.max_lag:,}"),
        ("max time lag s", "—" if f.max_lag_s is None else
         f"{f.max_lag_s:,.2f}" + ("" if f.lag_s_exact else " est.")),
        ("broker CPU % mean/max", _cpu(f.cpu)),
        ("broker memory max", _bytes(f.max_memory)),
        ("loadgen CPU % mean/max", _cpu(f.loadgen_cpu)),
    ]
    if getattr(totals, "search_converged", None) is not None:
        rate = totals.sustainable_rate
        out.append(("sustainable msg/s", "—" if rate is None else f"{rate:,.0f}"))
        out.append(("search converged", "yes" if totals.search_converged else "NO"))
    if f.saturated_s:
        out.append(("loadgen saturated", f"{f.saturated_s:.0f} s"))
    if f.faults:
        out.append(("faults and restarts", str(f.faults)))
    if totals.send_errors:
        out.append(("send errors", f"{totals.send_errors:,}"))
    if totals.consumers_failed:
        out.append(("consumers failed", f"{totals.consumers_failed:,}"))
    if getattr(totals, "lost", 0):
        out.append(("messages lost", f"{totals.lost:,}"))
    if totals.duplicates:
        out.append(("duplicates", f"{totals.duplicates:,}"))
    audit = getattr(totals, "audit", None)
    if audit:
        out.append(("delivery audit", "clean" if _clean(audit) else "NOT clean"))
    unread = max(totals.expected - totals.consumed, 0) if totals.expected else 0
    gone = getattr(totals, "lost", 0)
    out.append(("drained", "yes" if totals.drained
                else f"NO ({unread:,} lost)" if gone and gone == unread else f"NO ({unread:,} unread)"))
    return out


def ratios(first: TargetFigures, other: TargetFigures) -> list[tuple[str, str]]:
    """The other target's figures over the first's, for the headline figures."""
    def ratio(a: float, b: float) -> str:
        return fmt.ratio(a / b) if b > 0 and math.isfinite(a) and math.isfinite(b) else "—"

    def pct(f: TargetFigures, p: float) -> float:
        return f.e2e.percentile(p) if f.e2e.total else math.nan

    def tput(f: TargetFigures) -> float:
        return f.consumed / f.seconds if f.seconds > 0 else math.nan

    return [("consumed msg/s", ratio(tput(other), tput(first))),
            ("e2e p50", ratio(pct(other, 50.0), pct(first, 50.0))),
            ("e2e p99", ratio(pct(other, 99.0), pct(first, 99.0))),
            ("e2e p99.9", ratio(pct(other, 99.9), pct(first, 99.9)))]


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _table(header: list[str], body: list[tuple[str, list[str]]]) -> list[str]:
    lines = ["".ljust(NAME) + "".join(_fit(h, COLUMN - 1).rjust(COLUMN) for h in header)]
    for name, values in body:
        lines.append(_fit(name, NAME - 1).ljust(NAME) + "".join(_fit(v, COLUMN - 1).rjust(COLUMN)
                                                               for v in values))
    return lines


def render(summary: Any, end: EndSummary, marks: dict[str, str] | None = None) -> str:
    """The end-of-run tables for a loadgen.run.RunSummary; `marks` adds a note after a target's
    name (e.g. "stopped early")."""
    totals = {t.label: t for t in summary.targets}
    labels = [label for label in end.figures if label in totals]
    if not labels:
        return ""
    per_table = max(1, (WIDTH - NAME) // COLUMN)
    lines: list[str] = []
    title = "run summary (measuring phase)"
    if summary.stopped_early:
        title += f": STOPPED EARLY after {summary.measured_ticks} s"
        why = getattr(summary, "stopped_for", None)
        if why == "hangup":
            title += " (the terminal hung up)"
        elif why:
            title += " (the machine's memory ran low)"
    lines.append(title)
    for start in range(0, len(labels), per_table):
        chunk = labels[start:start + per_table]
        table = {label: dict(rows(end.figures[label], totals[label])) for label in chunk}
        names = list(dict.fromkeys(name for label in chunk for name in table[label]))
        lines += _table([label + ((" " + marks[label]) if marks and label in marks else "")
                         for label in chunk],
                        [(name, [table[label].get(name, "") for label in chunk]) for name in names])
        lines.append("")
    if len(labels) > 1:
        first = end.figures[labels[0]]
        lines.append(f"ratios to {labels[0]}")
        others = labels[1:]
        for start in range(0, len(others), per_table):
            chunk = others[start:start + per_table]
            table = {label: dict(ratios(first, end.figures[label])) for label in chunk}
            names = list(table[chunk[0]])
            lines += _table(chunk, [(name, [table[label][name] for label in chunk]) for name in names])
        lines.append("")
    placement = getattr(summary, "placement", None)
    if placement:
        lines += placement_lines(placement)
    return "\n".join(lines)


SAME_NODE_LATENCY = ("  e2e latency: only the messages produced on the consumer's node, each "
                     "timed on that node's clock (--same-node-latency)")


def placement_lines(placement: dict[str, Any]) -> list[str]:
    """Where a run on a cluster had its load: one line per load actor (run.json's
    cluster_placement)."""
    group = placement.get("tick_group") or 0
    lines = [f"load on the Ray cluster {placement['address']} (Ray {placement['ray_version']}, "
             f"{placement['nodes']} node(s), {placement['strategy']}"
             + (f", ticks relayed by groups of {group}" if group else "") + ")"]
    for w in placement["workers"]:
        lines.append(f"  {_fit(w['target'], NAME - 1)} worker {w['worker']}: node "
                     f"{str(w.get('node_id', ''))[:12]} on {w.get('hostname', '?')} "
                     f"({w.get('ip', '?')}, {w.get('cpus', 0):g} CPU)")
    if placement.get("same_node_latency"):
        lines.append(SAME_NODE_LATENCY)
    lines.append("")
    return lines


def recorded_rows(run_dir: Path) -> dict[str, dict[str, str]]:
    """Each target's rows (as `rows` names them) of a finished run, read from its files: the
    figures of the table the run printed when it ended, for a run that is over."""
    from loadgen.load import TargetTotals
    from tui.bench.recording import load_recording

    recording = load_recording(run_dir)
    end = EndSummary(recording.labels)
    for item in recording.items:
        end(item)
    known = {f.name for f in fields(TargetTotals)}
    totals = {}
    for entry in recording.meta.get("totals") or []:
        if isinstance(entry, dict) and "label" in entry:
            totals[entry["label"]] = TargetTotals(**{k: v for k, v in entry.items() if k in known})
    return {label: dict(rows(end.figures[label], totals.get(label, TargetTotals(label))))
            for label in recording.labels}
def print_summary(summary: RunSummary, end: EndSummary) -> None:
    """The end-of-run table on standard output, what went wrong on standard error."""
    table = render(summary, end)
    if table:
        print(table)
    if summary.stopped_early:
        sys.stderr.write(f"stopped early: {summary.measured_ticks} s measured\n")
    if summary.stopped_for == "hangup":
        sys.stderr.write("stopped by a hang-up of the terminal (--headless under tmux or nohup "
                         "runs to the end)\n")
    elif summary.stopped_for:
        sys.stderr.write(f"stopped by streambench: {summary.stopped_for}\n")
    for failure in summary.broker_failures:
        sys.stderr.write(f"broker failed during the run: {failure}\n")
    for t in summary.targets:
        lost = t.expected - t.consumed if t.expected else 0
        parts = [f"{t.label}: produced {t.produced:,}, consumed {t.consumed:,}"]
        if t.send_errors:
            parts.append(f"send errors {t.send_errors:,}")
        if t.consumers_failed:
            parts.append(f"consumers failed {t.consumers_failed:,} (see the consumer-failed event)")
        if t.duplicates:
            parts.append(f"duplicates {t.duplicates:,}")
        if t.lost:
            parts.append(f"LOST {t.lost:,} (acknowledged, never delivered: the broker has "
                         "nothing more to read; see the messages-lost event)")
        if not t.drained:
            parts.append(f"NOT drained (unconsumed {max(lost, 0):,}, lag {t.final_lag})")
        sys.stderr.write(", ".join(parts) + "\n")
        for line in audit_lines(t.label, t.audit):
            sys.stderr.write(line + "\n")
    print(f"run files: {summary.run_dir}")


def _clean(audit: dict[str, Any]) -> bool:
    return not any(audit.get(k) for k in CATEGORIES)


def _verdict(v: dict[str, Any]) -> str:
    counts = ", ".join(f"{k} {v.get(k, 0):,}" for k in CATEGORIES)
    return (f"{counts} (of {v.get('acknowledged', 0):,} acknowledged, "
            f"{v.get('consumed', 0):,} consumed)")


def audit_lines(label: str, audit: dict[str, Any] | None) -> list[str]:
    """The delivery audit's verdict for one target (run.json's totals[].audit): the counts,
    the first examples, and each fault window's counts when the run had faults."""
    if not audit:
        return []
    lines = [f"{label}: delivery audit: {_verdict(audit)}"]
    for kind, shown in audit.get("examples", {}).items():
        lines.append(f"  {kind}: {', '.join(shown)}")
    windows = audit.get("windows", [])
    if len(windows) > 1:
        lines += [f"  {w['name']}: {_verdict(w)}" for w in windows]
    return lines
