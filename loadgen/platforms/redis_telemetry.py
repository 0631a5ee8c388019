"""Redis Streams telemetry: consumer-group lag from XINFO GROUPS, entries added and read per
stream (partition) from XINFO STREAM and XINFO GROUPS, byte counters from INFO.

Sampled every tick in the load process, beside the load: on the Redis platform's own RESP
client (loadgen.platforms.redis_resp, replies parsed by hiredis; which is why this collector
lives with the platform rather than in collectors/), one pipelined write for INFO and one for
every stream's XINFO: a third to a half of the CPU redis-py's general client took (a sample of one
stream 1.4-1.8 -> 0.5-0.9 ms, of 100 streams 6.1-7.3 -> 1.5-2.8 ms), and less memory to reach
again every second."""

from __future__ import annotations

import time
from typing import Any

from loadgen.core.acklog import stream_position
from loadgen.core.collector import Collector, CounterDeltas, Reading
from loadgen.core.security import PLAINTEXT, ClientSecurity
from loadgen.core.ticks import LagSnapshot
from loadgen.platforms.redis_resp import RespConnection, RespError, encode

_LAG_SOURCE = "XINFO GROUPS lag+pending"
_CONNECT_TIMEOUT_S = 2.0
# INFO fields read, and the counter each one is kept as
_INFO_FIELDS = {b"total_net_input_bytes": "in", b"total_net_output_bytes": "out",
                b"total_commands_processed": "cmd", b"used_memory": "mem"}


def _pairs(reply: Any) -> dict[bytes, Any]:
    """A RESP2 reply of alternating field names and values as a dict (empty when it is not an
    array: an error reply, nil)."""
    if not isinstance(reply, list):
        return {}
    return dict(zip(reply[::2], reply[1::2], strict=True))


def _entry_id(value: Any) -> tuple[int, int] | None:
    """A stream entry id (`<ms>-<seq>`) as a pair that sorts as the ids do; None for nil or
    anything else."""
    if not isinstance(value, bytes):
        return None
    ms, _, seq = value.partition(b"-")
    try:
        return int(ms), int(seq or 0)
    except ValueError:
        return None


def _unread(group: dict[bytes, Any], stream: dict[bytes, Any] | None) -> int:
    """Entries the group has still to be delivered. Redis counts its `lag` as entries added
    minus entries read, which trimming (MAXLEN) leaves too high: entries trimmed before the
    group read them stay in it, although no read can return them (and a read past a trimmed
    gap counts them as read only in part). So the count is bounded by what the stream holds
    after the group's last delivered entry: nothing once that is the last entry added, every
    entry while it is older than the first one left. In between, only the stream's length
    bounds it (counting the entries after an id would mean reading them): after a trimmed gap
    the figure stays that much too high until the group catches up. `lag` is nil once Redis
    cannot count it; that is then all the stream holds when the group is behind its first
    entry, else 0 (a floor)."""
    lag = group.get(b"lag")
    count = int(lag) if lag is not None else None
    if stream is None:
        return count or 0
    delivered = _entry_id(group.get(b"last-delivered-id"))
    last = _entry_id(stream.get(b"last-generated-id"))
    first = _entry_id(stream.get(b"recorded-first-entry-id")) or _entry_id(
        (stream.get(b"first-entry") or [None])[0])
    length = int(stream.get(b"length") or 0)
    if delivered is None or last is None:
        return count or 0
    if delivered >= last:
        return 0  # delivered up to the last entry added: nothing left to read
    if first is not None and delivered < first:
        return length if count is None else min(count, length)
    return 0 if count is None else min(count, length)


def _info_fields(text: Any) -> dict[str, float]:
    """The INFO fields this collector keeps, from an INFO reply's `name:value` lines."""
    if isinstance(text, RespError):
        raise text
    found = {}
    for line in bytes(text).split(b"\r\n"):
        name, _, value = line.partition(b":")
        key = _INFO_FIELDS.get(name)
        if key is not None:
            found[key] = float(value)
    return found


class SampleLink:
    """A collector's own connection, so sampling never waits behind producers or consumers. It
    is opened when first needed and again after a failed or unanswered sample (the server
    stopped, paused or restarted): replies never go to the wrong request."""

    def __init__(self, host: str, port: int, security: ClientSecurity = PLAINTEXT) -> None:
        self._host, self._port = host, port
        self._security = security
        self._conn: RespConnection | None = None

    async def pipeline(self, payload: bytes, n: int) -> list[Any]:
        conn = self._conn
        try:
            if conn is None or conn.closed:  # never opened, or lost since the last sample
                conn = self._conn = await RespConnection.open(
                    self._host, self._port, _CONNECT_TIMEOUT_S, tls=self._security.ssl_context(),
                    auth=self._security.redis_auth())
            return await conn.pipeline(payload, n)
        except BaseException:
            # a sample cut short (an error, a time-out): the replies still owed would answer
            # the next request; that connection is dropped, the next sample opens another
            self._conn = None
            if conn is not None:
                conn.abort()
            raise

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close(1.0)


