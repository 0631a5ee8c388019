"""What a collector hands the run loop once per tick."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from loadgen.core.ticks import LagSnapshot


@dataclass
class Reading:
    """Part of a tick's telemetry; fields a collector does not know stay None."""

    cpu_percent: float | None = None
    memory_bytes: int | None = None
    disk_read_bytes: int | None = None
    disk_write_bytes: int | None = None
    net_rx_bytes: int | None = None
    net_tx_bytes: int | None = None
    lag: LagSnapshot | None = None
    broker: dict[str, float] = field(default_factory=dict)
    # the platform's broker metrics (loadgen.core.brokermetrics): per broker that answered,
    # by streambench's name
    metrics: dict[str, dict[str, float]] | None = None

    def merge(self, other: Reading) -> Reading:
        out = Reading(broker={**self.broker, **other.broker})
        for name in ("cpu_percent", "memory_bytes", "disk_read_bytes", "disk_write_bytes",
                     "net_rx_bytes", "net_tx_bytes", "lag", "metrics"):
            mine, theirs = getattr(self, name), getattr(other, name)
            setattr(out, name, theirs if theirs is not None else mine)
        if self.lag is not None and other.lag is not None:  # two topics' lag collectors
            out.lag = self.lag.plus(other.lag)
        return out


class Collector(ABC):
    """Sampled once per tick by the run loop; a sample must return well within a second."""

    name: str = "collector"

    async def start(self) -> None:
        """Take the first reading that later deltas are measured against."""

    @abstractmethod
    async def sample(self) -> Reading: ...

    async def close(self) -> None:
        """Release connections."""


class CounterDeltas:
    """Turns monotonically growing counters into per-interval deltas (first call gives 0).

    A sample that reads several things can fail after some of its deltas were taken (the
    broker dies between two requests, the run loop's timeout cancels it): inside `staged()` the
    new readings are kept only when the whole block succeeds, so the next sample's deltas cover
    the failed interval too and no count falls between two samples."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self._staged: dict[str, float] | None = None

    def delta(self, name: str, value: float) -> float:
        prev = self._last.get(name)
        (self._last if self._staged is None else self._staged)[name] = value
        if prev is None or value < prev:  # first reading, or the counter was reset
            return 0.0
        return value - prev

    @contextmanager
    def staged(self) -> Iterator[None]:
        """Readings taken in the block count only if the block ends without an exception."""
        staged: dict[str, float] = {}
        self._staged = staged
        try:
            yield
            self._last.update(staged)
        finally:
            self._staged = None
