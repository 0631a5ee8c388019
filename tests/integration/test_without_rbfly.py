"""A plain install (no `rabbitmq` extra, so no rbfly) runs the other platforms as before: a real
Redis run end to end with every import of rbfly failing, which never loads it."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_json
from tests.unit.test_rabbitmq_extra import _cli


def test_a_redis_run_without_rbfly(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    code, _out, err = _cli("block", "run", "redis", "--headless", "--rate", "500", "--duration", "2",
                           "--warmup", "0", "--out", str(run_dir))
    assert code == 0, err
    assert err[-1] == "rbfly loaded: False"
    totals = run_json(run_dir)["totals"][0]
    assert totals["produced"] == 1000 and totals["consumed"] == 1000, totals
