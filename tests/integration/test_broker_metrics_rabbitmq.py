"""RabbitMQ's broker metrics in a real run on a node streambench starts: every declared metric
in the broker_metrics table, plausible against the run's own figures, and stale while the node
is paused (streambench's own pause fault).

The node refreshes its management figures every second (collect_statistics_interval, set so by
streambench): the publishers' published and confirmed counters, read as rates per tick, follow
the run's acknowledged rate over several ticks, not tick by tick."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from collectors.rabbitmq import METRICS
from tests.integration.broker_metrics_support import (
    assert_named,
    assert_stale_while_paused,
    by_tick,
    paused_run,
    steady_rows,
    table,
)

RATE = 1000
PAUSE_AT_S, RESUME_AT_S = 10, 14  # measuring seconds


@pytest.fixture(scope="module")
def rabbit_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return paused_run(tmp_path_factory, "rabbitmq", "rabbitmq", PAUSE_AT_S, RESUME_AT_S, RATE)


def test_every_declared_metric_read_and_named(rabbit_run: Path) -> None:
    ticks = by_tick(rabbit_run)
    measuring = [v for v, stale, phase in ticks.values() if phase == "measuring" and not stale]
    # the node's own figures (memory, disk, alarms) come once it has gathered them (its
    # /api/nodes answers `[[]]` before, early in a run): from then on every tick has them all
    complete = [set(v) == {m.name for m in METRICS} for v in measuring]
    assert measuring and True in complete, measuring[:2]
    assert all(complete[complete.index(True):]) and sum(complete) >= 0.8 * len(complete)
    assert_named(rabbit_run, METRICS, "management API")


def test_values_follow_the_load(rabbit_run: Path) -> None:
    """Over the steady ticks before the pause: the messages published and confirmed as the
    node counts them (each tick's rate times its interval, summed) within 5 % and one refresh's
    messages (the node's figures are up to a second old at either end of the stretch, and a
    tick can see two refreshes or none) of the run's acknowledged messages over the same
    ticks; confirms outstanding at most a second of messages; the producer, the consumer and
    the collectors' connections open; no alarm; memory and free disk those of a running
    node."""
    ticks = table(rabbit_run, "ticks")
    metrics = by_tick(rabbit_run)
    rows = steady_rows(rabbit_run)
    assert len(rows) >= 4, rows
    published, confirmed, acknowledged = [], [], []
    for i in rows:
        values, stale, _ = metrics[ticks["seq"][i]]
        assert not stale
        published.append(values["published_per_second"] * ticks["interval_s"][i])
        confirmed.append(values["confirmed_per_second"] * ticks["interval_s"][i])
        acknowledged.append(ticks["produced"][i])
        assert 0 <= values["unconfirmed_messages"] <= RATE, values
        assert values["connected_clients"] >= 3, values
        assert values["resource_alarms"] == 0, values
        assert values["used_memory_bytes"] > 10e6 and values["disk_free_bytes"] > 50e6, values
        assert values["consumer_offset_lag_messages"] >= 0, values
    total = sum(acknowledged)
    what = (f"published {sum(published):.0f}, confirmed {sum(confirmed):.0f}, acknowledged "
            f"{total} over {len(rows)} ticks; per tick published {np.round(published)}")
    for counted in (published, confirmed):
        assert abs(sum(counted) - total) <= 0.05 * total + RATE, what


def test_a_paused_nodes_metrics_are_stale(rabbit_run: Path) -> None:
    assert_stale_while_paused(rabbit_run)
