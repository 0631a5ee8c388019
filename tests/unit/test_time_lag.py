"""The exact time lag's arithmetic: the producers' sampling of acknowledged positions, the
look-up of a consumer's position among the samples (exact when sampled, else between the
samples around it, by at most their distance), the bounded book, Burrow's status words."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from loadgen.core.acklog import STEP_NS, AckLog, stream_position
from loadgen.core.audit import stamp
from loadgen.core.histogram import Histogram
from loadgen.core.ticks import ConsumerStat, LagSnapshot, LagStatus, Phase, Resources, Tick
from loadgen.timelag import MAX_SAMPLES, STATUS_WINDOW, PartitionSamples, TimeLagBook

S = 1_000_000_000
MS = 1_000_000


def test_a_producer_samples_each_partition_once_per_step() -> None:
    log = AckLog(partitions=2)
    for k in range(1000):  # 1 ms apart, alternating partitions
        log.one(k % 2, k // 2, k * MS)
    samples = log.take()
    for partition in (0, 1):
        times = [t for p, _pos, t in samples if p == partition]
        assert times[0] == partition * MS
        assert all(b - a >= STEP_NS for a, b in itertools.pairwise(times))
        assert all(b - a <= STEP_NS + 2 * MS for a, b in itertools.pairwise(times))
    assert log.take() == []


def test_a_run_of_offsets_is_sampled_at_both_ends() -> None:
    log = AckLog(partitions=1)
    log.run(0, 100, 3, 10 * MS, 12 * MS)
    log.run(0, 103, 1, 13 * MS, 13 * MS)  # before the next sample is due: nothing
    log.run(0, 104, 2, 22 * MS, 23 * MS)
    assert log.take() == [(0, 100, 10 * MS), (0, 102, 12 * MS), (0, 104, 22 * MS), (0, 105, 23 * MS)]
    assert not log.wanted(0) and log.wanted(33 * MS)  # the floor: the next sample's time


def test_audit_stamps_are_sampled_by_their_intended_time() -> None:
    """With --audit a message's value is its stamp (producer and sequence above the intended
    time): every way in keeps the intended time alone, and samples as the plain times do."""
    plain, stamped = AckLog(partitions=2), AckLog(partitions=2)
    for k in range(200):
        t = 1_700_000_000 * S + k * MS
        plain.one(k % 2, k, t)
        stamped.one(k % 2, k, stamp(t, producer=k % 3, seq=k + 1))
    expected = plain.take()
    assert stamped.take() == expected and expected
    plain.run(0, 500, 3, 1_700_000_001 * S, 1_700_000_001 * S + MS)
    stamped.run(0, 500, 3, stamp(1_700_000_001 * S, 0, 7), stamp(1_700_000_001 * S + MS, 0, 9))
    assert stamped.take() == plain.take() == [(0, 500, 1_700_000_001 * S),
                                              (0, 502, 1_700_000_001 * S + MS)]
    late = stamp(1_700_000_002 * S, 1, 11)
    assert stamped.wanted(late) and not stamped.wanted(stamp(1_700_000_000 * S, 1, 12))
    for log in (plain, stamped):
        log.take()
    plain.each([0, 1], [b"1-0", b"2-0"], [1_700_000_003 * S, 1_700_000_003 * S + MS],
               stream_position)
    stamped.each([0, 1], [b"1-0", b"2-0"],
                 [stamp(1_700_000_003 * S, 2, 30), stamp(1_700_000_003 * S + MS, 2, 31)],
                 stream_position)
    assert stamped.take() == plain.take()


def test_each_parses_only_the_sampled_positions() -> None:
    parsed: list[bytes] = []

    def parse(entry: bytes) -> int:
        parsed.append(entry)
        return stream_position(entry)

    log = AckLog(partitions=1)
    ids = [b"1700000000000-%d" % i for i in range(100)]
    log.each([0] * 100, ids, [i * 100_000 for i in range(100)], parse)  # 0.1 ms apart: 9.9 ms
    assert parsed == [ids[0]]
    assert log.take() == [(0, stream_position(ids[0]), 0)]


def test_stream_ids_order_as_positions() -> None:
    ids = [b"5-0", b"5-1", b"5-1048575", b"6-0", b"1700000000000-3"]
    assert [stream_position(i) for i in ids] == sorted(stream_position(i) for i in ids)


def _samples(pairs: list[tuple[int, int]]) -> PartitionSamples:
    book = PartitionSamples()
    for position, t in pairs:
        book.add(position, t)
    return book


def test_a_sampled_position_is_exact_and_others_are_bounded_by_their_neighbours() -> None:
    rng = np.random.default_rng(7)
    # one message per position, intended 1 ms apart with jitter; a sample every 10th
    times = np.cumsum(rng.integers(500_000, 1_500_000, 1000))
    book = _samples([(p, int(times[p])) for p in range(0, 1000, 10)])
    for position in range(0, 991):
        found = book.intended(position, after=False, step_ns=STEP_NS)
        assert found is not None
        t, off = found
        truth = int(times[position])
        if position % 10 == 0:
            assert (t, off) == (truth, 0.0)
        else:
            lo, hi = int(times[position // 10 * 10]), int(times[position // 10 * 10 + 10])
            assert off == hi - lo
            assert abs(t - truth) <= off
    # past the last sample: within one step of it
    assert book.intended(995, after=False, step_ns=STEP_NS) == (float(times[990]), float(STEP_NS))


def test_after_a_position_the_next_sample_bounds_it() -> None:
    book = _samples([(10, 100), (20, 200), (30, 300)])
    t, off = book.intended(20, after=True, step_ns=STEP_NS)  # delivered up to 20: next is after
    assert 200 <= t <= 300 and off == 100
    assert book.reaches(20, after=True) and not book.reaches(30, after=True)
    assert book.reaches(30, after=False)


def test_the_book_is_bounded_and_forgets_what_was_read() -> None:
    book = _samples([(p, p * 10) for p in range(3 * MAX_SAMPLES)])
    book.thin()
    assert len(book) <= MAX_SAMPLES // 2 * 3 + 1
    assert book.positions[-1] == 3 * MAX_SAMPLES - 1  # the newest stays
    book.drop_below(2 * MAX_SAMPLES + 1)
    assert book.positions[0] <= 2 * MAX_SAMPLES + 1 < book.positions[1]


def _tick(seq: int, lag: LagSnapshot | None, consumed: int = 1000, produced: int = 1000,
          acked: dict[str, list[tuple[int, int, int]]] | None = None) -> Tick:
    empty = Histogram().snapshot_and_reset()
    return Tick("redis", seq, seq * S, 1.0, Phase.MEASURING, float(seq), produced, produced,
                consumed, consumed, 0, 1000.0, empty, empty, empty, lag, Resources(),
                consumers=(ConsumerStat(0, "sub", 0, consumed),), acked=acked or {})


def _lag(seq: int, position: int, unread: int, leaderless: tuple[int, ...] = ()) -> LagSnapshot:
    return LagSnapshot(unread, {0: unread, 1: 0}, topic="t", positions={"sub": {0: position, 1: 1}},
                       unread={"sub": {0: unread, 1: 0}}, read_ns=seq * S, leaderless=leaderless)


def test_a_stopped_subscription_ages_one_second_per_second_then_says_stop() -> None:
    book = TimeLagBook()
    # 1,000 msg/s into partition 0 from t = 0: the consumer stops at position 2,000 (t = 2 s)
    seen = []
    for seq in range(3, 12):
        acked = {"t": [(0, p, p * MS) for p in range((seq - 1) * 1000, seq * 1000, 10)]}
        tick = book.resolve(_tick(seq, _lag(seq, 2000, seq * 1000 - 2000), consumed=0,
                                  acked=acked))
        assert tick.acked == {} and tick.lag is not None and tick.lag.time is not None
        seen.append(tick.lag.time)
    assert [round(t.seconds, 6) for t in seen] == [float(s - 2) for s in range(3, 12)]
    assert all(t.bound_s == 0.0 for t in seen)  # position 2,000 was sampled
    assert seen[-1].trend == pytest.approx(1.0)
    assert seen[-1].drain_s == math.inf
    assert seen[0].status["sub"] is LagStatus.OK  # a window not yet full
    assert seen[STATUS_WINDOW].status["sub"] is LagStatus.STOP
    assert seen[-1].per_partition[1] == 0.0  # the other partition is read up


def test_a_partition_without_a_leader_says_so_and_the_others_keep_their_figures() -> None:
    book = TimeLagBook()
    acked = {"t": [(0, 0, 0), (1, 0, 0)]}
    tick = book.resolve(_tick(2, _lag(2, 0, 5, leaderless=(0,)), acked=acked))
    assert tick.lag is not None and tick.lag.time is not None
    assert math.isnan(tick.lag.time.per_partition[0])
    assert tick.lag.time.per_partition[1] == 0.0
    assert tick.lag.time.seconds == 0.0


def test_reading_with_the_lag_not_going_down_is_warn_and_standing_still_while_reading_is_stall() -> None:
    book = TimeLagBook()
    last = None
    for seq in range(1, STATUS_WINDOW + 2):  # the position moves, the lag grows
        last = book.resolve(_tick(seq, _lag(seq, seq * 100, seq * 10),
                                  acked={"t": [(0, seq * 100, seq * S - S // 2)]}))
    assert last is not None and last.lag is not None and last.lag.time is not None
    assert last.lag.time.status["sub"] is LagStatus.WARN
    book = TimeLagBook()
    for seq in range(1, STATUS_WINDOW + 2):  # reads (other partitions), stands still on 0
        last = book.resolve(_tick(seq, _lag(seq, 100, 50), consumed=10,
                                  acked={"t": [(0, 100, 0)]}))
    assert last is not None and last.lag is not None and last.lag.time is not None
    assert last.lag.time.status["sub"] is LagStatus.STALL


def test_without_positions_the_tick_keeps_the_estimate_and_says_so() -> None:
    tick = TimeLagBook().resolve(_tick(1, LagSnapshot(500, {0: 500})))
    assert tick.lag is not None and tick.lag.time is None
    assert not tick.lag_s_exact and tick.lag_s == pytest.approx(0.5)
