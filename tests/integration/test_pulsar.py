"""End-to-end runs against a real Pulsar standalone: one started by a run itself (local runtime),
then one started once for the module, which the other runs reach as an existing cluster
(`pulsar@pulsar://…,http://…`), so that only one broker runs at a time."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pyarrow.dataset as ds
import pytest

from analysis.sink import ParquetSink
from collectors.pulsar import PulsarTelemetry
from compose.process import port_in_use
from compose.pulsar import ADMIN_ENDPOINT, PulsarLocalStack, PulsarTargetConfig, topic_path
from loadgen.core.driver import OutMessage
from loadgen.core.target import unique_labels
from loadgen.core.workload import Workload
from loadgen.pacing import run_precise
from loadgen.platforms import resolve_target
from loadgen.platforms.pulsar import PulsarDriver
from loadgen.run import Run, RunSummary
from tests.conftest import pids_gone, started_here
from tests.integration.backlog_support import WORKLOAD_FIELDS, assert_backlog_phase
from tests.integration.conftest import CLI, run_cli, run_json
from tests.integration.test_redis_run import _one_error_line

pytestmark = pytest.mark.integration

RATE = 2000.0
CLI_TIMEOUT_S = 420  # the first run fetches and unpacks the Pulsar release


def _table(run_dir: Path, name: str) -> dict:
    return ds.dataset(run_dir / name, format="parquet").to_table().to_pydict()


def standalone_pids() -> set[int]:
    found = set()
    for p in psutil.process_iter(["cmdline"]):
        if ("org.apache.pulsar.PulsarStandaloneStarter" in (p.info["cmdline"] or [])
                and started_here(p)):
            found.add(p.pid)
    return found


@pytest.fixture
def nothing_left_running() -> Iterator[None]:
    """Fails the test if it leaves a Pulsar standalone running that was not there before."""
    before = standalone_pids()
    yield
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and standalone_pids() - before:
        time.sleep(0.2)
    assert standalone_pids() - before == set(), "a Pulsar standalone started by the test still runs"


def _cli(args: list[str], env: dict[str, str] | None = None,
         timeout_s: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout_s,
                          stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})


def _fails(res: subprocess.CompletedProcess[str], fragment: str, code: int = 2) -> None:
    """One error line and `code`: 2 for a refused TARGET, 3 for a broker that cannot start."""
    assert res.returncode == code, res.stderr
    _one_error_line(res.stderr, fragment)




# ---- the local runtime, started and stopped by the run ---------------------------------------
# (first in the module, before the module's standalone exists)

def test_local_runtime_runs_and_cleans_up(tmp_path, nothing_left_running):
    run_dir = tmp_path / "run"
    res = _cli(["run", "pulsar:heap=512m,runtime=local,namespace=bench/local", "--rate", "500",
                "--duration", "3", "--warmup", "1", "--partitions", "2", "--consumers", "2",
                "--headless", "--out", str(run_dir)])
    assert res.returncode == 0, res.stderr
    assert "starting Pulsar" in res.stderr
    meta = run_json(run_dir)
    (target,) = meta["targets"]
    assert target["runtime"] == "local" and target["version"].startswith("4.")
    assert target["config"]["persistent"] == "true"
    assert target["config"]["namespace"] == "bench/local"  # created in the standalone
    assert target["config"]["journalSyncData"] == "true"
    (totals,) = meta["totals"]
    assert totals["consumed"] == totals["produced"] == 2000 and totals["drained"]
    assert pids_gone(target["pids"], 30)
    assert not Path(target["config"]["data_dir"]).exists()
    for url in target["endpoints"].values():
        assert not port_in_use(int(url.rsplit(":", 1)[1]))
    # the standalone's output outlives its data dir, in the run's log dir
    (logs,) = (run_dir / "logs").iterdir()
    assert "messaging service is ready" in (logs / "pulsar.out").read_text(errors="replace").lower()


# ---- one standalone for the rest of the module ------------------------------------------------

@dataclass(frozen=True)
class Standalone:
    service: str
    admin: str
    pid: int

    def target(self, options: str = "") -> str:
        return f"pulsar{':' + options if options else ''}@{self.service},{self.admin}"

    def admin_get(self, path: str) -> dict:
        with urllib.request.urlopen(f"{self.admin}{path}", timeout=10) as response:
            return dict(json.loads(response.read()))


@pytest.fixture(scope="module")
def standalone() -> Iterator[Standalone]:
    stack = PulsarLocalStack(resolve_target("pulsar:heap=512m,runtime=local"), "pulsar")

    async def up() -> None:
        await stack.up(print)
        await stack.ready(60, print)

    try:
        run_precise(up())
        desc = stack.describe()
        yield Standalone(desc.endpoints["pulsar"], desc.endpoints[ADMIN_ENDPOINT], desc.pids[0])
    finally:
        run_precise(stack.down())


def _run(workload: Workload, specs: list[str], run_dir: Path, track_ids: bool = False) -> RunSummary:
    run = Run(workload, unique_labels([resolve_target(s) for s in specs]), out_dir=run_dir,
              audit=track_ids, recorder=ParquetSink)
    return run_precise(run.execute())


@pytest.fixture(scope="module")
def fixed_rate_run(standalone: Standalone, tmp_path_factory) -> tuple[Path, RunSummary]:
    """15 s at 2,000 msg/s: 2 partitions, 2 consumers in one shared subscription."""
    run_dir = tmp_path_factory.mktemp("pulsar-fixed") / "run"
    workload = Workload(name="pulsar-fixed-rate", rate=RATE, duration_s=15, warmup_s=2,
                        partitions=2, consumers=2, message_size=1024)
    return run_dir, _run(workload, [standalone.target()], run_dir, track_ids=True)


def test_every_message_consumed_once_and_backlog_drains(fixed_rate_run):
    run_dir, summary = fixed_rate_run
    (t,) = summary.targets
    assert t.send_errors == 0 and t.receive_errors == 0
    assert t.produced == int(RATE * 17)  # warm-up + measuring slots, none skipped
    assert t.consumed == t.produced == t.expected
    assert t.duplicates == 0
    assert t.drained and t.final_lag == 0
    audit = t.audit  # the delivery audit, from the messages' properties: every message once
    assert audit is not None and audit["acknowledged"] == audit["consumed"] == t.produced
    assert not any(audit[k] for k in ("lost", "unexpected", "duplicated", "reordered", "unseen")), audit
    lag = _table(run_dir, "lag")
    last = max(lag["seq"])
    assert {p: v for s, p, v in zip(lag["seq"], lag["partition"], lag["lag"], strict=True)
            if s == last} == {0: 0, 1: 0}
    ticks = _table(run_dir, "ticks")
    assert sum(ticks["produced_bytes"]) == t.produced * 1024


def _backlog_from_admin(standalone: Standalone, path: str, sub: str) -> int:
    stats = standalone.admin_get(f"/admin/v2/{path}/partitioned-stats?perPartition=true")
    return sum(p["subscriptions"][sub]["msgBacklog"] for p in stats["partitions"].values())


@pytest.mark.parametrize("batching", [False, True], ids=["unbatched", "batched"])
def test_backlog_with_consumers_paused(standalone, batching):
    """Produce 150 and consume them, pause the consumer, produce 450 more: the backlog
    streambench reports is what the admin API says, and without producer batching it is
    exactly the 450 produced but unacknowledged messages (with batching the broker counts
    batches)."""
    spec = standalone.target(f"batching={str(batching).lower()}")
    config = PulsarTargetConfig.of(resolve_target(spec))
    topic, sub = f"paused-{batching}-{time.time_ns()}", "streambench-sub-0"
    path = topic_path(True, config.namespace, topic)

    def messages(n: int) -> list[OutMessage]:
        now = time.time_ns()
        return [OutMessage(b"x" * 100, None, now) for _ in range(n)]

    async def scenario() -> tuple[int, int]:
        driver = PulsarDriver(standalone.service, standalone.admin, config)
        await driver.connect()
        try:
            await driver.create_topic(topic, 2, [sub])
            telemetry = PulsarTelemetry(standalone.admin, True, config.namespace, topic, 2, [sub],
                                        batching)
            await telemetry.start()
            consumer = await driver.consumer(topic, sub, 0, track_ids=False)
            producer = await driver.producer(topic, 0)
            await producer.send_batch(messages(150))
            consumed = 0
            while consumed < 150:
                batch = await consumer.receive()
                consumed += batch.count if batch else 0
            assert consumed == 150
            # paused: the consumer stays subscribed but takes nothing more
            await producer.send_batch(messages(450))
            await asyncio.sleep(1.5)  # acknowledgements are grouped for 100 ms
            lag = (await telemetry.sample()).lag
            assert lag is not None and set(lag.per_partition) == {0, 1}
            reported = lag.total
            admin = _backlog_from_admin(standalone, path, sub)
            await producer.close()
            await consumer.close()
            await telemetry.close()
            return reported, admin
        finally:
            await driver.delete_topic(topic)
            await driver.close()

    reported, admin = run_precise(scenario())
    assert reported == admin
    if batching:
        assert 0 < reported <= 450
    else:
        assert reported == 450


def test_non_persistent_topics_run_and_are_labelled(standalone, tmp_path):
    run_dir = tmp_path / "run"
    workload = Workload(name="pulsar-np", rate=1000, duration_s=4, warmup_s=1, partitions=2,
                        consumers=2, message_size=512)
    summary = _run(workload, [standalone.target("persistent=false")], run_dir, track_ids=True)
    (t,) = summary.targets
    assert t.consumed == t.produced == 5000 and t.drained and t.duplicates == 0
    (target,) = run_json(run_dir)["targets"]
    assert target["config"]["persistent"] == "false"
    assert target["config"]["topic_domain"] == "non-persistent"


# ---- mistakes: one line, exit 2 (3: no broker starts), nothing left running -------------------

def test_java_missing(tmp_path, nothing_left_running):
    res = _cli(["run", "pulsar:runtime=local", "--headless", "--duration", "1"],
               env={"PATH": str(tmp_path), "JAVA_HOME": ""})
    _fails(res, "java not found", code=3)


def test_bad_subscription_type(nothing_left_running):
    res = _cli(["run", "pulsar:subscription=exclusiv", "--headless", "--duration", "1"])
    _fails(res, "expected one of shared, key_shared, failover, exclusive")


def test_exclusive_with_two_consumers(standalone, tmp_path, nothing_left_running):
    res = _cli(["run", standalone.target("subscription=exclusive"), "--consumers", "2",
                "--headless", "--duration", "1", "--out", str(tmp_path / "run")])
    _fails(res, "subscription=exclusive admits one consumer per subscription")
    assert standalone.pid in standalone_pids()  # an existing cluster is left alone


def test_backlog_phase_on_pulsar(standalone: Standalone, tmp_path: Path) -> None:
    """OMB's consumerBacklogSizeGB on a real standalone: the backlog is built, then drained."""
    workload = tmp_path / "backlog.yaml"
    workload.write_text(f"name: pulsar-backlog\n{WORKLOAD_FIELDS}")
    out = tmp_path / "run"
    res = run_cli(["run", standalone.target(), "--workload", str(workload), "--headless",
                   "--out", str(out)], timeout_s=180)
    assert res.returncode == 0, res.stderr[-3000:]
    assert_backlog_phase(out)


