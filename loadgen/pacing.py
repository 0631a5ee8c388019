"""Constant-rate schedule: slot n is due at start + n × interval and no slot is ever skipped,
so a stalled broker delays messages (and shows in the latencies) instead of thinning the load.
Rate changes, pauses and resumes re-anchor it without dropping or bunching slots. Also the
event loop streambench runs in, whose timers fire within microseconds of their time."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import heapq
import importlib.util
import math
import os
import select
import selectors
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(slots=True)
class _Segment:
    """A stretch of the schedule from `start` (monotonic ns) on: paced at `rate`, at maximum
    rate (`rate` 0), or paused (`rate` is then the rate a resume goes on with). `clock` is the
    slot clock at `start`: slot m is due when the clock reaches m; it advances at `rate` while
    paced and stands still otherwise."""

    start: int
    rate: float
    clock: float
    paused: bool = False
    interval: float = 0.0  # ns between slots while paced

    def __post_init__(self) -> None:
        self.interval = 1e9 / self.rate if self.rate > 0 else 0.0

    @property
    def paced(self) -> bool:
        return self.rate > 0 and not self.paused

    def clock_at(self, t: int) -> float:
        return self.clock + (t - self.start) * self.rate / 1e9 if self.paced else self.clock

    def slot_at(self, m: int) -> int:
        """Monotonic ns of paced slot m (m at or past the clock at start), to the nearest ns."""
        return self.start + round((m - self.clock) * self.interval)

    def first_at_or_after(self, t: int) -> int:
        """The first paced slot due at or after `t`: the clock gives it to within float
        rounding, the slot times settle it exactly."""
        m = math.ceil(self.clock_at(t) - _EPS)
        while self.slot_at(m - 1) >= t and m - 1 >= self.clock - _EPS:
            m -= 1
        while self.slot_at(m) < t:
            m += 1
        return m


_EPS = 1e-6  # slots: float rounding of the clock never gains or loses a slot


class Schedule:
    """Slots of one producer; `rate` is its msg/s, 0 means maximum rate (as fast as the
    producer takes them).

    The schedule is a slot clock that runs at the rate: slot m is due when it reaches m. A rate
    change, pause or resume at a time `at` starts a new segment there without a jump of the
    clock, so slots before `at` keep their times, slots after it follow the new rate, and no slot
    is dropped or doubled: the slots in any interval number the integral of the rate over it.
    While paused (and at maximum rate) the clock stands still: a resume goes on from where it
    stopped, without the paused interval's slots. Changes come in time order, none before a
    time already passed to due()."""

    __slots__ = ("_m", "_next_t", "_offset_wall_ns", "_seen_ns", "_segments", "end_mono_ns",
                 "next_slot")

    def __init__(self, rate: float, start_mono_ns: int, start_wall_ns: int, end_mono_ns: int,
                 phase_ns: int = 0, *, stagger: float = 0.0) -> None:
        """Paced slots from start + phase: slot m at start + phase + (m + stagger) / rate.
        `stagger` (a fraction of a slot) also places the first slot after a switch from
        maximum to a fixed rate, so producers staggered across one slot stay so."""
        # wall = mono + offset, fixed once so intended times are on one consistent clock
        self._offset_wall_ns = start_wall_ns - start_mono_ns
        self.end_mono_ns = end_mono_ns
        first = _Segment(start_mono_ns + phase_ns, max(0.0, rate), -stagger)
        self._segments = [first]
        self._m = 0  # the next paced slot
        self._next_t = first.slot_at(0) if first.paced else 0  # its time, while paced
        self.next_slot = 0  # slots handed out so far
        self._seen_ns = start_mono_ns  # the latest time slots were asked for

    # ---- what is in force ---------------------------------------------------------------

    @property
    def rate(self) -> float:
        """The rate in force after the latest change (while paused: the rate a resume takes)."""
        return self._segments[-1].rate

    @property
    def paused(self) -> bool:
        return self._segments[-1].paused

    # ---- changes --------------------------------------------------------------------------

    def _change(self, at_mono_ns: int, rate: float, paused: bool) -> None:
        last = self._segments[-1]
        if at_mono_ns < max(last.start, self._seen_ns):
            raise ValueError(f"a change at {at_mono_ns} comes before the latest change or the "
                             "latest time slots were asked for")
        seg = _Segment(at_mono_ns, rate, last.clock_at(at_mono_ns), paused)
        if at_mono_ns == last.start and len(self._segments) > 1:
            self._segments[-1] = seg  # the same instant: the later change wins
        else:
            self._segments.append(seg)

    def set_rate(self, rate: float, at_mono_ns: int) -> None:
        """From `at` on, `rate` msg/s (0: maximum rate). Slots due before `at` keep their
        times; while paused, the rate a resume goes on with."""
        rate = max(0.0, rate)
        if self.paused:
            last = self._segments[-1]
            self._segments[-1] = _Segment(last.start, rate, last.clock, paused=True)
            return
        self._change(at_mono_ns, rate, False)

    def pause(self, at_mono_ns: int) -> bool:
        """No slot is due from `at` on until resume() (slots due before `at` still are).
        False when already paused."""
        if self.paused:
            return False
        self._change(at_mono_ns, self.rate, True)
        return True

    def resume(self, at_mono_ns: int) -> bool:
        """Slots again from `at`, the clock going on from where pause() stopped it: the first
        comes the rest of the slot interrupted by the pause after `at`, none for the time
        paused. False when not paused."""
        if not self.paused:
            return False
        self._change(at_mono_ns, self.rate, False)
        return True

    def forgive(self, at_mono_ns: int) -> int:
        """Drop the paced slots due before `at` that have not been handed out, and return how
        many: the producer goes on with the slots from `at` on, as if it had kept up. Only for a
        rate search that gives up a rate it could not keep (as OpenMessaging Benchmark's rate
        limiter holds no debt); everything else keeps every slot."""
        segs = self._segments
        at = max(at_mono_ns, self._seen_ns)
        j = 0
        while j + 1 < len(segs) and segs[j + 1].start <= at:
            j += 1
        dropped = 0
        for i in range(j + 1):
            seg = segs[i]
            if not seg.paced or seg.start > at:
                continue
            first = self._m if i == 0 else self._first(i)
            dropped += max(0, seg.first_at_or_after(min(self._stop_of(i), at)) - first)
        del segs[:j]
        seg = segs[0]
        if seg.paced and seg.start <= at:
            self._m = max(self._m, seg.first_at_or_after(at))
            self._next_t = seg.slot_at(self._m)
        elif seg.paced:
            self._m = max(self._m, seg.first_at_or_after(seg.start))
            self._next_t = seg.slot_at(self._m)
        return dropped

    def stop_at(self, end_mono_ns: int) -> None:
        self.end_mono_ns = min(self.end_mono_ns, end_mono_ns)

    # ---- slots ----------------------------------------------------------------------------

    def _stop_of(self, i: int) -> int:
        """Where segment i ends: the next one's start, or the end of the schedule."""
        segs = self._segments
        return min(segs[i + 1].start, self.end_mono_ns) if i + 1 < len(segs) else self.end_mono_ns

    def _first(self, i: int) -> int:
        """The first paced slot segment i has left."""
        if i == 0:
            return self._m
        seg = self._segments[i]
        return max(self._m, seg.first_at_or_after(seg.start))

    def _owes(self, i: int) -> bool:
        """Whether paced segment i has a slot left before it ends."""
        seg = self._segments[i]
        if not seg.paced:
            return False
        t = self._next_t if i == 0 else seg.slot_at(self._first(i))
        return t < self._stop_of(i)

    def _advance(self, now_mono_ns: int) -> None:
        """Leave segments that have begun to be followed by another and have no slot left."""
        segs = self._segments
        while len(segs) > 1 and segs[1].start <= now_mono_ns:
            if self._owes(0):
                return  # slots before the change are still owed
            del segs[0]
            if segs[0].paced:
                self._m = max(self._m, segs[0].first_at_or_after(segs[0].start))
                self._next_t = segs[0].slot_at(self._m)

    def due(self, now_mono_ns: int, limit: int) -> list[int]:
        """Intended wall-clock times of the slots due by now (at most `limit`), in order,
        consuming them. Slots at or past the end are never due."""
        segs = self._segments
        if now_mono_ns > self._seen_ns:
            self._seen_ns = now_mono_ns
        if len(segs) > 1 and segs[1].start <= now_mono_ns:
            self._advance(now_mono_ns)
        seg = segs[0]
        if seg.paused:
            return []
        if seg.rate <= 0:
            if now_mono_ns >= self.end_mono_ns or now_mono_ns < seg.start:
                return []
            self.next_slot += limit
            return [now_mono_ns + self._offset_wall_ns] * limit
        t = self._next_t
        if t > now_mono_ns:
            return []
        stop = self._stop_of(0)
        m, off = self._m, self._offset_wall_ns
        start, clock, interval = seg.start, seg.clock, seg.interval
        out: list[int] = []
        while t <= now_mono_ns and t < stop and len(out) < limit:
            out.append(t + off)
            m += 1
            t = start + round((m - clock) * interval)
        self._m, self._next_t = m, t
        self.next_slot += len(out)
        if len(out) < limit and t >= stop and len(segs) > 1 and segs[1].start <= now_mono_ns:
            out += self.due(now_mono_ns, limit - len(out))  # the next segment has begun
        return out

    def next_mono_ns(self, window_ns: int = 0) -> int | None:
        """When the next slot is due (monotonic ns; at maximum rate: now, so a time in the past),
        None when no slot will come unless the schedule changes (paused, or past the end).
        With a window, the time of the last slot due within `window_ns` after the next one, so
        that they go out together, each at or after its own time."""
        for i, seg in enumerate(self._segments):
            stop = self._stop_of(i)
            if seg.paused:
                continue
            if seg.rate <= 0:
                return seg.start if seg.start < stop else None
            m = self._first(i)
            t = self._next_t if i == 0 else seg.slot_at(m)
            if t >= stop:
                continue
            if window_ns > 0:
                k = math.floor(window_ns * seg.rate / 1e9 + _EPS)
                if k:
                    last = seg.slot_at(m + k)
                    if last >= stop:
                        last = seg.slot_at(seg.first_at_or_after(stop) - 1)
                    return last
            return t
        return None

    def seconds_until_next(self, now_mono_ns: int) -> float:
        nxt = self.next_mono_ns()
        return 0.0 if nxt is None else max(0.0, (nxt - now_mono_ns) / 1e9)

    def finished(self, now_mono_ns: int) -> bool:
        """At or past the end with every slot before it handed out: none can come any more."""
        if now_mono_ns < self.end_mono_ns:
            return False
        self._advance(now_mono_ns)
        return not any(self._owes(i) for i in range(len(self._segments)))


