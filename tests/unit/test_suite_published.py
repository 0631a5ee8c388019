"""The suite's comparison with published figures: the ranking of platforms and the ratios
between them, published vs measured, and one verdict per finding."""

from __future__ import annotations

import json
from pathlib import Path

from tui.bench.suite import compare_published

SUITE = """name: s
targets: [kafka, pulsar, "redis:aof"]
workloads: [latency-1kb-1000]
source: a study
published:
  - workload: latency-1kb-1000
    metric: e2e_mean_ms
    values: {kafka: 1.714, pulsar: 0.557, redis: 0.440}
    finding: Redis lowest
"""


def _state(tmp_path: Path, measured: dict[str, float], scaled: bool = False):
    spec = tmp_path / "s.yaml"
    spec.write_text(SUITE)
    cells, rows = [], []
    for i, (target, value) in enumerate(measured.items()):
        run_dir = tmp_path / f"cell{i}"
        run_dir.mkdir()
        (run_dir / "run.json").write_text(json.dumps({"run_id": f"r{i}"}))
        cells.append({"target": target, "workload": "latency-1kb-1000", "state": "done",
                      "run_dir": str(run_dir)})
        rows.append({"run_id": f"r{i}", "e2e_mean_ms": value})
    return {"suite_spec": str(spec), "cells": cells, "scaled": scaled}, rows


def test_the_same_ranking_is_reproduced_with_both_ratios_shown(tmp_path):
    state, rows = _state(tmp_path, {"kafka": 3.0, "pulsar": 1.2, "redis:aof": 0.9})
    text = "\n".join(compare_published(state, rows))
    assert "| latency-1kb-1000 | e2e_mean_ms | pulsar | 0.557 | 1.2 | 0.32 | 0.40 |" in text
    assert "| latency-1kb-1000 | e2e_mean_ms | redis | 0.44 | 0.9 | 0.26 | 0.30 |" in text
    assert "- latency-1kb-1000, e2e_mean_ms: Redis lowest: **reproduced**" in text
    assert "Published: a study." in text


def test_another_ranking_is_not_reproduced_and_says_both_orders(tmp_path):
    state, rows = _state(tmp_path, {"kafka": 0.5, "pulsar": 1.2, "redis:aof": 0.9})
    text = "\n".join(compare_published(state, rows))
    assert ("**not reproduced: published redis < pulsar < kafka, measured kafka < redis < pulsar**"
            in text)


def test_scaled_or_incomplete_suites_are_not_compared(tmp_path):
    state, rows = _state(tmp_path, {"kafka": 3.0, "pulsar": 1.2, "redis:aof": 0.9}, scaled=True)
    assert "**not comparable: scaled**" in "\n".join(compare_published(state, rows))
    (tmp_path / "two").mkdir()
    state, rows = _state(tmp_path / "two", {"kafka": 3.0, "pulsar": 1.2})
    text = "\n".join(compare_published(state, rows))
    assert "**not comparable: not every platform ran**" in text
    assert "| latency-1kb-1000 | e2e_mean_ms | redis | 0.44 | n/a | 0.26 | n/a |" in text


def test_every_bundled_suite_loads_and_its_targets_parse():
    """Each bundled suite's workloads are valid OMB workloads and each of its TARGET strings is
    accepted by the same parser as the command line (a misspelt option would fail here)."""
    from loadgen.platforms import resolve_target
    from tui.bench.suite import bundled_suites, load_suite

    names = bundled_suites()
    assert {"fsync-partitions", "sbk", "throughput", "latency-matrix"} <= set(names)
    for name in names:
        suite = load_suite(name)
        assert suite.workloads and suite.targets, name
        for target in suite.targets:
            resolve_target(target)
    fsync = load_suite("fsync-partitions")
    assert [(w.message_size, w.rate, w.partitions) for _, w in fsync.workloads] == [
        (100, 50_000, 1), (100, 50_000, 6), (100, 50_000, 16)]
    sbk = load_suite("sbk")
    # 10 MB/s of payload in every cell
    assert {w.message_size * w.rate for _, w in sbk.workloads} == {10_000_000}
    assert {w.producers for _, w in sbk.workloads} == {1, 10}


def test_the_studys_kafka_compares_with_a_kafka_zk_cell(tmp_path):
    """The study's Kafka ran with ZooKeeper, as the bundled suites' kafka-zk target does: its
    figure is compared with that cell (a KRaft cell of the same run would come first)."""
    state, rows = _state(tmp_path, {"kafka-zk": 3.0, "pulsar": 1.2, "redis:aof": 0.9})
    text = "\n".join(compare_published(state, rows))
    assert "| latency-1kb-1000 | e2e_mean_ms | kafka | 1.714 | 3 | 1.00 | 1.00 |" in text
    assert "**reproduced**" in text
