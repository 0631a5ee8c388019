"""--resources cadvisor on the docker runtime, against the cAdvisor streambench builds from
cAdvisor's library module (compose/cadvisor) and starts for the run: the CPU and memory of the
broker container agree with the engine's own stats (what `docker stats` shows) over the same
window, before and after the container is killed and started again mid-run; the cAdvisor
process is gone after the run, also when streambench is stopped or killed. And a cAdvisor the
user runs (--cadvisor HOST:PORT): read, left running, each of several containers by its name."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import signal
import statistics
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from prometheus_client.parser import text_string_to_metric_families

from analysis.sink import ParquetSink
from collectors.cadvisor import CadvisorResources
from collectors.docker import memory_bytes
from compose.cadvisor_server import cadvisor_program
from loadgen.core.events import RunEvent
from loadgen.core.interventions import parse_at
from loadgen.core.target import unique_labels
from loadgen.core.ticks import Tick
from loadgen.core.workload import Workload
from loadgen.pacing import run_precise
from loadgen.platforms import resolve_target
from loadgen.run import Run
from tests.conftest import CliRun, pids_gone, run_cli, server_pids
from tests.containers import images
from tests.containers.conftest import BesideTheRun, labelled, nothing_labelled, run_id_of
from tests.integration.conftest import run_json

pytestmark = pytest.mark.integration

RATE = 2000.0
KILL_AT_S, START_AT_S, DURATION_S = 9, 12, 23
# A tick's CPU is cAdvisor's between its samples (every second), the engine's between its
# frames (every second, on its own clock): over a window of at least MIN_WINDOW_TICKS ticks
# the two means agree within this share of the engine's, or these points when that is larger
# (the window's ends can differ by up to a second on a load that varies)
CPU_TOLERANCE = 0.15
CPU_TOLERANCE_PP = 1.5
MIN_WINDOW_TICKS = 6
# cAdvisor's working set and docker stats' usage − inactive file are one figure of the same
# cgroup; the stream grows by ~2 MB/s, and a tick and a frame can be a second apart
MEMORY_TOLERANCE = 0.10
MEMORY_SLACK_BYTES = 4 * 2**20
FRAME_MATCH_NS = 1_500_000_000


@pytest.fixture(scope="module")
def cadvisor_built() -> Path:
    """streambench's cAdvisor, built once into the cache (minutes with an empty Go module
    cache: see docs/runtimes.md)."""
    return asyncio.run(cadvisor_program(print))


def _read_ns(text: str) -> int:
    """A frame's `read` time (RFC 3339 with nanoseconds) in ns, to the microsecond."""
    m = re.fullmatch(r"(.+T\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", text)
    assert m is not None, text
    zone = "+00:00" if m.group(3) == "Z" else m.group(3)
    whole = datetime.fromisoformat(m.group(1) + zone).timestamp()
    return int(whole) * 1_000_000_000 + int((m.group(2) or "0")[:6].ljust(6, "0")) * 1000


@dataclass
class EngineStats(BesideTheRun):
    """The Docker engine's stats stream of the run's broker container (what `docker stats`
    reads): (read time ns, cumulative CPU ns, memory bytes) per frame, attached again when the
    container starts again."""

    frames: list[tuple[int, int, int]] = field(default_factory=list)

    def run(self) -> None:
        import docker

        client = docker.from_env(timeout=30)
        try:
            while not self._stop.wait(0.2):
                container = self.container()
                if container is None:
                    continue
                with contextlib.suppress(Exception):  # the container was killed: attach again
                    for frame in client.api.stats(container, stream=True, decode=True):
                        if self._stop.is_set():
                            return
                        if frame.get("read", "").startswith("0001-"):
                            continue
                        self.frames.append((_read_ns(frame["read"]),
                                            int(frame["cpu_stats"]["cpu_usage"]["total_usage"]),
                                            memory_bytes(frame) or 0))
        finally:
            client.close()


@dataclass
class CadvisorRun:
    run_dir: Path
    ticks: list[Tick]
    events: list[RunEvent]
    frames: list[tuple[int, int, int]]


