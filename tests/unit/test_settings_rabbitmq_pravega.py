"""RabbitMQ's and Pravega's namespaced settings offline: the names each accepts (schema keys with
`$name` segments, stream arguments with or without `x-`, Pravega properties by component), what
each refuses and why, and how they reach the broker's configuration file."""

from __future__ import annotations

from pathlib import Path

import pytest

from compose.pravega import standalone_properties
from compose.rabbitmq import broker_settings, node_config
from loadgen.errors import TargetError
from loadgen.platforms import resolve_target
from loadgen.platforms.rabbitmq import RabbitOptions
from loadgen.settings import settings_of

PORTS = {"amqp": 1, "stream": 2, "management": 3, "dist": 4, "epmd": 5}


def test_rabbitmq_keys_reach_the_node_config() -> None:
    t = resolve_target("rabbitmq:runtime=local,broker.stream.frame_max=2097152,"
                       "broker.log.queue.level=warning,broker.auth_mechanisms.1=PLAIN,"
                       "broker.collect_statistics_interval=5000")
    assert broker_settings(t) == {"stream.frame_max": "2097152",
                                  "log.queue.level": "warning", "auth_mechanisms.1": "PLAIN",
                                  "collect_statistics_interval": "5000"}
    lines = node_config(PORTS, broker_settings(t)).splitlines()
    assert "stream.frame_max = 2097152" in lines
    assert "stream.listeners.tcp.1 = 127.0.0.1:2" in lines
    # a key streambench also sets is written once, with the target's value
    assert [ln for ln in lines if ln.startswith("collect_statistics_interval")] == [
        "collect_statistics_interval = 5000"]


def test_rabbitmq_stream_arguments_and_plain_options() -> None:
    t = resolve_target("rabbitmq:topic.max-age=7D,topic.x-initial-cluster-size=1,segment_bytes=1000")
    assert settings_of(t, "topic") == {"x-max-age": "7D", "x-initial-cluster-size": 1}
    assert RabbitOptions.of(t).stream_arguments() == {
        "stream-max-segment-size-bytes": 1000, "max-age": "7D", "initial-cluster-size": 1}
    both = resolve_target("rabbitmq:max_length_bytes=5,topic.x-max-length-bytes=6")
    with pytest.raises(TargetError, match="give one of them"):
        RabbitOptions.of(both)


def test_config_file_of_rabbitmq_and_pravega_settings(tmp_path: Path) -> None:
    file = tmp_path / "s.yaml"
    file.write_text("broker:\n  stream.heartbeat: 30\ntopic.x-max-age: 1h\n")
    t = resolve_target(f"rabbitmq:runtime=local,config={file}")
    assert t.sources == {"broker.stream.heartbeat": "user", "topic.x-max-age": "user"}
    file.write_text("broker.writer.flush.threshold.milliseconds: 500\n")
    p = resolve_target(f"pravega:runtime=local,config={file}")
    assert settings_of(p, "broker") == {"writer.flush.threshold.milliseconds": "500"}


def test_pravega_properties_reach_the_standalone_file() -> None:
    text = standalone_properties(10, 11, 12, {"writer.flush.threshold.milliseconds": "500",
                                              "filesystem.root": "C:\\data"})
    lines = text.splitlines()
    assert "singlenode.controller.rpc.port=11" in lines
    assert lines[-2:] == ["writer.flush.threshold.milliseconds=500", "filesystem.root=C:\\\\data"]


BAD = [
    ("rabbitmq:broker.stream.fram_max=1", "did you mean stream.frame_max?"),
    ("rabbitmq:broker.stream.advertised_port=1", "set by streambench"),
    ("rabbitmq:broker.listeners.tcp.default=5672", "rabbitmq:port=N"),
    ("rabbitmq:broker.raft.data_dir=/tmp/x", "directory of its own"),
    ("rabbitmq:broker.mqtt.listeners.tcp.default=1883", "the rabbitmq_mqtt plugin"),
    ("rabbitmq:topic.x-max-age=7", "unit"),
    ("rabbitmq:topic.x-max-length-bytes=-1", "at least 1"),
    ("rabbitmq:topic.retention=1", "known: x-max-length-bytes"),
    ("rabbitmq:profile=durable", "do not fsync a write"),
    ("rabbitmq:profile=latency", "no profiles"),
    ("rabbitmq:broker.stream.frame_max=2097152@127.0.0.1:5552", "not to an existing cluster"),
    ("pravega:broker.writer.flush.treshold.milliseconds=1",
     "did you mean writer.flush.threshold.milliseconds?"),
    ("pravega:broker.singlenode.controller.rpc.port=9090", "use pravega:port=N"),
    ("pravega:broker.pravegaservice.container.count=8", "fixed by the standalone"),
    ("pravega:broker.controller.container.count=8", "not from the standalone's file"),
    ("pravega:broker.bookkeeper.ledger.size.max=1", "runs no BookKeeper"),
    ("pravega:profile=durable", "in memory"),
    ("pravega:broker.writer.flush.threshold.milliseconds=1@tcp://127.0.0.1:9090",
     "not to an existing cluster"),
]


@pytest.mark.parametrize("spec, fragment", BAD, ids=[s for s, _ in BAD])
def test_refused_with_the_reason(spec: str, fragment: str) -> None:
    with pytest.raises(TargetError) as caught:
        resolve_target(spec)
    assert fragment in str(caught.value)
    assert "\n" not in str(caught.value)
