"""The search for the highest sustainable rate on a real broker: a decision every 3 s of
warm-up and measuring, each applied (the ticks' target rate follows it), and its result
recorded."""

from __future__ import annotations

from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tests.conftest import run_cli, run_json

pytestmark = pytest.mark.integration


def _search(out: Path, target: str, printed: list[str] | None = None) -> list[dict]:
    """A search of 21 s (3 s warm-up) on `target`: its events in time order (what it printed
    appended to `printed`)."""
    res = run_cli(["run", target, "--max-rate=search", "--duration", "18", "--warmup", "3",
                   "--headless", "--out", str(out)], timeout_s=180)
    assert res.returncode == 0, res.stderr[-3000:]
    if printed is not None:
        printed.append(res.stdout)
    return sorted(ds.dataset(out / "events", format="parquet").to_table().to_pylist(),
                  key=lambda e: e["time"])


@pytest.fixture(scope="module")
def redis_search(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict], str]:
    out = tmp_path_factory.mktemp("search") / "run"
    printed: list[str] = []
    events = _search(out, "redis", printed)
    return out, events, printed[0]


def _best_kept(events: list[dict]) -> float:
    """The highest rate a period kept up with (its step went on up or held)."""
    kept = [float(e["detail"].split("achieved ")[1].split(" msg/s")[0].replace(",", ""))
            for e in events if e["kind"] == "rate-search" and e["detail"].startswith("steady")]
    assert kept, [e["detail"] for e in events if e["kind"] == "rate-search"]
    return max(kept)


def test_rate_search_on_redis(redis_search: tuple[Path, list[dict], str]) -> None:
    out, events, printed = redis_search
    steps = [e for e in events if e["kind"] == "rate-search"]
    assert 5 <= len(steps) <= 7, [e["detail"] for e in steps]  # 21 s / 3 s, give or take a tick
    assert steps[0]["detail"].startswith(("steady: up 10,000 →", "backlog growing: down 10,000 →",
                                          "behind schedule: down 10,000 →"))
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
    assert "msg/s acknowledged (the median of the " in result[0]["detail"]
    meta = run_json(out)
    assert meta["workload"]["producerRate"] == 0 and meta["workload"]["maxRate"] == "search"
    # the result: the median of the kept periods' acknowledged rates, in the event, in
    # run.json and in the table the run prints when it ends
    detail = result[0]["detail"]
    shown = float(detail.split("; ")[2].split(" msg/s")[0].replace(",", ""))
    kept = [float(e["detail"].split("achieved ")[1].split(" msg/s")[0].replace(",", ""))
            for e in steps if e["detail"].startswith("steady")
            and [t for t in ticks if t["time"] <= e["time"]][-1]["phase"] == "measuring"]
    assert kept and min(kept) <= shown <= max(kept), (detail, kept)
    total = meta["totals"][0]
    assert total["sustainable_rate"] == pytest.approx(shown, abs=0.5)
    assert total["search_converged"] == detail.startswith("converged")
    row = next(line for line in printed.splitlines() if line.startswith("sustainable msg/s"))
    assert row.split()[-1] == f"{shown:,.0f}"
    assert any(line.startswith("search converged") for line in printed.splitlines())
    assert meta["totals"][0]["drained"]
    # a search is not a change of the load: the report cuts no segments at its steps
    assert not [e for e in events if e["kind"] == "rate"]
    # a step down drops the slots owed at the rate given up and says how many
    for step in steps:
        if "down" in step["detail"].split(" → ")[0] and "dropped" in step["detail"]:
            assert step["detail"].endswith("slots owed at the old rate dropped")


def test_a_throttled_broker_sustains_a_lower_rate(
        redis_search: tuple[Path, list[dict], str], tmp_path: Path) -> None:
    """The same search on a redis-server that fsyncs its append-only file after every write
    keeps up with a clearly lower rate than on one that does not."""
    _, free, _ = redis_search
    throttled = _search(tmp_path / "run", "redis:conf.appendonly=yes,conf.appendfsync=always")
    assert _best_kept(throttled) < 0.8 * _best_kept(free), (
        [e["detail"] for e in free if e["kind"] == "rate-search"],
        [e["detail"] for e in throttled if e["kind"] == "rate-search"])
    # a step that leaves a rate for want of acknowledgements says so
    assert all(not e["detail"].startswith("backlog growing") or "unread 0," not in e["detail"]
               for e in throttled if e["kind"] == "rate-search")


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
