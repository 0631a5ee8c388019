"""What the report says: its sections (analysis.document's model), from the report's data."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from analysis.compute import (
    DEGRADATION_SERIES,
    LATENCY_PERCENTILES,
    LATENCY_TITLES,
    MIN_EXTRAPOLATION_S,
    PERIOD_TICKS,
    RATE_PERCENTILES,
    SERIES_BY_NAME,
    BrokerMetricStat,
    LatencyStats,
    ReportData,
    Segment,
    TargetReport,
)
from analysis.configuration import configuration_section
from analysis.delivery import delivery_section
from analysis.document import Block, Chart, Document, Section, Table
from analysis.events import AssignmentRow, ChangeRow, is_fault
from analysis.faultwindows import WINDOW_PERCENTILES, FaultWindow, WindowFigures, verdict_text
from analysis.labels import MARKS, ending
from analysis.schema import LATENCY_KINDS
from analysis.stats import Trend

ASSIGNMENT_ROWS = 60  # rows of "Consumer assignments" shown; the events table has every one
FEW_SAMPLES = 10  # a percentile resting on fewer samples than this is marked
TOO_SHORT = "n/a (run too short to extrapolate)"


# -- numbers ---------------------------------------------------------------------------------


def fmt(value: float | int | None, digits: int | None = None) -> str:
    """A number for a report cell: n/a for missing, thousands separators, about four
    significant digits (fixed notation) unless `digits` decimals are asked for."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if isinstance(value, int):
        return f"{value:,}"
    if digits is not None:
        return f"{value:,.{digits}f}"
    a = abs(value)
    if a >= 1000:
        return f"{value:,.0f}"
    if a == 0:
        return "0.000"
    places = min(max(3 - math.floor(math.log10(a)), 0), 9)
    text = f"{value:.{places}f}"
    if places and len(text.lstrip("-").replace(".", "").lstrip("0")) > 4:
        text = f"{value:.{places - 1}f}"  # rounding carried into a new digit (999.96)
    return text


def _whole(value: float) -> str:
    """A count held as float (NaN when missing)."""
    return "n/a" if math.isnan(value) else fmt(round(value))


def _ci(low: float, high: float) -> str:
    return "n/a" if not math.isfinite(low) else f"{fmt(low)} … {fmt(high)}"


def percentile_name(p: float) -> str:
    return f"p{p:g}"


# -- building blocks -------------------------------------------------------------------------

Row = tuple[str, list[str]]  # metric name, one cell per target


def _metric_table(targets: Sequence[TargetReport], rows: Sequence[Row]) -> Table:
    return Table(["", *(t.heading for t in targets)], [[name, *cells] for name, cells in rows])


def _series_cell(t: TargetReport, series: str, stat: str) -> str:
    s = t.series.get(series)
    if s is None:
        return "n/a"
    return fmt(s.mean if stat == "mean" else s.dist.get(stat, float("nan")))


def _trend(t: TargetReport, series: str) -> Trend | None:
    s = t.series.get(series)
    return s.trend if s is not None else None


# -- sections --------------------------------------------------------------------------------


def _runs_section(data: ReportData) -> Section:
    rows = []
    for run in data.runs:
        w = run.workload
        labels = [t.heading for t in data.targets if t.run_id == run.run_id]
        rate = w.get("producerRate")
        rows.append(
            [
                run.run_id,
                str(w.get("name", "")),
                str(run.meta.get("started") or run.meta.get("started_at") or ""),
                ending(run.meta),
                ", ".join(labels),
                ("max" if rate == 0 else fmt(rate)) if rate is not None else "",
                fmt(w["messageSize"]) if isinstance(w.get("messageSize"), int) else "",
                fmt(w["partitionsPerTopic"]) if isinstance(w.get("partitionsPerTopic"), int)
                else "",
            ]
        )
    runs = Table(
        ["run", "workload", "started", "ended", "targets", "rate (msg/s)", "message (B)",
         "partitions"],
        rows,
        text_columns=5,
    )
    target_rows = []
    for t in data.targets:
        meta = data.run(t.run_id).target_meta(t.target)
        target_rows.append(
            [
                t.heading,
                t.run_id,
                str(meta.get("platform", "")),
                str(meta.get("runtime", "")),
                str(meta.get("version", "")),
                "persistent" if t.persistent else "non-persistent (in memory only)",
            ]
        )
    blocks: list[Block] = [
        runs,
        Table(["target", "run", "platform", "runtime", "version", "topics"], target_rows,
              text_columns=6),
    ]
    blocks += _mark_notes(data.targets)
    blocks += _saturation_warnings(data.targets)
    if not all(t.persistent for t in data.targets):
        blocks.append(
            "Targets marked non-persistent keep messages in memory only (for example Pulsar "
            "non-persistent topics): they skip the disk writes the persistent targets pay for, "
            "so their figures are not like for like."
        )
    return Section("Runs and targets", blocks)


