"""`client=librdkafka`: the librdkafka properties a Kafka target's options and settings become,
and the settings it refuses before anything starts."""

from __future__ import annotations

import pytest

from loadgen.core.errors import TargetError
from loadgen.platforms import PLATFORMS, resolve_target
from loadgen.platforms.kafka import KafkaDriver


def _driver(spec: str) -> KafkaDriver:
    return KafkaDriver(resolve_target(spec), "127.0.0.1:9092", "kafka")


def test_options_and_profiles_become_librdkafka_properties():
    driver = _driver("kafka:client=librdkafka,acks=1,compression=zstd,profile=throughput"
                     "@127.0.0.1:9092")
    producer = driver._rdkafka_producer_config(3)
    assert producer["acks"] == "1" and producer["compression.type"] == "zstd"
    assert producer["linger.ms"] == 10 and producer["batch.size"] == 1048576  # the profile's
    assert producer["client.id"] == "streambench-producer-3"
    assert producer["socket.nagle.disable"] is True
    assert producer["partitioner"] == "murmur2_random"  # keyed records as the Java client
    consumer = driver._rdkafka_consumer_config("g", 0)
    assert consumer["fetch.min.bytes"] == 65536 and consumer["fetch.wait.max.ms"] == 100
    assert consumer["group.id"] == "g" and consumer["enable.auto.commit"] is True
    assert not any("_" in name for name in (*producer, *consumer))  # aiokafka's names stay out


def test_a_setting_without_a_librdkafka_property_is_refused_before_anything_starts():
    target = resolve_target("kafka:client=librdkafka,consumer.max_poll_records=10@127.0.0.1:9092")
    with pytest.raises(TargetError, match=r"consumer\.max_poll_records has no librdkafka "
                                         r"property.*use client=aiokafka"):
        PLATFORMS["kafka"].make_stack(target)
    # the same setting is aiokafka's own: accepted with the default client
    plain = resolve_target("kafka:consumer.max_poll_records=10@127.0.0.1:9092")
    assert PLATFORMS["kafka"].make_stack(plain) is not None


def test_tls_and_sasl_become_librdkafka_properties(tmp_path, monkeypatch):
    monkeypatch.setenv("SB_PW", "Unit-secret")
    driver = _driver("kafka:client=librdkafka,sasl=scram-sha-256,user=u,password_env=SB_PW"
                     "@127.0.0.1:9092")
    config = driver._rdkafka_producer_config(0)
    assert config["security.protocol"] == "SASL_PLAINTEXT"
    assert config["sasl.mechanism"] == "SCRAM-SHA-256" and config["sasl.username"] == "u"
    assert config["sasl.password"] == "Unit-secret"
