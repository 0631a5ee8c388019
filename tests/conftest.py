"""Shared test set-up: the markers every test gets from what it starts, one local Spark session
for the whole test run, and the helpers the broker and container tests share (the CLI in a
subprocess, process and port checks).

Markers are applied here, not by hand: a test that asks for a Spark fixture is `spark`, and every
test under tests/integration and tests/containers (which start real brokers or containers) is
`integration`. So `pytest -m "not spark and not integration"` is the fast loop: no JVM, no
broker, no container.

An `integration` test that fails runs once more (pytest-rerunfailures, 3 s later): its figures
ride on the timing of a machine its brokers, JVMs and load generators share with the tests
beside it, and a stall of a few seconds there can move them; a test that fails twice fails the
run, and `make test` lists every rerun with its first failure (`-rR`). A fixture of a wider
scope than the test (a module's run) is not made again, so a rerun there reads the same run."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis

# Targets without runtime= run locally in the tests, whether or not a Docker engine answers;
# the container tests ask for runtime=docker themselves.
os.environ["STREAMBENCH_RUNTIME"] = "local"
# Every process a test starts inherits this mark (brokers, load workers and `streambench`
# commands pass their environment on), so a check for leftovers counts only what this test
# process started, also when other test processes (`pytest -n`) start the same brokers beside it.
SESSION_MARK = "STREAMBENCH_TEST_SESSION"
os.environ[SESSION_MARK] = str(os.getpid())

TESTS = Path(__file__).resolve().parent
# folders whose every test starts a real broker or container
BROKER_FOLDERS = ("integration", "containers", "platforms")
# fixtures that start a Spark session or a Spark cluster (directly or through what they build)
SPARK_FIXTURES = frozenset({"spark", "report", "built", "standalone_cluster"})
RERUNS, RERUN_DELAY_S = 1, 3  # an integration test that fails: once more, 3 s later


def _folder(item: pytest.Item) -> str:
    try:
        return Path(item.path).resolve().relative_to(TESTS).parts[0]
    except (ValueError, IndexError):
        return ""


def _group(item: pytest.Item, fixtures: set[str]) -> str:
    """Which tests `pytest -n N --dist loadgroup` keeps on one test process: the platform
    contract (its runs are shared by two modules), the container tests (one Docker engine, whose
    every container and volume some of them count), the tests on the one Spark session, and
    otherwise each module (its module-scoped broker started once)."""
    folder = _folder(item)
    if folder in ("platforms", "containers"):
        return folder
    if "spark" in fixtures:
        return "spark"
    return str(Path(item.path).resolve().relative_to(TESTS))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks before `-m` selects (tryfirst), so the markers count for deselection."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & SPARK_FIXTURES and item.get_closest_marker("spark") is None:
            item.add_marker(pytest.mark.spark)
        if _folder(item) in BROKER_FOLDERS and item.get_closest_marker("integration") is None:
            item.add_marker(pytest.mark.integration)
        if item.get_closest_marker("integration") is not None \
                and item.get_closest_marker("flaky") is None:
            item.add_marker(pytest.mark.flaky(reruns=RERUNS, reruns_delay=RERUN_DELAY_S))
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(_group(item, fixtures)))


_reruns: list[tuple[str, list[str]]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """A failure followed by a rerun: kept, with its error lines, for the run's summary."""
    if report.outcome == "rerun":
        lines = [line for line in report.longreprtext.splitlines() if line.startswith("E ")]
        _reruns.append((report.nodeid, lines[:6] or report.longreprtext.splitlines()[-3:]))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Each test run again after a failure, and why it failed the first time."""
    if not _reruns:
        return
    terminalreporter.section(f"{len(_reruns)} failure(s) run again")
    for nodeid, lines in _reruns:
        terminalreporter.write_line(f"{nodeid}:")
        for line in lines:
            terminalreporter.write_line(f"    {line[:300]}")


# Go programs that take minutes to build with an empty Go module cache, by the tests that need
# them: built in the background from the start of the test run (by one test process), so those
# tests find them built, or wait for the build through its cache lock, instead of building
# them then. Stopped at the end of the run if still building (the next run builds again).
BACKGROUND_BUILDS = {
    "containers/test_cadvisor_docker.py":
        "import asyncio; from compose.cadvisor_server import cadvisor_program; "
        "asyncio.run(cadvisor_program(print))",
}
_builds: list[tuple[subprocess.Popen[bytes], Path]] = []


def pytest_collection_finish(session: pytest.Session) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER", "gw0") != "gw0":
        return
    wanted = {str(Path(item.path).resolve().relative_to(TESTS)) for item in session.items
              if Path(item.path).resolve().is_relative_to(TESTS)}
    for module, code in BACKGROUND_BUILDS.items():
        if module in wanted:
            path = Path(tempfile.gettempdir()) / f"streambench-test-build-{os.getpid()}.log"
            with open(path, "ab") as log:
                _builds.append((subprocess.Popen([sys.executable, "-c", code], stdout=log,
                                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                 start_new_session=True), path))


def pytest_sessionfinish(session: pytest.Session) -> None:
    for proc, log in _builds:
        if proc.poll() is None:
            proc.terminate()  # its Go build dies with it (compose.process.start_process)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        log.unlink(missing_ok=True)  # a failed build says why again in the test that needs it


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
    """`streambench …` in its own session so signals reach only it. A hang-up is delivered
    as from a terminal, whatever the test run inherited (`nohup make test` ignores SIGHUP in
    every child, and the CLI then rightly goes on); `hup_ignored` starts it as under nohup."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None,
                 hup_ignored: bool = False) -> None:
        hup = signal.SIG_IGN if hup_ignored else signal.SIG_DFL
        self.proc = subprocess.Popen(
            [*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, **(env or {})}, start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGHUP, hup),
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


