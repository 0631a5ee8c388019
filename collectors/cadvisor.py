"""Container resources from a cAdvisor (--resources cadvisor: the one streambench starts, or the
one --cadvisor names), through cAdvisor's REST API as its own command serves it (v2.0):

- `GET /api/v2.0/stats/<container id>?type=docker&count=2`: the container's newest samples,
  answered as {"/docker/<id>": [sample, …]}, oldest first, one per housekeeping (every second
  for the cAdvisor streambench starts: -housekeeping_interval=1s
  -allow_dynamic_housekeeping=false);
- `GET /api/v2.0/spec/<container id>?type=docker`: its name (the first of its aliases), once,
  for each broker's own figures when the stack has several containers.

- CPU % = Δcpu.usage.total (ns) / Δtimestamp (ns) × 100 (100 % = one core), over the tick as
  docker stats takes it: from the sample the previous tick ended at to the newest (the newest
  two when no new sample came, or when the container started again and its counters began
  anew);
- memory = memory.working_set (usage − inactive file pages, docker stats' figure);
- disk = Σ diskio.io_service_bytes[*].stats Read/Write, as deltas per tick.
Network is left unknown: under host networking a container's interfaces are the host's. A
container cAdvisor does not know at the moment (stopped by a fault, or started so recently that
cAdvisor has not seen it yet) adds nothing to the tick; when it knows none, the tick's figures
stay unknown."""

from __future__ import annotations

import asyncio
import json
import math
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from loadgen.core.collector import Collector, CounterDeltas, Reading

REQUEST_TIMEOUT_S = 0.8


def time_ns(text: str) -> int:
    """An RFC 3339 time as Go writes it (nanoseconds, trailing zeros dropped, `Z` or an offset),
    in ns since the epoch: datetime parses neither the nanoseconds nor every such form."""
    date, _, clock = text.strip().partition("T")
    cut = next((i for i, ch in enumerate(clock) if ch in "Zz+-"), len(clock))
    clock, zone = clock[:cut], clock[cut:]
    whole, _, fraction = clock.partition(".")
    offset = "+00:00" if zone in ("", "Z", "z") else zone
    seconds = datetime.fromisoformat(f"{date}T{whole}{offset}").timestamp()
    return int(seconds) * 1_000_000_000 + int((fraction or "0").ljust(9, "0")[:9])


@dataclass(frozen=True)
class Sample:
    """One cAdvisor sample of a container: cumulative CPU and disk counters, memory now."""

    time_ns: int
    cpu_ns: int
    memory: int | None
    read: int
    write: int

    @classmethod
    def of(cls, raw: dict[str, Any]) -> Sample:
        read = write = 0
        for device in (raw.get("diskio") or {}).get("io_service_bytes") or []:
            stats = device.get("stats") or {}
            read += int(stats.get("Read", 0))
            write += int(stats.get("Write", 0))
        memory = (raw.get("memory") or {}).get("working_set")
        return cls(time_ns(raw["timestamp"]), int(raw["cpu"]["usage"]["total"]),
                   int(memory) if memory is not None else None, read, write)

    def follows(self, earlier: Sample) -> bool:
        """Whether `earlier` is an older sample of the same run of the container (its counters
        have not begun anew since)."""
        return earlier.time_ns < self.time_ns and earlier.cpu_ns <= self.cpu_ns


def cpu_percent(start: Sample | None, end: Sample) -> float | None:
    """CPU % between two samples of a container (100 % = one core)."""
    if start is None or not end.follows(start):
        return None
    return (end.cpu_ns - start.cpu_ns) / (end.time_ns - start.time_ns) * 100.0


class CadvisorResources(Collector):
    """CPU, memory and block I/O of a stack's containers, summed over them; with several
    containers also each one's figures, as collectors.docker gives them."""

    name = "cadvisor"

    def __init__(self, address: str, container_ids: tuple[str, ...]) -> None:
        self._base = f"http://{address}"
        self._ids = container_ids
        self._deltas = CounterDeltas()
        self._ended: dict[str, Sample] = {}  # container id → the sample the last tick ended at
        self._names: dict[str, str] = {}

    def _get(self, path: str) -> Any:
        with urllib.request.urlopen(self._base + path, timeout=REQUEST_TIMEOUT_S) as resp:
            return json.loads(resp.read())

    def _fetch(self, container_id: str) -> list[Sample]:
        """The container's newest samples, oldest first; empty when cAdvisor does not know it."""
        doc = self._get(f"/api/v2.0/stats/{container_id}?type=docker&count=2")
        # keyed by the container's cgroup name; one container asked, one key back
        raw: list[dict[str, Any]] = next(iter(doc.values()), []) if isinstance(doc, dict) else []
        return sorted((Sample.of(s) for s in raw), key=lambda s: s.time_ns)

    def _name(self, container_id: str) -> str:
        if container_id not in self._names:
            try:
                doc = self._get(f"/api/v2.0/spec/{container_id}?type=docker")
                spec: dict[str, Any] = next(iter(doc.values()), {})
                aliases = spec.get("aliases") or []
            except (OSError, ValueError, AttributeError):
                return container_id[:12]  # asked again next tick
            self._names[container_id] = str(aliases[0]) if aliases else container_id[:12]
        return self._names[container_id]

    async def sample(self) -> Reading:
        results = await asyncio.gather(*(asyncio.to_thread(self._fetch, cid) for cid in self._ids),
                                       return_exceptions=True)
        cpu = 0.0
        memory = read = write = seen = 0
        per_broker: dict[str, float] = {}
        for cid, result in zip(self._ids, results, strict=True):
            if isinstance(result, BaseException) or not result:
                continue  # cAdvisor does not know the container now
            newest = result[-1]
            start = self._ended.get(cid)
            if start is None or not newest.follows(start):
                start = result[-2] if len(result) >= 2 else None
            self._ended[cid] = newest
            value = cpu_percent(start, newest)
            r = self._deltas.delta(f"read-{cid}", newest.read)
            w = self._deltas.delta(f"write-{cid}", newest.write)
            seen += 1
            cpu += value or 0.0
            memory += newest.memory or 0
            read, write = read + int(r), write + int(w)
            if len(self._ids) > 1:
                key = f"broker.{await asyncio.to_thread(self._name, cid)}"
                per_broker[f"{key}.cpu_percent"] = value if value is not None else math.nan
                per_broker[f"{key}.memory_bytes"] = float(newest.memory or 0)
                per_broker[f"{key}.disk_read_bytes"] = r
                per_broker[f"{key}.disk_write_bytes"] = w
        if not seen:
            return Reading()
        return Reading(cpu_percent=cpu, memory_bytes=memory, disk_read_bytes=read,
                       disk_write_bytes=write, broker=per_broker)