def _mark_notes(targets: Sequence[TargetReport]) -> list[Block]:
    """What each mark on a target's name means, once, for the marks this report uses."""
    used = [m for m in MARKS if any(m in t.marks for t in targets)]
    if not used:
        return []
    return [
        "Marks on a target's name, kept in every table and chart legend: "
        + "; ".join(f"({m}): {MARKS[m]}" for m in used)
        + ". Read the figures of a marked target with that in mind."
    ]


@dataclass(frozen=True)
class _Compared:
    name: str
    value: Callable[[TargetReport], float | int]
    ratio: bool = True  # signed figures (trends) get no ratio
    extrapolated: bool = False  # a % per hour figure: n/a for runs too short to extrapolate


def _latency_at(kind: str, p: float | str) -> Callable[[TargetReport], float]:
    def value(t: TargetReport) -> float:
        stats = t.latency[kind]
        return stats.max_ms if p == "max" else stats.percentiles_ms[float(p)]

    return value


def _series_mean(name: str) -> Callable[[TargetReport], float]:
    def value(t: TargetReport) -> float:
        s = t.series.get(name)
        return s.mean if s is not None else float("nan")

    return value


def _trend_pct(name: str) -> Callable[[TargetReport], float]:
    def value(t: TargetReport) -> float:
        trend = _trend(t, name)
        return trend.per_hour_pct(trend.slope) if trend is not None else float("nan")

    return value


COMPARED: tuple[_Compared, ...] = (
    _Compared("produce rate (msg/s)", lambda t: t.throughput.produce_msg_s),
    _Compared("produce throughput (MB/s)", lambda t: t.throughput.produce_mb_s),
    _Compared("consume throughput (MB/s)", lambda t: t.throughput.consume_mb_s),
    _Compared("broker network bytes in (MB/s)", lambda t: t.throughput.net_rx_mb_s),
    _Compared("end-to-end p50 (ms)", _latency_at("e2e", 50.0)),
    _Compared("end-to-end p99 (ms)", _latency_at("e2e", 99.0)),
    _Compared("end-to-end p99.9 (ms)", _latency_at("e2e", 99.9)),
    _Compared("end-to-end max (ms)", _latency_at("e2e", "max")),
    _Compared("publish p50 (ms)", _latency_at("publish", 50.0)),
    _Compared("publish p99 (ms)", _latency_at("publish", 99.0)),
    _Compared("publish delay p99 (ms)", _latency_at("delay", 99.0)),
    _Compared("produce throughput trend (% per hour)", _trend_pct("produce_mb_s"), ratio=False,
              extrapolated=True),
    _Compared("broker CPU mean (%)", _series_mean("cpu_percent")),
    _Compared("broker memory mean (MB)", _series_mean("memory_mb")),
    _Compared("consumer lag mean (msg)", _series_mean("lag")),
    _Compared("send errors (measuring)", lambda t: t.send_errors_measuring),
)


def comparison_cell(value: float | int, base: float | int, is_baseline: bool,
                    ratio: bool) -> str:
    text = fmt(value)
    if not ratio or not math.isfinite(value):
        return text
    if is_baseline:
        return f"{text} (baseline)"
    if not math.isfinite(base) or base == 0:
        return text
    return f"{text} (×{fmt(value / base)})"


def _comparison_section(data: ReportData) -> Section:
    base = data.baseline or data.targets[0]
    rows = []
    for c in COMPARED:
        b = c.value(base)
        rows.append([c.name, *(
            TOO_SHORT if c.extrapolated and not t.extrapolates
            else comparison_cell(c.value(t), b, t is base, c.ratio)
            for t in data.targets
        )])
    blocks: list[Block] = [
        f"Targets side by side; (×r) is the ratio to the baseline, {base.heading} "
        "(chosen with --baseline; the first target by default).",
        Table(["", *(t.heading for t in data.targets)], rows),
    ]
    if not all(t.extrapolates for t in data.targets):
        blocks.append(_TOO_SHORT_NOTE)
    return Section("Comparison", blocks)


_TOO_SHORT_NOTE = (
    f"Trends in % per hour are given only for targets measured for at least "
    f"{MIN_EXTRAPOLATION_S / 60:g} minutes: from a shorter run an hour is too far to "
    "extrapolate, and the confidence interval covers only the noise of the points, not whether "
    "the trend goes on. The slope per minute and its 95 % confidence interval are still given "
    "under Degradation rate."
)


