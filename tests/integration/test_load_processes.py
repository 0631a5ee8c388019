"""A target's load spread over several worker processes (`--processes`): the first process
owns the broker and the telemetry, every process runs its share of producers and consumers,
and the ticks add their counts and merge their latencies."""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import psutil
import pyarrow.dataset as ds
import pytest

from analysis.sink import ParquetSink
from loadgen.core.target import unique_labels
from loadgen.core.ticks import Phase, Tick
from loadgen.core.workload import Workload
from loadgen.pacing import run_precise
from loadgen.platforms import resolve_target
from loadgen.run import Run, RunSummary
from tests.conftest import assert_rate
from tests.integration.conftest import run_json

pytestmark = pytest.mark.integration

RATE = 3000.0
WARMUP_S = 2
DURATION_S = 10
PROCESSES = 2


def _workers() -> set[int]:
    """This process's children that are spawned multiprocessing workers (not the resource
    tracker; not a child of the suite's own that has just ended, such as a background build)."""
    found = set()
    for c in psutil.Process().children():
        with contextlib.suppress(psutil.Error):
            if "--multiprocessing-fork" in c.cmdline():
                found.add(c.pid)
    return found


@pytest.fixture(scope="module")
def spread_run(tmp_path_factory) -> tuple[Path, RunSummary, set[int]]:
    """3 producers and 3 consumers over 2 processes (2 + 1 of each), 2 partitions."""
    run_dir = tmp_path_factory.mktemp("spread") / "run"
    workload = Workload(name="spread", rate=RATE, duration_s=DURATION_S, warmup_s=WARMUP_S,
                        partitions=2, producers=3, consumers=3, message_size=512)
    run = Run(workload, unique_labels([resolve_target("redis:runtime=local")]), out_dir=run_dir,
              record_raw=True, audit=True, processes=PROCESSES, recorder=ParquetSink)
    seen: set[int] = set()

    def watch(item: object) -> None:
        if isinstance(item, Tick) and item.phase is Phase.MEASURING and item.seq == WARMUP_S + 1:
            seen.update(_workers())

    run.subscribe(watch)
    summary = run_precise(run.execute())
    return run_dir, summary, seen


def test_every_process_is_a_worker_of_the_target(spread_run):
    run_dir, _, seen = spread_run
    assert len(seen) == PROCESSES
    assert run_json(run_dir)["load_processes"] == PROCESSES
    assert not any(psutil.pid_exists(pid) for pid in seen)  # all gone after the run


def test_rate_and_counts_add_up(spread_run):
    run_dir, summary, _ = spread_run
    table = ds.dataset(run_dir / "ticks", format="parquet").to_table()
    ticks = table.to_pydict()
    assert ticks["phase"].count("measuring") == DURATION_S
    (t,) = summary.targets
    assert_rate(table.to_pylist(), t.produced, RATE, WARMUP_S)
    assert t.send_errors == 0 and t.receive_errors == 0
    assert t.produced == int(RATE * (WARMUP_S + DURATION_S))  # no slot of any producer skipped
    assert t.consumed == t.produced == t.expected
    assert t.duplicates == 0
    assert t.drained and t.final_lag == 0
    # the merged histograms hold every process's samples
    assert sum(ticks["publish_count"]) == t.produced
    assert sum(ticks["e2e_count"]) == t.consumed
    assert max(ticks["produced_total"]) == t.produced


def test_raw_samples_of_every_process_kept(spread_run):
    run_dir, summary, _ = spread_run
    raw = ds.dataset(run_dir / "raw", format="parquet").to_table().to_pydict()
    kinds = np.array(raw["kind"])
    (t,) = summary.targets
    assert (kinds == "e2e").sum() == t.consumed
    assert (kinds == "publish").sum() == t.produced
    assert (kinds == "delay").sum() == t.produced
    assert np.array(raw["value_ns"])[kinds == "e2e"].min() > 0


def test_telemetry_comes_from_the_first_process_only(spread_run):
    run_dir, _, _ = spread_run
    ticks = ds.dataset(run_dir / "ticks", format="parquet").to_table().to_pydict()
    measuring = [i for i, p in enumerate(ticks["phase"]) if p == "measuring"]
    assert all(ticks["cpu_percent"][i] > 0 for i in measuring)
    lag = ds.dataset(run_dir / "lag", format="parquet").to_table().to_pydict()
    per_tick: dict[int, list[int]] = {}
    for seq, partition in zip(lag["seq"], lag["partition"], strict=True):
        per_tick.setdefault(seq, []).append(partition)
    assert all(sorted(parts) == [0, 1] for parts in per_tick.values())  # not once per process


def test_kafka_and_pulsar_targets_spread_over_processes(tmp_path):
    """The Kafka consumer group and the Pulsar subscription span both processes; Pulsar's
    second process takes the partitioned topic the first one created."""
    workload = Workload(name="spread-jvm", rate=1000.0, duration_s=4, warmup_s=1, partitions=2,
                        producers=2, consumers=2, message_size=256)
    targets = unique_labels([resolve_target("kafka:runtime=local,heap=512M"),
                             resolve_target("pulsar:runtime=local,heap=512m")])
    summary = run_precise(Run(workload, targets, out_dir=tmp_path / "run", audit=True,
                              processes=PROCESSES, recorder=ParquetSink).execute())
    for t in summary.targets:
        assert t.send_errors == 0 and t.receive_errors == 0, t
        assert t.produced == 5000, t
        assert t.consumed == t.produced and t.duplicates == 0 and t.drained, t


def test_the_consumers_of_every_process_in_each_tick(spread_run):
    """Consumer 1 runs in the first process, 0 and 2 in the second: each tick lists the three,
    their counts adding up to the tick's, and their partitions are told once, in one event for
    the target whatever the number of processes."""
    run_dir, summary, _ = spread_run
    ticks = ds.dataset(run_dir / "ticks", format="parquet").to_table().to_pydict()
    consumers = ds.dataset(run_dir / "consumers", format="parquet").to_table().to_pydict()
    per_tick: dict[int, list[tuple[int, int]]] = {}
    for seq, index, consumed in zip(consumers["seq"], consumers["consumer"],
                                    consumers["consumed"], strict=True):
        per_tick.setdefault(seq, []).append((index, consumed))
    assert sorted(per_tick) == sorted(ticks["seq"])
    for seq, consumed in zip(ticks["seq"], ticks["consumed"], strict=True):
        assert sorted(i for i, _ in per_tick[seq]) == [0, 1, 2]
        assert sum(n for _, n in per_tick[seq]) == consumed
    assert sum(consumers["consumed"]) == summary.targets[0].consumed
    assert all(held == [0, 1] for held in consumers["partitions"]) and all(consumers["shared"])
    events = ds.dataset(run_dir / "events", format="parquet").to_table().to_pydict()
    told = [d for k, d in zip(events["kind"], events["detail"], strict=True) if k == "assignment"]
    assert told == ["3 consumers assigned 2 partitions: sub-0/0 to sub-0/2 0-1 shared"]
