"""The search for the highest sustainable rate (OpenMessaging Benchmark's `producerRate: 0`),
per target. The rate starts at START_RATE msg/s and is decided again every PERIOD_TICKS ticks
from that period's counts:

- the receive backlog is what the broker holds unread (per subscription: produced − consumed,
  since the start), the publish backlog what the producers owe their schedule (intended −
  acknowledged, summed since the last step down, whose owed slots the run drops);
- either is over the limit when it passes BACKLOG_LIMIT messages or BACKLOG_S seconds of the
  rate, whichever is more (a batch in flight or a short stall of the machine is no sign of a
  rate too high; a rate too high makes the backlog grow until it passes any limit);
- the publish backlog over the limit ("behind schedule"), or the receive backlog over it and
  not smaller than at the previous decision ("backlog growing"): the rate comes
  down to 0.2 × the achieved rate + 0.8 × the
  rate that would clear the backlog within CLEAR_PERIODS periods (at least CLEAR_FLOOR × the
  achieved rate, so that one large backlog does not throw the search back to nothing), the step
  factor halves (to FACTOR_MIN at least), and the rate it failed at is remembered as a hint of
  the maximum (when it failed at the ceiling below, the ceiling goes down by PROBE); the
  slots the producers still owe at the rate given up are dropped (the run does so), as OMB's
  rate limiter holds no debt;
- a first period over the limit at a rate whose previous period passed with both backlogs
  at most half the limit ("over the limit once at a rate that passed: holding"): the rate is
  held, owed slots kept, for one more period; after a short stall of the machine the
  producers catch up, a rate too high fails again and comes down then (with the larger
  backlog in its figures);
- a receive backlog over the limit that is shrinking: the rate is held while it drains;
- a period that passed but in which the owed or the unread grew by more than half the limit:
  the rate is held (a rate just too high fails in time; climbing from it would overshoot);
- otherwise the rate goes up: by (1 + factor), the factor doubling up to 1, until a rate has
  failed; from then on never past the ceiling, the lower of the last two rates that failed
  above the highest rate that has passed since (so a probe that passes lifts it),
  halfway to it on a log scale (at least PROBE up), or straight back to the highest rate that
  passed with room since a rate at or below it failed, when that is higher (after a back-off
  the search returns to what it knows passes instead of climbing again, and the step does
  not grow back to the rate that just failed); within PROBE of the ceiling it holds, and
  probes PROBE higher every HOLD_PERIODS + 1 periods when the producers owe at most half the
  limit (a rate just too high makes the owed grow slowly: it is held until it fails
  instead).

The search runs from the warm-up to the end of the measuring phase: the measured figures are
those of the rates it held. Its result is the median acknowledged rate of the measuring
phase's periods that kept up (a rate's overshoot before it fails, and the recovery after a
back-off, are no sustained rate); the average over the whole measuring phase is given beside
it. It has
converged when its last CONVERGED_STEPS rates are within
PROBE of each other, each a healthy one (up, holding or probing)."""

from __future__ import annotations

from dataclasses import dataclass, field

from loadgen.core.ticks import Phase, Tick

START_RATE = 10_000.0
PERIOD_TICKS = 3
BACKLOG_LIMIT = 1000
BACKLOG_S = 0.25  # at high rates the limit is this many seconds of the rate instead
FACTOR_MIN = 0.01
PROBE = 0.05
CONVERGED_STEPS = 3
HOLD_PERIODS = 2  # healthy periods at the hint before probing above it
CLEAR_PERIODS = 5
CLEAR_FLOOR = 0.25


@dataclass
class _Search:
    rate: float = START_RATE
    factor: float = 1.0
    hints: list[float] = field(default_factory=list)
    ticks: list[Tick] = field(default_factory=list)
    held: int = 0
    rates: list[float] = field(default_factory=list)  # the rate decided at each step
    converged: bool = False
    unread: float = 0.0  # the receive backlog at the previous decision
    passed: float = 0.0  # the rate of the latest period that was not over the limit
    good: float = 0.0  # the highest rate that passed with room since one at or below it failed
    doubted: bool = False  # the previous period was over the limit at a rate that had passed
    owed: float = 0.0  # what the producers fell behind their schedule since the last step down
    # what the producers had acknowledged over the measuring phase's periods, and their length
    measured_sent: float = 0.0
    measured_s: float = 0.0
    # the acknowledged msg/s of each measuring-phase period that kept up (both backlogs within
    # the limit), and the number of measuring-phase periods
    kept: list[float] = field(default_factory=list)
    periods: int = 0


