"""Synthetic runs written through the real ParquetSink, with the truth kept for comparison.

A run can be steered as a real one is: `SyntheticEvent`s (rate changes, producers and consumers
stopped and started, faults, recoveries, …) are written to the events table at chosen times of
the measuring phase, and a target's model can change its rate, latency and consumption by
measuring second, so the figures of each segment are known."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from analysis.schema import LATENCY_KINDS
from analysis.sink import ParquetSink, RawSamples, write_run_json
from loadgen.core.events import PhaseChange, RunEvent
from loadgen.core.histogram import Histogram, HistogramSnapshot
from loadgen.core.ticks import LagSnapshot, NodeClock, NodeStat, Phase, Resources, Tick

T0_NS = 1_767_225_600_123_456_789  # 2026-01-01T00:00:00.123456789Z
MESSAGE_SIZE = 1000


class FakeClock:
    """Monotonic clock the tests advance by hand, so rotations are deterministic."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class TargetModel:
    """How a synthetic target behaves during the measuring phase."""

    mb_s: Callable[[float], float]  # true produce MB/s at elapsed minutes
    noise_mb_s: float = 0.5
    e2e_median_ns: float = 2e6
    publish_median_ns: float = 5e5
    cpu: float = 120.0
    memory_bytes: int = 800_000_000
    memory_growth_mb_min: float = 0.0  # true memory slope
    lag_growth_per_min: float = 0.0  # true slope of the summed lag
    net_factor: float = 0.0  # broker network bytes per payload byte; 0: not reported
    config: dict[str, Any] = field(default_factory=dict)  # run.json targets[].config
    # by measuring second k (0, 1, …): produce MB/s (instead of mb_s), the target rate the
    # ticks record, a factor on the latency samples and on the consumed count
    measuring_mb_s: Callable[[int], float] | None = None
    target_rate: Callable[[int], float] = lambda k: 0.0
    latency_factor: Callable[[int], float] = lambda k: 1.0
    consume_factor: Callable[[int], float] = lambda k: 1.0


@dataclass(frozen=True)
class SyntheticEvent:
    """An event at `at_s` seconds from the start of the measuring phase (negative: warm-up;
    past its end: the drain). Measuring second k is the tick with seq = warm-up seconds + k,
    which spans [k, k + 1) on this scale, so an event at 10.3 s happens in measuring second 10."""

    at_s: float
    target: str  # "" for a run-wide event
    kind: str
    detail: str


@dataclass
class SyntheticRun:
    """What was fed into the sink, kept for comparison with what the report says."""

    run_dir: Path
    run_id: str
    warmup_s: int = 0
    ticks: list[Tick] = field(default_factory=list)
    events: list[RunEvent] = field(default_factory=list)  # the SyntheticEvents as written
    # measuring-phase raw samples by target and kind
    raw: dict[str, dict[str, list[npt.NDArray[np.int64]]]] = field(default_factory=dict)
    # on a cluster: each node's e2e samples of the measuring phase (its share of raw's)
    node_e2e: dict[str, list[npt.NDArray[np.int64]]] = field(default_factory=dict)

    def raw_values(self, target: str, kind: str) -> npt.NDArray[np.int64]:
        return np.concatenate(self.raw[target][kind])

    def measuring(self, target: str) -> list[Tick]:
        return [t for t in self.ticks if t.target == target and t.phase == Phase.MEASURING]

    def raw_of(self, target: str, kind: str, first: int, last: int) -> npt.NDArray[np.int64]:
        """The samples of measuring seconds first … last (inclusive)."""
        return np.concatenate(self.raw[target][kind][first:last + 1])

    def measuring_start_us(self, target: str) -> int:
        """Where the report puts the start of the measuring phase: the first measuring tick's
        end less its interval, in µs."""
        first = min(self.measuring(target), key=lambda t: t.seq)
        return first.time_ns // 1000 - round(first.interval_s * 1e6)


def _samples(rng: np.random.Generator, kind: str, model: TargetModel, n: int,
             scale: float) -> npt.NDArray[np.int64]:
    if kind == "e2e":
        v = rng.lognormal(np.log(model.e2e_median_ns), 0.6, n)
    elif kind == "publish":
        v = rng.lognormal(np.log(model.publish_median_ns), 0.4, n)
    else:  # publish delay: many small values, some in the exact-bucket range
        v = rng.exponential(3000.0, n)
    return np.rint(v * scale).astype(np.int64)


def _node_shares(e2e: npt.NDArray[np.int64], k: int) -> list[npt.NDArray[np.int64]]:
    """A tick's e2e samples dealt over k nodes in order of size, the lowest to node 0."""
    return np.array_split(np.sort(e2e), k) if k else []


