"""The Pulsar target's pieces that need no broker: TARGET options and addresses, the
standalone.conf rewrite, the backlog read from partitioned-stats."""

from __future__ import annotations

import pytest

from collectors.pulsar import backlog, partition_index
from compose.pulsar import PulsarTargetConfig, parse_address, standalone_conf
from loadgen.core.errors import TargetError
from loadgen.platforms import resolve_target


def test_target_defaults_and_labels():
    target = resolve_target("pulsar:runtime=local")
    assert PulsarTargetConfig.of(target).describe() == {
        "persistent": "true", "topic_domain": "persistent", "subscription_type": "shared",
        "batching": "true", "namespace": "public/default", "batch_max_messages": "1000",
        "batch_max_bytes": "131072", "batch_delay_ms": "1"}
    np = resolve_target("pulsar:persistent=false,batching=false,subscription=failover,runtime=local")
    assert PulsarTargetConfig.of(np).describe() == {
        "persistent": "false", "topic_domain": "non-persistent", "subscription_type": "failover",
        "batching": "false", "namespace": "public/default"}


def test_external_address_parses():
    target = resolve_target("pulsar:subscription=key_shared@pulsar://10.0.0.5:6650,http://10.0.0.5:8080")
    assert target.runtime == "external"
    assert target.options["subscription"] == "key_shared"
    assert parse_address(target.address) == ("pulsar://10.0.0.5:6650", "http://10.0.0.5:8080")
    # either URL alone: the other on the same host, standard port; order does not matter
    assert parse_address("pulsar://h:7000") == ("pulsar://h:7000", "http://h:8080")
    assert parse_address("https://h:8443,pulsar+ssl://h:6651") == ("pulsar+ssl://h:6651", "https://h:8443")


@pytest.mark.parametrize("address", ["127.0.0.1:6650", "pulsar://h:1,pulsar://h:2", "pulsar://h:99999",
                                     "ftp://h:1", "pulsar://:6650"])
def test_bad_external_address(address):
    with pytest.raises(TargetError, match="bad Pulsar address"):
        parse_address(address)


@pytest.mark.parametrize("spec, fragment", [
    ("pulsar:subscription=fifo", "expected one of shared, key_shared, failover, exclusive"),
    ("pulsar:heap=lots", "expected a JVM heap size"),
    ("pulsar:batch_delay_ms=0", r"from 1 to 2,147,483,647 \(a 32-bit client option\)"),
    ("pulsar:namespace=public", "expected TENANT/NAMESPACE"),
    ("pulsar:port=6650@pulsar://h:6650", "runtime= and port= do not apply"),
])
def test_bad_options(spec, fragment):
    with pytest.raises(TargetError, match=fragment):
        resolve_target(spec)


def test_standalone_conf_overrides_stock_keys_and_appends_new_ones():
    stock = "# comment\nbindAddress=0.0.0.0\nwebServicePort=8080\nclusterName=standalone\n"
    text = standalone_conf(stock, {"bindAddress": "127.0.0.1", "webServicePort": "18080",
                                   "journalSyncData": "false"})
    lines = text.splitlines()
    assert "bindAddress=127.0.0.1" in lines and "bindAddress=0.0.0.0" not in lines
    assert "webServicePort=18080" in lines and "clusterName=standalone" in lines
    assert lines[-1] == "journalSyncData=false"


def test_backlog_per_partition_sums_own_subscriptions():
    stats = {"partitions": {
        "persistent://public/default/t-partition-0": {"subscriptions": {
            "a": {"msgBacklog": 3}, "b": {"msgBacklog": 4}, "other": {"msgBacklog": 100}}},
        "persistent://public/default/t-partition-1": {"subscriptions": {"a": {"msgBacklog": 0}}},
    }}
    assert partition_index("persistent://public/default/my-partition-x-partition-12") == 12
    assert backlog(stats, {"a", "b"}, 3) == {0: 7, 1: 0, 2: 0}
    # entries that are none of the topic's partitions are left out, not a failed sample
    assert partition_index("persistent://public/default/t") is None
    assert partition_index("persistent://public/default/t-partition-x") is None
    odd = {"partitions": {**stats["partitions"],
                          "persistent://public/default/t": {"subscriptions": {"a": {"msgBacklog": 9}}},
                          "persistent://public/default/t-partition-7": {
                              "subscriptions": {"a": {"msgBacklog": 9}}}}}
    assert backlog(odd, {"a", "b"}, 3) == {0: 7, 1: 0, 2: 0}


def test_receiver_queue_follows_the_message_size():
    """The consumers' receiver queue holds up to 32 MiB of messages, between the client's own
    1,000 and 10,000 messages; a user's consumer.receiver_queue_size wins."""
    from loadgen.platforms.pulsar import PulsarDriver

    def queue(target: str, size: int) -> int:
        t = resolve_target(target)
        driver = PulsarDriver("pulsar://127.0.0.1:6650", "http://127.0.0.1:8080",
                              PulsarTargetConfig.of(t), target=t)
        driver.expect(size)
        return driver.consumer_kwargs()["receiver_queue_size"]

    assert queue("pulsar", 1024) == 10_000
    assert queue("pulsar", 4096) == 8192
    assert queue("pulsar", 65_536) == queue("pulsar", 614_400) == 1000
    assert queue("pulsar:consumer.receiver_queue_size=300", 1024) == 300
