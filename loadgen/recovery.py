"""Recovery after a fault, measured from the ticks: how long until a target is healthy again
(produce and consume rates back within 10 % of what they should be for 5 s, and lag back to its
level before the fault, give or take what the lag's source trails consumption by: Pravega's
readers write their positions back every 3 s, so up to 4 s of consumption there still shows as
lag on a healthy target), and what the fault cost meanwhile: the lag peak, the longest publish
stall, messages that arrived late, send errors. Also the drain of a backlog once stopped
consumers resume (`DrainWatch`)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from loadgen.core.ticks import Tick

HEALTHY_RATIO = 0.10  # rates within 10 % of their expected value …
HEALTHY_SECONDS = 5.0  # … for this long, lag back to the pre-fault level
LATE_FLOOR_NS = 100_000_000  # a message is late past max(100 ms, 10 × the pre-fault e2e p99)
LATE_FACTOR = 10.0


@dataclass
class Recovery:
    """One target's recovery from the fault(s) since it was last healthy."""

    target: str
    first_fault: str  # e.g. "kill kafka-2"
    first_ns: int  # wall time of the first fault
    expected_produce: float  # msg/s the target should produce when healthy (0: unknown)
    subscriptions: int
    lag_before: int
    late_ns: int
    last_fault: str = ""
    last_ns: int = 0
    healthy_since_ns: int | None = None
    lag_peak: int = 0
    stall_ns: int = 0  # the longest publish latency (send → acknowledgement)
    late: int = 0
    send_errors: int = 0
    recovered_ns: int | None = None
    faults: list[str] = field(default_factory=list)
    last_tick_ns: int = 0  # the end of the last tick seen since the fault

    def detail(self) -> str:
        took = (f"healthy again {(self.recovered_ns - self.first_ns) / 1e9:.1f} s after "
                f"{self.first_fault}" if self.recovered_ns is not None
                else f"not healthy again since {self.first_fault}")
        if self.recovered_ns is None and self.healthy_since_ns is not None:
            # healthy when the run ended, for less than it takes to count as recovered
            took += (f" (healthy for the last {(self.last_tick_ns - self.healthy_since_ns) / 1e9:.1f}"
                     f" s of the run, {HEALTHY_SECONDS:.0f} s needed)")
        if self.last_fault and self.recovered_ns is not None:
            took += f" ({(self.recovered_ns - self.last_ns) / 1e9:.1f} s after {self.last_fault})"
        return (f"{took}; lag peak {self.lag_peak:,} (before {self.lag_before:,}); longest publish "
                f"stall {self.stall_ns / 1e6:,.0f} ms; late messages {self.late:,} (e2e over "
                f"{self.late_ns / 1e6:,.0f} ms); send errors {self.send_errors:,}")


def _late_count(tick: Tick, threshold_ns: int) -> int:
    snap = tick.e2e_latency
    if snap.total == 0 or snap.max <= threshold_ns:
        return 0
    values = snap.values()
    return int(np.asarray(snap.count)[values > threshold_ns].sum())


