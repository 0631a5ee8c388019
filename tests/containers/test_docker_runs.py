"""Fixed-rate runs with the brokers as containers (the real compose files, offline-built test
images): Redis Streams and a 1-node KRaft Kafka. Rate within 2 %, nothing lost, lag drained,
nothing labelled with the run left afterwards, the CPU and memory in the ticks agreeing
with `docker stats --no-stream` for the same container under load, and a broker setting of
each target in force in its container (read back from the broker: CONFIG GET, DescribeConfigs)."""

from __future__ import annotations

import re
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from analysis.sink import ParquetSink
from collectors.kafka_metrics import METRICS as KAFKA_METRICS
from loadgen.core.target import unique_labels
from loadgen.core.ticks import Tick
from loadgen.core.workload import Workload
from loadgen.pacing import run_precise
from loadgen.platforms import resolve_target
from loadgen.run import Run, RunSummary
from tests.conftest import assert_rate
from tests.containers.conftest import BesideTheRun, nothing_labelled
from tests.integration.conftest import run_json

pytestmark = pytest.mark.integration

RATE = 2000.0
WARMUP_S = 2
DURATION_S = 15
# the engine computes CPU over one-second frames; `docker stats --no-stream` shows one frame's
# figure and a tick the newest frame's, so a sample matches one of the ticks within a second and
# a half of it (which one depends on the phase of the two clocks) within this many points
CPU_TOLERANCE_PP = 2.0
CPU_MATCH_WINDOW_NS = 1_500_000_000
# an engine frame can arrive late under load, so a few samples may fall between ticks
CPU_MATCHED_FRACTION = 0.8
# memory grows with the stream during the run; a docker stats sample and the tick closest in
# time agree within this fraction (plus a little for the second between them)
MEMORY_TOLERANCE = 0.10
MEMORY_SLACK_BYTES = 4 * 2**20

_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "kB": 1e3, "MB": 1e6, "GB": 1e9}


def _size(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)\s*([A-Za-z]+)", text.strip())
    assert m is not None, text
    return float(m.group(1)) * _UNITS[m.group(2)]


@dataclass
class StatsSampler(BesideTheRun):
    """`docker stats --no-stream` of the run's broker container, repeated while the run goes."""

    samples: list[tuple[int, float, float]] = field(default_factory=list)  # (time ns, cpu %, mem)

    def run(self) -> None:
        container = None
        while container is None and not self._stop.wait(0.5):
            container = self.container()
        while container is not None and not self._stop.is_set():
            res = subprocess.run(["docker", "stats", "--no-stream", "--format",
                                  "{{.CPUPerc}}|{{.MemUsage}}", container],
                                 capture_output=True, text=True, timeout=30)
            if res.returncode != 0 or "|" not in res.stdout:
                break
            cpu, mem = res.stdout.strip().split("|")
            self.samples.append((time.time_ns(), float(cpu.rstrip("%")),
                                 _size(mem.split("/")[0])))


@dataclass
class DockerRun:
    run_dir: Path
    summary: RunSummary
    ticks: list[Tick]
    stats: list[tuple[int, float, float]]


def _run(tmp_path_factory, spec: str) -> DockerRun:
    run_dir = tmp_path_factory.mktemp(spec.split(":")[0]) / "run"
    workload = Workload(name="docker-fixed-rate", rate=RATE, duration_s=DURATION_S,
                        warmup_s=WARMUP_S, partitions=2, consumers=2, message_size=1024)
    run = Run(workload, unique_labels([resolve_target(spec)]), out_dir=run_dir, audit=True,
              recorder=ParquetSink)
    ticks: list[Tick] = []
    run.subscribe(lambda item: ticks.append(item) if isinstance(item, Tick) else None)
    with StatsSampler(run.run_id) as sampler:
        summary = run_precise(run.execute())
    return DockerRun(run_dir, summary, ticks, sampler.samples)


@pytest.fixture(scope="module")
def redis_run(tmp_path_factory, docker_images) -> DockerRun:
    return _run(tmp_path_factory, "redis:runtime=docker,conf.hz=20")


@pytest.fixture(scope="module")
def kafka_run(tmp_path_factory, docker_images) -> DockerRun:
    return _run(tmp_path_factory, "kafka:runtime=docker,heap=512M,broker.num.io.threads=4")


@pytest.fixture(params=["redis_run", "kafka_run"])
def docker_run(request) -> DockerRun:
    return request.getfixturevalue(request.param)


def test_rate_within_two_percent(docker_run):
    ticks = ds.dataset(docker_run.run_dir / "ticks", format="parquet").to_table().to_pylist()
    assert sum(1 for t in ticks if t["phase"] == "measuring") == DURATION_S
    (t,) = docker_run.summary.targets
    assert_rate(ticks, t.produced, RATE, WARMUP_S)


