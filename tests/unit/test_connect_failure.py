"""compose.net tells why a connection failed from the exception's type and errno, along the
chain of exceptions that wrap it, never from digits in its message."""

from __future__ import annotations

import asyncio
import errno
import socket
import urllib.error
import urllib.request

import pytest
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from compose import redis as compose_redis
from compose.net import Failure, chain, classify, connect_failure, is_refused
from compose.pulsar import AdminError, unreachable


def _closed_port_with_111() -> int:
    """A loopback port nothing listens on whose number contains 111 (bound, then closed)."""
    for port in (11122, 11123, 21110, 31119, 41114, 51117, 1110, 1119):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    pytest.skip("no free loopback port with 111 in its number")


def _free_closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_real_refusal_on_a_port_with_111_in_it():
    port = _closed_port_with_111()
    assert "111" in str(port)
    with socket.socket() as s, pytest.raises(OSError) as info:
        s.settimeout(2)
        s.connect(("127.0.0.1", port))
    assert classify(info.value) is Failure.REFUSED
    assert is_refused(info.value)
    assert connect_failure(info.value) == "connection refused (nothing listens there?)"


def test_a_real_refusal_on_any_free_port():
    port = _free_closed_port()

    async def attempt() -> BaseException:
        try:
            await asyncio.open_connection("127.0.0.1", port)
        except OSError as exc:
            return exc
        raise AssertionError("something listens on a port just closed")

    assert classify(asyncio.run(attempt())) is Failure.REFUSED


def test_redis_client_wrapping_a_refusal():
    """redis-py raises its own ConnectionError, with the OSError as its context."""
    port = _closed_port_with_111()

    async def attempt() -> BaseException:
        conn = aioredis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=2,
                              retry=Retry(NoBackoff(), 0))
        try:
            await conn.ping()
        except RedisConnectionError as exc:
            return exc
        finally:
            await conn.aclose()
        raise AssertionError("PING answered on a closed port")

    exc = asyncio.run(attempt())
    assert connect_failure(exc) == Failure.REFUSED.value
    # the name the Redis driver imports still works
    assert compose_redis.connect_failure(exc) == Failure.REFUSED.value


def test_urllib_wrapping_a_refusal():
    port = _closed_port_with_111()
    with pytest.raises(urllib.error.URLError) as info:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/admin/v2/clusters", timeout=2)
    assert classify(info.value) is Failure.REFUSED
    assert unreachable(info.value) == Failure.REFUSED.value
    assert unreachable(AdminError(503, "Service Unavailable")) == "Service Unavailable"


def test_text_with_111_that_is_not_a_refusal():
    """Digits in the message say nothing: a reset, a time-out, a plain error naming port 11122."""
    reset = ConnectionResetError(errno.ECONNRESET, "Connection reset by peer (127.0.0.1:11122)")
    assert classify(reset) is Failure.RESET
    timeout = TimeoutError("timed out connecting to 127.0.0.1:11122 after 111 ms")
    assert classify(timeout) is Failure.TIMED_OUT
    plain = RuntimeError("Error 111 talking to 127.0.0.1:11122. Retrying")
    assert classify(plain) is None
    assert connect_failure(plain) == "Error 111 talking to 127.0.0.1:11122"
    unrelated = OSError(errno.EADDRINUSE, "port 11122 in use (111)")
    assert classify(unrelated) is None and not is_refused(unrelated)
    # redis' own message for a refusal, without the OSError it came from: not guessed either
    assert classify(RedisConnectionError("Error 111 connecting to 127.0.0.1:6379.")) is None


def test_errno_and_type_classes():
    cases = {
        ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"): Failure.REFUSED,
        OSError(errno.ECONNREFUSED, "refused"): Failure.REFUSED,
        OSError(errno.ECONNRESET, "reset"): Failure.RESET,
        OSError(errno.ETIMEDOUT, "Connection timed out"): Failure.TIMED_OUT,
        OSError(errno.EHOSTUNREACH, "No route to host"): Failure.HOST_UNREACHABLE,
        OSError(errno.ENETUNREACH, "Network is unreachable"): Failure.NETWORK_UNREACHABLE,
        socket.gaierror(socket.EAI_NONAME, "Name or service not known"): Failure.UNKNOWN_HOST,
        FileNotFoundError(errno.ENOENT, "No such file or directory"): Failure.NO_SOCKET,
        TimeoutError("timed out"): Failure.TIMED_OUT,
        RedisTimeoutError("Timeout reading from 127.0.0.1:6379"): Failure.TIMED_OUT,
    }
    for exc, expected in cases.items():
        assert classify(exc) is expected, exc


def test_a_real_asyncio_timeout():
    async def slow() -> BaseException:
        try:
            await asyncio.wait_for(asyncio.sleep(5), 0.01)
        except TimeoutError as exc:
            return exc
        raise AssertionError("no time-out")

    assert connect_failure(asyncio.run(slow())) == "timed out"


def test_chains_through_cause_context_reason_and_args():
    refused = ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
    try:
        try:
            raise refused
        except OSError as inner:
            raise RedisConnectionError("Error connecting") from inner
    except RedisConnectionError as exc:
        assert classify(exc) is Failure.REFUSED

    try:
        try:
            raise OSError(errno.EHOSTUNREACH, "No route to host")
        except OSError:
            raise RuntimeError("cannot reach the broker") from None  # context kept, cause cut
    except RuntimeError as exc:
        assert exc.__context__ is not None
        assert classify(exc) is Failure.HOST_UNREACHABLE

    assert classify(urllib.error.URLError(socket.gaierror(-2, "Name or service not known"))) \
        is Failure.UNKNOWN_HOST
    # an exception handed over as an argument (requests / urllib3 do this)
    assert classify(RuntimeError("Connection aborted.", refused)) is Failure.REFUSED

    # a library time-out class wrapping a refusal: the system error wins
    class ConnectTimeoutError(Exception):
        pass

    wrapped = ConnectTimeoutError("Failed to establish a new connection")
    wrapped.__cause__ = OSError(errno.ECONNREFUSED, "Connection refused")
    assert classify(wrapped) is Failure.REFUSED


def test_chain_survives_cycles():
    a = RuntimeError("a")
    b = RuntimeError("b")
    a.__context__ = b
    b.__context__ = a
    assert [str(e) for e in chain(a)] == ["a", "b"]
    assert classify(a) is None


def test_a_connection_the_server_closed_says_so_and_hints_at_tls():
    """redis-py's word for a connection the server ended (a TLS 1.3 server that wants a client
    certificate closes it after the handshake, before the first command is written): closed by
    the peer, and over TLS the hint names the client certificate, as a reset's does."""
    closed = RedisConnectionError("Connection closed by the server before write")
    assert classify(closed) is Failure.CLOSED
    assert "client certificate" in connect_failure(closed, tls=True)
    assert "plaintext" not in connect_failure(closed, tls=True)
    assert "add tls" in connect_failure(closed, tls=False)
    assert connect_failure(closed) == Failure.CLOSED.value
