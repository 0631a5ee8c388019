"""Shared pieces of the Kafka tests: the assembled Kafka release, a local cluster started for a
test module, and a check that no broker or data dir outlives a test."""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from compose.kafka import DATA_PREFIX, KAFKA_3, KafkaLocalStack, KafkaRuntime, kafka_runtime
from loadgen.platforms import resolve_target
from tests.conftest import data_dir_here, started_here

KAFKA_MAINS = ("kafka.Kafka", "org.apache.zookeeper.server.quorum.QuorumPeerMain")


def progress(message: str) -> None:
    sys.stderr.write(f"{message}\n")


@pytest.fixture(scope="session")
def kafka_39() -> KafkaRuntime:
    """Kafka 3.9 jars (fetched from Maven Central into the cache on first use) and Java."""
    return asyncio.run(kafka_runtime(KAFKA_3, progress))


def broker_pids() -> set[int]:
    """Local-runtime Kafka and ZooKeeper processes this test process started (their configs
    live in a streambench data dir; brokers in containers, started by other tools or by other
    test processes do not count)."""
    found = set()
    for p in psutil.process_iter(["name", "cmdline"]):
        cmd = p.info["cmdline"] or []
        if (p.info["name"] == "java" and any(main in cmd for main in KAFKA_MAINS)
                and any(DATA_PREFIX in arg for arg in cmd) and started_here(p)):
            found.add(p.pid)
    return found


def data_dirs() -> set[Path]:
    return {d for d in Path(tempfile.gettempdir()).glob(f"{DATA_PREFIX}*") if data_dir_here(d)}


@pytest.fixture
def nothing_left_running() -> Iterator[None]:
    """Fails the test if it leaves a Kafka or ZooKeeper process or a data dir behind."""
    pids, dirs = broker_pids(), data_dirs()
    yield
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (broker_pids() - pids or data_dirs() - dirs):
        time.sleep(0.2)
    assert broker_pids() - pids == set(), "a broker started by the test is still running"
    assert data_dirs() - dirs == set(), "a broker data dir was left behind"


@dataclass
class Cluster:
    bootstrap: str
    runtime: KafkaRuntime
    metrics: str = ""  # the brokers' JMX exporter endpoints, `broker=URL,…`


@pytest.fixture(scope="module")
def kafka_cluster(kafka_39: KafkaRuntime) -> Iterator[Cluster]:
    """One KRaft broker for a module's tests, reached through the external runtime."""
    stack = KafkaLocalStack(resolve_target("kafka:runtime=local,heap=512M"), "test-cluster", zookeeper=False)
    try:
        asyncio.run(stack.up(progress))
        asyncio.run(stack.ready(120, progress))
        endpoints = stack.describe().endpoints
        yield Cluster(endpoints["kafka"], kafka_39, endpoints["metrics"])
    finally:
        asyncio.run(stack.down())