# -- faults, changes and segments -------------------------------------------------------------


def _change_target(data: ReportData, row: ChangeRow) -> str:
    """Who an event concerns: the target's heading, or every target of its run."""
    e = row.event
    if not e.target:
        several = len(data.runs) > 1
        return f"all targets ({e.run_id})" if several else "all targets"
    for t in data.targets:
        if (t.run_id, t.target) == e.key:
            return t.heading
    return e.target


def _optional(value: float | int | None, digits: int | None = None) -> str:
    if value is None:
        return "n/a"
    return fmt(value, digits) if isinstance(value, float) else fmt(value)


def _change_cells(row: ChangeRow) -> list[str]:
    """The recovery figures of a fault, or the drained backlog of a consumers row."""
    blank = [""] * 6
    if is_fault(row.event.kind):
        rec = row.recovery
        if rec is None:
            return ["n/a (no recovery recorded)", *blank[1:]]
        healthy = (_optional(row.healthy_after_s, 1) if rec.recovered
                   else "not by the end of the run")
        lag = _optional(rec.lag_peak)
        if rec.lag_before is not None:
            lag += f" (before {fmt(rec.lag_before)})"
        late = _optional(rec.late)
        if rec.late_over_ms is not None:
            late += f" (over {fmt(rec.late_over_ms)} ms)"
        return [healthy, lag, _optional(rec.stall_ms), late, _optional(rec.send_errors), ""]
    if row.backlog is not None:
        b = row.backlog
        text = (f"{_optional(b.backlog)} in {_optional(b.drained_in_s, 1)} s "
                f"({_optional(b.rate)} msg/s)")
        return [*blank[:5], text]
    return blank


def _changes_section(data: ReportData) -> Section | None:
    if not data.changes:
        return None
    rows = [
        [_change_target(data, r), fmt(r.at_s, 1), r.event.phase, r.event.kind, r.event.detail,
         *_change_cells(r)]
        for r in data.changes
    ]
    return Section(
        "Faults and changes",
        [
            "Every change to the load (rate, producers, consumers), every broker fault "
            "(fault-*) and every network fault (net-*), in time order, with its time from the "
            "start of the measuring phase (negative: during warm-up). For a fault, the "
            "recovery the run loop measured after it: the time from the fault until the target "
            "was healthy again (produce and consume rates within 10 % of what they should be "
            "for 5 s, lag back to its level "
            "before the fault), the lag peak (and the lag before), the longest publish stall, "
            "the messages that arrived late and the send errors meanwhile. Faults before the "
            "target was healthy again share one recovery, whose figures are repeated on each. "
            "For consumers started again, the backlog they found and how fast it drained. "
            "Also listed: seconds in which the load generator was saturated and late wake-ups "
            "of the run loop (the figures of those seconds describe streambench rather than "
            "the broker), interventions that failed, and consumers that ended on an unexpected "
            "error (consumer-failed: they read nothing more from then on).",
            Table(
                ["target", "time (s)", "phase", "event", "what changed",
                 "healthy again after (s)", "lag peak", "longest publish stall (ms)",
                 "late messages", "send errors", "backlog drained"],
                rows,
                text_columns=5,
            ),
        ],
    )


def _window_row(fault: FaultWindow, w: WindowFigures) -> list[str]:
    during = w.name == "during"
    rec = fault.row.recovery
    healthy = ("" if not during else "n/a" if rec is None
               else _optional(fault.row.healthy_after_s, 1) if rec.recovered
               else "not by the end of the run")
    lag = "n/a" if w.lag_mean is None else f"{fmt(w.lag_mean, 0)} / {fmt(w.lag_max)}"
    return [w.name, fmt(w.seconds, 0), fmt(w.produce_msg_s), fmt(w.consume_msg_s),
            *(fmt(w.e2e_ms.get(p, float("nan"))) for p in WINDOW_PERCENTILES), lag,
            fmt(w.send_errors), healthy, verdict_text(fault.audit) if during else ""]


