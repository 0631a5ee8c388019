"""`streambench run --headless`: the run loop without a dashboard, for scripts, CI, tmux and
nohup (a hang-up there detaches the terminal and the run goes on to its end)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from loadgen.core.errors import StreambenchError
from loadgen.core.fdwatch import watch_readable
from tui.bench import exits
from tui.bench.terminal import HANGUP, detach_terminal, stdin_readers

if TYPE_CHECKING:
    from loadgen.run import BusItem, Run, RunSummary


async def headless(run: Run) -> tuple[RunSummary, int | None]:
    """The run without a dashboard: one status line per target per tick on standard output,
    phases and events on standard error, interventions read from standard input; the summary
    and the signal that stopped it, if one did."""
    from loadgen.core.events import PhaseChange, RunEvent
    from loadgen.core.ticks import Tick
    from loadgen.status import status_line

    received: list[int] = []

    def on_signal(sig: int) -> None:
        received.append(sig)
        if sig == signal.SIGHUP:
            detach_terminal()
            run.stop_for(HANGUP)
        sys.stderr.write("\nstopping: finishing the run and draining (signal again to skip the drain)\n"
                         if len(received) == 1 else "\nskipping the drain\n")
        run.request_stop()

    def show(item: BusItem) -> None:
        if isinstance(item, Tick):
            sys.stdout.write(status_line(item) + "\n")
            sys.stdout.flush()
        elif isinstance(item, PhaseChange) and item.message:
            sys.stderr.write(f"[{item.phase.value}] {item.message}\n")
        elif isinstance(item, RunEvent):
            sys.stderr.write(f"[event] {item.target} {item.kind}: {item.detail}\n")

    run.subscribe(show)
    loop = asyncio.get_running_loop()
    for sig in exits.SIGNAL_EXIT:
        if sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN:
            continue  # under nohup: a hang-up is not a reason to stop
        loop.add_signal_handler(sig, on_signal, sig)
    commands = _read_commands(run)
    try:
        summary = await run.execute()
    finally:
        commands()
    return summary, (received[0] if received else None)


def _read_commands(run: Run) -> Callable[[], None]:
    """Headless runs take interventions on standard input, one per line, written as the
    ACTION=VALUE[@TARGET] part of --at (rate=5000, consumers=stop@redis, kill=kafka-2).
    Only from a terminal or a pipe; returns the function that stops reading."""
    import stat as stat_mod

    from loadgen.core.interventions import parse_action

    loop = asyncio.get_running_loop()
    try:
        mode = os.fstat(0).st_mode
    except OSError:
        return lambda: None
    if not (os.isatty(0) or stat_mod.S_ISFIFO(mode) or stat_mod.S_ISSOCK(mode)):
        return lambda: None
    pending = b""
    tasks: set[asyncio.Task[None]] = set()

    async def carry_out(text: str) -> None:
        try:
            await run.intervene(parse_action(text, "command"))
        except StreambenchError as exc:
            sys.stderr.write(f"[command] {exc}\n")

    def on_input() -> None:
        nonlocal pending
        try:
            chunk = os.read(0, 4096)
        except OSError:
            chunk = b""
        if not chunk:
            loop.remove_reader(0)
            return
        *lines, pending = (pending + chunk).split(b"\n")
        for raw in lines:
            text = raw.decode("utf-8", "replace").strip()
            if text:
                task = loop.create_task(carry_out(text))
                tasks.add(task)
                task.add_done_callback(tasks.discard)

    try:
        watch_readable(loop, 0, on_input)
    except (OSError, ValueError, PermissionError):
        return lambda: None

    def stop() -> None:
        with contextlib.suppress(Exception):
            loop.remove_reader(0)

    stdin_readers.append(stop)
    return stop
