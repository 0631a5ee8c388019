"""How a run was steered, and what it cost, from its `events` table: the interventions (rate
changes, producers and consumers stopped and started, broker faults) in time order, each fault
with the recovery the run loop measured after it and each resumption of the consumers with the
drain of their backlog; the events that matter for reading the figures (the load generator
saturated, the run loop late); the consumers' partitions at start-up and each change after
(`assignment` events); and the points where the interventions split a target's measuring
phase into segments.

Plain Python over rows already collected from Spark: the recovery and backlog figures are
parsed from the events' text, so a figure the text lacks is simply unknown (None)."""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from analysis.labels import Key
from loadgen.core.events import EventKind


def _values(*kinds: EventKind) -> tuple[str, ...]:
    """Plain strings, as Spark's `isin` and the run files hold them."""
    return tuple(k.value for k in kinds)


CHANGE_KINDS = _values(EventKind.RATE, EventKind.PRODUCERS, EventKind.CONSUMERS)
# a fault: `fault-<action>` on a broker (EventKind.FAULT_*; a run of an older version may hold
# other actions), `net-<action>` on its links (EventKind.NET_*)
FAULT_PREFIXES = ("fault-", "net-")
RECOVERY_KINDS = _values(EventKind.RECOVERED, EventKind.NOT_RECOVERED)
BACKLOG_KIND = EventKind.BACKLOG_DRAINED.value
# listed beside the changes: they say which seconds describe streambench rather than the broker,
# and why a run ended early
NOTE_KINDS = _values(
    EventKind.LOADGEN_SATURATED, EventKind.COORDINATOR_LATE, EventKind.INTERVENTION_FAILED,
    EventKind.CONSUMER_FAILED,  # a consumer that reads nothing more
    EventKind.BROKER_DIED,  # a broker that stopped by itself
    # OMB's backlog phase and rate search
    EventKind.BACKLOG_BUILT, EventKind.BACKLOG_DRAIN_DONE, EventKind.RATE_SEARCH_CONVERGED,
    EventKind.RATE_SEARCH_RESULT,
    EventKind.DRAIN_STALLED,  # a drain that reads nothing, messages unread
    EventKind.MESSAGES_LOST,  # … and the broker shows nothing left to read
    EventKind.DELIVERY_AUDIT,  # the delivery audit's verdict (--audit)
    EventKind.CLOCK_BOUND,  # e2e across a cluster's clocks as uncertain as it is large
    EventKind.NODE_LOST,  # a cluster node's share of the load gone
    EventKind.BROKER_MEMORY_HIGH,  # a container near its memory limit
    EventKind.MEMORY_LOW, EventKind.HANGUP)  # the run stopped early: memory, the terminal
# which partitions the consumers hold: at start-up, and each change (a rebalance) after
ASSIGNMENT_KIND = EventKind.ASSIGNMENT.value
READ_KINDS: tuple[str, ...] = (*CHANGE_KINDS, *RECOVERY_KINDS, BACKLOG_KIND, *NOTE_KINDS,
                               ASSIGNMENT_KIND)
# kept in the events table and shown in the dashboard's event line and log pane, not in the
# report's tables: the clients' and collectors' errors and their recoveries, the stacks going up
# and down, the rate search's steps, the drain's end, the phases of a replay
LOG_KINDS = _values(
    EventKind.LOADGEN_RECOVERED, EventKind.CONNECTION_LOST, EventKind.RECONNECTED,
    EventKind.SEND_ERROR, EventKind.SEND_RECOVERED, EventKind.RECEIVE_ERROR,
    EventKind.COLLECTOR_ERROR, EventKind.COLLECTOR_RECOVERED, EventKind.RATE_SEARCH,
    EventKind.DRAIN_SKIPPED, EventKind.DRAIN_INCOMPLETE, EventKind.STACK_UP, EventKind.STACK_DOWN,
    EventKind.PHASE, EventKind.RELAY_LOST)


def is_fault(kind: str) -> bool:
    return kind.startswith(FAULT_PREFIXES)


def is_change(kind: str) -> bool:
    """An intervention: it changes the load or the brokers, so it splits the measuring phase."""
    return kind in CHANGE_KINDS or is_fault(kind)


def is_listed(kind: str) -> bool:
    """A row of the "Faults and changes" table."""
    return is_change(kind) or kind in NOTE_KINDS


@dataclass(frozen=True)
class Event:
    run_id: str
    target: str  # "" for a run-wide event
    time_us: int  # microseconds since the epoch
    phase: str
    kind: str
    detail: str

    @property
    def key(self) -> Key:
        return (self.run_id, self.target)

    def describe(self) -> str:
        return f"{self.kind} {self.detail}".strip()


