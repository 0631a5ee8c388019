"""What the Kafka driver records of a topic it made (run.json `layout`, the metadata view):
its replication and each partition's leader, as the broker's own metadata gives them."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from loadgen.platforms import resolve_target
from loadgen.platforms.kafka import KafkaDriver
from tests.integration.kafka_support import (  # noqa: F401  (fixtures)
    Cluster,
    kafka_39,
    kafka_cluster,
)

pytestmark = pytest.mark.integration


async def _layout_and_broker_view(bootstrap: str) -> tuple[dict, dict]:
    driver = KafkaDriver(resolve_target(f"kafka:topic=layout@{bootstrap}"), bootstrap, "kafka")
    await driver.connect()
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await driver.create_topic("streambench-layout", 3, ["sub"])
        (described,) = await admin.describe_topics(["layout"])
        return driver.topic_layout("streambench-layout", 3), dict(described)
    finally:
        await admin.close()
        await driver.close()


def test_replication_and_leaders_as_the_broker_tells_them(kafka_cluster: Cluster) -> None:  # noqa: F811
    layout, described = asyncio.run(_layout_and_broker_view(kafka_cluster.bootstrap))
    assert layout["name"] == "layout" and layout["partitions"] == 3
    assert layout["replication"] == 1
    assert layout["leaders"] == {str(p["partition"]): f"broker {p['leader']}"
                                 for p in described["partitions"]}
    assert len(layout["leaders"]) == 3
