"""The search for the highest sustainable rate on a real broker: a decision every 3 s of
warm-up and measuring, each applied (the ticks' target rate follows it), and its result
recorded."""

from __future__ import annotations

from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tests.conftest import run_cli, run_json

pytestmark = pytest.mark.integration


def test_rate_search_on_redis(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = run_cli(["run", "redis", "--max-rate=search", "--duration", "18", "--warmup", "3",
                   "--headless", "--out", str(out)], timeout_s=180)
    assert res.returncode == 0, res.stderr[-3000:]
    events = sorted(ds.dataset(out / "events", format="parquet").to_table().to_pylist(),
                    key=lambda e: e["time"])
    steps = [e for e in events if e["kind"] == "rate-search"]
    assert 5 <= len(steps) <= 7, [e["detail"] for e in steps]  # 21 s / 3 s, give or take a tick
    assert steps[0]["detail"].startswith(("steady: up 10,000 →", "backlog growing: down 10,000 →"))
    ticks = sorted(ds.dataset(out / "ticks", format="parquet").to_table().to_pylist(),
                   key=lambda t: t["seq"])
    assert ticks[0]["target_rate"] == 10_000  # where OMB's search starts
    for step in steps:  # each decision is in force from the next tick on
        new = float(step["detail"].split("→ ")[1].split(" msg/s")[0].replace(",", ""))
        later = [t for t in ticks if t["time"] > step["time"]]
        if later and later[0]["phase"] in ("warm-up", "measuring"):
            assert later[0]["target_rate"] == pytest.approx(new, abs=0.5), step["detail"]  # shown rounded
    result = [e for e in events if e["kind"] == "rate-search-result"]
    assert len(result) == 1 and "msg/s at the end" in result[0]["detail"]
    meta = run_json(out)
    assert meta["workload"]["producerRate"] == 0 and meta["workload"]["maxRate"] == "search"
    assert meta["totals"][0]["drained"]
    # a search is not a change of the load: the report cuts no segments at its steps
    assert not [e for e in events if e["kind"] == "rate"]


@pytest.mark.parametrize(("args", "fragment"), [
    (["--max-rate=fastest"], "--max-rate"),
    (["--max-rate=search", "--rate", "100"], "exclude each other"),
])
def test_rate_search_input_errors(tmp_path: Path, args: list[str], fragment: str) -> None:
    res = run_cli(["run", "redis", "--headless", "--out", str(tmp_path / "run"), *args])
    assert res.returncode == 2
    assert fragment in res.stderr
    assert not (tmp_path / "run").exists()


def test_a_workload_says_which_maximum_rate(tmp_path: Path) -> None:
    bad = tmp_path / "w.yaml"
    bad.write_text("producerRate: 0\nmaxRate: fastest\n")
    res = run_cli(["run", "redis", "--workload", str(bad), "--headless", "--out", str(tmp_path / "r")])
    assert res.returncode == 2 and "maxRate must be search or fast" in res.stderr
