"""The delivery audit (`--audit`): what each producer sent and had acknowledged, what each
subscription read, and the verdict in Jepsen's categories (lost, unexpected, duplicated,
reordered, unseen), per target and per fault window.

Every message carries a stamp where the intended send time alone went before: one integer,
`code × STAMP_BASE + intended_ns`, with `code = seq << PRODUCER_BITS | producer`. A driver
that writes the intended time as decimal text writes the stamp the same way, and reading it
back gives both; without the audit the code is 0 and the stamp is the intended time itself.
Sequences start at 1, so a message without a stamp (code 0) is told apart.

Records are compact: per producer, ranges of sequences (acknowledged, failed); per
subscription and producer, bitmaps of the sequences read (one bit per message), of those read
more than once, and of those read after a higher one of the same producer in the same
partition by the same consumer. Worker processes and cluster actors each keep their own
records; the coordinator merges them (a sequence read by two processes of one subscription is
a duplicate found there) and decides."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

STAMP_BASE = 10**19  # above any wall-clock ns until the year 2286
PRODUCER_BITS = 20
PRODUCER_MASK = (1 << PRODUCER_BITS) - 1
SEQ_STEP = STAMP_BASE << PRODUCER_BITS  # the stamp's step from one sequence to the next
EXAMPLES = 5  # examples kept per category
# Jepsen's categories, as the verdict, run.json and every place that shows it name them
CATEGORIES = ("lost", "unexpected", "duplicated", "reordered", "unseen")
CHECKPOINT_NS = 100_000_000  # a producer notes (intended time, sequence) this far apart at least


def stamp(intended_ns: int, producer: int, seq: int) -> int:
    return ((seq << PRODUCER_BITS) | producer) * STAMP_BASE + intended_ns


def unstamp(value: int) -> tuple[int, int, int]:
    """(producer, seq, intended_ns) of a stamp; seq 0 for a message without one."""
    code, intended = divmod(value, STAMP_BASE)
    return code & PRODUCER_MASK, code >> PRODUCER_BITS, intended


class Ranges:
    """Disjoint half-open ranges of sequences; adding in order (the usual case) is O(1)."""

    __slots__ = ("spans",)

    def __init__(self) -> None:
        self.spans: list[list[int]] = []

    def add(self, start: int, end: int) -> None:
        spans = self.spans
        if spans and spans[-1][1] == start:
            spans[-1][1] = end
        elif not spans or spans[-1][1] < start:
            spans.append([start, end])
        else:  # out of order (acknowledgements overtaking each other): merge now
            spans.append([start, end])
            spans.sort()
            merged: list[list[int]] = []
            for s, e in spans:
                if merged and s <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], e)
                else:
                    merged.append([s, e])
            self.spans = merged

    def bits(self) -> int:
        out = 0
        for s, e in self.spans:
            out |= ((1 << (e - s)) - 1) << s
        return out


@dataclass
class ProducerRecord:
    """One producer's sequences: handed to the client (1 ..< next_seq), acknowledged, failed;
    and (intended send time, first sequence with it) checkpoints that date its messages: a
    producer's intended times only grow, so a window of time is a range of its sequences."""

    acked: Ranges = field(default_factory=Ranges)
    failed: Ranges = field(default_factory=Ranges)
    next_seq: int = 1
    times: list[int] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)

    def handed(self, first: int, intended: Sequence[int]) -> None:
        """Sequences first, first + 1, … handed to the client, intended for those times (a
        batch that catches up after a stall spans many checkpoints)."""
        times = self.times
        if not times or intended[-1] - times[-1] >= CHECKPOINT_NS:
            last = times[-1] if times else intended[0] - CHECKPOINT_NS
            for i, t in enumerate(intended):
                if t - last >= CHECKPOINT_NS:
                    times.append(t)
                    self.seqs.append(first + i)
                    last = t
        self.next_seq = max(self.next_seq, first + len(intended))

    def seq_at(self, wall_ns: int) -> int:
        """The first sequence intended at or after wall_ns (to a checkpoint's precision)."""
        i = bisect_left(self.times, wall_ns)
        return self.seqs[i] if i < len(self.seqs) else self.next_seq


class ReadRecord:
    """What one subscription's consumers in one process read of one producer: bitmaps."""

    __slots__ = ("back", "dup", "seen")

    def __init__(self) -> None:
        self.seen = bytearray()
        self.dup = bytearray()
        self.back = bytearray()


def _set(bitmap: bytearray, seq: int) -> bool:
    """Set bit seq; True when it was set already."""
    i, bit = seq >> 3, 1 << (seq & 7)
    if i >= len(bitmap):
        bitmap.extend(bytes(i - len(bitmap) + 1024))
    was = bitmap[i] & bit
    bitmap[i] |= bit
    return bool(was)


