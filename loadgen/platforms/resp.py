"""A minimal RESP2 client for the Redis hot path: commands are encoded with one bytes join and
replies parsed from a buffer, which costs a fraction of a general-purpose client's per-command
overhead. Used for XADD batches and XREADGROUP + XACK; everything else goes through redis-py.

Replies are parsed by hiredis's C reader when the `hiredis` package is importable, else by
`PythonReader`, a resumable pure-Python reader. Both give the same values: bytes for bulk and
simple strings, int for integers, list for arrays, None for a nil bulk string or nil array, and
a `RespError` instance (returned, not raised) for an error reply, also inside arrays. A reply
the protocol does not allow raises `RespProtocolError`, and the reader keeps raising it (the
connection is unusable after that). RESP2 only: the connection never switches to RESP3 (whose
reply types hiredis would parse and `PythonReader` refuses as a protocol error).

`STREAMBENCH_RESP_READER` picks the reader when a connection opens: `hiredis`, `python`, or
`auto` (the default: hiredis when importable)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol

Arg = bytes | str | int

READER_ENV = "STREAMBENCH_RESP_READER"


class RespError(Exception):
    """An error reply (`-ERR …`) from the server."""


class RespConnectionClosed(ConnectionError):
    pass


class RespProtocolError(RespConnectionClosed):
    """The server sent something that is not a RESP2 reply."""


def encode(args: Sequence[Arg]) -> bytes:
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(parts)


class _Incomplete:
    """What a reader's gets() returns while no whole reply is buffered."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "INCOMPLETE"


INCOMPLETE: Any = _Incomplete()


class Reader(Protocol):
    def feed(self, data: bytes, /) -> None: ...

    def gets(self) -> Any:
        """The next whole reply, or INCOMPLETE."""


class PythonReader:
    """An iterative RESP2 reader that resumes where it stopped.

    Bytes are consumed once: a finished element is taken out of the buffer and kept in the
    array it belongs to (a stack of open arrays), so a reply that arrives over many reads is
    never re-parsed from its start. What stays buffered is at most the one element that is not
    complete yet; bytes fed while that element still lacks data are only collected, and joined
    once it can be completed (`_need`), so a large bulk string arriving in small reads is copied
    a bounded number of times."""

    __slots__ = ("_avail", "_buf", "_chunks", "_cur", "_error", "_need", "_pos", "_stack", "_want")

    def __init__(self) -> None:
        self._buf = b""
        self._pos = 0
        self._chunks: list[bytes] = []
        self._avail = 0  # bytes not consumed yet: in _buf after _pos, and in _chunks
        self._need = 1  # bytes after _pos without which no progress is possible
        self._cur: list[Any] | None = None  # the innermost open array
        self._want = 0  # its length
        self._stack: list[tuple[list[Any] | None, int]] = []  # the arrays around it
        self._error: str | None = None

    @property
    def buffered(self) -> int:
        """Bytes fed and not consumed yet (elements of a partial reply are consumed)."""
        return self._avail

    def feed(self, data: bytes, /) -> None:
        if data:
            self._chunks.append(bytes(data))
            self._avail += len(data)

    def _take(self) -> None:
        """Move the collected chunks behind the unconsumed rest of the buffer."""
        chunks = self._chunks
        if self._pos < len(self._buf):
            chunks.insert(0, self._buf[self._pos:])
        self._buf = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._pos = 0
        self._chunks = []

    def gets(self) -> Any:
        if self._error is not None:
            raise RespProtocolError(self._error)
        if self._avail < self._need:
            return INCOMPLETE
        if self._chunks:
            self._take()
        buf = self._buf
        size = len(buf)
        pos = self._pos
        find = buf.find
        cur, want, stack = self._cur, self._want, self._stack
        while True:
            if pos >= size:
                need = 1
                break
            end = find(b"\r\n", pos)
            if end < 0:
                need = size - pos + 1
                break
            kind = buf[pos]
            if kind == 36:  # $ bulk string
                n = int(digits) if ((digits := buf[pos + 1:end]).isdigit() and digits[0] != 48
                                    and end - pos < 20) else self._length(kind, digits)
                if n >= 0:
                    stop = end + 2 + n
                    if stop + 2 > size:
                        need = stop + 2 - pos
                        break
                    value: Any = buf[end + 2:stop]
                    pos = stop + 2
                else:
                    value = None
                    pos = end + 2
            elif kind == 42:  # * array
                n = int(digits) if ((digits := buf[pos + 1:end]).isdigit() and digits[0] != 48
                                    and end - pos < 20) else self._length(kind, digits)
                pos = end + 2
                if n > 0:
                    stack.append((cur, want))
                    cur, want = [], n
                    continue
                value = [] if n == 0 else None
            elif kind == 58:  # : integer
                value = _canonical_int(buf[pos + 1:end])
                if value is None:
                    raise self._fail("Bad integer value")
                pos = end + 2
            elif kind == 43:  # + simple string
                value = buf[pos + 1:end]
                pos = end + 2
            elif kind == 45:  # - error
                value = RespError(buf[pos + 1:end].decode(errors="replace"))
                pos = end + 2
            else:
                raise self._fail(f'Protocol error, got "{_show_byte(kind)}" as reply type byte')
            # the element is complete: it finishes its array, perhaps arrays around it too
            while cur is not None:
                cur.append(value)
                if len(cur) < want:
                    break
                value = cur
                cur, want = stack.pop()
            else:
                self._pos, self._cur, self._want = pos, None, 0
                self._avail = size - pos
                self._need = 1
                return value
        self._pos, self._cur, self._want = pos, cur, want
        self._avail = size - pos
        self._need = need
        return INCOMPLETE

    def _length(self, kind: int, digits: bytes) -> int:
        """A bulk string or array length off the fast path: 0, -1 (nil) or an error."""
        n = _canonical_int(digits)
        what = "bulk string" if kind == 36 else "multi-bulk"
        if n is None:
            raise self._fail(f"Bad {what} length")
        if n < -1:
            raise self._fail(f"{what.capitalize()} length out of range")
        return n

    def _fail(self, message: str) -> RespProtocolError:
        self._error = message
        return RespProtocolError(message)


