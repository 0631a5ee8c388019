"""The drain of a backlog after the consumers resume (DrainWatch), on synthetic tick series: the
lag back within its level before the stop or one tick's production, held for DRAIN_HOLD_S, the
drain ending at the first tick of that stretch; the consume rate over the drain."""

from __future__ import annotations

import pytest

from loadgen.core.histogram import Histogram
from loadgen.core.ticks import LagSnapshot, Phase, Resources, Tick
from loadgen.recovery import DRAIN_HOLD_S, DrainWatch

S = 1_000_000_000


def _tick(second: int, produced: int, consumed: int, lag: int | None) -> Tick:
    """The tick that ends at `second` (1 s long)."""
    empty = Histogram().snapshot_and_reset
    return Tick("redis", second, second * S, 1.0, Phase.MEASURING, float(second), produced,
                produced * 100, consumed, consumed * 100, 0, 1000.0, empty(), empty(), empty(),
                LagSnapshot(lag) if lag is not None else None, Resources())


def _feed(watch: DrainWatch, ticks: list[Tick]) -> list[tuple[int, str, int]]:
    """(the second of the tick that completed a drain, its detail, the drain's end) for each."""
    done = []
    for t in ticks:
        found = watch.tick(t)
        if found is not None:
            backlog, at_ns = found
            done.append((t.time_ns // S, backlog.detail(at_ns), at_ns))
    return done


def _steady(first: int, last: int, lag: int = 2, rate: int = 1000) -> list[Tick]:
    return [_tick(s, rate, rate, lag) for s in range(first, last + 1)]


def test_drain_ends_at_the_first_tick_of_the_held_stretch() -> None:
    """The issue's case: producers at 1,000 msg/s, lag about 2; consumers stopped for 5 s. The
    tick after the resumption reads the backlog down to 15 (within one tick's production,
    not zero): drained then, said DRAIN_HOLD_S later."""
    watch = DrainWatch()
    assert _feed(watch, _steady(1, 3)) == []
    watch.stopped("redis", int(3.5 * S))
    stop = [_tick(4, 1000, 500, 502)] + [_tick(s, 1000, 0, 502 + 1000 * (s - 4)) for s in range(5, 9)]
    assert _feed(watch, stop) == []
    watch.resumed("redis", int(8.5 * S))
    drain = [_tick(9, 1000, 5_489, 15)] + [_tick(s, 1000, 1000, 15 if s % 2 else 3)
                                          for s in range(10, 16)]
    done = _feed(watch, drain)
    hold = int(DRAIN_HOLD_S)
    assert [(s, at // S) for s, _d, at in done] == [(9 + hold, 9)]
    detail = done[0][1]
    # the backlog: the highest lag read from the last reading before the resumption on
    assert detail == ("backlog of 4,502 drained in 0.5 s after the consumers resumed: "
                      "10,978 msg/s consumed meanwhile")


def test_lag_that_never_comes_back_is_not_drained() -> None:
    watch = DrainWatch()
    _feed(watch, _steady(1, 3))
    watch.stopped("redis", int(3.5 * S))
    _feed(watch, [_tick(s, 1000, 0, 1000 * (s - 3)) for s in range(4, 8)])
    watch.resumed("redis", 7 * S)
    # consumers slower than the producers: the lag falls, then settles at 1,500
    lags = [3500, 2500, 1800, 1500, 1500, 1500, 1500, 1500]
    assert _feed(watch, [_tick(8 + i, 1000, 1000, lag) for i, lag in enumerate(lags)]) == []
    assert watch.ended() == []


def test_a_dip_that_rises_again_does_not_count() -> None:
    watch = DrainWatch()
    _feed(watch, _steady(1, 3))
    watch.stopped("redis", int(3.5 * S))
    _feed(watch, [_tick(s, 1000, 0, 1000 * (s - 3)) for s in range(4, 9)])
    watch.resumed("redis", 8 * S)
    lags = {9: 200, 10: 3000, 11: 1001, 12: 900, 13: 5, 14: 4, 15: 3, 16: 2}
    done = _feed(watch, [_tick(s, 1000, 1000 if s != 9 else 5800, lag) for s, lag in lags.items()])
    # 200 at 9 s, then over the threshold again at 10 s and 11 s (1,001 > 1,000 produced)
    assert [(s, at // S) for s, _d, at in done] == [(12 + int(DRAIN_HOLD_S), 12)]
    assert "drained in 4.0 s" in done[0][1]
    assert "backlog of 5,000" in done[0][1]  # the reading at the resumption; 3,000 later is less
    assert f"{(5800 + 3 * 1000) / 4:,.0f} msg/s" in done[0][1]


def test_producers_stopped_too_drain_to_the_level_before() -> None:
    """With nothing produced, one tick's production is 0: the lag must come back to its level
    before the consumers stopped (the highest of the last readings then, 40 here)."""
    watch = DrainWatch()
    _feed(watch, [_tick(1, 1000, 1000, 12), _tick(2, 1000, 1000, 40), _tick(3, 1000, 1000, 9)])
    watch.stopped("redis", int(3.2 * S))  # then the producers stop at 5 s
    _feed(watch, [_tick(4, 1000, 0, 1009), _tick(5, 1000, 0, 2009), _tick(6, 0, 0, 2009)])
    watch.resumed("redis", 6 * S)
    lags = [1200, 400, 41, 40, 0, 0, 0, 0]
    consumed = [809, 800, 359, 1, 40, 0, 0, 0]
    done = _feed(watch, [_tick(7 + i, 0, c, lag)
                         for i, (lag, c) in enumerate(zip(lags, consumed, strict=True))])
    assert [at // S for _s, _d, at in done] == [10]  # 41 is over 40, 40 is not
    assert "drained in 4.0 s" in done[0][1] and f"{1969 / 4:,.0f} msg/s" in done[0][1]


def test_several_stops_in_a_row_count_from_the_level_before_the_first() -> None:
    watch = DrainWatch()
    _feed(watch, _steady(1, 3))
    watch.stopped("redis", int(3.5 * S))
    _feed(watch, [_tick(s, 1000, 0, 2 + 1000 * (s - 3)) for s in range(4, 7)])
    watch.resumed("redis", 6 * S)
    _feed(watch, [_tick(7, 1000, 2000, 2002)])  # draining, not back
    watch.stopped("redis", int(7.5 * S))  # again, with 2,002 waiting: the last readings are all high
    _feed(watch, [_tick(s, 1000, 0, 2002 + 1000 * (s - 7)) for s in range(8, 11)])
    watch.resumed("redis", 10 * S)
    done = _feed(watch, [_tick(11, 1000, 3000, 3002), _tick(12, 1000, 3000, 1002),
                         *_steady(13, 20, lag=1)])
    # one drain, of the second stop, back at 13 s: 1,002 at 12 s is over both 1,000 and 2
    assert [at // S for _s, _d, at in done] == [13]
    assert "backlog of 5,002 drained in 3.0 s" in done[0][1]
    # drained: the next stop measures its level afresh (the last readings are 1 again)
    watch.stopped("redis", int(20.5 * S))
    _feed(watch, [_tick(21, 1000, 0, 1001), _tick(22, 1000, 0, 2001)])
    watch.resumed("redis", 22 * S)
    done = _feed(watch, [_tick(23, 1000, 3000, 1), *_steady(24, 27, lag=1)])
    assert [at // S for _s, _d, at in done] == [23]


def test_a_stop_during_the_hold_leaves_the_backlog_undrained() -> None:
    watch = DrainWatch()
    _feed(watch, _steady(1, 3))
    watch.stopped("redis", int(3.5 * S))
    _feed(watch, [_tick(4, 1000, 0, 1002), _tick(5, 1000, 0, 2002)])
    watch.resumed("redis", 5 * S)
    assert _feed(watch, [_tick(6, 1000, 3000, 2), _tick(7, 1000, 1000, 2)]) == []
    watch.stopped("redis", int(7.5 * S))  # back for 1 s only
    assert _feed(watch, [_tick(s, 1000, 0, 2 + 1000 * (s - 7)) for s in range(8, 15)]) == []
    assert watch.ended() == []


def test_the_end_of_the_run_cuts_the_hold_short() -> None:
    """Consumers started again for the end of the run's drain: the producers have stopped, the
    lag comes back and the run ends before DRAIN_HOLD_S; the drain still counts."""
    watch = DrainWatch()
    _feed(watch, _steady(1, 3))
    watch.stopped("redis", int(3.5 * S))
    _feed(watch, [_tick(s, 1000, 0, 2 + 1000 * (s - 3)) for s in range(4, 6)])
    watch.resumed("redis", int(5.2 * S))
    assert _feed(watch, [_tick(6, 0, 1500, 502), _tick(7, 0, 500, 2)]) == []
    ((backlog, at_ns),) = watch.ended()
    assert at_ns == 7 * S and backlog.detail(at_ns).startswith("backlog of 2,002 drained in 1.8 s")
    assert watch.ended() == []


def test_ticks_without_a_lag_are_skipped_and_a_cancelled_drain_says_nothing() -> None:
    watch = DrainWatch()
    _feed(watch, _steady(1, 3))
    watch.stopped("redis", int(3.5 * S))
    _feed(watch, [_tick(4, 1000, 0, 1002)])
    watch.resumed("redis", 4 * S)
    hold = int(DRAIN_HOLD_S)
    series = [_tick(5, 1000, 2000, 2), _tick(6, 1000, 1000, None),
              *_steady(7, 5 + hold)]
    done = _feed(watch, series)
    assert [(s, at // S) for s, _d, at in done] == [(5 + hold, 5)]
    watch.stopped("redis", int(19.5 * S))
    _feed(watch, [_tick(20, 1000, 0, 1002)])
    watch.resumed("redis", 20 * S)
    watch.cancel("redis")
    assert _feed(watch, _steady(21, 30)) == [] and watch.ended() == []


def test_ticks_seen_after_the_change_they_precede_count_before_it() -> None:
    """The ticks are followed a moment after they end: a tick that ended before the stop (or
    the resumption) can be seen after it, and still counts for the level (or the backlog)."""
    watch = DrainWatch()
    _feed(watch, [_tick(1, 1000, 1000, 2), _tick(2, 1000, 1000, 2)])
    watch.stopped("redis", int(3.01 * S))
    _feed(watch, [_tick(3, 1000, 1000, 700)])  # the level before the stop is 700
    _feed(watch, [_tick(s, 1000, 0, 700 + 1000 * (s - 3)) for s in range(4, 8)])
    watch.resumed("redis", int(8.01 * S))
    _feed(watch, [_tick(8, 1000, 0, 5700)])  # not consumed after the resumption
    # the producers slow to 500 msg/s: a lag of 650 is back only against the level of 700
    done = _feed(watch, [_tick(9, 500, 5900, 650), *_steady(10, 13, lag=600, rate=500)])
    assert [at // S for _s, _d, at in done] == [9]
    assert done[0][1] == ("backlog of 5,700 drained in 1.0 s after the consumers resumed: "
                          f"{5900 / 0.99:,.0f} msg/s consumed meanwhile")


@pytest.mark.parametrize("resume_s, rate", [(8.0, 6_000.0), (8.9, 6_000 / 0.1)])
def test_the_rate_is_what_was_consumed_over_the_drain_time(resume_s: float, rate: float) -> None:
    watch = DrainWatch()
    _feed(watch, _steady(1, 3))
    watch.stopped("redis", int(3.5 * S))
    _feed(watch, [_tick(s, 1000, 0, 2 + 1000 * (s - 3)) for s in range(4, 9)])
    watch.resumed("redis", int(resume_s * S))
    done = _feed(watch, [_tick(9, 1000, 6000, 7), *_steady(10, 14)])
    took = 9 - resume_s
    assert done and f"drained in {took:.1f} s" in done[0][1]
    assert f"{rate:,.0f} msg/s consumed meanwhile" in done[0][1]
