"""Scheduled faults through the container path: `docker pause` / unpause and kill / start of
a broker container (offline-built images, host networking), with the recovery measured."""

from __future__ import annotations

from pathlib import Path

import pyarrow.dataset as ds

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
