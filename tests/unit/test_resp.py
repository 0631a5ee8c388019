"""The RESP2 reply readers (hiredis and the pure-Python fallback), the connection's pipelining,
and the Redis consumer's decoding of XREADGROUP replies.

Every reader test runs with both readers; the hiredis runs are skipped where hiredis is not
installed."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import pytest

from loadgen.core.driver import OutMessage, ReceivedBatch
from loadgen.platforms import redis_resp as resp
from loadgen.platforms.redis_resp import (
    INCOMPLETE,
    PythonReader,
    RespConnection,
    RespError,
    RespProtocolError,
    encode,
    make_reader,
)
from loadgen.platforms.redis_streams import ATOMIC_BATCH, RedisConsumer, RedisProducer

HAVE_HIREDIS = resp._HIREDIS is not None
KINDS = [pytest.param("hiredis", marks=pytest.mark.skipif(not HAVE_HIREDIS,
                                                          reason="hiredis not installed")),
         "python"]
both = pytest.mark.skipif(not HAVE_HIREDIS, reason="hiredis not installed")


# ---- building replies -------------------------------------------------------------------------

def wire(value: Any) -> bytes:
    """The RESP2 encoding of a reply value (RespError for an error reply, str for a simple
    string, None for a nil bulk string)."""
    if value is None:
        return b"$-1\r\n"
    if isinstance(value, RespError):
        return b"-%s\r\n" % str(value).encode()
    if isinstance(value, str):
        return b"+%s\r\n" % value.encode()
    if isinstance(value, bool):
        raise TypeError(value)
    if isinstance(value, int):
        return b":%d\r\n" % value
    if isinstance(value, bytes):
        return b"$%d\r\n%s\r\n" % (len(value), value)
    return b"*%d\r\n" % len(value) + b"".join(wire(v) for v in value)


def plain(value: Any) -> Any:
    """A reply as comparable data: error replies become ("error", type, args); a simple string
    written as str is read as bytes."""
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, RespError):
        return ("error", type(value).__name__, value.args)
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def entry(i: int, size: int = 16) -> list[Any]:
    return [b"1700000000000-%d" % i, [b"t", b"%d" % (1_700_000_000_000_000_000 + i), b"p",
                                      bytes([65 + i % 26]) * size]]


def xreadgroup(streams: dict[str, int], size: int = 16) -> list[Any]:
    """An XREADGROUP reply: [[stream, [[id, [t, ns, p, payload]], ...]], ...]."""
    return [[s.encode(), [entry(i, size) for i in range(n)]] for s, n in streams.items()]


MIXED = [
    "OK",
    RespError("ERR unknown command 'FOO'"),
    0, 42, -7, 9_223_372_036_854_775_807, -9_223_372_036_854_775_808,
    None,
    b"",
    b"with\r\ninside",
    [],
    [None, b"a", 1, RespError("WRONGTYPE Operation against a key"), [], [[b"deep", [b"er"]]]],
    xreadgroup({"topic-0": 3, "topic-1": 2}),
    b"x" * 5000,
]
MIXED_WIRE = b"".join(wire(v) for v in MIXED) + b"*-1\r\n"
MIXED_EXPECTED = [plain(v) for v in MIXED] + [None]


def drain(reader: Any) -> list[Any]:
    out = []
    while (reply := reader.gets()) is not INCOMPLETE:
        out.append(plain(reply))
    return out


def read_in_chunks(kind: str, data: bytes, cuts: list[int]) -> list[Any]:
    reader = make_reader(kind)
    out = []
    last = 0
    for cut in [*cuts, len(data)]:
        reader.feed(data[last:cut])
        last = cut
        out += drain(reader)
    return out


def random_cuts(rng: random.Random, length: int, max_chunk: int) -> list[int]:
    cuts, at = [], 0
    while True:
        at += rng.randint(1, max_chunk)
        if at >= length:
            return cuts
        cuts.append(at)


# ---- values -----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_values_of_every_reply_type(kind: str) -> None:
    reader = make_reader(kind)
    assert reader.gets() is INCOMPLETE
    reader.feed(MIXED_WIRE)
    assert drain(reader) == MIXED_EXPECTED
    assert reader.gets() is INCOMPLETE


@pytest.mark.parametrize("kind", KINDS)
def test_types(kind: str) -> None:
    reader = make_reader(kind)
    reader.feed(b"+PONG\r\n:5\r\n$3\r\nabc\r\n$-1\r\n*-1\r\n*0\r\n-ERR boom \xff\r\n*1\r\n-ERR in\r\n")
    pong, five, abc, nil_bulk, nil_array, empty, err, nested = (reader.gets() for _ in range(8))
    assert pong == b"PONG" and type(pong) is bytes
    assert five == 5 and type(five) is int
    assert abc == b"abc" and type(abc) is bytes
    assert nil_bulk is None and nil_array is None
    assert empty == []
    # error replies are returned, not raised, at the top and inside arrays
    assert type(err) is RespError and err.args == ("ERR boom \ufffd",)
    assert type(nested[0]) is RespError and nested[0].args == ("ERR in",)


@pytest.mark.parametrize("kind", KINDS)
def test_xreadgroup_shaped_reply(kind: str) -> None:
    value = xreadgroup({"t-0": 4, "t-1": 0, "t-2": 1}, size=100)
    reader = make_reader(kind)
    reader.feed(wire(value))
    reply = reader.gets()
    assert reply == value
    (s0, entries), _, _ = reply
    assert s0 == b"t-0"
    assert [int(f[1]) for _, f in entries] == [1_700_000_000_000_000_000 + i for i in range(4)]
    assert reader.gets() is INCOMPLETE


# ---- partial reads ----------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_every_split_point(kind: str) -> None:
    for cut in range(len(MIXED_WIRE) + 1):
        assert read_in_chunks(kind, MIXED_WIRE, [cut]) == MIXED_EXPECTED, cut


@pytest.mark.parametrize("kind", KINDS)
def test_every_pair_of_split_points_in_an_xreadgroup_reply(kind: str) -> None:
    data = wire(xreadgroup({"a": 2, "b": 1}, size=3)) + b":1\r\n"
    expected = [xreadgroup({"a": 2, "b": 1}, size=3), 1]
    for first in range(len(data) + 1):
        for second in range(first, len(data) + 1, 7):
            assert read_in_chunks(kind, data, [first, second]) == expected, (first, second)


@pytest.mark.parametrize("kind", KINDS)
def test_one_byte_at_a_time(kind: str) -> None:
    reader = make_reader(kind)
    out = []
    for i in range(len(MIXED_WIRE)):
        reader.feed(MIXED_WIRE[i:i + 1])
        got = drain(reader)
        # a reply comes out exactly when its last byte is in
        if got:
            out += got
            assert MIXED_WIRE[:i + 1].endswith(b"\r\n")
    assert out == MIXED_EXPECTED


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", range(20))
def test_random_chunks(kind: str, seed: int) -> None:
    rng = random.Random(seed)
    max_chunk = rng.choice([2, 5, 17, 100, 1000, 7000])
    assert read_in_chunks(kind, MIXED_WIRE, random_cuts(rng, len(MIXED_WIRE), max_chunk)) \
        == MIXED_EXPECTED


@pytest.mark.parametrize("kind", KINDS)
def test_large_bulk_string_in_chunks(kind: str) -> None:
    rng = random.Random(1)
    big = rng.randbytes(1 << 20)
    data = wire([b"before", big, b"after"]) + wire(big)
    for max_chunk in (4096, 65536, 300_000):
        out = read_in_chunks(kind, data, random_cuts(rng, len(data), max_chunk))
        assert out == [[b"before", big, b"after"], big]


@pytest.mark.parametrize("kind", KINDS)
def test_large_bulk_string_one_byte_at_a_time(kind: str) -> None:
    big = bytes(range(256)) * 256  # 64 KiB, every byte value, "\r\n" included
    data = wire(big)
    reader = make_reader(kind)
    for i in range(len(data) - 1):
        reader.feed(data[i:i + 1])
        assert reader.gets() is INCOMPLETE
    reader.feed(data[-1:])
    assert reader.gets() == big


@pytest.mark.parametrize("kind", KINDS)
def test_large_xreadgroup_reply_in_socket_sized_reads(kind: str) -> None:
    value = xreadgroup({"t-0": 1000}, size=1024)
    data = wire(value)
    cuts = list(range(65536, len(data), 65536))
    assert read_in_chunks(kind, data, cuts) == [value]


# ---- both readers agree -----------------------------------------------------------------------

def random_value(rng: random.Random, depth: int = 0) -> Any:
    pick = rng.random()
    if depth < 4 and pick < 0.25:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 6))]
    if pick < 0.35:
        return None
    if pick < 0.45:
        return rng.randint(-(1 << 63), (1 << 63) - 1)
    if pick < 0.5:
        return RespError("ERR " + "".join(rng.choice("abc xyz") for _ in range(rng.randint(0, 20))))
    if pick < 0.55:
        return "OK"
    return rng.randbytes(rng.choice([0, 1, 2, 10, 100, 3000]))


@both
@pytest.mark.parametrize("seed", range(30))
def test_both_readers_give_the_same_values(seed: int) -> None:
    rng = random.Random(seed)
    values = [random_value(rng) for _ in range(30)] + [[None] * 3, []]
    data = b"".join(wire(v) for v in values) + b"*-1\r\n"
    cuts = random_cuts(rng, len(data), rng.choice([1, 3, 50, 2000]))
    python = read_in_chunks("python", data, cuts)
    assert python == read_in_chunks("hiredis", data, cuts)
    assert python == [plain(v) for v in values] + [None]


# ---- protocol errors --------------------------------------------------------------------------

MALFORMED = [
    b"?what\r\n", b"\x00\r\n", b"\r\n", b"\n:1\r\n", b'"\r\n', b"\\\r\n", b"\x85\r\n",
    b"$abc\r\n", b"$\r\n", b"$-2\r\n", b"$03\r\nabc\r\n", b"$ 3\r\nabc\r\n", b"$+3\r\nabc\r\n",
    b"$1_0\r\n0123456789\r\n", b"*x\r\n", b"*-5\r\n", b"*01\r\n:1\r\n",
    b":\r\n", b":1.5\r\n", b":+1\r\n", b":-0\r\n", b":007\r\n", b":9223372036854775808\r\n",
    b":-9223372036854775809\r\n", b"*2\r\n:1\r\n!oops\r\n", b"$3\r\nabcde\r\n",
]


def outcome(kind: str, data: bytes) -> list[Any]:
    """Replies until the first exception; the exception as (type, message); then what a second
    gets() does."""
    reader = make_reader(kind)
    reader.feed(data)
    out: list[Any] = []
    try:
        while (reply := reader.gets()) is not INCOMPLETE:
            out.append(plain(reply))
        return out
    except Exception as exc:
        out.append((type(exc).__name__, str(exc)))
    try:
        reader.feed(b"+OK\r\n")
        out.append(("after", plain(reader.gets())))
    except Exception as exc:
        out.append(("after", type(exc).__name__, str(exc)))
    return out


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("data", MALFORMED)
def test_malformed_reply_raises_and_stays_broken(kind: str, data: bytes) -> None:
    out = outcome(kind, data)
    name, message = out[-2]
    assert name == "RespProtocolError" and message
    assert out[-1] == ("after", "RespProtocolError", message)


@both
@pytest.mark.parametrize("data", MALFORMED)
def test_both_readers_fail_alike(data: bytes) -> None:
    assert outcome("python", data) == outcome("hiredis", data)


def test_protocol_error_is_a_connection_error() -> None:
    assert issubclass(RespProtocolError, ConnectionError)


# ---- the pure reader does not re-scan -----------------------------------------------------------

class CountingReader(PythonReader):
    """Counts the bytes the reader copies when it joins what was fed."""

    __slots__ = ("copied",)

    def __init__(self) -> None:
        super().__init__()
        self.copied = 0

    def _take(self) -> None:
        super()._take()
        if len(self._chunks) == 0 and self._buf:
            self.copied += len(self._buf)


def test_partial_reply_is_consumed_not_kept() -> None:
    """Elements of a partial reply are taken out of the buffer as they complete: only the one
    element still incomplete stays buffered, so nothing before it is parsed again."""
    value = xreadgroup({"t-0": 500}, size=1024)
    data = wire(value)
    reader = PythonReader()
    biggest = 1024 + len(b"$1024\r\n\r\n")
    for cut in range(0, len(data), 10_007):
        reader.feed(data[cut:cut + 10_007])
        reply = reader.gets()
        if reply is INCOMPLETE:
            assert reader.buffered < biggest
    assert reply == value
    assert reader.buffered == 0


@pytest.mark.parametrize("chunk", [1, 7, 1000, 65536])
def test_bytes_copied_grow_linearly(chunk: int) -> None:
    """Re-parsing from the start on every read would copy the reply once per read (quadratic);
    the reader copies each byte a bounded number of times whatever the read size."""
    value = xreadgroup({"t-0": 200}, size=1024)
    data = wire(value) * 2
    reader = CountingReader()
    out = []
    for i in range(0, len(data), chunk):
        reader.feed(data[i:i + chunk])
        out += drain(reader)
    assert out == [value, value]
    # headers are short, so even one byte at a time copies each byte only a few times
    assert reader.copied <= 4 * len(data)


def test_large_bulk_string_is_joined_once_complete() -> None:
    big = b"z" * (1 << 20)
    reader = CountingReader()
    data = wire(big)
    for i in range(0, len(data), 1000):
        reader.feed(data[i:i + 1000])
        if i + 1000 < len(data):
            assert reader.gets() is INCOMPLETE
    assert reader.gets() == big
    assert reader.copied <= len(data) + 2000


# ---- choosing the reader ----------------------------------------------------------------------

def test_reader_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(resp.READER_ENV, "python")
    assert resp.reader_kind() == "python"
    assert isinstance(make_reader(), PythonReader)
    monkeypatch.setenv(resp.READER_ENV, "auto")
    assert resp.reader_kind() == ("hiredis" if HAVE_HIREDIS else "python")
    monkeypatch.delenv(resp.READER_ENV)
    assert resp.reader_kind() == ("hiredis" if HAVE_HIREDIS else "python")
    monkeypatch.setenv(resp.READER_ENV, "fast")
    with pytest.raises(RuntimeError, match="fast"):
        resp.reader_kind()
    monkeypatch.setattr(resp, "_HIREDIS", None)
    monkeypatch.setenv(resp.READER_ENV, "hiredis")
    with pytest.raises(RuntimeError, match="not installed"):
        resp.reader_kind()
    monkeypatch.delenv(resp.READER_ENV)
    assert resp.reader_kind() == "python"


# ---- the connection ---------------------------------------------------------------------------

class FakeServer:
    """Answers every command read with the next canned reply, written in small pieces."""

    def __init__(self, replies: list[bytes]) -> None:
        self.replies = replies
        self.received = bytearray()
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        parser = PythonReader()
        while self.replies:
            data = await reader.read(65536)
            if not data:
                break
            self.received += data
            parser.feed(data)
            while self.replies and parser.gets() is not INCOMPLETE:
                reply = self.replies.pop(0)
                for i in range(0, len(reply), 3):
                    writer.write(reply[i:i + 3])
                    await writer.drain()
                    await asyncio.sleep(0)
        writer.close()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


@pytest.mark.parametrize("kind", KINDS)
async def test_pipeline_send_and_close(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(resp.READER_ENV, kind)
    fake = FakeServer([b"+PONG\r\n", b":3\r\n", b"*2\r\n$1\r\na\r\n$-1\r\n", b":1\r\n",
                       b"-ERR no\r\n", b":2\r\n", b":9\r\n", b":10\r\n", b":1\r\n", b":11\r\n"])
    conn = await RespConnection.open("127.0.0.1", await fake.start())
    try:
        assert await conn.call("PING") == b"PONG"
        # the reply to a send() comes ahead of the next pipeline's and is not returned by it
        conn.send(encode(["XACK", "s", "g", "1-0"]), 1)
        assert await conn.pipeline(encode(["LRANGE", "l", 0, -1]), 1) == [[b"a", None]]
        # an error reply to a send() command is raised by the next pipeline, which still reads
        # its own replies: the connection stays in step
        conn.send(encode(["XACK", "s", "g", "2-0"]) + encode(["XACK", "s", "g", "3-0"]), 2)
        with pytest.raises(RespError, match="ERR no"):
            await conn.pipeline(encode(["INCR", "n"]), 1)
        assert await conn.call("INCR", "n") == 9
        # commands written right behind a pipeline's are answered after it, like send()'s
        assert await conn.pipeline(encode(["INCR", "n"]), 1, encode(["INCR", "m"]), 1) == [10]
        conn.send(encode(["INCR", "n"]), 1)
        await conn.close()  # waits for the replies owed to `then` and send()
        assert fake.replies == []
    finally:
        await fake.stop()


async def test_submit_hands_replies_to_a_callback_in_order() -> None:
    fake = FakeServer([b":1\r\n", b":2\r\n", b"-ERR x\r\n", b":4\r\n", b":5\r\n"])
    conn = await RespConnection.open("127.0.0.1", await fake.start())
    got: list[Any] = []
    try:
        conn.submit(encode(["INCR", "a"]) + encode(["INCR", "a"]), 2, got.append)
        assert got == []  # never before submit() returns

        def broken(result: Any) -> None:
            raise RuntimeError("a bug in a callback")

        conn.submit(encode(["INCR", "b"]), 1, broken)
        # a callback's exception goes to the loop's handler; the connection stays in step
        assert await conn.call("INCR", "c") == 4
        conn.submit(encode(["INCR", "d"]), 1, got.append)
        await conn.close()
        assert got == [[1, 2], [5]]
    finally:
        await fake.stop()


async def test_submitted_commands_fail_when_the_connection_is_lost() -> None:
    fake = FakeServer([b":1\r\n"])  # answers one command, then hangs up
    conn = await RespConnection.open("127.0.0.1", await fake.start())
    got: list[Any] = []
    try:
        conn.submit(encode(["INCR", "a"]), 1, got.append)
        conn.submit(encode(["INCR", "a"]), 1, got.append)
        for _ in range(100):
            if len(got) == 2:
                break
            await asyncio.sleep(0.01)
        assert got[0] == [1] and isinstance(got[1], resp.RespConnectionClosed)
        with pytest.raises(resp.RespConnectionClosed):
            conn.submit(encode(["INCR", "a"]), 1, got.append)
    finally:
        await conn.close()
        await fake.stop()


async def test_closed_connection_is_reported() -> None:
    fake = FakeServer([b"$5\r\nab"])
    conn = await RespConnection.open("127.0.0.1", await fake.start())
    try:
        with pytest.raises(resp.RespConnectionClosed):
            await conn.call("GET", "x")
    finally:
        await conn.close()
        await fake.stop()


# ---- the consumer's decoding --------------------------------------------------------------------

class RecordingConnection:
    """Stands in for RespConnection: hands out canned replies and keeps what was sent."""

    def __init__(self, replies: list[Any]) -> None:
        self.replies = replies
        self.piped: list[bytes] = []
        self.behind: list[tuple[bytes, int]] = []  # what each pipeline wrote right behind
        self.sent: list[tuple[bytes, int]] = []

    async def pipeline(self, payload: bytes, n: int, then: bytes = b"", then_n: int = 0) -> list[Any]:
        self.piped.append(payload)
        self.behind.append((then, then_n))
        return [self.replies.pop(0) for _ in range(n)]

    def send(self, payload: bytes, n: int) -> None:
        self.sent.append((payload, n))

    def submit(self, payload: bytes, n: int, done: Any, then: bytes = b"", then_n: int = 0) -> None:
        self.piped.append(payload)
        self.behind.append((then, then_n))
        reply = self.replies.pop(0)
        result = reply if isinstance(reply, ConnectionError) else [reply]
        asyncio.get_running_loop().call_soon(done, result)

    def take_send_error(self) -> RespError | None:
        return None

    async def close(self) -> None:
        pass


def commands(payload: bytes) -> list[Any]:
    reader = PythonReader()
    reader.feed(payload)
    return drain(reader)


@pytest.mark.parametrize("track", [False, True])
async def test_consumer_decodes_a_batch_and_acknowledges_it(track: bool) -> None:
    reply = xreadgroup({"t-0": 3, "t-1": 2}, size=10)
    conn = RecordingConnection([reply, None])
    consumer = RedisConsumer(conn, ["t-0", "t-1"], "group-a", "consumer-0", track)  # type: ignore[arg-type]
    batch = await consumer.receive()
    assert batch is not None
    assert batch.intended_ns == [1_700_000_000_000_000_000 + i for i in (0, 1, 2, 0, 1)]
    assert batch.payload_bytes == 50
    assert batch.receive_ns > 1_700_000_000_000_000_000
    if track:
        assert batch.ids == [(0, "1700000000000-0"), (0, "1700000000000-1"), (0, "1700000000000-2"),
                             (1, "1700000000000-0"), (1, "1700000000000-1")]
    else:
        assert batch.ids is None
    assert commands(conn.piped[0]) == [[b"XREADGROUP", b"GROUP", b"group-a", b"consumer-0",
                                        b"COUNT", b"1000", b"BLOCK", b"100", b"STREAMS",
                                        b"t-0", b"t-1", b">", b">"]]
    assert conn.behind == [(b"", 0)] and conn.sent == []
    # the server's BLOCK ran out: nothing came. The batch's XACKs went right behind this read
    assert await consumer.receive() is None
    acks, n = conn.behind[1]
    assert n == 2
    assert commands(acks) == [
        [b"XACK", b"t-0", b"group-a", b"1700000000000-0", b"1700000000000-1", b"1700000000000-2"],
        [b"XACK", b"t-1", b"group-a", b"1700000000000-0", b"1700000000000-1"]]
    assert commands(conn.piped[1]) == commands(conn.piped[0])
    # nothing more is owed
    await consumer.close()
    assert conn.sent == []


async def test_consumer_sends_the_acknowledgements_it_owes_when_closed() -> None:
    conn = RecordingConnection([xreadgroup({"t-0": 2}, size=10)])
    consumer = RedisConsumer(conn, ["t-0"], "g", "c", False)  # type: ignore[arg-type]
    assert await consumer.receive() is not None
    await consumer.close()
    [(acks, n)] = conn.sent
    assert n == 1
    assert commands(acks) == [[b"XACK", b"t-0", b"g", b"1700000000000-0", b"1700000000000-1"]]


async def test_consumer_raises_an_error_reply() -> None:
    conn = RecordingConnection([RespError("WRONGTYPE Operation against a key")])
    consumer = RedisConsumer(conn, ["t-0"], "g", "c", False)  # type: ignore[arg-type]
    with pytest.raises(RespError, match=r"^WRONGTYPE Operation against a key$"):
        await consumer.receive()
    assert len(conn.piped) == 1


async def test_consumer_makes_a_lost_group_again() -> None:
    """NOGROUP (a server started again without its data): the group is made again on every
    stream, from the first entry, and the error is raised saying so (another consumer may have
    made it first: BUSYGROUP). The acknowledgements owed went with the read, as always."""
    conn = RecordingConnection([RespError("NOGROUP No such key 't-0'"), "OK",
                                RespError("BUSYGROUP Consumer Group name already exists")])
    consumer = RedisConsumer(conn, ["t-0", "t-1"], "g", "c", False)  # type: ignore[arg-type]
    consumer._acks, consumer._ack_count = b"*4\r\n...", 1
    with pytest.raises(RespError, match=r"^NOGROUP No such key 't-0'; the group was created again"):
        await consumer.receive()
    assert conn.piped[1] == (encode(["XGROUP", "CREATE", "t-0", "g", "0", "MKSTREAM"])
                             + encode(["XGROUP", "CREATE", "t-1", "g", "0", "MKSTREAM"]))
    assert conn.behind[0] == (b"*4\r\n...", 1) and consumer._ack_count == 0


async def delivered(consumer: RedisConsumer) -> Any:
    """The outcome of one read started with deliver(), which comes from the event loop."""
    outcome: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    assert consumer.deliver(outcome.set_result)
    assert not outcome.done()
    return await outcome


async def test_a_delivered_read_is_decoded_and_acknowledged_as_a_received_one() -> None:
    """Reads started with deliver() return the batch receive() would, and owe its XACK, sent
    right behind the next read (from deliver() or receive()) as with receive()."""
    conn = RecordingConnection([xreadgroup({"t-0": 3, "t-1": 2}, size=10), None,
                                xreadgroup({"t-0": 1}, size=10)])
    consumer = RedisConsumer(conn, ["t-0", "t-1"], "g", "c", False)  # type: ignore[arg-type]
    before = time.time_ns()
    batch = await delivered(consumer)
    assert isinstance(batch, ReceivedBatch) and batch.count == 5 and batch.payload_bytes == 50
    assert before <= batch.receive_ns <= time.time_ns()
    assert conn.behind[0] == (b"", 0)
    assert await delivered(consumer) is None
    acks, n = conn.behind[1]
    assert n == 2 and commands(acks)[0][:3] == [b"XACK", b"t-0", b"g"]
    assert commands(conn.piped[1]) == commands(conn.piped[0])  # the same XREADGROUP
    assert (await consumer.receive()) is not None and conn.behind[2] == (b"", 0)


async def test_a_delivered_read_that_fails_keeps_the_acknowledgements_owed() -> None:
    conn = RecordingConnection([ConnectionError("connection lost"),
                                RespError("WRONGTYPE Operation against a key")])
    consumer = RedisConsumer(conn, ["t-0"], "g", "c", False)  # type: ignore[arg-type]
    consumer._acks, consumer._ack_count = b"*4\r\n...", 1
    lost = await delivered(consumer)
    assert isinstance(lost, ConnectionError)
    assert (consumer._acks, consumer._ack_count) == (b"*4\r\n...", 1)  # taken over with it
    error = await delivered(consumer)
    assert isinstance(error, RespError) and str(error) == "WRONGTYPE Operation against a key"


async def test_a_delivered_read_finding_no_group_leaves_it_to_receive() -> None:
    """NOGROUP needs requests of its own: the read's outcome is "nothing came", deliver()
    declines the next read, and receive() makes the group again and says so."""
    conn = RecordingConnection([RespError("NOGROUP No such key 't-0'"), "OK"])
    consumer = RedisConsumer(conn, ["t-0"], "g", "c", False)  # type: ignore[arg-type]
    assert await delivered(consumer) is None
    assert not consumer.deliver(lambda outcome: None)
    with pytest.raises(RespError, match=r"^NOGROUP No such key 't-0'; the group was created again"):
        await consumer.receive()
    assert conn.piped[1] == encode(["XGROUP", "CREATE", "t-0", "g", "0", "MKSTREAM"])
    assert consumer._no_group is None


# ---- the producer's batches -------------------------------------------------------------------

class SubmitConnection:
    """Stands in for RespConnection under a producer: answers each submit() with canned replies
    from the event loop."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.writes: list[tuple[bytes, int]] = []

    def submit(self, payload: bytes, n: int, done: Any) -> None:
        self.writes.append((payload, n))
        asyncio.get_running_loop().call_soon(done, self.answers.pop(0))

    async def pipeline(self, payload: bytes, n: int) -> list[Any]:
        self.writes.append((payload, n))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer  # type: ignore[no-any-return]


