"""Recovery after a fault, measured from the ticks: how long until a target is healthy again
(produce and consume rates back within 10 % of what they should be for 5 s, and lag back to its
level before the fault, give or take what the lag's source trails consumption by: Pravega's
readers write their positions back every 3 s, so up to 4 s of consumption there still shows as
lag on a healthy target), and what the fault cost meanwhile: the lag peak, the longest publish
stall, messages that arrived late, send errors."""

from __future__ import annotations

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


@dataclass
class Backlog:
    """A backlog built while a target's consumers were stopped, and its drain once resumed."""

    target: str
    resumed_ns: int
    lag_at_resume: int
    consumed: int = 0
    seconds: float = 0.0

    def detail(self, drained_ns: int) -> str:
        took = (drained_ns - self.resumed_ns) / 1e9
        rate = self.consumed / self.seconds if self.seconds > 0 else float("nan")
        return (f"backlog of {self.lag_at_resume:,} drained in {took:.1f} s after the consumers "
                f"resumed: {rate:,.0f} msg/s consumed meanwhile")


class DrainWatch:
    """Time to zero lag and the drain rate after consumers resume."""

    def __init__(self) -> None:
        self._lag: dict[str, int] = {}
        self._open: dict[str, Backlog] = {}

    def resumed(self, target: str, time_ns: int) -> None:
        self._open[target] = Backlog(target, time_ns, self._lag.get(target, 0))

    def stopped(self, target: str) -> None:
        self._open.pop(target, None)

    def tick(self, tick: Tick) -> tuple[Backlog, int] | None:
        """(the backlog, the time it emptied) once the lag reaches zero."""
        lag = tick.lag.total if tick.lag is not None else None
        if lag is not None:
            self._lag[tick.target] = lag
        backlog = self._open.get(tick.target)
        if backlog is None or lag is None:
            return None
        # only the part of the interval after the consumers resumed (nothing was read before)
        after = (tick.time_ns - backlog.resumed_ns) / 1e9
        if after <= 0:
            return None
        backlog.consumed += tick.consumed
        backlog.seconds += min(tick.interval_s, after)
        if lag > 0:
            return None
        del self._open[tick.target]
        return backlog, tick.time_ns
