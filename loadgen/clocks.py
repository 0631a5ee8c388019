"""One time base for a run whose load runs on other nodes (loadgen.cluster): each node's wall
clock against the coordinator's, estimated the way NTP does it, and the warning for e2e figures
that the estimate's error bound makes too coarse.

An exchange: the coordinator reads its clock (t1), asks the node, which reads its own when the
request arrives (t2) and when it answers (t3), and reads its clock again when the answer is in
(t4). The node's offset is ((t2 - t1) + (t3 - t4)) / 2 and the exchange's delay (t4 - t1) -
(t3 - t2); whatever the split of the delay between the two ways, the true offset is within
delay / 2 of the estimate. Of a burst of exchanges the one with the least delay is kept (the
one least disturbed by queueing on either end), and bursts repeat every CLOCK_EVERY_S to follow
a clock that drifts; while the last bursts find the offset holding still (no step beyond an
estimate's bound, no drift that would take it further over STEADY_EVERY_S: ClockCadence),
every STEADY_EVERY_S.
Intended send times are on the coordinator's clock; a consumer's node takes its receive times
back by its offset, so every e2e sample it records carries that node's bound."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from loadgen.core.events import EventKind, RunEvent
from loadgen.core.histogram import percentiles
from loadgen.core.ticks import NodeClock, Tick

BURST = 8  # exchanges per estimate
CLOCK_EVERY_S = 5.0  # between bursts, to follow drift
STEADY_EVERY_S = 30.0  # between bursts while the offset holds still
STEADY_AFTER = 3  # bursts in a row that found it still
# an e2e p50 with a clock bound above this fraction of it is warned about
BOUND_FRACTION = 0.25
# the test hook: the load actors of a node whose environment sets this run with their wall
# clock shifted by this many milliseconds (a node with a wrong clock, on one machine)
WALL_SHIFT_ENV = "STREAMBENCH_TEST_WALL_SHIFT_MS"


@dataclass(frozen=True, slots=True)
class Exchange:
    """One clock exchange, nanoseconds: t1 and t4 on the coordinator, t2 and t3 on the node."""

    t1: int
    t2: int
    t3: int
    t4: int

    @property
    def offset_ns(self) -> int:
        return ((self.t2 - self.t1) + (self.t3 - self.t4)) // 2

    @property
    def delay_ns(self) -> int:
        return (self.t4 - self.t1) - (self.t3 - self.t2)


def estimate(burst: list[Exchange]) -> tuple[int, int]:
    """(offset, bound) from the burst's exchange of least delay; the bound is half its delay
    rounded up (never below zero: a clock read twice cannot go back, but be safe)."""
    best = min(burst, key=lambda e: e.delay_ns)
    return best.offset_ns, max(0, -(-best.delay_ns // 2))


class ClockCadence:
    """When a node's next clock burst is due: CLOCK_EVERY_S after the last, or STEADY_EVERY_S
    while its clock holds still against this one. Still means: no step (no estimate beyond
    its bound from the one before) over the last STEADY_AFTER + 1 bursts, and their drift
    (the least-squares slope of their offsets over time) would move the offset by no more
    than the newest estimate's bound over STEADY_EVERY_S, so that spaced bursts miss no more
    than that. The slope is taken over several bursts because each estimate wanders within
    its bound: between two bursts 5 s apart that wander looks like a drift six times its size
    over 30 s. A burst that finds the clock moving goes back to CLOCK_EVERY_S. Each burst
    costs the coordinator BURST calls, more than a node's ticks at CLOCK_EVERY_S."""

    def __init__(self) -> None:
        self._seen: deque[NodeClock] = deque(maxlen=STEADY_AFTER + 1)  # since the last step

    def next_in(self, clock: NodeClock) -> float:
        """Seconds from the burst that gave `clock` to the next."""
        if self._seen and abs(clock.offset_ns - self._seen[-1].offset_ns) > clock.bound_ns:
            self._seen.clear()  # a step: start again
        self._seen.append(clock)
        if len(self._seen) < STEADY_AFTER + 1:
            return CLOCK_EVERY_S
        drift = abs(_slope(self._seen)) * STEADY_EVERY_S * 1e9
        return STEADY_EVERY_S if drift <= clock.bound_ns else CLOCK_EVERY_S


def _slope(clocks: deque[NodeClock]) -> float:
    """Least-squares slope of the offsets over the estimates' times (ns per ns)."""
    t0 = clocks[0].estimated_ns
    xs = [c.estimated_ns - t0 for c in clocks]
    ys = [c.offset_ns for c in clocks]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0


def shift_wall_clock(shift_ms: float) -> None:
    """The test hook: this process's wall clock (time.time, time.time_ns) read shifted."""
    shift_ns = round(shift_ms * 1e6)
    time_ns, time_s = time.time_ns, time.time
    time.time_ns = lambda: time_ns() + shift_ns
    time.time = lambda: time_s() + shift_ns / 1e9


class BoundWatch:
    """Warns (a clock-bound event) when a target's e2e p50 of a tick is less than 1 /
    BOUND_FRACTION times the clock bound its samples carry: said when that starts, again
    only after a tick with samples under it."""

    def __init__(self, label: str, publish: Callable[[RunEvent], None],
                 fraction: float = BOUND_FRACTION) -> None:
        self._label = label
        self._publish = publish
        self._fraction = fraction
        self._over = False

    def check(self, tick: Tick) -> None:
        if not tick.e2e_latency.total:
            return
        bound = tick.e2e_clock_bound_ns
        if not bound:  # every sample on the coordinator's own clock
            self._over = False
            return
        p50 = float(percentiles(tick.e2e_latency, [50.0])[0])
        over = bound > self._fraction * p50
        if over and not self._over:
            self._publish(RunEvent(
                time.time_ns(), self._label, EventKind.CLOCK_BOUND,
                f"the nodes' clock error bound ±{bound / 1e6:.3f} ms is "
                f"{bound / p50 * 100 if p50 > 0 else float('inf'):.0f} % of the e2e p50 "
                f"({p50 / 1e6:.3f} ms; warned above {self._fraction * 100:.0f} %): "
                "e2e figures are that uncertain"))
        self._over = over
