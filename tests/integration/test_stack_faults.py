"""Stack.fault against real local brokers: pause, resume, kill, start and restart of a local
redis-server, of one broker of a three-node Kafka KRaft cluster, and of a Pulsar standalone;
each an event, down() still stops everything (a paused or restarted node too). An existing
cluster refuses faults; an unknown broker is an error naming the brokers there are."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import redis.asyncio as aioredis
from aiokafka.errors import KafkaError
from redis.exceptions import RedisError

from collectors.process import ProcessResources
from compose.kafka import KafkaLocalStack, broker_count
from compose.net import Failure, classify
from compose.pulsar import AdminError, PulsarAdmin, PulsarLocalStack
from compose.redis import RedisExternalStack, RedisLocalStack
from loadgen.core.errors import StackError
from loadgen.core.stack import FAULTS, Stack, StackContext
from loadgen.platforms import resolve_target

pytestmark = pytest.mark.integration


def progress(message: str) -> None:
    sys.stderr.write(f"{message}\n")


class Events:
    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def __call__(self, kind: str, detail: str) -> None:
        self.items.append((kind, detail))

    @property
    def kinds(self) -> list[str]:
        return [k for k, _ in self.items]


def attach(stack: Stack, events: Events) -> None:
    stack.attach(StackContext(run_id="faults-test", events=events))


def gone(pids: set[int], timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = set()
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.add(pid)
            except psutil.Error:
                pass
        if not alive:
            return True
        time.sleep(0.1)
    return False


def descendants() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


# ---- Redis ------------------------------------------------------------------------------------

async def redis_call(port: int, timeout_s: float = 1.0) -> tuple[str | None, int]:
    """(the key written before the faults, the stream's length); raises when redis does not
    answer within timeout_s."""
    conn = aioredis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=timeout_s,
                          socket_timeout=timeout_s, decode_responses=True)
    try:
        return await conn.get("before"), await conn.xlen("events")
    finally:
        await conn.aclose()


async def redis_failure(port: int) -> Failure | None:
    try:
        await asyncio.wait_for(redis_call(port), 3.0)
    except (RedisError, OSError, TimeoutError) as exc:
        return classify(exc)
    return None


def test_redis_pause_resume_kill_start_restart():
    events = Events()
    stack = RedisLocalStack(resolve_target("redis:runtime=local,aof,fsync=always"), "redis")
    attach(stack, events)
    started: set[int] = set()

    async def scenario() -> None:
        await stack.up(progress)
        await stack.ready(30, progress)
        desc = stack.describe()
        port = int(desc.endpoints["redis"].rsplit(":", 1)[1])
        (first_pid,) = desc.pids
        started.add(first_pid)
        assert stack.brokers() == ["redis"]
        conn = aioredis.Redis(host="127.0.0.1", port=port)
        await conn.set("before", "kept")
        await conn.xadd("events", {"n": "1"})
        await conn.aclose()
        resources = ProcessResources(desc.pids)
        await resources.start()

        await stack.fault("pause", "redis")
        assert await redis_failure(port) is Failure.TIMED_OUT  # it accepts, never answers
        assert stack.describe().pids == (first_pid,)
        await stack.fault("resume", "redis")
        assert await redis_call(port) == ("kept", 1)

        await stack.fault("kill", "redis")
        assert await redis_failure(port) is Failure.REFUSED
        assert stack.describe().pids == ()
        assert (await resources.sample()).memory_bytes is None  # the gone pid is skipped

        await stack.fault("start", "redis")  # waits until it answers again
        assert await redis_call(port) == ("kept", 1)  # same port, its AOF replayed
        (second_pid,) = stack.describe().pids
        started.add(second_pid)
        assert second_pid != first_pid
        sample = await resources.sample()  # the collector found the new process
        assert sample.memory_bytes and sample.memory_bytes > 0

        await stack.fault("restart", "redis")
        assert await redis_call(port) == ("kept", 1)
        (third_pid,) = stack.describe().pids
        started.add(third_pid)
        assert third_pid != second_pid

        with pytest.raises(StackError, match=r"no broker 'kafka-1'; brokers: redis"):
            await stack.fault("kill", "kafka-1")
        with pytest.raises(StackError, match=r"unknown fault 'explode'; faults: pause, resume"):
            await stack.fault("explode", "redis")
        with pytest.raises(StackError, match="it is running"):
            await stack.fault("start", "redis")

        # down() with the broker paused: it is let go on and stopped at once, not after a
        # grace time
        await stack.unpause("redis")  # docker's word for resume, as a method
        await stack.pause("redis")
        began = time.monotonic()
        await stack.down()
        assert time.monotonic() - began < 5

    try:
        asyncio.run(scenario())
    finally:
        asyncio.run(stack.down())
    assert gone(started), "a redis-server the test started is still running"
    assert events.kinds == ["fault-pause", "fault-resume", "fault-kill", "fault-start",
                            "fault-restart", "fault-resume", "fault-pause"]
    assert "SIGSTOP" in events.items[0][1] and "pid" in events.items[3][1]


def test_an_existing_cluster_refuses_faults():
    stack = RedisExternalStack(resolve_target("redis@127.0.0.1:6379"), "redis@127.0.0.1:6379")
    assert stack.brokers() == []
    for action in FAULTS:
        with pytest.raises(StackError, match=r"faults need a broker streambench started \(local or "
                                             r"docker runtime\)"):
            asyncio.run(stack.fault(action, "redis"))


# ---- Kafka, three KRaft nodes -----------------------------------------------------------------

@pytest.fixture(scope="module")
def kafka3() -> Iterator[tuple[KafkaLocalStack, Events]]:
    events = Events()
    stack = KafkaLocalStack(resolve_target("kafka:runtime=local,brokers=3,heap=384M"), "kafka3",
                            zookeeper=False)
    attach(stack, events)
    before = descendants()
    try:
        asyncio.run(stack.up(progress))
        asyncio.run(stack.ready(150, progress))
        yield stack, events
    finally:
        started = descendants() - before
        asyncio.run(stack.down())
        assert gone(started), "a Kafka node the test started is still running"


def _bootstrap(stack: KafkaLocalStack, skip: int | None = None) -> str:
    servers = stack.describe().endpoints["kafka"].split(",")
    return ",".join(s for i, s in enumerate(servers) if i != skip)


async def _count(bootstrap: str) -> int:
    try:
        return await broker_count(bootstrap, 10.0)
    except (KafkaError, OSError, TimeoutError):
        return -1


async def _count_settles_at(bootstrap: str, brokers: int, timeout_s: float = 30.0) -> int:
    """The brokers a bootstrap server lists, once it lists `brokers` or the time is up
    (metadata reaches the other brokers a moment after the restarted one has it)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while (count := await _count(bootstrap)) != brokers and loop.time() < deadline:
        await asyncio.sleep(0.5)
    return count


def test_kafka_kill_one_broker_of_three_and_start_it(kafka3):
    stack, events = kafka3
    assert stack.brokers() == ["broker-1", "broker-2", "broker-3"]
    pids = stack.describe().pids
    assert len(pids) == 3

    async def scenario() -> None:
        await stack.fault("kill", "broker-2")
        assert stack.describe().pids == (pids[0], pids[2])
        # the other two still answer metadata and list each other (the quorum keeps 2 of 3
        # voters); on a busy machine a survivor can miss its heartbeats while a new controller
        # is elected and is fenced for a moment, so the listing is given time to settle
        assert await _count_settles_at(_bootstrap(stack, skip=1), 2) == 2
        await stack.fault("start", "broker-2")  # waits until it lists all three itself
        assert await _count_settles_at(_bootstrap(stack), 3) == 3
        assert await _count_settles_at(_bootstrap(stack, skip=0), 3) == 3

    asyncio.run(scenario())
    now = stack.describe().pids
    assert len(now) == 3 and now[0] == pids[0] and now[2] == pids[2] and now[1] != pids[1]
    assert events.kinds[-2:] == ["fault-kill", "fault-start"]
    assert "broker-2" in events.items[-1][1]


def _all_up(stack: KafkaLocalStack) -> None:
    """Start any broker an earlier test of the module left down, so that each test starts from
    three running brokers."""
    for name in stack.down_brokers():
        asyncio.run(stack.fault("start", name))


def test_kafka_restart_one_broker(kafka3):
    """A graceful stop (controlled shutdown) and a start: the cluster has three brokers again."""
    stack, events = kafka3
    _all_up(stack)
    pids = stack.describe().pids
    asyncio.run(stack.restart("broker-3"))
    assert asyncio.run(_count(_bootstrap(stack))) == 3
    now = stack.describe().pids
    assert now[:2] == pids[:2] and now[2] != pids[2]
    assert events.kinds[-1] == "fault-restart"


def test_kafka_unknown_broker(kafka3):
    stack, _ = kafka3
    with pytest.raises(StackError, match=r"no broker 'kafka-2'; brokers: broker-1, broker-2, broker-3"):
        asyncio.run(stack.fault("pause", "kafka-2"))


# ---- Pulsar standalone --------------------------------------------------------------------------

async def _admin_answers(admin: PulsarAdmin) -> bool:
    try:
        await admin.get("/admin/v2/clusters")
        return True
    except (OSError, AdminError, ValueError, urllib.error.URLError):
        return False


def test_pulsar_pause_and_resume():
    events = Events()
    stack = PulsarLocalStack(resolve_target("pulsar:runtime=local,heap=512m"), "pulsar")
    attach(stack, events)
    before = descendants()
    started: set[int] = set()

    async def scenario() -> None:
        await stack.up(progress)
        await stack.ready(120, progress)
        started.update(descendants() - before)
        admin = PulsarAdmin(stack.describe().endpoints["pulsar-admin"], timeout_s=2.0)
        assert stack.brokers() == ["pulsar"]
        assert await _admin_answers(admin)
        await stack.fault("pause", "pulsar")
        assert not await _admin_answers(admin)
        await stack.fault("resume", "pulsar")
        deadline = time.monotonic() + 30
        while not await _admin_answers(admin):
            assert time.monotonic() < deadline, "the admin API did not answer after resume"
            await asyncio.sleep(0.5)

    try:
        asyncio.run(scenario())
    finally:
        asyncio.run(stack.down())
    assert events.kinds == ["fault-pause", "fault-resume"]
    assert started and gone(started), "a Pulsar process the test started is still running"


def test_a_pause_returns_once_every_thread_has_stopped(tmp_path):
    """A process whose threads all spin: when pause_tree returns, every thread of it is in the
    stopped state and its CPU time stands still; SIGCONT lets it run on. (A SIGSTOP takes
    effect when one thread acts on it; before, a busy broker's other threads could still
    answer a request sent right after the pause.)"""
    from compose.process import _all_stopped, pause_tree, signal_tree, start_process

    spin = ("import threading, time\n"
            "def spin():\n"
            "    end = time.monotonic() + 60\n"
            "    while time.monotonic() < end: pass\n"
            "for _ in range(8): threading.Thread(target=spin).start()\n")
    proc = start_process([sys.executable, "-c", spin], tmp_path / "spin.log")
    try:
        time.sleep(0.5)  # the threads are running
        assert not _all_stopped([proc.pid])
        assert pause_tree(proc)
        tasks = Path(f"/proc/{proc.pid}/task")
        states = {(tasks / t / "stat").read_bytes().rpartition(b")")[2].split()[0]
                  for t in os.listdir(tasks)}
        assert states == {b"T"}, states
        cpu = psutil.Process(proc.pid).cpu_times()
        time.sleep(0.3)
        assert psutil.Process(proc.pid).cpu_times() == cpu
        signal_tree(proc, signal.SIGCONT)
        time.sleep(0.3)
        assert psutil.Process(proc.pid).cpu_times().user > cpu.user
    finally:
        proc.kill()
        proc.wait(5)