_INT64 = 1 << 63


def _canonical_int(digits: bytes) -> int | None:
    """The value of a RESP integer (`-?(0|[1-9][0-9]*)`, 64-bit), None when it is not one."""
    neg = digits[:1] == b"-"
    body = digits[1:] if neg else digits
    if not body.isdigit() or (body[0] == 48 and (neg or len(body) > 1)):
        return None
    n = int(body)
    if neg:
        return -n if n <= _INT64 else None
    return n if n < _INT64 else None


_ESCAPES = {ord("\\"): "\\\\", ord('"'): '\\"', ord("\n"): "\\n", ord("\r"): "\\r",
            ord("\t"): "\\t", ord("\a"): "\\a", ord("\b"): "\\b"}


def _show_byte(b: int) -> str:
    """A byte as hiredis shows it in a protocol error."""
    if b in _ESCAPES:
        return _ESCAPES[b]
    return chr(b) if 32 <= b < 127 else f"\\x{b:02x}"


def _hiredis_reader() -> Callable[..., Any] | None:
    try:
        from hiredis import Reader as HiredisReader
    except ImportError:
        return None
    return HiredisReader


_HIREDIS = _hiredis_reader()


def reader_kind() -> str:
    """The reader a connection opened now would use: "hiredis" or "python"."""
    choice = os.environ.get(READER_ENV, "auto").strip().lower() or "auto"
    if choice == "python":
        return "python"
    if choice == "hiredis":
        if _HIREDIS is None:
            raise RuntimeError(f"{READER_ENV}=hiredis, but the hiredis package is not installed")
        return "hiredis"
    if choice == "auto":
        return "python" if _HIREDIS is None else "hiredis"
    raise RuntimeError(f"{READER_ENV}={choice!r}: expected hiredis, python or auto")


def make_reader(kind: str | None = None) -> Reader:
    """A reply reader of the given kind ("hiredis" or "python"), by default `reader_kind()`."""
    kind = kind or reader_kind()
    if kind == "python":
        return PythonReader()
    if _HIREDIS is None:
        raise RuntimeError("the hiredis package is not installed")
    reader: Reader = _HIREDIS(protocolError=RespProtocolError, replyError=RespError,
                              notEnoughData=INCOMPLETE)
    return reader


class RespConnection:
    """One connection; requests are sent and answered in order (pipelined). Several pipelines
    may be outstanding at once."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._parser = make_reader()
        # replies come back in request order: whoever wrote first reads first (Lock is FIFO)
        self._read_lock = asyncio.Lock()
        self._owed = 0  # replies to send() commands, read by the next pipeline()

    @classmethod
    async def open(cls, host: str, port: int, timeout_s: float = 5.0) -> RespConnection:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, limit=1 << 20), timeout_s)
        return cls(reader, writer)

    async def _read_replies(self, n: int) -> list[Any]:
        out: list[Any] = []
        gets = self._parser.gets
        while len(out) < n:
            reply = gets()
            if reply is INCOMPLETE:
                data = await self._reader.read(1 << 20)
                if not data:
                    raise RespConnectionClosed("the server closed the connection")
                self._parser.feed(data)
                continue
            out.append(reply)
        return out

    def send(self, payload: bytes, n: int) -> None:
        """Send `n` already-encoded commands without waiting for their replies: the next
        pipeline() reads them ahead of its own and raises the first error reply among them."""
        self._writer.write(payload)
        self._owed += n

    async def pipeline(self, payload: bytes, n: int) -> list[Any]:
        """Send `n` already-encoded commands and return their `n` replies (errors as RespError)."""
        owed, self._owed = self._owed, 0
        self._writer.write(payload)
        async with self._read_lock:
            replies = await self._read_replies(owed + n)
        if owed:
            for r in replies[:owed]:
                if isinstance(r, RespError):
                    raise r
            del replies[:owed]
        return replies

    async def call(self, *args: Arg) -> object:
        (reply,) = await self.pipeline(encode(args), 1)
        if isinstance(reply, RespError):
            raise reply
        return reply

    async def close(self, timeout_s: float = 5.0) -> None:
        """Close, once the commands sent with send() have been answered (or `timeout_s`)."""
        if self._owed:
            with contextlib.suppress(OSError, RespError, TimeoutError):
                await asyncio.wait_for(self.pipeline(b"", 0), timeout_s)
        self._writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self._writer.wait_closed()
