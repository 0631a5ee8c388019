"""The least CPU a CPython asyncio process spends on paced Redis Streams traffic: the reference
the paced-cost bench sets streambench's worker against.

One producer connection sends one XADD per slot (1 KiB payload, the intended time as a field)
from a timer on the same precise event loop streambench uses; one consumer connection blocks
in XREADGROUP and sends each delivery's XACK together with its next read. Replies are parsed
by hiredis; nothing is recorded (no histograms, no ticks, no counters beyond one). What is
left is the floor of the design: the wake-ups, system calls and event-loop work of one
message's round trips.

Usage: asyncio_floor.py PORT RATE SECONDS → prints one JSON line: rate, consumed, user and
system CPU-seconds of this process while the load ran."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import sys
import time
from typing import cast

import hiredis

from loadgen.pacing import precise_call_at, run_precise

STREAM, GROUP = b"asyncio-floor", b"floor"


def command(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


class Replies(asyncio.Protocol):
    def __init__(self, on_reply: object) -> None:
        self.reader = hiredis.Reader()
        self.on_reply = on_reply
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's do not derive from it

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while (reply := self.reader.gets()) is not False:
            self.on_reply(reply)  # type: ignore[operator]


async def load(port: int, rate: float, seconds: float) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    payload = os.urandom(1024)
    read = command(b"XREADGROUP", b"GROUP", GROUP, b"c", b"COUNT", b"1000", b"BLOCK", b"0",
                   b"STREAMS", STREAM, b">")
    consumed = 0
    total = int(rate * seconds)
    all_in = loop.create_future()

    def delivered(reply: object) -> None:
        nonlocal consumed
        if not (isinstance(reply, list) and reply):
            return
        ids = [entry[0] for entry in reply[0][1]]
        consumed += len(ids)
        consumer.write(command(b"XACK", STREAM, GROUP, *ids) + read)
        if consumed >= total and not all_in.done():
            all_in.set_result(None)

    producer, _ = await loop.create_connection(lambda: Replies(lambda r: None), "127.0.0.1", port)
    consumer, _ = await loop.create_connection(lambda: Replies(delivered), "127.0.0.1", port)
    producer.write(command(b"DEL", STREAM) + command(b"XGROUP", b"CREATE", STREAM, GROUP, b"$",
                                                     b"MKSTREAM"))
    await asyncio.sleep(0.2)
    consumer.write(read)
    await asyncio.sleep(0.1)
    step, sent = 1e9 / rate, 0
    t0 = time.monotonic_ns() + 10_000_000
    before = resource.getrusage(resource.RUSAGE_SELF)

    def slot() -> None:
        nonlocal sent
        producer.write(command(b"XADD", STREAM, b"*", b"t", b"%d" % time.time_ns(), b"p",
                               payload))
        sent += 1
        if sent < total:
            precise_call_at(loop, t0 + round(sent * step), slot)

    precise_call_at(loop, t0, slot)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(all_in, seconds + 10)
    after = resource.getrusage(resource.RUSAGE_SELF)
    producer.write(command(b"DEL", STREAM))
    await asyncio.sleep(0.05)
    producer.close()
    consumer.close()
    return {"rate": rate, "seconds": seconds, "consumed": consumed,
            "user_s": after.ru_utime - before.ru_utime,
            "system_s": after.ru_stime - before.ru_stime}


def main() -> int:
    port, rate, seconds = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
    print(json.dumps(run_precise(load(port, rate, seconds))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
