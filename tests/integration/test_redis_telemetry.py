"""The Redis collector against a real redis-server: its figures are the server's own (as
redis-cli reads them), and it answers again, with the right figures, after the server was
paused (a sample that got no answer) and after it was started again (a lost connection)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from compose.process import free_port
from loadgen.platforms.redis_telemetry import RedisTelemetry

pytestmark = pytest.mark.integration


class Server:
    def __init__(self, port: int) -> None:
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind",
                                      "127.0.0.1", "--save", "", "--appendonly", "no"],
                                     stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while self.cli("PING") != "PONG":
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def cli(self, *args: str) -> str:
        return subprocess.run(["redis-cli", "-p", str(self.port), *args], capture_output=True,
                              text=True, timeout=10).stdout.strip()

    def info(self, field: str) -> int:
        for line in self.cli("INFO").splitlines():
            if line.startswith(field + ":"):
                return int(line.split(":", 1)[1])
        raise AssertionError(f"no {field} in INFO")


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server(free_port())
    s.start()
    try:
        yield s
    finally:
        if s.proc is not None:
            os.kill(s.proc.pid, signal.SIGCONT)
        s.stop()


def _add(server: Server, stream: str, n: int) -> None:
    for i in range(n):
        server.cli("XADD", stream, "*", "t", str(i), "p", "x" * 100)


def test_figures_are_the_servers_own(server: Server) -> None:
    """Lag (lag + pending per stream), entries added and read in the interval, used memory and
    the command count, against what redis-cli reads from the same server; a stream that does
    not exist yet counts nothing and fails nothing."""
    _add(server, "s-0", 6)
    _add(server, "s-1", 2)
    server.cli("XGROUP", "CREATE", "s-0", "g", "0")
    server.cli("XGROUP", "CREATE", "s-1", "g", "0")

    async def scenario() -> tuple:
        collector = RedisTelemetry("127.0.0.1", server.port, ["s-0", "s-1", "s-2"], ["g"])
        try:
            await collector.start()
            _add(server, "s-0", 4)
            server.cli("XREADGROUP", "GROUP", "g", "c", "COUNT", "5", "STREAMS", "s-0", ">")
            before = server.info("total_commands_processed")
            reading = await collector.sample()
            after = server.info("total_commands_processed")
            return reading, before, after
        finally:
            await collector.close()

    reading, before, after = asyncio.run(scenario())
    # s-0: 10 entries, 5 delivered (pending, never acknowledged), 5 never delivered
    assert reading.lag is not None
    assert reading.lag.per_partition == {0: 10, 1: 2, 2: 0}
    assert reading.lag.total == 12
    assert reading.broker["partition.0.produced"] == 4
    assert reading.broker["partition.0.consumed"] == 5
    assert reading.broker["partition.1.produced"] == 0
    assert "partition.2.produced" not in reading.broker
    # commands from start()'s INFO stats to the sample's (INFO counts itself): start()'s INFO
    # memory and 6 XINFO, the test's 4 XADD, XREADGROUP and INFO, the sample's INFO stats
    assert reading.broker["commands"] == 1 + 6 + 4 + 1 + 1 + 1
    # the sample's own: INFO stats and memory, 6 XINFO, then the test's INFO
    assert after - before == 2 + 6 + 1
    used = server.info("used_memory")
    assert abs(reading.broker["used_memory_bytes"] - used) < 0.2 * used
    assert reading.net_rx_bytes > 0 and reading.net_tx_bytes > 0


def _xinfo_lag(server: Server, stream: str) -> int:
    lines = server.cli("XINFO", "GROUPS", stream).splitlines()
    return int(lines[lines.index("lag") + 1])


def test_entries_trimmed_before_they_were_read_are_not_lag(server: Server) -> None:
    """MAXLEN trims a stream's oldest entries, read or not. Redis keeps counting the trimmed
    ones in the group's `lag`; the collector counts what a read can still return."""
    server.cli("XGROUP", "CREATE", "s-0", "g", "0", "MKSTREAM")
    _add(server, "s-0", 3)
    server.cli("XREADGROUP", "GROUP", "g", "c", "COUNT", "2", "STREAMS", "s-0", ">")
    pending = server.cli("XPENDING", "s-0", "g", "-", "+", "10").splitlines()
    server.cli("XACK", "s-0", "g", *[line for line in pending if "-" in line])
    for i in range(7):  # entries 4 to 10, the stream trimmed to its last 3 each time
        server.cli("XADD", "s-0", "MAXLEN", "3", "*", "t", str(i), "p", "x")

    async def sample() -> int:
        collector = RedisTelemetry("127.0.0.1", server.port, ["s-0"], ["g"])
        try:
            await collector.start()
            reading = await collector.sample()
            assert reading.lag is not None
            return reading.lag.total
        finally:
            await collector.close()

    # the group is behind the stream's first entry: all 3 left are unread, not Redis's 8
    assert _xinfo_lag(server, "s-0") == 8
    assert asyncio.run(sample()) == 3
    server.cli("XREADGROUP", "GROUP", "g", "c", "COUNT", "10", "STREAMS", "s-0", ">")
    # every entry left delivered (3 pending): nothing to read, where Redis says 5 more
    assert _xinfo_lag(server, "s-0") == 5
    assert asyncio.run(sample()) == 3
    pending = server.cli("XPENDING", "s-0", "g", "-", "+", "10").splitlines()
    server.cli("XACK", "s-0", "g", *[line for line in pending if "-" in line])
    assert asyncio.run(sample()) == 0
    _add(server, "s-0", 2)  # new entries after the last delivered one are lag again
    # 2 are unread; Redis says 7 (its count still holds the 5 trimmed), bounded by the stream's
    # 5 entries: a read past a trimmed gap leaves the figure too high until the group catches up
    assert _xinfo_lag(server, "s-0") == 7
    assert asyncio.run(sample()) == 5


def test_answers_again_after_a_pause_and_a_restart(server: Server) -> None:
    """A sample that got no answer (the server paused) fails; once the server goes on, the next
    sample has the figures of now, not the late replies of the failed one. After the server was
    killed and started again, the next sample opens a connection of its own and answers."""
    _add(server, "s-0", 3)
    server.cli("XGROUP", "CREATE", "s-0", "g", "0")
    assert server.proc is not None

    async def scenario() -> list:
        collector = RedisTelemetry("127.0.0.1", server.port, ["s-0"], ["g"])
        seen = []
        try:
            seen.append((await collector.sample()).lag)
            assert server.proc is not None
            os.kill(server.proc.pid, signal.SIGSTOP)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(collector.sample(), 0.5)
            os.kill(server.proc.pid, signal.SIGCONT)
            _add(server, "s-0", 2)
            reading = await collector.sample()
            seen.append(reading.lag)
            seen.append(reading.broker["partition.0.produced"])
            server.stop()
            server.start()
            _add(server, "s-0", 7)
            server.cli("XGROUP", "CREATE", "s-0", "g", "0")
            await asyncio.sleep(0.2)  # the old connection's end reaches the event loop
            seen.append((await collector.sample()).lag)
        finally:
            await collector.close()
        return seen

    first, after_pause, added, after_restart = asyncio.run(scenario())
    assert first.total == 3
    assert after_pause.total == 5
    assert added == 2  # since the last sample that answered
    assert after_restart.total == 7
