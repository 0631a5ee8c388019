"""NATS JetStream's broker metrics in a real run on a local nats-server streambench starts:
every declared metric in the broker_metrics table, plausible against the load and the server's
other interfaces, and stale while the server is paused (streambench's own pause fault).

What /varz in_msgs counts for this load: every published message and every acknowledgement
(one per message consumed), so its rate is the produce rate plus the consume rate; the pull
requests of the consumers add a few more."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from collectors.nats import METRICS
from tests.integration.broker_metrics_support import (
    assert_named,
    assert_stale_while_paused,
    by_tick,
    fault_times,
    paused_run,
    table,
)

pytestmark = pytest.mark.integration

RATE = 1000
PAUSE_AT_S, RESUME_AT_S = 9, 13  # measuring seconds


@pytest.fixture(scope="module")
def nats_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return paused_run(tmp_path_factory, "nats", "nats", PAUSE_AT_S, RESUME_AT_S, RATE,
                      duration_s=16)


def test_every_declared_metric_read_and_named(nats_run: Path) -> None:
    ticks = by_tick(nats_run)
    measuring = [v for v, stale, phase in ticks.values() if phase == "measuring" and not stale]
    assert measuring and all(set(v) == {m.name for m in METRICS} for v in measuring)
    assert_named(nats_run, METRICS, "/varz and /jsz")


def test_values_follow_the_load(nats_run: Path) -> None:
    """Before the pause: in_msgs' rate within 10 % of produced + consumed per second; the
    pending and ack-pending messages within 5 % of a second's messages of the lag the
    collector read from the consumers' info (the server's JetStream API); the stored bytes
    those of the run's stream as /jsz totals them (the only stream on the server; read by the
    other collector at nearly the same moment); no
    redelivery, no slow consumer, no API error in a clean stretch."""
    paused, _ = fault_times(nats_run)
    ticks = table(nats_run, "ticks")
    metrics = by_tick(nats_run)
    broker = table(nats_run, "broker")
    server_bytes = {s: v for s, n, v in zip(broker["seq"], broker["name"], broker["value"],
                                            strict=True) if n == "js_stored_bytes"}
    steady = [i for i, (p, t) in enumerate(zip(ticks["phase"], ticks["time"], strict=True))
              if p == "measuring" and t.timestamp() < paused - 1.5]
    steady = steady[2:]  # the first measuring ticks still carry the warm-up's start
    assert len(steady) >= 4, steady
    rates, expected, queued, lags = [], [], [], []
    for i in steady:
        seq = ticks["seq"][i]
        values, stale, _ = metrics[seq]
        assert not stale
        rates.append(values["in_messages_per_second"])
        expected.append((ticks["produced"][i] + ticks["consumed"][i]) / ticks["interval_s"][i])
        queued.append(values["pending_messages"] + values["ack_pending_messages"])
        lags.append(ticks["lag_total"][i])
        # read by two collectors side by side: a fifth of a second's messages apart at most
        assert abs(values["stored_bytes"] - server_bytes[seq]) <= 0.2 * RATE * 1500
        assert values["redelivered_messages"] == values["slow_consumers_total"] == 0
        assert values["api_errors_total"] == 0
        # at most the stream's messages: the slowest ack floor is within the stream
        assert 0 <= values["ack_floor_behind_messages"] <= values["stored_bytes"] / 1024
    what = f"in_msgs/s {np.mean(rates):.0f}, produced+consumed/s {np.mean(expected):.0f}"
    assert abs(np.mean(rates) - np.mean(expected)) <= 0.10 * np.mean(expected), what
    assert abs(np.mean(queued) - np.mean(lags)) <= 0.05 * RATE, (queued, lags)


def test_a_paused_servers_metrics_are_stale(nats_run: Path) -> None:
    assert_stale_while_paused(nats_run)