def _snapshot(values: npt.NDArray[np.int64]) -> HistogramSnapshot:
    hist = Histogram()
    hist.record_many(values.tolist())
    return hist.snapshot_and_reset()


def _cluster_fields(nodes: Sequence[str], seq: int, time_ns: int, produced: int,
                    consumed: int, e2e: npt.NDArray[np.int64]) -> dict[str, Any]:
    """A tick's figures on a Ray cluster of `nodes`: the counts dealt over them (the first
    takes the remainder), node i's clock i ms ahead with a bound growing with seq, one e2e
    sample below zero every 10 ticks, the last node lost from tick 40 on; the tick's e2e
    samples dealt in order of size, the lowest to node 0 (each node's own histogram)."""
    if not nodes:
        return {}
    alive = list(nodes[:-1]) if seq >= 40 and len(nodes) > 1 else list(nodes)
    k = len(alive)
    share = [(produced // k + (produced % k if i == 0 else 0),
              consumed // k + (consumed % k if i == 0 else 0)) for i in range(k)]
    parts = _node_shares(e2e, k)
    return {
        "nodes": tuple(NodeStat(n, f"host-{i}", p, c, 10.0 + i, 1.0 + i, (100 + i) * 10**6,
                                "worker CPU 95%" if seq % 20 == 5 else "",
                                e2e_latency=_snapshot(parts[i]))
                       for i, (n, (p, c)) in enumerate(zip(alive, share, strict=True))),
        "clocks": tuple(NodeClock(n, i * 10**6 + seq, 300_000 + seq * 1000, time_ns)
                        for i, n in enumerate(alive)),
        "e2e_below_zero": int(seq % 10 == 0),
        "nodes_lost": len(nodes) - k,
    }


def write_synthetic_run(
    run_dir: Path,
    run_id: str,
    targets: dict[str, TargetModel],
    *,
    warmup_s: int = 5,
    measuring_s: int = 60,
    draining_s: int = 3,
    samples_per_tick: int = 1000,
    seed: int = 7,
    rotate_s: float = 5.0,
    raw: bool = True,
    write_meta: bool = True,
    close: bool = True,
    events: Sequence[SyntheticEvent] = (),
    ended: bool | None = None,
    stopped_early: bool = False,
    drained: Mapping[str, bool] | None = None,
    nodes: Sequence[str] = (),
) -> SyntheticRun:
    """Feed one tick per target per second through a real ParquetSink and close it (or, with
    close=False, leave it as a killed process would: the last rows never written).

    run.json records an end (`ended`, `stopped_early`, `totals`) when `ended` is true (by
    default: when the sink is closed); `drained` gives targets' `totals[].drained` (default
    true)."""
    rng = np.random.default_rng(seed)
    clock = FakeClock()
    sink = ParquetSink(run_dir, run_id, rotate_s=rotate_s, raw=raw, clock=clock)
    run = SyntheticRun(run_dir=run_dir, run_id=run_id, warmup_s=warmup_s)
    measuring_start_ns = T0_NS + (warmup_s - 1) * 1_000_000_000
    waiting = sorted(
        (RunEvent(measuring_start_ns + round(e.at_s * 1e9), e.target, e.kind, e.detail)
         for e in events),
        key=lambda e: e.time_ns,
    )
    phases = (
        [Phase.WARMUP] * warmup_s + [Phase.MEASURING] * measuring_s + [Phase.DRAINING] * draining_s
    )
    hists = {kind: Histogram() for kind in LATENCY_KINDS}
    current: Phase | None = None
    totals = {name: [0, 0] for name in targets}
    elapsed = {name: 0.0 for name in targets}
    for seq, phase in enumerate(phases):
        if phase != current:
            sink(PhaseChange(phase, T0_NS + seq * 1_000_000_000, f"entering {phase.value}"))
            current = phase
        if seq == warmup_s + measuring_s // 2:
            sink(RunEvent(T0_NS + seq * 1_000_000_000 + 5, "", "fault", "pause broker 1 s"))
        while waiting and waiting[0].time_ns < T0_NS + seq * 1_000_000_000:
            run.events.append(waiting.pop(0))
            sink(run.events[-1])
        k = seq - warmup_s  # the measuring second
        for name, model in targets.items():
            interval = float(1.0 + rng.uniform(-0.02, 0.02))
            elapsed[name] += interval
            time_ns = T0_NS + seq * 1_000_000_000 + int(rng.integers(0, 1000))
            minutes = elapsed[name] / 60.0
            # warm-up and draining run at a visibly different rate and latency, so a report
            # that does not keep to the measuring phase fails the comparisons
            measuring = phase == Phase.MEASURING
            scale = model.latency_factor(k) if measuring else 10.0
            base = (model.measuring_mb_s(k) if measuring and model.measuring_mb_s is not None
                    else model.mb_s(minutes))
            mb_s = base + rng.normal(0.0, model.noise_mb_s)
            if not measuring:
                mb_s *= 0.3
            produced = max(round(mb_s * 1e6 * interval / MESSAGE_SIZE), 0)
            consumed = max(round(produced * (model.consume_factor(k) if measuring else 1.0))
                           - int(rng.integers(0, 50)), 0)
            totals[name][0] += produced
            totals[name][1] += consumed
            snaps = {}
            drawn = {}
            for kind in LATENCY_KINDS:
                values = drawn[kind] = _samples(rng, kind, model, samples_per_tick, scale)
                hists[kind].record_many(values.tolist())
                snaps[kind] = hists[kind].snapshot_and_reset()
                if phase == Phase.MEASURING:
                    run.raw.setdefault(name, {}).setdefault(kind, []).append(values)
                sink(RawSamples(name, seq, time_ns, phase, kind, values))
            growth = model.lag_growth_per_min * minutes / 3
            lag = {p: int(rng.integers(0, 200) + growth) for p in range(3)}
            memory = model.memory_bytes + model.memory_growth_mb_min * minutes * 1e6
            tick = Tick(
                target=name,
                seq=seq,
                time_ns=time_ns,
                interval_s=interval,
                phase=phase,
                elapsed_s=elapsed[name],
                produced=produced,
                produced_bytes=produced * MESSAGE_SIZE,
                consumed=consumed,
                consumed_bytes=consumed * MESSAGE_SIZE,
                send_errors=int(seq % 10 == 3),
                target_rate=model.target_rate(k) if measuring else 0.0,
                publish_latency=snaps["publish"],
                publish_delay=snaps["delay"],
                e2e_latency=snaps["e2e"],
                lag=LagSnapshot(sum(lag.values()), lag, "test lag"),
                resources=Resources(
                    cpu_percent=model.cpu + float(rng.normal(0.0, 5.0)),
                    memory_bytes=int(memory) + int(rng.integers(0, 10_000_000)),
                    disk_write_bytes=produced * MESSAGE_SIZE,
                    net_rx_bytes=round(produced * MESSAGE_SIZE * model.net_factor),
                    net_tx_bytes=round(consumed * MESSAGE_SIZE * model.net_factor * 2),
                ),
                broker={"bytes_in": float(produced * MESSAGE_SIZE), "requests": 42.0},
                produced_total=totals[name][0],
                consumed_total=totals[name][1],
                **_cluster_fields(nodes, seq, time_ns, produced, consumed, drawn["e2e"]),
            )
            run.ticks.append(tick)
            if phase == Phase.MEASURING:
                for node, part in zip(tick.nodes, _node_shares(drawn["e2e"], len(tick.nodes)),
                                      strict=True):
                    run.node_e2e.setdefault(node.node, []).append(part)
            sink(tick)
        clock.now += 1.0
    for event in waiting:  # the rest happened during the drain
        run.events.append(event)
        sink(event)
    if close:
        sink(PhaseChange(Phase.DONE, T0_NS + len(phases) * 1_000_000_000))
        sink.close()
    else:
        sink.wait()  # the rotated files reached the disk; the buffered rows never will
    if write_meta:
        meta: dict[str, Any] = {
            "run_id": run_id,
            "started": "2026-01-01T00:00:00+00:00",
            "workload": {
                "name": "synthetic",
                "messageSize": MESSAGE_SIZE,
                "partitionsPerTopic": 3,
                "subscriptionsPerTopic": 1,
                "producerRate": 0,
            },
            "targets": [{"label": name, "platform": "synthetic", "config": m.config}
                        for name, m in targets.items()],
        }
        records_end = close if ended is None else ended
        if records_end:
            meta.update(
                ended="2026-01-01T01:00:00+00:00",
                stopped_early=stopped_early,
                measured_ticks=measuring_s,
                totals=[_totals(run, name, (drained or {}).get(name, True)) for name in targets],
            )
        write_run_json(run_dir, meta)
    return run


def _totals(run: SyntheticRun, target: str, drained: bool) -> dict[str, Any]:
    """A target's totals entry of run.json, as the run loop writes it at the end."""
    ticks = [t for t in run.ticks if t.target == target]
    produced = sum(t.produced for t in ticks)
    consumed = sum(t.consumed for t in ticks)
    return {"label": target, "produced": produced, "consumed": consumed,
            "send_errors": sum(t.send_errors for t in ticks), "receive_errors": 0,
            "duplicates": 0, "expected": produced, "final_lag": 0 if drained else 1234,
            "drained": drained}
