"""The detail screen's consumers during a real run, driven through the dashboard: a local Kafka
broker started by the run, one subscription of two consumers over four partitions. The two
split the partitions, the table shows which each holds; a third member joining the group from
outside takes some, and the rebalance shows as `assignment` events, in the table, and in the
run's events and consumers tables. A local redis-server shows its group's consumers sharing
every stream."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from aiokafka import AIOKafkaConsumer
from textual.message import Message

from analysis.sink import ParquetSink
from compose.kafka import KafkaRuntime
from loadgen.core.target import unique_labels
from loadgen.core.ticks import Tick
from loadgen.core.workload import Workload
from loadgen.platforms import resolve_target
from loadgen.platforms.kafka import group_id
from loadgen.run import Run, RunSummary
from tests.integration.kafka_support import kafka_39  # noqa: F401  (fixture)
from tests.tui.screen import screen_lines, wait_until
from tui.app import DashboardApp, EventReceived, TickReceived
from tui.detail import DetailScreen

pytestmark = pytest.mark.integration

SUB = "streambench-sub-0"
# a consumers-table row: name, partitions held, the partitions, consume/s, lag
ROW = re.compile(r"^\W*(sub-0/\d)\s+(\d+)\s+(.+?)\s+([\d,]+)\s+([\d,]+|–)\s*\W*$")


def expand(text: str) -> set[int]:
    """{0, 1, 2, 3} for "0-1, 2-3" (or "0-1, 2-3 shared")."""
    found: set[int] = set()
    for part in text.removesuffix(" shared").split(", "):
        low, _, high = part.partition("-")
        found.update(range(int(low), int(high or low) + 1))
    return found


def consumer_rows(app: DashboardApp) -> dict[str, tuple[int, set[int], int]]:
    """The detail screen's consumers table: name -> (held, partitions, consume/s)."""
    rows = {}
    for line in screen_lines(app):
        m = ROW.match(line)
        if m:
            rows[m[1]] = (int(m[2]), expand(m[3]), int(m[4].replace(",", "")))
    return rows


def assignments(seen: list[Message]) -> list[str]:
    return [m.event.detail for m in seen
            if isinstance(m, EventReceived) and m.event.kind == "assignment"]


def last_tick(seen: list[Message]) -> Tick | None:
    ticks = [m.tick for m in seen if isinstance(m, TickReceived)]
    return ticks[-1] if ticks else None


