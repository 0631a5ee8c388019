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
- each reader is an asyncio task in the host that awaits slices, decodes the event headers and
  sends `(None, reader id, batch)` without being asked; the pipe's back-pressure paces it.

A broker that stops answering stalls the host, never the load: its requests just go
unanswered until the broker is back (or the run ends and the host is killed)."""

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
from collections.abc import Callable, Coroutine
from multiprocessing.connection import Connection
from typing import Any

from loadgen.errors import DriverError

# event header: intended send time (ns), partition, producer id, producer sequence number
HEADER = struct.Struct("<qHQQ")
EVENT_FRAME_BYTES = 8  # type and length before each event in a segment
GROUP_BATCHES = 64  # most queued batches one flush acknowledges
WRITER_INFLIGHT = 10_000
START_TIMEOUT_S = 30.0
_PR_SET_PDEATHSIG = 1


# ---- the host process ---------------------------------------------------------------------------

class _Host:
    def __init__(self, conn: Connection, controller: str) -> None:
        import pravega_client

        self._client = pravega_client
        self._conn = conn
        self._send_lock = threading.Lock()
        self._manager = pravega_client.StreamManager(controller)
        self._writers: dict[int, queue.SimpleQueue[Any]] = {}
        self._readers: dict[int, tuple[Any, asyncio.Task[None]]] = {}
        self._tails = itertools.count()
        self._tasks: set[asyncio.Task[None]] = set()

    def send(self, message: Any) -> None:
        with self._send_lock, contextlib.suppress(OSError):
            self._conn.send(message)

    # -- management --

    def op_create_topic(self, scope: str, stream: str, partitions: int, groups: list[str]) -> None:
        c, m = self._client, self._manager
        m.create_scope(scope)
        m.create_stream_with_policy(scope, stream, c.StreamScalingPolicy.fixed_scaling_policy(partitions),
                                    c.StreamRetentionPolicy.none(), [])
        for group in groups:  # from the stream's head: nothing written before the readers is missed
            m.create_reader_group(group, scope, stream, False)

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

    def op_writer(self, wid: int, scope: str, stream: str) -> None:
        writer = self._manager.create_writer(scope, stream, WRITER_INFLIGHT)
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
            except Exception as exc:
                error = f"write failed: {exc}"
            for req, _events, _keys in group:
                self.send((req, error, None))

    def write(self, req: int, wid: int, events: list[bytes], keys: list[str]) -> None:
        self._writers[wid].put((req, events, keys))

    def op_close_writer(self, wid: int) -> None:
        jobs = self._writers.pop(wid, None)
        if jobs is not None:
            jobs.put(None)

    # -- readers --

    def op_reader(self, rid: int, scope: str, stream: str, group: str, name: str, track: bool) -> None:
        rg = self._manager.create_reader_group(group, scope, stream, False)
        reader = rg.create_reader(name)
        task = asyncio.get_running_loop().create_task(self._read_loop(rid, reader, track))
        self._readers[rid] = (reader, task)

    async def _read_loop(self, rid: int, reader: Any, track: bool) -> None:
        unpack, skip = HEADER.unpack_from, HEADER.size
        while True:
            try:
                segment_slice = await reader.get_segment_slice_async()
            except Exception as exc:
                self.send((None, rid, f"receive failed: {exc}"))
                await asyncio.sleep(1.0)
                continue
            receive_ns = time.time_ns()
            intended: list[int] = []
            size = 0
            ids: list[tuple[int, str]] | None = [] if track else None
            for event in segment_slice:
                data = event.data()
                sent, partition, producer, seq = unpack(data)
                intended.append(sent)
                size += len(data) - skip
                if ids is not None:
                    ids.append((partition, f"{producer:x}:{seq}"))
            # writes the reader's positions to its group every 3 s or so (the lag's source)
            reader.release_segment(segment_slice)
            if intended:
                await asyncio.to_thread(self.send, (None, rid, (receive_ns, intended, size, ids)))

    def op_close_reader(self, rid: int) -> None:
        found = self._readers.pop(rid, None)
        if found is not None:
            reader, task = found
            task.cancel()
            reader.reader_offline()

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

        loop.add_reader(self._conn.fileno(), readable)
        while True:
            message = await inbox.get()
            if message is None:
                return
            req, op, args = message
            if op == "write":
                self.write(req, *args)
                continue
            if op == "exit":
                self.send((req, "", None))
                return
            try:
                result = getattr(self, f"op_{op}")(*args)
                if asyncio.iscoroutine(result):  # answered when done; the loop goes on meanwhile
                    task = loop.create_task(self._answer_later(req, result))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                    continue
                self.send((req, "", result))
            except Exception as exc:
                self.send((req, str(exc) or type(exc).__name__, None))

    async def _answer_later(self, req: int, work: Coroutine[Any, Any, Any]) -> None:
        try:
            self.send((req, "", await work))
        except Exception as exc:
            self.send((req, str(exc) or type(exc).__name__, None))


def _host_main(conn: Connection, controller: str) -> None:
    """The host process: dies with its parent; the client's log lines go nowhere."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops it
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
        self._loop.add_reader(ours.fileno(), self._readable)

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
        try:
            self._conn.send((req, op, args))
        except OSError:
            self._pending.pop(req, None)
            self._ended()

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

    def stop(self) -> None:
        """Kill the host at once (its requests stay unanswered: the run is over)."""
        if self._loop is not None and self._conn is not None:
            with contextlib.suppress(ValueError, OSError):
                self._loop.remove_reader(self._conn.fileno())
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)
        if self._conn is not None:
            self._conn.close()
        self._conn = None
        self.gone = self.gone or "the Pravega client is closed"

    async def close(self, grace_s: float = 5.0) -> None:
        """Let the host finish what it was asked (readers offline), then stop it."""
        if not self.gone and self._conn is not None:
            with contextlib.suppress(Exception):
                await self.call("exit", timeout_s=grace_s)
        await asyncio.to_thread(self.stop)
