"""`broker.` settings, `version=` and the durable profile on a real local nats-server: the
settings in force as the server's own monitoring endpoint tells them (/varz, fetched by the
test itself), the run's record of them with their sources, and the effect of fsync on every
write on a nats-server 2.10 built from the Go module proxy."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pytest
from nats.js.api import StorageType

from collectors.nats import monitor_get
from compose.gobuild import go_program
from compose.nats import (
    GO_MODULE,
    MONITOR_ENDPOINT,
    NatsLocalStack,
    find_server,
    installed_version,
    open_connection,
)
from loadgen.platforms import resolve_target
from loadgen.platforms.nats import NatsDriver
from tests.conftest import none_left, run_cli, run_json

pytestmark = pytest.mark.integration

BUILT = "2.10.27"


@pytest.fixture
def nothing_left_running() -> Iterator[None]:
    with none_left("nats-server", 15):
        yield


@pytest.fixture(scope="module")
def built_server() -> str:
    """nats-server 2.10.27 built with Go (once per cache: the first time takes minutes)."""
    path = str(asyncio.run(go_program("nats-server", GO_MODULE, BUILT, "nats-server",
                                      lambda _m: None)))
    assert installed_version(path) == BUILT
    return path


async def _scenario(spec: str, publish: int = 0) -> tuple[dict, dict, list[float]]:
    """Start the target's server, read /varz and the driver's record of the settings; with
    `publish`, time that many one-at-a-time publishes to a file stream (ms each)."""
    target = resolve_target(spec)
    stack = NatsLocalStack(target, target.label)
    took: list[float] = []
    try:
        await stack.up(lambda _m: None)
        await stack.ready(30, lambda _m: None)
        desc = stack.describe()
        varz = await asyncio.to_thread(monitor_get, desc.endpoints[MONITOR_ENDPOINT], "/varz", 5.0)
        driver = NatsDriver(target, desc.endpoints["nats"], desc)
        await driver.connect()
        try:
            settings = await driver.settings_in_force()
        finally:
            await driver.close()
        if publish:
            nc = await open_connection(desc.endpoints["nats"], "test", reconnect=False)
            try:
                js = nc.jetstream()
                await js.add_stream(name="durability", subjects=["durability.x"],
                                    storage=StorageType.FILE)
                payload = b"x" * 1024
                for _ in range(publish):
                    start = time.perf_counter()
                    await js.publish("durability.x", payload)
                    took.append((time.perf_counter() - start) * 1000)
            finally:
                await nc.close()
    finally:
        await stack.down()
    return varz, settings, took


def test_broker_settings_in_force(nothing_left_running):
    varz, settings, _ = asyncio.run(_scenario(
        "nats:runtime=local,broker.max_payload=2MB,broker.write_deadline=7s,"
        "broker.jetstream.max_outstanding_catchup=32MB,max_memory=256M"))
    # the server's own account of them
    assert varz["max_payload"] == 2 * 2**20
    assert varz["write_deadline"] == 7_000_000_000
    assert varz["jetstream"]["config"]["max_memory"] == 256_000_000  # nats-server: M is 10^6
    # the run's record, with where each came from
    assert settings["broker.max_payload"] == {"value": str(2 * 2**20), "source": "user",
                                              "read_back": True}
    assert settings["broker.write_deadline"] == {"value": "7s", "source": "user", "read_back": True}
    assert settings["broker.jetstream.max_memory_store"] == {
        "value": "256000000", "source": "streambench default", "read_back": True}
    assert settings["broker.ping_max"]["source"] == "platform default"
    # a setting /varz does not tell: recorded as asked
    assert settings["broker.jetstream.max_outstanding_catchup"] == {
        "value": "32MB", "source": "user", "read_back": False}


def test_run_records_settings(tmp_path: Path, nothing_left_running):
    """broker., topic. (the stream's configuration) and consumer. (the durable consumer's)
    settings read back from the server; topic.max_bytes keeps the stream small while every
    message is still consumed."""
    run_dir = tmp_path / "run"
    spec = ("nats:runtime=local,broker.max_payload=4MB,topic.max_bytes=65536,"
            "topic.retention=limits,consumer.max_deliver=3")
    res = run_cli(["run", spec, "--rate", "200", "--duration", "2", "--warmup", "0", "--size",
                   "1024", "--headless", "--out", str(run_dir)])
    assert res.returncode == 0, res.stderr
    meta = run_json(run_dir)
    (target,) = meta["targets"]
    settings = target["settings"]
    assert settings["broker.max_payload"] == {"value": str(4 * 2**20), "source": "user",
                                              "read_back": True}
    assert settings["topic.max_bytes"] == {"value": "65536", "source": "user", "read_back": True}
    assert settings["topic.retention"] == {"value": "limits", "source": "user", "read_back": True}
    assert settings["topic.discard"] == {"value": "old", "source": "streambench default",
                                         "read_back": True}
    assert settings["consumer.max_deliver"] == {"value": "3", "source": "user", "read_back": True}
    assert settings["consumer.ack_policy"]["value"] == "explicit"
    (totals,) = meta["totals"]
    assert totals["produced"] == totals["consumed"] == 400, totals
    # the server's own count of what the stream holds, per partition, in the broker table
    broker = ds.dataset(run_dir / "broker", format="parquet").to_table().to_pydict()
    held = [v for n, v in zip(broker["name"], broker["value"], strict=True)
            if n.startswith("partition.")]
    assert held and max(held) <= 64 < totals["produced"], held


@pytest.mark.parametrize(("spec", "fragment"), [
    ("nats:topic.max_byte=1", "did you mean max_bytes"),
    ("nats:topic.storage=memory", "use nats:storage=file|memory"),
    ("nats:topic.retention=forever", "expected one of interest, limits, work_queue"),
    ("nats:topic.sources=x", "holds a list or an object"),
    ("nats:consumer.deliver_subject=x", "it is a push consumer's setting"),
    ("nats:consumer.ack_policy=none", "explicit: each message is acknowledged once counted"),
])
def test_bad_stream_and_consumer_settings(spec, fragment, tmp_path, nothing_left_running):
    res = run_cli(["run", spec, "--duration", "2", "--headless", "--out", str(tmp_path / "r")])
    assert res.returncode == 2, res.stderr
    (line,) = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert fragment in line, line


def test_a_setting_the_installed_server_lacks(tmp_path: Path, nothing_left_running):
    """The Debian nats-server is 2.9: per-write fsync came in 2.10; the run says so in one line
    and starts nothing."""
    installed = installed_version(find_server() or "nats-server")
    assert installed.startswith("2.9."), f"expected the Debian nats-server 2.9, found {installed}"
    res = run_cli(["run", "nats:runtime=local,profile=durable", "--duration", "2", "--headless",
                   "--out", str(tmp_path / "run")])
    assert res.returncode == 3, res.stderr  # the server refuses its configuration: it does not start
    lines = [ln for ln in res.stderr.splitlines() if ln.strip() and "starting" not in ln]
    assert any("has no setting jetstream.sync_interval" in ln and f"nats:version={BUILT}" in ln
               for ln in lines), res.stderr
    assert "Traceback" not in res.stderr


def test_durable_profile_fsyncs_every_write(built_server, nothing_left_running):
    """nats:profile=durable on nats-server 2.10: the server tells sync_always; each publish
    waits for its fsync (compared with the same build's default, 2-minute sync)."""
    spec = f"nats:runtime=local,version={BUILT}"
    varz, settings, plain = asyncio.run(_scenario(spec, publish=400))
    assert varz["version"] == BUILT
    assert not varz["jetstream"]["config"].get("sync_always")
    assert settings["broker.jetstream.sync_interval"]["source"] == "platform default"
    varz, settings, durable = asyncio.run(_scenario(spec + ",profile=durable", publish=400))
    assert varz["jetstream"]["config"]["sync_always"] is True
    assert settings["broker.jetstream.sync_interval"] == {"value": "always", "source": "profile",
                                                          "read_back": True}
    fast, slow = float(np.median(plain[50:])), float(np.median(durable[50:]))
    print(f"publish p50: default {fast:.3f} ms, durable {slow:.3f} ms ({slow / fast:.2f}x)")
    assert slow > fast


@pytest.mark.parametrize(("spec", "fragment"), [
    ("nats:broker.max_paylod=1MB", "did you mean max_payload"),
    ("nats:broker.jetstream.sync_intervall=always", "did you mean sync_interval"),
    ("nats:broker.port=4333", "port is set by streambench"),
    ("nats:broker.jetstream.max_memory_store=1G", "use nats:max_memory=SIZE"),
    ("nats:broker.cluster=x", "is a block of settings"),
    ("nats:broker.max_payload=2MB@127.0.0.1:4222", "broker settings apply to brokers"),
    ("nats:version=2.10", "expected a nats-server release X.Y.Z"),
    ("nats:profile=fast", "profile"),
])
def test_bad_settings_one_line_exit_2(spec, fragment, tmp_path, nothing_left_running):
    res = run_cli(["run", spec, "--duration", "2", "--headless", "--out", str(tmp_path / "r")])
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and fragment in lines[0], res.stderr
    assert not (tmp_path / "r").exists()
