"""The exact time lag, where the producers' acknowledgements meet the consumers' positions.

The load processes ship their producers' acknowledged (position, intended send time) samples
with every tick (loadgen.core.acklog); the coordinator keeps them per topic and partition in a
`PartitionSamples` of at most MAX_SAMPLES, dropping what every subscription has read and
halving the resolution when full. The lag collector reads each subscription's position per
partition; the intended time of the oldest message not yet consumed there is the sample at that
position when it was sampled (exact), else it lies between the samples around it, and is
interpolated by position between them: `TimeLag.bound_s` says by how much it may be off.

A position between two samples is bounded by them only because intended times grow with the
position within a partition: true of one producer per partition, and of several up to their
publish delay (messages of two producers can land in either order)."""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
from array import array
from collections import deque

from loadgen.core.acklog import STEP_NS
from loadgen.core.ticks import LagSnapshot, LagStatus, Tick, TimeLag, partition_list

MAX_SAMPLES = 4096  # per partition: at STEP_NS apart, 41 s of backlog before thinning
TREND_TICKS = 3  # the trend is the change of the time lag over this many ticks
# Burrow's window is ten offset commits (a minute apart by default); a benchmark's is five ticks
STATUS_WINDOW = 5
READ_TICKS = 2  # a subscription that read nothing over this many ticks is not reading
_RANK = {LagStatus.OK: 0, LagStatus.WARN: 1, LagStatus.STALL: 2, LagStatus.STOP: 3}


class PartitionSamples:
    """(position, intended ns) samples of one partition, sorted by position."""

    __slots__ = ("positions", "times")

    def __init__(self) -> None:
        self.positions = array("q")
        self.times = array("q")

    def __len__(self) -> int:
        return len(self.positions)

    def add(self, position: int, intended_ns: int) -> None:
        positions = self.positions
        if not positions or position > positions[-1]:
            positions.append(position)
            self.times.append(intended_ns)
            return
        i = bisect.bisect_left(positions, position)
        if i < len(positions) and positions[i] == position:
            return
        positions.insert(i, position)
        self.times.insert(i, intended_ns)

    def thin(self, limit: int = MAX_SAMPLES) -> None:
        """Over `limit`: keep every other sample and the last."""
        if len(self.positions) <= limit:
            return
        last_p, last_t = self.positions[-1], self.times[-1]
        self.positions, self.times = self.positions[::2], self.times[::2]
        if self.positions[-1] != last_p:
            self.positions.append(last_p)
            self.times.append(last_t)

    def drop_below(self, position: int) -> None:
        """Forget the samples below `position` but the last of them (the lower bound of a
        position between it and the next)."""
        i = bisect.bisect_left(self.positions, position) - 1
        if i > 0:
            del self.positions[:i]
            del self.times[:i]

    def reaches(self, position: int, after: bool) -> bool:
        """A sample stands at `position` or past it (past it when `after`)."""
        return bool(self.positions) and (self.positions[-1] > position or
                                         (not after and self.positions[-1] == position))

    def intended(self, position: int, after: bool, step_ns: int) -> tuple[float, float] | None:
        """The intended time (ns) of the oldest message not yet consumed at `position` (the
        message after it when `after`) and how far off it may be (ns; 0 exact, inf unbounded);
        None with no sample to go by. Past the last sample it lies within step_ns of it: a
        producer samples every step_ns of intended time."""
        positions, times = self.positions, self.times
        if not positions:
            return None
        i = (bisect.bisect_right if after else bisect.bisect_left)(positions, position)
        if not after and i < len(positions) and positions[i] == position:
            return float(times[i]), 0.0
        if i == len(positions):
            return float(times[-1]), float(step_ns)
        if i == 0:
            return float(times[0]), math.inf
        p0, p1, t0, t1 = positions[i - 1], positions[i], times[i - 1], times[i]
        share = (position - p0) / (p1 - p0)
        return t0 + share * (t1 - t0), float(max(0, t1 - t0))


@dataclasses.dataclass
class _Reading:
    """One subscription's readings of one partition over the status window."""

    positions: deque[int] = dataclasses.field(default_factory=lambda: deque(maxlen=STATUS_WINDOW))
    unread: deque[int] = dataclasses.field(default_factory=lambda: deque(maxlen=STATUS_WINDOW))