class RecoveryWatch:
    """Follows every target's ticks; `fault()` opens (or extends) a recovery, `tick()` returns
    the recoveries that completed with that tick."""

    def __init__(self, subscriptions: int) -> None:
        self._subscriptions = subscriptions
        self._last: dict[str, Tick] = {}
        self._open: dict[str, Recovery] = {}
        self._p99: dict[str, float] = {}

    def fault(self, target: str, what: str, time_ns: int) -> None:
        rec = self._open.get(target)
        if rec is not None:  # a further fault before it recovered: measured from both
            rec.last_fault, rec.last_ns, rec.healthy_since_ns = what, time_ns, None
            rec.faults.append(what)
            return
        last = self._last.get(target)
        lag_before = last.lag.total if last is not None and last.lag is not None else 0
        expected = last.target_rate if last is not None else 0.0
        if expected <= 0 and last is not None:
            expected = last.produce_rate  # maximum rate: back to what it achieved before
        p99 = self._p99.get(target, 0.0)
        self._open[target] = Recovery(
            target, what, time_ns, expected, self._subscriptions, lag_before,
            late_ns=int(max(LATE_FLOOR_NS, LATE_FACTOR * p99)), faults=[what])

    def tick(self, tick: Tick) -> Recovery | None:
        self._last[tick.target] = tick
        rec = self._open.get(tick.target)
        if rec is None:
            if tick.e2e_latency.total:
                self._p99[tick.target] = tick.e2e_latency.percentile(99)
            return None
        rec.last_tick_ns = tick.time_ns
        rec.lag_peak = max(rec.lag_peak, tick.lag.total if tick.lag is not None else 0)
        if tick.publish_latency.total:
            rec.stall_ns = max(rec.stall_ns, tick.publish_latency.max)
        rec.late += _late_count(tick, rec.late_ns)
        rec.send_errors += tick.send_errors
        if not self._healthy(rec, tick):
            rec.healthy_since_ns = None
            return None
        # healthy from the start of this tick's interval, but never before the fault itself
        start = max(tick.time_ns - int(tick.interval_s * 1e9), rec.last_ns or rec.first_ns)
        if rec.healthy_since_ns is None:
            rec.healthy_since_ns = start
        if (tick.time_ns - rec.healthy_since_ns) / 1e9 >= HEALTHY_SECONDS - 1e-6:
            rec.recovered_ns = rec.healthy_since_ns
            del self._open[tick.target]
            return rec
        return None

    def pending(self) -> list[Recovery]:
        """Recoveries still open (reported as not recovered when the run ends)."""
        return list(self._open.values())

    @staticmethod
    def _healthy(rec: Recovery, tick: Tick) -> bool:
        # a rate changed since the fault counts from the change
        expected = tick.target_rate if tick.target_rate > 0 else rec.expected_produce
        lag = tick.lag.total if tick.lag is not None else 0
        trails_s = tick.lag.trails_s if tick.lag is not None else 0.0
        lag_ok = lag <= rec.lag_before + max(10.0, HEALTHY_RATIO * expected,
                                             trails_s * expected * rec.subscriptions)
        if expected <= 0:
            return lag_ok
        produce_ok = abs(tick.produce_rate - expected) <= HEALTHY_RATIO * expected
        expected_consume = expected * rec.subscriptions
        consume_ok = (rec.subscriptions == 0
                      or abs(tick.consume_rate - expected_consume) <= HEALTHY_RATIO * expected_consume)
        return produce_ok and consume_ok and lag_ok


DRAIN_HOLD_S = 3.0  # the lag stays back for this long before a backlog counts as drained
LEVEL_TICKS = 5  # the lag's level before the consumers stopped: the highest of these last readings


@dataclass
class ConsumersStopped:
    """The lag's level before a target's consumers stopped: its last readings then."""

    time_ns: int
    readings: deque[int]

    @property
    def level(self) -> int:
        return max(self.readings, default=0)


@dataclass
class Backlog:
    """A backlog built while a target's consumers were stopped, and its drain once resumed."""

    target: str
    resumed_ns: int
    stop: ConsumersStopped
    lag_at_resume: int  # the backlog: the highest lag from the last reading before the resumption on
    consumed: int = 0  # consumed since the resumption, up to the last tick seen
    back_ns: int | None = None  # the first tick of the stretch the lag has been back since
    consumed_back: int = 0  # consumed from the resumption to the end of that tick

    def threshold(self, tick: Tick) -> int:
        """The lag counts as back within the level it had before the consumers stopped, or
        within this tick's production, whichever is larger."""
        return max(self.stop.level, tick.produced)

    def detail(self, drained_ns: int) -> str:
        took = (drained_ns - self.resumed_ns) / 1e9
        rate = self.consumed_back / took if took > 0 else float("nan")
        return (f"backlog of {self.lag_at_resume:,} drained in {took:.1f} s after the consumers "
                f"resumed: {rate:,.0f} msg/s consumed meanwhile")