async def submitted(producer: RedisProducer, batch: list[OutMessage]) -> BaseException | None:
    done: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
    producer.submit(batch, done.set_result)
    assert not done.done()  # never before submit() returns
    return await done


def messages(n: int) -> list[OutMessage]:
    return [OutMessage(b"x" * 5, None, 1_700_000_000_000_000_000 + i) for i in range(n)]


async def test_producer_sends_a_group_atomically_and_a_single_message_plainly() -> None:
    conn = SubmitConnection([[b"1-0"], [b"OK", b"QUEUED", b"QUEUED", b"QUEUED",
                                        [b"1-1", b"1-2", b"1-3"]]])
    producer = RedisProducer(conn, ["s-0"], maxlen=0)  # type: ignore[arg-type]
    assert await submitted(producer, messages(1)) is None
    assert await submitted(producer, messages(3)) is None
    (one, n1), (group, n3) = conn.writes
    assert n1 == 1 and commands(one) == [
        [b"XADD", b"s-0", b"*", b"t", b"1700000000000000000", b"p", b"xxxxx"]]
    # MULTI / EXEC: a reader blocked on the stream is served the whole group at once
    assert n3 == 5
    assert [c[0] for c in commands(group)] == [b"MULTI", b"XADD", b"XADD", b"XADD", b"EXEC"]
    assert [c[4] for c in commands(group)[1:4]] == [b"17000000000000000%02d" % i for i in range(3)]