class RedisTelemetry(Collector):
    """Lag and counters, on a SampleLink of its own."""

    name = "redis"

    def __init__(self, host: str, port: int, streams: list[str], groups: list[str],
                 security: ClientSecurity = PLAINTEXT, topic: str = "") -> None:
        self._topic = topic
        self._link = SampleLink(host, port, security)
        self._streams = streams
        self._groups = {g.encode() for g in groups}
        self._deltas = CounterDeltas()
        self._info = encode(["INFO", "stats"]) + encode(["INFO", "memory"])
        self._xinfo = b"".join(encode(["XINFO", "GROUPS", s]) + encode(["XINFO", "STREAM", s])
                               for s in streams)

    async def _pipeline(self, payload: bytes, n: int) -> list[Any]:
        return await self._link.pipeline(payload, n)

    async def start(self) -> None:
        await self._counters()
        await self._streams_now()  # the per-partition counters count from here

    async def _counters(self) -> dict[str, float]:
        stats, memory = await self._pipeline(self._info, 2)
        fields = {**_info_fields(stats), **_info_fields(memory)}
        return {
            "net_in_bytes": self._deltas.delta("in", fields["in"]),
            "net_out_bytes": self._deltas.delta("out", fields["out"]),
            "commands": self._deltas.delta("cmd", fields["cmd"]),
            "used_memory_bytes": fields["mem"],
        }

    async def lag(self) -> LagSnapshot:
        return (await self._streams_now())[0]

    async def _streams_now(self) -> tuple[LagSnapshot, dict[str, float]]:
        """The lag per stream (one stream is one partition) and, from Redis 7 on, the
        per-partition counters: entries added to each stream and entries its groups read
        (`partition.<n>.produced` / `.consumed`, messages in the interval)."""
        # a stream no XADD has made yet (a produce-only run has no group to create it) answers
        # "no such key" (an error reply): nothing stored, nothing to read
        asked = time.time_ns()
        replies = await self._pipeline(self._xinfo, 2 * len(self._streams))
        read_ns = (asked + time.time_ns()) // 2
        per_partition: dict[int, int] = {}
        counters: dict[str, float] = {}
        positions: dict[str, dict[int, int]] = {}
        unread: dict[str, dict[int, int]] = {}
        for partition in range(len(self._streams)):
            listed, reply = replies[2 * partition], replies[2 * partition + 1]
            groups = [_pairs(g) for g in listed] if isinstance(listed, list) else []
            info = _pairs(reply) if isinstance(reply, list) else None
            total = 0
            read: float | None = 0.0
            if info is not None:
                # a group missing from a stream that is there (a server started again without
                # its data): every entry of the stream is unread for that subscription
                found = {g.get(b"name") for g in groups}
                total += int(info.get(b"length") or 0) * sum(g not in found for g in self._groups)
            for g in groups:
                if g.get(b"name") not in self._groups:
                    continue
                not_delivered = _unread(g, info)
                total += not_delivered + int(g[b"pending"])
                delivered = g.get(b"last-delivered-id")
                if isinstance(delivered, bytes):
                    name = bytes(g[b"name"]).decode()
                    positions.setdefault(name, {})[partition] = stream_position(delivered)
                    unread.setdefault(name, {})[partition] = not_delivered
                entries_read = g.get(b"entries-read")
                if entries_read is None and g.get(b"last-delivered-id") == b"0-0":
                    entries_read = 0  # nothing delivered yet (Redis says unknown)
                read = None if entries_read is None or read is None else read + float(entries_read)
            per_partition[partition] = total
            added = info.get(b"entries-added") if info is not None else None
            if added is not None:  # Redis 7 and later
                counters[f"partition.{partition}.produced"] = self._deltas.delta(
                    f"added.{partition}", float(added))
            if read is not None and groups:
                counters[f"partition.{partition}.consumed"] = self._deltas.delta(
                    f"read.{partition}", read)
        lag = LagSnapshot(sum(per_partition.values()), per_partition, _LAG_SOURCE, topic=self._topic,
                          positions=positions, unread=unread, positions_after=True,
                          read_ns=read_ns)
        return lag, counters

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
        await self._link.close()
