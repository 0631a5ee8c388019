"""The Prometheus collector of a run (loadgen/exporter.py) on made-up ticks and events, read
back with prometheus_client's own exposition and parser; docs/metrics.md lists what it serves."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.core.errors import WorkloadError
from loadgen.core.events import PhaseChange, RunEvent, RunMeta
from loadgen.core.histogram import Histogram
from loadgen.core.ticks import (
    BrokerMetricValues,
    LagSnapshot,
    LagStatus,
    LoadgenHealth,
    Phase,
    Resources,
    Tick,
    TimeLag,
)
from loadgen.exporter import LATENCY_BOUNDS_S, RunCollector, parse_address
from loadgen.load import DROPPED_SLOTS
from loadgen.platforms import PLATFORMS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def snapshot(values_ns: list[int]):
    h = Histogram()
    h.record_many(values_ns)
    return h.snapshot_and_reset()


def tick(seq: int, produced: int, e2e_ns: list[int], phase: Phase = Phase.MEASURING) -> Tick:
    return Tick(target="redis", seq=seq, time_ns=seq * 10**9, interval_s=1.0, phase=phase,
                elapsed_s=float(seq), produced=produced, produced_bytes=produced * 100,
                consumed=produced - 1, consumed_bytes=(produced - 1) * 100, send_errors=seq,
                target_rate=1000.0, publish_latency=snapshot([1000] * produced),
                publish_delay=snapshot([]), e2e_latency=snapshot(e2e_ns),
                lag=LagSnapshot(total=50), resources=Resources(cpu_percent=25.0, memory_bytes=4096,
                                                                net_rx_bytes=7),
                loadgen=LoadgenHealth(cpu_percent=12.5, loop_lag_ms=3.0))


def scrape(collector: RunCollector) -> dict[tuple[str, frozenset], float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def one(found: dict, name: str, **labels: str) -> float:
    (v,) = [v for (n, ls), v in found.items() if n == name and labels.items() <= dict(ls).items()]
    return v


@pytest.mark.parametrize("text, expected", [
    ("9464", ("127.0.0.1", 9464)), ("localhost:80", ("127.0.0.1", 80)),
    ("0.0.0.0:9464", ("0.0.0.0", 9464)), ("[::1]:9464", ("::1", 9464)),
    ("::1:9464", ("::1", 9464))])
def test_addresses(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["", "x", "9464x", "0", "65536", "host:9464", "1.2.3:9", ":"])
def test_bad_addresses_are_refused_in_one_line(text: str) -> None:
    with pytest.raises(WorkloadError) as err:
        parse_address(text)
    assert "\n" not in str(err.value)


def test_counters_gauges_and_histograms_from_the_ticks() -> None:
    c = RunCollector({"redis": "redis"}, "run-1")
    c(PhaseChange(Phase.WARMUP, 10**9))
    e2e_a = [500, 1_500_000, 3_000_000]
    e2e_b = [900_000, 25_000_000_000, 250_000_000_000]  # 25 s; 250 s is above every bound
    c(tick(1, 10, e2e_a, Phase.WARMUP))
    c(PhaseChange(Phase.MEASURING, 2 * 10**9))
    c(tick(2, 20, e2e_b))
    c(RunEvent(3, "redis", "rate", f"1,000 -> 2,000 msg/s; 1,234 {DROPPED_SLOTS}"))
    c(RunEvent(4, "redis", "rate", "2,000 -> 500 msg/s"))
    c(RunEvent(5, "", "hangup", "the terminal hung up"))
    found = scrape(c)
    target = {"target": "redis", "platform": "redis"}
    assert one(found, "streambench_produced_messages_total", **target) == 30
    assert one(found, "streambench_produced_bytes_total", **target) == 3000
    assert one(found, "streambench_consumed_messages_total", **target) == 28
    assert one(found, "streambench_send_errors_total", **target) == 3
    assert one(found, "streambench_broker_network_receive_bytes_total", **target) == 14
    assert one(found, "streambench_dropped_slots_total", **target) == 1234
    assert one(found, "streambench_events_total", kind="rate", **target) == 2
    assert one(found, "streambench_events_total", kind="hangup", target="") == 1
    assert one(found, "streambench_last_event_info", kind="rate",
               detail="2,000 -> 500 msg/s", **target) == 1
    assert one(found, "streambench_broker_cpu_ratio", **target) == 0.25
    assert one(found, "streambench_loadgen_cpu_ratio", **target) == 0.125
    assert one(found, "streambench_loadgen_loop_lag_seconds", **target) == 0.003
    assert one(found, "streambench_lag_messages", **target) == 50
    assert one(found, "streambench_lag_seconds", **target) == pytest.approx(50 / 19)
    assert one(found, "streambench_lag_seconds_estimated", **target) == 1  # no positions
    assert one(found, "streambench_phase", phase="measuring") == 1
    assert one(found, "streambench_phase", phase="warm-up") == 0
    assert one(found, "streambench_phase_start_time_seconds", phase="measuring") == 2.0
    assert one(found, "streambench_run_info", run_id="run-1") == 1
    # the e2e histogram: the two ticks' samples, each bucket the samples at most its bound
    samples = np.array(e2e_a + e2e_b)
    name = "streambench_end_to_end_latency_seconds"
    assert one(found, f"{name}_count") == len(samples)
    assert one(found, f"{name}_sum") == pytest.approx(samples.sum() / 1e9)
    for bound in LATENCY_BOUNDS_S:
        le = next(dict(ls)["le"] for (n, ls) in found if n == f"{name}_bucket"
                  and float(dict(ls)["le"]) == bound)
        assert one(found, f"{name}_bucket", le=le) == (samples <= bound * 1e9).sum(), bound
    assert one(found, f"{name}_bucket", le="+Inf") == len(samples)
    assert one(found, "streambench_publish_latency_seconds_count") == 30
    assert one(found, "streambench_publish_delay_seconds_count") == 0
    assert not [n for n, _ in found if n.startswith("streambench_delivery_audit")]
    # the delivery audit's verdict, from run.json's totals at the end
    c(RunMeta({"run_id": "run-1", "totals": [{"label": "redis", "audit": {
        "lost": 2, "unexpected": 1, "duplicated": 0, "reordered": 3, "unseen": 0}}]}))
    found = scrape(c)
    assert {dict(ls)["category"]: v for (n, ls), v in found.items()
            if n == "streambench_delivery_audit_messages_total"} == {
        "lost": 2, "unexpected": 1, "duplicated": 0, "reordered": 3, "unseen": 0}


def declared_metrics() -> dict[str, BrokerMetricValues]:
    """Per platform that declares broker metrics: every one of them, at 1.0."""
    return {name: BrokerMetricValues({"b-1": {m.name: 1.0 for m in trait.metrics}})
            for name in PLATFORMS if (trait := PLATFORMS[name].broker_metrics) is not None}


def test_broker_metrics_a_family_each_and_stale_brokers_left_out() -> None:
    """A family per metric name, labelled by target, platform and broker; a counter for a
    name ending in _total; a stale broker's values are not served, its stale gauge is 1."""
    c = RunCollector({"redis": "redis"})
    c(dataclasses.replace(tick(1, 5, [1000]), broker_metrics=BrokerMetricValues(
        {"redis": {"ops_per_second": 4100.0, "xadd_time_seconds": 7e-6,
                   "aof_delayed_fsync_total": 2.0}})))
    found = scrape(c)
    labels = {"target": "redis", "platform": "redis", "broker": "redis"}
    assert one(found, "streambench_broker_ops_per_second", **labels) == 4100.0
    assert one(found, "streambench_broker_xadd_time_seconds", **labels) == 7e-6
    assert one(found, "streambench_broker_aof_delayed_fsync_total", **labels) == 2.0
    assert one(found, "streambench_broker_metrics_stale", **labels) == 0.0
    c(dataclasses.replace(tick(2, 5, [1000]), broker_metrics=BrokerMetricValues(
        {"redis": {"ops_per_second": 4100.0}}, stale=("redis",), problem="TimeoutError")))
    found = scrape(c)
    assert one(found, "streambench_broker_metrics_stale", **labels) == 1.0
    assert not [n for n, _ in found if n.startswith("streambench_broker_ops")]


