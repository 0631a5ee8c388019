"""Pulsar's broker metrics in a real run on the standalone streambench starts: every declared
metric in the broker_metrics table, plausible against the run's own figures, and stale while
the broker is paused (streambench's own pause fault).

The standalone computes its topic stats and storage latencies once a second (streambench sets
its stats periods so): pulsar_rate_in is the last second's rate of messages in, which over the
steady ticks is the run's produced rate."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from collectors.pulsar import METRICS
from tests.integration.broker_metrics_support import (
    assert_named,
    assert_stale_while_paused,
    by_tick,
    fault_times,
    paused_run,
    steady_rows,
    table,
)

RATE = 1000
PAUSE_AT_S, RESUME_AT_S = 10, 14  # measuring seconds


@pytest.fixture(scope="module")
def pulsar_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return paused_run(tmp_path_factory, "pulsar", "pulsar", PAUSE_AT_S, RESUME_AT_S, RATE)


def test_every_declared_metric_read_and_named(pulsar_run: Path) -> None:
    """Every metric at every measuring tick the broker answered, but a latency where the
    broker's last stats period saw no write: in the seconds after the pause (a period that
    ended while the broker was stopped), or where the writes stopped for a second (the
    broker's own rate in, or the run's produced count, in that tick or the one before it,
    under half the rate: a busy machine's stall of the load generator)."""
    ticks = by_tick(pulsar_run)
    rows = table(pulsar_run, "ticks")
    times = {s: t.timestamp() for s, t in zip(rows["seq"], rows["time"], strict=True)}
    produced = {s: n / i for s, n, i in zip(rows["seq"], rows["produced"], rows["interval_s"],
                                            strict=True)}

    def writes_stopped(seq: int) -> bool:
        return any(rate < RATE / 2 for s in (seq - 1, seq)
                   for rate in (produced.get(s, RATE), ticks.get(s, ({}, 0, 0))[0].get(
                       "in_messages_per_second", RATE)))

    paused, resumed = fault_times(pulsar_run)
    latencies = {m.name for m in METRICS if m.latency}
    measuring = {s: v for s, (v, stale, phase) in ticks.items()
                 if phase == "measuring" and not stale}
    missing = {s: {m.name for m in METRICS} - set(v) for s, v in measuring.items()}
    wrong = {s: (f"{times[s] - paused:+.1f} s from the pause, {times[s] - resumed:+.1f} s from "
                 f"the resume", sorted(gone), measuring[s].get("in_messages_per_second"))
             for s, gone in missing.items()
             if gone and not (gone <= latencies and (resumed < times[s] < resumed + 3
                                                     or writes_stopped(s)))}
    assert measuring and not wrong, wrong
    assert_named(pulsar_run, METRICS, "/metrics")


def test_values_follow_the_load(pulsar_run: Path) -> None:
    """Over the steady ticks before the pause: pulsar_rate_in within 10 % of the run's produced
    rate and pulsar_rate_out within 10 % of its consumed rate (the broker's one-second periods
    against the ticks'); the storage write latency's p99 bucket edge at or above its mean, and
    the bookies' add-entry time (part of the storage write) not above the storage write's
    mean by more than 10 %; the backlog and unacknowledged counts at most a few seconds of
    messages."""
    ticks = table(pulsar_run, "ticks")
    metrics = by_tick(pulsar_run)
    rows = steady_rows(pulsar_run)
    assert len(rows) >= 4, rows
    seen: dict[str, list[float]] = {"in": [], "out": [], "produced": [], "consumed": []}
    for i in rows:
        values, stale, _ = metrics[ticks["seq"][i]]
        assert not stale
        seen["in"].append(values["in_messages_per_second"])
        seen["out"].append(values["out_messages_per_second"])
        seen["produced"].append(ticks["produced"][i] / ticks["interval_s"][i])
        seen["consumed"].append(ticks["consumed"][i] / ticks["interval_s"][i])
        write, p99 = values["storage_write_latency_seconds"], values["storage_write_latency_p99_seconds"]
        assert 0 < write <= p99 <= 1.0, values
        assert 0 < values["ledger_write_latency_seconds"] <= 1.1 * write, values
        assert 0 <= values["backlog_messages"] <= 5 * RATE
        assert 0 <= values["ack_pending_messages"] <= 5 * RATE
    means = {k: float(np.mean(v)) for k, v in seen.items()}
    assert abs(means["in"] - means["produced"]) <= 0.10 * means["produced"], means
    assert abs(means["out"] - means["consumed"]) <= 0.10 * means["consumed"], means


def test_a_paused_brokers_metrics_are_stale(pulsar_run: Path) -> None:
    assert_stale_while_paused(pulsar_run)