class RateSearch:
    """tick() returns the target's next rate with a line saying why, every PERIOD_TICKS ticks."""

    def __init__(self, labels: list[str], subscriptions: int) -> None:
        self.subscriptions = max(1, subscriptions)
        self._targets = {label: _Search() for label in labels}

    def rate(self, label: str) -> float:
        return self._targets[label].rate

    def converged(self, label: str) -> bool:
        return self._targets[label].converged

    def sustained(self, label: str) -> float | None:
        """The search's result: the median of the acknowledged msg/s of the measuring phase's
        periods that kept up (both backlogs within the limit). Not the overshoot of a rate
        before it failed, when the producers outran the consumers, nor the recovery after a
        back-off (a mean over the kept periods would count the climb back from it). None when
        no measured period kept up."""
        kept = sorted(self._targets[label].kept)
        if not kept:
            return None
        mid = len(kept) // 2
        return kept[mid] if len(kept) % 2 else (kept[mid - 1] + kept[mid]) / 2

    def measured(self, label: str) -> float | None:
        """The acknowledged msg/s over the whole measuring phase (the rates the search held
        there, with their probes, overshoots and back-offs). None before any measured period."""
        s = self._targets[label]
        return s.measured_sent / s.measured_s if s.measured_s > 0 else None

    def periods(self, label: str) -> tuple[int, int]:
        """(measured periods that kept up, measured periods)."""
        s = self._targets[label]
        return len(s.kept), s.periods

    def tick(self, tick: Tick) -> tuple[float, str, bool] | None:
        """(next rate, what was seen, whether the search has just converged) at the end of a
        period; None otherwise."""
        s = self._targets.get(tick.target)
        if s is None or tick.phase not in (Phase.WARMUP, Phase.MEASURING):
            return None
        s.ticks.append(tick)
        if len(s.ticks) < PERIOD_TICKS:
            return None
        period, s.ticks = s.ticks, []
        seconds = sum(t.interval_s for t in period)
        if seconds <= 0:
            return None
        sent = sum(t.produced for t in period)
        measuring = [t for t in period if t.phase == Phase.MEASURING]
        measured_sent = sum(t.produced for t in measuring)
        measured_s = sum(t.interval_s for t in measuring)
        s.measured_sent += measured_sent
        s.measured_s += measured_s
        expected = sum(t.target_rate * t.interval_s for t in period)
        received = sum(t.consumed for t in period) / self.subscriptions
        last = period[-1]
        subs = self.subscriptions
        # acknowledgements can come after the consumers have the messages (a broker that
        # replies after its fsync): a count of the consumers' ahead is no backlog
        receive_backlog = max(0.0, (last.produced_total * subs - last.consumed_total) / subs)
        # owed slots add up until a step down drops them; messages in flight count as owed
        s.owed = max(0.0, s.owed + expected - sent)
        publish_backlog = s.owed
        old = s.rate
        limit = backlog_limit(old)
        achieved = sent / seconds
        seen = (f"achieved {achieved:,.0f} msg/s at {s.rate:,.0f}; unread {receive_backlog:,.0f}, "
                f"behind schedule {publish_backlog:,.0f}; limit {limit:,.0f}")
        draining = limit < receive_backlog < s.unread
        unread_before, s.unread = s.unread, receive_backlog
        over = publish_backlog > limit or (receive_backlog > limit and not draining)
        if over and old == s.passed and not s.doubted:
            # one period over the limit at a rate that passed before: a stall of the machine
            # or a rate too high; the next period tells (the owed slots are kept for it)
            s.doubted = True
            verdict = "over the limit once at a rate that passed: holding"
        elif over:
            s.doubted = False
            clear = achieved
            horizon = CLEAR_PERIODS * seconds
            if receive_backlog > limit:
                clear = min(clear, received / seconds - receive_backlog / horizon)
            if publish_backlog > limit:
                clear = min(clear, achieved - publish_backlog / horizon)
            clear = max(clear, CLEAR_FLOOR * achieved)
            ceiling = self._ceiling(s)
            # failing at the ceiling lowers it by PROBE: the maximum was hinted too high
            at_ceiling = ceiling is not None and abs(old - ceiling) <= ceiling * 1e-9
            s.hints.append(old * (1 - PROBE) if at_ceiling else old)
            if old <= s.good:
                s.good = 0.0  # a rate that passed no longer does: the machine has slowed
            s.rate = max(min(old, 0.2 * achieved + 0.8 * clear), 1.0)
            s.factor = max(s.factor / 2, FACTOR_MIN)
            s.held = 0
            s.owed = 0.0  # the run drops the slots owed at the rate given up
            verdict = ("behind schedule: down" if receive_backlog <= limit
                       else "backlog growing: down")
        elif draining:
            s.doubted = False
            verdict = "backlog draining: holding"
        else:
            s.doubted = False
            # passed with room to spare (a rate just too high owes more every period)
            s.passed = old if max(publish_backlog, receive_backlog) <= limit / 2 else 0.0
            if s.passed:
                s.good = max(s.good, old)
            ceiling = self._ceiling(s)
            if ceiling is not None and old >= ceiling * (1 - PROBE):
                s.held += 1
                # a probe only from a rate the producers keep up with: owing half the limit
                # after the hold, the rate may be just too high, the owed growing slowly
                if s.held > HOLD_PERIODS and publish_backlog <= limit / 2:
                    s.rate, s.held, verdict = old * (1 + PROBE), 0, "steady: probing higher"
                else:
                    s.rate, verdict = old, "steady: holding"
            elif max(expected - sent, receive_backlog - unread_before) > limit / 2:
                # passed, but the owed or the unread grew by more than half the limit in this
                # period: not a rate to climb from (if it is too high, it fails in time)
                s.rate, verdict = old, "steady: holding"
            elif ceiling is not None:
                # between a rate that passed and one that failed: halfway (on a log scale),
                # or straight back to the highest rate that passed since a back-off
                s.rate = max((old * ceiling) ** 0.5, old * (1 + PROBE),
                             min(s.good, ceiling * (1 - PROBE)))
                s.rate = min(s.rate, ceiling)
                verdict = "steady: up"
            else:
                s.rate = old * (1 + s.factor)
                s.factor = min(s.factor * 2, 1.0)
                verdict = "steady: up"
        kept = verdict.startswith("steady")
        if measured_s > 0:
            s.periods += 1
            if kept:
                s.kept.append(measured_sent / measured_s)
        # only healthy decisions count towards convergence
        s.rates.append(s.rate if kept else -1.0)
        just = False
        recent = s.rates[-CONVERGED_STEPS:]
        if (not s.converged and len(s.hints) >= 2 and len(recent) == CONVERGED_STEPS
                and min(recent) > 0 and max(recent) <= min(recent) * (1 + PROBE)):
            s.converged = just = True
        return s.rate, f"{verdict} {old:,.0f} → {s.rate:,.0f} msg/s ({seen})", just

    @staticmethod
    def _ceiling(s: _Search) -> float | None:
        """The rate not to pass once a rate has failed: the lower of the last two rates that
        failed above the highest one that has passed since (a failure below a rate that
        passed later was a passing disturbance)."""
        above = [h for h in s.hints if h > s.good]
        return min(above[-2:]) if above else None


def backlog_limit(rate: float) -> float:
    """The backlog (owed or unread) above which a rate is not sustained: BACKLOG_LIMIT
    messages, or BACKLOG_S seconds of the rate when that is more. A client that sends in
    batches has a batch or more in flight, and a short stall of a shared machine leaves that
    much owed, without the rate being too high; a rate above what is sustained makes the owed
    or the unread grow without end, so it passes any such limit."""
    return max(float(BACKLOG_LIMIT), rate * BACKLOG_S)
