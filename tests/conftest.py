"""Shared test set-up: the markers every test gets from what it starts, one local Spark session
for the whole test run, and the helpers the broker and container tests share (the CLI in a
subprocess, process and port checks).

Markers are applied here, not by hand: a test that asks for a Spark fixture is `spark`, and every
test under tests/integration and tests/containers (which start real brokers or containers) is
`integration`. So `pytest -m "not spark and not integration"` is the fast loop: no JVM, no
broker, no container."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

# Targets without runtime= run locally in the tests, whether or not a Docker engine answers;
# the container tests ask for runtime=docker themselves.
os.environ["STREAMBENCH_RUNTIME"] = "local"

TESTS = Path(__file__).resolve().parent
# folders whose every test starts a real broker or container
BROKER_FOLDERS = ("integration", "containers", "platforms")
# fixtures that start a Spark session or a Spark cluster (directly or through what they build)
SPARK_FIXTURES = frozenset({"spark", "report", "built", "standalone_cluster"})


def _folder(item: pytest.Item) -> str:
    try:
        return Path(item.path).resolve().relative_to(TESTS).parts[0]
    except (ValueError, IndexError):
        return ""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks before `-m` selects (tryfirst), so the markers count for deselection."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & SPARK_FIXTURES and item.get_closest_marker("spark") is None:
            item.add_marker(pytest.mark.spark)
        if _folder(item) in BROKER_FOLDERS and item.get_closest_marker("integration") is None:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = (
        SparkSession.builder.master("local[1]")
        .appName("streambench-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


# -- the command line in a subprocess, shared by the broker, container and TUI tests ----------

CLI = [sys.executable, "-m", "tui.cli"]


class CliRun:
    """`streambench …` in its own session so signals reach only it."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, **(env or {})}, start_new_session=True,
        )
        self.lines: list[str] = []

    def wait_for_line(self, fragment: str, timeout_s: float) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            if fragment in line:
                return line
        raise AssertionError(f"no line with {fragment!r} within {timeout_s} s; got {self.lines[-5:]}")

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def finish(self, timeout_s: float = 120) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=timeout_s)
        return self.proc.returncode, "".join(self.lines) + out, err


def run_cli(args: list[str], timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout_s,
                          stdin=subprocess.DEVNULL)


def run_json(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text())


def port_listening(port: int) -> bool:
    return any(c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN
               for c in psutil.net_connections("tcp"))


def server_pids(name: str) -> set[int]:
    """Processes called `name` this test process could have started: its descendants, and
    orphans (a leaked broker is re-parented to init). Other test runs on the machine are not
    counted."""
    mine = {p.pid for p in psutil.Process().children(recursive=True)}
    found = set()
    for p in psutil.process_iter(["name", "ppid"]):
        if p.info["name"] == name and (p.pid in mine or p.info["ppid"] == 1):
            found.add(p.pid)
    return found


def pids_gone(pids: list[int], timeout_s: float = 10) -> bool:
    """Whether every process of `pids` has exited (zombies count as gone) within the time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                   for p in pids):
            return True
        time.sleep(0.1)
    return False


def redis_pids() -> set[int]:
    return server_pids("redis-server")


@contextlib.contextmanager
def none_left(name: str, timeout_s: float = 10) -> Iterator[None]:
    """Fails if the block leaves a process called `name` running that was not there before."""
    before = server_pids(name)
    yield
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and server_pids(name) - before:
        time.sleep(0.1)
    assert server_pids(name) - before == set(), f"a {name} started by the test is still running"


@pytest.fixture
def no_leftover_redis() -> Iterator[None]:
    """Fails the test if it leaves a redis-server running that was not there before."""
    with none_left("redis-server"):
        yield
