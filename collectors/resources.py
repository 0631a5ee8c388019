"""The broker-resources collector of a target: docker stats, cAdvisor or the process tree, by
the target's `resources` option (default: docker stats for containers, the process tree for
local brokers, nothing for an existing cluster)."""

from __future__ import annotations

from collectors.cadvisor import CadvisorResources
from collectors.docker import DockerStats
from collectors.process import ProcessResources
from loadgen.core.collector import Collector
from loadgen.core.stackinfo import StackDescription
from loadgen.core.target import Target


def resource_collectors(target: Target, desc: StackDescription) -> list[Collector]:
    source = target.options.get("resources") or ("docker" if desc.runtime == "docker" else "process")
    if source == "docker" and desc.container_ids:
        return [DockerStats(desc.container_ids)]
    if source == "cadvisor" and "cadvisor" in desc.endpoints:
        return [CadvisorResources(desc.endpoints["cadvisor"], desc.container_ids)]
    if source == "process" and desc.pids:
        return [ProcessResources(desc.pids)]
    return []