def _int(bitmap: bytearray) -> int:
    return int.from_bytes(bitmap, "little")


@dataclass
class Example:
    """A message worth showing: its producer and sequence, and where it was read."""

    producer: int
    seq: int
    where: str = ""

    def text(self) -> str:
        return f"producer {self.producer} #{self.seq}" + (f" ({self.where})" if self.where else "")


@dataclass
class AuditLedger:
    """One process's records for one target (loadgen.load keeps it; the coordinator merges)."""

    producers: dict[int, ProducerRecord] = field(default_factory=dict)
    # (topic, subscription) -> producer -> ReadRecord
    reads: dict[tuple[int, str], dict[int, ReadRecord]] = field(default_factory=dict)
    # consumer slot -> (partition, producer) -> the highest sequence it read there
    last: dict[int, dict[tuple[int, int], int]] = field(default_factory=dict)
    duplicated: int = 0  # found in this process so far (live); the merge adds the others
    reordered: int = 0
    unstamped: int = 0  # messages read without a stamp (not written by this run's producers)
    dup_examples: list[Example] = field(default_factory=list)
    back_examples: list[Example] = field(default_factory=list)

    def producer(self, number: int) -> ProducerRecord:
        rec = self.producers.get(number)
        if rec is None:
            rec = self.producers[number] = ProducerRecord()
        return rec

    def read(self, slot: int, topic: int, subscription: str,
             stamps: list[int], where: list[tuple[int, str]]) -> list[int]:
        """Record one batch a consumer read (`where`: partition and position of each message);
        returns the intended send times."""
        records = self.reads.setdefault((topic, subscription), {})
        last = self.last.setdefault(slot, {})
        intended = []
        for value, (partition, position) in zip(stamps, where, strict=True):
            code, t = divmod(value, STAMP_BASE)
            intended.append(t)
            if not code:
                self.unstamped += 1
                continue
            producer, seq = code & PRODUCER_MASK, code >> PRODUCER_BITS
            rec = records.get(producer)
            if rec is None:
                rec = records[producer] = ReadRecord()
            key = (partition, producer)
            top = last.get(key, 0)
            if _set(rec.seen, seq):
                _set(rec.dup, seq)
                self.duplicated += 1
                if len(self.dup_examples) < EXAMPLES:
                    self.dup_examples.append(Example(producer, seq, f"{subscription}, partition "
                                                     f"{partition} at {position}"))
            elif seq < top:
                _set(rec.back, seq)
                self.reordered += 1
                if len(self.back_examples) < EXAMPLES:
                    self.back_examples.append(Example(producer, seq, f"{subscription}, partition "
                                                      f"{partition} at {position}, after #{top}"))
            if seq > top:
                last[key] = seq
        return intended

    def live(self) -> tuple[int, int]:
        """What this process has decided already: (duplicated, reordered)."""
        return self.duplicated, self.reordered


@dataclass
class Verdict:
    """The audit's counts for a target or one window of its run, with the first examples."""

    sent: int = 0
    acknowledged: int = 0
    failed: int = 0
    consumed: int = 0  # distinct messages read by at least one subscription
    lost: int = 0
    unexpected: int = 0
    unexpected_failed: int = 0  # of the unexpected, those whose send returned an error
    duplicated: int = 0
    reordered: int = 0
    unseen: int = 0
    examples: dict[str, list[str]] = field(default_factory=dict)

    def clean(self) -> bool:
        return not any(getattr(self, k) for k in CATEGORIES)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}

    def line(self) -> str:
        return (f"lost {self.lost:,}, unexpected {self.unexpected:,}, duplicated "
                f"{self.duplicated:,}, reordered {self.reordered:,}, unseen {self.unseen:,} "
                f"(of {self.acknowledged:,} acknowledged, {self.consumed:,} consumed)")


@dataclass
class Window:
    """A stretch of the run: from one fault (or the start) to the next."""

    name: str
    start_ns: int
    end_ns: int | None


def _first_bits(bits: int, n: int) -> list[int]:
    out: list[int] = []
    while bits and len(out) < n:
        low = bits & -bits
        out.append(low.bit_length() - 1)
        bits ^= low
    return out


