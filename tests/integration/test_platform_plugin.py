"""A platform added by a separate package: tests/plugins/redis_capped is installed (pip, into a
folder of its own) and found through the `streambench.platforms` entry points, with no edit to
streambench."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CLI, TESTS, run_json

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    site = tmp_path_factory.mktemp("plugin-site")
    res = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                          str(site), str(TESTS / "plugins" / "redis_capped")],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def cli(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, env=env,
                          stdin=subprocess.DEVNULL)


def test_platforms_lists_the_plugin_and_where_each_platform_comes_from(plugin_env):
    res = cli(["platforms"], plugin_env)
    assert res.returncode == 0, res.stderr
    rows = {cells[0]: cells for cells in (re.split(r"\s{2,}", line) for line in
                                         res.stdout.splitlines()[1:] if line and line[0] != "`")}
    assert rows["redis-capped"] == ["redis-capped", "Redis Streams, each stream capped at about "
                                    "100,000 entries", "docker, local, external", "bundled"]
    assert rows["redis"] == ["redis", "Redis Streams", "docker, local, external", "bundled"]
    res = cli(["platforms", "redis-capped"], plugin_env)
    assert res.returncode == 0, res.stderr
    capped = res.stdout
    assert ("from: streambench-redis-capped 0.2.0 "
            "(redis-capped = streambench_redis_capped:PLATFORMS)") in capped
    assert "faults: local: kill, start, restart" in capped
    assert "maxlen=VALUE: trim each stream to about this many entries (default 100000)" in capped
    res = cli(["platforms", "redis"], plugin_env)
    assert res.returncode == 0, res.stderr
    assert "from: streambench 0.1.0 (redis = loadgen.platforms.redis_streams:PLATFORMS)" in res.stdout
    assert "faults: docker: pause, resume, kill, start, restart; local: pause" in res.stdout
    res = cli(["platforms", "--json"], plugin_env)
    assert res.returncode == 0, res.stderr
    origin = {p["name"]: p["origin"] for p in json.loads(res.stdout)}
    assert origin["redis-capped"] == ("streambench-redis-capped 0.2.0 "
                                      "(redis-capped = streambench_redis_capped:PLATFORMS)")


def test_without_the_package_the_platform_is_unknown():
    res = cli(["run", "redis-capped", "--headless", "--duration", "1"])
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        line for line in res.stderr.strip().splitlines() if "unknown platform 'redis-capped'" in line]


def test_a_plugin_platform_runs_end_to_end(plugin_env, tmp_path: Path):
    out = tmp_path / "run"
    res = cli(["run", "redis-capped:maxlen=5000", "redis", "--rate", "400", "--duration", "3",
               "--warmup", "0", "--headless", "--track-delivery", "--out", str(out)], plugin_env)
    assert res.returncode == 0, res.stderr
    meta = run_json(out)
    by_label = {t["label"]: t for t in meta["targets"]}
    assert by_label["redis-capped:maxlen=5000"]["platform"] == "redis-capped"
    assert by_label["redis-capped:maxlen=5000"]["options"]["maxlen"] == 5000
    for totals in meta["totals"]:
        assert totals["produced"] == totals["consumed"] == 1200, totals
        assert totals["duplicates"] == 0
    assert "redis-capped:maxlen=5000: produced 1,200, consumed 1,200" in res.stderr


def test_a_fault_the_platform_does_not_take_is_refused_before_anything_starts(plugin_env, tmp_path):
    out = tmp_path / "run"
    res = cli(["run", "redis-capped", "--rate", "100", "--duration", "3", "--headless",
               "--at", "1s:pause=redis-capped", "--out", str(out)], plugin_env)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "has no 'pause' fault here; it takes kill, start, restart" in lines[0]
    assert not out.exists()


def test_the_platform_contract_takes_the_plugin(plugin_env):
    """tests/platforms parametrises over the registry: with the plugin installed its cases are
    collected, the pause it does not declare among the refusals and its kill/start fault run."""
    res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p",
                          "no:cacheprovider", str(TESTS / "platforms"), "-k", "redis-capped-local"],
                         capture_output=True, text=True, timeout=120, env=plugin_env,
                         cwd=TESTS.parent, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    ids = [ln for ln in res.stdout.splitlines() if "::" in ln]
    assert "tests/platforms/test_contract.py::test_faults_and_recovery[redis-capped-local]" in ids
    assert ("tests/platforms/test_contract.py::test_an_undeclared_fault_is_refused"
            "[redis-capped-local-pause]") in ids
    assert all("[redis-capped-local" in i for i in ids) and len(ids) >= 10, ids
