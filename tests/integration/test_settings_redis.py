"""`conf.` settings and the durable profile on a real local redis-server: the directives in
force as the server itself tells them (CONFIG GET on a connection of the test's own), and the
run's record of them with their sources."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from compose.redis import RedisLocalStack, parse_address
from loadgen.platforms import resolve_target
from loadgen.platforms.redis_streams import RedisStreamsDriver
from tests.conftest import run_cli

pytestmark = pytest.mark.integration

SPEC = "redis:runtime=local,conf.hz=25,conf.maxmemory-policy=noeviction,profile=durable"


async def _scenario() -> tuple[dict[str, str], dict]:
    target = resolve_target(SPEC)
    stack = RedisLocalStack(target, target.label)
    try:
        await stack.up(lambda _m: None)
        await stack.ready(30, lambda _m: None)
        desc = stack.describe()
        host, port = parse_address(desc.endpoints["redis"])
        own = aioredis.Redis(host=host, port=port, decode_responses=True)
        try:
            told = {k: (await own.config_get(k))[k] for k in ("hz", "appendonly", "appendfsync",
                                                              "maxmemory-policy")}
        finally:
            await own.aclose()
        driver = RedisStreamsDriver(host, port, target=target, desc=desc)
        await driver.connect()
        try:
            settings = await driver.settings_in_force()
        finally:
            await driver.close()
    finally:
        await stack.down()
    return told, settings


def test_conf_settings_in_force(no_leftover_redis):
    told, settings = asyncio.run(_scenario())
    assert told == {"hz": "25", "appendonly": "yes", "appendfsync": "always",
                    "maxmemory-policy": "noeviction"}
    assert settings["conf.hz"] == {"value": "25", "source": "user", "read_back": True}
    assert settings["conf.appendfsync"] == {"value": "always", "source": "profile", "read_back": True}
    assert settings["conf.appendonly"]["source"] == "profile"
    assert settings["conf.bind"]["source"] == "streambench default"
    # room for a connection per consumer of 10,000 subscriptions
    assert settings["conf.maxclients"]["source"] == "streambench default"
    assert settings["conf.maxmemory"]["source"] == "platform default"


def test_run_records_settings(tmp_path: Path, no_leftover_redis):
    run_dir = tmp_path / "run"
    res = run_cli(["run", "redis:runtime=local,aof,fsync=always,conf.hz=30", "--rate", "200",
                   "--duration", "2", "--warmup", "0", "--headless", "--out", str(run_dir)])
    assert res.returncode == 0, res.stderr
    (target,) = json.loads((run_dir / "run.json").read_text())["targets"]
    settings = target["settings"]
    assert settings["conf.hz"] == {"value": "30", "source": "user", "read_back": True}
    # a plain option the user set counts as the user's
    assert settings["conf.appendfsync"] == {"value": "always", "source": "user", "read_back": True}
    assert settings["conf.appendonly"]["value"] == "yes"


OMB_REDIS_DRIVER = """name: Redis
driverClass: io.openmessaging.benchmark.driver.redis.RedisBenchmarkDriver
redisPort: 6379
redisHost: 127.0.0.1
jedisPoolMaxTotal: 8
jedisPoolMaxIdle: 8
"""


def test_an_omb_redis_driver_file_is_taken_with_each_field_named(tmp_path: Path,
                                                                  no_leftover_redis):
    """OMB's Redis driver holds only where the server is and Jedis's pool: the run goes on, and
    each field is named as not acted on with what to give instead."""
    driver = tmp_path / "redis.yaml"
    driver.write_text(OMB_REDIS_DRIVER)
    run_dir = tmp_path / "run"
    res = run_cli(["run", "redis:runtime=local", "--driver", str(driver), "--rate", "200",
                   "--duration", "1", "--warmup", "0", "--headless", "--out", str(run_dir)])
    assert res.returncode == 0, res.stderr
    warned = [ln for ln in res.stderr.splitlines() if "not acted on" in ln]
    assert len(warned) == 4, res.stderr
    assert any("redisHost: give the server as redis@HOST:PORT" in ln for ln in warned)
    assert any("jedisPoolMaxTotal: streambench opens one connection per producer" in ln
               for ln in warned)
    totals = json.loads((run_dir / "run.json").read_text())["totals"][0]
    assert totals["produced"] == totals["consumed"] == 200