async def test_two_kafka_consumers_split_the_partitions_and_a_rebalance_shows(
        tmp_path: Path, kafka_39: KafkaRuntime) -> None:  # noqa: F811
    workload = Workload(name="consumers", rate=400, duration_s=120, warmup_s=1, message_size=100,
                        partitions=4, consumers=2)
    run = Run(workload, unique_labels([resolve_target("kafka:runtime=local,heap=512M")]),
              out_dir=tmp_path / "run", recorder=ParquetSink)
    app = DashboardApp(run, run.labels, run.workload)
    seen: list[Message] = []

    def both_reading() -> bool:
        tick = last_tick(seen)
        return tick is not None and len(tick.consumers) == 2 and all(
            c.consumed > 0 and c.partitions is not None and len(c.partitions) == 2
            for c in tick.consumers)

    async with app.run_test(size=(80, 24), message_hook=seen.append) as pilot:
        await wait_until(pilot, both_reading, "both consumers reading two partitions each", 180)
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, DetailScreen), "the detail")
        # the table follows the ticks: wait until a repaint shows both rows with a rate
        await wait_until(pilot, lambda: len(consumer_rows(app)) == 2 and all(
            rate > 0 for _, _, rate in consumer_rows(app).values()), "the consumers table", 10)
        rows = consumer_rows(app)
        assert [held for held, _, _ in rows.values()] == [2, 2]
        assert rows["sub-0/0"][1] | rows["sub-0/1"][1] == {0, 1, 2, 3}
        assert not rows["sub-0/0"][1] & rows["sub-0/1"][1]
        # both consumers' partitions as the first tick saw them, in one event
        told = assignments(seen)
        assert re.fullmatch(r"2 consumers assigned [1-4] partitions?: sub-0/0 ([\d, -]+|none); "
                            r"sub-0/1 ([\d, -]+|none)", told[0]), told
        assert not any(t.startswith("2 consumers") for t in told[1:]), told

        # a third member of the group, from outside the run: the group rebalances
        topic = run.runners[0].describe()["layout"]
        name = next(iter(topic.values()))["name"]
        bootstrap = run.runners[0].describe()["endpoints"]["kafka"]
        outsider = AIOKafkaConsumer(name, bootstrap_servers=bootstrap,
                                    group_id=group_id(name, SUB), enable_auto_commit=False)
        await outsider.start()
        try:
            await wait_until(pilot, lambda: len(outsider.assignment()) > 0,
                             "the outsider's partitions", 60)
            await wait_until(pilot, lambda: any("(was " in t for t in assignments(seen)),
                             "an assignment event after the rebalance", 60)
            took = {tp.partition for tp in outsider.assignment()}

            def three_way() -> bool:
                rows = consumer_rows(app)
                return (len(rows) == 2 and sum(held for held, _, _ in rows.values()) == 4 - len(took)
                        and not took & (rows["sub-0/0"][1] | rows["sub-0/1"][1]))

            await wait_until(pilot, three_way, "the table to show the new assignment", 10)
            lost = [t for t in assignments(seen) if "(was " in t]
            assert all(re.fullmatch(rf"consumer [01] of {SUB} \(topic 0\): partitions? [\d, -]+ "
                                    r"\(was [\d, -]+\)", t) for t in lost), lost
            # the event list on the detail screen has them too (the list sits between the
            # tables and the curve, and moves as events come: looked for page by page)
            detail = app.screen.query_one("#detail")
            detail.scroll_home(animate=False)
            await pilot.pause()
            shown: list[str] = []
            for _ in range(12):
                shown += screen_lines(app)
                if any("assignment: consumer" in line for line in shown) or detail.is_vertical_scroll_end:
                    break
                detail.scroll_page_down(animate=False)
                await pilot.pause()
            assert any("assignment: consumer" in line for line in shown), shown
            await pilot.press("O")  # sorted by partitions held, most first
            await pilot.pause()
            assert app.screen.consumer_sort == "held"
            app.screen.query_one("#detail").scroll_home(animate=False)
            await pilot.pause()
            assert any("held ▼" in line for line in screen_lines(app))
        finally:
            await outsider.stop()  # leaves the group: the two take every partition back
        await wait_until(pilot, both_reading, "the partitions back with the two consumers", 60)
        await pilot.press("q")
        await wait_until(pilot, lambda: not app.is_running, "the run to end after q", 120)

    assert isinstance(app.return_value, RunSummary)
    events = ds.dataset(tmp_path / "run" / "events", format="parquet").to_table().to_pydict()
    recorded = [d for k, d in zip(events["kind"], events["detail"], strict=True)
                if k == "assignment"]
    # the start-up event and at least one change each way
    assert sorted(recorded) == sorted(assignments(seen)) and len(recorded) >= 3
    consumers = ds.dataset(tmp_path / "run" / "consumers", format="parquet").to_table().to_pydict()
    assert set(consumers["consumer"]) == {0, 1} and set(consumers["subscription"]) == {SUB}
    assert not any(consumers["shared"])
    assert {p for held in consumers["partitions"] for p in held} == {0, 1, 2, 3}


async def test_redis_consumers_share_every_stream(tmp_path: Path) -> None:
    workload = Workload(name="consumers", rate=400, duration_s=60, warmup_s=1, message_size=100,
                        partitions=3, consumers=2)
    run = Run(workload, unique_labels([resolve_target("redis:runtime=local")]),
              out_dir=tmp_path / "run", recorder=ParquetSink)
    app = DashboardApp(run, run.labels, run.workload)
    seen: list[Message] = []

    def both_reading() -> bool:
        tick = last_tick(seen)
        return tick is not None and len(tick.consumers) == 2 and all(
            c.consumed > 0 for c in tick.consumers)

    async with app.run_test(size=(80, 24), message_hook=seen.append) as pilot:
        await wait_until(pilot, both_reading, "both consumers reading", 60)
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, DetailScreen), "the detail")
        await wait_until(pilot, lambda: len(consumer_rows(app)) == 2, "the consumers table", 10)
        # every stream for both; no lag of their own (the group's is the partitions')
        rows = [m.groups() for line in screen_lines(app) if (m := ROW.match(line))]
        assert [(name, held, text, lag) for name, held, text, _, lag in rows] == [
            ("sub-0/0", "3", "0-2 shared", "–"), ("sub-0/1", "3", "0-2 shared", "–")]
        assert assignments(seen) == ["2 consumers assigned 3 partitions: sub-0/0 to sub-0/1 0-2 "
                                     "shared"]
        await pilot.press("q")
        await wait_until(pilot, lambda: not app.is_running, "the run to end after q", 60)
    assert isinstance(app.return_value, RunSummary)
