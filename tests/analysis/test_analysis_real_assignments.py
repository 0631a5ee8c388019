"""The report of a real run whose consumer group rebalanced: a local Kafka broker started by the
run, two consumers over four partitions, and a third member joining the group from outside for a
while. The report's "Consumer assignments" table has the start-up row and a row per consumer
whose partitions changed, with what it held before, as the run's events table has them."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from aiokafka import AIOKafkaConsumer

from analysis.report import build_report
from analysis.sink import ParquetSink
from compose.kafka import KafkaRuntime
from loadgen.core.bus import BusItem
from loadgen.core.events import PhaseChange, RunEvent
from loadgen.core.target import unique_labels
from loadgen.core.ticks import Phase, Tick
from loadgen.core.workload import Workload
from loadgen.platforms import resolve_target
from loadgen.platforms.kafka import group_id
from loadgen.run import Run, RunSummary
from tests.integration.kafka_support import kafka_39  # noqa: F401  (fixture)

pytestmark = [pytest.mark.spark, pytest.mark.integration]

SUB = "streambench-sub-0"


async def until(condition: Callable[[], bool], what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {timeout_s:g} s"
        await asyncio.sleep(0.1)


def rebalanced(seen: list[BusItem]) -> list[str]:
    return [e.detail for e in seen if isinstance(e, RunEvent) and e.kind == "assignment"
            and "(was " in e.detail]


async def test_the_report_lists_the_start_up_assignment_and_a_rebalance(
        spark, tmp_path: Path, kafka_39: KafkaRuntime) -> None:  # noqa: F811
    run_dir = tmp_path / "run"
    workload = Workload(name="assignments", rate=400, duration_s=30, warmup_s=1,
                        message_size=100, partitions=4, consumers=2)
    run = Run(workload, unique_labels([resolve_target("kafka:runtime=local,heap=512M")]),
              out_dir=run_dir, recorder=ParquetSink)
    seen: list[BusItem] = []
    run.subscribe(seen.append)
    running = asyncio.create_task(run.execute())
    try:
        def split_in_two() -> bool:
            measuring = any(isinstance(i, PhaseChange) and i.phase is Phase.MEASURING
                            for i in seen)
            ticks = [i for i in seen if isinstance(i, Tick)]
            return measuring and bool(ticks) and all(
                c.partitions is not None and len(c.partitions) == 2 for c in ticks[-1].consumers)

        await until(split_in_two, "two partitions for each consumer while measuring", 120)
        name = next(iter(run.runners[0].describe()["layout"].values()))["name"]
        bootstrap = run.runners[0].describe()["endpoints"]["kafka"]
        outsider = AIOKafkaConsumer(name, bootstrap_servers=bootstrap,
                                    group_id=group_id(name, SUB), enable_auto_commit=False)
        await outsider.start()
        try:
            await until(lambda: bool(rebalanced(seen)), "assignment event after the rebalance", 60)
        finally:
            await outsider.stop()
        summary = await asyncio.wait_for(running, 120)
    finally:
        if not running.done():
            running.cancel()
    assert isinstance(summary, RunSummary)

    events = ds.dataset(run_dir / "events", format="parquet").to_table().to_pydict()
    recorded = [d for k, d in zip(events["kind"], events["detail"], strict=True)
                if k == "assignment"]
    changes = [d for d in recorded if "(was " in d]
    assert len(recorded) == len(changes) + 1 and changes, recorded

    report = build_report([run_dir], out_dir=tmp_path / "report", formats="md")
    text = (report if report.suffix == ".md" else report.parent / "report.md").read_text()
    section = text[text.index("## Consumer assignments"):]
    section = section[:section.index("\n## ", 4)]
    rows = [[c.strip() for c in line.strip("|").split("|")]
            for line in section.splitlines() if line.startswith("| kafka")]
    assert len(rows) == len(recorded), section
    first, *later = rows
    # target, time (s), phase, consumer, partitions, before
    assert first[3] == "2 consumers" and first[5] == "", first
    assert re.fullmatch(r"sub-0/0 ([\d, -]+|none); sub-0/1 ([\d, -]+|none)", first[4]), first
    # each change: the consumer, what it holds, what it held; in time order, after the start-up
    for row, detail in zip(later, changes, strict=True):
        m = re.fullmatch(rf"consumer (\d) of {SUB} \(topic 0\): partitions? (.+) \(was (.+)\)",
                         detail)
        assert m is not None, detail
        assert row[3:] == [f"sub-0/{m[1]}", m[2], m[3]], (row, detail)
    times = [float(r[1]) for r in rows]
    assert times == sorted(times)
    assert any(r[2] == "measuring" for r in later)  # the outsider joined while measuring
