"""The exact time lag on real brokers: Redis Streams and Kafka side by side in one run, their
consumers stopped 3 s into the measuring phase and started again 5.5 s later (mid-tick). While
stopped, each target's time lag is the age of the first message left unread, growing by 1 s
per second within a tick; after the start it falls as the backlog drains, and the oldest
messages then read are as old (end-to-end latency) as the time lag said, plus the time until
they were read, within the tick."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pytest

from tests.conftest import run_cli
from tests.integration.kafka_support import kafka_39, nothing_left_running  # noqa: F401  (fixtures)

pytestmark = pytest.mark.integration

STOP_S, START_S = 3.0, 8.5  # after the measuring phase starts


def _rows(run_dir: Path, table: str) -> list[dict]:
    rows = ds.dataset(run_dir / table, format="parquet").to_table().to_pylist()
    return sorted(rows, key=lambda r: (r["target"], r.get("seq", 0), r["time"]))


def test_a_stopped_subscription_ages_by_the_second_and_drains_after_its_start(
        tmp_path: Path, kafka_39, nothing_left_running, no_leftover_redis) -> None:  # noqa: F811
    run_dir = tmp_path / "run"
    res = run_cli(["run", "redis", "kafka:runtime=local", "--headless", "--rate", "1000",
                   "--warmup", "1", "--duration", "14", "--out", str(run_dir),
                   "--at", f"{STOP_S}s:consumers=stop", "--at", f"{START_S}s:consumers=start"],
                  timeout_s=300)
    assert res.returncode == 0, res.stderr[-3000:]
    check_run(run_dir)


def check_run(run_dir: Path) -> None:
    events = _rows(run_dir, "events")
    ticks = _rows(run_dir, "ticks")
    statuses = _rows(run_dir, "subscriptions")
    for target in ("redis", "kafka:runtime=local"):
        mine = [t for t in ticks if t["target"] == target]
        changes = [e["time"].timestamp() for e in events
                   if e["kind"] == "consumers" and e["target"] in (target, "")]
        stop, start = changes[0], changes[1]
        assert all(t["lag_seconds_exact"] for t in mine if t["lag_seconds"] is not None), target
        # ticks cut while stopped, after the first whole stopped interval
        stopped = [t for t in mine if stop + 1.0 < t["time"].timestamp() < start]
        assert len(stopped) >= 4, (target, len(stopped))
        at = np.array([t["time"].timestamp() for t in stopped])
        lag = np.array([t["lag_seconds"] for t in stopped])
        # the age of the first message left unread: the time since the stop, within a tick
        # (the positions are read after the tick is cut, up to 0.9 s later on a busy machine)
        assert np.all(np.abs(lag - (at - stop)) < 1.0), (target, lag, at - stop)
        # so it grows by the tick's length at every tick, within a tick, and by 1 s per second
        steps = np.diff(lag) - np.diff(at)
        assert np.all(np.abs(steps) < 1.0), (target, steps)
        assert np.polyfit(at, lag, 1)[0] == pytest.approx(1.0, abs=0.15), target
        assert all(t["lag_seconds_trend"] > 0.5 for t in stopped[1:]), target
        assert all(t["lag_drain_s"] == float("inf") for t in stopped), target  # "growing"
        # Burrow's word once a whole window of readings stood still: STOP
        words = {s["seq"]: s["status"] for s in statuses if s["target"] == target}
        assert words[stopped[-1]["seq"]] == "STOP", (target, words)
        # the tick after the last stopped reading reads the oldest messages then unread: their
        # e2e latency is that reading's time lag plus the time until they were read, within
        # the tick (0.25 s for the reading's own time after the tick's cut)
        last = max((t for t in mine if t["time"].timestamp() < start), key=lambda t: t["seq"])
        after = next(t for t in mine if t["seq"] == last["seq"] + 1)
        oldest_read = after["e2e_max"] / 1e9
        assert last["lag_seconds"] - 0.25 <= oldest_read, (target, after, last)
        assert oldest_read <= last["lag_seconds"] + after["interval_s"] + 0.25, (target, after, last)
        # then it falls: back under a second within 3 ticks of the start, and words say OK
        later = [t for t in mine if t["time"].timestamp() > start]
        assert later[0]["lag_seconds"] < last["lag_seconds"], target
        assert min(t["lag_seconds"] for t in later[:3]) < 1.0, target
        assert words[later[-1]["seq"]] == "OK", target


def test_a_partition_without_a_leader_says_so_and_the_others_keep_their_figures(
        tmp_path: Path, kafka_39, nothing_left_running) -> None:  # noqa: F811
    """Three brokers, one replica of each of 3 partitions: the broker killed takes its
    partition's leader with it once the controller gives up on it (its session time-out)."""
    run_dir = tmp_path / "run"
    workload = tmp_path / "leaderless.yaml"
    workload.write_text("name: leaderless\ndrainTimeoutSeconds: 3\n")
    res = run_cli(["run", "kafka:runtime=local,brokers=3,replication=1", "--headless",
                   "--workload", str(workload), "--rate", "300", "--partitions", "3",
                   "--warmup", "1", "--duration", "16", "--out", str(run_dir),
                   "--at", "2s:kill=kafka-3"], timeout_s=400)
    assert res.returncode == 0, res.stderr[-3000:]  # the broker's death was asked for
    lag = _rows(run_dir, "lag")
    by_seq: dict[int, dict[int, dict]] = {}
    for r in lag:
        by_seq.setdefault(r["seq"], {})[r["partition"]] = r
    leaderless = {seq: [p for p, r in rows.items() if r["leader"] is False]
                  for seq, rows in by_seq.items()}
    said = [seq for seq, found in leaderless.items() if found]
    assert said, "no tick saw a partition without a leader"
    for seq in said:
        (gone,) = leaderless[seq]  # one partition, the killed broker's
        assert by_seq[seq][gone]["time_lag_s"] is None
        others = [r for p, r in by_seq[seq].items() if p != gone]
        assert len(others) == 2 and all(r["time_lag_s"] is not None for r in others), others
    assert "no leader: " in res.stdout
