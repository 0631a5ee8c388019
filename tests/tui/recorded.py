"""Fixed recorded data for dashboard tests: two targets, thirty one-second ticks each, with
real latency histograms built from deterministic values."""

from __future__ import annotations

from pathlib import Path

from analysis.sink import ParquetSink
from loadgen.core.events import PhaseChange, RunEvent, RunMeta
from loadgen.core.histogram import Histogram, HistogramSnapshot
from loadgen.core.ticks import (
    BrokerMetricValues,
    ConsumerStat,
    LagSnapshot,
    LagStatus,
    LoadgenHealth,
    Phase,
    Resources,
    Tick,
    TimeLag,
)
from loadgen.core.workload import Workload

T0_NS = 1_800_000_000_000_000_000  # fixed wall clock of the first tick
LABELS = ["redis", "redis:aof"]
WORKLOAD = Workload(name="recorded", rate=5000, message_size=1024, duration_s=60, warmup_s=10)
TICKS = 30
WARMUP_TICKS = 10


def histogram(values_us: list[int]) -> HistogramSnapshot:
    hist = Histogram()
    hist.record_many([v * 1000 for v in values_us])
    return hist.snapshot_and_reset()


def latency_values(seq: int, slow: int) -> list[int]:
    """200 latencies in µs: mostly 0.8-2.4 ms, a tail that grows with `slow`."""
    body = [800 + (i * 37 + seq * 11) % 1600 for i in range(196)]
    tail = [6000 + slow * 150 + seq * 40, 9000 + slow * 300, 15000 + slow * 500, 21000 + slow * 700]
    return body + tail


STALE_TICKS = range(22, 25)  # the aof target's server does not answer its INFO in these


def broker_metrics(aof: bool, seq: int) -> BrokerMetricValues:
    """Redis's INFO figures as the metrics collector gives them; the aof target's server
    paused for three ticks (its last values read, stale)."""
    stale = aof and seq in STALE_TICKS
    read = STALE_TICKS.start - 1 if stale else seq
    values = {"ops_per_second": 10_000.0 + (read % 5) * 40,
              "xadd_time_seconds": (6 + (read * 7) % 11 + (25 if aof and read > 18 else 0)) * 1e-6,
              "used_memory_bytes": (30 + read) * 1e6, "mem_fragmentation_ratio": 1.25,
              "connected_clients": 5.0, "blocked_clients": float(read % 2),
              "aof_rewrite_in_progress": float(aof and 19 <= read <= 21)}
    if aof:
        values["aof_delayed_fsync_total"] = float(read // 10)
    return BrokerMetricValues({"redis": values}, ("redis",) if stale else (),
                              "TimeoutError: no answer within 0.9 s" if stale else "")


def time_lag(seq: int) -> TimeLag:
    """The age of the oldest unread message: 20-44 ms, partition 1 read up."""
    seconds = ((seq * 37) % 120) / 5000 + 0.02
    return TimeLag(seconds=seconds, per_partition={0: seconds, 1: 0.0},
                   per_subscription={"streambench-sub-0": seconds}, bound_s=0.01,
                   trend=0.001 * (seq % 3 - 1), drain_s=0.0,
                   status={"streambench-sub-0": LagStatus.WARN if seq % 7 == 0 else LagStatus.OK})


def recorded_tick(label: str, seq: int) -> Tick:
    aof = label.endswith(":aof")
    slow = seq + (12 if aof else 0)
    produced = 5000 - (seq % 4) * 3 - (400 if aof and seq > 20 else 0)
    consumed = produced - 2 + seq % 5
    return Tick(
        target=label,
        seq=seq,
        time_ns=T0_NS + (seq + 1) * 1_000_000_000,
        interval_s=1.0,
        phase=Phase.WARMUP if seq < WARMUP_TICKS else Phase.MEASURING,
        elapsed_s=float(seq + 1),
        produced=produced,
        produced_bytes=produced * WORKLOAD.message_size,
        consumed=consumed,
        consumed_bytes=consumed * WORKLOAD.message_size,
        send_errors=3 if aof and seq == 25 else 0,
        target_rate=WORKLOAD.rate,
        publish_latency=histogram([200 + (i * 13) % 500 for i in range(100)] + [1500 + slow * 20]),
        publish_delay=histogram([5 + i % 20 for i in range(100)]),
        e2e_latency=histogram(latency_values(seq, slow)),
        lag=LagSnapshot(total=(seq * 37) % 120 + (200 if aof else 0),
                        per_partition={0: (seq * 37) % 120, 1: 200 if aof else 0},
                        # the exact time lag for one target, the estimate for the other
                        time=None if aof else time_lag(seq)),
        resources=Resources(cpu_percent=18.0 + (seq % 7) * 2.5 + (15.0 if aof else 0.0),
                            memory_bytes=(40 + seq) * 1_000_000),
        produced_total=produced * (seq + 1),
        consumed_total=consumed * (seq + 1),
        loadgen=LoadgenHealth(cpu_percent=11.0 + (seq % 3), loop_lag_ms=0.2),
        broker={"partition.0.produced": float(produced - produced // 2),
                "partition.1.produced": float(produced // 2),
                "partition.0.consumed": float(consumed - consumed // 2),
                "partition.1.consumed": float(consumed // 2)},
        # a Redis Streams group: both consumers read both streams, the server deals entries
        consumers=(ConsumerStat(0, "streambench-sub-0", 0, consumed - consumed // 2 - seq % 3,
                                (0, 1), shared=True),
                   ConsumerStat(0, "streambench-sub-0", 1, consumed // 2 + seq % 3, (0, 1),
                                shared=True)),
        broker_metrics=broker_metrics(aof, seq),
    )


def recorded_items() -> list[Tick | PhaseChange | RunEvent]:
    """The bus as the dashboard saw it: phases, ticks of both targets, one send error."""
    items: list[Tick | PhaseChange | RunEvent] = [
        PhaseChange(Phase.STARTING, T0_NS - 3_000_000_000, "starting brokers"),
        PhaseChange(Phase.WARMUP, T0_NS, ""),
    ]
    for seq in range(TICKS):
        if seq == WARMUP_TICKS:
            items.append(PhaseChange(Phase.MEASURING, T0_NS + seq * 1_000_000_000, ""))
        items.extend(recorded_tick(label, seq) for label in LABELS)
        if seq == 25:
            items.append(RunEvent(T0_NS + 26 * 1_000_000_000, "redis:aof", "send-error",
                                  "ConnectionError: Connection reset by peer"))
    return items


def write_recorded_run(run_dir: Path, ended: bool = True) -> Path:
    """The recorded items written as a run directory by the Parquet sink, with a run.json."""
    sink = ParquetSink(run_dir, "recorded", background=False)
    for item in recorded_items():
        sink(item)
        if isinstance(item, Tick) and item.target == LABELS[-1] and item.seq == 20:
            # a change, so the charts carry a mark
            sink(RunEvent(item.time_ns, "redis", "rate", "5,000 msg/s → 5,000 msg/s"))
    meta = {"run_id": "recorded", "workload": WORKLOAD.to_omb(),
            "targets": [{"label": label} for label in LABELS]}
    if ended:
        meta |= {"ended": "2027-01-15T08:00:31+00:00", "stopped_early": False}
    sink(RunMeta(meta))
    sink.close()
    return run_dir
