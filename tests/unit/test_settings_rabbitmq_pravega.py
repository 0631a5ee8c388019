"""RabbitMQ's and Pravega's namespaced settings offline: the names each accepts (schema keys with
`$name` segments, stream arguments with or without `x-`, Pravega properties by component), what
each refuses and why, and how they reach the broker's configuration file."""

from __future__ import annotations

from pathlib import Path

import pytest

from compose.pravega import standalone_properties
from compose.rabbitmq import broker_settings, node_config
from loadgen.core.errors import TargetError
from loadgen.core.settings import settings_of
from loadgen.platforms import resolve_target
from loadgen.platforms.rabbitmq import RabbitOptions

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


def test_client_parameters_are_the_libraries_own() -> None:
    """The parameter lists the client settings are checked against (written out, so that they
    are checked without the optional clients) are those of the installed rbfly and pravega."""
    import inspect

    import pravega_client
    import rbfly.streams as rbs

    from loadgen.core.settings import signature_defaults
    from loadgen.platforms import pravega, rabbitmq

    assert list(signature_defaults(rbs.StreamsClient.publisher)) == list(
        rabbitmq.PUBLISHER_PARAMETERS)
    assert list(signature_defaults(rbs.StreamsClient.subscribe)) == list(
        rabbitmq.SUBSCRIBE_PARAMETERS)
    assert signature_defaults(rbs.StreamsClient.subscribe)["timeout"] == 0
    assert {c.value for c in rabbitmq.PublisherClass} <= set(dir(rbs))

    def names(method: object) -> list[str]:
        return [n for n in inspect.signature(method).parameters if n != "self"]

    assert names(pravega_client.StreamManager.create_writer) == list(pravega.WRITER_PARAMETERS)
    assert names(pravega_client.StreamManager.create_reader_group) == list(
        pravega.READER_GROUP_PARAMETERS)


def test_client_settings_typed_and_from_a_config_file(tmp_path: Path) -> None:
    from loadgen.platforms.rabbitmq import PublisherClass

    t = resolve_target("rabbitmq:producer.cls=publisher,consumer.timeout=2.5")
    assert RabbitOptions.of(t).publisher_class() is PublisherClass.Publisher
    assert RabbitOptions.of(t).subscribe_kwargs() == {"timeout": 2.5}
    assert RabbitOptions.of(resolve_target("rabbitmq")).publisher_class() is (
        PublisherClass.PublisherBatchFast)
    file = tmp_path / "clients.yaml"
    file.write_text("producer:\n  cls: Publisher\nconsumer.timeout: 3\n")
    t = resolve_target(f"rabbitmq:config={file},consumer.timeout=4")
    assert settings_of(t, "producer") == {"cls": PublisherClass.Publisher}
    assert settings_of(t, "consumer") == {"timeout": 4.0}  # the TARGET's own wins
    assert t.sources == {"producer.cls": "user", "consumer.timeout": "user"}
    props = tmp_path / "clients.properties"
    props.write_text("producer.max_inflight_events=0\n")
    p = resolve_target(f"pravega:config={props}")
    assert settings_of(p, "producer") == {"max_inflight_events": 0}


BAD = [
    ("rabbitmq:producer.cls=PublisherBatchLimit", "hands each batch over whole"),
    ("rabbitmq:producer.cls=PublisherBin", "without AMQP properties"),
    ("rabbitmq:producer.cls=Fast", "expected one of publisher, publisherbatchfast"),
    ("rabbitmq:producer.filter_extract=f", "takes a Python function"),
    ("rabbitmq:consumer.offset=first", "stored offset"),
    ("rabbitmq:consumer.amqp=false", "AMQP application properties"),
    ("rabbitmq:consumer.timeout=-1", "0 (never) or more"),
    ("rabbitmq:consumer.timout=1", "did you mean timeout?"),
    ("pravega:producer.max_inflight_events=many", "expected a whole number"),
    ("pravega:producer.scope_name=x", "use pravega:scope=NAME"),
    ("pravega:consumer.stream_cut=x", "StreamCut object"),
    ("pravega:consumer.receiver_queue_size=5", "none of its parameters"),
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