async def test_producer_sends_large_batches_as_plain_pipelines() -> None:
    n = ATOMIC_BATCH + 1
    conn = SubmitConnection([[b"1-0"] * n])
    producer = RedisProducer(conn, ["s-0", "s-1"], maxlen=1000)  # type: ignore[arg-type]
    assert await submitted(producer, messages(n)) is None
    [(payload, count)] = conn.writes
    assert count == n
    sent = commands(payload)
    assert {c[0] for c in sent} == {b"XADD"}
    assert sent[0][:5] == [b"XADD", b"s-1", b"MAXLEN", b"~", b"1000"]  # partitions take turns
    assert sent[1][1] == b"s-0"


@pytest.mark.parametrize("answer", [
    [b"OK", b"QUEUED", b"QUEUED", [b"1-1", RespError("WRONGTYPE Operation against a key")]],
    [b"OK", b"QUEUED", RespError("ERR bad"), RespError("EXECABORT Transaction discarded")],
    resp.RespConnectionClosed("the server closed the connection"),
])
async def test_producer_reports_the_first_failure(answer: Any) -> None:
    conn = SubmitConnection([answer, answer])
    producer = RedisProducer(conn, ["s-0"], maxlen=0)  # type: ignore[arg-type]
    error = await submitted(producer, messages(2))
    assert isinstance(error, (RespError, resp.RespConnectionClosed))
    with pytest.raises((RespError, resp.RespConnectionClosed)):
        await producer.send_batch(messages(2))