def partition_status(r: _Reading, read_anything: bool) -> LagStatus:
    """Burrow's rules over the window: any reading caught up is OK; a position that stood
    still with lag is STOP when the subscription has stopped reading (nothing over the last
    READ_TICKS ticks), else STALL; lag that never went down while the position moved is
    WARN."""
    if len(r.unread) < STATUS_WINDOW or min(r.unread) == 0:
        return LagStatus.OK
    u = list(r.unread)
    rising = all(b >= a for a, b in itertools.pairwise(u))
    if r.positions[0] == r.positions[-1] and rising:
        return LagStatus.STALL if read_anything else LagStatus.STOP
    return LagStatus.WARN if rising else LagStatus.OK


class TimeLagBook:
    """One target's samples and readings at the coordinator; `resolve()` gives each tick its
    TimeLag."""

    def __init__(self, step_ns: int = STEP_NS) -> None:
        self.step_ns = step_ns
        self._samples: dict[tuple[str, int], PartitionSamples] = {}
        self._readings: dict[tuple[str, int], _Reading] = {}
        self._read: dict[str, deque[int]] = {}  # per subscription: consumed per tick
        self._seconds: deque[tuple[float, float]] = deque(maxlen=TREND_TICKS + 1)

    def take(self, acked: dict[str, list[tuple[int, int, int]]]) -> None:
        for topic, samples in acked.items():
            for partition, position, intended in samples:
                book = self._samples.get((topic, partition))
                if book is None:
                    book = self._samples[(topic, partition)] = PartitionSamples()
                book.add(position, intended)

    def resolve(self, tick: Tick) -> Tick:
        """The tick with its producers' samples taken off and, where the lag collector read
        positions, its lag's TimeLag."""
        self.take(tick.acked)
        lag = tick.lag
        if lag is not None and lag.positions:
            lag = dataclasses.replace(lag, time=self._time_lag(tick, lag))
        return dataclasses.replace(tick, acked={}, lag=lag)

    def _time_lag(self, tick: Tick, lag: LagSnapshot) -> TimeLag:
        per_partition: dict[int, float] = {}
        per_sub: dict[str, float] = {}
        bound = 0.0
        for sub, positions in lag.positions.items():
            for partition, position in positions.items():
                age, off = self._age(lag, sub, partition, position)
                bound = max(bound, off)
                per_partition[partition] = _oldest(per_partition.get(partition), age)
                per_sub[sub] = _oldest(per_sub.get(sub), age)
        for partition in lag.leaderless:
            per_partition[partition] = math.nan
        self._forget_read(lag)
        seconds = max((s for s in per_partition.values() if s == s), default=math.nan)
        return TimeLag(seconds=seconds, per_partition=per_partition, per_subscription=per_sub,
                       bound_s=bound, trend=self._trend(tick, seconds),
                       drain_s=_drain(tick, lag, seconds), status=self._status(tick, lag))

    def _age(self, lag: LagSnapshot, sub: str, partition: int, position: int) -> tuple[float, float]:
        """(time lag s, how far off s) of one subscription in one partition."""
        if partition in lag.leaderless:
            return math.nan, 0.0
        if self._unread(lag, sub, partition, position) == 0:
            return 0.0, 0.0
        book = self._samples.get((lag.topic, partition))
        found = book.intended(position, lag.positions_after, self.step_ns) if book else None
        if found is None:
            return math.nan, 0.0
        intended, off = found
        return max(0.0, (lag.read_ns - intended) / 1e9), off / 1e9

    def _unread(self, lag: LagSnapshot, sub: str, partition: int, position: int) -> int:
        """The messages the collector counts unread there, at least 1 where a message was
        acknowledged at the position or past it (a client's view of the partition's end, which
        a collector may fall back on, can be old)."""
        count = lag.unread.get(sub, {}).get(partition, 1)
        book = self._samples.get((lag.topic, partition))
        if count == 0 and book is not None and book.reaches(position, lag.positions_after):
            return 1
        return count

    def _forget_read(self, lag: LagSnapshot) -> None:
        """Drop the samples every subscription has read past; thin the rest."""
        for (topic, partition), book in self._samples.items():
            if topic != lag.topic:
                continue
            read = [p[partition] for p in lag.positions.values() if partition in p]
            if len(read) == len(lag.positions):
                book.drop_below(min(read))
            book.thin()

    def _trend(self, tick: Tick, seconds: float) -> float:
        at = tick.time_ns / 1e9
        self._seconds.append((at, seconds))
        t0, s0 = self._seconds[0]
        if at <= t0 or s0 != s0 or seconds != seconds:
            return math.nan
        return (seconds - s0) / (at - t0)

    def _status(self, tick: Tick, lag: LagSnapshot) -> dict[str, LagStatus]:
        read_now: dict[str, int] = {}
        for c in tick.consumers:
            read_now[c.subscription] = read_now.get(c.subscription, 0) + c.consumed
        status: dict[str, LagStatus] = {}
        for sub, positions in lag.positions.items():
            window = self._read.setdefault(sub, deque(maxlen=STATUS_WINDOW))
            window.append(read_now.get(sub, 0))
            worst = LagStatus.OK
            for partition, position in positions.items():
                r = self._readings.setdefault((sub, partition), _Reading())
                r.positions.append(position)
                r.unread.append(self._unread(lag, sub, partition, position))
                # what it read over the last ticks (a batch the broker delivered before a
                # reading can be counted in the tick after it)
                found = partition_status(r, sum(itertools.islice(
                    window, max(0, len(window) - READ_TICKS), None)) > 0)
                worst = found if _RANK[found] > _RANK[worst] else worst
            status[sub] = worst
        return status


