"""The docker runtime's pure parts: docker stats and cAdvisor arithmetic, the runtime rule, the
limits, the compose fragments that carry a target's broker settings."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import pytest

from collectors import cadvisor
from collectors.docker import block_io, cpu_percent, memory_bytes, network_io
from compose.docker import _literal, parse_memory, project_name
from compose.kafka import KafkaDockerStack, kafka_env_name, kafka_property
from compose.nats import CONTAINER_CONF, NatsDockerStack
from compose.pravega import PravegaDockerStack
from compose.pulsar import PulsarDockerStack
from compose.rabbitmq import RabbitDockerStack
from compose.redis import RedisDockerStack
from loadgen.core.errors import StackError, TargetError, WorkloadError
from loadgen.core.stack import CADVISOR_ADDRESS
from loadgen.core.workload import parse_workload
from loadgen.platforms import resolve_target
from loadgen.platforms.runtime import with_run_settings


def _frame(total: int, system: int, pre_total: int, pre_system: int, cpus: int = 2) -> dict:
    return {"cpu_stats": {"cpu_usage": {"total_usage": total}, "system_cpu_usage": system,
                          "online_cpus": cpus},
            "precpu_stats": {"cpu_usage": {"total_usage": pre_total}, "system_cpu_usage": pre_system}}


def test_cpu_percent_like_docker_stats():
    # 0.25 s of CPU over 1 s of a 2-CPU system clock (2 s of system time): 25 % of one core
    frame = _frame(1_250_000_000, 12_000_000_000, 1_000_000_000, 10_000_000_000)
    assert cpu_percent(frame) == pytest.approx(25.0)
    # between two frames instead of a frame's own precpu_stats
    later = _frame(1_750_000_000, 14_000_000_000, 0, 0)
    assert cpu_percent(later, frame) == pytest.approx(50.0)
    # the first frame of a stream has no precpu system time
    assert cpu_percent({"cpu_stats": frame["cpu_stats"], "precpu_stats": {"cpu_usage": {}}}) is None


def test_memory_without_the_page_cache_v1_and_v2():
    v1 = {"memory_stats": {"usage": 100 * 2**20, "stats": {"total_inactive_file": 30 * 2**20,
                                                            "inactive_file": 5 * 2**20}}}
    assert memory_bytes(v1) == 70 * 2**20
    v2 = {"memory_stats": {"usage": 100 * 2**20, "stats": {"inactive_file": 10 * 2**20}}}
    assert memory_bytes(v2) == 90 * 2**20
    assert memory_bytes({"memory_stats": {"usage": 5, "stats": {"inactive_file": 9}}}) == 5
    assert memory_bytes({"memory_stats": {}}) is None


def test_block_io_and_network():
    frame = {"blkio_stats": {"io_service_bytes_recursive": [
        {"op": "Read", "value": 10}, {"op": "Write", "value": 7}, {"op": "read", "value": 1},
        {"op": "Total", "value": 18}]},
        "networks": {"eth0": {"rx_bytes": 5, "tx_bytes": 6}, "eth1": {"rx_bytes": 1, "tx_bytes": 2}}}
    assert block_io(frame) == (11, 7)
    assert network_io(frame) == (6, 8)
    assert network_io({}) is None  # host networking: the engine reports no networks


def test_cadvisor_times_as_go_writes_them():
    at = 1796645400  # 2026-12-07T12:10:00Z
    assert cadvisor.time_ns("2026-12-07T12:10:00.123456789Z") == at * 10**9 + 123456789
    # trailing zeros dropped, no fraction at all, an offset instead of Z
    assert cadvisor.time_ns("2026-12-07T12:10:00.5Z") == at * 10**9 + 500_000_000
    assert cadvisor.time_ns("2026-12-07T12:10:00Z") == at * 10**9
    assert cadvisor.time_ns("2026-12-07T13:10:00.000000001+01:00") == at * 10**9 + 1
    assert cadvisor.time_ns("2026-12-07T07:10:00-05:00") == at * 10**9


def _sample(at_s: float, cpu_s: float, memory: int = 1 << 20, read: int = 0) -> dict:
    whole, frac = divmod(round(at_s * 1e9), 10**9)
    stamp = f"2026-12-07T12:10:{whole:02d}.{frac:09d}Z"
    return {"timestamp": stamp, "cpu": {"usage": {"total": round(cpu_s * 1e9)}},
            "memory": {"working_set": memory},
            "diskio": {"io_service_bytes": [{"device": "sda", "stats": {"Read": read, "Write": 7}}]}}


def test_cadvisor_cpu_over_the_tick():
    first, second = cadvisor.Sample.of(_sample(0, 1.0)), cadvisor.Sample.of(_sample(2, 1.5))
    assert (second.memory, second.read, second.write) == (1 << 20, 0, 7)
    assert cadvisor.cpu_percent(first, second) == pytest.approx(25.0)  # 0.5 s over 2 s
    assert cadvisor.cpu_percent(None, second) is None
    # the container started again: its counters began anew, so the older sample is of no use
    restarted = cadvisor.Sample.of(_sample(3, 0.2))
    assert not restarted.follows(second) and cadvisor.cpu_percent(second, restarted) is None


def test_cadvisor_collector_against_a_served_api(monkeypatch):
    """The collector's ticks from cAdvisor's answers (as the API serves them, per container):
    over the tick from where the previous tick ended, the newest two after a restart, a
    container cAdvisor does not know adding nothing."""
    answers: dict[str, list[dict]] = {"a": [_sample(0, 1.0), _sample(1, 1.2)],
                                      "b": [_sample(0, 5.0, 2 << 20), _sample(1, 5.5, 2 << 20)]}

    def fetch(self, cid: str) -> list[cadvisor.Sample]:
        if cid not in answers:
            raise OSError("500 unable to find container")
        return [cadvisor.Sample.of(s) for s in answers[cid]]

    monkeypatch.setattr(cadvisor.CadvisorResources, "_fetch", fetch)
    monkeypatch.setattr(cadvisor.CadvisorResources, "_name", lambda self, cid: f"broker-{cid}")
    collector = cadvisor.CadvisorResources("127.0.0.1:1", ("a", "b"))
    first = asyncio.run(collector.sample())
    assert first.cpu_percent == pytest.approx(20.0 + 50.0)
    assert first.memory_bytes == 3 << 20
    assert first.broker["broker.broker-a.cpu_percent"] == pytest.approx(20.0)
    assert first.broker["broker.broker-b.cpu_percent"] == pytest.approx(50.0)
    # two new samples of a since the last tick: the tick spans both (0.9 s of CPU over 2 s)
    answers["a"] = [_sample(2, 1.6), _sample(3, 2.1)]
    # b started again: counters anew, its newest two samples
    answers["b"] = [_sample(2, 0.1, 1 << 20), _sample(3, 0.4, 1 << 20)]
    second = asyncio.run(collector.sample())
    assert second.broker["broker.broker-a.cpu_percent"] == pytest.approx(45.0)
    assert second.broker["broker.broker-b.cpu_percent"] == pytest.approx(30.0)
    # b unknown to cAdvisor (stopped): only a counts
    del answers["b"]
    answers["a"] = [_sample(3, 2.1), _sample(4, 2.3)]
    third = asyncio.run(collector.sample())
    assert third.cpu_percent == pytest.approx(20.0) and third.memory_bytes == 1 << 20
    answers.clear()
    nothing = asyncio.run(collector.sample())
    assert nothing.cpu_percent is None and nothing.memory_bytes is None


def test_cadvisor_address_of_the_run(monkeypatch):
    monkeypatch.setenv("STREAMBENCH_RUNTIME", "local")
    given = with_run_settings(resolve_target("redis:runtime=docker"), cadvisor="127.0.0.1:8080")
    assert given.options["resources"] == "cadvisor"
    assert given.options[CADVISOR_ADDRESS] == "127.0.0.1:8080"
    started = with_run_settings(resolve_target("redis:runtime=docker"), resources="cadvisor")
    assert CADVISOR_ADDRESS not in started.options  # streambench starts one
    # a target that reads docker stats itself keeps doing so
    own = with_run_settings(resolve_target("redis:runtime=docker,resources=docker"),
                            cadvisor="127.0.0.1:8080")
    assert own.options["resources"] == "docker" and CADVISOR_ADDRESS not in own.options
    with pytest.raises(TargetError, match="not of --resources process"):
        with_run_settings(resolve_target("redis:runtime=docker"), resources="process",
                          cadvisor="127.0.0.1:8080")
    with pytest.raises(TargetError, match=r"--cadvisor 127\.0\.0\.1:8080 needs the docker runtime"):
        with_run_settings(resolve_target("redis"), cadvisor="127.0.0.1:8080")


def test_runtime_rule(monkeypatch):
    monkeypatch.setenv("STREAMBENCH_RUNTIME", "local")
    assert resolve_target("redis").runtime == "local"
    assert resolve_target("redis", "docker").runtime == "docker"  # --runtime beats the variable
    assert resolve_target("redis:runtime=local", "docker").runtime == "local"  # the option beats both
    assert resolve_target("redpanda").runtime == "docker"  # it has no local runtime
    assert resolve_target("redis@127.0.0.1:6379", "docker").runtime == "external"
    with pytest.raises(TargetError, match="redpanda has no local runtime"):
        resolve_target("redpanda", "local")
    with pytest.raises(TargetError, match="cpus apply to containers"):
        resolve_target("redis:runtime=local,cpus=2")


def test_run_limits_fill_docker_targets_only(monkeypatch):
    monkeypatch.setenv("STREAMBENCH_RUNTIME", "local")
    docker = with_run_settings(resolve_target("redis:runtime=docker"), 6, "2.67G", None, True)
    assert (docker.options["cpus"], docker.options["memory"], docker.options["keep"]) == (6, "2.67g", True)
    own = with_run_settings(resolve_target("kafka:runtime=docker,cpus=2"), 6, None)
    assert own.options["cpus"] == 2.0  # the target's own option wins
    local = with_run_settings(resolve_target("redis"), 6, "1g")
    assert local.options["cpus"] is None and local.options["memory"] is None
    with pytest.raises(TargetError, match="--memory lots"):
        with_run_settings(resolve_target("redis:runtime=docker"), None, "lots")
    with pytest.raises(TargetError, match="--resources docker needs the docker runtime"):
        with_run_settings(resolve_target("redis"), resources="docker")


def test_workload_broker_limits():
    w = parse_workload({"brokerCpus": 6, "brokerMemory": "2.67g"}, "w.yaml")
    assert (w.broker_cpus, w.broker_memory) == (6.0, "2.67g")
    assert w.to_omb()["brokerMemory"] == "2.67g"
    with pytest.raises(WorkloadError, match="brokerMemory"):
        parse_workload({"brokerMemory": "a lot"}, "w.yaml")


def test_memory_sizes_and_project_names():
    assert parse_memory("2.67G") == "2.67g" and parse_memory("1073741824") == "1073741824"
    for bad in ("0", "2.67 GB", "-1g", "lots"):
        with pytest.raises(ValueError):
            parse_memory(bad)
    name = project_name("20261121T101500Z", 1)
    assert name.startswith("streambench-20261121t101500z-1-") and name == name.lower()


@pytest.mark.parametrize("prop, env", [
    ("log.dirs", "KAFKA_LOG_DIRS"),
    ("num.io.threads", "KAFKA_NUM_IO_THREADS"),
    ("confluent.some_thing", "KAFKA_CONFLUENT_SOME__THING"),
    ("a-b.c_d", "KAFKA_A___B_C__D"),
])
def test_kafka_image_variables(prop, env):
    assert kafka_env_name(prop) == env
    assert kafka_property(env) == prop
    assert kafka_property("KAFKA_HEAP_OPTS") is None  # the JVM's, not a property
    assert kafka_property("CLUSTER_ID") is None


def test_generated_compose_strings_keep_dollars():
    assert _literal({"a": ["x$y", {"b": "$$"}], "n": 3}) == {"a": ["x$$y", {"b": "$$$$"}], "n": 3}


def test_broker_settings_reach_the_docker_runtime():
    """Every platform with a docker runtime takes broker settings there; none without them
    adds a compose fragment."""
    for spec in ("redis:runtime=docker,conf.hz=20", "kafka:runtime=docker,broker.num.io.threads=4",
                 "kafka-zk:runtime=docker,broker.num.io.threads=4",
                 "pulsar:runtime=docker,broker.maxMessageSize=2097152",
                 "nats:runtime=docker,broker.max_payload=2MB",
                 "rabbitmq:runtime=docker,broker.heartbeat=30",
                 "pravega:runtime=docker,broker.writer.flush.threshold.milliseconds=200"):
        assert resolve_target(spec).runtime == "docker", spec
    assert RedisDockerStack(resolve_target("redis:runtime=docker"), "r").override() == {}


def test_redis_conf_directives_after_the_files_arguments():
    stack = RedisDockerStack(resolve_target("redis:runtime=docker,aof,conf.hz=20"), "redis")
    port = stack.settings()["STREAMBENCH_REDIS_PORT"]
    command = stack.override()["redis"]["command"]
    assert command[:3] == ["redis-server", "--port", port]
    assert command[-6:] == ["--appendonly", "yes", "--appendfsync", "everysec", "--hz", "20"]
    written = stack.written({})
    assert written["hz"] == "20" and written["dir"] == "/data" and written["save"] == ""


def test_kafka_settings_as_image_variables_on_every_broker():
    stack = KafkaDockerStack(resolve_target(
        "kafka:runtime=docker,brokers=3,broker.num.io.threads=4,broker.log.segment.bytes=1048576"),
        "kafka", zookeeper=False)
    stack.settings()
    fragments = stack.override()
    assert sorted(fragments) == ["kafka-1", "kafka-2", "kafka-3"]
    assert fragments["kafka-2"]["environment"] == {"KAFKA_NUM_IO_THREADS": "4",
                                                   "KAFKA_LOG_SEGMENT_BYTES": "1048576"}
    # what `compose config` gives the first broker, back as server properties
    env = {"KAFKA_NUM_IO_THREADS": "4", "KAFKA_LOG_DIRS": "/var/lib/kafka/data",
           "KAFKA_HEAP_OPTS": "-Xmx1G", "CLUSTER_ID": "x"}
    assert stack.written({"kafka-1": {"environment": env}}) == {
        "num.io.threads": "4", "log.dirs": "/var/lib/kafka/data"}


def test_kafka_brokers_get_the_jmx_exporter_each_on_a_port_of_its_own(tmp_path):
    """With the agent's jar at hand (what up() fetches first): its jar and rules mounted into
    every broker, KAFKA_OPTS attaching it on 127.0.0.1 at a port per broker, the ports in the
    endpoints; the target's settings kept beside it."""
    stack = KafkaDockerStack(resolve_target("kafka:runtime=docker,brokers=3,broker.num.io.threads=4"),
                             "kafka", zookeeper=False)
    stack._agent = tmp_path / "agent.jar"
    stack.settings()
    fragments = stack.override()
    opts = [fragments[b]["environment"]["KAFKA_OPTS"] for b in ("kafka-1", "kafka-2", "kafka-3")]
    ports = [int(re.search(r"=127\.0\.0\.1:(\d+):", o).group(1)) for o in opts]
    assert len(set(ports)) == 3
    assert all(fragments[b]["environment"]["KAFKA_NUM_IO_THREADS"] == "4" for b in fragments)
    assert fragments["kafka-1"]["volumes"][0].startswith(f"{tmp_path / 'agent.jar'}:")
    assert stack.endpoints()["metrics"] == ",".join(
        f"kafka-{i + 1}=http://127.0.0.1:{p}/metrics" for i, p in enumerate(ports))
    stack._remove_scratch()


