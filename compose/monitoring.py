"""`streambench stacks up|down monitoring`: Prometheus, Grafana and cAdvisor beside the runs.

One compose project (compose/monitoring.yml and compose/cadvisor.yml) on the docker runtime,
host networking, every service listening on loopback. It stays up after the command ends, until
`stacks down monitoring` (or `stacks prune --all`); its containers and volumes carry the labels
of every stack streambench starts (`streambench.run=monitoring`), so `stacks ls` lists it.

Prometheus finds what to scrape through file-based service discovery: the command writes the
addresses of the runs' `--metrics` endpoints and cAdvisor's into `<cache>/monitoring/targets/`,
which the Prometheus container reads (compose/prometheus/prometheus.yml). Grafana gets that
Prometheus as its data source and the streambench dashboard through its provisioning files
(compose/grafana/provisioning/)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compose.docker import (
    PROJECT_LABEL,
    SERVICE_LABEL,
    compose_command,
    compose_error,
    compose_images,
    engine,
    last_log_lines,
    owner,
    pull_failure,
    remove_project,
    run_compose,
)
from compose.maven import cache_dir
from compose.process import port_in_use
from loadgen.core.errors import StackError, StreambenchError
from loadgen.core.stack import Progress

NAME = "monitoring"
PROJECT = "streambench-monitoring"
FILES = ["monitoring.yml", "cadvisor.yml"]
# the image variables of those files, named in the line that says an image is missing
IMAGE_VARIABLES = ("STREAMBENCH_IMAGE_PROMETHEUS", "STREAMBENCH_IMAGE_GRAFANA",
                   "STREAMBENCH_IMAGE_CADVISOR")
DEFAULT_SCRAPE = ("127.0.0.1", 9464)  # where docs/metrics.md starts its runs' endpoints
READY_TIMEOUT_S = 180.0
PROGRESS_EVERY_S = 5.0
STOP_GRACE_S = 10


@dataclass(frozen=True)
class MonitoringPorts:
    """Where the stack's services listen, on 127.0.0.1."""

    prometheus: int = 9090
    grafana: int = 3000
    cadvisor: int = 18080


def targets_dir() -> Path:
    """The folder of scrape targets the Prometheus container reads (file_sd_configs)."""
    return cache_dir() / NAME / "targets"


def scrape_target(address: tuple[str, int]) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def target_files(scrape: list[tuple[str, int]], ports: MonitoringPorts) -> dict[str, list[dict[str, Any]]]:
    """The file_sd files of the stack, by name: each a list of target groups."""
    return {"streambench.json": [{"targets": [scrape_target(a) for a in scrape], "labels": {}}],
            "cadvisor.json": [{"targets": [f"127.0.0.1:{ports.cadvisor}"], "labels": {}}]}


def write_targets(where: Path, scrape: list[tuple[str, int]], ports: MonitoringPorts) -> None:
    where.mkdir(parents=True, exist_ok=True)
    where.chmod(0o755)  # Prometheus runs as an unprivileged user in its container
    for name, groups in target_files(scrape, ports).items():
        path = where / name
        path.write_text(json.dumps(groups, indent=2) + "\n")
        path.chmod(0o644)


def compose_env(ports: MonitoringPorts, targets: Path) -> dict[str, str]:
    """The variables compose/monitoring.yml and compose/cadvisor.yml read."""
    return {
        "STREAMBENCH_RUN": NAME,
        "STREAMBENCH_TARGET": NAME,
        "STREAMBENCH_OWNER": owner(),
        "STREAMBENCH_PROMETHEUS_PORT": str(ports.prometheus),
        "STREAMBENCH_GRAFANA_PORT": str(ports.grafana),
        "STREAMBENCH_CADVISOR_PORT": str(ports.cadvisor),
        "STREAMBENCH_MONITORING_TARGETS": str(targets),
    }


def _health_urls(ports: MonitoringPorts) -> dict[str, str]:
    return {"prometheus": f"http://127.0.0.1:{ports.prometheus}/-/ready",
            "grafana": f"http://127.0.0.1:{ports.grafana}/api/health",
            "cadvisor": f"http://127.0.0.1:{ports.cadvisor}/healthz"}


