"""Broker metrics read from Prometheus text endpoints, one per broker, once per tick: the Kafka
brokers' JMX exporter agents and Redpanda's /public_metrics.

Every broker's endpoint is read at the same time, each in a thread of its own with a short
timeout; a broker that does not answer (paused, killed, unreachable) is left out of the tick's
values, so its last values are kept and marked stale, while the others' are fresh. A counter is
turned into a per-second rate over the time between two reads of the same broker, and a
histogram into a quantile of the observations made between them."""

from __future__ import annotations

import asyncio
import math
import re
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from loadgen.core.collector import Collector, CounterDeltas, Reading

READ_TIMEOUT_S = 0.7  # within the run loop's 0.9 s per sample


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


_LINE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def _unescape(value: str) -> str:
    return re.sub(r"\\[\\\"n]", lambda m: _ESCAPES[m.group(0)], value)


def parse(text: str) -> list[Sample]:
    """The samples of a Prometheus text exposition, each under the name it is written with
    (prometheus_client's parser renames a counter's samples to end in _total; Redpanda's
    counters do not all do). Comments and lines that are not samples are skipped."""
    found = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        name, labels, value = m.groups()
        pairs = {k: _unescape(v) for k, v in _LABEL.findall(labels or "")}
        try:
            found.append(Sample(name, pairs, float(value)))
        except ValueError:
            continue
    return found


def named_endpoints(text: str) -> dict[str, str]:
    """`broker=URL,…` (a stack description's metrics endpoints) as a dict in broker order."""
    found: dict[str, str] = {}
    for item in filter(None, (i.strip() for i in text.split(","))):
        broker, sep, url = item.partition("=")
        if not sep or not broker or not url:
            raise ValueError(f"expected BROKER=URL, got {item!r}")
        found[broker] = url
    return found


def quantile(buckets: Mapping[float, float], q: float) -> float | None:
    """The q-quantile of a histogram's cumulative bucket counts (upper bound -> count), by
    linear interpolation within the bucket it falls in, as Prometheus's histogram_quantile
    does; None without observations. A quantile in the +Inf bucket is the last finite bound."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank = q * buckets[bounds[-1]]
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            return lower + (bound - lower) * ((rank - below) / (count - below) if count > below else 1.0)
        lower, below = bound, count
    return lower


@dataclass
class BrokerState:
    """What one broker's figures need from its previous read: counters and histogram buckets
    for their deltas, and when it was read."""

    counters: CounterDeltas = field(default_factory=CounterDeltas)
    read_at: float | None = None  # monotonic seconds of the previous read
    seconds: float = 0.0  # since the previous read (0 on the first)
    seen: set[str] = field(default_factory=set)  # the counters read before

    def _delta(self, name: str, total: float) -> float | None:
        """A counter's growth since the previous read; None when it was not read before (the
        first read, or a counter the broker has only just created)."""
        delta = self.counters.delta(name, total)
        known = name in self.seen
        self.seen.add(name)
        return delta if known and self.seconds > 0 else None

    def rate(self, name: str, total: float) -> float | None:
        """A counter's per-second rate since the previous read."""
        delta = self._delta(name, total)
        return delta / self.seconds if delta is not None else None

    def interval_quantile(self, name: str, buckets: Mapping[float, float], q: float
                          ) -> float | None:
        """The q-quantile of the observations made since the previous read (None before a
        second read, or when none were made)."""
        deltas = {b: self._delta(f"{name} le={b}", c) for b, c in buckets.items()}
        known = {b: d for b, d in deltas.items() if d is not None}
        return quantile(known, q) if known and len(known) == len(deltas) else None


def sums(samples: Iterable[Sample], name: str, **labels: str) -> float | None:
    """The sum of a metric's samples having the given labels (None: no such sample)."""
    found = [s.value for s in samples
             if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    return sum(found) if found else None


def buckets_of(samples: Iterable[Sample], name: str, **labels: str) -> dict[float, float]:
    """A histogram's cumulative buckets (`NAME_bucket` by `le`), summed over its other labels."""
    found: dict[float, float] = {}
    for s in samples:
        if s.name == f"{name}_bucket" and all(s.labels.get(k) == v for k, v in labels.items()):
            bound = float(s.labels["le"])
            found[bound] = found.get(bound, 0.0) + s.value
    return found


# (a read's samples, the broker's state) -> the broker's values by streambench's name
Interpret = Callable[[list[Sample], BrokerState], dict[str, float]]


def fetch(url: str, timeout_s: float = READ_TIMEOUT_S) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return str(response.read().decode("utf-8", "replace"))


class EndpointMetrics(Collector):
    """Each broker's endpoint read once per tick and interpreted into its broker metrics. A
    tick's values hold the brokers that answered; when none did, the sample fails with the
    first broker's error (what the run records as the collector's trouble)."""

    def __init__(self, name: str, endpoints: Mapping[str, str], interpret: Interpret) -> None:
        self.name = name
        self._endpoints = dict(endpoints)
        self._interpret = interpret
        self._state = {broker: BrokerState() for broker in self._endpoints}

    def _read(self, broker: str) -> dict[str, float]:
        text = fetch(self._endpoints[broker])
        now = time.monotonic()
        state = self._state[broker]
        state.seconds = now - state.read_at if state.read_at is not None else 0.0
        samples = parse(text)
        with state.counters.staged():
            values = self._interpret(samples, state)
        state.read_at = now
        return {k: v for k, v in values.items() if math.isfinite(v)}

    async def _read_all(self) -> dict[str, dict[str, float] | BaseException]:
        brokers = list(self._endpoints)
        results = await asyncio.gather(*(asyncio.to_thread(self._read, b) for b in brokers),
                                       return_exceptions=True)
        return dict(zip(brokers, results, strict=True))

    async def start(self) -> None:
        """A first read of each broker, for its counters' starting points; a broker that does
        not answer yet is read from the first tick on."""
        if self._endpoints:
            await self._read_all()

    async def sample(self) -> Reading:
        if not self._endpoints:
            return Reading(metrics={})
        results = await self._read_all()
        fresh = {b: r for b, r in results.items() if isinstance(r, dict)}
        if not fresh:
            broker, error = next(iter(results.items()))
            raise OSError(f"{broker} ({self._endpoints[broker]}): {error}")
        return Reading(metrics=fresh)
