"""Namespaced TARGET settings (`broker.`, `producer.`, `consumer.`, `admin.`, `topic.`, `conf.`),
profiles and config files: what is accepted, typed and attributed to its source, and what is
refused in one line (through the CLI: exit 2, nothing started)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pulsar
import pytest

from compose.pulsar import PulsarTargetConfig
from compose.redis import RedisServerOptions
from loadgen.core.errors import TargetError
from loadgen.core.settings import read_config_file, settings_of
from loadgen.platforms import resolve_target
from loadgen.platforms.kafka import KafkaClientOptions
from tests.conftest import CLI


def test_settings_by_namespace_are_typed_and_attributed() -> None:
    t = resolve_target("kafka:runtime=local,broker.num.io.threads=8,producer.linger.ms=5,"
                       "producer.batch.size=2048,consumer.max.poll.records=100,"
                       "admin.retry.backoff.ms=50,topic.min.insync.replicas=2")
    assert settings_of(t, "broker") == {"num.io.threads": "8"}
    assert settings_of(t, "producer") == {"linger_ms": 5, "max_batch_size": 2048}
    assert settings_of(t, "consumer") == {"max_poll_records": 100}
    assert settings_of(t, "admin") == {"retry_backoff_ms": 50}
    assert settings_of(t, "topic") == {"min.insync.replicas": "2"}
    assert set(t.sources.values()) == {"user"}
    opts = KafkaClientOptions.of(t)
    assert dict(opts.producer) == {"linger_ms": 5, "max_batch_size": 2048}
    assert dict(opts.topic_configs) == {"min.insync.replicas": "2"}

    p = resolve_target("pulsar:runtime=local,producer.batching_enabled=false,"
                       "producer.compression_type=lz4,consumer.receiver_queue_size=10")
    config = PulsarTargetConfig.of(p)
    assert config.batching is False  # the typed record follows the setting
    assert dict(config.producer)["compression_type"] == pulsar.CompressionType.LZ4
    assert dict(config.consumer) == {"receiver_queue_size": 10}

    r = resolve_target("redis:runtime=local,conf.appendfsync=always,conf.hz=20")
    assert RedisServerOptions.of(r).argv()[-4:] == ["--appendfsync", "always", "--hz", "20"]


def test_profile_then_file_then_target(tmp_path: Path) -> None:
    t = resolve_target("pulsar:runtime=local,profile=latency")
    assert settings_of(t, "broker") == {"managedLedgerNewEntriesCheckDelayInMillis": "0",
                                        "journalMaxGroupWaitMSec": "0"}
    assert settings_of(t, "producer") == {"batching_enabled": False}
    assert set(t.sources.values()) == {"profile"}

    yaml_file = tmp_path / "pulsar.yaml"
    yaml_file.write_text("broker:\n  journalMaxGroupWaitMSec: 2\nproducer.batching_enabled: true\n")
    t = resolve_target(f"pulsar:runtime=local,profile=latency,config={yaml_file},"
                       "broker.journalMaxGroupWaitMSec=3")
    assert t.options["broker.journalMaxGroupWaitMSec"] == "3"  # the TARGET's own wins
    assert t.sources["broker.journalMaxGroupWaitMSec"] == "user"
    assert t.options["producer.batching_enabled"] is True  # the file wins over the profile
    assert t.sources["producer.batching_enabled"] == "user"
    assert t.sources["broker.managedLedgerNewEntriesCheckDelayInMillis"] == "profile"

    props = tmp_path / "redis.properties"
    props.write_text("# durable\nconf.appendonly=yes\nconf.appendfsync = always\n")
    assert read_config_file(str(props)) == {"conf.appendonly": "yes", "conf.appendfsync": "always"}
    t = resolve_target(f"redis:runtime=local,config={props}")
    assert settings_of(t, "conf") == {"appendonly": "yes", "appendfsync": "always"}
    assert resolve_target("redis:runtime=local,profile=durable").options["conf.appendfsync"] == "always"
    assert resolve_target("kafka:profile=durable@127.0.0.1:9092").options["topic.flush.messages"] == "1"
    # the studies' configurations, as the fsync-partitions suite runs them
    study = resolve_target("kafka:profile=omb-fsync@127.0.0.1:9092")
    assert settings_of(study, "topic") == {"flush.messages": "1", "flush.ms": "0"}
    assert study.sources["topic.flush.ms"] == "profile"
    assert resolve_target("pulsar:runtime=local,profile=omb-no-fsync").options[
        "broker.journalSyncData"] == "false"


BAD = [
    ("kafka:broker.num.io.thread=8", "did you mean num.io.threads?"),
    ("kafka:topic.min.insync.replica=2", "did you mean min.insync.replicas?"),
    ("kafka:producer.linger.mss=5", "did you mean linger_ms?"),
    ("kafka:producer.buffer.memory=1", "no equivalent of buffer.memory"),
    ("kafka:producer.linger.ms=soon", "expected a whole number"),
    ("kafka:broker.listeners=PLAINTEXT://:1", "set by streambench"),
    ("kafka:consumer.enable.auto.commit=false", "set by streambench"),
    ("kafka-zk:broker.log.flush.interval.message=1", "did you mean log.flush.interval.messages?"),
    ("kafka:broker.num.io.threads=8@127.0.0.1:9092", "not to an existing cluster"),
    ("pulsar:broker.managedLedgerNewEntriesCheckDelayInMilis=0",
     "did you mean managedLedgerNewEntriesCheckDelayInMillis?"),
    ("pulsar:producer.batching_enable=false", "did you mean batching_enabled?"),
    ("pulsar:producer.compression_type=lz5", "expected one of lz4"),
    ("pulsar:broker.webServicePort=8080", "use pulsar:admin_port=N"),
    ("pulsar:profile=fastest", "expected one of latency, throughput, durable"),
    ("pulsar:broker.journalSyncData=true@pulsar://127.0.0.1:6650", "not to an existing cluster"),
    ("redis:conf.appendfsyn=always", "did you mean appendfsync?"),
    ("redis:conf.port=1", "use redis:port=N"),
    ("redis:conf.hz=20@127.0.0.1:6379", "not to an existing cluster"),
    ("redis:config=/nonexistent/settings.yaml", "no such file"),
    ("redis:conf.hz", "needs a value"),
    ("kafka:broker=8", "give broker.NAME=VALUE"),
    ("redis:conf.requirepass=x", "a secret is not taken on the command line"),
]


@pytest.mark.parametrize("spec, fragment", BAD, ids=[s for s, _ in BAD])
def test_bad_settings_refused(spec: str, fragment: str) -> None:
    with pytest.raises(TargetError) as err:
        resolve_target(spec)
    assert fragment in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_config_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("broker:\n  journalMaxGroupWaitMSec: [1, 2]\n")
    with pytest.raises(TargetError, match="expected one value"):
        resolve_target(f"pulsar:config={bad}")
    unknown = tmp_path / "unknown.properties"
    unknown.write_text("broker.journalMaxGroupWaitMSecs=0\n")
    with pytest.raises(TargetError, match="did you mean journalMaxGroupWaitMSec"):
        resolve_target(f"pulsar:runtime=local,config={unknown}")
    plain = tmp_path / "plain.properties"
    plain.write_text("linger.ms=5\n")
    with pytest.raises(TargetError, match=r"not a NAMESPACE\.NAME setting"):
        resolve_target(f"kafka:config={plain}")


def test_cli_refuses_a_bad_setting_in_one_line_before_starting(tmp_path: Path) -> None:
    res = subprocess.run([*CLI, "run", "kafka:runtime=local,broker.num.io.thread=8", "--headless",
                          "--duration", "1", "--out", str(tmp_path / "run")],
                         capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "did you mean num.io.threads?" in lines[0], res.stderr
    assert not (tmp_path / "run").exists()  # nothing started, nothing written


KAFKA_DRIVER = """name: Kafka
driverClass: io.openmessaging.benchmark.driver.kafka.KafkaBenchmarkDriver
replicationFactor: 3
topicConfig: |
  min.insync.replicas=2
