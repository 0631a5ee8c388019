"""OMB's backlog phase on a real broker: consumers stopped at the start of the measuring phase
until the backlog reaches consumerBacklogSizeGB, then the drain timed to OMB's threshold; the
events' figures checked against the run's own ticks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.integration.backlog_support import RATE, WORKLOAD_FIELDS, assert_backlog_phase

pytestmark = pytest.mark.integration


def _workload(tmp_path: Path, extra: str = "") -> str:
    path = tmp_path / "backlog.yaml"
    path.write_text(f"name: backlog\n{WORKLOAD_FIELDS}{extra}")
    return str(path)


def test_backlog_is_built_then_drained_on_redis(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = run_cli(["run", "redis", "--workload", _workload(tmp_path), "--headless",
                   "--out", str(out)], timeout_s=180)
    assert res.returncode == 0, res.stderr[-3000:]
    assert_backlog_phase(out)


@pytest.mark.parametrize(("args", "fragment"), [
    (["--max-rate"], "consumerBacklogSizeGB needs a fixed producerRate"),
])
def test_backlog_input_errors(tmp_path: Path, args: list[str], fragment: str) -> None:
    res = run_cli(["run", "redis", "--workload", _workload(tmp_path), "--headless",
                   "--out", str(tmp_path / "run"), *args])
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and fragment in res.stderr
    assert not (tmp_path / "run").exists()


def test_a_backlog_larger_than_memory_is_refused_before_anything_starts(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text(f"producerRate: {RATE}\nconsumerBacklogSizeGB: 1000000\n")
    res = run_cli(["run", "redis", "--workload", str(big), "--headless", "--out", str(tmp_path / "run")])
    assert res.returncode == 2
    assert "does not fit in the" in res.stderr and res.stderr.strip().count("\n") == 0
    assert not (tmp_path / "run").exists()

