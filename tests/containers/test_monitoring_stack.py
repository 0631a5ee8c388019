"""`streambench stacks up|down monitoring` and the files it starts Prometheus, Grafana and
cAdvisor from. No registry answers here, so the stack's images cannot be had: the compose files
are loaded by the compose CLI as the command gives them, prometheus.yml by Prometheus's own config
loader and its targets by Prometheus's own file-based discovery (compose/promcheck), the Grafana
provisioning files and dashboard against Grafana's own dashboard model (the Grafana Foundation
SDK of Grafana 11.6, the image's version), and the command itself runs to its end without the
images. The stack's Prometheus service runs from the compose file on Debian's Prometheus,
built offline (tests/containers/images.py), and scrapes a real run. (The dashboard's PromQL is
parsed by Prometheus's parser and checked against a live scrape in
tests/integration/test_metrics_endpoint.py.)"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import re
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from compose import monitoring
from compose.docker import (
    COMPOSE_DIR,
    PROJECT_LABEL,
    compose_command,
    engine_answers,
    remove_project,
    run_compose,
)
from compose.monitoring import FILES, PROJECT, MonitoringPorts
from compose.process import free_port
from tests.conftest import CLI, run_json
from tests.containers import images
from tests.containers.conftest import nothing_labelled
from tests.integration.test_metrics_endpoint import dashboard_queries

PORTS = MonitoringPorts(prometheus=19090, grafana=13000, cadvisor=18081)
DASHBOARD = COMPOSE_DIR / "grafana" / "streambench.json"
DATASOURCES = COMPOSE_DIR / "grafana" / "provisioning" / "datasources" / "streambench.yml"
PROVIDERS = COMPOSE_DIR / "grafana" / "provisioning" / "dashboards" / "streambench.yml"
PROMETHEUS_YML = COMPOSE_DIR / "prometheus" / "prometheus.yml"
# options of a Prometheus annotation query and the editor's copy of a query variable's query:
# Grafana's dashboard model leaves these objects open for a data source's own keys
OPEN_KEYS = {"step", "titleFormat", "textFormat", "tagKeys", "useValueForTime", "definition"}


@pytest.fixture(scope="module")
def effective(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`compose config` of the stack's files with the variables `stacks up monitoring` sets."""
    targets = tmp_path_factory.mktemp("monitoring") / "targets"
    argv = [*compose_command(), "-p", PROJECT]
    for name in FILES:
        argv += ["-f", str(COMPOSE_DIR / name)]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run([*argv, "config"], env={**env, **monitoring.compose_env(PORTS, targets)},
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    return dict(yaml.safe_load(done.stdout))


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """A service's bind mounts and volumes, container path -> host path or volume name, in
    both the short (v1) and the long (v2) form `compose config` writes."""
    found = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source, target = volume.split(":")[:2]
        else:
            source, target = volume["source"], volume["target"]
        found[target] = source
    return found


def test_the_compose_files_load_on_loopback_with_streambench_labels(effective: dict[str, Any]) -> None:
    services = effective["services"]
    assert set(services) == {"prometheus", "grafana", "cadvisor"}
    for name, service in services.items():
        assert service["network_mode"] == "host", name
        labels = service["labels"]
        assert labels["streambench.run"] == labels["streambench.target"] == "monitoring", name
        assert labels["streambench.owner"].endswith(f":{os.getpid()}"), name
    for name, volume in effective["volumes"].items():
        assert volume["labels"]["streambench.run"] == "monitoring", name
    # every service listens on loopback only, at the ports the command was given
    assert (f"--web.listen-address=127.0.0.1:{PORTS.prometheus}"
            in services["prometheus"]["command"])
    grafana_env = services["grafana"]["environment"]
    assert grafana_env["GF_SERVER_HTTP_ADDR"] == "127.0.0.1"
    assert str(grafana_env["GF_SERVER_HTTP_PORT"]) == str(PORTS.grafana)
    assert {"--listen_ip=127.0.0.1", f"--port={PORTS.cadvisor}"} <= set(
        services["cadvisor"]["command"])
    # what Prometheus and Grafana mount from the host is there
    for name in ("prometheus", "grafana"):
        for target, source in mounts(services[name]).items():
            if source.startswith("/") and "targets" not in target:
                assert Path(source).exists(), (name, target, source)
    assert mounts(services["prometheus"])["/etc/prometheus/prometheus.yml"] == str(PROMETHEUS_YML)


def promcheck_json(promcheck: Path, *args: str) -> Any:
    done = subprocess.run([str(promcheck), *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_prometheus_loads_its_config_and_discovers_what_the_command_writes(
        effective: dict[str, Any], promcheck: Path, tmp_path: Path) -> None:
    """prometheus.yml through Prometheus's config loader, then the file_sd files `stacks up`
    writes (and one a user adds) through Prometheus's file discovery, at the host path the
    compose file mounts at the config's container path."""
    jobs = {j["job_name"]: j for j in promcheck_json(promcheck, "config", str(PROMETHEUS_YML))}
    assert set(jobs) == {"streambench", "cadvisor"}
    assert jobs["streambench"]["scrape_interval"] == "1s"
    assert jobs["cadvisor"]["scrape_interval"] == "5s"
    assert jobs["streambench"]["metrics_path"] == jobs["cadvisor"]["metrics_path"] == "/metrics"
    assert not jobs["streambench"]["static_targets"] and not jobs["cadvisor"]["static_targets"]
    inside = "/etc/prometheus/targets"
    assert mounts(effective["services"]["prometheus"])[inside].endswith("/targets")
    host = tmp_path / "targets"
    scrape = [("127.0.0.1", 9464), ("::1", 9465)]
    monitoring.write_targets(host, scrape, PORTS)
    (host / "streambench-other.json").write_text('[{"targets": ["127.0.0.1:9470"]}]')

    def discovered(job: str) -> list[str]:
        globs = [f.replace(inside, str(host), 1) for f in jobs[job]["file_sd_files"]]
        assert globs and all(g.startswith(str(host)) for g in globs), jobs[job]
        groups = promcheck_json(promcheck, "targets", *globs)
        assert all(g["labels"]["__meta_filepath"].startswith(str(host)) for g in groups)
        return sorted(t for g in groups for t in g["targets"])

    assert discovered("streambench") == ["127.0.0.1:9464", "127.0.0.1:9470", "[::1]:9465"]
    assert discovered("cadvisor") == [f"127.0.0.1:{PORTS.cadvisor}"]
    # the loader and the discovery refuse what Prometheus refuses
    broken = tmp_path / "broken.yml"
    broken.write_text(PROMETHEUS_YML.read_text().replace("scrape_interval: 1s",
                                                         "scrape_interval: 1s\n    scrape_timeout: 5s"))
    done = subprocess.run([str(promcheck), "config", str(broken)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1 and "scrape timeout greater than scrape interval" in done.stderr, \
        done.stderr
    (host / "streambench-bad.json").write_text('{"targets": "127.0.0.1:1"}')
    done = subprocess.run([str(promcheck), "targets", str(host / "streambench*.json")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "streambench-bad.json" in done.stderr, done.stderr


def grafana_env(text: str, env: dict[str, Any]) -> str:
    """A provisioning file's value with its $VAR / ${VAR} put in, as Grafana does."""
    return re.sub(r"\$\{?(\w+)\}?", lambda m: str(env[m.group(1)]), text)


def test_grafana_gets_the_prometheus_and_the_dashboard(effective: dict[str, Any]) -> None:
    grafana = effective["services"]["grafana"]
    sources = yaml.safe_load(DATASOURCES.read_text())
    assert sources["apiVersion"] == 1
    (source,) = sources["datasources"]
    assert source["type"] == "prometheus" and source["isDefault"] is True
    prometheus_at = next(a.split("=", 1)[1] for a in effective["services"]["prometheus"]["command"]
                         if a.startswith("--web.listen-address="))
    assert grafana_env(source["url"], grafana["environment"]) == f"http://{prometheus_at}"
    providers = yaml.safe_load(PROVIDERS.read_text())
    assert providers["apiVersion"] == 1
    (provider,) = providers["providers"]
    assert provider["type"] == "file"
    grafana_mounts = mounts(grafana)
    for folder in ("datasources", "dashboards"):
        assert grafana_mounts[f"/etc/grafana/provisioning/{folder}"] == str(
            COMPOSE_DIR / "grafana" / "provisioning" / folder)
    (inside,) = [t for t, s in grafana_mounts.items() if s == str(DASHBOARD)]
    assert Path(inside).parent == Path(provider["options"]["path"])
    assert grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"] == inside
    # every query of the dashboard goes to the provisioned data source, through its variable
    board = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in board["templating"]["list"]}
    chooser = variables["datasource"]
    assert chooser["type"] == "datasource" and chooser["query"] == source["type"]
    assert chooser["current"]["value"] == source["uid"]
    via_variable = {"type": "prometheus", "uid": "${datasource}"}
    refs = [p["datasource"] for p in board["panels"]]
    refs += [t["datasource"] for p in board["panels"] for t in p["targets"]]
    refs += [a["datasource"] for a in board["annotations"]["list"]]
    refs += [v["datasource"] for v in variables.values() if v["type"] == "query"]
    assert len(refs) > 2 * len(board["panels"]) and all(r == via_variable for r in refs), refs


def model_drops(board: dict[str, Any]) -> set[str]:
    """The keys of a dashboard that Grafana's dashboard model does not carry (read with the
    model and written back out; every panel's options and field config through its panel
    type's model, every query through the Prometheus query's)."""
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models.dashboard import Dashboard

    register_default_plugins()
    back = json.loads(json.dumps(Dashboard.from_json(board), cls=JSONEncoder))
    dropped: set[str] = set()

    def walk(mine: Any, theirs: Any, path: str) -> None:
        if isinstance(mine, dict):
            for key, value in mine.items():
                if not isinstance(theirs, dict) or key not in theirs:
                    dropped.add(key)
                else:
                    walk(value, theirs[key], f"{path}.{key}")
        elif isinstance(mine, list):
            assert isinstance(theirs, list) and len(theirs) == len(mine), path
            for i, (a, b) in enumerate(zip(mine, theirs, strict=True)):
                walk(a, b, f"{path}[{i}]")
        else:
            assert mine == theirs, (path, mine, theirs)

    walk(board, back, "")
    return dropped


def test_the_dashboard_is_grafanas_own_model() -> None:
    from grafana_foundation_sdk.cog import runtime
    from grafana_foundation_sdk.models.dashboard import Dashboard

    board = json.loads(DASHBOARD.read_text())
    # a schema version the model's Grafana reads (it migrates older ones forward)
    assert 36 <= board["schemaVersion"] <= Dashboard().schema_version
    from grafana_foundation_sdk.cog.plugins import register_default_plugins

    register_default_plugins()
    assert all(runtime.panelcfg_config(p["type"]) is not None for p in board["panels"])
    assert model_drops(board) == OPEN_KEYS
    # and the model does notice a key it does not know
    typo = copy.deepcopy(board)
    typo["panels"][0]["targets"][0]["legendFromat"] = "{{target}}"
    typo["panels"][1]["fieldConfig"]["defaults"]["unitt"] = "short"
    assert model_drops(typo) == OPEN_KEYS | {"legendFromat", "unitt"}


def labelled(client: Any) -> list[str]:
    label = {"label": f"{PROJECT_LABEL}={PROJECT}"}
    return ([c.name for c in client.containers.list(all=True, filters=label)]
            + [v.name for v in client.volumes.list(filters=label)])


@pytest.fixture
def docker_client() -> Any:
    if not engine_answers():
        pytest.fail("no Docker engine or compose CLI answers: run `make test`, which starts dockerd")
    import docker

    client = docker.from_env(timeout=30)
    assert not labelled(client), "a monitoring stack is up on this engine already"
    yield client
    client.close()


def stacks(args: list[str], cache: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "stacks", *args], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL,
                          env={**os.environ, "STREAMBENCH_CACHE": str(cache), **env})


def test_up_without_the_images_says_which_in_one_line_and_leaves_nothing(
        docker_client: Any, tmp_path: Path) -> None:
    """Images named at a registry on loopback where nothing answers: the pulls fail at once,
    as they do on a machine without a registry, and touch no other address."""
    images = {var: f"127.0.0.1:1/streambench-absent/{var.rsplit('_', 1)[1].lower()}:0"
              for var in monitoring.IMAGE_VARIABLES}
    ports = [str(free_port()) for _ in range(3)]
    started = time.monotonic()
    done = stacks(["up", "monitoring", "--prometheus-port", ports[0], "--grafana-port", ports[1],
                   "--cadvisor-port", ports[2]], tmp_path, **images)
    assert done.returncode == 3, done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr
    last = done.stderr.splitlines()[-1]
    assert last.startswith("streambench: error: monitoring: images not here and not pulled"), last
    assert all(image in last for image in images.values()), last
    assert "docker load" in last and all(var in last for var in images), last
    # before the error only progress lines, one per pull
    assert [ln for ln in done.stderr.splitlines()[:-1] if "pulling" not in ln] == []
    assert not labelled(docker_client)
    assert not (tmp_path / "monitoring").exists()
    assert time.monotonic() - started < 120


def test_a_taken_port_is_one_line_before_anything_starts(docker_client: Any, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = stacks(["up", "monitoring", "--grafana-port", str(port), "--prometheus-port",
                       str(free_port()), "--cadvisor-port", str(free_port())], tmp_path)
    assert done.returncode == 3, done.stderr
    assert done.stderr.splitlines() == [
        f"streambench: error: monitoring: port {port} on 127.0.0.1 is already in use; give "
        "grafana another with --grafana-port N"]
    assert not labelled(docker_client) and not (tmp_path / "monitoring").exists()


def test_ls_down_and_prune_know_the_stack(docker_client: Any, tmp_path: Path) -> None:
    """A volume as compose makes it for the stack (its labels from `compose config`) and the
    scrape targets: `stacks ls` shows them as the monitoring stack, prune keeps the stack
    whoever started it, `stacks down monitoring` removes both; a second down finds nothing."""
    from compose.housekeeping import projects

    config = subprocess.run([*compose_command(), "-p", PROJECT, "-f", str(COMPOSE_DIR / FILES[0]),
                             "config"], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "STREAMBENCH_MONITORING_TARGETS": str(tmp_path),
                                 "STREAMBENCH_OWNER": "gone-host:1"})
    assert config.returncode == 0, config.stderr
    labels = yaml.safe_load(config.stdout)["volumes"]["prometheus-data"]["labels"]
    volume = docker_client.volumes.create(
        f"{PROJECT}_prometheus-data",
        labels={**labels, PROJECT_LABEL: PROJECT, "com.docker.compose.volume": "prometheus-data"})
    try:
        monitoring.write_targets(tmp_path / "monitoring" / "targets", [monitoring.DEFAULT_SCRAPE],
                                 PORTS)
        listed = stacks(["ls"], tmp_path)
        assert listed.returncode == 0, listed.stderr
        assert (f"{PROJECT}  run monitoring  target monitoring  the monitoring stack "
                "(stacks down monitoring stops it)") in listed.stdout, listed.stdout
        assert f"  volume {volume.name}" in listed.stdout
        (mine,) = [p for p in projects(docker_client) if p.name == PROJECT]
        assert mine.owner_alive is None and not mine.leftover
        again = stacks(["up", "monitoring"], tmp_path)
        assert again.returncode == 2 and again.stderr.count("\n") == 1, again.stderr
        assert f"already there (volume {volume.name})" in again.stderr
        down = stacks(["down", "monitoring"], tmp_path)
        assert down.returncode == 0, down.stderr
        assert down.stdout.splitlines() == [
            f"removed volume {volume.name}",
            f"removed scrape targets {tmp_path / 'monitoring' / 'targets'}"]
        assert not labelled(docker_client) and not (tmp_path / "monitoring").exists()
        again = stacks(["down", "monitoring"], tmp_path)
        assert (again.returncode, again.stdout) == (0, "no monitoring stack is up\n"), again.stderr
    finally:
        for left in docker_client.volumes.list(filters={"label": f"{PROJECT_LABEL}={PROJECT}"}):
            left.remove(force=True)


def prometheus_api(api: str, path: str) -> Any:
    with urllib.request.urlopen(f"{api}{path}", timeout=10) as answer:
        body = json.loads(answer.read())
    assert body["status"] == "success", body
    return body["data"]


def stored(api: str, expr: str) -> float | None:
    found = prometheus_api(api, f"/api/v1/query?{urllib.parse.urlencode({'query': expr})}")["result"]
    return float(found[0]["value"][1]) if len(found) == 1 else None


def test_the_stacks_prometheus_finds_and_scrapes_a_run(docker_client: Any, tmp_path: Path,
                                                        no_leftover_redis: None) -> None:
    """The stack's Prometheus service as the compose file starts it, with the targets files
    `stacks up` writes (the server: Debian's Prometheus 2.42 in the layout of the
    prom/prometheus image, built offline): it listens on loopback only, discovers the run's
    endpoint and cAdvisor's in the mounted files, what it stored of a real run (1 s + 3 s at
    500 msg/s, 600 from the second second, on a local redis-server) is the run's produced
    count, and every panel query of the dashboard returns data from it."""
    ports = MonitoringPorts(prometheus=free_port(), grafana=free_port(), cadvisor=free_port())
    endpoint = ("127.0.0.1", free_port())
    monitoring.write_targets(tmp_path / "targets", [endpoint], ports)
    run_id = f"monitoring-test-{os.getpid()}"
    project = f"streambench-{run_id}"
    env = {**monitoring.compose_env(ports, tmp_path / "targets"), "STREAMBENCH_RUN": run_id,
           "STREAMBENCH_IMAGE_PROMETHEUS": images.prometheus()}
    command = compose_command()
    api = f"http://127.0.0.1:{ports.prometheus}"
    try:
        code, out = asyncio.run(run_compose(command, project, FILES, env,
                                            ("up", "-d", "--no-build", "prometheus")))
        assert code == 0, out
        deadline = time.monotonic() + 60
        while not monitoring.answers(f"{api}/-/ready"):
            assert time.monotonic() < deadline, "Prometheus not ready within 60 s"
            time.sleep(0.5)
        listening = {c.laddr.ip for c in psutil.net_connections("tcp")
                     if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == ports.prometheus}
        assert listening == {"127.0.0.1"}
        # the discovery hands its targets to the scrapers every few seconds
        deadline = time.monotonic() + 30
        found: dict[str, dict[str, str]] = {}
        while set(found) != {"streambench", "cadvisor"} and time.monotonic() < deadline:
            time.sleep(0.5)
            found = {t["labels"]["job"]: t["discoveredLabels"]
                     for t in prometheus_api(api, "/api/v1/targets")["activeTargets"]}
        assert found["streambench"]["__address__"] == monitoring.scrape_target(endpoint)
        assert found["streambench"]["__meta_filepath"] == "/etc/prometheus/targets/streambench.json"
        assert found["cadvisor"]["__address__"] == f"127.0.0.1:{ports.cadvisor}"
        run_dir = tmp_path / "run"
        done = subprocess.run([*CLI, "run", "redis", "--runtime", "local", "--headless", "--warmup",
                               "1", "--duration", "3", "--rate", "500", "--at", "2s:rate=600",
                               "--metrics",
                               str(endpoint[1]), "--out", str(run_dir)], capture_output=True,
                              text=True, timeout=180, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr
        (totals,) = run_json(run_dir)["totals"]
        expr = 'max_over_time(streambench_produced_messages_total{job="streambench"}[10m])'
        deadline = time.monotonic() + 15  # the last scrape may still be on its way to storage
        while stored(api, expr) != totals["produced"] and time.monotonic() < deadline:
            time.sleep(0.5)
        assert stored(api, expr) == totals["produced"] > 0
        # and every panel of the dashboard has data from that server
        panels, _templates = dashboard_queries()
        assert len(panels) >= 20
        empty = [e for e in panels if not prometheus_api(api, "/api/v1/query?" + urllib.parse.urlencode(
            {"query": f"count(last_over_time(({e.replace('[10s]', '[10m]')})[10m:1s]))"}))["result"]]
        assert empty == [], empty
    finally:
        asyncio.run(run_compose(command, project, FILES, env,
                                ("down", "-v", "--remove-orphans", "--timeout", "10")))
        remove_project(docker_client, project)
    nothing_labelled(run_id)