commonConfig: |
  bootstrap.servers=localhost:9092
  request.timeout.ms=20000
producerConfig: |
  acks=all
  linger.ms=1
  batch.size=1048576
  buffer.memory=33554432
consumerConfig: |
  auto.offset.reset=earliest
  enable.auto.commit=false
"""
PULSAR_DRIVER = """name: Pulsar
driverClass: io.openmessaging.benchmark.driver.pulsar.PulsarBenchmarkDriver
client:
  serviceUrl: pulsar://localhost:6650
  ioThreads: 8
producer:
  batchingEnabled: false
  batchingMaxPublishDelayMs: 2
  blockIfQueueFull: true
consumer:
  receiverQueueSize: 500
"""


def test_omb_driver_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kafka = tmp_path / "kafka.yaml"
    kafka.write_text(KAFKA_DRIVER)
    t = resolve_target(f"kafka:driver={kafka}@127.0.0.1:9092")
    assert settings_of(t, "producer") == {"acks": "all", "linger_ms": 1, "max_batch_size": 1048576,
                                          "request_timeout_ms": 20000}
    assert settings_of(t, "consumer") == {"auto_offset_reset": "earliest",
                                          "request_timeout_ms": 20000}
    assert settings_of(t, "admin") == {"request_timeout_ms": 20000}
    assert settings_of(t, "topic") == {"min.insync.replicas": "2"}
    warned = capsys.readouterr().err
    for field in ("buffer.memory", "enable.auto.commit", "bootstrap.servers"):
        assert field in warned and "not acted on" in warned
    assert "linger.ms" not in warned and "replicationFactor" not in warned
    assert t.options["replication"] == 3  # the driver's replicationFactor
    # the TARGET's own replication= stands
    assert resolve_target(f"kafka:driver={kafka},replication=1@127.0.0.1:9092").options[
        "replication"] == 1
    capsys.readouterr()

    pulsar_file = tmp_path / "pulsar.yaml"
    pulsar_file.write_text(PULSAR_DRIVER)
    t = resolve_target(f"pulsar:runtime=local,driver={pulsar_file},producer.batching_enabled=true")
    assert settings_of(t, "producer") == {"batching_enabled": True,  # the TARGET's own wins
                                          "batching_max_publish_delay_ms": 2}
    assert settings_of(t, "consumer") == {"receiver_queue_size": 500}
    warned = capsys.readouterr().err
    assert "client.serviceUrl" in warned and "client.ioThreads" in warned
    assert "producer.blockIfQueueFull" in warned
    with pytest.raises(TargetError, match="not valid YAML"):
        bad = tmp_path / "bad.yaml"
        bad.write_text("producer: [\n")
        resolve_target(f"pulsar:driver={bad}")


def test_secrets_read_back_are_hidden() -> None:
    from loadgen.core.settings import HIDDEN, SettingsRecord

    record = SettingsRecord(resolve_target("redis:runtime=local,conf.masteruser=hunter2"))
    record.add("conf", {"requirepass": "s3cret", "masterauth": "hunter2", "hz": "10"},
               read_back=True)
    record.add("broker", {"brokerClientAuthenticationParameters": "token:abc",
                          "tokenSecretKey": "file:///k", "journalSyncData": "true"}, read_back=True)
    entries = record.result()
    assert entries["conf.requirepass"]["value"] == HIDDEN
    assert entries["conf.masterauth"] == {"value": HIDDEN, "source": "platform default",
                                          "read_back": True}
    assert entries["broker.brokerClientAuthenticationParameters"]["value"] == HIDDEN
    assert entries["broker.tokenSecretKey"]["value"] == HIDDEN
    assert entries["conf.hz"]["value"] == "10" and entries["broker.journalSyncData"]["value"] == "true"
    assert "s3cret" not in str(entries) and "hunter2" not in str(entries["conf.masterauth"])


def test_an_omb_rabbitmq_driver_names_every_field(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    driver = tmp_path / "rabbitmq.yaml"
    driver.write_text("name: RabbitMQ\ndriverClass: x\nproducerCreationDelay: 100\n"
                      "amqpUris:\n  - amqp://localhost\nmessagePersistence: false\n"
                      "queueType: QUORUM\nsomethingNew: 1\n")
    t = resolve_target(f"rabbitmq:driver={driver}@127.0.0.1:5552")
    assert t.options["driver"] == str(driver)
    warned = capsys.readouterr().err.splitlines()
    assert len(warned) == 5 and all("not acted on" in ln for ln in warned)
    assert any("queueType: the rabbitmq target uses streams" in ln for ln in warned)
    assert any(ln.endswith("somethingNew (not acted on)") for ln in warned)