def _fault_windows_section(data: ReportData) -> Section | None:
    if not data.fault_windows:
        return None
    blocks: list[Block] = [
        "Each fault (a broker's, fault-*, or its links', net-*; those that end one, resume, "
        "start and heal, fall within it) with the target's figures before it (from the "
        "previous change, or the start of measuring), during it (until the target was healthy "
        "again, as in the table above; to the end of the run when it was not) and after it "
        "(to the next change, or the end): the produce and consume rates, the exact "
        "end-to-end percentiles from the histogram buckets of the window's seconds, the lag "
        "(mean / peak, in messages) and the send errors. A second belongs to the window its "
        "middle falls in. With --audit, the delivery audit's verdict for the fault's window, "
        "which runs from the fault to the next one (messages dated by their intended send "
        "time; see Delivery)."]
    headers = ["window", "seconds", "produce (msg/s)", "consume (msg/s)",
               *(f"e2e {percentile_name(p)} (ms)" for p in WINDOW_PERCENTILES),
               "lag mean / peak", "send errors", "healthy again after (s)", "delivery audit"]
    for fault in data.fault_windows:
        target = next((t.heading for t in data.targets
                       if (t.run_id, t.target) == fault.key), fault.key[1])
        blocks.append(f"{target}: {fault.row.event.kind} at {fmt(fault.row.at_s, 1)} s "
                      f"({fault.row.event.detail}):")
        blocks.append(Table(headers, [_window_row(fault, w) for w in fault.windows],
                            text_columns=1))
    return Section("Fault windows", blocks)


def _assignment_target(data: ReportData, row: AssignmentRow) -> str:
    for t in data.targets:
        if (t.run_id, t.target) == row.event.key:
            return t.heading
    return row.event.target


def _assignments_section(data: ReportData) -> Section | None:
    """Which partitions the consumers held: at start-up (one row per target) and after each
    change, e.g. a rebalance (one row per consumer that changed)."""
    if not data.assignments:
        return None
    shown = data.assignments[:ASSIGNMENT_ROWS]
    rows = [[_assignment_target(data, r), fmt(r.at_s, 1), r.event.phase, r.consumer,
             r.partitions, r.before] for r in shown]
    blocks: list[Block] = [
        "Which partitions the consumers held, from their assignment events, in time order "
        "with the time from the start of the measuring phase: one row per target for the "
        "consumers' first partitions (every consumer, sub-0/1 being consumer 1 of "
        "streambench-sub-0; a long list cut short), then one row per consumer whose partitions "
        "changed, e.g. in a rebalance when a consumer joins or leaves the group or is replaced "
        "after a lost connection, with what it held before. A rebalance during the measuring "
        "phase can explain a dip in the consume rate or a rise of the lag. Each consumer's "
        "partitions and count per second are in the run's consumers table.",
        Table(["target", "time (s)", "phase", "consumer", "partitions", "before"], rows,
              text_columns=6),
    ]
    if len(data.assignments) > len(shown):
        blocks.append(f"{len(data.assignments) - len(shown):,} later assignment events are not "
                      f"listed here (the first {len(shown)} are); the run's events table has "
                      "them all.")
    return Section("Consumer assignments", blocks)


def _node_target(data: ReportData, key: tuple[str, str]) -> str:
    return next((t.heading for t in data.targets if (t.run_id, t.target) == key), key[1])


def _nodes_section(data: ReportData) -> Section | None:
    """A run on a Ray cluster: each target's load nodes over the measuring phase."""
    if not data.nodes:
        return None
    rows = []
    for n in data.nodes:
        clock = (f"{n.offset_min_ns / 1e6:+.3f} to {n.offset_max_ns / 1e6:+.3f}"
                 if math.isfinite(n.offset_min_ns) else "n/a")
        rows.append([_node_target(data, n.key), n.node[:12], n.host, f"{n.produced:,}",
                     f"{n.consumed:,}", fmt(n.cpu_percent, 1), fmt(n.loop_lag_ms, 1),
                     fmt(n.memory_bytes / 1e6, 0), str(n.saturated_ticks), clock,
                     fmt(n.bound_max_ns / 1e6, 3) if math.isfinite(n.bound_max_ns) else "n/a",
                     fmt(n.e2e_p50_ns / 1e6, 3), fmt(n.e2e_p99_ns / 1e6, 3)])
    notes = []
    for key in dict.fromkeys(n.key for n in data.nodes):
        first = next(n for n in data.nodes if n.key == key)
        if first.below_zero or first.nodes_lost:
            notes.append(f"{_node_target(data, key)}: {first.below_zero:,} end-to-end samples "
                         f"below zero (counted as 0), {first.nodes_lost} load node(s) lost.")
    return Section("Load nodes", [
        "The run's load ran on a Ray cluster: each target's load nodes over the measuring "
        "phase, from the run's nodes table: what each node's producers had acknowledged and "
        "its consumers read, its load actor's mean CPU (% of one core), its event loop's "
        "latest wake-up, its largest resident memory, the seconds it was the bottleneck, and "
        "its wall clock against streambench's: the estimated offsets (lowest to highest) and "
        "the largest error bound, and the end-to-end latency of the messages its consumers "
        "read (p50 and p99, from the node's own histograms). End-to-end samples are taken "
        "back by their consumer's node's offset and are that uncertain.",
        Table(["target", "node", "host", "produced", "consumed", "CPU %", "loop lag (ms)",
               "memory (MB)", "saturated (s)", "clock offset (ms)", "bound (ms)",
               "e2e p50 (ms)", "e2e p99 (ms)"], rows,
              text_columns=3),
        *notes,
    ])


