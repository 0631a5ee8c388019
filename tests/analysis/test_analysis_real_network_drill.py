"""The bundled NATS latency drill (nats-latency-drill: a 20 ms latency toxic from 10 s to 20 s
on a local nats-server behind Toxiproxy) run for real with the delivery audit, and its report:
the publish p50 rises by the toxic's delay within 10 %, and the report's fault-window section
shows the latency fault's figures before, during and after it with the audit's verdict for its
window, figures that agree with the run's own ticks."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pytest

from analysis.report import build_report
from tests.conftest import run_cli, run_json
from tests.integration.test_network_faults import LATENCY_MS, _between, _p50_ms

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def _section(text: str, title: str) -> str:
    part = text[text.index(f"## {title}"):]
    return part[:part.index("\n## ", 4)]


def test_nats_latency_drill_and_its_fault_windows(spark, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    res = run_cli(["run", "nats:runtime=local", "--workload", "nats-latency-drill", "--headless",
                   "--audit", "--out", str(run_dir)], timeout_s=240)
    assert res.returncode == 0, res.stderr[-3000:]
    events = sorted(ds.dataset(run_dir / "events", format="parquet").to_table().to_pylist(),
                    key=lambda e: e["time"])
    ticks = sorted(ds.dataset(run_dir / "ticks", format="parquet").to_table().to_pylist(),
                   key=lambda t: t["seq"])
    start = next(e for e in events if e["kind"] == "phase" and e["phase"] == "measuring")
    slow_at = next(e for e in events if e["kind"] == "net-latency")["time"].timestamp()
    healed = next(e for e in events if e["kind"] == "net-heal")["time"].timestamp()
    base = _between(ticks, start["time"].timestamp(), slow_at)
    slow = _between(ticks, slow_at + 1, healed)
    added = _p50_ms(run_dir, "publish", slow) - _p50_ms(run_dir, "publish", base)
    by_seq = {t["seq"]: t for t in ticks}
    per_tick = (np.median([by_seq[s]["publish_p50"] for s in slow])
                - np.median([by_seq[s]["publish_p50"] for s in base])) / 1e6
    print(f"nats-latency-drill: publish p50 +{added:.2f} ms (median of the ticks' p50s "
          f"+{per_tick:.2f} ms) over {len(base)} s before and {len(slow)} s under the toxic")
    assert len(base) >= 6 and len(slow) >= 6
    assert abs(added - LATENCY_MS) <= 0.1 * LATENCY_MS
    assert abs(per_tick - LATENCY_MS) <= 0.1 * LATENCY_MS

    report = build_report([run_dir], out_dir=tmp_path / "report", formats="md")
    text = (report.parent / "report.md" if report.suffix != ".md" else report).read_text()
    windows = _section(text, "Fault windows")
    assert ": net-latency at 10.0 s" in windows, windows
    rows = {cells[0]: cells for cells in
            ([c.strip() for c in ln.strip("|").split("|")] for ln in windows.splitlines()
             if re.match(r"\| (before|during|after) ", ln))}
    assert list(rows) == ["before", "during", "after"], windows
    number = {name: [float(c.replace(",", "")) if re.fullmatch(r"[\d,.]+", c) else None
                     for c in cells[1:8]] for name, cells in rows.items()}
    # seconds, produce, consume, e2e p50, e2e p99: 10 s before; during lasts to the heal (or
    # later, until healthy again); the latency raises the e2e p50
    assert 9 <= number["before"][0] <= 10 and number["during"][0] >= 9
    assert number["during"][3] > number["before"][3] + 0.9 * LATENCY_MS
    # the rates agree with the ticks of the window before the fault (whose middles are in it)
    mids = [t for t in ticks if t["phase"] == "measuring" and start["time"].timestamp()
            <= t["time"].timestamp() - t["interval_s"] / 2 < slow_at]
    produce = sum(t["produced"] for t in mids) / sum(t["interval_s"] for t in mids)
    assert abs(number["before"][1] - produce) <= 0.01 * produce
    # the audit's verdict for the fault's window, as run.json counts it
    (totals,) = run_json(run_dir)["totals"]
    (window,) = [w for w in totals["audit"]["windows"] if w["name"].startswith("net-latency")]
    verdict = rows["during"][-1]
    assert verdict == f"clean ({window['acknowledged']:,} acknowledged)", (verdict, window)
    assert window["acknowledged"] > 1500
