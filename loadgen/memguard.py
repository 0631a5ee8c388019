"""The run's guard against running the machine out of memory.

Some brokers keep every message in memory: a Redis stream without `maxlen=` grows by each
message for as long as the run lasts (about 1.2 kB per 1 KiB message, 155 MB/s at 130,000
msg/s), so a long run at a high rate ends with the kernel killing a process, the broker or
streambench itself, and the run's files cut off. The guard reads the machine's available memory at every
tick; once it falls under the floor, the run stops itself as a user's stop would (the load
ends, the consumers drain, the files are complete) and says why."""

from __future__ import annotations

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


def parse_size(text: str) -> int:
    """A size in bytes from `0`, `1073741824`, `512m`, `2.5g` (k, m, g, t: powers of 1,024)."""
    units = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    t = text.strip().lower()
    number = t.rstrip("kmgtb")
    unit = t[len(number):]
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if unit not in units or not value >= 0 or value != value or value == float("inf"):
        raise ValueError("expected a size like 2g, 512m, 1073741824 or 0 (no floor)")
    return int(value * units[unit])
