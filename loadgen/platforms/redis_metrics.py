"""Redis's broker metrics: what the server's INFO says about how it copes with the load (its own
command rate, memory, blocked readers, append-only-file rewrites and fsync delays, its own time
per XADD), read once per tick on a connection of their own: one pipelined write of five INFO
sections, well under a millisecond of the server's time (tests/bench/broker_metrics_cost.py)."""

from __future__ import annotations

import math
from typing import Any

from compose.redis import parse_address
from loadgen.core.brokermetrics import BrokerMetric, BrokerMetrics
from loadgen.core.collector import Collector, CounterDeltas, Reading
from loadgen.core.security import PLAINTEXT, ClientSecurity
from loadgen.core.stackinfo import StackDescription
from loadgen.core.target import Target
from loadgen.platforms.redis_resp import RespError, encode
from loadgen.platforms.redis_telemetry import SampleLink

BROKER = "redis"  # the one server's name, as its faults name it
SECTIONS = ("stats", "memory", "clients", "persistence", "commandstats")
# streambench's name -> the INFO field read as it is
_FIELDS = {
    "ops_per_second": "instantaneous_ops_per_sec",
    "used_memory_bytes": "used_memory",
    "mem_fragmentation_ratio": "mem_fragmentation_ratio",
    "connected_clients": "connected_clients",
    "blocked_clients": "blocked_clients",
    "aof_rewrite_in_progress": "aof_rewrite_in_progress",
    "aof_delayed_fsync_total": "aof_delayed_fsync",
}
_XADD = "cmdstat_xadd"

METRICS = BrokerMetrics(
    source="INFO",
    metrics=(
        BrokerMetric("ops_per_second", "instantaneous_ops_per_sec", "per_second",
                     "the commands the server executes per second (its own sample of the last "
                     "1.6 s): every XADD, the MULTI and EXEC around a batch of them, every "
                     "XREADGROUP and XACK, so it shows how many commands each message costs"),
        BrokerMetric("xadd_time_seconds", "cmdstat_xadd usec / calls", "seconds",
                     "the server's own time per XADD over the tick, without network or "
                     "queueing: when end-to-end latency rises and this does not, the time is "
                     "spent waiting, not appending"),
        BrokerMetric("used_memory_bytes", "used_memory", "bytes",
                     "a stream keeps every entry in memory until trimmed: its growth is the "
                     "backlog, and at maxmemory writes fail or keys are evicted"),
        BrokerMetric("mem_fragmentation_ratio", "mem_fragmentation_ratio", "ratio",
                     "the process's resident memory over the memory it uses: well above 1 the "
                     "machine holds more than the data"),
        BrokerMetric("connected_clients", "connected_clients", "count",
                     "the connections open: every producer, consumer and collector holds one"),
        BrokerMetric("blocked_clients", "blocked_clients", "count",
                     "consumers waiting in a blocking XREADGROUP: all of them while the "
                     "consumers keep up, none while a backlog is being read"),
        BrokerMetric("aof_rewrite_in_progress", "aof_rewrite_in_progress", "count",
                     "1 while the append-only file is rewritten: a fork competing for memory, "
                     "CPU and disk, a usual cause of latency spikes with aof"),
        BrokerMetric("aof_delayed_fsync_total", "aof_delayed_fsync", "count",
                     "fsyncs of the append-only file the server had to wait for (the disk "
                     "too slow for appendfsync everysec): each one stalls writes; aof only"),
    ),
    make_collector=lambda target, desc, _topics: RedisMetrics.of(target, desc),
)


def info_fields(text: Any) -> dict[str, str]:
    """`name:value` lines of INFO replies as a dict (section headers and blanks left out)."""
    if isinstance(text, RespError):
        raise text
    found = {}
    for line in bytes(text).decode("ascii", "replace").split("\r\n"):
        name, sep, value = line.partition(":")
        if sep and not name.startswith("#"):
            found[name] = value
    return found


def command_stat(value: str) -> tuple[float, float]:
    """(calls, usec) of a `cmdstat_<command>` value (`calls=N,usec=N,usec_per_call=…`)."""
    parts = dict(p.partition("=")[::2] for p in value.split(","))
    return float(parts["calls"]), float(parts["usec"])


class RedisMetrics(Collector):
    name = "redis metrics"

    def __init__(self, host: str, port: int, security: ClientSecurity = PLAINTEXT) -> None:
        self._link = SampleLink(host, port, security)
        self._request = b"".join(encode(["INFO", s]) for s in SECTIONS)
        self._deltas = CounterDeltas()

    @classmethod
    def of(cls, target: Target, desc: StackDescription) -> RedisMetrics:
        host, port = parse_address(desc.endpoints["redis"])
        return cls(host, port, ClientSecurity.of(target))

    async def start(self) -> None:
        """Nothing to read before the first tick: the first sample's per-XADD time is unknown
        (it needs two readings) and the others are read as they are."""

    async def read(self) -> dict[str, float]:
        replies = await self._link.pipeline(self._request, len(SECTIONS))
        fields: dict[str, str] = {}
        for reply in replies:
            fields.update(info_fields(reply))
        values = {name: float(fields[native]) for name, native in _FIELDS.items()
                  if native in fields}
        calls, usec = command_stat(fields[_XADD]) if _XADD in fields else (0.0, 0.0)
        with self._deltas.staged():
            calls, usec = self._deltas.delta("calls", calls), self._deltas.delta("usec", usec)
        if calls > 0:
            values["xadd_time_seconds"] = usec / calls / 1e6
        return {k: v for k, v in values.items() if math.isfinite(v)}

    async def sample(self) -> Reading:
        return Reading(metrics={BROKER: await self.read()})

    async def close(self) -> None:
        await self._link.close()
