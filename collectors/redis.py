"""Redis Streams telemetry: consumer-group lag from XINFO GROUPS, entries added and read per
stream (partition) from XINFO STREAM and XINFO GROUPS, byte counters from INFO."""

from __future__ import annotations

import redis.asyncio as aioredis
from redis.client import NEVER_DECODE

from collectors.base import Collector, CounterDeltas, Reading
from loadgen.security import PLAINTEXT, ClientSecurity
from loadgen.tick import LagSnapshot

_LAG_SOURCE = "XINFO GROUPS lag+pending"


class RedisTelemetry(Collector):
    """One connection of its own, so sampling never waits behind producers or consumers."""

    name = "redis"

    def __init__(self, host: str, port: int, streams: list[str], groups: list[str],
                 security: ClientSecurity = PLAINTEXT) -> None:
        self._conn = aioredis.Redis(host=host, port=port, single_connection_client=True,
                                    socket_timeout=2.0, decode_responses=True,
                                    **security.redis_kwargs())
        self._streams = streams
        self._groups = set(groups)
        self._deltas = CounterDeltas()

    async def start(self) -> None:
        await self._counters()
        await self._streams_now()  # the per-partition counters count from here

    async def _counters(self) -> dict[str, float]:
        stats = await self._conn.info("stats")
        memory = await self._conn.info("memory")
        return {
            "net_in_bytes": self._deltas.delta("in", float(stats["total_net_input_bytes"])),
            "net_out_bytes": self._deltas.delta("out", float(stats["total_net_output_bytes"])),
            "commands": self._deltas.delta("cmd", float(stats["total_commands_processed"])),
            "used_memory_bytes": float(memory["used_memory"]),
        }

    async def lag(self) -> LagSnapshot:
        return (await self._streams_now())[0]

    async def _streams_now(self) -> tuple[LagSnapshot, dict[str, float]]:
        """The lag per stream (one stream is one partition) and, from Redis 7 on, the
        per-partition counters: entries added to each stream and entries its groups read
        (`partition.<n>.produced` / `.consumed`, messages in the interval)."""
        pipe = self._conn.pipeline(transaction=False)
        for stream in self._streams:
            pipe.xinfo_groups(stream)
            # undecoded: the reply carries the first and last entries, whose payloads are bytes
            pipe.execute_command("XINFO", "STREAM", stream, **{NEVER_DECODE: True})
        # a stream no XADD has made yet (a produce-only run has no group to create it) answers
        # "no such key": nothing stored, nothing to read
        replies = [None if isinstance(r, Exception) else r
                   for r in await pipe.execute(raise_on_error=False)]
        per_partition: dict[int, int] = {}
        counters: dict[str, float] = {}
        for partition in range(len(self._streams)):
            groups, info = replies[2 * partition] or [], replies[2 * partition + 1]
            total = 0
            read: float | None = 0.0
            if isinstance(info, dict):
                # a group missing from a stream that is there (a server started again without
                # its data): every entry of the stream is unread for that subscription
                found = {g["name"] for g in groups}
                total += int(info.get(b"length") or 0) * sum(g not in found for g in self._groups)
            for g in groups:
                if g["name"] not in self._groups:
                    continue
                # `lag` is None once unread entries were trimmed; pending alone is then a floor
                total += int(g.get("lag") or 0) + int(g["pending"])
                entries_read = g.get("entries-read")
                if entries_read is None and g.get("last-delivered-id") == "0-0":
                    entries_read = 0  # nothing delivered yet (Redis says unknown)
                read = None if entries_read is None or read is None else read + float(entries_read)
            per_partition[partition] = total
            added = info.get(b"entries-added") if isinstance(info, dict) else None
            if added is not None:  # Redis 7 and later
                counters[f"partition.{partition}.produced"] = self._deltas.delta(
                    f"added.{partition}", float(added))
            if read is not None and groups:
                counters[f"partition.{partition}.consumed"] = self._deltas.delta(
                    f"read.{partition}", read)
        return LagSnapshot(sum(per_partition.values()), per_partition, _LAG_SOURCE), counters

    async def sample(self) -> Reading:
        with self._deltas.staged():  # a failed request fails the sample and keeps no reading
            broker = await self._counters()
            lag, per_partition = await self._streams_now()
        return Reading(
            lag=lag,
            broker={**broker, **per_partition},
            net_rx_bytes=int(broker["net_in_bytes"]),
            net_tx_bytes=int(broker["net_out_bytes"]),
        )

    async def close(self) -> None:
        await self._conn.aclose()
