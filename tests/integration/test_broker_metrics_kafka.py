"""Kafka's broker metrics in real runs on local brokers streambench starts, read through the
Prometheus JMX exporter agent it attaches: every declared metric in the broker_metrics table
(KRaft and ZooKeeper mode), plausible against the load, and stale while the broker is paused
(streambench's own pause fault, SIGSTOP).

The produced-rate check uses MessagesInPerSec (messages appended), not the produce request rate:
a produce request carries a batch of messages, so requests per second are at most the messages
per second (the clients' batching makes them fewer)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pytest

from collectors.kafka_metrics import METRICS
from tests.conftest import run_cli, run_json
from tests.integration.broker_metrics_support import (
    assert_stale_while_paused,
    by_tick,
    fault_times,
    table,
)
from tests.integration.kafka_support import (  # noqa: F401  (fixtures)
    Cluster,
    kafka_39,
    kafka_cluster,
)

pytestmark = pytest.mark.integration

RATE = 1000
PAUSE_AT_S, RESUME_AT_S = 9, 13  # measuring seconds


def _run(run_dir: Path, target: str, *more: str, duration: int = 16) -> Path:
    res = run_cli(["run", target, "--headless", "--rate", str(RATE), "--warmup", "2",
                   "--duration", str(duration), "--out", str(run_dir), *more], timeout_s=300)
    assert res.returncode == 0, res.stderr
    return run_dir


@pytest.fixture(scope="module")
def kraft_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _run(tmp_path_factory.mktemp("kafka-metrics") / "run", "kafka",
                "--at", f"{PAUSE_AT_S}s:pause=kafka", "--at", f"{RESUME_AT_S}s:resume=kafka")


@pytest.fixture(scope="module")
def zookeeper_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _run(tmp_path_factory.mktemp("kafka-zk-metrics") / "run", "kafka-zk", duration=6)


@pytest.mark.parametrize("which", ["kraft_run", "zookeeper_run"])
def test_every_declared_metric_read_with_its_mbean(which: str, request: pytest.FixtureRequest
                                                   ) -> None:
    run_dir = request.getfixturevalue(which)
    measuring = [v for v, stale, phase in by_tick(run_dir).values()
                 if phase == "measuring" and not stale]
    assert measuring and all(set(v) == {m.name for m in METRICS} for v in measuring[1:])
    assert set(table(run_dir, "broker_metrics")["broker"]) == {"broker-1"}
    target = run_json(run_dir)["targets"][0]
    assert target["broker_metrics"]["source"] == "JMX (Prometheus JMX exporter)"
    natives = {m["name"]: m["native"] for m in target["broker_metrics"]["metrics"]}
    assert natives["messages_in_per_second"] == (
        "kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec Count")
    # the exporter's port is in the stack's description
    assert target["endpoints"]["metrics"].startswith("broker-1=http://127.0.0.1:")


def test_values_follow_the_load(kraft_run: Path) -> None:
    """Before the pause: MessagesInPerSec's rate (its Count's growth between two reads over
    the time between them) within 5 % of the messages the producers had acknowledged per second
    over the same ticks; produce requests at most the messages (a request carries a batch); one
    active controller, nothing under-replicated, no ISR change on a one-broker cluster; the
    request times plausible for a loopback broker."""
    paused, _ = fault_times(kraft_run)
    ticks = table(kraft_run, "ticks")
    metrics = by_tick(kraft_run)
    steady = [i for i, (p, t) in enumerate(zip(ticks["phase"], ticks["time"], strict=True))
              if p == "measuring" and t.timestamp() < paused - 1.5][1:]
    assert len(steady) >= 4, steady
    messages, requests, produced, seconds = [], [], 0, 0.0
    for i in steady:
        values, stale, _ = metrics[ticks["seq"][i]]
        assert not stale
        messages.append(values["messages_in_per_second"] * ticks["interval_s"][i])
        requests.append(values["produce_requests_per_second"])
        produced += ticks["produced"][i]
        seconds += ticks["interval_s"][i]
        assert values["active_controller_count"] == 1
        assert values["under_replicated_partitions"] == 0
        assert values["isr_shrinks_per_second"] == values["isr_expands_per_second"] == 0
        assert 0 <= values["network_processor_idle_ratio"] <= 1
        for name in ("produce_total_time_p99_seconds", "produce_queue_time_p99_seconds",
                     "fetch_total_time_p99_seconds", "fetch_queue_time_p99_seconds",
                     "log_flush_time_p99_seconds"):
            assert 0 <= values[name] < 5.0, (name, values[name])
        assert values["produce_queue_time_p99_seconds"] <= values["produce_total_time_p99_seconds"]
    broker_rate, acked_rate = sum(messages) / seconds, produced / seconds
    what = (f"MessagesInPerSec {broker_rate:.0f}/s, acknowledged {acked_rate:.0f}/s, produce "
            f"requests {np.mean(requests):.0f}/s")
    assert abs(broker_rate - acked_rate) <= 0.05 * acked_rate, what
    assert 0 < np.mean(requests) <= 1.05 * broker_rate, what


def test_a_paused_brokers_metrics_are_stale(kraft_run: Path) -> None:
    """Ticks cut while the broker is paused are stale with the last values read (its
    exporter, a thread of the stopped JVM, does not answer within the read's timeout), and
    fresh again after the resume; the failed reads are the collector's error events."""
    assert_stale_while_paused(kraft_run)
    events = table(kraft_run, "events")
    assert any(k == "collector-error" and d.startswith("kafka metrics:")
               for k, d in zip(events["kind"], events["detail"], strict=True))


def test_an_existing_cluster_read_at_the_endpoints_it_is_given(kafka_cluster: Cluster,  # noqa: F811
                                                                tmp_path: Path) -> None:
    """An @ADDRESS target with metrics=URL has its broker metrics read there, the broker named
    by the URL's host:port; without metrics= it has none, and the run says so once."""
    url = kafka_cluster.metrics.split("=", 1)[1]
    given = _run(tmp_path / "given", f"kafka:metrics={url}@{kafka_cluster.bootstrap}",
                 duration=4)
    measuring = [v for v, stale, phase in by_tick(given).values()
                 if phase == "measuring" and not stale]
    assert measuring and set(measuring[-1]) == {m.name for m in METRICS}
    assert set(table(given, "broker_metrics")["broker"]) == {url.split("/")[2]}
    res = run_cli(["run", f"kafka@{kafka_cluster.bootstrap}", "--headless", "--rate", str(RATE),
                   "--warmup", "1", "--duration", "3", "--out", str(tmp_path / "none")],
                  timeout_s=300)
    assert res.returncode == 0, res.stderr
    assert res.stderr.count("no broker metrics") == 1, res.stderr
    none = tmp_path / "none" / "broker_metrics"
    assert not none.exists() or ds.dataset(none, format="parquet").count_rows() == 0
