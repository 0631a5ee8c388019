"""Why a connection failed, told from the exception itself: its type and its errno, and those
of the exceptions it wraps (`__cause__`, `__context__`, urllib's `reason`, an exception handed
over in `args`, an exception group's members). Never from the digits of its message: a refused
connection to port 11122 and an error naming port 1111 are different things."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
from collections.abc import Iterator
from enum import Enum

from loadgen.core.security import auth_failure, tls_failure

_MAX_LINKS = 32  # exceptions looked at per failure (chains are short; cycles are possible)


class Failure(Enum):
    """What went wrong, with the short text a one-line error shows."""

    REFUSED = "connection refused (nothing listens there?)"
    RESET = "connection reset by the peer"
    CLOSED = "connection closed by the peer"
    TIMED_OUT = "timed out"
    HOST_UNREACHABLE = "host unreachable"
    NETWORK_UNREACHABLE = "network unreachable"
    UNKNOWN_HOST = "unknown host"
    NO_SOCKET = "no socket there"
    PERMISSION = "permission denied"


_BY_ERRNO = {
    errno.ECONNREFUSED: Failure.REFUSED,
    errno.ECONNRESET: Failure.RESET,
    errno.ECONNABORTED: Failure.RESET,
    errno.EPIPE: Failure.RESET,
    errno.ETIMEDOUT: Failure.TIMED_OUT,
    errno.EHOSTUNREACH: Failure.HOST_UNREACHABLE,
    errno.EHOSTDOWN: Failure.HOST_UNREACHABLE,
    errno.ENETUNREACH: Failure.NETWORK_UNREACHABLE,
    errno.ENETDOWN: Failure.NETWORK_UNREACHABLE,
    errno.ENOENT: Failure.NO_SOCKET,  # a unix socket path that does not exist
    errno.EACCES: Failure.PERMISSION,
    errno.EPERM: Failure.PERMISSION,
}
_CLOSED_BY_PEER = ("closed by the server", "Connection closed by server")
# exception types that mean these things whatever errno they carry (or none)
_BY_TYPE: tuple[tuple[type[BaseException], Failure], ...] = (
    (socket.gaierror, Failure.UNKNOWN_HOST),
    (ConnectionRefusedError, Failure.REFUSED),
    (ConnectionResetError, Failure.RESET),
    (ConnectionAbortedError, Failure.RESET),
    (BrokenPipeError, Failure.RESET),
)


def chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, then every exception it wraps, breadth first, each once."""
    seen: set[int] = set()
    queue = [exc]
    while queue and len(seen) < _MAX_LINKS:
        current = queue.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        linked: list[object] = [getattr(current, "reason", None), current.__cause__,
                                current.__context__, *current.args,
                                *(getattr(current, "exceptions", None) or ())]
        queue += [e for e in linked if isinstance(e, BaseException)]


def _is_timeout(exc: BaseException) -> bool:
    """Python's TimeoutError (socket.timeout and asyncio.TimeoutError are the same class), or a
    client library's own timeout class (redis' TimeoutError, aiokafka's KafkaTimeoutError…)."""
    if isinstance(exc, TimeoutError):
        return True
    return any(cls.__name__.endswith("TimeoutError") for cls in type(exc).__mro__)


def classify(exc: BaseException) -> Failure | None:
    """What a failed connection ran into, or None when nothing in the chain says.

    A system error anywhere in the chain (its type or errno) wins over a timeout class a
    library wrapped it in (urllib3 raises a refusal as a subclass of its connect time-out)."""
    links = list(chain(exc))
    for link in links:
        for cls, failure in _BY_TYPE:
            if isinstance(link, cls):
                return failure
        if isinstance(link, OSError) and isinstance(link.errno, int) and link.errno in _BY_ERRNO:
            return _BY_ERRNO[link.errno]
    if any(_is_timeout(link) for link in links):
        return Failure.TIMED_OUT
    # a client library's word for a connection the server ended (redis-py: "Connection closed
    # by the server before write")
    if any(mark in str(link) for link in links for mark in _CLOSED_BY_PEER):
        return Failure.CLOSED
    return None


def is_refused(exc: BaseException) -> bool:
    return classify(exc) is Failure.REFUSED


def connect_failure(exc: BaseException, tls: bool | None = None) -> str:
    """A short reason for a failed connection, without the client library's noise: a refused
    TLS handshake or refused credentials, else the kind of failure when the chain tells it,
    else the first sentence of the message. `tls`: whether the client spoke TLS, when known,
    for the hint a TLS/plaintext mismatch needs (it shows as a time-out or a reset)."""
    why = tls_failure(exc) or auth_failure(exc)
    if why is not None:
        return why
    failure = classify(exc)
    if failure is Failure.TIMED_OUT and tls:
        return f"{failure.value} (TLS is on: does the port take TLS connections?)"
    if failure in (Failure.RESET, Failure.CLOSED) and tls:
        # a TLS 1.3 server that wants a client certificate may drop the connection after the
        # handshake instead of sending its alert in time
        return (f"{failure.value} (TLS is on: does the port take TLS connections, and does the "
                "server want a client certificate: cert= and key=?)")
    if failure in (Failure.RESET, Failure.CLOSED) and tls is False:
        return f"{failure.value} (a port that takes TLS only? add tls or ca=PATH to the target)"
    if failure is not None:
        return failure.value
    text = (str(exc).strip().splitlines() or [""])[0]
    return text.split(". ")[0][:200] or type(exc).__name__


async def probe_tcp(host: str, port: int, timeout_s: float) -> None:
    """Open and close one TCP connection; raises OSError/TimeoutError."""
    _reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