def answers(url: str) -> bool:
    """Whether `url` answers a GET with 200 within 2 s (a service's health endpoint)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


def _containers(client: Any) -> dict[str, Any]:
    found = client.containers.list(all=True, filters={"label": f"{PROJECT_LABEL}={PROJECT}"})
    return {c.labels.get(SERVICE_LABEL, c.name): c for c in found}


def _check_ports(ports: MonitoringPorts) -> None:
    for service, port in (("prometheus", ports.prometheus), ("grafana", ports.grafana),
                          ("cadvisor", ports.cadvisor)):
        if port_in_use(port):
            raise StackError(f"{NAME}: port {port} on 127.0.0.1 is already in use; give "
                             f"{service} another with --{service}-port N")


async def _missing_images(client: Any, env: dict[str, str], progress: Progress) -> None:
    """Pull what is not there; one StackError naming every image still missing."""
    images = compose_images(FILES, {**os.environ, **env})
    failures = {}
    for image in images:
        failure = await pull_failure(client, image, NAME, progress)
        if failure is not None:
            failures[image] = failure
    if failures:
        first = next(iter(failures.values()))
        raise StackError(
            f"{NAME}: images not here and not pulled: {', '.join(failures)} ({first}): "
            f"`docker pull` them where a registry answers and bring them here with `docker save` "
            f"and `docker load`, or set {', '.join(IMAGE_VARIABLES)} to images you have")


async def _wait_ready(client: Any, ports: MonitoringPorts, progress: Progress) -> None:
    loop = asyncio.get_running_loop()
    started = last_report = loop.time()
    waiting = _health_urls(ports)
    while waiting:
        for service, url in list(waiting.items()):
            if await asyncio.to_thread(answers, url):
                del waiting[service]
        containers = await asyncio.to_thread(_containers, client)
        for service, container in containers.items():
            if container.status in ("exited", "dead"):
                logs = await asyncio.to_thread(last_log_lines, container)
                raise StackError(f"{NAME}: container {container.name} ({service}) exited before "
                                 f"it was ready; last log lines: {logs}")
        now = loop.time()
        if waiting and now - started > READY_TIMEOUT_S:
            service = next(iter(waiting))
            container = containers.get(service)
            logs = await asyncio.to_thread(last_log_lines, container) if container else "no container"
            raise StackError(f"{NAME}: {service} not ready after {READY_TIMEOUT_S:.0f} s; last log "
                             f"lines: {logs}")
        if waiting and now - last_report >= PROGRESS_EVERY_S:
            last_report = now
            progress(f"{NAME}: waiting for {', '.join(waiting)} ({now - started:.0f} s)")
        if waiting:
            await asyncio.sleep(0.5)


async def up(scrape: list[tuple[str, int]], ports: MonitoringPorts, progress: Progress) -> list[str]:
    """Start the stack; the lines that say where it is. On any failure (Ctrl-C too) nothing of
    it is left: no container, volume or targets folder."""
    command = await asyncio.to_thread(compose_command)
    client = await asyncio.to_thread(engine)
    try:
        there = await asyncio.to_thread(_inventory, client)
        if there:
            raise StreambenchError(f"{NAME}: the stack is already there ({', '.join(there)}); "
                                   "`streambench stacks down monitoring` removes it")
        _check_ports(ports)
        targets = targets_dir()
        env = compose_env(ports, targets)
        await _missing_images(client, env, progress)
        launched = False
        try:
            write_targets(targets, scrape, ports)
            code, out = await run_compose(command, PROJECT, FILES, env, ("config", "--quiet"))
            if code != 0:
                raise StackError(f"{NAME}: the compose files do not load: {compose_error(out)}")
            progress(f"{NAME}: starting prometheus, grafana, cadvisor (compose project {PROJECT})")
            launched = True
            code, out = await run_compose(command, PROJECT, FILES, env,
                                          ("up", "-d", "--no-build", "--no-color"))
            if code != 0:
                raise StackError(f"{NAME}: compose up failed: {compose_error(out)}")
            await _wait_ready(client, ports, progress)
        except BaseException:
            if launched:
                await _stop(command, client, env)
            shutil.rmtree(targets.parent, ignore_errors=True)
            raise
    finally:
        client.close()
    endpoints = ", ".join(scrape_target(a) for a in scrape)
    return [f"Grafana    http://127.0.0.1:{ports.grafana}/  (the streambench dashboard is its home)",
            f"Prometheus http://127.0.0.1:{ports.prometheus}/  scraping {endpoints} every second "
            f"(start runs with --metrics {scrape_target(scrape[0])}) and cAdvisor",
            f"cAdvisor   http://127.0.0.1:{ports.cadvisor}/",
            f"scrape targets: {targets}/ (add streambench-NAME.json files for more endpoints)",
            "`streambench stacks down monitoring` stops it"]


async def _stop(command: list[str], client: Any, env: dict[str, str]) -> None:
    """compose down (volumes too), then whatever is still labelled with the project."""
    with contextlib.suppress(Exception):
        await run_compose(command, PROJECT, FILES, env,
                          ("down", "-v", "--remove-orphans", "--timeout", str(STOP_GRACE_S)))
    with contextlib.suppress(Exception):
        await asyncio.to_thread(remove_project, client, PROJECT)


def _inventory(client: Any) -> list[str]:
    """The stack's containers and volumes, as `kind name` strings."""
    label = {"label": f"{PROJECT_LABEL}={PROJECT}"}
    return ([f"container {c.name}" for c in client.containers.list(all=True, filters=label)]
            + [f"volume {v.name}" for v in client.volumes.list(filters=label)])


async def down() -> list[str]:
    """Stop and remove the stack; what was removed (empty when nothing was up)."""
    command = await asyncio.to_thread(compose_command)
    client = await asyncio.to_thread(engine)
    try:
        before = await asyncio.to_thread(_inventory, client)
        if before:
            await _stop(command, client, compose_env(MonitoringPorts(), targets_dir()))
        left = await asyncio.to_thread(_inventory, client)
        if left:
            raise StackError(f"{NAME}: could not remove {', '.join(left)} (see `docker ps -a`)")
        return before + remove_targets()
    finally:
        client.close()


def remove_targets() -> list[str]:
    """Remove the stack's folder of scrape targets; what was removed."""
    targets = targets_dir()
    if not targets.parent.exists():
        return []
    shutil.rmtree(targets.parent, ignore_errors=True)
    return [f"scrape targets {targets}"]
