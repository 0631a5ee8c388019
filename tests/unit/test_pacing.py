import itertools
import math
import random

import pytest

from loadgen.pacing import Schedule


def test_slots_never_skipped_and_end_respected():
    s = Schedule(rate=1000, start_mono_ns=0, start_wall_ns=5_000_000_000, end_mono_ns=1_000_000_000)
    got: list[int] = []
    # a consumer of the schedule that stalls for 300 ms gets every missed slot afterwards
    for now in (0, 1_000_000, 300_000_000, 300_500_000, 2_000_000_000):
        got += s.due(now, limit=10_000)
    assert len(got) == 1000
    assert got[0] == 5_000_000_000
    assert all(b - a == 1_000_000 for a, b in itertools.pairwise(got))
    assert s.finished(2_000_000_000)


def test_batch_limit_and_wait():
    s = Schedule(rate=100, start_mono_ns=0, start_wall_ns=0, end_mono_ns=10**10)
    assert len(s.due(500_000_000, limit=5)) == 5
    assert len(s.due(500_000_000, limit=100)) == 46  # slots 5..50 due at 0.5 s
    assert abs(s.seconds_until_next(500_000_000) - 0.01) < 1e-9


def test_stop_at_cuts_the_schedule():
    s = Schedule(rate=10, start_mono_ns=0, start_wall_ns=0, end_mono_ns=10**10)
    s.stop_at(1_000_000_000)
    assert len(s.due(5 * 10**9, limit=1000)) == 10


def test_phase_offset():
    s = Schedule(rate=10, start_mono_ns=0, start_wall_ns=0, end_mono_ns=10**9, phase_ns=50_000_000)
    assert s.due(10_000_000, limit=10) == []
    assert s.due(50_000_000, limit=10) == [50_000_000]


def test_unpaced_stamps_send_time():
    s = Schedule(rate=0, start_mono_ns=0, start_wall_ns=100, end_mono_ns=10)
    assert s.due(3, limit=2) == [103, 103]
    assert s.due(10, limit=2) == []


def test_whole_slot_count_survives_interval_rounding():
    # 1,500 msg/s has an interval of 666,666.67 ns; 24 s must still give exactly 36,000 slots
    s = Schedule(rate=1500, start_mono_ns=0, start_wall_ns=0, end_mono_ns=24 * 10**9)
    assert len(s.due(30 * 10**9, limit=100_000)) == 36_000


def test_staggered_producers_share_the_count_exactly():
    total = 0
    for i in range(3):
        s = Schedule(rate=1000 / 3, start_mono_ns=0, start_wall_ns=0, end_mono_ns=9 * 10**9,
                     phase_ns=int(1e9 / (1000 / 3) * i / 3))
        total += len(s.due(20 * 10**9, limit=100_000))
    assert total == 9000


# ---- live changes: rate, pause, resume ----------------------------------------------------------

MS = 1_000_000
S = 1_000_000_000


def drain(s: Schedule, now: int) -> list[int]:
    return s.due(now, limit=10**7)