def _target_rate(low: float, high: float) -> str:
    def one(rate: float) -> str:
        return "max" if rate == 0 else fmt(rate)

    if not math.isfinite(low):
        return "n/a"
    return one(low) if low == high else f"{one(low)}–{one(high)}"


def _segment_latency(stats: LatencyStats, p: float | str) -> str:
    if p == "max":
        return fmt(stats.max_ms)
    value = stats.percentiles_ms[float(p)]
    if not math.isfinite(value):
        return "n/a"
    return fmt(value) + ("†" if stats.beyond(float(p)) < FEW_SAMPLES else "")


def _segment_row(seg: Segment) -> list[str]:
    e2e, publish = seg.latency["e2e"], seg.latency["publish"]
    tp = seg.throughput
    return [
        str(seg.index),
        f"{seg.start_s:.1f}–{seg.end_s:.1f}",
        "; ".join(seg.started_by) or "start of measuring",
        _target_rate(seg.target_rate_min, seg.target_rate_max),
        fmt(tp.produce_msg_s),
        fmt(tp.consume_msg_s),
        fmt(e2e.samples),
        _segment_latency(e2e, 50.0),
        _segment_latency(e2e, 99.0),
        _segment_latency(e2e, 99.9),
        _segment_latency(e2e, "max"),
        _segment_latency(publish, 99.0),
        fmt(seg.send_errors),
    ]


def _segments_section(data: ReportData) -> Section | None:
    split = [t for t in data.targets if len(t.segments) > 1]
    if not split:
        return None
    blocks: list[Block] = [
        "The interventions above split a target's measuring phase into segments, each from "
        "one change to the next; the second in which a change happened opens the new segment. "
        "Per segment: its span in seconds from the start of measuring, the target rate, the "
        "produce and consume rates achieved (messages over seconds), the end-to-end latency "
        "(exact percentiles from the histogram buckets, as above; † marks a percentile resting "
        f"on fewer than {FEW_SAMPLES} samples), publish p99 and send errors."
    ]
    headers = ["segment", "start–end (s)", "started by", "target rate (msg/s)",
               "produce (msg/s)", "consume (msg/s)", "e2e samples", "e2e p50 (ms)",
               "e2e p99 (ms)", "e2e p99.9 (ms)", "e2e max (ms)", "publish p99 (ms)",
               "send errors"]
    for t in split:
        blocks.append(f"{t.heading}:")
        blocks.append(Table(headers, [_segment_row(seg) for seg in t.segments], text_columns=3))
    return Section("Segments between changes", blocks)


def _throughput_rows(targets: Sequence[TargetReport]) -> list[Row]:
    tps = [t.throughput for t in targets]
    rows: list[Row] = [
        ("measured time (s)", [fmt(x.seconds, 1) for x in tps]),
        ("target rate (msg/s)", ["max" if x.target_rate == 0 else fmt(x.target_rate)
                                 for x in tps]),
        ("messages produced", [fmt(x.produced) for x in tps]),
        ("messages consumed", [fmt(x.consumed) for x in tps]),
        ("mean message size (B)", [fmt(x.message_bytes) for x in tps]),
        ("produce mean (msg/s)", [fmt(x.produce_msg_s) for x in tps]),
        ("produce mean (MB/s payload)", [fmt(x.produce_mb_s) for x in tps]),
        ("consume mean (msg/s)", [fmt(x.consume_msg_s) for x in tps]),
        ("consume mean (MB/s payload)", [fmt(x.consume_mb_s) for x in tps]),
        ("broker network bytes in (MB/s)", [fmt(x.net_rx_mb_s) for x in tps]),
        ("broker network bytes out (MB/s)", [fmt(x.net_tx_mb_s) for x in tps]),
    ]
    if not any(x.network_known for x in tps):
        rows = [r for r in rows if not r[0].startswith("broker network")]
    stats = ("min", *(percentile_name(p) for p in RATE_PERCENTILES), "max")
    names = [n for n in ("produce_msg_s", "produce_mb_s", "consume_msg_s", "consume_mb_s",
                         "net_rx_mb_s", "net_tx_mb_s") if any(n in t.series for t in targets)]
    for name in names:
        s = SERIES_BY_NAME[name]
        for stat in stats:
            rows.append((f"{s.title} per second {stat} ({s.unit})",
                         [_series_cell(t, name, stat) for t in targets]))
    return rows