class DrainWatch:
    """The drain of a backlog after the consumers resume, measured on the ticks. The backlog is
    drained when the lag is back within the level it had before the consumers stopped (the
    highest of its last LEVEL_TICKS readings then) or within one tick's production, whichever
    is larger, and stays so for DRAIN_HOLD_S (every reading until the one DRAIN_HOLD_S later);
    the drain ends at the first tick of that stretch, not at its end (the event comes
    DRAIN_HOLD_S later). Stopped again before that, the consumers leave the backlog undrained,
    and the next drain is measured against the level before the first stop. The backlog is the
    highest lag read from the last reading before the resumption on; the rate is what was
    consumed from the resumption to the drain's end over that time. A stretch the run's end
    cuts short still counts (`ended`): the lag did not rise again."""

    def __init__(self) -> None:
        self._recent: dict[str, deque[int]] = {}
        self._stops: dict[str, ConsumersStopped] = {}  # targets stopped or draining
        self._open: dict[str, Backlog] = {}

    def stopped(self, target: str, time_ns: int) -> None:
        """The target's consumers stopped."""
        self._open.pop(target, None)
        self._stop(target, time_ns)

    def resumed(self, target: str, time_ns: int) -> None:
        """The target's consumers started again."""
        recent = self._recent.get(target, ())
        self._open[target] = Backlog(target, time_ns, self._stop(target, time_ns),
                                     recent[-1] if recent else 0)

    def cancel(self, target: str) -> None:
        """This drain is not one to time (OMB's backlog phase times its own)."""
        self._open.pop(target, None)
        self._stops.pop(target, None)

    def tick(self, tick: Tick) -> tuple[Backlog, int] | None:
        """(the backlog, the end of its drain) once the lag has been back for DRAIN_HOLD_S."""
        if tick.lag is None:
            return None
        lag = tick.lag.total
        self._recent.setdefault(tick.target, deque(maxlen=LEVEL_TICKS)).append(lag)
        stop = self._stops.get(tick.target)
        if stop is not None and tick.time_ns <= stop.time_ns:  # a tick seen after the stop
            stop.readings.append(lag)
        backlog = self._open.get(tick.target)
        if backlog is None:
            return None
        backlog.lag_at_resume = max(backlog.lag_at_resume, lag)
        if tick.time_ns <= backlog.resumed_ns:
            return None
        # nothing was read while the consumers were stopped: all of this tick's consumption
        # comes after the resumption
        backlog.consumed += tick.consumed
        if lag > backlog.threshold(tick):
            backlog.back_ns = None
            return None
        if backlog.back_ns is None:
            backlog.back_ns, backlog.consumed_back = tick.time_ns, backlog.consumed
        # ticks come about a second apart, give or take a few ms: the reading DRAIN_HOLD_S on
        if (tick.time_ns - backlog.back_ns) / 1e9 < DRAIN_HOLD_S - tick.interval_s / 2:
            return None
        return self._drained(tick.target)

    def ended(self) -> list[tuple[Backlog, int]]:
        """At the end of the run: the backlogs whose lag was back at the last ticks, for less
        than DRAIN_HOLD_S."""
        return [self._drained(t) for t, b in list(self._open.items()) if b.back_ns is not None]

    def _stop(self, target: str, time_ns: int) -> ConsumersStopped:
        """The first stop since the target last drained: a later one keeps its level."""
        if target not in self._stops:
            self._stops[target] = ConsumersStopped(
                time_ns, deque(self._recent.get(target, ()), maxlen=LEVEL_TICKS))
        return self._stops[target]

    def _drained(self, target: str) -> tuple[Backlog, int]:
        backlog = self._open.pop(target)
        self._stops.pop(target, None)
        assert backlog.back_ns is not None
        return backlog, backlog.back_ns