@pytest.fixture(scope="module")
def cadvisor_run(tmp_path_factory, docker_images, cadvisor_built) -> CadvisorRun:
    """Redis in a container at 2,000 msg/s with --resources cadvisor; its container killed
    (SIGKILL) and started again mid-run."""
    run_dir = tmp_path_factory.mktemp("cadvisor") / "run"
    workload = Workload(name="cadvisor", rate=RATE, duration_s=DURATION_S, warmup_s=2,
                        partitions=2, consumers=2, message_size=1024,
                        schedule=(parse_at(f"{KILL_AT_S}s:kill=redis"),
                                  parse_at(f"{START_AT_S}s:start=redis")))
    target = resolve_target("redis:runtime=docker,resources=cadvisor")
    run = Run(workload, unique_labels([target]), out_dir=run_dir, recorder=ParquetSink)
    ticks: list[Tick] = []
    events: list[RunEvent] = []
    run.subscribe(lambda item: ticks.append(item) if isinstance(item, Tick) else
                  events.append(item) if isinstance(item, RunEvent) else None)
    with EngineStats(run.run_id) as engine:
        run_precise(run.execute())
    return CadvisorRun(run_dir, ticks, events, engine.frames)


def _event_ns(run: CadvisorRun, kind: str) -> int:
    (event,) = [e for e in run.events if e.kind == kind]
    return event.time_ns


def _engine_cpu(frames: list[tuple[int, int, int]], start_ns: int, end_ns: int) -> float:
    """The engine's CPU % between the frames nearest two times (one run of the container)."""
    first = min(frames, key=lambda f: abs(f[0] - start_ns))
    last = min(frames, key=lambda f: abs(f[0] - end_ns))
    assert last[0] > first[0] and last[1] >= first[1], (first, last)
    return (last[1] - first[1]) / (last[0] - first[0]) * 100.0


def _windows(run: CadvisorRun) -> list[list[Tick]]:
    """The measuring ticks before the kill, and those from 2 s after the start on."""
    kill, start = _event_ns(run, "fault-kill"), _event_ns(run, "fault-start")
    measuring = [t for t in run.ticks if t.phase == "measuring"]
    return [[t for t in measuring if t.time_ns < kill],
            [t for t in measuring if t.time_ns > start + 2_000_000_000]]


def test_cpu_agrees_with_the_engines_stats_over_the_same_window(cadvisor_run):
    for window in _windows(cadvisor_run):
        assert len(window) >= MIN_WINDOW_TICKS, [t.seq for t in window]
        frames = [f for f in cadvisor_run.frames
                  if window[0].time_ns - 2e9 <= f[0] <= window[-1].time_ns + 1e9]
        # a tick whose interval cAdvisor took no new sample in (its housekeeping late on a
        # loaded machine) says unknown (NaN), never a made-up figure: most must be known
        known = [t.resources.cpu_percent for t in window[1:]
                 if not math.isnan(t.resources.cpu_percent)]
        assert len(known) >= 0.75 * len(window[1:]), [t.resources for t in window]
        ours = statistics.fmean(known)
        # a tick's CPU ends at cAdvisor's newest sample, up to a second before the tick
        theirs = _engine_cpu(frames, window[0].time_ns - 500_000_000,
                             window[-1].time_ns - 500_000_000)
        print(f"cpu over ticks {window[1].seq}-{window[-1].seq}: cAdvisor {ours:.2f} %, "
              f"engine {theirs:.2f} %")
        assert theirs > 1.0  # the broker worked
        assert abs(ours - theirs) <= max(CPU_TOLERANCE * theirs, CPU_TOLERANCE_PP), (ours, theirs)


def test_memory_agrees_with_the_engines_stats(cadvisor_run):
    compared = 0
    for window in _windows(cadvisor_run):
        for tick in window:
            near = [f for f in cadvisor_run.frames if abs(f[0] - tick.time_ns) <= FRAME_MATCH_NS]
            if not near:
                continue
            ours = tick.resources.memory_bytes
            frame = min(near, key=lambda f: abs(f[2] - ours))
            print(f"memory tick {tick.seq}: cAdvisor {ours / 2**20:.1f} MiB, "
                  f"engine {frame[2] / 2**20:.1f} MiB")
            assert abs(ours - frame[2]) <= frame[2] * MEMORY_TOLERANCE + MEMORY_SLACK_BYTES
            compared += 1
    assert compared >= 2 * MIN_WINDOW_TICKS