def _throughput_section(data: ReportData) -> Section:
    return Section(
        "Throughput",
        [
            "Means are total messages (bytes) over total measured seconds; the per-second "
            "rows are the distribution of the one-second rates. Payload throughput counts "
            "message payload bytes only; broker network bytes are the bytes the broker's "
            "network interfaces received and sent (the wire byte rate, with protocol overhead "
            "and replication), n/a where the platform does not report them.",
            _metric_table(data.targets, _throughput_rows(data.targets)),
            Chart("throughput", "Payload throughput per second, with the OLS trend"),
        ],
    )


def latency_cell(t: TargetReport, kind: str, p: float) -> str:
    stats = t.latency[kind]
    value = stats.percentiles_ms[p]
    if not math.isfinite(value):
        return "n/a"
    beyond = stats.beyond(p)
    mark = "†" if beyond < FEW_SAMPLES else ""
    return f"{fmt(value)} ({fmt(beyond)}{mark})"


def _latency_section(data: ReportData, kind: str) -> Section:
    lats = [t.latency[kind] for t in data.targets]
    rows: list[Row] = [
        ("samples", [fmt(x.samples) for x in lats]),
        ("mean", [fmt(x.mean_ms) for x in lats]),
        ("min", [fmt(x.min_ms) for x in lats]),
    ]
    rows += [(percentile_name(p), [latency_cell(t, kind, p) for t in data.targets])
             for p in LATENCY_PERCENTILES]
    rows.append(("max", [fmt(x.max_ms) for x in lats]))
    blocks: list[Block] = []
    if kind == LATENCY_KINDS[0]:
        rows.append(("messages without a sample", [_unsampled_cell(t) for t in data.targets]))
        blocks.append(
            "In brackets after each percentile: the samples at or above it, the data the "
            f"figure rests on; † marks fewer than {FEW_SAMPLES}, where the figure is close "
            "to the maximum and says little about the distribution."
        )
        blocks += _unsampled_notes(data.targets)
    blocks.append(_metric_table(data.targets, rows))
    return Section(f"{LATENCY_TITLES[kind]} (ms)", blocks)


def _unsampled_cell(t: TargetReport) -> str:
    if not t.e2e_expected:
        return fmt(t.e2e_unsampled)
    return f"{fmt(t.e2e_unsampled)} ({fmt(100.0 * t.e2e_unsampled / t.e2e_expected)} %)"


def _unsampled_notes(targets: Sequence[TargetReport]) -> list[Block]:
    """Per target: the messages of the measuring phase whose end-to-end latency is not in the
    figures, because they were received only during the drain (or never)."""
    missing = [t for t in targets if t.e2e_unsampled > 0]
    if not missing:
        return []
    each = "; ".join(
        f"{t.heading}: {fmt(t.e2e_unsampled)} of {fmt(t.e2e_expected)} "
        f"({fmt(100.0 * t.e2e_unsampled / t.e2e_expected)} %)"
        for t in missing
    )
    return [
        "Messages produced in the measuring phase but received only during the drain (or "
        f"never) have no end-to-end sample in these figures: {each}. The count is messages "
        "produced while measuring × subscriptions − end-to-end samples while measuring, a net "
        "figure (messages produced in warm-up and received while measuring are sampled); the "
        "missing ones are those still queued when measuring ended, so a backlog's latency is "
        "not in the percentiles."
    ]


def _latency_charts() -> Section:
    return Section(
        "Latency charts",
        [
            Chart("latency_over_time", "Latency per second: p50 (solid) and p99 (dashed)"),
            Chart("latency_percentiles", "Latency by percentile, on a 'nines' axis"),
            Chart("latency_boxplot",
                  "Latency box plots: box p25–p75, line p50, triangle mean, whiskers p1 and p99"),
        ],
    )


def _trend_row(t: TargetReport, name: str) -> list[str] | None:
    trend = _trend(t, name)
    if trend is None:
        return None
    s = SERIES_BY_NAME[name]
    return [
        t.heading,
        s.title,
        trend.verdict,
        fmt(trend.slope),
        _ci(trend.low, trend.high),
        fmt(trend.per_hour_pct(trend.slope)) if t.extrapolates else TOO_SHORT,
        _ci(trend.per_hour_pct(trend.low), trend.per_hour_pct(trend.high)) if t.extrapolates
        else "n/a",
        fmt(trend.r2, 3),
        fmt(trend.theil_sen),
        fmt(trend.points),
    ]


