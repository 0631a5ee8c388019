"""Live changes of a target's load (rate, producers and consumers paused and resumed) on
TargetLoad, with in-memory producers and consumers: no broker, real timers."""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time
from collections.abc import Callable, Sequence

import pytest

from loadgen.core.bus import BusItem
from loadgen.core.collector import Collector, Reading
from loadgen.core.driver import Acknowledged, Consumer, OutMessage, Producer, ReceivedBatch
from loadgen.core.events import RunEvent
from loadgen.core.interventions import Intervention
from loadgen.core.workload import Workload
from loadgen.load import TargetLoad
from loadgen.pacing import now_ns, run_precise
from loadgen.platforms import resolve_target

MS = 1_000_000


class MemoryProducer(Producer):
    """Keeps what it is handed; the broker answers after `ack_s`."""

    max_in_flight = 4

    def __init__(self, submits: bool, ack_s: float = 0.0002) -> None:
        self.submits = submits
        self.ack_s = ack_s
        self.sent: list[int] = []  # intended wall times, in the order handed over
        self.handed: list[int] = []  # monotonic time of each hand-over

    def _take(self, batch: Sequence[OutMessage]) -> None:
        self.sent += [m.intended_ns for m in batch]
        self.handed.append(time.monotonic_ns())

    async def send_batch(self, batch: Sequence[OutMessage]) -> None:
        self._take(batch)
        await asyncio.sleep(self.ack_s)

    def submit(self, batch: Sequence[OutMessage], done: Acknowledged) -> None:
        self._take(batch)
        asyncio.get_running_loop().call_later(self.ack_s, done, None)

    async def close(self) -> None:
        pass


class MemoryConsumer(Consumer):
    def __init__(self) -> None:
        self.calls = 0

    async def receive(self) -> ReceivedBatch | None:
        self.calls += 1
        await asyncio.sleep(0.005)
        return ReceivedBatch(time.time_ns(), [time.time_ns() - MS], 100)

    async def close(self) -> None:
        pass


def make_load(rate: float, producers: int = 1, share: tuple[int, int] = (0, 1),
              submits: bool = True, consumers: int = 0,
              window_ms: float | None = None) -> tuple[TargetLoad, list[BusItem]]:
    published: list[BusItem] = []
    target = resolve_target("redis:runtime=local")
    workload = Workload(name="control", rate=rate, producers=producers, consumers=max(1, consumers))
    if window_ms is not None:
        workload = workload.with_overrides(pacing_window_ms=window_ms)
    load = TargetLoad(0, target.label, target, workload, "test", False, False, published.append,
                      share=share)
    for i in range(producers):
        if i % share[1] == share[0]:
            load.producers.append(MemoryProducer(submits))
            load._producer_numbers.append(i)
    for i in range(consumers):  # what the load's own start-up records of each consumer
        load.consumers.append(MemoryConsumer())
        load._consumer_specs.append(("topic-0", "sub-0", i))
        load._slot_consumed.append(0)
    return load, published


def events(published: list[BusItem]) -> list[tuple[str, str]]:
    return [(e.kind, e.detail) for e in published if isinstance(e, RunEvent)]