def test_nothing_lost_and_lag_drains(docker_run):
    (t,) = docker_run.summary.targets
    assert t.send_errors == 0 and t.receive_errors == 0
    assert t.produced == int(RATE * (WARMUP_S + DURATION_S))
    assert t.consumed == t.produced == t.expected
    assert t.duplicates == 0
    assert t.drained and t.final_lag == 0


def test_containers_recorded_and_removed(docker_run):
    meta = run_json(docker_run.run_dir)
    (target,) = meta["targets"]
    assert target["runtime"] == "docker"
    assert len(target["containers"]) == 1
    assert target["config"]["compose_project"].startswith("streambench-")
    events = ds.dataset(docker_run.run_dir / "events", format="parquet").to_table().to_pydict()
    assert {"stack-up", "stack-down"} <= set(events["kind"])
    nothing_labelled(meta["run_id"])
    # the containers' output, taken before they were removed
    (compose_log,) = (docker_run.run_dir / "logs").glob("0-*/compose.log")
    assert len(compose_log.read_text().splitlines()) > 5


def test_cpu_and_memory_agree_with_docker_stats(docker_run):
    measuring = [t for t in docker_run.ticks if t.phase == "measuring"]
    first, last = measuring[0].time_ns - 1_000_000_000, measuring[-1].time_ns
    stats = [s for s in docker_run.stats if first <= s[0] <= last]
    assert len(stats) >= 3, f"only {len(stats)} docker stats samples in the measuring phase"
    assert statistics.median(t.resources.cpu_percent for t in measuring) > 1.0
    matched = 0
    for when, cpu, _ in stats:
        near = [t.resources.cpu_percent for t in docker_run.ticks
                if abs(t.time_ns - when) <= CPU_MATCH_WINDOW_NS]
        best = min(near, key=lambda ours: abs(ours - cpu), default=None)
        print(f"cpu: docker stats {cpu:.1f} %, ticks around it {[round(c, 1) for c in near]}")
        matched += best is not None and abs(best - cpu) <= CPU_TOLERANCE_PP
    assert matched >= CPU_MATCHED_FRACTION * len(stats), f"{matched} of {len(stats)} samples matched"
    for when, _, mem in stats:
        tick = min(measuring, key=lambda t: abs(t.time_ns - when))
        got = tick.resources.memory_bytes
        print(f"memory: tick {got / 2**20:.1f} MiB, docker stats {mem / 2**20:.1f} MiB")
        assert abs(got - mem) <= mem * MEMORY_TOLERANCE + MEMORY_SLACK_BYTES, (got, mem)


def _settings(run: DockerRun) -> dict:
    (target,) = run_json(run.run_dir)["targets"]
    return target["settings"]


def test_redis_conf_directive_in_the_container(redis_run):
    settings = _settings(redis_run)
    assert settings["conf.hz"] == {"value": "20", "source": "user", "read_back": True}
    assert settings["conf.dir"] == {"value": "/data", "source": "streambench default",
                                    "read_back": True}
    # room for a connection per consumer of 10,000 subscriptions
    assert settings["conf.maxclients"]["source"] == "streambench default"
    assert settings["conf.maxmemory"]["source"] == "platform default"


def test_kafka_broker_setting_in_the_container(kafka_run):
    settings = _settings(kafka_run)
    assert settings["broker.num.io.threads"] == {"value": "4", "source": "user", "read_back": True}
    # a property the compose file sets through the image's variables
    assert settings["broker.group.initial.rebalance.delay.ms"]["source"] == "streambench default"
    assert settings["broker.num.network.threads"]["source"] == "platform default"


def test_kafka_broker_metrics_from_the_container(kafka_run):
    """The JMX exporter agent mounted into the broker's container (KAFKA_OPTS) answers on its
    loopback port: every declared metric read at the measuring ticks, and MessagesInPerSec
    within 5 % of the acknowledged rate over them."""
    rows = ds.dataset(kafka_run.run_dir / "broker_metrics", format="parquet").to_table().to_pylist()
    assert {r["broker"] for r in rows} == {"kafka-1"}
    fresh = [r for r in rows if r["phase"] == "measuring" and not r["stale"]]
    assert {r["name"] for r in fresh} == {m.name for m in KAFKA_METRICS}
    ticks = {t.seq: t for t in kafka_run.ticks if t.phase.value == "measuring"}
    seqs = sorted({r["seq"] for r in fresh if r["name"] == "messages_in_per_second"} & set(ticks))
    seqs = seqs[1:]  # the first measuring tick still carries the warm-up's start
    assert len(seqs) >= 0.8 * DURATION_S - 1, seqs
    rate = {r["seq"]: r["value"] for r in fresh if r["name"] == "messages_in_per_second"}
    broker = sum(rate[s] * ticks[s].interval_s for s in seqs)
    acked = sum(ticks[s].produced for s in seqs)
    assert abs(broker - acked) <= 0.05 * acked, (broker, acked)
