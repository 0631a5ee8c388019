"""The `assignment` events of a target: which partitions its consumers hold. The consumers'
first partitions (at start-up, as the first tick sees them) are told in one event for the
target, however many consumers it has; every change after (a rebalance, a consumer replaced
after a lost connection) in one event per consumer, with the partitions before. Fed the
consumers of each of the target's ticks as the coordinator merged them, so a target spread
over several processes is told as one. Each consumer's partitions per tick, in full, are in
the run's `consumers` table; these events are what a reader of the event list needs."""

from __future__ import annotations

from collections.abc import Sequence

from loadgen.core.ticks import ConsumerStat, partition_list

# the consumers listed in a start-up event before "… N more" (the consumers table has them all)
LIST_CHARS = 160
PARTITIONS_CHARS = 40  # one consumer's partitions in a start-up event, before "…"


class AssignmentWatch:
    """The partitions each consumer of one target held at the last tick."""

    def __init__(self) -> None:
        self._held: dict[tuple[int, str, int], tuple[int, ...]] = {}

    def changes(self, consumers: Sequence[ConsumerStat]) -> list[str]:
        """The details of the `assignment` events this tick gives: first the consumers told for
        the first time (one event), then each consumer whose partitions changed."""
        first: list[ConsumerStat] = []
        changed: list[str] = []
        for c in consumers:
            if c.partitions is None:  # the broker deals them and does not tell
                continue
            key = (c.topic, c.subscription, c.index)
            was = self._held.get(key)
            if was is None:
                first.append(c)
            elif was != c.partitions:
                changed.append(assignment_text(c, was))
            self._held[key] = c.partitions
        if len(first) == 1:
            return [assignment_text(first[0], None), *changed]
        return [first_assignments_text(first), *changed] if first else changed


def assignment_text(stat: ConsumerStat, was: tuple[int, ...] | None) -> str:
    """One consumer's partitions: `consumer 1 of streambench-sub-0 (topic 0): partitions 0, 2
    (was 0-3)`."""
    held = stat.partitions or ()
    text = (f"consumer {stat.index} of {stat.subscription} (topic {stat.topic}): "
            f"partition{'' if len(held) == 1 else 's'} {partition_list(held)}")
    if stat.shared:
        text += ", shared with the subscription's other consumers"
    return text + (f" (was {partition_list(was)})" if was is not None else "")


def first_assignments_text(stats: Sequence[ConsumerStat]) -> str:
    """Several consumers' first partitions in one line: `8 consumers assigned 100 partitions:
    sub-0/0 0-12; sub-0/1 13-25; …; 5 more`. Consumers next to each other holding the same
    partitions are one entry (`sub-0/0 to sub-0/2 0-2 shared`: Redis Streams' group)."""
    ordered = sorted(stats, key=lambda c: (c.topic, c.subscription, c.index))
    count = len({(c.topic, p) for c in ordered for p in c.partitions or ()})
    groups: list[list[ConsumerStat]] = []
    for c in ordered:
        last = groups[-1][-1] if groups else None
        if (last is not None and (last.topic, last.subscription, last.partitions, last.shared)
                == (c.topic, c.subscription, c.partitions, c.shared)):
            groups[-1].append(c)
        else:
            groups.append([c])
    entries: list[str] = []
    told = 0
    for group in groups:
        who = group[0].name if len(group) == 1 else f"{group[0].name} to {group[-1].name}"
        entry = f"{who} {_shortened(partition_list(group[0].partitions or ()))}"
        entry += " shared" if group[0].shared else ""
        if entries and len("; ".join([*entries, entry])) > LIST_CHARS:
            break
        entries.append(entry)
        told += len(group)
    if told < len(ordered):
        entries.append(f"… {len(ordered) - told} more")
    return (f"{len(ordered)} consumers assigned {count} partition{'' if count == 1 else 's'}: "
            + "; ".join(entries))


def _shortened(partitions: str) -> str:
    """A long partition list cut after its last whole entry within PARTITIONS_CHARS."""
    if len(partitions) <= PARTITIONS_CHARS:
        return partitions
    cut = partitions.rfind(", ", 0, PARTITIONS_CHARS)
    return (partitions[:cut] if cut > 0 else partitions[:PARTITIONS_CHARS]) + ", …"