@contextlib.contextmanager
def redis_server(*args: str) -> Iterator[int]:
    """A redis-server of its own on loopback (with `args` more), answering while the block
    runs; its port. It runs in the calling thread's network namespace."""
    from compose.process import free_port

    port = free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no", *args],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = redis.Redis(port=port)
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(redis.ConnectionError):
                client.ping()
                break
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
        client.close()
        yield port
    finally:
        server.terminate()
        server.wait(10)


def run_json(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text())


def port_listening(port: int) -> bool:
    return any(c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN
               for c in psutil.net_connections("tcp"))


def started_here(p: psutil.Process) -> bool:
    """Whether this test process started `p` (directly or through what it started): `p`
    carries its SESSION_MARK. A process that has gone, or whose environment cannot be read,
    was not."""
    try:
        return p.environ().get(SESSION_MARK) == os.environ[SESSION_MARK]
    except psutil.Error:
        return False


def data_dir_here(path: Path) -> bool:
    """Whether a stack's data dir (`<prefix><pid>-XXXXXXXX`, made by that pid) belongs to this
    test process: its maker started here, or has gone (a leftover counts, whoever left it)."""
    try:
        pid = int(path.name.rsplit("-", 2)[-2])
    except (IndexError, ValueError):
        return True
    try:
        return started_here(psutil.Process(pid)) or pid == os.getpid()
    except psutil.NoSuchProcess:
        return True


def server_pids(name: str) -> set[int]:
    """Processes called `name` this test process started: its descendants, and orphans (a
    leaked broker is re-parented to init) that carry its mark. Other test processes and test
    runs on the machine are not counted."""
    mine = {p.pid for p in psutil.Process().children(recursive=True)}
    found = set()
    for p in psutil.process_iter(["name", "ppid"]):
        if p.info["name"] == name and (p.pid in mine or (p.info["ppid"] == 1 and started_here(p))):
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


@pytest.fixture(scope="session")
def promcheck() -> Path:
    """compose/promcheck: client_golang's promlint (what `promtool check metrics` runs),
    Prometheus's own PromQL parser, config loader and file-based service discovery, built from
    the Go module proxy once into streambench's cache (a few minutes at most, where promtool
    takes many more: it links the whole server)."""
    import asyncio

    from compose.gobuild import source_program

    return asyncio.run(source_program("promcheck", TESTS.parent / "compose" / "promcheck", print))


def assert_rate(ticks: list[dict[str, Any]], produced_total: int, rate: float,
                warmup_s: float) -> None:
    """The asked rate over the measuring phase, from a run's ticks (rows of its `ticks` table)
    and its produced total. The generator's own rate, by the slots' intended times: the run's
    acknowledged messages less the warm-up's slots are the measuring phase's slots, within 2 %
    of the rate times the phase's measured seconds. The acknowledgements that came in the phase,
    within 10 %: they also carry the broker's pace and the warm-up's stragglers, which a shared
    2-core machine moves by a few per cent (2.6-6.4 % seen with Pulsar, Pravega and Kafka)."""
    measuring = [t for t in ticks if t["phase"] == "measuring"]
    seconds = sum(t["interval_s"] for t in measuring)
    due = rate * seconds
    sent = produced_total - rate * warmup_s
    assert abs(sent - due) / due < 0.02, f"{sent:,.0f} slots sent in {seconds:.2f} s at {rate:,.0f}/s"
    acked = sum(t["produced"] for t in measuring)
    assert abs(acked - due) / due < 0.10, f"{acked / seconds:.1f} msg/s acknowledged while measuring"
