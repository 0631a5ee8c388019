"""A Kafka broker that listens on the IPv6 loopback alone, reached through the external runtime
(`kafka@[::1]:PORT`) with both clients: each run's figures against the broker's own offsets."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from compose.kafka import TOOL_HEAP, KafkaRuntime, random_cluster_id
from compose.process import start_process, stop_process
from tests.conftest import run_cli, run_json
from tests.integration.kafka_support import kafka_39  # noqa: F401  (fixture)

pytestmark = pytest.mark.integration


def _free_ipv6_port() -> int:
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
        s.bind(("::1", 0))
        return int(s.getsockname()[1])


async def _answers(bootstrap: str) -> bool:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    try:
        await admin.start()
        await admin.list_topics()
        return True
    except Exception:
        return False
    finally:
        with contextlib.suppress(Exception):
            await admin.close()


@pytest.fixture(scope="module")
def ipv6_broker(kafka_39: KafkaRuntime, tmp_path_factory: pytest.TempPathFactory  # noqa: F811
                ) -> Iterator[tuple[str, KafkaRuntime]]:
    """One KRaft node whose client and controller listeners are both on [::1]."""
    root: Path = tmp_path_factory.mktemp("kafka-ipv6")
    port, controller = _free_ipv6_port(), _free_ipv6_port()
    config = root / "server.properties"
    config.write_text("\n".join([
        "process.roles=broker,controller", "node.id=1",
        f"controller.quorum.voters=1@[::1]:{controller}",
        f"listeners=PLAINTEXT://[::1]:{port},CONTROLLER://[::1]:{controller}",
        f"advertised.listeners=PLAINTEXT://[::1]:{port}",
        "controller.listener.names=CONTROLLER", "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        f"log.dirs={root / 'data'}", "offsets.topic.replication.factor=1",
        "transaction.state.log.replication.factor=1", "transaction.state.log.min.isr=1",
        "group.initial.rebalance.delay.ms=0", ""]))
    logging = kafka_39.write_logging(root / "logging.properties", "INFO")
    subprocess.run(kafka_39.argv("kafka.tools.StorageTool",
                                 ["format", "-t", random_cluster_id(), "-c", str(config)],
                                 TOOL_HEAP, logging), check=True, capture_output=True, timeout=120)
    proc = start_process(kafka_39.argv("kafka.Kafka", [str(config)], "512M", logging),
                         root / "broker.log", cwd=root)
    bootstrap = f"[::1]:{port}"
    try:
        deadline = time.monotonic() + 120
        while not asyncio.run(_answers(bootstrap)):
            assert proc.poll() is None, (root / "broker.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "the broker did not answer on [::1] in 120 s"
            time.sleep(0.5)
        yield bootstrap, kafka_39
    finally:
        stop_process(proc, grace_s=10)


def _end_offsets(runtime: KafkaRuntime, bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's log-end offset, as Kafka's own GetOffsetShell reads it."""
    out = subprocess.run(runtime.tool_argv("org.apache.kafka.tools.GetOffsetShell",
                                           "--bootstrap-server", bootstrap, "--topic", topic),
                         capture_output=True, text=True, timeout=120, check=True).stdout
    found = {}
    for line in out.split():
        name, partition, offset = line.rsplit(":", 2)
        if name == topic:
            found[int(partition)] = int(offset)
    return found


@pytest.mark.parametrize("client", ["aiokafka", "librdkafka"])
def test_a_broker_on_ipv6_loopback_alone(tmp_path, ipv6_broker, client: str) -> None:
    bootstrap, runtime = ipv6_broker
    topic = f"ipv6-{client}"
    res = run_cli(["run", f"kafka:client={client},topic={topic}@{bootstrap}", "--rate", "500",
                   "--duration", "3", "--warmup", "0", "--partitions", "2", "--headless",
                   "--out", str(tmp_path / "run")])
    assert res.returncode == 0, res.stderr
    meta = run_json(tmp_path / "run")
    (target,) = meta["targets"]
    assert target["endpoints"] == {"kafka": bootstrap}
    totals = meta["totals"][0]
    assert totals["produced"] == totals["consumed"] == 1500 and totals["drained"]
    # the named topic stays: the broker holds exactly what the run says it produced
    offsets = _end_offsets(runtime, bootstrap, topic)
    assert sorted(offsets) == [0, 1] and sum(offsets.values()) == totals["produced"]
    assert all(v > 0 for v in offsets.values())
