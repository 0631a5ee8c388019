"""Namespaced settings on a real local Kafka broker (one for the module): a `broker.` setting in
the broker's own start-up configuration dump and in its DescribeConfigs answer, a `topic.`
setting on the created topic, `producer.` / `consumer.` / `admin.` settings on the aiokafka
clients, each recorded with its source."""

from __future__ import annotations

import asyncio

import pytest

from compose.kafka import KafkaLocalStack
from loadgen.platforms import resolve_target
from loadgen.platforms.kafka import KafkaDriver
from tests.integration.kafka_support import kafka_39, nothing_left_running, progress  # noqa: F401

pytestmark = pytest.mark.integration

SPEC = ("kafka:runtime=local,heap=384M,broker.num.io.threads=5,broker.log.cleaner.threads=2,"
        "topic.retention.ms=123456789,topic.min.insync.replicas=1,producer.linger.ms=7,"
        "consumer.max.poll.records=50,admin.retry.backoff.ms=60,profile=durable")


async def _scenario() -> tuple[str, dict, float, int | None]:
    target = resolve_target(SPEC)
    stack = KafkaLocalStack(target, target.label, zookeeper=False)
    try:
        await stack.up(progress)
        await stack.ready(240, progress)
        desc = stack.describe()
        driver = KafkaDriver(target, desc.endpoints["kafka"], "kafka", desc)
        await driver.connect()
        try:
            await driver.create_topic("settings-topic", 1, ["sub"])
            settings = await driver.settings_in_force()
            producer = await driver.producer("settings-topic", 0)
            consumer = await driver.consumer("settings-topic", "sub", 0, False)
            linger = producer._producer._message_accumulator._linger_time  # type: ignore[attr-defined]
            records = consumer._consumer._max_poll_records  # type: ignore[attr-defined]
            await producer.close()
            await consumer.close()
        finally:
            await driver.close()
        log = stack._brokers[0].log.read_text(errors="replace")
    finally:
        await stack.down()
    return log, settings, linger, records


def test_settings_in_force_on_a_real_broker(kafka_39, nothing_left_running):  # noqa: F811
    log, settings, linger, records = asyncio.run(_scenario())
    # the broker's own dump of its configuration at start-up
    assert "num.io.threads = 5" in log and "log.cleaner.threads = 2" in log
    # DescribeConfigs of the broker and of the topic, with the source of each value
    assert settings["broker.num.io.threads"] == {"value": "5", "source": "user", "read_back": True}
    assert settings["broker.log.cleaner.threads"]["value"] == "2"
    assert settings["broker.num.network.threads"] == {"value": "3", "source": "platform default",
                                                      "read_back": True}
    assert settings["broker.group.initial.rebalance.delay.ms"]["source"] == "streambench default"
    assert settings["topic.retention.ms"] == {"value": "123456789", "source": "user",
                                              "read_back": True}
    assert settings["topic.flush.messages"] == {"value": "1", "source": "profile", "read_back": True}
    assert settings["topic.segment.bytes"]["source"] == "platform default"
    # the clients were made with them
    assert linger == pytest.approx(0.007)
    assert records == 50
    assert settings["producer.linger_ms"] == {"value": "7", "source": "user", "read_back": False}
    assert settings["producer.acks"]["source"] == "streambench default"
    assert settings["consumer.max_poll_records"]["value"] == "50"
    assert settings["admin.retry_backoff_ms"]["value"] == "60"
    # the clients' security arguments are not recorded (the TARGET's options are)
    assert not any(("sasl" in k or "ssl" in k or "security" in k)
                   for k in settings if k.startswith(("producer.", "consumer.", "admin.")))