def test_rate_change_reanchors_without_jump():
    s = Schedule(rate=1000, start_mono_ns=0, start_wall_ns=0, end_mono_ns=2 * S)
    s.set_rate(2000, at_mono_ns=1000 * MS + MS // 2)  # half-way between slots 1000 and 1001
    got = drain(s, 3 * S)
    # slots before the change keep the old spacing, the one at 1,000 ms included
    assert got[:1001] == [n * MS for n in range(1001)]
    # the clock stood at 1000.5 slots: the next slot follows half a new interval after the change
    assert got[1001] == 1000 * MS + MS // 2 + MS // 4
    assert all(b - a == MS // 2 for a, b in itertools.pairwise(got[1001:]))
    # 1,000.5 slots in the first 1.0005 s, 1,999 in the rest: the integral of the rate, rounded up
    assert len(got) == len(set(got)) == 3000
    assert s.finished(3 * S)


def test_slots_owed_before_a_change_keep_their_times():
    # the producer is behind (nothing consumed for 300 ms) when the rate changes
    lagging = Schedule(rate=1000, start_mono_ns=0, start_wall_ns=0, end_mono_ns=S)
    lagging.set_rate(250, at_mono_ns=200 * MS)
    prompt = Schedule(rate=1000, start_mono_ns=0, start_wall_ns=0, end_mono_ns=S)
    early = drain(prompt, 199 * MS)
    prompt.set_rate(250, at_mono_ns=200 * MS)
    caught_up = drain(lagging, 300 * MS)
    assert caught_up[:200] == [n * MS for n in range(200)] == early
    assert caught_up[200:] == list(range(200 * MS, 301 * MS, 4 * MS))
    assert early + drain(prompt, 300 * MS) == caught_up


def test_pause_and_resume_skip_the_paused_interval_without_a_burst():
    s = Schedule(rate=1000, start_mono_ns=0, start_wall_ns=7, end_mono_ns=3 * S)
    got = drain(s, 400 * MS)
    assert s.pause(500 * MS + 300_000)
    assert not s.pause(600 * MS)  # already paused
    got += drain(s, 2 * S - 1)
    assert got[-1] == 500 * MS + 7  # nothing due while paused; slots before the pause were
    assert len(got) == 501
    assert s.next_mono_ns() is None
    assert s.resume(2 * S)
    assert not s.resume(2 * S + 1)
    assert drain(s, 2 * S + 500_000) == []  # no burst of the paused interval's slots
    rest = drain(s, 4 * S)
    # the slot interrupted by the pause (0.7 of it left) completes after the resume
    assert rest[0] == 2 * S + 700_000 + 7
    assert all(b - a == MS for a, b in itertools.pairwise(rest))
    assert rest[-1] < 3 * S + 7
    # 500.3 slots before the pause + 1,000 after the resume
    assert len(got) + len(rest) == 1501


def test_rate_set_while_paused_applies_on_resume():
    s = Schedule(rate=100, start_mono_ns=0, start_wall_ns=0, end_mono_ns=10 * S)
    s.pause(S)
    s.set_rate(1000, at_mono_ns=2 * S)
    assert s.paused and s.rate == 1000
    assert drain(s, 3 * S)[-1] == S - 10 * MS
    s.resume(3 * S)
    assert drain(s, 3 * S + 5 * MS) == [3 * S + n * MS for n in range(6)]


def test_fixed_to_maximum_and_back():
    s = Schedule(rate=1000, start_mono_ns=0, start_wall_ns=0, end_mono_ns=10 * S, stagger=0.25)
    s.set_rate(0, at_mono_ns=500 * MS)
    # the paced slots before the change come first, then maximum rate stamps the time taken
    got = s.due(600 * MS, limit=502)
    assert got[:500] == [int((n + 0.25) * MS) for n in range(500)]
    assert got[500:] == [600 * MS, 600 * MS]
    assert s.due(700 * MS, limit=3) == [700 * MS] * 3
    assert s.next_mono_ns() == 500 * MS  # at maximum rate a slot is always due
    s.set_rate(2000, at_mono_ns=S)
    assert s.due(S - 1, limit=2) == [S - 1] * 2
    # the clock stood still at maximum rate: the stagger holds, in the new interval
    assert drain(s, S + 2 * MS) == [S + 125_000, S + 625_000, S + 1_125_000, S + 1_625_000]


def test_maximum_rate_start_then_fixed_keeps_the_stagger():
    slots = []
    for i in range(4):
        s = Schedule(rate=0, start_mono_ns=0, start_wall_ns=0, end_mono_ns=10 * S, stagger=i / 4)
        assert s.due(S // 2, limit=1) == [S // 2]
        s.set_rate(250, at_mono_ns=S)
        slots += drain(s, 2 * S)
    slots.sort()
    assert slots[:4] == [S, S + MS, S + 2 * MS, S + 3 * MS]
    assert all(b - a == MS for a, b in itertools.pairwise(slots))


def test_staggered_producers_stay_interleaved_across_a_rate_change():
    slots = []
    for i in range(2):
        s = Schedule(rate=500, start_mono_ns=0, start_wall_ns=0, end_mono_ns=4 * S, stagger=i / 2)
        s.set_rate(250, at_mono_ns=S + 300_000)
        slots += drain(s, 5 * S)
    slots.sort()
    before = [t for t in slots if t < S]
    after = [t for t in slots if t > S + 300_000]
    assert all(b - a == MS for a, b in itertools.pairwise(before))
    assert all(b - a == 2 * MS for a, b in itertools.pairwise(after))
    # per producer 500 × 1.0003 + 250 × 2.9997 = 1,250.075 slots: 1,251 from 0, 1,250 from 0.5
    assert len(slots) == len(set(slots)) == 2501


def test_changes_at_one_instant_and_out_of_order():
    s = Schedule(rate=1000, start_mono_ns=0, start_wall_ns=0, end_mono_ns=S)
    s.set_rate(10, at_mono_ns=100 * MS)
    s.set_rate(2000, at_mono_ns=100 * MS)  # the later change at the same instant wins
    assert drain(s, 101 * MS)[-3:] == [100 * MS, 100 * MS + 500_000, 101 * MS]
    with pytest.raises(ValueError):
        s.set_rate(5, at_mono_ns=50 * MS)


def test_window_groups_slots_and_never_sends_early():
    s = Schedule(rate=5000, start_mono_ns=0, start_wall_ns=0, end_mono_ns=S)
    wake = s.next_mono_ns(window_ns=400_000)
    assert wake == 400_000  # slots at 0, 200 and 400 µs go out together, when the last is due
    assert s.due(wake - 1, limit=100) == [0, 200_000]  # only what is due is handed out
    assert s.due(wake, limit=100) == [400_000]
    assert s.next_mono_ns(window_ns=400_000) == 1_000_000
    assert s.next_mono_ns() == 600_000
    # the window never reaches past the end or a change
    s.set_rate(1000, at_mono_ns=700_000)
    assert s.next_mono_ns(window_ns=400_000) == 600_000


def test_finished_waits_for_the_end_and_for_slots_owed():
    s = Schedule(rate=10, start_mono_ns=0, start_wall_ns=0, end_mono_ns=S)
    assert len(drain(s, S - 1)) == 10
    assert not s.finished(S - 1)  # a change before the end could still bring slots
    s2 = Schedule(rate=10, start_mono_ns=0, start_wall_ns=0, end_mono_ns=S)
    assert not s2.finished(2 * S)  # ten slots owed
    drain(s2, 2 * S)
    assert s2.finished(2 * S)
    s3 = Schedule(rate=10, start_mono_ns=0, start_wall_ns=0, end_mono_ns=S)
    s3.pause(0)
    assert s3.finished(S)
    s4 = Schedule(rate=0, start_mono_ns=0, start_wall_ns=0, end_mono_ns=S)
    assert not s4.finished(S - 1) and s4.finished(S)


@pytest.mark.parametrize("seed", range(20))
def test_random_changes_count_the_integral_of_the_rate(seed: int):
    """Random rate changes, pauses and resumes, consumed at random moments: slots strictly
    increasing, none while paused, spaced 1/rate within a segment, the same whenever they are
    taken, and as many as the integral of the rate (rounded up: slot 0 is at the start)."""
    rng = random.Random(seed)
    end = 10 * S
    t, rate, paused = 0, float(rng.choice([100, 1000, 1500, 3333])), False
    changes: list[tuple[int, str, float]] = []
    while True:
        t += rng.randrange(1, 2 * S // 3)
        if t >= end:
            break
        kind = rng.choice(["rate", "rate", "pause", "resume"])
        changes.append((t, kind, float(rng.choice([50, 300, 1000, 1500, 2500, 7777]))))
    # the integral of the rate over the unpaused time, segment by segment
    integral, last = 0.0, 0
    for at, kind, new in changes:
        if not paused:
            integral += (at - last) * rate / 1e9
        last = at
        if kind == "rate":
            rate = new
        elif kind == "pause":
            paused = True
        else:
            paused = False
    if not paused:
        integral += (end - last) * rate / 1e9

    def play(poll_every: int | None) -> list[int]:
        first = float(random.Random(seed).choice([100, 1000, 1500, 3333]))
        s = Schedule(rate=first, start_mono_ns=0, start_wall_ns=0, end_mono_ns=end)
        got: list[int] = []
        prng = random.Random(seed + 1000)
        now = 0
        for at, kind, new in changes:
            if poll_every is not None:
                while now < at:
                    got += s.due(now, limit=prng.choice([1, 3, 100]))
                    now += prng.randrange(1, poll_every)
            if kind == "rate":
                s.set_rate(new, at)
            elif kind == "pause":
                s.pause(at)
            else:
                s.resume(at)
        got += drain(s, end + S)
        assert s.finished(end + S)
        return got

    at_once, polled = play(None), play(3 * MS)
    assert at_once == polled
    assert all(b > a for a, b in itertools.pairwise(at_once))
    assert all(0 <= x < end for x in at_once)
    assert len(at_once) == math.ceil(integral - 1e-6)


def test_forgive_drops_only_the_slots_owed_before_the_instant():
    # a producer 150 slots behind at 1,000/s when a rate search gives that rate up at 200 ms
    s = Schedule(rate=1000, start_mono_ns=0, start_wall_ns=0, end_mono_ns=S)
    sent = drain(s, 49 * MS)  # slots 0..49 went out, 50..199 are owed
    assert len(sent) == 50
    assert s.forgive(200 * MS) == 150
    s.set_rate(250, at_mono_ns=200 * MS)
    later = drain(s, 300 * MS)
    # on from the instant at the new rate, nothing owed before it
    assert later == list(range(200 * MS, 301 * MS, 4 * MS))
    assert s.forgive(300 * MS) == 0  # up to date: nothing to drop


def test_forgive_across_a_change_that_left_slots_owed():
    s = Schedule(rate=1000, start_mono_ns=0, start_wall_ns=0, end_mono_ns=S)
    s.set_rate(500, at_mono_ns=100 * MS)  # nothing handed out yet: 100 + 50 owed at 200 ms
    assert s.forgive(200 * MS) == 150
    assert drain(s, 210 * MS) == list(range(200 * MS, 211 * MS, 2 * MS))


def test_forgive_while_paused_or_before_the_start_drops_nothing():
    s = Schedule(rate=1000, start_mono_ns=50 * MS, start_wall_ns=50 * MS, end_mono_ns=S)
    assert s.forgive(10 * MS) == 0
    assert drain(s, 52 * MS) == [50 * MS, 51 * MS, 52 * MS]
    s.pause(53 * MS + MS // 2)
    assert s.forgive(80 * MS) == 1  # slot 53 came before the pause and was not taken
    assert drain(s, 90 * MS) == []
    s.resume(100 * MS)
    # the rest of the slot the pause interrupted (half of one), none for the time paused
    assert drain(s, 103 * MS) == [100 * MS + MS // 2, 101 * MS + MS // 2, 102 * MS + MS // 2]
