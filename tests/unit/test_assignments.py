"""The `assignment` events a target's ticks give: the consumers' first partitions in one event,
each later change in one event per consumer, long start-up lists cut short."""

from __future__ import annotations

from loadgen.assignments import LIST_CHARS, AssignmentWatch
from loadgen.core.ticks import ConsumerStat

SUB = "streambench-sub-0"


def ranges(n: int, partitions: int = 100) -> list[ConsumerStat]:
    """n consumers dealing `partitions` partitions in ranges, as Kafka's range assignor does."""
    per = -(-partitions // n)
    return [ConsumerStat(0, SUB, i, 0, tuple(range(i * per, min(partitions, (i + 1) * per))))
            for i in range(n)]


def test_the_first_assignments_are_one_event_and_changes_one_each() -> None:
    watch = AssignmentWatch()
    assert watch.changes(ranges(8)) == [
        "8 consumers assigned 100 partitions: sub-0/0 0-12; sub-0/1 13-25; sub-0/2 26-38; "
        "sub-0/3 39-51; sub-0/4 52-64; sub-0/5 65-77; sub-0/6 78-90; sub-0/7 91-99"]
    assert watch.changes(ranges(8)) == []  # nothing changed
    # a rebalance over 7 of them (consumer 7 lost its partitions to the others)
    after = [*ranges(7), ConsumerStat(0, SUB, 7, 0, ())]
    told = watch.changes(after)
    assert len(told) == 8
    assert told[0] == f"consumer 0 of {SUB} (topic 0): partitions 0-14 (was 0-12)"
    assert told[-1] == f"consumer 7 of {SUB} (topic 0): partitions none (was 91-99)"


def test_one_consumer_is_told_as_before_and_unknown_partitions_never() -> None:
    watch = AssignmentWatch()
    assert watch.changes([ConsumerStat(0, SUB, 0, 0, (0, 1)), ConsumerStat(0, SUB, 1, 0, None)]) \
        == [f"consumer 0 of {SUB} (topic 0): partitions 0-1"]
    # a consumer first known later (its client told nothing before) is told then
    assert watch.changes([ConsumerStat(0, SUB, 0, 0, (0, 1)), ConsumerStat(0, SUB, 1, 0, (2,))]) \
        == [f"consumer 1 of {SUB} (topic 0): partition 2"]


def test_shared_consumers_are_one_entry() -> None:
    shared = [ConsumerStat(0, SUB, i, 0, (0, 1, 2), shared=True) for i in range(16)]
    assert AssignmentWatch().changes(shared) == [
        "16 consumers assigned 3 partitions: sub-0/0 to sub-0/15 0-2 shared"]


def test_a_long_start_up_list_is_cut_short() -> None:
    # round robin over two topics and two subscriptions: scattered partitions, 16 consumers
    stats = [ConsumerStat(t, f"streambench-sub-{s}", i, 0, tuple(range(i, 100, 4)))
             for t in range(2) for s in range(2) for i in range(4)]
    (text,) = AssignmentWatch().changes(stats)
    head, listed = text.split(": ", 1)
    assert head == "16 consumers assigned 200 partitions"
    entries = listed.split("; ")
    assert entries[0] == "sub-0/0 0, 4, 8, 12, 16, 20, 24, 28, 32, 36, …"
    assert entries[-1] == f"… {16 - (len(entries) - 1)} more"
    assert len("; ".join(entries[:-1])) <= LIST_CHARS
    assert not any(e.startswith("t1 ") for e in entries)  # topic 0's consumers come first
