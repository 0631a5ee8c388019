"""One time base across nodes (loadgen.clocks): the NTP-style estimate and its bound, the
correction a consumer's node applies to its e2e samples (samples below zero counted, never
dropped), the merge of the nodes' ticks, the warning when the bound is coarse against the
p50, and the figures' way through the run files and back (replay)."""

from __future__ import annotations

import dataclasses
import random
import time

import pyarrow.dataset as ds
import pytest

from analysis.sink import ParquetSink
from loadgen.clocks import (
    CLOCK_EVERY_S,
    STEADY_AFTER,
    STEADY_EVERY_S,
    BoundWatch,
    ClockCadence,
    Exchange,
    estimate,
    shift_wall_clock,
)
from loadgen.core.driver import ReceivedBatch
from loadgen.core.events import RunEvent
from loadgen.core.histogram import HistogramSnapshot, percentiles
from loadgen.core.ticks import NodeClock, NodeStat, Phase, Tick
from loadgen.worker import _merge_ticks
from tests.analysis.test_analysis_sink import _tick
from tests.unit.test_load_control import make_load
from tui.bench.recording import _ticks

MS = 1_000_000


def exchange(true_offset: int, out_ns: int, back_ns: int, serve_ns: int, t1: int) -> Exchange:
    """An exchange over a path taking out_ns there and back_ns back, the node answering
    serve_ns after the request came in, with its clock true_offset ahead."""
    t2 = t1 + out_ns + true_offset
    t3 = t2 + serve_ns
    return Exchange(t1, t2, t3, t3 - true_offset + back_ns)


def test_the_offset_is_ntps_formula_and_the_bound_half_the_delay() -> None:
    e = exchange(200 * MS, out_ns=3 * MS, back_ns=1 * MS, serve_ns=50_000, t1=10**18)
    assert e.delay_ns == 4 * MS  # the node's own time is not the path's
    assert e.offset_ns == 200 * MS + 1 * MS  # the asymmetry's half: the most it can be off
    assert estimate([e]) == (201 * MS, 2 * MS)


