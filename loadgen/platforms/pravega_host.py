"""The Pravega client in a process of its own, for the Pravega driver and collector.

The `pravega` Python client's blocking calls (stream and reader group management, writes,
flushes, a reader releasing a slice) hold the GIL while its Rust runtime waits on the broker,
and retry for about a minute (a killed controller) or wait without end (a flush while the
segment store is down): in the load's process they would freeze its event loop, its pacing and
its answers to the run. So a driver or collector starts one client host process (spawned, dying
with its parent, its stderr, where the client logs, discarded) and talks to it over a pipe:

- requests `(id, op, args)`, answered `(id, error, result)`;
- each writer has a thread in the host that writes what it is handed, then flushes, and answers
  every batch written before the flush (the flush returning is the acknowledgement);
- each reader is an asyncio task in the host that awaits slices, decodes the event headers,
  releases the slice (which moves the reader's position) and sends `(None, reader id, batch)`
  without being asked, at most READ_AHEAD batches ahead of what the parent has taken (`take`):
  a consumer that stops taking leaves the rest of its backlog unread in the group's eyes too.

A broker that stops answering stalls the host, never the load: its requests just go
unanswered until the broker is back (or the run ends and the host is killed).

One host serves one writer, or one reader, or the stream management and telemetry calls, never
a mix: a blocking call holds the GIL while it waits for the client's Rust runtime, whose few
worker threads may themselves wait for the GIL to complete an awaitable of the same process
(a reader's next slice), and then neither goes on. For the same reason a host awaits one
request's awaitable before it takes the next request."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import itertools
import multiprocessing
import os
import queue
import signal
import struct
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from loadgen.core.audit import STAMP_BASE
from loadgen.core.errors import DriverError
from loadgen.core.fdwatch import watch_readable

# event header: intended send time (ns), partition, producer id, producer sequence number, and
# the delivery audit's code (loadgen.core.audit: the stamp is code × STAMP_BASE + the time; 0
# without the audit)
HEADER = struct.Struct("<qHQQQ")
EVENT_FRAME_BYTES = 8  # type and length before each event in a segment
READ_AHEAD = 2  # batches a reader may have sent that its consumer has not taken yet
GROUP_BATCHES = 64  # most queued batches one flush acknowledges
WRITER_INFLIGHT = 10_000  # a writer's events in flight (create_writer's max_inflight_events)
START_TIMEOUT_S = 30.0
_PR_SET_PDEATHSIG = 1


# ---- the host process ---------------------------------------------------------------------------

class _ReaderState:
    def __init__(self, reader: Any, track: bool) -> None:
        self.reader = reader
        self.track = track
        self.credit = READ_AHEAD
        self.closing = False
        self.wake = asyncio.Event()
        self.done = asyncio.Event()
        self.task: asyncio.Task[None] | None = None


class _Host:
    def __init__(self, conn: Connection, controller: str) -> None:
        import pravega_client

        self._client = pravega_client
        self._conn = conn
        self._send_lock = threading.Lock()
        self._manager = pravega_client.StreamManager(controller)
        self._writers: dict[int, queue.SimpleQueue[Any]] = {}
        self._readers: dict[int, _ReaderState] = {}
        self._tails = itertools.count()

    def send(self, message: Any) -> None:
        with self._send_lock, contextlib.suppress(OSError):
            self._conn.send(message)

    # -- management --

    def _ensure_stream(self, scope: str, stream: str, partitions: int) -> None:
        """Create the scope and the stream unless they exist (a standalone started again after
        a kill comes back without them)."""
        c, m = self._client, self._manager
        m.create_scope(scope)
        m.create_stream_with_policy(scope, stream, c.StreamScalingPolicy.fixed_scaling_policy(partitions),
                                    c.StreamRetentionPolicy.none(), [])

    def op_create_topic(self, scope: str, stream: str, partitions: int, groups: list[str]) -> None:
        self._ensure_stream(scope, stream, partitions)
        for group in groups:  # from the stream's head: nothing written before the readers is missed
            self._manager.create_reader_group(group, scope, stream, False)

    def op_delete_topic(self, scope: str, stream: str, groups: list[str]) -> None:
        for group in groups:
            with contextlib.suppress(Exception):
                self._manager.delete_reader_group(group, scope)
        self._manager.seal_stream(scope, stream)
        self._manager.delete_stream(scope, stream)

    async def op_event_bytes(self, scope: str, stream: str) -> int | None:
        """The size on the wire of the stream's first event (frame included), read by a reader
        group of its own that is deleted after; None while the stream is empty."""
        name = f"{stream}-size-{os.getpid()}-{next(self._tails)}"
        group = self._manager.create_reader_group(name, scope, stream, False)
        try:
            reader = group.create_reader("size")
            try:
                for _attempt in range(3):
                    segment_slice = await asyncio.wait_for(reader.get_segment_slice_async(), 5.0)
                    for event in segment_slice:
                        return EVENT_FRAME_BYTES + len(event.data())
            finally:
                reader.reader_offline()
        finally:
            self._manager.delete_reader_group(name, scope)
        return None

    def op_unread(self, scope: str, stream: str, groups: list[str]) -> tuple[dict[int, int], dict[int, int]]:
        """Unread bytes per segment summed over the groups, and the tail per segment. Positions
        are read before the tail, so a write in between never puts a position past it."""
        m = self._manager
        positions = [dict(m.create_reader_group(g, scope, stream, False).get_streamcut()
                          .get_segment_offset_map()) for g in groups]
        name = f"{stream}-tail-{os.getpid()}-{next(self._tails)}"
        try:
            tail = dict(m.create_reader_group(name, scope, stream, True).get_streamcut()
                        .get_segment_offset_map())
        finally:
            m.delete_reader_group(name, scope)
        unread = {seg: sum(max(0, end - p.get(seg, 0)) for p in positions) for seg, end in tail.items()}
        return unread, tail

    # -- writers --

    def op_writer(self, wid: int, scope: str, stream: str, partitions: int,
                  kwargs: dict[str, Any]) -> None:
        """A writer with create_writer's keyword arguments `kwargs` (max_inflight_events)."""
        self._ensure_stream(scope, stream, partitions)
        writer = self._manager.create_writer(scope, stream, **kwargs)
        jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._writers[wid] = jobs
        threading.Thread(target=self._write_loop, args=(writer, jobs), daemon=True).start()

    def _write_loop(self, writer: Any, jobs: queue.SimpleQueue[Any]) -> None:
        write, flush = writer.write_event_bytes, writer.flush
        while True:
            job = jobs.get()
            if job is None:
                return
            group = [job]
            with contextlib.suppress(queue.Empty):
                while len(group) < GROUP_BATCHES:
                    more = jobs.get_nowait()
                    if more is None:
                        jobs.put(None)
                        break
                    group.append(more)
            error = ""
            try:
                for _req, events, keys in group:
                    for data, key in zip(events, keys, strict=True):
                        write(data, key)
                flush()
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as exc:  # a panic of the client's too
                error = f"write failed: {_first_line(exc)}"
            for req, _events, _keys in group:
                self.send((req, error, None))

    def write(self, req: int, wid: int, events: list[bytes], keys: list[str]) -> None:
        self._writers[wid].put((req, events, keys))

    def op_close_writer(self, wid: int) -> None:
        jobs = self._writers.pop(wid, None)
        if jobs is not None:
            jobs.put(None)

    # -- readers --

    def op_reader(self, rid: int, scope: str, stream: str, partitions: int, group: str, name: str,
                  track: bool, stale: tuple[str, ...] = ()) -> None:
        """A reader joining the group; `stale`: readers of the group whose connection was lost
        while the broker stayed up (a network partition), taken offline first so that their
        segments come to the new one (the group keeps a reader's segments until then)."""
        self._ensure_stream(scope, stream, partitions)
        rg = self._manager.create_reader_group(group, scope, stream, False)
        for old in stale:
            with contextlib.suppress(Exception):  # gone already, or never joined
                rg.reader_offline(old)
        state = _ReaderState(rg.create_reader(name), track)
        state.task = asyncio.get_running_loop().create_task(self._read_loop(rid, state))
        self._readers[rid] = state

    async def _read_loop(self, rid: int, state: _ReaderState) -> None:
        """Await slices and send their events to the parent, at most READ_AHEAD batches ahead
        of what it has taken. The client's reader is one lock: a release, or going offline,
        while an acquisition is pending would wait for that lock with the GIL held while the
        acquisition waits for the GIL. So both happen here, between acquisitions."""
        reader = state.reader
        unpack, skip = HEADER.unpack_from, HEADER.size
        try:
            while not state.closing:
                if state.credit <= 0:
                    state.wake.clear()
                    await state.wake.wait()
                    continue
                try:
                    segment_slice = await reader.get_segment_slice_async()
                except (KeyboardInterrupt, SystemExit, asyncio.CancelledError):
                    raise
                except BaseException as exc:  # a panic of the client's too
                    self.send((None, rid, f"receive failed: {_first_line(exc)}"))
                    await asyncio.sleep(1.0)
                    continue
                receive_ns = time.time_ns()
                intended: list[int] = []
                size = 0
                ids: list[tuple[int, str]] | None = [] if state.track else None
                for event in segment_slice:
                    data = event.data()
                    sent, partition, producer, seq, code = unpack(data)
                    intended.append(sent + code * STAMP_BASE if code else sent)
                    size += len(data) - skip
                    if ids is not None:
                        ids.append((partition, f"{producer:x}:{seq}"))
                # moves the reader's position; about every 3 s a release also writes the
                # positions back to the group (the lag's source); an empty slice comes about
                # once a second while nothing is there to read
                reader.release_segment(segment_slice)
                if intended:
                    state.credit -= 1
                    await asyncio.to_thread(self.send, (None, rid, (receive_ns, intended, size, ids)))
        finally:
            with contextlib.suppress(Exception):
                reader.reader_offline()
            state.done.set()

    def take(self, rid: int) -> None:
        """The parent took one of a reader's batches: it may read one more."""
        state = self._readers.get(rid)
        if state is not None:
            state.credit += 1
            state.wake.set()

    async def op_close_reader(self, rid: int) -> None:
        """Stop the reader between two acquisitions (within about a second) and take it
        offline, so that its segments go to the group's other readers."""
        state = self._readers.pop(rid, None)
        if state is not None:
            state.closing = True
            state.wake.set()
            await state.done.wait()

    # -- the request loop --

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue[Any] = asyncio.Queue()

        def readable() -> None:
            try:
                inbox.put_nowait(self._conn.recv())
            except (EOFError, OSError):
                loop.remove_reader(self._conn.fileno())
                inbox.put_nowait(None)

        watch_readable(loop, self._conn.fileno(), readable)
        while True:
            message = await inbox.get()
            if message is None:
                return
            req, op, args = message
            if op == "write":
                self.write(req, *args)
                continue
            if op == "take":
                self.take(*args)
                continue
            if op == "exit":
                self.send((req, "", None))
                return
            try:
                result = getattr(self, f"op_{op}")(*args)
                if asyncio.iscoroutine(result):  # awaited before the next request: see below
                    result = await result
                self.send((req, "", result))
            except (KeyboardInterrupt, SystemExit, asyncio.CancelledError):
                raise
            except BaseException as exc:  # the client's panics (a stream gone) are BaseExceptions
                self.send((req, _first_line(exc), None))


