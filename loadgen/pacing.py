"""Constant-rate schedule: slot n is due at start + n × interval and no slot is ever skipped,
so a stalled broker delays messages (and shows in the latencies) instead of thinning the load."""

from __future__ import annotations

import asyncio
import contextlib
import math
import select
import selectors
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class Schedule:
    """Slots of one producer. `rate` is this producer's msg/s; 0 means no pacing."""

    __slots__ = ("_interval_ns", "_offset_wall_ns", "_start_mono_ns", "end_mono_ns", "next_slot", "rate")

    def __init__(self, rate: float, start_mono_ns: int, start_wall_ns: int, end_mono_ns: int,
                 phase_ns: int = 0) -> None:
        self.rate = rate
        self._interval_ns = 1e9 / rate if rate > 0 else 0.0
        self._start_mono_ns = start_mono_ns + phase_ns
        # wall = mono + offset, fixed once so intended times are on one consistent clock
        self._offset_wall_ns = start_wall_ns - start_mono_ns
        self.end_mono_ns = end_mono_ns
        self.next_slot = 0

    def slot_mono_ns(self, n: int) -> int:
        return self._start_mono_ns + int(n * self._interval_ns)

    def due(self, now_mono_ns: int, limit: int) -> list[int]:
        """Intended wall-clock times of the slots due by now (at most `limit`), in order,
        consuming them. Slots at or past the end are never due."""
        if self.rate <= 0:
            if now_mono_ns >= self.end_mono_ns:
                return []
            wall = now_mono_ns + self._offset_wall_ns
            self.next_slot += limit
            return [wall] * limit
        n0 = self.next_slot
        elapsed = now_mono_ns - self._start_mono_ns
        if elapsed < 0:
            return []
        # slot counts from time × rate (not time / interval), so that a whole number of slots
        # per run stays whole instead of gaining one through the rounding of the interval
        n_due = math.floor(elapsed * self.rate / 1e9 + 1e-6) + 1
        n_end = math.ceil((self.end_mono_ns - self._start_mono_ns) * self.rate / 1e9 - 1e-6)
        n1 = min(n_due, n_end, n0 + limit)
        if n1 <= n0:
            return []
        self.next_slot = n1
        base = self._start_mono_ns + self._offset_wall_ns
        iv = self._interval_ns
        return [base + int(n * iv) for n in range(n0, n1)]

    def seconds_until_next(self, now_mono_ns: int) -> float:
        if self.rate <= 0:
            return 0.0
        return max(0.0, (self.slot_mono_ns(self.next_slot) - now_mono_ns) / 1e9)

    def finished(self, now_mono_ns: int) -> bool:
        if self.rate <= 0:
            return now_mono_ns >= self.end_mono_ns
        return self.slot_mono_ns(self.next_slot) >= self.end_mono_ns

    def stop_at(self, end_mono_ns: int) -> None:
        self.end_mono_ns = min(self.end_mono_ns, end_mono_ns)


def now_ns() -> tuple[int, int]:
    """(monotonic, wall) nanoseconds read back to back."""
    return time.monotonic_ns(), time.time_ns()


class PreciseEpollSelector(selectors.EpollSelector):
    """epoll rounds every timeout up to a whole millisecond, which would make each paced send
    up to 1 ms late. For short waits this selector sleeps in select() on the epoll descriptor
    itself (readable when any registered event is ready; microsecond timeout), then collects
    the events without blocking. Long waits and fd counts are unaffected."""

    SHORT_WAIT_S = 0.005

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and 0 < timeout < self.SHORT_WAIT_S:
            with contextlib.suppress(InterruptedError):
                select.select([self.fileno()], [], [], timeout)
            return super().select(0)
        return super().select(timeout)


def precise_event_loop() -> asyncio.AbstractEventLoop:
    """The event loop streambench runs in: timers fire within about 0.1 ms."""
    return asyncio.SelectorEventLoop(PreciseEpollSelector())


def run_precise(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run() on a precise event loop."""
    with asyncio.Runner(loop_factory=precise_event_loop) as runner:
        return runner.run(coro)
