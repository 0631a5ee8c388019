"""The load generator's self-watch: CPU of the process and lateness of its event loop."""

from __future__ import annotations

import asyncio
import math
import time

from loadgen.core.ticks import LoadgenHealth
from loadgen.selfwatch import LOOP_LAG_SATURATED_MS, SelfWatch


def _block(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


async def _watched(work: float, loaded: bool = True) -> LoadgenHealth:
    watch = SelfWatch()
    watch.start()
    await asyncio.sleep(0.25)  # the probe is armed
    watch.reading(loaded)  # start a fresh interval
    _block(work)  # the event loop is held: nothing else runs meanwhile
    await asyncio.sleep(0.3)
    health = watch.reading(loaded)
    await watch.stop()
    return health


async def test_a_blocked_event_loop_is_saturation() -> None:
    health = await _watched(0.5)
    assert health.loop_lag_ms >= 400
    assert "event loop" in health.saturated and f"{health.loop_lag_ms:.0f} ms late" in health.saturated
    assert health.cpu_percent > 10  # it burnt CPU for 0.5 of the 0.8 s (less on a busy host)


async def test_an_idle_generator_is_not_saturated() -> None:
    health = await _watched(0.0)
    assert health.loop_lag_ms < LOOP_LAG_SATURATED_MS
    assert health.cpu_percent < 50
    assert health.saturated == ""


async def test_no_verdict_before_the_load_starts() -> None:
    health = await _watched(0.3, loaded=False)
    assert health.loop_lag_ms >= 200 and health.saturated == ""


def test_merge_over_processes() -> None:
    a = LoadgenHealth(40.0, 2.0, "")
    b = LoadgenHealth(95.0, 70.0, "worker CPU 95%")
    merged = LoadgenHealth.merge([a, b])
    assert merged == LoadgenHealth(135.0, 70.0, "worker CPU 95%")
    assert math.isnan(LoadgenHealth.merge([LoadgenHealth()]).cpu_percent)