def test_a_container_killed_and_started_again_is_read_again(cadvisor_run):
    """While the container is down cAdvisor knows no such container, so the ticks' figures are
    unknown rather than old; after the start they are the new container's (Redis without AOF
    starts empty: less memory than before the kill)."""
    kill = _event_ns(cadvisor_run, "fault-kill")
    before, after = _windows(cadvisor_run)
    # the start begins about START_AT_S − KILL_AT_S (3 s) after the kill's event, which comes
    # once the engine has killed the container (the start's once Redis answers again)
    down = [t for t in cadvisor_run.ticks
            if kill + 1_200_000_000 < t.time_ns < kill + 2_500_000_000]
    assert down and all(math.isnan(t.resources.cpu_percent) for t in down), \
        [(t.seq, t.resources) for t in down]
    # read again: known in most ticks after the start (a tick cAdvisor took no new sample in
    # says unknown)
    read = [t for t in after if t.resources.memory_bytes > 0 and not math.isnan(t.resources.cpu_percent)]
    assert len(read) >= 0.75 * len(after), [(t.seq, t.resources) for t in after]
    again = next(t for t in cadvisor_run.ticks if t.time_ns > down[-1].time_ns
                 and t.resources.memory_bytes > 0)
    last_known = [t for t in before if t.resources.memory_bytes > 0][-1]
    assert again.resources.memory_bytes < last_known.resources.memory_bytes


def test_the_cadvisor_is_gone_after_the_run(cadvisor_run):
    (target,) = run_json(cadvisor_run.run_dir)["targets"]
    said = target["config"]["cadvisor"]
    m = re.fullmatch(r"127\.0\.0\.1:\d+ \(started by streambench, pid (\d+)\)", said)
    assert m is not None, said
    assert target["endpoints"]["cadvisor"] == said.split()[0]
    assert pids_gone([int(m.group(1))], 10)
    (log,) = (cadvisor_run.run_dir / "logs").glob("0-*/cadvisor.log")  # kept from its data dir
    assert "cAdvisor listening on" in log.read_text()
    nothing_labelled(run_id_of(cadvisor_run.run_dir))


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL", "SIGKILL-group"])
def test_no_cadvisor_left_when_streambench_is_stopped(tmp_path, docker_images, cadvisor_built,
                                                      how: str) -> None:
    """Stopped (SIGTERM) or killed outright, alone (its load process then kills what it
    started) or with its load process (the kernel's parent-death signal): the cAdvisor goes."""
    run_dir = tmp_path / "run"
    cli = CliRun(["run", "redis", "--runtime", "docker", "--resources", "cadvisor", "--rate", "200",
                  "--warmup", "1", "--duration", "60", "--headless", "--out", str(run_dir)])
    cli.wait_for_line("measuring", 180)
    run_id = run_id_of(run_dir)
    started = server_pids(cadvisor_built.name)
    assert len(started) == 1, started
    if how == "SIGKILL-group":
        os.killpg(cli.proc.pid, signal.SIGKILL)
    else:
        cli.signal(signal.Signals[how])
    cli.finish(timeout_s=90)
    assert pids_gone(list(started), 10)
    if how != "SIGTERM":  # what a killed run may leave (`stacks prune` would): this run's only
        left = labelled(run_id)
        if left["containers"]:
            subprocess.run(["docker", "rm", "-f", "-v", *left["containers"]], timeout=60)
        if left["volumes"]:
            subprocess.run(["docker", "volume", "rm", "-f", *left["volumes"]], timeout=60)
    nothing_labelled(run_id)


@pytest.mark.parametrize(("args", "said"), [
    (["--cadvisor", "127.0.0.1"], "expected HOST:PORT"),
    (["--cadvisor", "127.0.0.1:8080", "--resources", "docker"], "not of --resources docker"),
    (["--cadvisor", "127.0.0.1:8080", "--runtime", "local"], "needs the docker runtime"),
])
def test_cadvisor_address_refused_in_one_line(args: list[str], said: str) -> None:
    res = run_cli(["run", "redis", *args, "--headless", "--duration", "5"], timeout_s=60)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("streambench: error:") and said in lines[0], lines