def _oldest(known: float | None, age: float) -> float:
    if known is None or known != known:
        return age
    return known if age != age else max(known, age)


def _drain(tick: Tick, lag: LagSnapshot, seconds: float) -> float:
    """Seconds to read the lag at the interval's consume rate net of what is produced (every
    subscription reads every message); inf while that does not make it smaller. A lag younger
    than the tick is being kept up with: 0."""
    if lag.total == 0 or seconds < tick.interval_s:
        return 0.0
    net = tick.consume_rate - tick.produce_rate * max(1, len(lag.positions))
    return lag.total / net if net > 0 else math.inf


def seconds_text(seconds: float) -> str:
    """`0.052 s`, `5.00 s`, `42.1 s`, `612 s`; `–` for NaN."""
    if seconds != seconds:
        return "–"
    if seconds < 1:
        return f"{seconds:.3f} s"
    return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s" if seconds < 100 else f"{seconds:.0f} s"


def drain_text(drain_s: float) -> str:
    """How long the lag takes to drain: `kept up`, `drain 12.0 s`, `growing`; `` unknown."""
    if drain_s != drain_s:
        return ""
    if drain_s == math.inf:
        return "growing"
    return "kept up" if drain_s == 0 else f"drain {seconds_text(drain_s)}"


def worst_status(time_lag: TimeLag) -> str:
    """The worst of the subscriptions' status words (`` with none)."""
    words = list(time_lag.status.values())
    return str(max(words, key=lambda w: _RANK[w])) if words else ""


def time_lag_text(tick: Tick) -> str:
    """The time lag in a few words: `5.00 s +1.00/s growing STOP` (exact: value, trend, time
    to drain, the worst subscription's status word, partitions with no leader), `~0.52 s
    estimate` where only the estimate can be had, `–` where neither."""
    lag = tick.lag
    time_lag = lag.time if lag is not None else None
    if time_lag is None or not tick.lag_s_exact:
        estimate = tick.lag_estimate_s
        return "–" if estimate != estimate else f"~{seconds_text(estimate)} estimate"
    parts = [seconds_text(time_lag.seconds)]
    if time_lag.trend == time_lag.trend:
        parts.append(f"{time_lag.trend:+.2f}/s")
    parts += [drain_text(time_lag.drain_s), worst_status(time_lag)]
    if lag is not None and lag.leaderless:
        parts.append(f"no leader: {partition_list(lag.leaderless)}")
    return " ".join(p for p in parts if p)
