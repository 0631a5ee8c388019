"""Against one running Kafka broker reached through the external runtime: lag as Kafka's own
tool reports it, the redpanda target's driver path, user-named and reused topics."""

from __future__ import annotations

import asyncio
import subprocess

import pyarrow.dataset as ds
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.partitioner import DefaultPartitioner

from collectors.kafka import COMMITTED_SOURCE, KafkaLag
from loadgen.core.driver import OutMessage
from loadgen.platforms import resolve_target
from loadgen.platforms.kafka import KafkaDriver, group_id
from tests.integration.backlog_support import WORKLOAD_FIELDS, assert_backlog_phase
from tests.integration.conftest import run_cli, run_json
from tests.integration.kafka_support import (  # noqa: F401  (fixtures)
    Cluster,
    kafka_39,
    kafka_cluster,
    nothing_left_running,
)
from tests.integration.test_redis_run import _one_error_line

pytestmark = pytest.mark.integration


async def _topics(bootstrap: str) -> list[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return list(await admin.list_topics())
    finally:
        await admin.close()


async def _create(bootstrap: str, topic: str, partitions: int, records: int = 0) -> None:
    driver = KafkaDriver(resolve_target(f"kafka@{bootstrap}"), bootstrap, "kafka")
    await driver.connect()
    try:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        await admin.create_topics([NewTopic(topic, partitions, 1)])
        await admin.close()
        if records:
            producer = await driver.producer(topic, 0)
            await producer.send_batch([OutMessage(b"old", None, 0)] * records)
            await producer.close()
    finally:
        await driver.close()


async def _lag_scenario(bootstrap: str, topic: str) -> tuple[str, dict[int, int], int]:
    """Produce, consume everything with one group, stop it, produce more: the group's lag is
    then what the second round put on each partition."""
    driver = KafkaDriver(resolve_target(f"kafka@{bootstrap}"), bootstrap, "kafka")
    await driver.connect()
    group = group_id(topic, "sub")
    try:
        await driver.create_topic(topic, 3, ["sub"])
        producer = await driver.producer(topic, 0)

        async def produce(first: int, count: int) -> None:
            await producer.send_batch([OutMessage(b"x" * 100, str(n).encode(), n)
                                       for n in range(first, first + count)])

        await produce(0, 900)
        consumer = await driver.consumer(topic, "sub", 0, track_ids=False)
        consumed = 0
        while consumed < 900:
            batch = await consumer.receive()
            consumed += batch.count if batch is not None else 0
        await consumer.close()  # commits its position
        await produce(900, 500)
        await producer.close()
        collector = KafkaLag(bootstrap, topic, 3, [group])
        await collector.start()
        try:
            snap = await collector.lag()
        finally:
            await collector.close()
        return snap.source, snap.per_partition, snap.total
    finally:
        await driver.close()


def _tool_lag(cluster: Cluster, group: str, topic: str) -> dict[int, int]:
    argv = cluster.runtime.tool_argv("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                                     "--bootstrap-server", cluster.bootstrap, "--describe",
                                     "--group", group)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True).stdout
    lags = {}
    for line in out.splitlines():
        cols = line.split()
        # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID
        if len(cols) >= 6 and cols[1] == topic and cols[2].isdigit():
            lags[int(cols[2])] = int(cols[5])
    return lags


def test_lag_matches_consumer_group_command(kafka_cluster: Cluster):  # noqa: F811
    topic = "streambench-lag-check"
    source, ours, total = asyncio.run(_lag_scenario(kafka_cluster.bootstrap, topic))
    theirs = _tool_lag(kafka_cluster, group_id(topic, "sub"), topic)
    assert source == COMMITTED_SOURCE  # no consumer runs: the group's committed offsets
    assert total == 500
    assert ours == theirs, f"streambench {ours} vs ConsumerGroupCommand {theirs}"
    assert len([v for v in ours.values() if v > 0]) >= 2


def test_redpanda_target_through_external_runtime(tmp_path, kafka_cluster: Cluster,  # noqa: F811
                                                  nothing_left_running):  # noqa: F811
    res = run_cli(["run", f"redpanda@{kafka_cluster.bootstrap}", "--rate", "500", "--duration", "3",
                   "--warmup", "0", "--partitions", "2", "--headless", "--track-delivery",
                   "--out", str(tmp_path / "run")])
    assert res.returncode == 0, res.stderr
    meta = run_json(tmp_path / "run")
    (target,) = meta["targets"]
    assert target["platform"] == "redpanda" and target["runtime"] == "external"
    totals = meta["totals"][0]
    assert totals["consumed"] == totals["produced"] == 1500 and totals["duplicates"] == 0
    assert totals["drained"]
    # the run's own topic is removed again; the cluster keeps running
    assert not any(t in target["topics"] for t in asyncio.run(_topics(kafka_cluster.bootstrap)))


