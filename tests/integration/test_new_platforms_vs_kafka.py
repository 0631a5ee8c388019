"""NATS JetStream, RabbitMQ Streams and Pravega side by side with Kafka in one run on an
OpenMessaging Benchmark workload, then through the report: every broker started by the run
itself (local runtimes, loopback), each target's figures in the report's tables."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from analysis.report import build_report
from tests.conftest import none_left, run_cli, run_json

pytestmark = pytest.mark.integration

TARGETS = ["nats:runtime=local", "rabbitmq:runtime=local", "pravega:runtime=local",
           "kafka:runtime=local,heap=512M"]


@pytest.fixture
def nothing_left_running() -> Iterator[None]:
    with ExitStack() as stack:
        for name in ("nats-server", "beam.smp", "java"):
            stack.enter_context(none_left(name, 30))
        yield


def test_three_new_platforms_beside_kafka_through_the_report(spark, tmp_path: Path,
                                                            nothing_left_running) -> None:
    run_dir = tmp_path / "run"
    res = run_cli(["run", *TARGETS, "--workload", "1-topic-1-partition-1kb", "--rate", "200",
                   "--duration", "4", "--warmup", "1", "--track-delivery", "--headless",
                   "--out", str(run_dir)], timeout_s=420)
    assert res.returncode == 0, res.stderr[-3000:]
    meta = run_json(run_dir)
    assert meta["workload"]["name"] == "1-topic-1-partition-1kb"
    assert [t["platform"] for t in meta["targets"]] == ["nats", "rabbitmq", "pravega", "kafka"]
    for totals in meta["totals"]:
        # 5 s at 200 msg/s, each message consumed once
        assert totals["produced"] == totals["consumed"] == 1000, totals
        assert totals["duplicates"] == 0 and totals["drained"], totals

    report = build_report([run_dir], out_dir=tmp_path / "report", formats="md")
    text = (report if report.suffix == ".md" else report.parent / "report.md").read_text()
    throughput = text[text.index("## Throughput"):]
    throughput = throughput[:throughput.index("\n## ", 4)]
    header = next(ln for ln in throughput.splitlines() if ln.startswith("|  |"))
    assert [c.strip() for c in header.split("|")[2:-1]] == TARGETS
    (line,) = [ln for ln in throughput.splitlines() if ln.startswith("| messages consumed |")]
    counts = [int(c.strip().replace(",", "")) for c in line.split("|")[2:-1]]
    # the report's count is the measuring phase's ticks, summed here without Spark
    ticks = pq.read_table(run_dir / "ticks", columns=["target", "phase", "consumed"]).to_pylist()
    assert counts == [sum(r["consumed"] for r in ticks
                          if r["target"] == target and r["phase"] == "measuring")
                      for target in TARGETS], line
    # 4 s measured at 200 msg/s: 800, fewer when a consumer that fell behind on a busy machine
    # catches up in the drain (every message is consumed, checked above)
    assert all(600 <= c <= 850 for c in counts), line
    for target, platform in zip(TARGETS, ("nats", "rabbitmq", "pravega", "kafka"), strict=True):
        assert re.search(rf"\| {re.escape(target)} \| \d+ \| {platform} \| local \|", text) or \
            re.search(rf"\| {re.escape(target)} \|[^\n]*\| {platform} \| local \|", text), target
