"""Scheduled faults through the container path: `docker pause` / unpause and kill / start of
a broker container (offline-built images, host networking), with the recovery measured."""

from __future__ import annotations

from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tests.conftest import run_cli, run_json
from tests.containers.conftest import nothing_labelled, run_id_of


def test_pause_and_kill_a_redis_container(tmp_path: Path, docker_images) -> None:
    run_dir = tmp_path / "run"
    res = run_cli(["run", "redis:aof", "--runtime", "docker", "--headless", "--rate", "500",
                   "--warmup", "1", "--duration", "24", "--out", str(run_dir),
                   "--at", "2s:pause=redis", "--at", "4s:resume=redis",
                   "--at", "11s:kill=redis", "--at", "12s:start=redis"], timeout_s=300)
    assert res.returncode == 0, res.stderr[-3000:]
    events = sorted(ds.dataset(run_dir / "events", format="parquet").to_table().to_pylist(),
                    key=lambda e: e["time"])
    faults = [e for e in events if e["kind"].startswith("fault-")]
    assert [e["kind"] for e in faults] == ["fault-pause", "fault-resume", "fault-kill", "fault-start"]
    assert all("container" in e["detail"] for e in faults), faults
    pause, resume = faults[0]["time"], faults[1]["time"]
    assert 1.5 <= (resume - pause).total_seconds() <= 3.0
    outcomes = [e for e in events if e["kind"] in ("recovered", "not-recovered")]
    assert outcomes and "pause redis" in outcomes[0]["detail"]
    ticks = ds.dataset(run_dir / "ticks", format="parquet").to_table().to_pylist()
    assert max(t["e2e_max"] or 0 for t in ticks) >= 1.5e9  # the paused seconds show
    meta = run_json(run_dir)
    assert meta["totals"][0]["produced"] > 0
    nothing_labelled(run_id_of(run_dir))


def test_a_redis_container_near_its_memory_limit_is_said_before_the_kernel_kills_it(
        tmp_path: Path, docker_images) -> None:
    """A Redis container limited to 48 MiB, its stream growing by ~6 MB/s (5,000 msg/s × 1 KiB,
    no maxlen=): warned before the start; a broker-memory-high event once the container is past
    half its limit and growing towards it, with the pace the ticks show, before the trouble: at
    the limit redis-server stalls (the collector gets no answer) while the kernel reclaims its
    memory, and is killed (a broker death, exit 3, when that comes before the run's end)."""
    run_dir = tmp_path / "run"
    res = run_cli(["run", "redis:memory=48m", "--runtime", "docker", "--headless", "--rate", "5000",
                   "--warmup", "1", "--duration", "25", "--out", str(run_dir)], timeout_s=300)
    assert "Traceback" not in res.stderr
    assert "more than its container's limit (memory=48m)" in res.stderr
    events = sorted(ds.dataset(run_dir / "events", format="parquet").to_table().to_pylist(),
                    key=lambda e: e["time"])
    (high,) = [e for e in events if e["kind"] == "broker-memory-high"]
    assert high["detail"].startswith("its broker container uses ") and "(memory=48m)" in high["detail"]
    share = int(high["detail"].split("% of the limit")[0].rsplit(" ", 1)[1])
    assert 50 <= share <= 100
    pace = float(high["detail"].split("growing by ")[1].split(" MB/s")[0])
    trouble = [e for e in events if e["kind"] in ("collector-error", "broker-died")]
    assert trouble and high["time"] < trouble[0]["time"], (high, trouble[:1])
    died = any(e["kind"] == "broker-died" for e in events)
    assert res.returncode == (3 if died else 0), res.stderr[-3000:]
    ticks = [t for t in ds.dataset(run_dir / "ticks", format="parquet").to_table().to_pylist()
             if t["memory_bytes"]]
    # the figures the event was taken from: the ticks before it, past half of 48 MiB at the end,
    # growing at about the pace it says (between the first of them and the last)
    before = sorted((t for t in ticks if t["time"] <= high["time"]), key=lambda t: t["time"])
    assert before[-1]["memory_bytes"] >= 0.5 * (48 << 20)
    first, last = before[max(0, len(before) - 6)], before[-1]
    slope = ((last["memory_bytes"] - first["memory_bytes"])
             / (last["time"] - first["time"]).total_seconds() / 1e6)
    assert pace == pytest.approx(slope, rel=0.05), (pace, slope)
    nothing_labelled(run_id_of(run_dir))
