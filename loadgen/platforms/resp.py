"""A minimal RESP2 client for the Redis hot path: commands are encoded with one bytes join and
replies parsed from a buffer, which costs a fraction of a general-purpose client's per-command
overhead. Used for XADD batches and XREADGROUP + XACK; everything else goes through redis-py."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

Arg = bytes | str | int


class RespError(Exception):
    """An error reply (`-ERR …`) from the server."""


class RespConnectionClosed(ConnectionError):
    pass


def encode(args: Sequence[Arg]) -> bytes:
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(parts)


class _Parser:
    """Parses replies from a growing buffer; `parse()` returns None until a whole reply is in."""

    __slots__ = ("buf", "pos")

    def __init__(self) -> None:
        self.buf = bytearray()
        self.pos = 0

    def feed(self, data: bytes) -> None:
        if self.pos > 65536 and self.pos * 2 > len(self.buf):
            del self.buf[: self.pos]
            self.pos = 0
        self.buf += data

    def parse(self) -> object | None:
        start = self.pos
        try:
            return self._one()
        except IndexError:
            self.pos = start
            return _INCOMPLETE

    def _line(self) -> bytes:
        end = self.buf.find(b"\r\n", self.pos)
        if end < 0:
            raise IndexError
        line = bytes(self.buf[self.pos : end])
        self.pos = end + 2
        return line

    def _one(self) -> object:
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            end = self.pos + n
            if end + 2 > len(self.buf):
                raise IndexError
            value = bytes(self.buf[self.pos : end])
            self.pos = end + 2
            return value
        if kind == b"*":
            n = int(rest)
            if n < 0:
                return None
            return [self._one() for _ in range(n)]
        if kind == b":":
            return int(rest)
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RespError(rest.decode(errors="replace"))
        raise RespConnectionClosed(f"unexpected reply from server: {line[:40]!r}")


_INCOMPLETE = object()


class RespConnection:
    """One connection; requests are sent and answered in order (pipelined). Several pipelines
    may be outstanding at once."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._parser = _Parser()
        # replies come back in request order: whoever wrote first reads first (Lock is FIFO)
        self._read_lock = asyncio.Lock()

    @classmethod
    async def open(cls, host: str, port: int, timeout_s: float = 5.0) -> RespConnection:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
        return cls(reader, writer)

    async def _read_replies(self, n: int) -> list[object]:
        out: list[object] = []
        parser = self._parser
        while len(out) < n:
            reply = parser.parse()
            if reply is _INCOMPLETE:
                data = await self._reader.read(1 << 20)
                if not data:
                    raise RespConnectionClosed("the server closed the connection")
                parser.feed(data)
                continue
            out.append(reply)
        return out

    async def pipeline(self, payload: bytes, n: int) -> list[object]:
        """Send `n` already-encoded commands and return their `n` replies (errors as RespError)."""
        self._writer.write(payload)
        async with self._read_lock:
            return await self._read_replies(n)

    async def call(self, *args: Arg) -> object:
        (reply,) = await self.pipeline(encode(args), 1)
        if isinstance(reply, RespError):
            raise reply
        return reply

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self._writer.wait_closed()
