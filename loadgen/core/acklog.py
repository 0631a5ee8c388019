"""The producers' side of the exact time lag: from their acknowledgements, the intended send
time at acknowledged positions of each partition, thinned to one sample per STEP_NS of intended
time per partition (a bounded number per second, not one per message). The load takes the new
samples at every tick and the coordinator looks the consumers' positions up in them
(loadgen.timelag).

A position is an integer that grows with the partition's order: a Kafka offset, a Redis stream
id as `ms << 20 | seq` (stream_position). With the delivery audit a message's value is its
stamp (loadgen.core.audit): its intended time is the stamp modulo STAMP_BASE, taken here."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from loadgen.core.audit import STAMP_BASE

# one sample per partition per this much intended time: the time lag of a position that falls
# between two samples is bounded by them, so about this far apart
STEP_NS = 10_000_000
# Redis stream ids: the sequence within a millisecond takes the low bits
SEQ_BITS = 20

# (partition, position, intended send time ns)
Sample = tuple[int, int, int]


def stream_position(entry_id: bytes) -> int:
    """A Redis stream id (`<ms>-<seq>`) as one integer ordered as the ids are."""
    ms, _, seq = entry_id.partition(b"-")
    return int(ms) << SEQ_BITS | int(seq or 0)


class AckLog:
    """Acknowledged (position, intended time) samples of one topic in one load process, kept
    until the next tick takes them. A producer calls it from its acknowledgement callback:
    `one()` per acknowledged message or `run()` per acknowledged run of consecutive positions;
    a call that falls before its partition's next sample is due costs one comparison."""

    __slots__ = ("_due", "_new", "_next_due", "step_ns")

    def __init__(self, partitions: int, step_ns: int = STEP_NS) -> None:
        self.step_ns = step_ns
        self._due = [0] * partitions  # per partition: the intended time of its next sample
        # the earliest of them, as of the last take or batch: a floor, since they only grow
        self._next_due = 0
        self._new: list[Sample] = []

    def _take_sample(self, partition: int, position: int, intended_ns: int) -> None:
        self._new.append((partition, position, intended_ns))
        self._due[partition] = intended_ns + self.step_ns

    def one(self, partition: int, position: int, intended_ns: int) -> None:
        """One acknowledged message."""
        if intended_ns >= STAMP_BASE:
            intended_ns %= STAMP_BASE
        if intended_ns >= self._due[partition]:
            self._take_sample(partition, position, intended_ns)

    def each(self, partitions: Sequence[int], positions: Sequence[Any],
             intended_ns: Sequence[int], parse: Callable[[Any], int] = int) -> None:
        """Acknowledged messages, each with its own partition and position (as the broker
        answered it: `parse` makes it a position, for the sampled ones only)."""
        if not intended_ns or intended_ns[-1] % STAMP_BASE < self._next_due:
            return
        due = self._due
        for partition, position, t in zip(partitions, positions, intended_ns, strict=True):
            if t >= STAMP_BASE:
                t %= STAMP_BASE
            if t >= due[partition]:
                self._take_sample(partition, parse(position), t)
        self._next_due = min(due)

    def wanted(self, last_intended_ns: int) -> bool:
        """Whether acknowledged messages up to this intended time may be sampled: False lets a
        producer skip even gathering their positions."""
        return last_intended_ns % STAMP_BASE >= self._next_due

    def run(self, partition: int, first: int, count: int, first_ns: int, last_ns: int) -> None:
        """`count` consecutive positions from `first` of one partition (a Kafka record batch),
        intended from first_ns to last_ns: its first and last message are sampled when a
        sample is due."""
        first_ns, last_ns = first_ns % STAMP_BASE, last_ns % STAMP_BASE
        if not count or last_ns < self._due[partition]:
            return
        self._new.append((partition, first, first_ns))
        if count > 1:
            self._new.append((partition, first + count - 1, last_ns))
        self._due[partition] = last_ns + self.step_ns

    def take(self) -> list[Sample]:
        """The samples since the last take."""
        new, self._new = self._new, []
        self._next_due = min(self._due, default=0)
        return new