def test_the_exact_time_lag_its_drain_and_the_status_words() -> None:
    c = RunCollector({"redis": "redis"})
    exact = TimeLag(seconds=4.5, per_partition={0: 4.5}, per_subscription={"sub-0": 4.5},
                    drain_s=math.inf, status={"sub-0": LagStatus.STOP})
    c(dataclasses.replace(tick(1, 5, [1000]), lag=LagSnapshot(total=50, time=exact)))
    found = scrape(c)
    target = {"target": "redis", "platform": "redis"}
    assert one(found, "streambench_lag_seconds", **target) == 4.5  # not 50 / 4
    assert one(found, "streambench_lag_seconds_estimated", **target) == 0
    assert one(found, "streambench_lag_drain_seconds", **target) == math.inf
    words = {dict(ls)["status"]: v for (n, ls), v in found.items()
             if n == "streambench_subscription_status" and dict(ls)["subscription"] == "sub-0"}
    assert words == {"OK": 0, "WARN": 0, "STALL": 0, "STOP": 1}


def test_the_docs_list_every_served_metric_and_no_other() -> None:
    declared = declared_metrics()
    c = RunCollector({"redis": "redis", **{f"t-{p}": p for p in declared}})
    c(tick(1, 5, [1000]))
    for platform, values in declared.items():
        c(dataclasses.replace(tick(1, 5, [1000]), target=f"t-{platform}", broker_metrics=values))
    c(RunEvent(1, "redis", "rate", "x"))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(c)
    served = set()
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        suffix = {"counter": "_total", "info": "_info"}.get(family.type, "")
        served.add(family.name + suffix)
    documented = set(re.findall(r"^\| `(streambench_\w+)` \|", DOCS.read_text(), re.MULTILINE))
    assert served == documented


