"""The process-tree collector with several brokers: each broker's CPU, memory and disk writes
beside the sum, on real processes (one busy and writing, one idle)."""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
from collections.abc import Iterator

import psutil
import pytest

from collectors.process import ProcessResources

# busy: spins, and writes 1 MiB to a file of its own and fsyncs it every 0.1 s
BUSY = """import os, sys, time
end = time.time() + 30
with open(sys.argv[1], "wb") as f:
    while time.time() < end:
        f.write(b"x" * 2**20)
        f.flush()
        os.fsync(f.fileno())
        until = time.time() + 0.1
        while time.time() < until:
            pass
"""


@pytest.fixture
def two_brokers(tmp_path) -> Iterator[tuple[int, int]]:
    busy = subprocess.Popen([sys.executable, "-c", BUSY, str(tmp_path / "busy.data")])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        yield busy.pid, idle.pid
    finally:
        for p in (busy, idle):
            p.kill()
            p.wait(5)


async def test_each_broker_has_its_own_figures_and_they_add_up(two_brokers) -> None:
    collector = ProcessResources(two_brokers)
    await collector.start()
    await collector.sample()  # the disk counters' first reading
    await asyncio.sleep(1.0)
    reading = await collector.sample()
    b = reading.broker
    assert set(b) == {f"broker.broker-{n}.{figure}" for n in (1, 2) for figure in (
        "cpu_percent", "memory_bytes", "disk_read_bytes", "disk_write_bytes")}
    # the writer's bytes, about 10 MiB in the second, are its own; the idle one wrote none
    assert b["broker.broker-1.disk_write_bytes"] >= 2**20
    assert b["broker.broker-2.disk_write_bytes"] == 0
    assert b["broker.broker-1.disk_write_bytes"] + b["broker.broker-2.disk_write_bytes"] \
        == reading.disk_write_bytes
    assert reading.cpu_percent is not None and reading.memory_bytes is not None
    assert math.isclose(b["broker.broker-1.cpu_percent"] + b["broker.broker-2.cpu_percent"],
                        reading.cpu_percent)
    assert b["broker.broker-1.memory_bytes"] + b["broker.broker-2.memory_bytes"] \
        == reading.memory_bytes
    assert b["broker.broker-1.cpu_percent"] > 20 > b["broker.broker-2.cpu_percent"]
    # the idle broker's memory as psutil reads it (within what the interpreter moves meanwhile)
    rss = psutil.Process(two_brokers[1]).memory_info().rss
    assert abs(b["broker.broker-2.memory_bytes"] - rss) < 2_000_000


async def test_one_broker_reports_the_sum_alone(two_brokers) -> None:
    collector = ProcessResources(two_brokers[1:])
    await collector.start()
    reading = await collector.sample()
    assert reading.broker == {} and reading.memory_bytes


@pytest.fixture
def supervisor() -> Iterator[int]:
    """A shell that runs one `sleep` child at a time and starts another when it ends."""
    shell = subprocess.Popen(["/bin/sh", "-c", "while :; do sleep 60 & wait $!; done"])
    try:
        yield shell.pid
    finally:
        for child in psutil.Process(shell.pid).children(recursive=True):
            child.kill()
        shell.kill()
        shell.wait(5)


async def _one_child(root: int) -> int:
    for _ in range(200):
        children = psutil.Process(root).children()
        if len(children) == 1:
            return children[0].pid
        await asyncio.sleep(0.02)
    raise AssertionError("the shell started no child")


async def test_children_are_listed_again_only_when_due_or_when_one_ended(
        supervisor, monkeypatch) -> None:
    listings = 0
    children = psutil.Process.children

    def counted(self: psutil.Process, recursive: bool = False) -> list[psutil.Process]:
        nonlocal listings
        listings += 1
        return children(self, recursive=recursive)

    first = await _one_child(supervisor)
    monkeypatch.setattr(psutil.Process, "children", counted)
    collector = ProcessResources((supervisor,))
    await collector.start()
    for _ in range(3):
        await collector.sample()
    assert set(collector._procs) == {supervisor, first}
    assert listings == 1  # once, not once per sample

    # one handle: the shell reaps its child at once, after which a new handle cannot be made
    ended = psutil.Process(first)
    ended.kill()
    ended.wait(5)
    second = await _one_child(supervisor)
    assert second != first
    await collector.sample()  # a child ended: listed again, its successor counted at once
    assert set(collector._procs) == {supervisor, second}

    monkeypatch.setattr("collectors.process.RESCAN_S", 0.0)
    before = listings
    await collector.sample()
    await collector.sample()
    assert listings == before + 2  # due every sample now
