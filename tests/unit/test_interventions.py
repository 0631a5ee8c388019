"""Interventions from --at flags and schedule: lists; recovery figures from ticks (the drain's are
in test_drain.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from loadgen.core.errors import WorkloadError
from loadgen.core.histogram import Histogram
from loadgen.core.interventions import (
    LEADER,
    Intervention,
    broker_names,
    check_schedule,
    find_broker,
    network_scope,
    parse_at,
    parse_schedule,
    parse_seconds,
)
from loadgen.core.ticks import LagSnapshot, Phase, Resources, Tick
from loadgen.core.workload import parse_workload
from loadgen.recovery import RecoveryWatch


@pytest.mark.parametrize("text, seconds", [("30s", 30), ("90", 90), ("1m30s", 90), ("2m", 120),
                                           ("2.5s", 2.5), ("0s", 0)])
def test_times(text: str, seconds: float) -> None:
    assert parse_seconds(text, "t") == seconds


@pytest.mark.parametrize("text, expected", [
    ("30s:rate=5000", Intervention("rate", rate=5000.0, at_s=30)),
    ("45s:rate=max@redis:aof", Intervention("rate", "redis:aof", rate=0.0, at_s=45)),
    ("60s:kill=kafka-2", Intervention("kill", broker="kafka-2", at_s=60)),
    ("16s:pause=redis", Intervention("pause", broker="redis", at_s=16)),
    ("120s:consumers=stop", Intervention("consumers", state="stop", at_s=120)),
    ("150s:producers=start@kafka", Intervention("producers", "kafka", state="start", at_s=150)),
])
def test_at_flags(text: str, expected: Intervention) -> None:
    assert parse_at(text) == expected


@pytest.mark.parametrize("text, fragment", [
    ("rate=5000", "TIME:ACTION"),
    ("x:rate=5000", "not a time"),
    ("30s:speed=5", "ACTION one of"),
    ("30s:rate=-5", "positive"),
    ("30s:rate=inf", "positive"),
    ("30s:rate=fast", "not a number"),
    ("30s:kill=", "needs a broker"),
    ("30s:consumers=halt", "stop or start"),
    # a known action without its value is told which value it takes
    ("30s:kill", "kill= needs a broker (e.g. kill=kafka-2)"),
    ("30s:pause", "pause= needs a broker"),
    ("30s:rate", "no rate given: a number of msg/s (e.g. 5000) or max"),
    ("30s:rate=", "no rate given"),
    ("30s:producers", "producers= takes stop or start"),
])
def test_bad_at_flags(text: str, fragment: str) -> None:
    with pytest.raises(WorkloadError) as exc:
        parse_at(text)
    assert fragment in str(exc.value) and "\n" not in str(exc.value)


def test_schedule_in_a_workload_round_trips() -> None:
    doc = {"name": "drill", "schedule": [
        {"at": "30s", "action": "rate", "rate": 5000},
        {"at": 60, "action": "kill", "broker": "kafka-2"},
        {"at": "1m30s", "action": "consumers", "state": "stop", "target": "kafka"},
    ]}
    w = parse_workload(doc, "w.yaml")
    assert w.schedule == (Intervention("rate", rate=5000.0, at_s=30),
                          Intervention("kill", broker="kafka-2", at_s=60),
                          Intervention("consumers", "kafka", state="stop", at_s=90))
    assert parse_workload({"name": "drill", "schedule": w.to_omb()["schedule"]}, "x").schedule == w.schedule


@pytest.mark.parametrize("entries, fragment", [
    ({"at": 1}, "must be a list"),
    ([{"at": 1}], "needs at and action"),
    ([{"at": 1, "action": "rate", "rate": 5, "speed": 2}], "unknown field"),
    ([{"at": 1, "action": "explode"}], "ACTION one of"),
])
def test_bad_schedules(entries: object, fragment: str) -> None:
    with pytest.raises(WorkloadError) as exc:
        parse_schedule(entries, "w.yaml")
    assert fragment in str(exc.value)


def test_broker_names_follow_the_label() -> None:
    assert broker_names("redis", ["redis"]) == {"redis": "redis"}
    assert broker_names("kafka", ["broker-1", "broker-2", "broker-3", "zookeeper"]) == {
        "kafka-1": "broker-1", "kafka-2": "broker-2", "kafka-3": "broker-3",
        "kafka-zookeeper": "zookeeper"}
    assert broker_names("kafka-zk", ["broker-1", "zookeeper"]) == {
        "kafka-zk": "broker-1", "kafka-zk-zookeeper": "zookeeper"}
    assert broker_names("kafka", ["kafka-1"]) == {"kafka": "kafka-1"}


def test_check_schedule() -> None:
    brokers = {"kafka": broker_names("kafka", ["broker-1", "broker-2", "broker-3"]), "redis": {}}
    labels = ["kafka", "redis"]
    check_schedule((parse_at("10s:kill=kafka-2"), parse_at("20s:rate=10@redis")), labels, brokers, 30)
    assert find_broker("kafka-3", brokers, "x") == ("kafka", "broker-3")
    for text, fragment in [("40s:rate=5", "after the end"),
                           ("10s:kill=kafka-9", "no broker 'kafka-9'"),
                           ("10s:rate=5@pulsar", "no target 'pulsar'"),
                           ("1s:pause=redis", "brokers: kafka-1")]:
        with pytest.raises(WorkloadError) as exc:
            check_schedule((parse_at(text),), labels, brokers, 30)
        assert fragment in str(exc.value)


def _tick(seq: int, produced: int, consumed: int, lag: int, e2e_ms: float = 1.0,
          publish_ms: float = 1.0, rate: float = 1000.0) -> Tick:
    e2e, pub = Histogram(), Histogram()
    if consumed:
        e2e.record_many(np.full(consumed, int(e2e_ms * 1e6), dtype=np.int64))
    if produced:
        pub.record_many(np.full(produced, int(publish_ms * 1e6), dtype=np.int64))
    return Tick("kafka", seq, (seq + 1) * 1_000_000_000, 1.0, Phase.MEASURING, seq + 1.0, produced,
                produced * 100, consumed, consumed * 100, 0, rate, pub.snapshot_and_reset(),
                Histogram().snapshot_and_reset(), e2e.snapshot_and_reset(), LagSnapshot(lag),
                Resources())


def test_recovery_after_a_fault() -> None:
    watch = RecoveryWatch(subscriptions=1)
    for s in range(3):
        assert watch.tick(_tick(s, 1000, 1000, 5)) is None
    watch.fault("kafka", "kill kafka-2", 3_500_000_000)
    # two bad seconds: nothing acknowledged, then a burst with late messages and a stall
    assert watch.tick(_tick(3, 0, 0, 900)) is None
    assert watch.tick(_tick(4, 1800, 1700, 1000, e2e_ms=800, publish_ms=1500)) is None
    done = None
    for s in range(5, 12):
        done = done or watch.tick(_tick(s, 1000, 1000, 5))
    assert done is not None and watch.pending() == []
    assert done.recovered_ns == 5_000_000_000  # healthy from the start of tick 5, for 5 s
    assert (done.recovered_ns - done.first_ns) / 1e9 == pytest.approx(1.5)
    assert done.lag_peak == 1000 and done.lag_before == 5
    assert done.stall_ns == pytest.approx(1.5e9, rel=0.002)
    assert done.late == 1700  # 800 ms is over max(100 ms, 10 × 1 ms)
    assert "healthy again 1.5 s after kill kafka-2" in done.detail()


def test_no_recovery_when_it_stays_down() -> None:
    watch = RecoveryWatch(subscriptions=1)
    watch.tick(_tick(0, 1000, 1000, 0))
    watch.fault("kafka", "pause kafka", 1_000_000_000)
    for s in range(1, 10):
        assert watch.tick(_tick(s, 0, 0, 1000 * s)) is None
    (rec,) = watch.pending()
    assert "not healthy again since pause kafka" in rec.detail()
    assert "healthy for the last" not in rec.detail()


def test_healthy_when_the_run_ended_but_not_for_long_enough() -> None:
    """The run ends 3 s into a healthy stretch: not recovered, and the verdict says for how
    long it had been healthy and how long it takes to count."""
    watch = RecoveryWatch(subscriptions=1)
    watch.tick(_tick(0, 1000, 1000, 0))
    watch.fault("kafka", "kill kafka", 1_000_000_000)
    assert watch.tick(_tick(1, 0, 0, 1000)) is None
    for s in range(2, 5):
        assert watch.tick(_tick(s, 1000, 1000, 5)) is None
    (rec,) = watch.pending()
    assert rec.detail().startswith("not healthy again since kill kafka (healthy for the last 3.0 s "
                                   "of the run, 5 s needed); lag peak 1,000"), rec.detail()


def test_recovery_allows_for_a_lag_source_that_trails() -> None:
    """Pravega's lag comes from positions its readers write back every 3 s: a healthy target at
    500 msg/s shows a lag of up to ~2,000 there. Within what the source trails by, it counts as
    back to its level; a lag beyond that does not."""
    def tick(seq: int, lag: int) -> Tick:
        t = _tick(seq, 500, 500, lag, rate=500.0)
        return dataclasses.replace(t, lag=LagSnapshot(lag, {}, "positions", trails_s=4.0))

    watch = RecoveryWatch(subscriptions=1)
    watch.tick(tick(0, 40))
    watch.fault("kafka", "kill pravega", 1_000_000_000)
    done = None
    for s, lag in enumerate([1400, 400, 900, 1400, 400, 1100, 600], start=1):
        done = done or watch.tick(tick(s, lag))
    assert done is not None and "healthy again 0.0 s after kill pravega" in done.detail()
    watch = RecoveryWatch(subscriptions=1)
    watch.tick(tick(0, 40))
    watch.fault("kafka", "kill pravega", 1_000_000_000)
    for s in range(1, 8):
        assert watch.tick(tick(s, 2100 + 10 * s)) is None  # over 40 + 4 s × 500 msg/s
    assert len(watch.pending()) == 1
    # the same lag from a source that does not trail is not healthy
    watch = RecoveryWatch(subscriptions=1)
    watch.tick(_tick(0, 500, 500, 40, rate=500.0))
    watch.fault("kafka", "kill kafka", 1_000_000_000)
    for s in range(1, 8):
        assert watch.tick(_tick(s, 500, 500, 400, rate=500.0)) is None


def test_placement_deals_producers_then_consumers() -> None:
    from loadgen.placement import auto_processes, place

    one_each = place(1, 1, 2)
    assert [(p.producers, p.consumers) for p in one_each] == [([0], []), ([], [0])]
    spread = place(3, 3, 2)
    assert [(p.producers, p.consumers) for p in spread] == [([0, 2], [1]), ([1], [0, 2])]
    assert all(p.producers or p.consumers for p in place(2, 2, 4))
    # split roles: producers round the first half, consumers round the others
    split = place(2, 2, 2, split_roles=True)
    assert [(p.producers, p.consumers) for p in split] == [([0, 1], []), ([], [0, 1])]
    split = place(3, 4, 3, split_roles=True)
    assert [(p.producers, p.consumers) for p in split] == [([0, 1, 2], []), ([], [0, 2]),
                                                           ([], [1, 3])]
    assert place(2, 2, 1, split_roles=True) == place(2, 2, 1)  # one process: nothing to split
    assert auto_processes(2, 1, cores=2) == 1  # a 2-core host: one worker, the rest for brokers
    assert auto_processes(2, 1, cores=8) == 2
    assert auto_processes(10, 3, cores=8) == 2


def test_recovery_is_never_counted_from_before_the_fault() -> None:
    watch = RecoveryWatch(subscriptions=1)
    watch.tick(_tick(0, 1000, 1000, 0))
    watch.fault("kafka", "start kafka-2", 1_900_000_000)  # late in tick 1 (1.0–2.0 s)
    done = None
    for s in range(1, 8):
        done = done or watch.tick(_tick(s, 1000, 1000, 0))
    assert done is not None and done.recovered_ns == 1_900_000_000
    assert "healthy again 0.0 s after start kafka-2" in done.detail()


@pytest.mark.parametrize("text, expected, shown", [
    ("4s:latency=20ms@redis", Intervention("latency", "redis", at_s=4, latency_ms=20.0, jitter_ms=0.0),
     "latency=20ms@redis"),
    ("4s:latency=0.5s,jitter=800us", Intervention("latency", at_s=4, latency_ms=500.0, jitter_ms=0.8),
     "latency=500ms,jitter=0.8ms"),
    ("5s:latency=50", Intervention("latency", at_s=5, latency_ms=50.0, jitter_ms=0.0), "latency=50ms"),
    ("6s:bandwidth=1MB/s@nats", Intervention("bandwidth", "nats", at_s=6, bandwidth=1e6),
     "bandwidth=1MB/s@nats"),
    ("6s:bandwidth=2MiB/s", Intervention("bandwidth", at_s=6, bandwidth=2.0 * 2**20),
     "bandwidth=2MiB/s"),
    ("6s:bandwidth=1.5MB/s", Intervention("bandwidth", at_s=6, bandwidth=1.5e6), "bandwidth=1.5MB/s"),
    ("6s:bandwidth=1234567B/s", Intervention("bandwidth", at_s=6, bandwidth=1234567.0),
     "bandwidth=1234567B/s"),
    ("7s:partition@redis", Intervention("partition", "redis", at_s=7), "partition@redis"),
    ("8s:reset@redis", Intervention("reset", "redis", at_s=8), "reset@redis"),
    ("9s:heal", Intervention("heal", at_s=9), "heal"),
    ("10s:partition@kafka-2:peers", Intervention("partition", "kafka-2", at_s=10, side="peers"),
     "partition@kafka-2:peers"),
    ("11s:latency=5ms@kafka-leader:clients",
     Intervention("latency", "kafka-leader", at_s=11, latency_ms=5.0, jitter_ms=0.0, side="clients"),
     "latency=5ms@kafka-leader:clients"),
    ("12s:heal@redis:aof", Intervention("heal", "redis:aof", at_s=12), "heal@redis:aof"),
])
def test_network_faults_at_flags(text: str, expected: Intervention, shown: str) -> None:
    item = parse_at(text)
    assert item == expected and item.network and item.describe() == shown
    # as a workload's schedule entry and back
    assert parse_schedule([item.to_schedule()], "w.yaml") == (item,)


@pytest.mark.parametrize("text, fragment", [
    ("1s:latency@redis", "latency needs a value"),
    ("1s:latency=fast", "'fast' is not a delay"),
    ("1s:latency=0ms", "more than 0 ms"),
    ("1s:latency=90s", "at most 60 s"),
    ("1s:latency=20ms,spread=5ms", "latency takes jitter=DELAY"),
    ("1s:bandwidth=10B/s", "from 1KB/s up"),
    ("1s:bandwidth=1Mbit", "not a bandwidth"),
    ("1s:bandwidth=1MB/s,2MB/s", "takes one value"),
    ("1s:partition=3s@redis", "partition takes no value"),
    ("1s:partition@:peers", ":peers follows a target or broker"),
])
def test_bad_network_faults(text: str, fragment: str) -> None:
    with pytest.raises(WorkloadError) as exc:
        parse_at(text)
    assert fragment in str(exc.value) and "\n" not in str(exc.value)


def test_network_faults_need_proxied_targets() -> None:
    labels = ["redis", "kafka"]
    brokers = {"redis": {"redis": "redis"}, "kafka": {"kafka": "kafka-1"}}
    faults = {"redis": ("pause", "latency", "bandwidth", "partition", "reset", "heal"),
              "kafka": ("pause",)}
    check_schedule((parse_at("1s:partition@redis"),), labels, brokers, 30, faults)
    for text in ("1s:partition@kafka", "1s:heal"):  # heal alone names kafka too
        with pytest.raises(WorkloadError) as exc:
            check_schedule((parse_at(text),), labels, brokers, 30, faults)
        assert "kafka's clients do not reach it through a proxy" in str(exc.value)


def test_a_network_fault_names_a_target_a_broker_or_the_leader() -> None:
    """@LABEL: every broker of the target; @kafka-2 (as a broker fault names it): that broker,
    the stack's own name for it in `broker`; @kafka-leader: the one the stack finds leading."""
    labels = ["kafka:brokers=3", "redis"]
    own = ["broker-1", "broker-2", "broker-3"]
    brokers = {"kafka:brokers=3": {**broker_names("kafka", own), **broker_names("kafka:brokers=3", own)},
               "redis": {"redis": "redis"}}
    faults = {"kafka:brokers=3": ("kill", "partition", "heal"), "redis": ("partition", "heal")}

    def scoped(text: str) -> Intervention:
        return network_scope(parse_at(text), labels, brokers, text)

    assert scoped("1s:partition@redis") == parse_at("1s:partition@redis")
    cut = scoped("1s:partition@kafka-2:peers")
    assert (cut.target, cut.broker, cut.side) == ("kafka:brokers=3", "broker-2", "peers")
    assert scoped("1s:partition@kafka-leader").broker == LEADER
    whole = scoped("1s:latency=20ms@kafka:peers")  # the stem of kafka-1 … kafka-3: every broker
    assert (whole.target, whole.broker, whole.side) == ("kafka:brokers=3", None, "peers")
    assert scoped("1s:partition@kafka:brokers=3-leader").target == "kafka:brokers=3"
    check_schedule((parse_at("1s:partition@kafka-3:clients"), parse_at("2s:heal@kafka-3")), labels,
                   brokers, 30, faults)
    with pytest.raises(WorkloadError) as exc:
        check_schedule((parse_at("1s:partition@kafka-4"),), labels, brokers, 30, faults)
    assert "no target or broker 'kafka-4'" in str(exc.value)
    assert "brokers: kafka-1, kafka-2, kafka-3" in str(exc.value)