def _degradation_section(data: ReportData) -> Section:
    rows = [row for t in data.targets for name in DEGRADATION_SERIES
            if (row := _trend_row(t, name)) is not None]
    blocks: list[Block] = [
        "OLS slope of each per-second rate against time over the measuring phase, in "
        "MB/s per minute and in % of its mean per hour, with its 95 % confidence interval "
        "(Student's t), R² and the Theil–Sen slope (median of pairwise slopes, robust to "
        "outliers) as a cross-check. Negative means the platform slowed down; when the "
        "interval spans 0 the run shows no significant trend.",
        Table(
            ["target", "series", "trend", "slope (MB/s per min)", "95 % CI", "% per hour",
             "95 % CI (% per hour)", "R²", "Theil–Sen (MB/s per min)", "seconds"],
            rows,
            text_columns=3,
        ),
    ]
    if not all(t.extrapolates for t in data.targets):
        blocks.append(_TOO_SHORT_NOTE.replace(" under Degradation rate", " here"))
    if any(t.segments for t in data.targets):
        blocks.append(
            "A target whose load was changed during the run (see Faults and changes) has "
            "trends that follow those changes, not a slow degradation: compare its segments "
            "instead."
        )
    return Section("Degradation rate", blocks)


def _growth_rows(targets: Sequence[TargetReport], name: str, unit: str) -> list[Row]:
    trends = [_trend(t, name) for t in targets]

    def cells(get: Callable[[Trend], str]) -> list[str]:
        return [get(tr) if tr is not None else "n/a" for tr in trends]

    return [
        (f"growth ({unit} per min)", cells(lambda tr: fmt(tr.slope))),
        ("growth 95 % CI", cells(lambda tr: _ci(tr.low, tr.high))),
        ("growth trend", cells(lambda tr: tr.verdict)),
    ]


def _resources_section(data: ReportData) -> Section:
    targets = data.targets

    def stat(name: str, which: str, whole: bool = False) -> list[str]:
        if not whole:
            return [_series_cell(t, name, which) for t in targets]
        return [_whole(s.dist[which]) if (s := t.series.get(name)) else "n/a" for t in targets]

    lag = [("consumer lag mean (msg)", stat("lag", "mean")),
           ("consumer lag max (msg)", stat("lag", "max", whole=True))]
    lag += [(f"consumer lag {n}", c) for n, c in _growth_rows(targets, "lag", "msg")]
    lag += [("time lag mean (s)", stat("lag_s", "mean")),
            ("time lag max (s)", stat("lag_s", "max", whole=True))]
    cpu = [("CPU mean (%)", stat("cpu_percent", "mean")),
           ("CPU p95 (%)", stat("cpu_percent", "p95")),
           ("CPU max (%)", stat("cpu_percent", "max"))]
    mem = [("memory mean (MB)", stat("memory_mb", "mean")),
           ("memory p95 (MB)", stat("memory_mb", "p95")),
           ("memory max (MB)", stat("memory_mb", "max"))]
    mem += [(f"memory {n}", c) for n, c in _growth_rows(targets, "memory_mb", "MB")]
    return Section(
        "Consumer lag, CPU and memory",
        [
            "Per-second values over the measuring phase: broker CPU in % of one core, broker "
            "memory in MB (10^6 bytes), consumer lag in messages summed over partitions, "
            "time lag in seconds (the age of the oldest message not yet consumed, over every "
            "subscription and partition; where the platform gives no positions, the estimate: "
            "lag over the consume rate); growth is the OLS slope against time with its 95 % "
            "confidence interval.",
            _metric_table(targets, lag + cpu + mem),
            Chart("lag", "Consumer lag over time"),
            Chart("resources", "Broker CPU and memory over time"),
        ],
    )


# how the report shows a broker metric's unit: (shown unit, factor from the base unit)
METRIC_UNITS = {"seconds": ("ms", 1e3), "bytes": ("MB", 1e-6), "ratio": ("", 1.0),
                "per_second": ("/s", 1.0), "count": ("", 1.0)}


def _broker_metric_row(stat: BrokerMetricStat, natives: dict[str, str],
                       several: bool) -> list[str]:
    shown, factor = METRIC_UNITS.get(stat.unit, (stat.unit, 1.0))
    return [*([stat.broker] if several else []), stat.name, natives.get(stat.name, ""), shown,
            *(fmt(v * factor) for v in (stat.mean, stat.low, stat.high, stat.last)),
            fmt(stat.ticks), fmt(stat.stale)]