def test_topic_shape_mismatch(kafka_cluster: Cluster, nothing_left_running):  # noqa: F811
    asyncio.run(_create(kafka_cluster.bootstrap, "shaped", 2))
    res = run_cli(["run", f"kafka:topic=shaped@{kafka_cluster.bootstrap}", "--partitions", "3",
                   "--headless", "--duration", "1"])
    assert res.returncode == 2, res.stderr
    _one_error_line(res.stderr, "topic shaped exists with 2 partitions and replication 1, but "
                                "the run needs 3 partitions")
    res = run_cli(["run", f"kafka:topic=shaped@{kafka_cluster.bootstrap}", "--partitions", "2",
                   "--headless", "--duration", "1"])
    assert res.returncode == 2, res.stderr
    _one_error_line(res.stderr, "add reuse_topic")


def test_reused_topic_reads_only_this_run(tmp_path, kafka_cluster: Cluster):  # noqa: F811
    asyncio.run(_create(kafka_cluster.bootstrap, "reused", 2, records=50))
    res = run_cli(["run", f"kafka:topic=reused,reuse_topic@{kafka_cluster.bootstrap}",
                   "--partitions", "2", "--rate", "200", "--duration", "2", "--warmup", "0",
                   "--headless", "--out", str(tmp_path / "run")])
    assert res.returncode == 0, res.stderr
    totals = run_json(tmp_path / "run")["totals"][0]
    assert totals["consumed"] == totals["produced"] == 400  # the 50 older records are skipped
    assert "reused" in asyncio.run(_topics(kafka_cluster.bootstrap))  # a named topic stays


def test_flush_settings_reach_the_topic(kafka_cluster: Cluster):  # noqa: F811
    async def scenario() -> dict[str, str]:
        bootstrap = kafka_cluster.bootstrap
        target = resolve_target(f"kafka:flush_messages=1,flush_ms=0,replication=1@{bootstrap}")
        driver = KafkaDriver(target, bootstrap, "kafka")
        await driver.connect()
        try:
            await driver.create_topic("streambench-fsync-0", 1, [])
        finally:
            await driver.close()
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            (resp,) = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, "streambench-fsync-0",
                                {"flush.messages": None, "flush.ms": None})])
        finally:
            await admin.close()
        (_code, _msg, _type, _name, entries) = resp.resources[0][:5]
        return {e[0]: e[1] for e in entries}

    assert asyncio.run(scenario()) == {"flush.messages": "1", "flush.ms": "0"}


def test_consumer_starts_at_log_end(kafka_cluster: Cluster):  # noqa: F811
    """Groups are positioned at the end when the topic is set up: a consumer that joins later
    still reads everything produced after set-up and nothing before."""
    async def scenario() -> list[int]:
        bootstrap = kafka_cluster.bootstrap
        await _create(bootstrap, "late-join", 1, records=10)
        driver = KafkaDriver(resolve_target(f"kafka:topic=late-join,reuse_topic@{bootstrap}"),
                             bootstrap, "kafka")
        await driver.connect()
        try:
            await driver.create_topic("late-join", 1, ["sub"])
            producer = await driver.producer("late-join", 0)
            await producer.send_batch([OutMessage(b"new", None, n) for n in range(1, 6)])
            await producer.close()
            consumer = await driver.consumer("late-join", "sub", 0, track_ids=True)
            seen: list[int] = []
            while len(seen) < 5:
                batch = await consumer.receive()
                if batch is not None:
                    seen += batch.intended_ns
            await consumer.close()
            check = AIOKafkaConsumer("late-join", bootstrap_servers=bootstrap,
                                     group_id=group_id("late-join", "sub"))
            await check.start()
            more = await check.getmany(timeout_ms=1000)
            await check.stop()
            assert not more
            return seen
        finally:
            await driver.close()

    assert asyncio.run(scenario()) == [1, 2, 3, 4, 5]



async def _end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        await consumer.stop()


