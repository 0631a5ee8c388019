"""The committed Kafka, Pravega and Pulsar setting-name tables are what the generator extracts
from those brokers' jars (KafkaNames.java, PravegaNames.java) and distribution, assembled into
the cache as the stacks assemble them: regenerating them writes the same modules."""

from __future__ import annotations

import pytest

from loadgen.platforms.setting_names import generate, kafka, pravega, pulsar


@pytest.mark.parametrize("platform", ["kafka", "pravega", "pulsar"])
def test_regenerated_module_is_the_committed_one(platform: str):
    module = generate.PLATFORMS[platform]()
    assert generate.render(module) == module.path.read_text()


def test_tables_hold_known_names():
    assert {"num.io.threads", "log.retention.ms"} <= kafka.KAFKA_BROKER
    assert {"retention.ms", "cleanup.policy"} <= kafka.KAFKA_TOPIC
    assert "brokerServicePort" in pulsar.PULSAR_BROKER
    assert "zk.connect.uri" in pravega.PRAVEGA_COMPONENTS["bookkeeper"]
