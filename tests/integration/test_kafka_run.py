"""Fixed-rate runs against Kafka brokers started by streambench itself: KRaft and ZooKeeper mode
side by side in one run, and a 3-node KRaft cluster."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path

import psutil
import pyarrow.dataset as ds
import pytest

from analysis.sink import ParquetSink
from loadgen.core.target import unique_labels
from loadgen.core.workload import Workload
from loadgen.pacing import run_precise
from loadgen.platforms import resolve_target
from loadgen.run import Run, RunSummary
from tests.conftest import assert_rate
from tests.integration.conftest import CliRun, port_listening, run_json
from tests.integration.kafka_support import kafka_39, nothing_left_running  # noqa: F401  (fixtures)

pytestmark = pytest.mark.integration

# Ticks count messages when acknowledged, so a stall at a phase boundary moves acks across it;
# a longer measuring phase keeps that well inside the 2 % (brokers, workers and coordinator
# share two cores in CI)
WARMUP_S = 4  # the brokers' JIT settles in the first seconds
DURATION_S = 20
SIDE_BY_SIDE_RATE = 1000.0
THREE_NODES_RATE = 1000.0  # every record written 3 times, by 3 JVMs


def _table(run_dir: Path, name: str) -> dict:
    return ds.dataset(run_dir / name, format="parquet").to_table().to_pydict()


@dataclass
class FixedRateRun:
    run_dir: Path
    summary: RunSummary
    rate: float


def _run(run_dir: Path, specs: list[str], rate: float, partitions: int,
         consumers: int) -> FixedRateRun:
    workload = Workload(name="kafka-fixed-rate", rate=rate, duration_s=DURATION_S,
                        warmup_s=WARMUP_S, partitions=partitions, consumers=consumers,
                        message_size=1024)
    targets = unique_labels([resolve_target(s) for s in specs])
    summary = run_precise(Run(workload, targets, out_dir=run_dir, audit=True,
                              recorder=ParquetSink).execute())
    return FixedRateRun(run_dir, summary, rate)


@pytest.fixture(scope="module")
def side_by_side(tmp_path_factory, kafka_39) -> FixedRateRun:  # noqa: F811
    """KRaft and ZooKeeper mode, one broker each, in one run: 2 partitions, 2 consumers."""
    return _run(tmp_path_factory.mktemp("side-by-side") / "run",
                ["kafka:runtime=local,heap=512M",
                 "kafka-zk:runtime=local,heap=512M,broker.num.io.threads=6"],
                SIDE_BY_SIDE_RATE, partitions=2, consumers=2)


@pytest.fixture(scope="module")
def three_nodes(tmp_path_factory, kafka_39) -> FixedRateRun:  # noqa: F811
    """A 3-node KRaft cluster, 3 partitions replicated 3 times."""
    return _run(tmp_path_factory.mktemp("three-nodes") / "run", ["kafka:runtime=local,brokers=3,heap=512M"],
                THREE_NODES_RATE, partitions=3, consumers=1)


@pytest.fixture(params=["side_by_side", "three_nodes"])
def fixed_rate_run(request) -> FixedRateRun:
    return request.getfixturevalue(request.param)


def test_rate_within_two_percent(fixed_rate_run: FixedRateRun):
    run_dir, summary, rate = fixed_rate_run.run_dir, fixed_rate_run.summary, fixed_rate_run.rate
    ticks = _table(run_dir, "ticks")
    for label in (t.label for t in summary.targets):
        rows = [i for i, (t, p) in enumerate(zip(ticks["target"], ticks["phase"], strict=True))
                if t == label and p == "measuring"]
        assert len(rows) == DURATION_S
        produced = sum(ticks["produced"][i] for i in rows)
        mine = [{k: ticks[k][i] for k in ("phase", "interval_s", "produced")}
                for i, t in enumerate(ticks["target"]) if t == label]
        (total,) = (t.produced for t in summary.targets if t.label == label)
        assert_rate(mine, total, rate, WARMUP_S)
        assert sum(ticks["produced_bytes"][i] for i in rows) == produced * 1024


def test_every_message_consumed_once_and_lag_drains(fixed_rate_run: FixedRateRun):
    run_dir, summary = fixed_rate_run.run_dir, fixed_rate_run.summary
    lag = _table(run_dir, "lag")
    for t in summary.targets:
        assert t.send_errors == 0 and t.receive_errors == 0
        assert t.produced == int(fixed_rate_run.rate * (WARMUP_S + DURATION_S))  # no slot skipped
        assert t.consumed == t.produced == t.expected
        assert t.duplicates == 0
        assert t.drained and t.final_lag == 0
        audit = t.audit  # the delivery audit, from the records' headers: every message once
        assert audit is not None and audit["acknowledged"] == audit["consumed"] == t.produced
        assert not any(audit[k] for k in ("lost", "unexpected", "duplicated", "reordered",
                                          "unseen")), audit
        last = max(s for s, tg in zip(lag["seq"], lag["target"], strict=True) if tg == t.label)
        final = {p: v for s, tg, p, v in zip(lag["seq"], lag["target"], lag["partition"], lag["lag"],
                                             strict=True) if tg == t.label and s == last}
        assert set(final) == set(range(len(final))) and len(final) >= 2
        assert set(final.values()) == {0}


def test_run_files_describe_each_target(fixed_rate_run: FixedRateRun):
    run_dir, summary = fixed_rate_run.run_dir, fixed_rate_run.summary
    meta = run_json(run_dir)
    by_platform = {t["platform"]: t for t in meta["targets"]}
    assert len(meta["targets"]) == len(summary.targets)
    for target in meta["targets"]:
        assert target["version"] == "3.9.1"
        assert target["runtime"] == "local"
    if "kafka-zk" in by_platform:
        assert by_platform["kafka-zk"]["config"]["mode"] == "zookeeper"
        assert len(by_platform["kafka-zk"]["pids"]) == 2  # ZooKeeper + 1 broker
        # a broker setting of a ZooKeeper-mode broker, as the broker tells it (DescribeConfigs)
        zk_settings = by_platform["kafka-zk"]["settings"]
        assert zk_settings["broker.num.io.threads"] == {"value": "6", "source": "user",
                                                        "read_back": True}
        assert by_platform["kafka"]["settings"]["broker.num.io.threads"] == {
            "value": "8", "source": "platform default", "read_back": True}
        assert by_platform["kafka"]["config"]["mode"] == "kraft"
    else:
        assert by_platform["kafka"]["config"]["brokers"] == "3"
        assert len(by_platform["kafka"]["endpoints"]["kafka"].split(",")) == 3
    ticks = _table(run_dir, "ticks")
    assert set(ticks["target"]) == {t.label for t in summary.targets}


def test_broker_telemetry_recorded(fixed_rate_run: FixedRateRun):
    run_dir = fixed_rate_run.run_dir
    ticks = _table(run_dir, "ticks")
    measuring = [i for i, p in enumerate(ticks["phase"]) if p == "measuring"]
    assert all(ticks["memory_bytes"][i] > 100_000_000 for i in measuring)  # JVM brokers
    assert all(ticks["cpu_percent"][i] > 0 for i in measuring)
    broker = _table(run_dir, "broker")
    means = [v for n, v in zip(broker["name"], broker["value"], strict=True)
             if n == "createtime_latency_ms_mean"]
    assert means and all(0 <= v < 10_000 for v in means)
    sources = set(_table(run_dir, "lag")["source"])
    assert "log-end offset − consumer position" in sources


def test_brokers_stopped_and_cleaned(fixed_rate_run: FixedRateRun):
    run_dir = fixed_rate_run.run_dir
    for target in run_json(run_dir)["targets"]:
        for endpoint in target["endpoints"]["kafka"].split(","):
            assert not port_listening(int(endpoint.rsplit(":", 1)[1]))
        assert not any(psutil.pid_exists(pid) for pid in target["pids"])
        assert not Path(target["config"]["data_dir"]).exists()
    # every broker's (and ZooKeeper's) log outlives the data dir, in the run's log dir
    for index, target in enumerate(run_json(run_dir)["targets"]):
        logs = list((run_dir / "logs").glob(f"{index}-*/*.log"))
        brokers = [p for p in logs if p.name.endswith("-broker.log")]
        assert len(brokers) == int(target["config"]["brokers"])
        assert all("Kafka Server started" in p.read_text(errors="replace") or
                   "[KafkaServer id=" in p.read_text(errors="replace") for p in brokers)
        assert (len(logs) - len(brokers)) == (target["config"]["mode"] == "zookeeper")


def test_sigterm_during_measuring_stops_brokers_and_zookeeper(tmp_path, kafka_39,  # noqa: F811
                                                             nothing_left_running):  # noqa: F811
    run_dir = tmp_path / "run"
    cli = CliRun(["run", "kafka-zk:runtime=local,heap=512M", "--rate", "500", "--duration", "60",
                  "--warmup", "1", "--headless", "--out", str(run_dir)])
    cli.wait_for_line("measuring", 120)
    cli.wait_for_line("measuring", 10)
    cli.signal(signal.SIGTERM)
    rc, _out, err = cli.finish(timeout_s=90)
    assert rc == 143, err
    assert "Traceback" not in err
    meta = run_json(run_dir)
    assert meta["stopped_early"] is True
    assert meta["totals"][0]["consumed"] == meta["totals"][0]["produced"] > 0