def test_the_burst_keeps_its_fastest_exchange_and_the_truth_is_within_its_bound() -> None:
    rng = random.Random(7)
    for _ in range(200):
        true = rng.randint(-10**9, 10**9)
        burst = [exchange(true, rng.randint(10_000, 5 * MS), rng.randint(10_000, 5 * MS),
                          rng.randint(0, 100_000), 10**18 + i * 10**7) for i in range(8)]
        offset, bound = estimate(burst)
        fastest = min(burst, key=lambda e: e.delay_ns)
        assert offset == fastest.offset_ns
        assert bound == -(-fastest.delay_ns // 2)
        assert abs(offset - true) <= bound


def test_bursts_are_spaced_while_the_offset_holds_and_close_again_when_it_moves() -> None:
    """A burst every CLOCK_EVERY_S until the last STEADY_AFTER + 1 bursts found the node's
    clock holding still (no step beyond the bound, no drift that would take it beyond the
    bound over STEADY_EVERY_S), then every STEADY_EVERY_S; one that finds it moving goes back
    to the short cadence. Estimates that wander within their bound are not taken for a
    drift; a clock that drifts within its bound every CLOCK_EVERY_S, but not every
    STEADY_EVERY_S, is."""
    assert STEADY_EVERY_S > CLOCK_EVERY_S and STEADY_AFTER == 3
    cadence = ClockCadence()
    now = [0.0]  # seconds

    def burst(offset_us: float, after_s: float, bound_us: int = 400) -> float:
        now[0] += after_s
        return cadence.next_in(NodeClock("n", round(offset_us * 1000), bound_us * 1000,
                                         round(now[0] * 1e9)))

    assert burst(200_000, 0) == CLOCK_EVERY_S  # the first: nothing to compare with
    # estimates wandering by up to 150 us (as a drift over one 5 s interval, 900 us in
    # 30 s, but the wander does not go on): still, spaced once four bursts say so
    still = [burst(200_000 + d, CLOCK_EVERY_S) for d in (150, -100, 60)]
    assert still == [CLOCK_EVERY_S] * (STEADY_AFTER - 1) + [STEADY_EVERY_S]
    assert burst(200_100, STEADY_EVERY_S) == STEADY_EVERY_S  # the wander goes on: still
    assert burst(200_800, STEADY_EVERY_S) == CLOCK_EVERY_S  # 700 us in 30 s: a step
    assert [burst(200_800 + d, CLOCK_EVERY_S) for d in (-90, 40, -30)] == still
    assert burst(150_000, STEADY_EVERY_S) == CLOCK_EVERY_S  # a clock stepped back
    # drifting 100 us every 5 s: within the bound every 5 s, 600 us in 30 s
    drift = [burst(150_000 + 100 * k, CLOCK_EVERY_S) for k in range(1, 9)]
    assert drift == [CLOCK_EVERY_S] * 8
    # drifting 20 us every 5 s (120 us in 30 s): still
    slow = [burst(151_000 + 20 * k, CLOCK_EVERY_S) for k in range(1, 5)]
    assert slow[-1] == STEADY_EVERY_S


def test_a_nodes_receive_times_are_taken_back_by_its_offset() -> None:
    """A consumer on a node 200 ms ahead: its e2e samples on the coordinator's clock, the
    bound carried, a sample the estimate puts below zero counted and recorded as 0."""
    load, _ = make_load(rate=1, consumers=1)
    load._consumer_specs = [(load.topics[0], "sub-0", 0)]
    clock = NodeClock("node-a", 200 * MS, MS // 2, time.time_ns())
    load.set_clock(clock)
    sent = 10**18
    # received 3 ms and 1 ms after the send, and one 0.3 ms before (only a clock error does it)
    load._count(0, ReceivedBatch(sent + 200 * MS + 3 * MS, [sent, sent + 2 * MS], 10))
    load._count(0, ReceivedBatch(sent + 200 * MS, [sent + 300_000], 5))
    tick = _run_tick(load)
    assert tick.e2e_latency.total == 3  # none dropped
    assert tick.e2e_below_zero == 1
    assert tick.e2e_clock_bound_ns == MS // 2
    assert tick.clocks == (clock,)
    assert tick.e2e_latency.min == 0 and tick.e2e_latency.max == 3 * MS
    assert sorted(percentiles(tick.e2e_latency, [0, 50, 100])) == pytest.approx(
        [0, 1 * MS, 3 * MS], rel=1e-3)
    after = _run_tick(load)  # the interval's counts start again; the estimate stays
    assert (after.e2e_below_zero, after.e2e_clock_bound_ns, after.clocks) == (0, 0, (clock,))


def _run_tick(load) -> Tick:  # type: ignore[no-untyped-def]
    from loadgen.pacing import run_precise

    return run_precise(load.tick(0, time.time_ns(), Phase.MEASURING, 1.0))


def test_the_nodes_ticks_merge_their_clock_figures() -> None:
    a = NodeClock("a", 5 * MS, 300_000, 1)
    b = NodeClock("b", -2 * MS, 700_000, 2)
    na, nb = NodeStat("a", "ha", 10, 0), NodeStat("b", "hb", 0, 10)
    ticks = [_tick(0), _tick(0, e2e_below_zero=2, e2e_clock_bound_ns=300_000, clocks=(a,),
                             nodes=(na,), e2e_latency=_e2e(1.0)),
             _tick(0, e2e_below_zero=1, e2e_clock_bound_ns=700_000, clocks=(b,), nodes=(nb,),
                   e2e_latency=_e2e(3.0, 50))]
    merged = _merge_ticks(ticks)
    assert (merged.e2e_below_zero, merged.e2e_clock_bound_ns, merged.clocks) == (3, 700_000, (a, b))
    # each node keeps its own tick's histograms beside the merged ones
    assert [dataclasses.replace(n, e2e_latency=None, publish_latency=None, publish_delay=None)
            for n in merged.nodes] == [na, nb]
    for node, tick in zip(merged.nodes, ticks[1:], strict=True):
        assert (node.e2e_latency, node.publish_latency, node.publish_delay) == (
            tick.e2e_latency, tick.publish_latency, tick.publish_delay)
    assert merged.e2e_latency.total == 150


def test_the_nodes_histograms_go_to_the_latency_table_beside_the_targets(tmp_path) -> None:  # type: ignore[no-untyped-def]
    nodes = (NodeStat("node-a", "ha", 10, 100, e2e_latency=_e2e(1.0)),
             NodeStat("node-b", "hb", 10, 50, e2e_latency=_e2e(3.0, 50)))
    merged = HistogramSnapshot.merge([n.e2e_latency for n in nodes if n.e2e_latency])
    sink = ParquetSink(tmp_path / "run", "r", rotate_s=60.0)
    sink(_tick(0, e2e_latency=merged, nodes=nodes))
    sink.close()
    rows = ds.dataset(tmp_path / "run" / "latency", format="parquet").to_table().to_pylist()
    e2e = [r for r in rows if r["kind"] == "e2e"]
    by_node = {n: sum(r["count"] for r in e2e if r["node"] == n) for n in (None, "node-a", "node-b")}
    assert by_node == {None: 150, "node-a": 100, "node-b": 50}
    # read back (replay), the target's histogram is the merged one alone
    (tick,) = _ticks(tmp_path / "run")
    assert tick.e2e_latency.total == 150


def _e2e(ms: float, n: int = 100) -> HistogramSnapshot:
    from loadgen.core.histogram import Histogram

    h = Histogram()
    h.record_many([int(ms * MS)] * n)
    return h.snapshot_and_reset()


def test_a_bound_coarse_against_the_p50_is_warned_once_per_spell() -> None:
    said: list[RunEvent] = []
    watch = BoundWatch("redis", said.append, fraction=0.25)
    for bound, p50 in [(100_000, 1.0), (400_000, 1.0), (500_000, 1.0), (0, 1.0),
                       (300_000, 1.0), (300_000, 2.0), (600_000, 2.0)]:
        watch.check(_tick(0, e2e_latency=_e2e(p50), e2e_clock_bound_ns=bound))
    watch.check(_tick(0, e2e_clock_bound_ns=10 * MS))  # no sample: nothing to judge
    assert [e.kind for e in said] == ["clock-bound"] * 3
    assert said[0].detail.startswith("the nodes' clock error bound ±0.400 ms is 40 % of the e2e "
                                     "p50 (1.000 ms; warned above 25 %)")


def test_the_node_figures_go_through_the_run_files_and_back(tmp_path) -> None:  # type: ignore[no-untyped-def]
    clocks = (NodeClock("node-a", 200 * MS, 812_345, 1_700_000_000_123_456_000),
              NodeClock("node-b", -1_234, 345_678, 1_700_000_000_654_321_000))
    nodes = (NodeStat("node-a", "host-a", 6, 4, 12.5, 0.25, 81_920_000, ""),
             NodeStat("node-b", "host-b", 4, 6, 95.0, 61.0, 90_112_000,
                      "worker CPU 95% on node node-b (host-b)"))
    sink = ParquetSink(tmp_path / "run", "r", rotate_s=60.0)
    sink(_tick(0, e2e_below_zero=4, e2e_clock_bound_ns=812_345, clocks=clocks, nodes=nodes))
    sink(_tick(1))  # a local tick: no node
    sink.close()
    table = ds.dataset(tmp_path / "run" / "nodes", format="parquet").to_table().to_pydict()
    assert table["node"] == ["node-a", "node-b"] and table["host"] == ["host-a", "host-b"]
    assert table["clock_offset_ns"] == [200 * MS, -1_234] and table["seq"] == [0, 0]
    assert table["produced"] == [6, 4] and table["memory_bytes"] == [81_920_000, 90_112_000]
    ticks = _ticks(tmp_path / "run")
    assert [t.e2e_below_zero for t in ticks] == [4, 0]
    assert [t.e2e_clock_bound_ns for t in ticks] == [812_345, 0]
    assert ticks[0].clocks == clocks and ticks[1].clocks == ()
    assert ticks[0].nodes == nodes and ticks[1].nodes == ()


def test_the_test_hook_shifts_this_processs_wall_clock() -> None:
    original = (time.time_ns, time.time)
    try:
        before = time.time_ns()
        shift_wall_clock(200.0)
        shifted = time.time_ns()
        assert 200 * MS <= shifted - before < 300 * MS
        assert abs(time.time() * 1e9 - time.time_ns()) < 10 * MS
    finally:
        time.time_ns, time.time = original
    assert abs(time.time_ns() - before) < 100 * MS


def test_the_detail_screen_lists_each_node_and_the_worst_bound() -> None:
    from tui.detail import clock_lines
    from tui.history import TargetHistory

    history = TargetHistory("redis")
    history.add(_tick(0))
    assert clock_lines(history) == []  # the local placement: nothing to say
    node = "0123456789abcdef"
    history.add(_tick(1, e2e_below_zero=3, e2e_clock_bound_ns=812_345,
                      clocks=(NodeClock(node, 200_045_000, 812_345, 1),),
                      nodes=(NodeStat(node, "host-b", 1000, 0),)))
    history.add(_tick(2, e2e_clock_bound_ns=400_000, interval_s=0.5,
                      clocks=(NodeClock(node, 200_044_000, 400_000, 2),),
                      nodes=(NodeStat(node, "host-b", 1000, 500, 97.0, 3.0, 50_000_000,
                                      "worker CPU 97% on node 0123456789ab (host-b)"),)))
    text = "\n".join(line.plain for line in clock_lines(history))
    assert "worst bound ±0.812 ms, 3 sample(s) below zero (counted as 0)" in text
    (row,) = [line for line in text.splitlines() if line.strip().startswith("0123456789ab")]
    assert row.split()[:4] == ["0123456789ab", "host-b", "2,000", "1,000"]  # per second
    assert "+200.044" in row and "±0.400" in row and "worker CPU 97% on node" in row


def test_node_resource_is_name_equals_a_positive_number() -> None:
    import argparse

    from tui.bench.parser import _node_resource

    assert _node_resource("streambench=1") == ("streambench", 1.0)
    assert _node_resource(" gpu = 0.5") == ("gpu", 0.5)
    for bad in ("streambench", "=1", "streambench=0", "streambench=x"):
        with pytest.raises(argparse.ArgumentTypeError):
            _node_resource(bad)


@pytest.mark.parametrize(("option", "error"), [
    (["--node-resource", "streambench=1"], "--nodes, --placement, --node-resource, "
                                           "--split-roles and --tick-group choose nodes of a "
                                           "--cluster"),
    (["--tick-group", "2"], "--nodes, --placement, --node-resource, --split-roles and "
                            "--tick-group choose nodes of a --cluster"),
    (["--same-node-latency"], "--same-node-latency times the messages of a --cluster's nodes: "
                              "it needs --cluster"),
])
def test_a_node_option_without_a_cluster_is_one_line_and_exit_2(tmp_path, option,  # type: ignore[no-untyped-def]
                                                                 error) -> None:
    from tests.conftest import run_cli

    res = run_cli(["run", "redis@127.0.0.1:1", "--headless", "--duration", "2", *option,
                   "--out", str(tmp_path / "run")])
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [f"streambench: error: {error}"]
    assert not (tmp_path / "run").exists()


def test_a_saturated_node_is_named_in_the_tick_and_the_warning() -> None:
    from loadgen.core.ticks import LoadgenHealth

    load, published = make_load(rate=1)
    load.node = ("abcdef0123456789", "host-b")
    load._watch.reading = lambda loaded: LoadgenHealth(95.0, 1.0, "worker CPU 95%")  # type: ignore[method-assign]
    tick = _run_tick(load)
    assert tick.loadgen.saturated == "worker CPU 95% on node abcdef012345 (host-b)"
    assert tick.nodes[0].saturated == tick.loadgen.saturated
    (said,) = [e for e in published if isinstance(e, RunEvent)]
    assert said.kind == "loadgen-saturated"
    assert said.detail == ("worker CPU 95% on node abcdef012345 (host-b): figures describe the "
                           "load generator, not the broker; add --nodes or lower the rate")


def test_late_node_ticks_are_said_and_go_through_the_run_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from loadgen.status import status_line
    from tui.detail import clock_lines
    from tui.history import TargetHistory

    sink = ParquetSink(tmp_path / "run", "r", rotate_s=60.0)
    sink(_tick(0, nodes_late=1))
    sink(_tick(1, nodes_late_counted=1))
    sink(_tick(2))
    sink.close()
    ticks = _ticks(tmp_path / "run")
    assert [(t.nodes_late, t.nodes_late_counted) for t in ticks] == [(1, 0), (0, 1), (0, 0)]
    assert "| 1 node(s) late, counted in a later tick" in status_line(ticks[0])
    assert "| 1 node(s) late before, counted here" in status_line(ticks[1])
    assert "node(s)" not in status_line(ticks[2])
    history = TargetHistory("redis")
    history.add(ticks[0])
    text = "\n".join(line.plain for line in clock_lines(history))
    assert "load nodes at the last tick: 1 node(s) late, counted in a later tick" in text


def test_the_end_summary_says_same_node_latency() -> None:
    from tui.bench.endsummary import SAME_NODE_LATENCY, placement_lines

    placement = {"address": "127.0.0.1:6379", "ray_version": "2.60.0", "nodes": 2,
                 "strategy": "spread", "workers": []}
    assert SAME_NODE_LATENCY not in placement_lines(placement)
    lines = placement_lines({**placement, "same_node_latency": True})
    assert SAME_NODE_LATENCY in lines and "--same-node-latency" in SAME_NODE_LATENCY