# -- figures in the events' text -------------------------------------------------------------

_NUMBER = r"(-?[\d,]+(?:\.\d+)?)"


def _number(pattern: str, text: str) -> float | None:
    m = re.search(pattern.replace("#", _NUMBER), text)
    if m is None:
        return None
    try:
        return float(m.group(1).replace(",", ""))
    except ValueError:
        return None


def _count(pattern: str, text: str) -> int | None:
    value = _number(pattern, text)
    return None if value is None else round(value)


@dataclass(frozen=True)
class RecoveryFigures:
    """What a `recovered` / `not-recovered` event says: the time until healthy again from the
    first fault of the recovery, and what the fault cost meanwhile."""

    recovered: bool
    healthy_after_s: float | None  # from the first fault of the recovery
    lag_peak: int | None
    lag_before: int | None
    stall_ms: float | None  # the longest publish latency meanwhile
    late: int | None  # messages whose end-to-end latency passed `late_over_ms`
    late_over_ms: float | None
    send_errors: int | None


def parse_recovery(kind: str, detail: str) -> RecoveryFigures:
    """E.g. "healthy again 12.3 s after kill kafka-2 (…); lag peak 1,234 (before 0); longest
    publish stall 850 ms; late messages 2,300 (e2e over 100 ms); send errors 0"."""
    return RecoveryFigures(
        recovered=kind == "recovered",
        healthy_after_s=_number(r"healthy again # s after", detail),
        lag_peak=_count(r"lag peak #", detail),
        lag_before=_count(r"\(before #\)", detail),
        stall_ms=_number(r"publish stall # ms", detail),
        late=_count(r"late messages #", detail),
        late_over_ms=_number(r"over # ms", detail),
        send_errors=_count(r"send errors #", detail),
    )


@dataclass(frozen=True)
class BacklogFigures:
    """What a `backlog-drained` event says."""

    backlog: int | None  # messages waiting when the consumers resumed
    drained_in_s: float | None  # from the resumption until the lag was back (loadgen/recovery.py)
    rate: float | None  # msg/s consumed meanwhile


def parse_backlog(detail: str) -> BacklogFigures:
    """E.g. "backlog of 12,345 drained in 3.2 s after the consumers resumed: 3,858 msg/s
    consumed meanwhile"."""
    return BacklogFigures(
        backlog=_count(r"backlog of #", detail),
        drained_in_s=_number(r"drained in # s", detail),
        rate=_number(r"# msg/s", detail),
    )


# -- the table of faults and changes ---------------------------------------------------------


@dataclass(frozen=True)
class ChangeRow:
    """One row of the "Faults and changes" table."""

    event: Event
    at_s: float  # seconds from the start of the measuring phase (negative: warm-up)
    recovery: RecoveryFigures | None = None  # faults: the recovery that followed
    healthy_after_s: float | None = None  # faults: from this event until healthy again
    backlog: BacklogFigures | None = None  # consumers: the backlog drained after them


def change_rows(events: Iterable[Event], measuring_start_us: Mapping[Key, int]) -> list[ChangeRow]:
    """Every listed event in time order (runs in the order of `measuring_start_us`' keys),
    each fault with the first recovery event of its target after it and each `consumers`
    event with the backlog drained after it (before the next `consumers` event). Several
    faults before one recovery share it; the time until healthy again is counted from each
    fault's own time (the recovery's time from the first fault, moved by the faults' gap).
    Run-wide events count from the earliest measuring start of their run."""
    run_order = list(dict.fromkeys(k[0] for k in measuring_start_us))
    run_start: dict[str, int] = {}
    for (run_id, _target), start in measuring_start_us.items():
        run_start[run_id] = min(start, run_start.get(run_id, start))
    ordered = sorted(
        (e for e in events if e.run_id in run_start),
        key=lambda e: (run_order.index(e.run_id), e.time_us),
    )
    rows: list[ChangeRow] = []
    pending: dict[Key, list[int]] = {}  # faults waiting for their recovery: row indexes
    consumers: dict[Key, int] = {}  # the last consumers row waiting for its backlog
    for e in ordered:
        if is_listed(e.kind):
            start = measuring_start_us.get(e.key, run_start[e.run_id])
            rows.append(ChangeRow(e, (e.time_us - start) / 1e6))
            if is_fault(e.kind):
                pending.setdefault(e.key, []).append(len(rows) - 1)
            elif e.kind == "consumers":
                consumers[e.key] = len(rows) - 1
        elif e.kind in RECOVERY_KINDS:
            faults = pending.pop(e.key, [])
            if not faults:
                continue
            figures = parse_recovery(e.kind, e.detail)
            first_us = rows[faults[0]].event.time_us
            for i in faults:
                after = None
                if figures.recovered and figures.healthy_after_s is not None:
                    gap = (rows[i].event.time_us - first_us) / 1e6
                    after = figures.healthy_after_s - gap
                rows[i] = ChangeRow(rows[i].event, rows[i].at_s, figures, after)
        elif e.kind == BACKLOG_KIND:
            i = consumers.pop(e.key, -1)
            if i >= 0:
                row = rows[i]
                rows[i] = ChangeRow(row.event, row.at_s, backlog=parse_backlog(e.detail))
    return rows


