"""The search for the highest sustainable rate (OMB's producerRate 0), driven by a model broker
whose consumers read at most CAPACITY msg/s: the search must settle within 5 % below it, and
every decision must follow the rules its line states."""

from __future__ import annotations

import re

import pytest

from loadgen.histogram import Histogram
from loadgen.ratesearch import BACKLOG_LIMIT, PERIOD_TICKS, START_RATE, RateSearch
from loadgen.tick import LagSnapshot, Phase, Resources, Tick


def _tick(seq: int, rate: float, produced: int, consumed: int, produced_total: int,
          consumed_total: int) -> Tick:
    empty = Histogram().snapshot_and_reset()
    return Tick("t", seq, (seq + 1) * 1_000_000_000, 1.0, Phase.MEASURING, seq + 1.0, produced,
                produced * 100, consumed, consumed * 100, 0, rate, empty, empty, empty,
                LagSnapshot(produced_total - consumed_total), Resources(),
                produced_total=produced_total, consumed_total=consumed_total)


def _simulate(capacity: float, seconds: int, publish_capacity: float = 1e12):
    """A broker that acknowledges up to publish_capacity msg/s and whose consumer reads at most
    `capacity` msg/s; returns the decisions [(rate, line, converged)]."""
    search = RateSearch(["t"], subscriptions=1)
    rate, produced_total, consumed_total = search.rate("t"), 0, 0
    decisions = []
    for seq in range(seconds):
        produced = int(min(rate, publish_capacity))
        produced_total += produced
        consumed = int(min(capacity, produced_total - consumed_total))
        consumed_total += consumed
        step = search.tick(_tick(seq, rate, produced, consumed, produced_total, consumed_total))
        if step is not None:
            rate = step[0]
            decisions.append(step)
    return search, decisions


@pytest.mark.parametrize("capacity", [3_000.0, 25_000.0, 160_000.0])
def test_the_search_settles_just_below_what_the_consumer_sustains(capacity):
    search, decisions = _simulate(capacity, 600)
    assert search.converged("t")
    held = [rate for rate, line, _ in decisions[-20:]]
    # the last minute of decisions: at most the capacity, and within 5 % + a probe below it
    assert max(held) <= capacity * 1.0501
    assert min(held) >= capacity * 0.85, held
    assert sum(held) / len(held) >= capacity * 0.9
    assert sum(1 for _, _, just in decisions if just) == 1  # converged once


def test_a_publish_ceiling_is_found_too():
    search, decisions = _simulate(1e9, 600, publish_capacity=12_000)
    assert search.converged("t")
    held = [rate for rate, _, _ in decisions[-20:]]
    assert max(held) <= 12_000 * 1.0501 and min(held) >= 12_000 * 0.85


def test_every_decision_follows_its_stated_figures():
    _, decisions = _simulate(25_000.0, 300)
    assert decisions[0][1].startswith(f"steady: up {START_RATE:,.0f} → 20,000 msg/s")
    previous = START_RATE
    for rate, line, _ in decisions:
        unread = float(re.search(r"unread (-?[\d,]+)", line).group(1).replace(",", ""))
        behind = float(re.search(r"behind schedule ([\d,]+)", line).group(1).replace(",", ""))
        if line.startswith("backlog growing: down"):
            assert unread > BACKLOG_LIMIT or behind > BACKLOG_LIMIT
            assert rate <= previous
        elif line.startswith("steady"):
            assert unread <= BACKLOG_LIMIT and behind <= BACKLOG_LIMIT
            assert rate >= previous
        else:
            assert line.startswith("backlog draining: holding") and rate == previous
        previous = rate


def test_only_the_warm_up_and_measuring_phases_count():
    search = RateSearch(["t"], subscriptions=1)
    empty = Histogram().snapshot_and_reset()
    for seq in range(PERIOD_TICKS * 2):
        t = Tick("t", seq, seq, 1.0, Phase.DRAINING, 0.0, 0, 0, 0, 0, 0, 0.0, empty, empty, empty,
                 None, Resources())
        assert search.tick(t) is None
