"""The listener layout of a local KRaft cluster behind Toxiproxy (compose.kafka_links): what
each broker advertises and how it reaches its peers, and which proxies a fault on one side of
one broker acts on. The proxies themselves are tested with real brokers in
tests/integration/test_kafka_network_faults.py."""

from __future__ import annotations

import pytest

from compose.kafka_links import KafkaLinks
from loadgen.core.errors import StackError


def _listeners(text: str) -> dict[str, int]:
    return {name: int(address.rsplit(":", 1)[1])
            for name, _, address in (item.partition("://") for item in str(text).split(","))}


def test_three_brokers_reach_each_other_only_through_their_own_proxies() -> None:
    links = KafkaLinks("kafka", [9001, 9002, 9003], [9101])
    ports = links.ports() + [p.listen for p in links.proxies]
    assert len(set(ports)) == len(ports) and not {9001, 9002, 9003, 9101} & set(ports)
    proxy = {p.name: p for p in links.proxies}
    assert len(proxy) == 3 + 12  # a client proxy per broker, two per ordered pair of brokers
    for i in range(3):
        config = links.listener_config(i)
        bound = _listeners(str(config["listeners"]))
        told = _listeners(str(config["advertised.listeners"]))
        assert bound["CLIENT"] == 9001 + i
        assert told["CLIENT"] == proxy[f"broker-{i + 1}-clients"].listen  # clients: the proxy
        assert proxy[f"broker-{i + 1}-clients"].upstream == bound["CLIENT"]
        assert told["DIRECT"] == bound["DIRECT"]  # the collectors' listener: no proxy
        assert "CONTROLLER" not in told and config["inter.broker.listener.name"] == f"PEER{i + 1}"
        for j in range(3):
            if i == j:
                continue
            # broker j replicates from broker i through the proxy j → i, at i's listener PEER<j>
            hop = proxy[f"broker-{j + 1}-to-{i + 1}-replication"]
            assert told[f"PEER{j + 1}"] == hop.listen and hop.upstream == bound[f"PEER{j + 1}"]
        # broker i reaches controller j through the proxy i → j, itself directly
        voters = dict(v.split("@") for v in str(config["controller.quorum.voters"]).split(","))
        for j in range(3):
            want = (bound["CONTROLLER"] if i == j
                    else proxy[f"broker-{i + 1}-to-{j + 1}-controller"].listen)
            assert voters[str(j + 1)] == f"127.0.0.1:{want}"


def test_a_fault_acts_on_one_side_of_one_broker() -> None:
    links = KafkaLinks("kafka", [9001, 9002, 9003], [])
    assert links.links(1, "clients") == ["broker-2-clients"]
    peers = links.links(1, "peers")
    # into and out of broker 2, for replication and the controller, from and to 2 others
    assert len(peers) == 8 and all(n.startswith("broker-2-to-") or "-to-2-" in n for n in peers)
    assert set(links.links(1, None)) == {"broker-2-clients", *peers}
    assert len(links.links(None, "peers")) == 12 and len(links.links(None, None)) == 15


def test_a_single_broker_has_a_client_proxy_and_no_peers() -> None:
    links = KafkaLinks("kafka", [9001], [])
    config = links.listener_config(0)
    assert config["inter.broker.listener.name"] == "DIRECT"
    assert [p.name for p in links.proxies] == ["broker-1-clients"]
    assert links.client_bootstrap() != links.direct_bootstrap()
    with pytest.raises(StackError) as exc:
        links.links(0, "peers")
    assert "a single broker has no peers" in str(exc.value)
