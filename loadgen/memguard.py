"""The run's guard against running the machine out of memory.

Some brokers keep every message in memory: a Redis stream without `maxlen=` grows by each
message for as long as the run lasts (about 1.2 kB per 1 KiB message, 155 MB/s at 130,000
msg/s), so a long run at a high rate ends with the kernel killing a process, the broker or
streambench itself, and the run's files cut off. The guard reads the machine's available memory at every
tick; once it falls under the floor, the run stops itself as a user's stop would (the load
ends, the consumers drain, the files are complete) and says why.

A broker in a container with a memory limit (docker `memory=`) is killed by the kernel at its
limit, whatever the machine has left: ContainerMemoryWatch says so when a target's containers
come near their limit, or grow towards it fast, before it happens."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import psutil

DEFAULT_SHARE = 0.05  # the default floor: this share of the machine's memory …
DEFAULT_MIN = 256 << 20  # … and at least this much


def default_floor(total: int | None = None) -> int:
    total = psutil.virtual_memory().total if total is None else total
    return max(DEFAULT_MIN, int(total * DEFAULT_SHARE))


def size_text(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


class MemoryGuard:
    """`check()` at each tick: None while the machine has at least `floor` bytes available
    (None: default_floor(); 0: never), then once the line saying why the run stops."""

    def __init__(self, floor: int | None = None) -> None:
        self.floor = default_floor() if floor is None else floor
        self.tripped = False

    def check(self) -> str | None:
        if self.tripped or self.floor <= 0:
            return None
        available = psutil.virtual_memory().available
        if available >= self.floor:
            return None
        self.tripped = True
        return (f"the machine has {size_text(available)} of memory available, under the "
                f"{size_text(self.floor)} floor (--min-free-memory): the run stops here, before "
                "the kernel kills a process (a broker that keeps messages in memory, as Redis "
                "streams do without maxlen=, grows by every message)")


HIGH_SHARE = 0.9  # a target's containers at this share of their memory limit are said …
GROWING_SHARE = 0.5  # … or past this share and growing towards it …
LEAD_S = 30.0  # … fast enough to reach it within this long (at the pace of the last …
PACE_TICKS = 5  # … this many ticks) …
REARM_SHARE = 0.8  # … once, and again only after falling under this share (or 10 points
REARM_DROP = 0.1  # under the share it was said at, when that was lower)


@dataclass(frozen=True)
class ContainerLimit:
    """A docker target's memory limit: `memory=` of each of its broker containers."""

    each: float  # bytes
    containers: int
    text: str  # as the user wrote it, e.g. 256m
    hint: str = ""  # what keeps the broker's memory down, when the platform has such a setting


class ContainerMemoryWatch:
    """Broker containers with a memory limit: a broker that reaches its limit stalls while the
    kernel reclaims what it can, then is killed, and the run can only report it as died (a
    Redis container limited to 48 MiB once answered nothing for 20 s first, once was killed at
    once). Memory that grows fast crosses a last 10 % within a tick, so the watch looks ahead:
    `check()` returns the line of a broker-memory-high event when a target's containers (the
    tick's broker memory, summed over them, against the sum of their limits) are within 10 %
    of their limit, or past half of it and growing at a pace (over the last PACE_TICKS ticks)
    that reaches it within LEAD_S; once, and again only after falling under 80 % of it (or 10
    points under the share it was said at, when lower)."""

    def __init__(self, limits: dict[str, ContainerLimit]) -> None:
        self._limits = limits
        self._high: dict[str, float] = {}  # the targets said, with the share they were said at
        self._seen: dict[str, deque[tuple[float, int]]] = {}

    def check(self, label: str, used: int, time_s: float) -> str | None:
        limit = self._limits.get(label)
        if limit is None or used <= 0:
            return None
        whole = limit.each * limit.containers
        share = used / whole
        seen = self._seen.setdefault(label, deque(maxlen=PACE_TICKS + 1))
        seen.append((time_s, used))
        if label in self._high:
            if share < min(REARM_SHARE, self._high[label] - REARM_DROP):
                del self._high[label]
            return None
        (t0, u0), (t1, u1) = seen[0], seen[-1]
        pace = (u1 - u0) / (t1 - t0) if t1 > t0 else 0.0  # bytes/s
        reach_s = (whole - used) / pace if pace > 0 else float("inf")
        if share < HIGH_SHARE and not (share >= GROWING_SHARE and reach_s <= LEAD_S):
            return None
        self._high[label] = share
        whose = ("its broker container uses" if limit.containers == 1
                 else f"its {limit.containers} broker containers use together")
        each = " each" if limit.containers > 1 else ""
        growing = (f", growing by {pace / 1e6:,.1f} MB/s: the limit in about {reach_s:,.0f} s at "
                   "this pace" if reach_s <= LEAD_S else "")
        return (f"{whose} {size_text(used)} of memory, {share:.0%} of the limit (memory="
                f"{limit.text}{each}){growing}; at the limit the broker stalls while the kernel "
                "reclaims its memory, then the kernel kills it (the run reports it as died)"
                f"{'; ' + limit.hint if limit.hint else ''}")
