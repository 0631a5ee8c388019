"""A minimal RESP2 client for the Redis hot path: commands are encoded with one bytes join and
replies parsed from a buffer, which costs a fraction of a general-purpose client's per-command
overhead. Used for XADD batches, XREADGROUP + XACK and the telemetry sampled every tick
(loadgen.platforms.redis_telemetry); everything else goes through redis-py.

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
import ssl
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

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
    def feed(self, data: bytes | bytearray | memoryview, /) -> None: ...

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

    def feed(self, data: bytes | bytearray | memoryview, /) -> None:
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


Replies = list[Any]
ReplySink = Callable[["Replies | BaseException"], None]
Answer = asyncio.Future[tuple[Replies, "RespError | None"]]  # pipeline(): replies, a send() error

_READ_BUFFER_BYTES = 256 * 1024


class _ReadBuffer(threading.local):
    """One receive buffer per thread: every connection's bytes are handed to its reply reader
    (which keeps what it needs) as soon as they are read, so connections can share it."""

    def __init__(self) -> None:
        self.view = memoryview(bytearray(_READ_BUFFER_BYTES))


_READ_BUFFER = _ReadBuffer()


class _Pending:
    """Replies owed to one write, in order: `sink` receives them all at once (a future for
    pipeline(), a callback for submit(), None for send())."""

    __slots__ = ("count", "replies", "sink")

    def __init__(self, count: int, sink: Answer | ReplySink | None) -> None:
        self.count = count
        self.replies: Replies = []
        self.sink = sink


class RespConnection(asyncio.BufferedProtocol):
    """One connection; requests are sent and answered in order (pipelined). Several requests
    may be outstanding at once; replies are read straight into a shared buffer and dispatched
    as they complete, without a task or a stream in between.

    Three ways to send already-encoded commands: pipeline() awaits their replies, submit()
    hands them to a callback from the event loop, send() does not wait at all (an error reply
    to it is raised by the next pipeline()). Commands passed to send() are written together
    with the next write, or at the latest one event-loop iteration later."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._parser = make_reader()
        self._feed = self._parser.feed
        self._gets = self._parser.gets
        self._pending: deque[_Pending] = deque()
        self._unsent: list[bytes] = []  # send() payloads waiting for the next write
        self._flush_soon: asyncio.Handle | None = None
        self._send_error: RespError | None = None  # the first error reply to a send() command
        self._closed: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lost: asyncio.Future[None] | None = None

    @classmethod
    async def open(cls, host: str, port: int, timeout_s: float = 5.0,
                   tls: ssl.SSLContext | None = None, auth: Sequence[Arg] = ()) -> RespConnection:
        """Connect (over TLS with a context) and send `auth` (an AUTH command) first; an error
        reply to it is raised as RespError and the connection closed."""
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(
            loop.create_connection(cls, host, port, ssl=tls, server_hostname=host if tls else None),
            timeout_s)
        if auth:
            try:
                await asyncio.wait_for(conn.call(*auth), timeout_s)
            except BaseException:
                await conn.close(timeout_s)
                raise
        return conn

    # ---- protocol callbacks ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without deriving from it
        self._transport = cast(asyncio.Transport, transport)
        self._loop = asyncio.get_running_loop()
        self._lost = self._loop.create_future()

    def get_buffer(self, sizehint: int) -> memoryview:
        return _READ_BUFFER.view

    def buffer_updated(self, nbytes: int) -> None:
        self._feed(_READ_BUFFER.view[:nbytes])
        gets, pending = self._gets, self._pending
        try:
            while pending:
                head = pending[0]
                while len(head.replies) < head.count:
                    reply = gets()
                    if reply is INCOMPLETE:
                        return
                    head.replies.append(reply)
                pending.popleft()
                self._deliver(head)
            reply = gets()
            if isinstance(reply, RespError):
                # an error the server sends as it closes a connection it will not serve, before
                # any request (`ERR max number of clients reached`): the reason, as the error
                # of every request on the connection
                self._fail(reply)
                assert self._transport is not None
                self._transport.close()
            elif reply is not INCOMPLETE:
                raise RespProtocolError("a reply nothing asked for")
        except RespProtocolError as exc:
            self._fail(exc)
            assert self._transport is not None
            self._transport.close()

    def eof_received(self) -> bool:
        self._fail(RespConnectionClosed("the server closed the connection"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(RespConnectionClosed(f"connection lost: {exc}" if exc else
                                        "the server closed the connection"))
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(None)

    # ---- requests -------------------------------------------------------------------------

    def _deliver(self, done: _Pending) -> None:
        sink = done.sink
        if sink is None:
            if self._send_error is None:
                for r in done.replies:
                    if isinstance(r, RespError):
                        self._send_error = r
                        break
        elif isinstance(sink, asyncio.Future):
            # errors of send() commands written before this pipeline are its to raise
            error, self._send_error = self._send_error, None
            if not sink.done():
                sink.set_result((done.replies, error))
        else:
            self._call(sink, done.replies)

    @staticmethod
    def _call(sink: ReplySink, result: Replies | BaseException) -> None:
        try:
            sink(result)
        except Exception as exc:  # a callback's bug must not take the connection down
            asyncio.get_running_loop().call_exception_handler(
                {"message": "exception in a RESP reply callback", "exception": exc})

    def _fail(self, exc: BaseException) -> None:
        if self._closed is None:
            self._closed = exc
        pending, self._pending = self._pending, deque()
        for p in pending:
            if isinstance(p.sink, asyncio.Future):
                if not p.sink.done():
                    p.sink.set_exception(exc)
            elif p.sink is not None:
                self._call(p.sink, exc)

    def _write(self, payload: bytes, pending: _Pending, then: bytes = b"", then_n: int = 0) -> None:
        if self._closed is not None:
            raise self._closed
        assert self._transport is not None
        if self._unsent or then:
            self._unsent.append(payload)
            payload = b"".join(self._unsent)
            self._unsent.clear()
        self._pending.append(pending)
        if then:
            payload += then
            self._pending.append(_Pending(then_n, None))
        if payload:
            self._transport.write(payload)
        elif pending.count == 0 and len(self._pending) == 1:
            self._pending.popleft()
            self._deliver(pending)

    def _flush(self) -> None:
        self._flush_soon = None
        if self._unsent and self._closed is None and self._transport is not None:
            payload = b"".join(self._unsent)
            self._unsent.clear()
            self._transport.write(payload)

    def send(self, payload: bytes, n: int) -> None:
        """Send `n` already-encoded commands without waiting for their replies: the next
        pipeline() raises the first error reply among them."""
        if self._closed is not None:
            raise self._closed
        self._unsent.append(payload)
        self._pending.append(_Pending(n, None))
        if self._flush_soon is None:
            assert self._loop is not None
            self._flush_soon = self._loop.call_soon(self._flush)

    def submit(self, payload: bytes, n: int, done: ReplySink, then: bytes = b"",
               then_n: int = 0) -> None:
        """Send `n` already-encoded commands now; `done` gets their `n` replies (errors as
        RespError) or the exception that lost them, from the event loop, never before submit()
        returns. Raises at once when the connection is closed. `then`, `then_n`: as with
        pipeline()."""
        self._write(payload, _Pending(n, done), then, then_n)

    async def pipeline(self, payload: bytes, n: int, then: bytes = b"", then_n: int = 0) -> list[Any]:
        """Send `n` already-encoded commands and return their `n` replies (errors as RespError).
        `then`: `then_n` commands written right behind them in the same write, answered like
        send()'s (the server may run them only once these are answered, as after a blocking
        read)."""
        assert self._loop is not None
        future: Answer = self._loop.create_future()
        self._write(payload, _Pending(n, future), then, then_n)
        replies, error = await future
        if error is not None:
            raise error
        return replies

    async def call(self, *args: Arg) -> object:
        (reply,) = await self.pipeline(encode(args), 1)
        if isinstance(reply, RespError):
            raise reply
        return reply

    def take_send_error(self) -> RespError | None:
        """The first error reply to a command sent with send() (or as `then`) since the last
        pipeline() or call to this, which a callback given to submit() raises in its stead."""
        error, self._send_error = self._send_error, None
        return error

    @property
    def closed(self) -> bool:
        """The connection is lost or was closed: every request on it fails."""
        return self._closed is not None

    def abort(self) -> None:
        """Close at once: replies still owed are not waited for (their requests fail with
        RespConnectionClosed)."""
        if self._flush_soon is not None:
            self._flush_soon.cancel()
            self._flush_soon = None
        if self._transport is not None:
            self._transport.abort()

    async def close(self, timeout_s: float = 5.0) -> None:
        """Close, once the commands sent with send() have been answered (or `timeout_s`)."""
        if self._pending and self._closed is None:
            with contextlib.suppress(OSError, RespError, TimeoutError):
                await asyncio.wait_for(self.pipeline(b"", 0), timeout_s)
        if self._flush_soon is not None:
            self._flush_soon.cancel()
            self._flush_soon = None
        if self._transport is not None:
            self._transport.close()
        if self._lost is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._lost), timeout_s)