def now_ns() -> tuple[int, int]:
    """(monotonic, wall) nanoseconds read back to back."""
    return time.monotonic_ns(), time.time_ns()


class PreciseEpollSelector(selectors.EpollSelector):
    """epoll rounds every timeout up to a whole millisecond, which would make each paced send
    up to 1 ms late. For short waits this selector sleeps in select() on the epoll descriptor
    itself (readable when any registered event is ready; microsecond timeout), then collects
    the events without blocking. Long waits and fd counts are unaffected.

    Even so the kernel wakes a sleeper some tens of microseconds late (more on a virtual
    machine, and after a longer sleep). The selector learns how late (`lead_s`, tracking the
    median lateness of its short sleeps), ends each short sleep that much early and spins for
    the rest, so that timers fire on time at the cost of a few microseconds of CPU per wake-up.
    Events that arrive while it sleeps end the wait at once, as before."""

    SHORT_WAIT_S = 0.005
    MAX_LEAD_S = 0.0003
    LEAD_STEP_S = 0.000001

    def __init__(self) -> None:
        super().__init__()
        self.lead_s = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None or not 0 < timeout < self.SHORT_WAIT_S:
            return super().select(timeout)
        clock = time.monotonic
        start = clock()
        nap = timeout - self.lead_s
        if nap > 0:
            try:
                ready = select.select([self.fileno()], [], [], nap)[0]
            except InterruptedError:
                ready = [True]
            if ready:
                return super().select(0)
            late = clock() - start - nap
            step = self.LEAD_STEP_S
            self.lead_s = (min(self.MAX_LEAD_S, self.lead_s + step) if late > self.lead_s
                           else max(0.0, self.lead_s - step))
        deadline = start + timeout
        while clock() < deadline:
            pass
        return super().select(0)


