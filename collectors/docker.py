"""Container resources from the Docker engine's stats stream, computed exactly like `docker
stats` does (reference: the docker CLI's stats helpers):

- CPU % = Δcpu_stats.cpu_usage.total_usage / Δcpu_stats.system_cpu_usage × online_cpus × 100
  (100 % = one core), here over the tick: between the frame used at the previous tick and the
  newest one (a frame's own precpu_stats when no new frame came);
- memory = memory_stats.usage − stats.total_inactive_file (cgroup v1) or − stats.inactive_file
  (cgroup v2), when that is below the usage;
- block I/O = Σ blkio_stats.io_service_bytes_recursive by op (read/write), as deltas per tick;
- network = Σ networks.*.rx_bytes/tx_bytes, as deltas — only for a container with a network
  namespace of its own. Under host networking (how streambench runs brokers) the engine reports
  no networks, so network stays unknown here; broker counters cover it where a platform has them.

The SDK is synchronous: each container's stream is read by a thread of its own (one frame per
second from the engine), so sampling on the event loop only reads the newest frame."""

from __future__ import annotations

import contextlib
import math
import threading
from typing import Any

from loadgen.core.collector import Collector, CounterDeltas, Reading

Frame = dict[str, Any]


def cpu_percent(frame: Frame, previous: Frame | None = None) -> float | None:
    """CPU % between `previous` and `frame` (or frame's own precpu_stats), as docker computes it."""
    cpu = frame.get("cpu_stats") or {}
    pre = (previous or {}).get("cpu_stats") if previous is not None else frame.get("precpu_stats")
    pre = pre or {}
    try:
        cpu_delta = cpu["cpu_usage"]["total_usage"] - pre["cpu_usage"]["total_usage"]
        system_delta = cpu["system_cpu_usage"] - pre["system_cpu_usage"]
    except (KeyError, TypeError):
        return None
    online = cpu.get("online_cpus") or len(cpu.get("cpu_usage", {}).get("percpu_usage") or []) or 1
    if system_delta > 0 and cpu_delta > 0:
        return float(cpu_delta) / float(system_delta) * online * 100.0
    return 0.0


def memory_bytes(frame: Frame) -> int | None:
    mem = frame.get("memory_stats") or {}
    usage = mem.get("usage")
    if usage is None:
        return None
    stats = mem.get("stats") or {}
    if "total_inactive_file" in stats:  # cgroup v1
        if stats["total_inactive_file"] < usage:
            return int(usage - stats["total_inactive_file"])
    elif stats.get("inactive_file", usage) < usage:  # cgroup v2
        return int(usage - stats["inactive_file"])
    return int(usage)


def block_io(frame: Frame) -> tuple[int, int]:
    read = write = 0
    for entry in (frame.get("blkio_stats") or {}).get("io_service_bytes_recursive") or []:
        op = str(entry.get("op", " "))[:1].lower()
        if op == "r":
            read += int(entry.get("value", 0))
        elif op == "w":
            write += int(entry.get("value", 0))
    return read, write


def network_io(frame: Frame) -> tuple[int, int] | None:
    networks = frame.get("networks")
    if not networks:
        return None
    return (sum(int(n.get("rx_bytes", 0)) for n in networks.values()),
            sum(int(n.get("tx_bytes", 0)) for n in networks.values()))


class _Stream:
    """One container's stats frames, read by a daemon thread."""

    def __init__(self, client: Any, container_id: str) -> None:
        self.container_id = container_id
        self.latest: Frame | None = None
        self.used: Frame | None = None  # the frame the previous tick measured up to
        self._client = client
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True,
                                        name=f"docker stats {container_id[:12]}")

    def start(self) -> None:
        self._thread.start()

    def _read(self) -> None:
        with contextlib.suppress(Exception):  # the container went away, or the engine did
            for frame in self._client.api.stats(self.container_id, stream=True, decode=True):
                if self._stop.is_set():
                    return
                if frame.get("read", "").startswith("0001-"):
                    continue  # a stopped container's empty frame
                self.latest = frame

    def stop(self) -> None:
        self._stop.set()


class DockerStats(Collector):
    """CPU, memory and block I/O of a stack's containers, summed over them; with several
    containers also each one's figures as `broker.<container name>.cpu_percent` /
    `.memory_bytes` / `.disk_read_bytes` / `.disk_write_bytes` and, on a network of their own,
    `.net_rx_bytes` / `.net_tx_bytes` (bytes in the interval)."""

    name = "docker"

    def __init__(self, container_ids: tuple[str, ...]) -> None:
        self._ids = container_ids
        self._client: Any = None
        self._streams: list[_Stream] = []
        self._deltas = CounterDeltas()

    async def start(self) -> None:
        import docker

        # one pooled connection per stream plus one spare
        self._client = docker.from_env(timeout=30, max_pool_size=len(self._ids) + 1)
        self._streams = [_Stream(self._client, cid) for cid in self._ids]
        for s in self._streams:
            s.start()

    async def sample(self) -> Reading:
        cpu = 0.0
        memory = 0
        read = write = rx = tx = 0
        seen = networked = 0
        per_broker: dict[str, float] = {}
        for s in self._streams:
            frame = s.latest
            if frame is None:
                continue
            seen += 1
            fresh = s.used is not None and frame is not s.used
            value = cpu_percent(frame, s.used if fresh else None)
            s.used = frame
            cpu += value or 0.0
            memory += memory_bytes(frame) or 0
            r, w = block_io(frame)
            read, write = read + r, write + w
            net = network_io(frame)
            if net is not None:
                networked += 1
                rx, tx = rx + net[0], tx + net[1]
            if len(self._streams) > 1:  # each broker's own figures too
                name = str(frame.get("name") or s.container_id[:12]).lstrip("/")
                key = f"broker.{name}"
                per_broker[f"{key}.cpu_percent"] = value if value is not None else math.nan
                per_broker[f"{key}.memory_bytes"] = float(memory_bytes(frame) or 0)
                per_broker[f"{key}.disk_read_bytes"] = self._deltas.delta(f"read-{name}", r)
                per_broker[f"{key}.disk_write_bytes"] = self._deltas.delta(f"write-{name}", w)
                if net is not None:  # none on the host network: the host's interfaces
                    per_broker[f"{key}.net_rx_bytes"] = self._deltas.delta(f"rx-{name}", net[0])
                    per_broker[f"{key}.net_tx_bytes"] = self._deltas.delta(f"tx-{name}", net[1])
        if not seen:
            return Reading()
        reading = Reading(cpu_percent=cpu, memory_bytes=memory,
                          disk_read_bytes=int(self._deltas.delta("read", read)),
                          disk_write_bytes=int(self._deltas.delta("write", write)),
                          broker=per_broker)
        if networked:
            reading.net_rx_bytes = int(self._deltas.delta("rx", rx))
            reading.net_tx_bytes = int(self._deltas.delta("tx", tx))
        return reading

    async def close(self) -> None:
        for s in self._streams:
            s.stop()
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
            self._client = None