def _first_line(exc: BaseException) -> str:
    text = (str(exc).strip().splitlines() or [""])[0][:300]
    return text or type(exc).__name__


def _host_main(conn: Connection, controller: str) -> None:
    """The host process: dies with its parent; the client's log lines go nowhere."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops it
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a load worker ignores it, and spawn keeps that
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        host = _Host(conn, controller)
    except Exception as exc:
        conn.send((0, f"{type(exc).__name__}: {exc}", None))
        return
    conn.send((0, "", None))
    asyncio.run(host.serve())


# ---- the parent's side ------------------------------------------------------------------------

class ClientHost:
    """A client host process and the requests to it, for one asyncio loop."""

    def __init__(self, controller: str) -> None:
        self._controller = controller
        self._conn: Connection | None = None
        self._proc: Any = None
        self._ids = itertools.count(1)
        self._pending: dict[int, Callable[[str, Any], None]] = {}
        self._inboxes: dict[int, Callable[[Any], None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        # requests go out through a thread of their own: a host stuck on a broker stops reading
        # its pipe, and a full pipe must block that thread, never the loop
        self._outbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._sender: threading.Thread | None = None
        self.gone = ""

    async def start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        ours, theirs = ctx.Pipe()
        self._proc = ctx.Process(target=_host_main, args=(theirs, self._controller), daemon=True,
                                 name="pravega-client")
        self._proc.start()
        theirs.close()
        self._conn = ours
        ready = await asyncio.to_thread(ours.poll, START_TIMEOUT_S)
        if not ready:
            self.stop()
            raise DriverError(f"the Pravega client process did not start within {START_TIMEOUT_S:.0f} s")
        try:
            _req, error, _result = ours.recv()
        except (EOFError, OSError):
            error = f"the Pravega client process ended (exit code {self._proc.exitcode})"
        if error:
            self.stop()
            raise DriverError(f"cannot start the Pravega client: {error}")
        self._loop = asyncio.get_running_loop()
        watch_readable(self._loop, ours.fileno(), self._readable)
        self._sender = threading.Thread(target=self._send_loop, args=(ours,), daemon=True,
                                        name="pravega-client-sender")
        self._sender.start()

    def _send_loop(self, conn: Connection) -> None:
        while True:
            message = self._outbox.get()
            if message is None:
                return
            try:
                conn.send(message)
            except Exception:  # the host or the pipe is gone: _readable sees the end of the pipe
                return

    def _readable(self) -> None:
        assert self._conn is not None
        try:
            req, first, second = self._conn.recv()
        except (EOFError, OSError):
            self._ended()
            return
        if req is None:  # a reader's batch (or error), unasked
            inbox = self._inboxes.get(first)
            if inbox is not None:
                inbox(second)
            return
        answer = self._pending.pop(req, None)
        if answer is not None:
            answer(first, second)

    def _ended(self) -> None:
        if self._loop is not None and self._conn is not None:
            with contextlib.suppress(ValueError, OSError):
                self._loop.remove_reader(self._conn.fileno())
        self.gone = "the Pravega client process ended"
        pending, self._pending = self._pending, {}
        for answer in pending.values():
            answer(self.gone, None)
        for inbox in self._inboxes.values():
            inbox(self.gone)

    def post(self, op: str, args: tuple[Any, ...], answer: Callable[[str, Any], None]) -> None:
        """Send a request; `answer(error, result)` runs on the loop when it is answered."""
        if self.gone or self._conn is None:
            answer(self.gone or "the Pravega client is not started", None)
            return
        req = next(self._ids)
        self._pending[req] = answer
        self._outbox.put((req, op, args))

    def tell(self, op: str, *args: Any) -> None:
        """Send a request that has no answer (writes answer through post, not this)."""
        if not self.gone and self._conn is not None:
            self._outbox.put((0, op, args))

    async def call(self, op: str, *args: Any, timeout_s: float = 30.0) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def answer(error: str, result: Any) -> None:
            if future.done():
                return
            if error:
                future.set_exception(DriverError(error))
            else:
                future.set_result(result)

        self.post(op, args, answer)
        try:
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            raise TimeoutError(f"no answer from Pravega within {timeout_s:g} s") from None

    def subscribe(self, rid: int, inbox: Callable[[Any], None]) -> None:
        self._inboxes[rid] = inbox

    def _detach(self) -> None:
        if self._loop is not None and self._conn is not None:
            with contextlib.suppress(ValueError, OSError, RuntimeError):
                self._loop.remove_reader(self._conn.fileno())

    def _kill(self) -> None:
        self._outbox.put(None)
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
            self._proc.join(2)
        if self._conn is not None:
            self._conn.close()
        self._conn = None

    def stop(self) -> None:
        """Kill the host at once (its requests stay unanswered: the run is over)."""
        self._detach()
        self._kill()
        self.gone = self.gone or "the Pravega client is closed"

    async def close(self, grace_s: float = 2.0) -> None:
        """Let the host finish what it was asked (readers offline) for up to grace_s (none: at
        once), then stop it, waiting for its end off the loop; stopped also when the close
        itself is cancelled."""
        try:
            if not self.gone and self._conn is not None and grace_s > 0:
                with contextlib.suppress(Exception):
                    await self.call("exit", timeout_s=grace_s)
            self._detach()
            proc = self._proc
            if proc is not None and proc.is_alive():
                proc.kill()
                await asyncio.to_thread(proc.join, 2)
        finally:
            self.stop()
