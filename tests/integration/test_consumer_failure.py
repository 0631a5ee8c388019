"""A consumer killed by an error its loop did not expect (one raised outside the receive call,
in the counting of a batch), in a real run against a local redis-server: the run says so in one
event with the consumer and the error, counts it, and the other consumer reads on."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from loadgen.core.bus import BusItem
from loadgen.core.events import RunEvent
from loadgen.core.ticks import Phase
from loadgen.core.workload import Workload
from loadgen.load import TargetLoad
from loadgen.pacing import now_ns
from loadgen.platforms import resolve_target

pytestmark = pytest.mark.integration


async def eventually(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def failures(published: list[BusItem]) -> list[RunEvent]:
    return [e for e in published if isinstance(e, RunEvent) and e.kind == "consumer-failed"]


async def test_a_consumer_that_dies_counting_a_batch_says_why(no_leftover_redis: None) -> None:
    target = resolve_target("redis:runtime=local")
    workload = Workload(name="consumer-failure", rate=500, duration_s=30, warmup_s=0,
                        partitions=1, consumers=2, message_size=100)
    published: list[BusItem] = []
    load = TargetLoad(0, target.label, target, workload, "consumerfail", False, False,
                      published.append)
    try:
        await load.start(lambda _msg: None)
        assert len(load.consumers) == 2
        # consumer 1 without its slot record: its first batch fails in the counting, outside
        # the receive call's own error handling (a consumer added this way once died silently)
        load._slot_consumed.pop()
        mono, wall = now_ns()
        load.start_load(mono, wall, mono + 30_000_000_000)
        assert await eventually(lambda: bool(failures(published)), 15), published
        (event,) = failures(published)
        assert event.target == target.label
        assert event.detail == ("consumer 1 of streambench-sub-0 (topic 0): IndexError: list "
                                "index out of range; it reads no more messages")
        assert load.totals.consumers_failed == 1
        assert load._consumer_tasks[1].done() and not load._consumer_tasks[0].done()

        # the other consumer goes on reading; the run's counting goes on (the record restored)
        load._slot_consumed.append(0)
        before = load.totals.consumed
        assert await eventually(lambda: load.totals.consumed > before + 200, 10)
        tick = await load.tick(1, time.time_ns(), Phase.MEASURING, 1.0)
        assert tick.consumers[0].consumed > 0 and tick.consumers[1].consumed == 0
        assert len(failures(published)) == 1  # said once
    finally:
        await load.close()
    # the end of the run cancels the living consumer: not a failure
    assert len(failures(published)) == 1 and load.totals.consumers_failed == 1