# -- the consumers' assignments ------------------------------------------------------------------

_ONE_CONSUMER = re.compile(
    r"consumer (?P<index>\d+) of (?P<sub>\S+) \(topic (?P<topic>\d+)\): partitions? "
    r"(?P<held>.*?)(?P<shared>, shared with the subscription's other consumers)?"
    r"(?: \(was (?P<was>.*)\))?")
_FIRST = re.compile(r"(?P<count>\d+) consumers assigned \d+ partitions?: (?P<listed>.*)")


@dataclass(frozen=True)
class AssignmentRow:
    """One row of the "Consumer assignments" table: an `assignment` event, read."""

    event: Event
    at_s: float  # seconds from the start of the measuring phase (negative: warm-up)
    consumer: str  # `sub-0/1` (`t1 sub-0/1` on topic 1); `8 consumers` for the start-up event
    partitions: str  # what it holds from then on (a start-up event: every consumer's)
    before: str = ""  # what it held before; "" for its first


def parse_assignment(detail: str) -> tuple[str, str, str]:
    """(consumer, partitions, before) of an `assignment` event's text: one consumer's
    (`consumer 1 of streambench-sub-0 (topic 0): partitions 2-3 (was 0-3)`) or the start-up
    one of several (`8 consumers assigned 100 partitions: sub-0/0 0-12; …`). A text of
    neither form is kept whole as the partitions."""
    one = _ONE_CONSUMER.fullmatch(detail)
    if one is not None:
        topic = int(one["topic"])
        name = (f"{f't{topic} ' if topic else ''}{one['sub'].removeprefix('streambench-')}/"
                f"{one['index']}")
        return name, one["held"] + (" shared" if one["shared"] else ""), one["was"] or ""
    first = _FIRST.fullmatch(detail)
    if first is not None:
        return f"{first['count']} consumers", first["listed"], ""
    return "", detail, ""


def assignment_rows(events: Iterable[Event], measuring_start_us: Mapping[Key, int]
                    ) -> list[AssignmentRow]:
    """Every `assignment` event of the targets in `measuring_start_us`, in time order (runs in
    that mapping's order), read."""
    run_order = list(dict.fromkeys(k[0] for k in measuring_start_us))
    chosen = sorted((e for e in events if e.kind == ASSIGNMENT_KIND and e.key in measuring_start_us),
                    key=lambda e: (run_order.index(e.run_id), e.time_us))
    return [AssignmentRow(e, (e.time_us - measuring_start_us[e.key]) / 1e6,
                          *parse_assignment(e.detail)) for e in chosen]


# -- segments ----------------------------------------------------------------------------------


def split_points(events: Iterable[Event], bounds: Mapping[Key, tuple[int, int]]
                 ) -> dict[Key, list[Event]]:
    """The interventions inside each target's measuring phase (`bounds`: its first tick's
    start and last tick's end, in µs), in time order: where its segments begin."""
    out: dict[Key, list[Event]] = {}
    for e in events:
        span = bounds.get(e.key)
        if span is not None and is_change(e.kind) and span[0] < e.time_us < span[1]:
            out.setdefault(e.key, []).append(e)
    for splits in out.values():
        splits.sort(key=lambda e: e.time_us)
    return out


@dataclass(frozen=True)
class SegmentStart:
    first_seq: int  # the segment's first tick
    started_by: tuple[Event, ...]  # the interventions that began it (none for the first)


def segment_starts(ticks: Sequence[tuple[int, int]], splits: Sequence[Event]) -> list[SegmentStart]:
    """Segments of one target's measuring ticks, given as (seq, end time in µs) in seq order:
    a tick belongs to the segment of the last intervention before its end, so the tick in
    which an intervention happened is the first of the new segment. Interventions within one
    tick begin one segment together."""
    times = [e.time_us for e in splits]
    out: list[SegmentStart] = []
    current = -1
    for seq, end_us in ticks:
        index = bisect_left(times, end_us)  # interventions strictly before the tick's end
        if index != current:
            out.append(SegmentStart(seq, tuple(splits[max(current, 0):index])))
            current = index
    return out
