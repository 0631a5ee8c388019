"""The summary table a run leaves in the terminal, checked against the run's own files with
numpy: the same measuring-phase throughput and latency percentiles."""

from __future__ import annotations

import signal
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.conftest import CliRun, run_cli

pytestmark = pytest.mark.integration


def _table(stdout: str) -> dict[str, dict[str, str]]:
    """{row name: {target: value}} of the first summary table in the output."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("run summary")) + 1
    header = lines[start].split()
    rows: dict[str, dict[str, str]] = {}
    for line in lines[start + 1:]:
        if not line.strip():
            break
        name, cells = line[:24].strip(), line[24:]
        values = [cells[i:i + 16].strip() for i in range(0, len(cells), 16)]
        rows[name] = dict(zip(header, values, strict=True))
    return rows


def test_the_end_of_run_table_agrees_with_the_run_files(tmp_path: Path):
    out = tmp_path / "run"
    res = run_cli(["run", "redis", "redis:aof", "--rate", "800", "--duration", "4", "--warmup", "1",
                   "--headless", "--out", str(out)])
    assert res.returncode == 0, res.stderr
    table = _table(res.stdout)
    assert set(table["drained"].values()) == {"yes"}
    assert "ratios to redis" in res.stdout

    # after the files' last figures, the wait for the brokers to stop is said as such, per target
    # (the events' detail is "PHASE: MESSAGE")
    phases = [e["detail"] for e in pq.read_table(out / "events").to_pylist() if e["kind"] == "phase"]
    after = phases[phases.index("writing: writing run files") + 1:]
    assert after[0] == "writing: stopping brokers: 0 of 2 targets down"
    assert sorted(after[1:]) == ["writing: stopping brokers: redis down (1 of 2)",
                                 "writing: stopping brokers: redis:aof down (2 of 2)"] or sorted(
        after[1:]) == ["writing: stopping brokers: redis down (2 of 2)",
                       "writing: stopping brokers: redis:aof down (1 of 2)"]

    ticks = {k: np.array(v) for k, v in pq.read_table(out / "ticks").to_pydict().items()}
    latency = {k: np.array(v) for k, v in pq.read_table(out / "latency").to_pydict().items()}
    for target in ("redis", "redis:aof"):
        measured = (ticks["target"] == target) & (ticks["phase"] == "measuring")
        seconds = ticks["interval_s"][measured].sum()
        produced, consumed = ticks["produced"][measured].sum(), ticks["consumed"][measured].sum()
        assert table["measured"][target] == f"{seconds:.0f} s"
        assert table["produced msg/s"][target] == f"{produced / seconds:,.0f}"
        assert table["consumed msg/s"][target] == f"{consumed / seconds:,.0f}"
        rows = ((latency["target"] == target) & (latency["phase"] == "measuring")
                & (latency["kind"] == "e2e"))
        samples = np.repeat(latency["value_ns"][rows], latency["count"][rows]) / 1e6
        assert len(samples) == consumed
        for p in (50, 99, 99.9):
            shown = float(table[f"e2e p{p:g} ms"][target].replace(",", ""))
            expected = float(np.percentile(samples, p))
            # displayed with 3 significant decimals; the histogram clamps to the observed min/max
            assert shown == pytest.approx(expected, rel=0.01, abs=0.002), (target, p)
        assert table["e2e max ms"][target] != "—"
        rows = ((latency["target"] == target) & (latency["phase"] == "measuring")
                & (latency["kind"] == "delay"))
        delays = np.repeat(latency["value_ns"][rows], latency["count"][rows]) / 1e6
        assert abs(len(delays) - produced) <= 0.01 * produced  # sent vs acknowledged per tick
        for p in (50, 99):
            shown = float(table[f"publish delay p{p:g} ms"][target].replace(",", ""))
            assert shown == pytest.approx(float(np.percentile(delays, p)), rel=0.01, abs=0.002)


def test_a_run_stopped_early_says_so_in_the_table(tmp_path: Path):
    cli = CliRun(["run", "redis", "--rate", "500", "--duration", "60", "--warmup", "0",
                  "--headless", "--out", str(tmp_path / "run")])
    cli.wait_for_line("measuring      2s", timeout_s=60)
    cli.signal(signal.SIGINT)
    code, out, _err = cli.finish()
    assert code == 130
    title = next(line for line in out.splitlines() if line.startswith("run summary"))
    assert title.startswith("run summary (measuring phase): STOPPED EARLY after ")
