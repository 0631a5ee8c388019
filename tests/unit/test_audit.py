"""The delivery audit's records and verdict (loadgen.core.audit) on made-up histories: each
category counted once where it happens, records of several processes merged, fault windows
cut by the producers' intended times."""

from __future__ import annotations

import pickle

from loadgen.core.audit import (
    PRODUCER_BITS,
    SEQ_STEP,
    STAMP_BASE,
    AuditLedger,
    Ranges,
    Window,
    merge,
    stamp,
    unstamp,
    verdict,
)

T0 = 1_800_000_000_000_000_000  # an intended time in ns (2027)
SUB = "streambench-sub-0"


def _send(ledger: AuditLedger, producer: int, first: int, count: int, ok: bool = True,
          at: int = T0) -> list[int]:
    rec = ledger.producer(producer)
    rec.handed(first, [at + i for i in range(count)])
    (rec.acked if ok else rec.failed).add(first, first + count)
    return [stamp(at + i, producer, first + i) for i in range(count)]


def _read(ledger: AuditLedger, stamps: list[int], slot: int = 0, partition: int = 0,
          sub: str = SUB) -> list[int]:
    return ledger.read(slot, 0, sub, stamps, [(partition, str(i)) for i in range(len(stamps))])


def test_a_stamp_carries_producer_sequence_and_time() -> None:
    value = stamp(T0, 5, 123_456)
    assert unstamp(value) == (5, 123_456, T0)
    assert value == T0 + 5 * STAMP_BASE + 123_456 * SEQ_STEP
    assert unstamp(int(b"%d" % value)) == (5, 123_456, T0)  # as decimal text on the wire
    assert unstamp(T0) == (0, 0, T0)  # no stamp: the time alone
    assert SEQ_STEP == STAMP_BASE << PRODUCER_BITS


def test_ranges_merge_acknowledgements_out_of_order() -> None:
    r = Ranges()
    for start, end in ((1, 5), (9, 12), (5, 9), (20, 21), (12, 13)):
        r.add(start, end)
    assert r.spans == [[1, 13], [20, 21]]
    assert r.bits() == ((1 << 13) - 2) | (1 << 20)


def test_each_category_where_it_happens() -> None:
    ledger = AuditLedger()
    s = _send(ledger, 0, 1, 10)  # 1..10 acknowledged
    failed = _send(ledger, 0, 11, 2, ok=False)  # 11, 12 failed
    intended = _read(ledger, [s[0], s[1], s[3], s[2], s[1]])  # 3 after 4; 2 twice
    assert intended == [T0, T0 + 1, T0 + 3, T0 + 2, T0 + 1]  # the times, for latency
    _read(ledger, [failed[1]], slot=1)  # a failed send that landed
    _read(ledger, s[:5], slot=2, sub="streambench-sub-1")  # another subscription: 1..5 only
    assert ledger.live() == (1, 1)
    total, _ = verdict(ledger, {0: [SUB, "streambench-sub-1"]}, 1, [])
    assert (total.sent, total.acknowledged, total.failed) == (12, 10, 2)
    assert total.consumed == 6  # 1..5 and 12
    assert total.lost == 5  # 6..10: acknowledged, read by no subscription
    assert (total.unexpected, total.unexpected_failed) == (1, 1)
    assert total.duplicated == 1 and total.reordered == 1
    assert total.unseen == 2  # #5 read by sub-1 only, #12 by sub-0 only
    assert total.examples["lost"][:2] == ["producer 0 #6", "producer 0 #7"]
    assert total.examples["unexpected"] == ["producer 0 #12 (its send failed)"]
    assert total.examples["duplicated"] == ["producer 0 #2"]
    assert total.examples["reordered"] == ["producer 0 #3"]
    assert ledger.dup_examples[0].where == f"{SUB}, partition 0 at 4"
    assert not total.clean()


def test_order_is_per_consumer_and_partition() -> None:
    """Two consumers of a shared subscription, each reading in order, whose batches are
    counted interleaved, and two partitions: no reorder."""
    ledger = AuditLedger()
    s = _send(ledger, 0, 1, 8)
    _read(ledger, s[4:6], slot=1, partition=0)
    _read(ledger, s[0:2], slot=0, partition=0)
    _read(ledger, s[6:8], slot=0, partition=1)
    _read(ledger, s[2:4], slot=0, partition=0)
    total, _ = verdict(ledger, {0: [SUB]}, 1, [])
    assert total.clean() and total.consumed == 8


def test_merged_processes_find_duplicates_across_them() -> None:
    a, b = AuditLedger(), AuditLedger()
    s = _send(a, 0, 1, 6)
    t = _send(b, 1, 1, 4)
    _read(a, s[:4] + t[:2])
    _read(b, s[3:] + t[2:])  # #4 of producer 0 read in both processes
    merged = merge([pickle.loads(pickle.dumps(x)) for x in (a, b)])  # as they cross processes
    total, _ = verdict(merged, {0: [SUB]}, 2, [])
    assert (total.acknowledged, total.consumed, total.duplicated, total.lost) == (10, 10, 1, 0)
    assert merged.duplicated == 1  # reads beyond the first
    assert merged.dup_examples[0].text() == f"producer 0 #4 ({SUB}, read by two load processes)"


def test_windows_cut_by_intended_time() -> None:
    ledger = AuditLedger()
    second = 1_000_000_000
    s = []
    for k in range(6):  # 100 messages a second for 6 s, one batch every 0.1 s
        for j in range(10):
            first = 1 + k * 100 + j * 10
            s += _send(ledger, 0, first, 10, ok=not (2 <= k < 4), at=T0 + k * second + j * 10**8)
    _read(ledger, [x for x in s if not 2 * second <= unstamp(x)[2] - T0 < 4 * second])
    windows = [Window("before any fault", 0, T0 + 2 * second),
               Window("net-partition redis", T0 + 2 * second, T0 + 4 * second),
               Window("net-heal redis", T0 + 4 * second, None)]
    total, per = verdict(ledger, {0: [SUB]}, 1, windows)
    assert [(w.name, v.sent, v.failed, v.acknowledged) for w, v in per] == [
        ("before any fault", 200, 0, 200), ("net-partition redis", 200, 200, 0),
        ("net-heal redis", 200, 0, 200)]
    assert total.clean() and total.failed == 200


def test_a_batch_that_catches_up_is_dated_message_by_message() -> None:
    """A producer stalled for 2 s hands the slots it owes over in one batch: its messages
    still fall in the windows of their intended times."""
    ledger = AuditLedger()
    rec = ledger.producer(0)
    step = 10_000_000  # 100 msg/s
    rec.handed(1, [T0 + i * step for i in range(100)])  # the first second, one batch
    rec.handed(101, [T0 + (100 + i) * step for i in range(200)])  # 2 s owed, at once
    rec.acked.add(1, 301)
    windows = [Window("before any fault", 0, T0 + 150 * step),
               Window("fault-pause", T0 + 150 * step, T0 + 250 * step),
               Window("fault-resume", T0 + 250 * step, None)]
    _, per = verdict(ledger, {0: [SUB]}, 1, windows)
    assert [v.acknowledged for _, v in per] == [150, 100, 50]
