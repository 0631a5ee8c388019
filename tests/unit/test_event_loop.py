"""The load's event loop: uvloop with timerfd timers (PreciseTimers) where it can be had, the
standard loop on PreciseEpollSelector otherwise, and descriptors watched without changing how
they read."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import threading
import time

import pytest

from loadgen.core.fdwatch import watch_readable
from loadgen.pacing import (
    EVENT_LOOP_ENV,
    PreciseTimers,
    event_loop_kind,
    precise_call_at,
    run_precise,
)


@pytest.fixture(params=["uvloop", "asyncio"])
def loop_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(EVENT_LOOP_ENV, request.param)
    return str(request.param)


def test_the_default_is_uvloop_on_linux(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(EVENT_LOOP_ENV, raising=False)
    assert event_loop_kind() == "uvloop"
    monkeypatch.setenv(EVENT_LOOP_ENV, "asyncio")
    assert event_loop_kind() == "asyncio"


def test_the_loop_is_the_one_asked_for(loop_kind: str) -> None:
    async def which() -> str:
        return type(asyncio.get_running_loop()).__module__

    module = run_precise(which())
    assert module.startswith("uvloop") == (loop_kind == "uvloop")


def test_timers_fire_in_order_at_or_after_their_time_and_close_to_it(loop_kind: str) -> None:
    """200 timers 1 ms apart, armed one from the other's callback (as the producer's are), and
    a second series interleaved: each fires at or after its time, in order of time; the median
    lateness is far below the millisecond the loops' own timers are rounded to."""

    async def series() -> tuple[list[tuple[int, int]], list[int]]:
        loop = asyncio.get_running_loop()
        fired: list[tuple[int, int]] = []  # (intended, actual)
        done = loop.create_future()
        t0 = time.monotonic_ns() + 5_000_000
        count = 200

        def make(k: int, offset: int) -> None:
            when = t0 + k * 1_000_000 + offset

            def fire() -> None:
                fired.append((when, time.monotonic_ns()))
                if k + 1 < count:
                    make(k + 1, offset)
                elif offset and not done.done():
                    done.set_result(None)
            precise_call_at(loop, when, fire)

        make(0, 0)
        make(0, 500_000)
        await asyncio.wait_for(done, 5)
        return fired, [actual - when for when, actual in fired]

    fired, late = run_precise(series())
    assert len(fired) == 400
    assert all(actual >= when for when, actual in fired)
    intended = [when for when, _ in fired]
    assert intended == sorted(intended)
    late.sort()
    assert late[len(late) // 2] < 300_000, f"median lateness {late[len(late) // 2]} ns"


def test_cancelled_timers_do_not_fire_and_errors_reach_the_handler(loop_kind: str) -> None:
    async def scenario() -> tuple[list[str], list[str]]:
        loop = asyncio.get_running_loop()
        ran: list[str] = []
        errors: list[str] = []
        loop.set_exception_handler(lambda _loop, ctx: errors.append(repr(ctx.get("exception"))))
        now = time.monotonic_ns()

        def boom() -> None:
            ran.append("boom")
            raise ValueError("in a timer")

        precise_call_at(loop, now + 2_000_000, lambda: ran.append("kept"))
        precise_call_at(loop, now + 1_000_000, lambda: ran.append("cancelled")).cancel()
        precise_call_at(loop, now + 3_000_000, boom)
        precise_call_at(loop, now + 4_000_000, lambda: ran.append("after"))
        await asyncio.sleep(0.05)
        return ran, errors

    ran, errors = run_precise(scenario())
    assert ran == ["kept", "boom", "after"]
    assert len(errors) == 1 and "in a timer" in errors[0]


def test_a_timer_in_the_past_fires_at_once(loop_kind: str) -> None:
    async def scenario() -> int:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        start = time.monotonic_ns()
        precise_call_at(loop, start - 1_000_000_000, lambda: fut.set_result(time.monotonic_ns()))
        return await asyncio.wait_for(fut, 1) - start

    assert run_precise(scenario()) < 50_000_000


def test_the_timer_descriptor_is_closed_with_the_loop() -> None:
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(5):
        run_precise(asyncio.sleep(0))
    assert len(os.listdir("/proc/self/fd")) <= before


def test_precise_timers_learn_the_kernels_lateness() -> None:
    """After a few hundred short sleeps the timers arm their descriptor early by about the
    lateness of the kernel's wake-ups, never more than their bound."""

    async def scenario() -> int:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        t0 = time.monotonic_ns() + 2_000_000

        def at(k: int) -> None:
            if k == 300:
                done.set_result(None)
                return
            precise_call_at(loop, t0 + k * 500_000, lambda: at(k + 1))

        at(0)
        await asyncio.wait_for(done, 5)
        from loadgen import pacing
        return pacing._timers[loop].lead_ns

    os.environ.pop(EVENT_LOOP_ENV, None)
    lead = run_precise(scenario())
    assert 0 < lead <= PreciseTimers.MAX_LEAD_NS


def test_the_timer_descriptor_goes_quiet_when_no_timer_is_left() -> None:
    """The descriptor is never read: re-arming or disarming it clears it. Once the last timer
    has fired, or the only one left was cancelled, the loop is not woken by it again (a
    descriptor left readable would wake it on every iteration)."""

    async def scenario() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        from loadgen import pacing
        timers = pacing._timers[loop]
        wakes = 0
        expired = timers._expired

        def counting() -> None:
            nonlocal wakes
            wakes += 1
            expired()

        loop.remove_reader(timers._fd)
        loop.add_reader(timers._fd, counting)
        fired = loop.create_future()
        now = time.monotonic_ns()
        precise_call_at(loop, now + 2_000_000, lambda: fired.set_result(None))
        await asyncio.wait_for(fired, 1)
        after_fired = wakes
        await asyncio.sleep(0.1)  # about a hundred iterations of a busy loop's worth
        quiet_after_firing = wakes - after_fired
        handle = precise_call_at(loop, time.monotonic_ns() + 5_000_000, lambda: None)
        handle.cancel()
        await asyncio.sleep(0.1)
        return quiet_after_firing, wakes - after_fired - quiet_after_firing

    os.environ.pop(EVENT_LOOP_ENV, None)
    after_firing, after_cancelled = run_precise(scenario())
    assert after_firing == 0
    assert after_cancelled == 1  # the cancelled timer's own time, then nothing


def test_a_timer_armed_later_does_not_fire_on_an_earlier_readiness() -> None:
    """A timer cancelled after its descriptor went off, and replaced by a later one in the same
    loop iteration: the stale readiness runs nothing early; the later one fires on time."""

    async def scenario() -> int:
        loop = asyncio.get_running_loop()
        fired = loop.create_future()
        first = precise_call_at(loop, time.monotonic_ns() + 1_000_000, lambda: None)
        time.sleep(0.003)  # the descriptor goes off while the loop is busy here
        first.cancel()
        later = time.monotonic_ns() + 20_000_000
        precise_call_at(loop, later, lambda: fired.set_result(time.monotonic_ns()))
        return await asyncio.wait_for(fired, 1) - later

    os.environ.pop(EVENT_LOOP_ENV, None)
    lateness = run_precise(scenario())
    assert 0 <= lateness < 10_000_000


def test_watching_a_pipe_keeps_it_blocking(loop_kind: str) -> None:
    """uvloop makes a watched descriptor non-blocking; a pipe read whole with recv(), or a
    terminal shared with the shell, must stay as it was."""
    ours, theirs = multiprocessing.Pipe()

    async def scenario() -> tuple[bool, object]:
        loop = asyncio.get_running_loop()
        got = loop.create_future()
        watch_readable(loop, ours.fileno(), lambda: got.set_result(ours.recv()))
        blocking = os.get_blocking(ours.fileno())
        # more than a pipe holds, from another thread: recv() must wait for the rest of it
        sender = threading.Thread(target=theirs.send, args=({"big": b"x" * 300_000},))
        sender.start()
        message = await asyncio.wait_for(got, 5)
        sender.join(5)
        loop.remove_reader(ours.fileno())
        return blocking, message

    try:
        blocking, message = run_precise(scenario())
    finally:
        ours.close()
        theirs.close()
    assert blocking
    assert message == {"big": b"x" * 300_000}