OMB_PULSAR_DRIVER = """name: Pulsar
driverClass: io.openmessaging.benchmark.driver.pulsar.PulsarBenchmarkDriver
client:
  serviceUrl: pulsar://localhost:6650
  httpUrl: http://localhost:8080
  ioThreads: 8
  connectionsPerBroker: 8
producer:
  batchingEnabled: true
  batchingMaxPublishDelayMs: 1
  blockIfQueueFull: true
  pendingQueueSize: 0
"""


def test_an_omb_driver_file_runs_through_driver(standalone: Standalone, tmp_path: Path) -> None:
    driver = tmp_path / "pulsar-driver.yaml"
    driver.write_text(OMB_PULSAR_DRIVER)
    out = tmp_path / "run"
    res = run_cli(["run", standalone.target(), "--driver", str(driver), "--rate", "500",
                   "--duration", "3", "--warmup", "0", "--headless", "--out", str(out)])
    assert res.returncode == 0, res.stderr[-3000:]
    assert "client.serviceUrl" in res.stderr and "not acted on" in res.stderr
    meta = run_json(out)
    settings = meta["targets"][0]["settings"]
    assert settings["producer.batching_enabled"]["value"] in ("True", "true")
    assert settings["producer.batching_max_publish_delay_ms"]["value"] == "1"
    assert meta["totals"][0]["produced"] == meta["totals"][0]["consumed"] == 1500


def test_the_consumer_keeps_up_at_maximum_rate(standalone: Standalone, tmp_path: Path) -> None:
    """As fast as acknowledgements allow, 1 KiB messages: the consumer, with its receiver queue
    sized for the message size (10,000 here), reads within 5 % of what is produced over the
    measuring phase instead of falling behind inside the tool."""
    run_dir = tmp_path / "run"
    workload = Workload(name="pulsar-max", rate=0, duration_s=8, warmup_s=2, message_size=1024,
                        drain_timeout_s=60)
    summary = _run(workload, [standalone.target()], run_dir)
    (t,) = summary.targets
    assert t.drained and t.consumed == t.produced
    ticks = _table(run_dir, "ticks")
    measuring = [i for i, p in enumerate(ticks["phase"]) if p == "measuring"]
    produced = sum(ticks["produced"][i] for i in measuring)
    consumed = sum(ticks["consumed"][i] for i in measuring)
    assert produced > 0 and consumed >= 0.95 * produced, (produced, consumed)
    (target,) = run_json(run_dir)["targets"]
    assert target["settings"]["consumer.receiver_queue_size"]["value"] == "10000"