def test_pulsar_settings_the_images_way():
    stack = PulsarDockerStack(resolve_target(
        "pulsar:runtime=docker,broker.managedLedgerNewEntriesCheckDelayInMillis=0"), "pulsar")
    stack.settings()
    env = stack.override()["pulsar"]["environment"]
    assert env == {"PULSAR_PREFIX_managedLedgerNewEntriesCheckDelayInMillis": "0"}
    service = {"environment": {**env, "bindAddress": "127.0.0.1", "PULSAR_MEM": "-Xmx1g"}}
    assert stack.written({"pulsar": service}) == {
        "managedLedgerNewEntriesCheckDelayInMillis": "0", "bindAddress": "127.0.0.1"}


def test_nats_settings_in_a_mounted_file():
    stack = NatsDockerStack(resolve_target("nats:runtime=docker,broker.max_payload=2MB,"
                                           "broker.jetstream.max_outstanding_catchup=64MB"), "nats")
    stack.settings()
    try:
        fragment = stack.override()["nats"]
        host_path, container_path, mode = fragment["volumes"][0].split(":")
        assert (container_path, mode) == (CONTAINER_CONF, "ro")
        conf = Path(host_path).read_text()
        assert "max_payload: 2MB" in conf and "max_outstanding_catchup: 64MB" in conf
        assert "max_memory_store" not in conf  # the docker runtime keeps the server's limits
        assert fragment["command"][-2:] == ["-c", CONTAINER_CONF]
    finally:
        stack._remove_scratch()
    assert not os.path.exists(host_path)


