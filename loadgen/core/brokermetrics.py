"""A platform's broker metrics: the few internal figures that explain how its broker behaves
under a benchmark (a request queue, a flush time, memory, a backlog), declared on its
`Platform` record and read once per tick from the broker's own interface by a collector of
their own.

Each metric has streambench's name (a Prometheus name: its unit as a suffix, base units) and
the broker's own name beside it, so a reader can look the figure up in the broker's
documentation. Values are carried in base units (seconds, bytes); the screens convert."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loadgen.core.collector import Collector
    from loadgen.core.stackinfo import StackDescription
    from loadgen.core.target import Target

# a metric's unit, and the suffix its name ends with ("" for a plain count or a state)
UNITS: dict[str, str] = {
    "seconds": "_seconds",
    "bytes": "_bytes",
    "ratio": "_ratio",
    "per_second": "_per_second",
    "count": "",
}


def unit_of(name: str) -> str:
    """A metric's unit, from its name's suffix (what the run files and the endpoint need of a
    name without the platform's declaration at hand)."""
    return next((unit for unit, suffix in UNITS.items() if suffix and name.endswith(suffix)),
                "count")


@dataclass(frozen=True)
class BrokerMetric:
    name: str  # streambench's: a Prometheus name ending in its unit's suffix
    native: str  # the broker's own name for it, as its interface shows it
    unit: str  # one of UNITS
    why: str  # what it explains about the broker under a benchmark (one sentence)

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"broker metric {self.name}: unit {self.unit!r} is not one of "
                             f"{', '.join(UNITS)}")
        if unit_of(self.name) != self.unit or not self.name.replace("_", "").isalnum():
            raise ValueError(f"broker metric {self.name}: a {self.unit} metric's name is "
                             f"lower_snake_case ending in {UNITS[self.unit] or 'no unit'!r}")

    @property
    def latency(self) -> bool:
        """A time the broker spends on something: drawn as a sparkline."""
        return self.unit == "seconds"


@dataclass(frozen=True)
class BrokerMetrics:
    """The trait: which metrics a platform's broker explains itself with, where they come from,
    and the collector that reads them for a target (one per target, given all its topics)."""

    source: str  # the interface they are read from, as users know it: "INFO", "/varz and /jsz"
    metrics: tuple[BrokerMetric, ...]
    # (target, stack, the target's topics) -> the collector
    make_collector: Callable[[Target, StackDescription, list[str]], Collector]

    def __post_init__(self) -> None:
        names = [m.name for m in self.metrics]
        if len(set(names)) != len(names):
            raise ValueError(f"broker metrics from {self.source}: a name is declared twice")

    def named(self, name: str) -> BrokerMetric | None:
        return next((m for m in self.metrics if m.name == name), None)

    def describe(self) -> dict[str, object]:
        """For run.json: where they come from and each one's own name and unit."""
        return {"source": self.source,
                "metrics": [{"name": m.name, "native": m.native, "unit": m.unit}
                            for m in self.metrics]}
