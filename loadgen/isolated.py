"""A Run in a child process, for the dashboard: rendering the screen never delays a paced send
or a receive timestamp. The child owns the brokers, the load and the run files; it sends the
bus (Ticks, phase changes, events) over a pipe, and the parent sends stop requests back.

If the parent dies, the child sees the pipe close, ends the run without draining, flushes its
files and stops the brokers."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import signal
from multiprocessing.connection import Connection
from typing import Any

from loadgen.errors import StreambenchError
from loadgen.pacing import run_precise
from loadgen.run import BusItem, Run, RunSummary, Subscriber, check_run_dir
from loadgen.tick import Phase, PhaseChange, RunEvent, Tick

_STOP = "stop"
_GO = "go"


def _child(conn: Connection, kwargs: dict[str, Any]) -> None:
    # the terminal's Ctrl-C belongs to the parent, which asks for the stop over the pipe
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        first = conn.recv()
    except (EOFError, OSError):
        return  # the parent went away before the run began
    run = Run(**kwargs)
    if first == _STOP:
        run.request_stop()

    def forward(item: BusItem) -> None:
        if isinstance(item, Tick | PhaseChange | RunEvent):
            with contextlib.suppress(OSError):
                conn.send(item)

    run.subscribe(forward)

    async def main() -> None:
        loop = asyncio.get_running_loop()

        def on_request() -> None:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                loop.remove_reader(conn.fileno())
                run.request_stop()  # parent gone: end now, skip the drain
                run.request_stop()
                return
            if message == _STOP:
                run.request_stop()

        loop.add_reader(conn.fileno(), on_request)
        try:
            outcome: tuple[str, Any] = ("summary", await run.execute())
        except StreambenchError as exc:
            outcome = ("error", exc)
        except Exception as exc:
            outcome = ("error", StreambenchError(f"internal error in the run: {type(exc).__name__}: {exc}"))
        with contextlib.suppress(OSError):
            conn.send(outcome)

    run_precise(main())


class RunProcess:
    """The parts of Run's interface the dashboard uses, backed by a Run in a child process."""

    def __init__(self, **kwargs: Any) -> None:
        probe = Run(**kwargs)  # for the names and durations only; it starts nothing
        kwargs["out_dir"] = probe.run_dir
        kwargs["run_id"] = probe.run_id
        self._kwargs = kwargs
        self.workload = probe.workload
        self.labels = probe.labels
        self.run_dir = probe.run_dir
        self.warmup_ticks = probe.warmup_ticks
        self.measure_ticks = probe.measure_ticks
        self.phase = Phase.STARTING
        self._subscribers: list[Subscriber] = []
        self._conn: Connection | None = None
        self._proc: multiprocessing.process.BaseProcess | None = None
        self._stops = 0
        self._started = False

    def prepare(self) -> None:
        """Check the run directory and start the child, which waits for execute(). Call it
        before the dashboard takes over the terminal: starting a process needs the real
        standard streams."""
        check_run_dir(self.run_dir)
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe(duplex=True)
        self._proc = ctx.Process(target=_child, args=(child, self._kwargs), name="streambench-run")
        self._proc.start()
        child.close()

    def subscribe(self, fn: Subscriber) -> None:
        self._subscribers.append(fn)

    def request_stop(self) -> None:
        self._stops += 1
        if self._conn is not None and self._started:
            with contextlib.suppress(OSError):
                self._conn.send(_STOP)

    async def execute(self) -> RunSummary:
        if self._proc is None:
            self.prepare()
        parent, proc = self._conn, self._proc
        assert parent is not None and proc is not None
        parent.send(_STOP if self._stops else _GO)
        self._started = True
        for _ in range(self._stops - 1):
            parent.send(_STOP)
        loop = asyncio.get_running_loop()
        outcome: asyncio.Future[tuple[str, Any]] = loop.create_future()

        def on_item() -> None:
            try:
                item = parent.recv()
            except (EOFError, OSError):
                loop.remove_reader(parent.fileno())
                if not outcome.done():
                    outcome.set_result(("error", StreambenchError(
                        f"the run process ended unexpectedly (exit code {proc.exitcode}); "
                        f"files so far are in {self.run_dir}")))
                return
            if isinstance(item, tuple):
                if not outcome.done():
                    outcome.set_result(item)
                return
            if isinstance(item, PhaseChange):
                self.phase = item.phase
            for fn in self._subscribers:
                fn(item)

        loop.add_reader(parent.fileno(), on_item)
        try:
            kind, value = await outcome
        finally:
            with contextlib.suppress(Exception):
                loop.remove_reader(parent.fileno())
            if proc.is_alive() and not outcome.done():
                # cancelled: end the child's run quickly; it still flushes and stops brokers
                with contextlib.suppress(OSError):
                    parent.send(_STOP)
                    parent.send(_STOP)
            await asyncio.to_thread(proc.join, 120)
            if proc.is_alive():
                proc.kill()
                await asyncio.to_thread(proc.join, 10)
            parent.close()
            self._conn = None
            self._proc = None
        if kind == "error":
            raise value
        assert isinstance(value, RunSummary)
        return value