@pytest.fixture(scope="module")
def own_cadvisor(tmp_path_factory, cadvisor_built) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A cAdvisor the test starts itself, as a user would: (its address, its process)."""
    address_file = tmp_path_factory.mktemp("own-cadvisor") / "address"
    own = subprocess.Popen([str(cadvisor_built), f"-address_file={address_file}",
                            "-housekeeping_interval=1s", "-allow_dynamic_housekeeping=false",
                            "-docker_only"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not address_file.exists() and own.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        yield address_file.read_text().strip(), own
    finally:
        own.terminate()
        own.wait(timeout=30)


def test_a_given_cadvisor_is_read_and_left_running(tmp_path, docker_images, own_cadvisor) -> None:
    """--cadvisor HOST:PORT: the containers' figures come from that cAdvisor, which streambench
    neither starts nor stops."""
    address, own = own_cadvisor
    run_dir = tmp_path / "run"
    res = run_cli(["run", "redis", "--runtime", "docker", "--cadvisor", address, "--rate", "500",
                   "--warmup", "1", "--duration", "5", "--headless", "--out", str(run_dir)],
                  timeout_s=180)
    assert res.returncode == 0, res.stderr[-3000:]
    (target,) = run_json(run_dir)["targets"]
    assert target["config"]["cadvisor"] == f"{address} (given)"
    ticks = [t for t in ds.dataset(run_dir / "ticks", format="parquet").to_table().to_pylist()
             if t["phase"] == "measuring"]
    assert ticks and all(t["memory_bytes"] > 0 and t["cpu_percent"] >= 0 for t in ticks[1:])
    assert own.poll() is None  # still running
    nothing_labelled(run_id_of(run_dir))
    # its Prometheus endpoint, as cAdvisor's command serves it
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as reply:
        families = {f.name: f for f in text_string_to_metric_families(reply.read().decode())}
    for name in ("container_cpu_usage_seconds", "container_memory_working_set_bytes",
                 "machine_cpu_cores"):
        assert families[name].samples, name


def test_each_container_by_its_name(docker_images, own_cadvisor) -> None:
    """With several containers, each one's figures under its name (from /api/v2.0/spec) and
    their sums as the tick's (two idle Redis containers the test starts and removes)."""
    address, _own = own_cadvisor
    names = [f"streambench-cadvisor-test-{os.getpid()}-{n}" for n in (1, 2)]
    ids = []
    try:
        for name in names:
            ids.append(subprocess.run(
                ["docker", "run", "-d", "--name", name, "--network", "host", images.REDIS,
                 "redis-server", "--port", "0", "--unixsocket", f"/tmp/{name}.sock", "--save", ""],
                capture_output=True, text=True, timeout=60, check=True).stdout.strip())
        collector = CadvisorResources(address, tuple(ids))
        reading = asyncio.run(collector.sample())
        deadline = time.monotonic() + 20  # until cAdvisor has a sample of both
        while len(reading.broker) < 8 and time.monotonic() < deadline:
            time.sleep(1)
            reading = asyncio.run(collector.sample())
        assert sorted(reading.broker) == sorted(f"broker.{name}.{figure}" for name in names for figure in
                                                ("cpu_percent", "memory_bytes", "disk_read_bytes",
                                                 "disk_write_bytes"))
        memory = [reading.broker[f"broker.{name}.memory_bytes"] for name in names]
        assert all(m > 0 for m in memory) and reading.memory_bytes == sum(memory)
    finally:
        subprocess.run(["docker", "rm", "-f", *names], capture_output=True, timeout=60)


def test_a_given_cadvisor_that_does_not_answer(tmp_path, docker_images, no_new_stacks) -> None:
    """--cadvisor names a cAdvisor to read: none answering there is one line, exit 3, before
    any container starts."""
    from compose.process import free_port

    address = f"127.0.0.1:{free_port()}"
    res = run_cli(["run", "redis", "--runtime", "docker", "--cadvisor", address, "--headless",
                   "--duration", "5", "--out", str(tmp_path / "run")], timeout_s=120)
    assert res.returncode == 3, res.stderr
    assert f"no cAdvisor answers at {address}" in res.stderr.strip().splitlines()[-1]