def merge(parts: list[AuditLedger]) -> AuditLedger:
    """One target's records from every process: producers are each in one process; reads of
    one subscription in two processes that overlap are duplicates."""
    out = AuditLedger()
    seen: dict[tuple[tuple[int, str], int], int] = {}
    for part in parts:
        out.producers.update(part.producers)
        out.duplicated += part.duplicated
        out.reordered += part.reordered
        out.unstamped += part.unstamped
        out.dup_examples = (out.dup_examples + part.dup_examples)[:EXAMPLES]
        out.back_examples = (out.back_examples + part.back_examples)[:EXAMPLES]
        for sub, records in part.reads.items():
            mine = out.reads.setdefault(sub, {})
            for producer, rec in records.items():
                have = mine.get(producer)
                if have is None:
                    mine[producer] = rec
                    seen[(sub, producer)] = _int(rec.seen)
                    continue
                prev, new = seen[(sub, producer)], _int(rec.seen)
                both = prev & new
                if both:
                    out.duplicated += both.bit_count()
                    for seq in _first_bits(both, EXAMPLES - len(out.dup_examples)):
                        out.dup_examples.append(Example(producer, seq, f"{sub[1]}, read by two "
                                                        "load processes"))
                seen[(sub, producer)] = prev | new
                have.seen = bytearray((prev | new).to_bytes((max(prev, new).bit_length() + 7) // 8,
                                                            "little"))
                have.dup = bytearray((_int(have.dup) | _int(rec.dup) | both).to_bytes(
                    (max(prev, new).bit_length() + 7) // 8, "little"))
                have.back = bytearray((_int(have.back) | _int(rec.back)).to_bytes(
                    (max(prev, new).bit_length() + 7) // 8, "little"))
    return out


@dataclass
class _Bits:
    """A producer's records as integers used as bitsets."""

    sent: int
    acked: int
    failed: int
    any_read: int
    dup: int
    back: int
    unseen: int


def _producer_bits(ledger: AuditLedger, producer: int, rec: ProducerRecord,
                   subscriptions: list[tuple[int, str]]) -> _Bits:
    sent = ((1 << rec.next_seq) - 1) & ~1  # sequences 1 ..< next_seq
    reads = [ledger.reads.get(s, {}).get(producer) for s in subscriptions]
    seen = [_int(r.seen) if r is not None else 0 for r in reads]
    any_read = 0
    for s in seen:
        any_read |= s
    unseen = 0
    for s in seen:
        unseen += (any_read & ~s).bit_count()
    dup = back = 0
    for r in reads:
        if r is not None:
            dup |= _int(r.dup)
            back |= _int(r.back)
    return _Bits(sent, rec.acked.bits(), rec.failed.bits(), any_read, dup, back, unseen)


def verdict(ledger: AuditLedger, subscriptions: dict[int, list[str]], producers_per_topic: int,
            windows: list[Window]) -> tuple[Verdict, list[tuple[Window, Verdict]]]:
    """The target's verdict and one per window. `subscriptions`: topic -> its subscriptions;
    a producer number's topic is number // producers_per_topic. Duplicates and reorders are
    counted per message (a message read three times is one duplicated message)."""
    total = Verdict()
    per_window = [(w, Verdict()) for w in windows]
    for number, rec in sorted(ledger.producers.items()):
        topic = number // max(1, producers_per_topic)
        subs = [(topic, s) for s in subscriptions.get(topic, [])]
        b = _producer_bits(ledger, number, rec, subs)
        _tally(total, number, b, subs, ledger, None, rec)
        for w, v in per_window:
            lo = rec.seq_at(w.start_ns)
            hi = rec.seq_at(w.end_ns) if w.end_ns is not None else rec.next_seq
            if hi > lo:
                _tally(v, number, b, subs, ledger, ((1 << hi) - 1) & ~((1 << lo) - 1), rec)
    return total, per_window


def _tally(v: Verdict, producer: int, b: _Bits, subs: list[tuple[int, str]],
           ledger: AuditLedger, mask: int | None, rec: ProducerRecord) -> None:
    m = -1 if mask is None else mask
    sent, acked, failed, read = b.sent & m, b.acked & m, b.failed & m, b.any_read & m
    v.sent += sent.bit_count()
    v.acknowledged += acked.bit_count()
    v.failed += failed.bit_count()
    v.consumed += read.bit_count()
    lost = acked & ~read
    unexpected = read & ~acked
    v.lost += lost.bit_count()
    v.unexpected += unexpected.bit_count()
    v.unexpected_failed += (unexpected & failed).bit_count()
    v.duplicated += (b.dup & m).bit_count()
    v.reordered += (b.back & ~b.dup & m).bit_count()
    if mask is None:
        v.unseen += b.unseen
    else:
        for s in subs:
            r = ledger.reads.get(s, {}).get(producer)
            v.unseen += (read & ~(_int(r.seen) if r is not None else 0)).bit_count()
    for name, bits in (("lost", lost), ("unexpected", unexpected), ("duplicated", b.dup & m),
                       ("reordered", b.back & ~b.dup & m)):
        shown = v.examples.setdefault(name, [])
        for seq in _first_bits(bits, EXAMPLES - len(shown)):
            note = " (its send failed)" if name == "unexpected" and failed >> seq & 1 else ""
            shown.append(f"producer {producer} #{seq}{note}")
    v.examples = {k: x for k, x in v.examples.items() if x}