def test_maximum_rate_keyed_records_land_where_their_keys_say(tmp_path, kafka_cluster: Cluster):  # noqa: F811
    """At maximum rate a producer hands over whole record batches; keyed records must still go
    to murmur2(key)'s partition, each exactly once, with the intended-time header intact."""
    asyncio.run(_create(kafka_cluster.bootstrap, "keyed", 3))
    workload = tmp_path / "keyed.yaml"
    workload.write_text("name: keyed\ntopics: 1\npartitionsPerTopic: 3\nmessageSize: 200\n"
                        "producersPerTopic: 1\nsubscriptionsPerTopic: 1\nconsumerPerSubscription: 2\n"
                        "producerRate: 0\nmaxRate: fast\nkeyDistributor: KEY_ROUND_ROBIN\n"
                        "testDurationSeconds: 3\nwarmupDurationSeconds: 0\n")
    res = run_cli(["run", f"kafka:topic=keyed,reuse_topic@{kafka_cluster.bootstrap}",
                   "--workload", str(workload), "--headless", "--track-delivery",
                   "--out", str(tmp_path / "run")])
    assert res.returncode == 0, res.stderr
    totals = run_json(tmp_path / "run")["totals"][0]
    produced = totals["produced"]
    assert produced > 1000 and totals["send_errors"] == 0
    assert totals["consumed"] == produced and totals["duplicates"] == 0 and totals["drained"]
    # message n of the single producer has key n mod 10,000
    partitions = [0, 1, 2]
    expected = dict.fromkeys(partitions, 0)
    for n in range(produced):
        expected[DefaultPartitioner()(str(n % 10_000).encode(), partitions, partitions)] += 1
    assert asyncio.run(_end_offsets(kafka_cluster.bootstrap, "keyed", 3)) == expected
    e2e = ds.dataset(tmp_path / "run" / "ticks", format="parquet").to_table(
        columns=["e2e_count", "e2e_min"]).to_pydict()
    assert sum(e2e["e2e_count"]) == produced
    assert all(m is None or m > 0 for m in e2e["e2e_min"])


def test_backlog_phase_on_kafka(kafka_cluster: Cluster, tmp_path) -> None:  # noqa: F811
    """OMB's consumerBacklogSizeGB on a real broker: the backlog is built, then drained."""
    workload = tmp_path / "backlog.yaml"
    workload.write_text(f"name: kafka-backlog\n{WORKLOAD_FIELDS}")
    out = tmp_path / "run"
    res = run_cli(["run", f"kafka@{kafka_cluster.bootstrap}", "--workload", str(workload),
                   "--headless", "--out", str(out)], timeout_s=180)
    assert res.returncode == 0, res.stderr[-3000:]
    assert_backlog_phase(out)


OMB_KAFKA_DRIVER = """name: Kafka
driverClass: io.openmessaging.benchmark.driver.kafka.KafkaBenchmarkDriver
# one broker here: OMB's files say 3 and min.insync.replicas=2 for three
replicationFactor: 1
topicConfig: |
  min.insync.replicas=1
commonConfig: |
  bootstrap.servers=localhost:9092
  request.timeout.ms=120000
producerConfig: |
  acks=all
  linger.ms=1
  batch.size=1048576
consumerConfig: |
  auto.offset.reset=earliest
  enable.auto.commit=false
  max.partition.fetch.bytes=10485760
"""


def test_an_omb_driver_file_runs_through_driver(kafka_cluster: Cluster, tmp_path) -> None:  # noqa: F811
    driver = tmp_path / "kafka-driver.yaml"
    driver.write_text(OMB_KAFKA_DRIVER)
    out = tmp_path / "run"
    res = run_cli(["run", f"kafka@{kafka_cluster.bootstrap}", "--driver", str(driver), "--rate", "500",
                   "--duration", "3", "--warmup", "0", "--headless", "--out", str(out)])
    assert res.returncode == 0, res.stderr[-3000:]
    # what streambench cannot act on is named, nothing is silently dropped
    assert "bootstrap.servers" in res.stderr and "not acted on" in res.stderr
    meta = run_json(out)
    settings = meta["targets"][0]["settings"]
    assert settings["producer.linger_ms"]["value"] == "1"
    assert settings["producer.max_batch_size"]["value"] == "1048576"
    assert settings["topic.min.insync.replicas"]["value"] == "1"
    assert meta["totals"][0]["produced"] == meta["totals"][0]["consumed"] == 1500
