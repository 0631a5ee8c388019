"""Mistakes a user can make with the Kafka targets: each ends in one clear line, exit code 2 for
a refused TARGET or 3 for a broker that cannot be started or reached, and nothing left running."""

from __future__ import annotations

import os
import socket
import subprocess
import time

import pytest

from compose.kafka import parse_bootstrap, parse_version
from compose.process import free_port, port_in_use
from loadgen.core.errors import TargetError
from loadgen.core.workload import load_workload
from loadgen.platforms import resolve_target
from loadgen.platforms.kafka import topic_name
from tests.integration.conftest import CLI
from tests.integration.kafka_support import kafka_39, nothing_left_running  # noqa: F401
from tests.integration.test_redis_run import _one_error_line

pytestmark = pytest.mark.integration


def _cli(args: list[str], env: dict[str, str] | None = None,
         drop: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in drop}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, env={**environ, **(env or {})})


def _fails(res: subprocess.CompletedProcess[str], fragment: str) -> None:
    """A refused TARGET: one error line, exit 2."""
    assert res.returncode == 2, res.stderr
    _one_error_line(res.stderr, fragment)


def _cannot_start(res: subprocess.CompletedProcess[str], fragment: str) -> None:
    """A broker that cannot be started or reached: one error line, exit 3."""
    assert res.returncode == 3, res.stderr
    _one_error_line(res.stderr, fragment)


TARGET_ERRORS = [
    ("kafka:lingerms=5", "unknown option 'lingerms' for kafka in target 'kafka:lingerms=5' "
                         "(did you mean linger_ms?)"),
    ("kafka:acks=2", "option acks='2' of kafka: expected one of 0, 1, all"),
    ("kafka:compression=brotli", "expected one of none, gzip, snappy, lz4, zstd"),
    ("kafka:version=2.8", "expected 3.9, 4 or an exact 3.9.x / 4.x.y release"),
    ("kafka-zk:version=4", "ZooKeeper mode exists only up to Kafka 3.9"),
    ("kafka:heap=lots", "expected a JVM heap size like 1G or 512M"),
    ("redpanda:cpus=2@127.0.0.1:9092", "cpus apply to containers streambench starts"),
    ("kafka@127.0.0.1:9092:acks=1", "bad address '127.0.0.1:9092:acks=1'"),
    ("kafka:brokers=3@127.0.0.1:9092", "brokers shape a cluster streambench starts"),
    ("kafka:port=9092@127.0.0.1:9092", "runtime= and port= do not apply"),
    ("redpanda:runtime=local", "option runtime='local' of redpanda: expected one of docker"),
]


@pytest.mark.parametrize("spec, fragment", TARGET_ERRORS, ids=[s for s, _ in TARGET_ERRORS])
def test_bad_target_one_line_exit_2(spec, fragment, nothing_left_running):  # noqa: F811
    _fails(_cli(["run", spec, "--headless", "--duration", "1"]), fragment)


def test_java_missing(nothing_left_running):  # noqa: F811
    res = _cli(["run", "kafka:runtime=local", "--headless", "--duration", "1"],
               env={"PATH": "/nonexistent"},
               drop=("JAVA_HOME",))
    _cannot_start(res, "java not found: install a Java 17 runtime")


def test_jar_cache_unwritable(tmp_path, nothing_left_running):  # noqa: F811
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    res = _cli(["run", "kafka:runtime=local", "--headless", "--duration", "1"],
               env={"STREAMBENCH_CACHE": str(blocker / "cache")})
    _cannot_start(res, f"cannot write the jar cache {blocker / 'cache'}")
    assert "STREAMBENCH_CACHE" in res.stderr


def test_maven_missing(tmp_path, kafka_39, nothing_left_running):  # noqa: F811
    """An empty cache needs Maven; without it the line says what to install."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "java").symlink_to(kafka_39.java)
    res = _cli(["run", "kafka:runtime=local", "--headless", "--duration", "1"],
               env={"PATH": str(bin_dir), "STREAMBENCH_CACHE": str(tmp_path / "cache")},
               drop=("JAVA_HOME",))
    _cannot_start(res, "mvn not found: Maven fetches the Kafka 3.9.1 jars from Maven Central once")


def test_port_taken(kafka_39, nothing_left_running):  # noqa: F811
    port = free_port()
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()
        res = _cli(["run", f"kafka:runtime=local,port={port}", "--headless", "--duration", "1"])
    _cannot_start(res, f"port {port} on 127.0.0.1 is already in use; choose another with kafka:port=N")


def test_second_broker_port_taken(kafka_39, nothing_left_running):  # noqa: F811
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        if port_in_use(taken - 1):
            pytest.skip("the port below a free one is in use")
        res = _cli(["run", f"kafka-zk:runtime=local,brokers=3,port={taken - 1}", "--headless",
                    "--duration", "1"])
    _cannot_start(res, f"port {taken} on 127.0.0.1 is already in use (broker 2 of 3 takes port {taken})")


def test_broker_that_cannot_start(kafka_39, nothing_left_running):  # noqa: F811
    """A heap too small for the JVM: the broker exits and its log says why."""
    res = _cli(["run", "kafka:runtime=local,heap=1m", "--headless", "--duration", "1"])
    _cannot_start(res, "kafka:runtime=local,heap=1m: broker-1 exited (code 1) before Kafka was ready")
    assert "heap" in res.stderr.splitlines()[-1].lower()


def test_unreachable_cluster_fails_fast(nothing_left_running):  # noqa: F811
    started = time.monotonic()
    res = _cli(["run", "kafka@127.0.0.1:1", "--headless", "--duration", "1"])
    _cannot_start(res, "cannot reach kafka at 127.0.0.1:1: connection refused")
    assert time.monotonic() - started < 15


def test_option_values_and_names():
    assert parse_version("3.9") == "3.9.1" and parse_version("4") == "4.1.0"
    assert parse_version("4.0.0") == "4.0.0"
    assert parse_bootstrap("a:1, b") == [("a", 1), ("b", 9092)]
    with pytest.raises(TargetError):
        parse_bootstrap("a:x")
    target = resolve_target("kafka:topic=orders")
    assert topic_name(target, "streambench-20260101T000000Z-0-0") == "orders"
    assert topic_name(target, "streambench-20260101T000000Z-0-2") == "orders-2"
    defaults = resolve_target("kafka").options
    assert (defaults["acks"], defaults["batch_size"], defaults["linger_ms"]) == ("all", 1048576, 0)
    assert (defaults["brokers"], defaults["heap"], defaults["version"]) == (1, "1G", "3.9.1")


@pytest.mark.parametrize("name, partitions, size, producers", [
    ("kafka-tc1", 1, 1588, 1), ("kafka-tc2", 1, 1588, 4), ("kafka-tc3", 3, 1588, 4),
    ("1-topic-1-partition-100b", 1, 100, 1), ("1-topic-16-partitions-1kb", 16, 1024, 1),
    ("1-topic-100-partitions-1kb", 100, 1024, 1),
])
def test_bundled_kafka_workloads(name, partitions, size, producers):
    w = load_workload(name)
    assert (w.partitions, w.message_size, w.producers, w.consumers) == (partitions, size, producers, 1)
    if name.startswith("kafka-tc"):
        assert w.rate == 0 and w.duration_s == 1800 and w.warmup_s == 60
    else:
        assert w.rate == 50_000 and w.duration_s == 900