# Linux: prctl(PR_SET_TIMERSLACK), mallopt(M_TRIM_THRESHOLD), mallopt(M_MMAP_THRESHOLD)
_PR_SET_TIMERSLACK = 29
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 1 << 20
_TRIM_THRESHOLD = 16 << 20


def tune_process() -> None:
    """Settings of this process (and thread) that the hot path depends on, where the C library
    offers them (Linux, glibc); elsewhere nothing changes.

    - Timer slack 1 ns instead of 50 µs: the kernel may otherwise defer every timed wake-up
      of this thread by up to 50 µs to batch it with others, which makes each paced send late.
    - Heap allocations up to 1 MiB from the heap, not from mmap: asyncio reads a socket into
      a fresh 256 KiB buffer, which glibc maps, shrinks and unmaps again per read by default
      (three system calls and page faults per message received; a fifth of the CPU of a
      paced Redis worker). Free heap up to 16 MiB is kept instead of returned at once."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl, mallopt = libc.prctl, libc.mallopt
    except (OSError, AttributeError):
        return
    with contextlib.suppress(OSError, ctypes.ArgumentError):
        prctl(_PR_SET_TIMERSLACK, ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0),
              ctypes.c_ulong(0))
        mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
        mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


_CLOCK_MONOTONIC = 1  # time.monotonic_ns()'s clock on Linux
_TFD_TIMER_ABSTIME = 1


class TimerHandle:
    """A timer of PreciseTimers; cancel() keeps its callback from running."""

    __slots__ = ("callback", "cancelled", "when_ns")

    def __init__(self, when_ns: int, callback: Callable[[], object]) -> None:
        self.when_ns = when_ns
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class PreciseTimers:
    """Timers on the monotonic clock (ns) for an event loop whose own timers are only as fine
    as a millisecond (uvloop's, as libuv's). One Linux timerfd per loop is armed for the earliest
    timer at an absolute time and watched like a socket, so a paced slot costs one wake-up of
    the loop, without a system call to arm a timer per slot beyond one timerfd_settime.

    The kernel wakes a sleeper some tens of microseconds late (more on a virtual machine), so
    as PreciseEpollSelector does, the timers learn how late (`lead_ns`, tracking the median
    lateness of short sleeps), arm the fd that much early and spin for the rest."""

    SHORT_WAIT_NS = 5_000_000
    MAX_LEAD_NS = 300_000
    LEAD_STEP_NS = 1_000

    def __init__(self, loop: asyncio.AbstractEventLoop, libc: ctypes.CDLL) -> None:
        fd = libc.timerfd_create(_CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        self._fd = fd
        self._loop = loop
        self._settime = libc.timerfd_settime
        self._spec = _Itimerspec()
        self._spec_ref = ctypes.byref(self._spec)
        self._heap: list[tuple[int, int, TimerHandle]] = []
        self._seq = 0
        self._armed_at: int | None = None  # the time the fd goes off (monotonic ns)
        self._armed_from = 0  # when it was armed
        self._running = False
        self.lead_ns = 0
        self.spun_ns = 0  # time spent spinning for the rest of an early wake-up, all told
        loop.add_reader(fd, self._expired)

    def call_at(self, when_ns: int, callback: Callable[[], object]) -> TimerHandle:
        handle = TimerHandle(when_ns, callback)
        self._seq += 1
        heapq.heappush(self._heap, (when_ns, self._seq, handle))
        if not self._running and (self._armed_at is None
                                  or when_ns - self.lead_ns < self._armed_at):
            self._arm(when_ns)
        return handle

    def _arm(self, when_ns: int) -> None:
        at = max(1, when_ns - self.lead_ns)
        spec = self._spec.it_value
        spec.tv_sec, spec.tv_nsec = divmod(at, 1_000_000_000)
        self._settime(self._fd, _TFD_TIMER_ABSTIME, self._spec_ref, None)
        self._armed_at = at
        self._armed_from = time.monotonic_ns()

    def _disarm(self) -> None:
        spec = self._spec.it_value
        spec.tv_sec = spec.tv_nsec = 0
        self._settime(self._fd, _TFD_TIMER_ABSTIME, self._spec_ref, None)
        self._armed_at = None

    def _expired(self) -> None:
        # The fd is not read: arming or disarming it again, which every wake-up below ends
        # with, clears its expirations (one system call fewer per slot). A wake-up with the
        # fd armed for a later time is a readiness reported before it was re-armed: stale.
        clock = time.monotonic_ns
        now = clock()
        armed_at = self._armed_at
        if armed_at is None or now < armed_at:
            return
        self._armed_at = None
        try:
            self._run(now, armed_at)
        finally:
            heap = self._heap
            while heap and heap[0][2].cancelled:
                heapq.heappop(heap)
            if heap:
                self._arm(heap[0][0])
            else:
                self._disarm()

    def _run(self, now: int, armed_at: int) -> None:
        clock = time.monotonic_ns
        if armed_at - self._armed_from < self.SHORT_WAIT_NS:
            late = now - armed_at
            step = self.LEAD_STEP_NS
            self.lead_ns = (min(self.MAX_LEAD_NS, self.lead_ns + step) if late > self.lead_ns
                            else max(0, self.lead_ns - step))
        heap = self._heap
        while heap and heap[0][2].cancelled:
            heapq.heappop(heap)
        if heap and 0 < heap[0][0] - now <= self.MAX_LEAD_NS:
            due = heap[0][0]
            while clock() < due:
                pass
            self.spun_ns += clock() - now
            now = clock()
        self._running = True
        try:
            while heap and heap[0][0] <= now:
                handle = heapq.heappop(heap)[2]
                if handle.cancelled:
                    continue
                try:
                    handle.callback()
                except (SystemExit, KeyboardInterrupt):
                    raise
                except BaseException as exc:
                    self._loop.call_exception_handler(
                        {"message": "Exception in a precise timer's callback",
                         "exception": exc})
        finally:
            self._running = False

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._loop.remove_reader(self._fd)
        with contextlib.suppress(OSError):
            os.close(self._fd)
        self._heap.clear()


_timers: dict[asyncio.AbstractEventLoop, PreciseTimers] = {}

EVENT_LOOP_ENV = "STREAMBENCH_EVENT_LOOP"


def event_loop_kind() -> str:
    """Which event loop the load runs on: "uvloop" (libuv, with PreciseTimers) where uvloop is
    installed and the system has timerfd (Linux), else "asyncio" (the standard loop with
    PreciseEpollSelector). STREAMBENCH_EVENT_LOOP=asyncio asks for the standard one."""
    if os.environ.get(EVENT_LOOP_ENV, "").strip().lower() == "asyncio":
        return "asyncio"
    if not sys.platform.startswith("linux") or importlib.util.find_spec("uvloop") is None:
        return "asyncio"
    return "uvloop"


def precise_call_at(loop: asyncio.AbstractEventLoop, when_ns: int,
                    callback: Callable[[], object]) -> asyncio.TimerHandle | TimerHandle:
    """Call `callback` at monotonic `when_ns`, within microseconds: on the loop's PreciseTimers
    where it has them, else on its own timers (precise on PreciseEpollSelector's loop)."""
    timers = _timers.get(loop)
    if timers is not None:
        return timers.call_at(when_ns, callback)
    return loop.call_at(when_ns / 1e9, callback)


def precise_event_loop() -> asyncio.AbstractEventLoop:
    """The event loop streambench runs in, in a process tuned by tune_process(): uvloop with
    PreciseTimers (see event_loop_kind()), or the standard loop on PreciseEpollSelector. Both
    fire paced timers within a few microseconds of their time."""
    tune_process()
    if event_loop_kind() == "uvloop":
        import uvloop
        loop = uvloop.new_event_loop()
        try:
            _timers[loop] = PreciseTimers(loop, ctypes.CDLL(None, use_errno=True))
        except (OSError, AttributeError):
            loop.close()
        else:
            return loop
    return asyncio.SelectorEventLoop(PreciseEpollSelector())


def run_precise(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run() on a precise event loop."""
    loops: list[asyncio.AbstractEventLoop] = []

    def factory() -> asyncio.AbstractEventLoop:
        loops.append(precise_event_loop())
        return loops[-1]

    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(coro)
    finally:
        for loop in loops:
            timers = _timers.pop(loop, None)
            if timers is not None:
                timers.close()
