"""OpenMessaging Benchmark's backlog phase (`consumerBacklogSizeGB`): the consumers stay stopped
at the start of the measuring phase until each subscription's backlog reaches the requested
size, then resume, and the drain is timed until the backlog is down to
max(1,000, (1 − backlogDrainRatio) × the requested size) messages; the run then goes on to the
end of its measuring phase. The backlog in messages is subscriptions × produced − consumed,
counted by streambench (as OMB counts sent − received), per target."""

from __future__ import annotations

from dataclasses import dataclass, field

from loadgen.core.histogram import HistogramSnapshot
from loadgen.core.ticks import Phase, Tick

GIB = 1 << 30
DRAIN_FLOOR_MSGS = 1000  # OMB's: the drain ends at this backlog at the latest


@dataclass
class _Target:
    state: str = "building"  # building → draining → done
    start_ns: int = 0  # the measuring phase's start, when the consumers were stopped
    built_ns: int = 0
    built_msgs: int = 0
    drained_s: float = 0.0
    drained_msgs: int = 0
    publish: HistogramSnapshot = field(default_factory=HistogramSnapshot.empty)


class BacklogWatch:
    """Follows each target's measuring ticks through the backlog phase; tick() says what to do
    (resume a target's consumers) and what to record (an event kind and its detail)."""

    def __init__(self, labels: list[str], size_bytes: float, drain_ratio: float,
                 message_size: int, subscriptions: int) -> None:
        self.size_msgs = max(1, int(size_bytes // message_size))  # per subscription
        self.drain_to = max(DRAIN_FLOOR_MSGS, int((1.0 - drain_ratio) * self.size_msgs))
        self.message_size = message_size
        self.subscriptions = max(1, subscriptions)
        self._targets = {label: _Target() for label in labels}

    def started(self, time_ns: int) -> None:
        for t in self._targets.values():
            t.start_ns = time_ns

    def tick(self, tick: Tick) -> tuple[str, str] | None:
        """(event kind, detail) when the target's backlog was built (its consumers are to
        resume) or drained."""
        t = self._targets.get(tick.target)
        if t is None or tick.phase is not Phase.MEASURING or t.state == "done":
            return None
        # the backlog of one subscription, in messages
        backlog = (self.subscriptions * tick.produced_total - tick.consumed_total) / self.subscriptions
        if t.state == "building":
            if backlog < self.size_msgs:
                return None
            t.state, t.built_ns, t.built_msgs = "draining", tick.time_ns, int(backlog)
            seconds = (tick.time_ns - t.start_ns) / 1e9
            return "backlog-built", (
                f"{int(backlog):,} messages ({backlog * self.message_size / GIB:.3f} GiB) per "
                f"subscription in {seconds:.1f} s; consumers resume, drain to {self.drain_to:,}")
        t.drained_s += tick.interval_s
        t.drained_msgs += tick.consumed
        t.publish = HistogramSnapshot.merge([t.publish, tick.publish_latency])
        if backlog > self.drain_to:
            return None
        t.state = "done"
        seconds = (tick.time_ns - t.built_ns) / 1e9
        rate = t.drained_msgs / t.drained_s if t.drained_s > 0 else 0.0
        p99 = (f"{t.publish.percentile(99.0) / 1e6:.3f} ms" if t.publish.total else "none")
        return "backlog-drain-done", (
            f"backlog down to {max(int(backlog), 0):,} messages {seconds:.1f} s after it was "
            f"built: {rate:,.0f} msg/s, {rate * self.message_size / 1e6:.2f} MB/s consumed "
            f"while draining; publish p99 during the drain {p99}")

    def building(self) -> list[str]:
        return [label for label, t in self._targets.items() if t.state == "building"]