async def eventually(condition: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    """Whether `condition` holds within `timeout_s`, looked at every 5 ms."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.005)
    return True


async def run_for(load: TargetLoad, seconds: float) -> int:
    mono, wall = now_ns()
    load.start_load(mono, wall, mono + int(seconds * 1e9))
    return wall - mono


def evenly(times: list[int], gap: int) -> bool:
    """Slots `gap` ns apart. A slot's time is the nearest ns to its exact time, so one gap may
    be 1 ns more or less than `gap` when a re-anchored schedule's clock is fractional; the
    times do not drift."""
    return (len(times) > 1 and all(abs(b - a - gap) <= 1 for a, b in itertools.pairwise(times))
            and abs(times[-1] - times[0] - (len(times) - 1) * gap) <= 1)


def sent(load: TargetLoad) -> list[int]:
    return [t for p in load.producers for t in p.sent]  # type: ignore[attr-defined]


@pytest.mark.parametrize("submits", [True, False])
async def test_a_rate_change_wakes_the_producer_at_once(submits: bool) -> None:
    load, published = make_load(rate=0.5, submits=submits)
    offset = await run_for(load, 30)
    try:
        await asyncio.sleep(0.05)
        assert len(sent(load)) == 1  # slot 0; the next is 2 s away
        before = time.monotonic_ns()
        assert load.set_rate(1000) == (0.5, 1000.0, 0)
        await asyncio.sleep(0.2)
        after = [t - offset for t in sent(load)[1:]]
        # the producer did not sleep on until its old next slot: it follows the new rate now
        assert 150 <= len(after) <= (time.monotonic_ns() - before) // MS + 1
        assert before <= after[0] <= before + 2 * MS
        assert evenly(after, MS)
        assert events(published) == []  # the run records each change, once per target
    finally:
        await load.close()


async def test_pause_and_resume_producers() -> None:
    load, published = make_load(rate=1000)
    offset = await run_for(load, 30)
    try:
        await asyncio.sleep(0.1)
        load.pause_producers()
        load.pause_producers()  # already paused: nothing changes
        paused_at = time.monotonic_ns()
        await asyncio.sleep(0.01)
        count = len(sent(load))
        await asyncio.sleep(0.2)
        assert len(sent(load)) == count  # nothing while paused
        assert max(sent(load)) - offset < paused_at
        resuming_at = time.monotonic_ns()  # the process can be descheduled within the call
        load.resume_producers()
        resumed_at = time.monotonic_ns()
        await asyncio.sleep(0.1)
        new = [t - offset for t in sent(load)[count:]]
        # no burst of the paused interval's slots: all come after the resume, 1 ms apart
        assert 70 <= len(new) <= (time.monotonic_ns() - resuming_at) // MS + 2
        assert resuming_at - MS <= new[0] <= resumed_at + 2 * MS
        assert evenly(new, MS)
        assert events(published) == []
    finally:
        await load.close()


async def test_paused_producers_finish_at_the_end() -> None:
    load, _ = make_load(rate=100)
    await run_for(load, 0.3)
    load.pause_producers()
    started = time.monotonic()
    await asyncio.wait_for(load.stop_producers(), 2)
    # stopping wakes a paused producer too (one left paused would hold the stop for the whole
    # wait_for above): well under the 2 s, with room for a busy machine
    assert time.monotonic() - started < 1.0
    await load.close()


async def test_each_process_takes_its_share_of_a_new_rate() -> None:
    # 4 producers over 2 processes: this one runs producers 1 and 3
    load, published = make_load(rate=400, producers=4, share=(1, 2))
    offset = await run_for(load, 30)
    try:
        assert load.set_rate(4000) == (400.0, 4000.0, 0)
        changed = time.monotonic_ns()
        await asyncio.sleep(0.3)
        for p in load.producers:
            times = [t - offset for t in p.sent if t - offset > changed + 2 * MS]  # type: ignore[attr-defined]
            # each producer's share: 4,000 / 4 = 1,000 msg/s
            assert evenly(times, MS), [b - a for a, b in itertools.pairwise(times)][:20]
        assert published == []  # the first process records the change, not this one
    finally:
        await load.close()


async def test_switch_to_maximum_rate_and_back() -> None:
    load, published = make_load(rate=100, submits=False)
    offset = await run_for(load, 30)
    try:
        await asyncio.sleep(0.05)
        slow = len(sent(load))
        assert load.set_rate(0) == (100.0, 0.0, 0)
        await asyncio.sleep(0.1)
        fast = len(sent(load)) - slow
        assert fast > 1000  # as fast as acknowledgements allow
        assert load.set_rate(500) == (0.0, 500.0, 0)
        changed = time.monotonic_ns()
        await asyncio.sleep(0.1)
        paced = [t - offset for t in sent(load) if t - offset > changed + MS]
        assert 40 <= len(paced) <= (time.monotonic_ns() - changed) // (2 * MS) + 1
        assert all(b - a == 2 * MS for a, b in itertools.pairwise(paced))
        assert events(published) == []
    finally:
        await load.close()


async def test_pause_and_resume_consumers() -> None:
    load, published = make_load(rate=100, consumers=1)
    await run_for(load, 30)
    consumer = load.consumers[0]
    assert isinstance(consumer, MemoryConsumer)
    try:
        # on a busy machine the consumer's task may be slow to get going: wait for it, bounded
        assert await eventually(lambda: consumer.calls >= 2)
        load.pause_consumers()
        await asyncio.sleep(0.01)  # the receive under way finishes, and is counted
        calls, consumed = consumer.calls, load.totals.consumed
        await asyncio.sleep(0.1)
        assert consumer.calls == calls and load.totals.consumed == consumed
        load.resume_consumers()
        assert await eventually(lambda: consumer.calls > calls and load.totals.consumed > consumed)
        assert events(published) == []
    finally:
        await load.close()


async def test_control_says_what_changed() -> None:
    load, published = make_load(rate=100, consumers=1)
    await run_for(load, 30)
    try:
        assert await load.control(Intervention("rate", rate=250.0)) == "100 msg/s → 250 msg/s"
        assert await load.control(Intervention("rate", rate=0.0)) == "250 msg/s → max"
        assert await load.control(Intervention("producers", state="stop")) == "running → stopped"
        assert await load.control(Intervention("producers", state="stop")) == "stopped → stopped"
        assert await load.control(Intervention("producers", state="start")) == "stopped → running"
        assert await load.control(Intervention("consumers", state="stop")) == "running → stopped"
        assert await load.control(Intervention("consumers", state="start")) == "stopped → running"
        assert events(published) == []
    finally:
        await load.close()


class ScriptedCollector(Collector):
    """Answers each sample as scripted: an exception to raise, or a reading."""

    name = "scripted"

    def __init__(self, script: list[BaseException | None]) -> None:
        self.script = list(script)

    async def sample(self) -> Reading:
        outcome = self.script.pop(0)
        if outcome is not None:
            raise outcome
        return Reading()


def test_a_failing_collector_is_said_once_per_spell_and_its_return_with_the_count() -> None:
    """A dead broker's telemetry fails at every tick: one collector-error when it starts failing
    (and one more when it fails another way), none while it fails the same way, then a
    collector-recovered that counts the failed samples."""
    load, published = make_load(100)
    refused = ConnectionRefusedError("connection refused")
    load.collectors.append(ScriptedCollector([refused, refused, refused, TimeoutError(), None,
                                              None, refused, None]))

    async def sample_all() -> None:
        for _ in range(8):
            await load._sample()

    asyncio.run(sample_all())
    said = events(published)
    assert [kind for kind, _ in said] == ["collector-error", "collector-error",
                                           "collector-recovered", "collector-error",
                                           "collector-recovered"], said
    assert said[0][1] == "scripted: ConnectionRefusedError: connection refused"
    assert said[1][1] == "scripted: TimeoutError: no answer within 0.9 s"
    assert said[2][1].startswith("scripted: answering again after 4 failed samples over ")
    assert said[4][1].startswith("scripted: answering again after 1 failed sample over ")


def test_failing_sends_are_said_once_per_spell_and_their_end_with_the_count() -> None:
    """Sends that keep failing give one send-error when they start (another when they fail
    another way), none per failed batch, and a send-recovered with the count once a whole
    interval had acknowledgements and no failure; failures mixed with acknowledgements in an
    interval (some partitions failing) keep the spell going."""
    load, published = make_load(100)
    timeout, refused = TimeoutError("no answer"), ConnectionRefusedError("refused")
    load._sent(3, time.time_ns(), timeout)
    load._sent(3, time.time_ns(), timeout)
    load._sends_settled(failed=6, acknowledged=0)
    load._sent(2, time.time_ns(), refused)
    load._sent(5, time.time_ns(), None)
    load._sends_settled(failed=2, acknowledged=5)  # mixed: still failing
    load._sent(5, time.time_ns(), None)
    load._sends_settled(failed=0, acknowledged=0)  # an idle interval proves nothing
    load._sends_settled(failed=0, acknowledged=5)
    load._sent(1, time.time_ns(), timeout)
    load._sends_settled(failed=0, acknowledged=4)  # the next interval ends it
    said = events(published)
    assert [kind for kind, _ in said] == ["send-error", "send-error", "send-recovered",
                                           "send-error", "send-recovered"], said
    assert said[0][1] == "TimeoutError: no answer"
    assert said[1][1] == "ConnectionRefusedError: refused"
    assert said[2][1].startswith("sends acknowledged again after 8 failed messages over ")
    assert said[4][1].startswith("sends acknowledged again after 1 failed message over ")
    assert load.totals.send_errors == 9 and load.totals.produced == 10


def test_a_spell_of_ever_different_send_errors_says_a_few() -> None:
    load, published = make_load(100)
    for i in range(20):
        load._sent(1, time.time_ns(), RuntimeError(f"failure {i}"))
    said = events(published)
    assert [d for _, d in said] == [f"RuntimeError: failure {i}" for i in range(4)] + [
        "RuntimeError: failure 4 (no other send error said until sends succeed again)"]


class SlowProducer(MemoryProducer):
    """Each hand-over holds the event loop for `write_s`, as a write to a socket can on a busy
    machine; keeps each batch's size and hand-over time."""

    def __init__(self, write_s: float) -> None:
        super().__init__(submits=True)
        self.write_s = write_s
        self.batches: list[tuple[int, list[int]]] = []  # (monotonic hand-over, intended walls)

    def _take(self, batch: Sequence[OutMessage]) -> None:
        handed = time.monotonic_ns()
        super()._take(batch)
        self.batches.append((handed, [m.intended_ns for m in batch]))
        end = handed + int(self.write_s * 1e9)
        while time.monotonic_ns() < end:
            pass


def paced_batches(rate: float, window_ms: float, write_s: float,
                  seconds: float = 0.4) -> tuple[list[int], int]:
    """The sizes of one producer's batches over `seconds` on the load processes' event loop
    (whose timers fire within microseconds; the first batch and the last left out: slot 0 goes
    alone, the end cuts the last window short) and how many slots were handed over before
    their time."""
    return run_precise(_paced_batches(rate, window_ms, write_s, seconds))


async def _paced_batches(rate: float, window_ms: float, write_s: float,
                         seconds: float) -> tuple[list[int], int]:
    load, _ = make_load(rate=rate, window_ms=window_ms)
    producer = SlowProducer(write_s)
    load.producers[0] = producer
    offset = await run_for(load, seconds)
    try:
        # the schedule's end, every batch answered (a sleep of `seconds` may end a little
        # before the last slots on a busy machine, and stopping then would cut them)
        await asyncio.wait_for(asyncio.gather(*(p.finished for p in load._pacers)), seconds + 5)
        await asyncio.wait_for(load.stop_producers(), 5)
    finally:
        await load.close()
    early = sum(t - offset > handed for handed, times in producer.batches for t in times)
    assert sum(len(times) for _, times in producer.batches) == round(rate * seconds)
    return [len(times) for _, times in producer.batches[1:-1]], early


def test_slots_due_within_the_window_go_out_together_never_early() -> None:
    # a slot every 0.2 ms: the next one and the four after it (0.8 ms) make one batch
    # (a wake-up the machine makes late merges more slots into one batch: beside other work,
    # 78 % of the batches were of 5, so the typical batch is checked, by the median)
    sizes, early = paced_batches(5000, 0.8, write_s=0.0)
    assert early == 0
    assert len(sizes) >= 40 and statistics.median(sizes) == 5, sizes
    sizes, early = paced_batches(5000, 0.0, write_s=0.0)  # no window: one at a time
    assert early == 0
    assert statistics.median(sizes) == 1, sizes


def test_a_slot_due_during_a_slow_hand_over_waits_for_its_window() -> None:
    # each hand-over takes 0.3 ms, longer than a slot's 0.2 ms: the slot that falls due meanwhile
    # goes out with the next window's, not alone right behind the batch (a write of its own)
    sizes, early = paced_batches(5000, 0.8, write_s=0.0003)
    assert early == 0
    assert len(sizes) >= 40 and 1 not in sizes, sizes
