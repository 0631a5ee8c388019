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
