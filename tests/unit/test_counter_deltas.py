"""Counter deltas: a counter's growth per sample, and no growth lost to a sample that failed
half-way (loadgen/core/collector.py)."""

from __future__ import annotations

import asyncio

import pytest

from loadgen.core.collector import CounterDeltas


def test_growth_per_reading_and_a_reset():
    d = CounterDeltas()
    assert [d.delta("n", v) for v in (10, 15, 15, 40, 3, 8)] == [0, 5, 0, 25, 0, 5]


def test_a_failed_block_keeps_no_reading():
    d = CounterDeltas()
    d.delta("a", 100)
    d.delta("b", 7)
    with pytest.raises(TimeoutError), d.staged():
        assert d.delta("a", 160) == 60
        raise TimeoutError  # the request after it did not answer
    with d.staged():
        assert d.delta("a", 230) == 130  # the whole growth since the last kept reading
        assert d.delta("b", 9) == 2
    assert d.delta("a", 231) == 1  # kept this time


def test_a_cancelled_sample_keeps_no_reading():
    """The run loop gives a sample a deadline; a sample cancelled in its second request keeps
    nothing of the first."""
    d = CounterDeltas()
    d.delta("stored", 0)
    stalled = asyncio.Event()

    async def sample(value: float) -> float:
        with d.staged():
            got = d.delta("stored", value)
            await stalled.wait()
            return got

    async def scenario() -> float:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(sample(500), 0.05)
        stalled.set()
        return await sample(800)

    assert asyncio.run(scenario()) == 800
