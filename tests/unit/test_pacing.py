import itertools

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