def test_the_launcher_passes_metrics_on_to_its_runs() -> None:
    """`streambench run --metrics 9464` without targets opens the launcher, which hands its
    runs the options as text: the address reads back as it was given."""
    from tui.bench.parser import build_parser
    from tui.launcher import LaunchSettings

    args = build_parser().parse_args(["run", "--metrics", "9464"])
    argv = LaunchSettings.from_args(args).argv()
    assert argv[argv.index("--metrics") + 1] == "127.0.0.1:9464"
    again = build_parser().parse_args([*argv, "redis"])
    assert again.metrics == ("127.0.0.1", 9464)
    assert str(parse_address("[::1]:80")) == "[::1]:80"


def test_the_docs_name_each_broker_metric_as_the_broker_does() -> None:
    """Each platform's table in docs/metrics.md (its `### NAME` section): the broker's own
    name beside each metric, and no other metric (platforms share a name where the figure is
    the same, each with its broker's own name for it)."""
    sections = {name: text for heading, text in
                re.findall(r"^### ([^\n]+)\n(.*?)(?=^##|\Z)", DOCS.read_text(), re.MULTILINE | re.DOTALL)
                for name in heading.split(" and ")}  # `### kafka and kafka-zk`: one table
    for name in PLATFORMS:
        trait = PLATFORMS[name].broker_metrics
        if trait is None:
            continue
        rows = dict(re.findall(r"^\| `streambench_broker_(\w+)` \| \w+ \| [\w ]* \| `([^`]+)` \|",
                               sections.get(name, ""), re.MULTILINE))
        assert rows == {m.name: m.native for m in trait.metrics}, name