def _broker_metrics_section(data: ReportData) -> Section | None:
    """Per target: the broker's own metrics over the measuring phase."""
    shown = [t for t in data.targets if t.broker_metrics]
    if not shown:
        return None
    blocks: list[Block] = [
        "The brokers' own metrics, read once per second from each broker's interface (named "
        "under 'broker's name' as the broker names it), over the measuring phase: mean, "
        "minimum and maximum of the seconds they were read at, and the last value read. "
        "'stale' counts the seconds a read failed (a paused or stopped broker): they are left "
        "out of the figures. Latencies in ms, memory in MB (10^6 bytes)."]
    for t in shown:
        declared = data.run(t.run_id).target_meta(t.target).get("broker_metrics") or {}
        natives = {str(m.get("name")): str(m.get("native", ""))
                   for m in declared.get("metrics", []) if isinstance(m, dict)}
        several = len({m.broker for m in t.broker_metrics}) > 1
        source = f" ({declared['source']})" if declared.get("source") else ""
        blocks.append(f"{t.heading}{source}:")
        blocks.append(Table([*(["broker"] if several else []), "metric", "broker's name", "unit",
                             "mean", "min", "max", "last", "read", "stale"],
                            [_broker_metric_row(m, natives, several) for m in t.broker_metrics],
                            text_columns=4 if several else 3))
    return Section("Broker metrics", blocks)


def _saturation_warnings(targets: Sequence[TargetReport]) -> list[Block]:
    return [
        f"Warning: the load generator was the bottleneck (saturated) for "
        f"{t.loadgen_saturated_s:.0f} s of the {t.throughput.seconds:.0f} s measured on "
        f"{t.heading}: during that time its rates and latencies describe streambench, not the "
        f"broker (rerun with more --processes or a lower rate)."
        for t in targets if t.loadgen_saturated_s > 0
    ]


def _errors_section(data: ReportData) -> Section:
    rows: list[Row] = [
        ("send errors (measuring)", [fmt(t.send_errors_measuring) for t in data.targets]),
        ("send errors (whole run)", [fmt(t.send_errors_total) for t in data.targets]),
        ("load generator saturated (s)", [fmt(t.loadgen_saturated_s) for t in data.targets]),
        ("load generator CPU mean (%)", [fmt(t.loadgen_cpu_percent) for t in data.targets]),
    ]
    return Section("Errors and the load generator", [
        *_saturation_warnings(data.targets),
        _metric_table(data.targets, rows),
        "The load generator counts as saturated in a second when one of its worker processes "
        "used 90 % or more of a core or its event loop woke 50 ms or more late.",
    ])


def _method_section() -> Section:
    return Section(
        "How the figures are computed",
        [
            "Every figure covers the measuring phase only (after warm-up). MB = 10^6 bytes.",
            "Latency percentiles are exact weighted percentiles over the histogram buckets "
            "(Spark's percentile(value, p, count), numpy's linear definition); buckets are "
            "at most 0.1 % wide, so the figures are within 0.1 % of the percentiles of the raw "
            "samples. Means, minima and maxima are exact.",
            "Box plots are drawn from the same percentiles: no single sample is kept, so the "
            "whiskers are p1 and p99 rather than 1.5 × IQR.",
            f"The OpenMessaging-Benchmark result files report per-period figures over "
            f"{PERIOD_TICKS}-second periods, as OMB does.",
            f"Trends are given in % per hour only for targets measured for at least "
            f"{MIN_EXTRAPOLATION_S / 60:g} minutes.",
        ],
    )


def build_document(data: ReportData) -> Document:
    run_ids = ", ".join(r.run_id for r in data.runs)
    workloads = sorted({str(r.workload.get("name")) for r in data.runs if r.workload.get("name")})
    title = f"streambench report: {run_ids}"
    if workloads:
        title += f" ({', '.join(workloads)})"
    sections = [
        _runs_section(data),
        *(s for s in (configuration_section(data),) if s is not None),
        _comparison_section(data),
        *(s for s in (_changes_section(data), _fault_windows_section(data),
                      delivery_section(data), _assignments_section(data),
                      _segments_section(data), _nodes_section(data))
          if s is not None),
        _throughput_section(data),
        *(_latency_section(data, kind) for kind in LATENCY_KINDS),
        _latency_charts(),
        _degradation_section(data),
        _resources_section(data),
        *(s for s in (_broker_metrics_section(data),) if s is not None),
        _errors_section(data),
        _method_section(),
    ]
    return Document(title, sections)
