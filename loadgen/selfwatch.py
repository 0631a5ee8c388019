"""The load generator watching itself: a worker's CPU and how late its event loop wakes up.

The generator shares the host with the brokers it measures. When a worker process runs out of
CPU, or its event loop cannot wake on time, sends go out late and receive timestamps are taken
late: the latencies and rates then describe the generator, not the broker. Each tick says so
(`LoadgenHealth.saturated`), live and in the run files."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time

from loadgen.core.ticks import LoadgenHealth

CPU_SATURATED_PERCENT = 90.0  # of one core: a Python worker runs its event loop on one
LOOP_LAG_SATURATED_MS = 50.0  # an event loop this late delays sends and receive timestamps
PROBE_INTERVAL_S = 0.1


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system  # every thread of the process (client libraries' threads too)


class SelfWatch:
    """CPU and event-loop lateness of this process between two readings."""

    def __init__(self) -> None:
        self._cpu = _cpu_seconds()
        self._mono = time.monotonic()
        self._lag_s = 0.0
        self._probe: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start probing the event loop (a sleep of PROBE_INTERVAL_S, timed)."""
        if self._probe is None:
            self._probe = asyncio.create_task(self._measure_lag())

    async def _measure_lag(self) -> None:
        while True:
            due = time.monotonic() + PROBE_INTERVAL_S
            await asyncio.sleep(PROBE_INTERVAL_S)
            self._lag_s = max(self._lag_s, time.monotonic() - due)

    def reading(self, loaded: bool) -> LoadgenHealth:
        """Figures since the previous reading; `loaded`: the load is on, so a verdict counts."""
        cpu, mono = _cpu_seconds(), time.monotonic()
        elapsed = mono - self._mono
        cpu_percent = (cpu - self._cpu) / elapsed * 100 if elapsed > 0 else float("nan")
        lag_ms = self._lag_s * 1000 if self._probe is not None else float("nan")
        self._cpu, self._mono, self._lag_s = cpu, mono, 0.0
        reasons = []
        if loaded and cpu_percent >= CPU_SATURATED_PERCENT:
            reasons.append(f"worker CPU {cpu_percent:.0f}%")
        if loaded and lag_ms >= LOOP_LAG_SATURATED_MS:
            reasons.append(f"event loop {lag_ms:.0f} ms late")
        return LoadgenHealth(cpu_percent, lag_ms, ", ".join(reasons))

    async def stop(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe
            self._probe = None