def test_rabbitmq_written_settings():
    stack = RabbitDockerStack(resolve_target("rabbitmq:runtime=docker,broker.heartbeat=30"), "rmq")
    stack.settings()
    try:
        written = stack.written({})
        assert written["heartbeat"] == "30"
        assert written["management.tcp.ip"] == "127.0.0.1"
        assert stack.override() == {}  # the settings are in the mounted rabbitmq.conf already
    finally:
        asyncio.run(stack.down())


def test_pravega_settings_after_the_files_options():
    stack = PravegaDockerStack(resolve_target(
        "pravega:runtime=docker,broker.writer.flush.threshold.milliseconds=200"), "pravega")
    stack.settings()
    opts = stack.override()["pravega"]["environment"]["PRAVEGA_STANDALONE_OPTS"].split()
    assert opts[-1] == "-Dwriter.flush.threshold.milliseconds=200"
    assert "-Dpravegaservice.service.listener.host.nameOrIp=127.0.0.1" in opts
    assert stack.written({})["writer.flush.threshold.milliseconds"] == "200"
    spaced = PravegaDockerStack(resolve_target(
        "pravega:runtime=docker,broker.writer.flush.threshold.milliseconds=2 3"), "pravega")
    spaced.settings()
    with pytest.raises(StackError, match="use runtime=local for such a value"):
        spaced.override()
