"""The docker runtime's pure parts: docker stats arithmetic, the runtime rule, the limits."""

from __future__ import annotations

import pytest

from collectors.docker import block_io, cpu_percent, memory_bytes, network_io
from compose.docker import parse_memory, project_name
from loadgen.errors import TargetError, WorkloadError
from loadgen.platforms import resolve_target
from loadgen.platforms.runtime import with_run_settings
from loadgen.workload import parse_workload


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
