"""Container resources from the cAdvisor service of a stack (--resources cadvisor), through its
REST API: `GET /api/v2.0/stats/<container id>?type=docker&count=2` per container, the two newest
samples of its 1-second housekeeping (the compose file runs it with
--housekeeping_interval=1s --allow_dynamic_housekeeping=false).

- CPU % = Δcpu.usage.total (ns) / Δtimestamp (ns) × 100 (100 % = one core);
- memory = memory.working_set (usage − inactive file pages, docker stats' figure);
- disk = Σ diskio.io_service_bytes[*].stats Read/Write, as deltas per tick.
Network is left unknown: under host networking a container's interfaces are the host's."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from datetime import datetime
from typing import Any

from loadgen.core.collector import Collector, CounterDeltas, Reading

REQUEST_TIMEOUT_S = 0.8


def _time_ns(text: str) -> int:
    """cAdvisor's RFC 3339 timestamps carry nanoseconds, which datetime does not parse."""
    head, _, frac = text.rstrip("Z").partition(".")
    digits = "".join(ch for ch in frac if ch.isdigit())
    offset = frac[len(digits):] or "+00:00"
    seconds = datetime.fromisoformat(head + offset).timestamp()
    return int(seconds) * 1_000_000_000 + int((digits or "0").ljust(9, "0")[:9])


def container_figures(samples: list[dict[str, Any]]) -> tuple[float | None, int | None, int, int]:
    """(cpu %, memory bytes, cumulative disk read, cumulative disk write) from a container's
    newest samples, oldest first."""
    if not samples:
        return None, None, 0, 0
    last = samples[-1]
    cpu = None
    if len(samples) >= 2:
        prev = samples[-2]
        dt = _time_ns(last["timestamp"]) - _time_ns(prev["timestamp"])
        used = last["cpu"]["usage"]["total"] - prev["cpu"]["usage"]["total"]
        if dt > 0:
            cpu = max(0.0, used / dt * 100.0)
    memory = (last.get("memory") or {}).get("working_set")
    read = write = 0
    for device in (last.get("diskio") or {}).get("io_service_bytes") or []:
        stats = device.get("stats") or {}
        read += int(stats.get("Read", 0))
        write += int(stats.get("Write", 0))
    return cpu, (int(memory) if memory is not None else None), read, write


class CadvisorResources(Collector):
    name = "cadvisor"

    def __init__(self, address: str, container_ids: tuple[str, ...]) -> None:
        self._base = f"http://{address}"
        self._ids = container_ids
        self._deltas = CounterDeltas()

    def _fetch(self, container_id: str) -> list[dict[str, Any]]:
        url = f"{self._base}/api/v2.0/stats/{container_id}?type=docker&count=2"
        with urllib.request.urlopen(url, timeout=REQUEST_TIMEOUT_S) as resp:
            doc = json.loads(resp.read())
        # keyed by the container's cgroup name; one container asked, one key back
        samples: list[dict[str, Any]] = next(iter(doc.values()), []) if isinstance(doc, dict) else []
        return sorted(samples, key=lambda s: _time_ns(s["timestamp"]))

    async def sample(self) -> Reading:
        results = await asyncio.gather(*(asyncio.to_thread(self._fetch, cid) for cid in self._ids),
                                       return_exceptions=True)
        cpu = 0.0
        memory = read = write = seen = 0
        for result in results:
            if isinstance(result, BaseException):
                continue
            c, m, r, w = container_figures(result)
            if c is None and m is None:
                continue
            seen += 1
            cpu += c or 0.0
            memory += m or 0
            read, write = read + r, write + w
        if not seen:
            return Reading()
        return Reading(cpu_percent=cpu, memory_bytes=memory,
                       disk_read_bytes=int(self._deltas.delta("read", read)),
                       disk_write_bytes=int(self._deltas.delta("write", write)))
