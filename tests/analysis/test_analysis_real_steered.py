"""The report of a real steered run: a local redis-server driven at 1,000 msg/s, the rate
raised to 2,000 at 4 s and the broker paused at 8 s for 2 s by --at flags, with the delivery
audit. The report has a faults-and-changes table, one segment per stretch between changes, with
the rates the run really had, and a delivery section whose fault windows add up to the run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from analysis.report import build_report
from tests.conftest import run_cli

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def test_report_of_a_real_run_with_scheduled_changes(spark, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    res = run_cli(["run", "redis:runtime=local", "--headless", "--rate", "1000", "--warmup", "1",
                   "--duration", "16", "--out", str(run_dir), "--at", "4s:rate=2000",
                   "--at", "8s:pause=redis", "--at", "10s:resume=redis", "--audit"], timeout_s=180)
    assert res.returncode == 0, res.stderr[-2000:]
    report = build_report([run_dir], out_dir=tmp_path / "report", formats="md")
    text = report.read_text() if report.suffix == ".md" else (report.parent / "report.md").read_text()
    faults = text[text.index("## Faults and changes"):]
    faults = faults[:faults.index("\n## ", 4)]
    assert re.search(r"\| *rate *\|[^\n]*1,000 msg/s → 2,000 msg/s", faults), faults
    assert "fault-pause" in faults and "fault-resume" in faults
    segments = text[text.index("## Segments between changes"):]
    segments = segments[:segments.index("\n## ", 4)]
    rows = [ln for ln in segments.splitlines() if re.match(r"\| *\d", ln)]
    assert len(rows) >= 3, segments  # before the change, after it, the pause, after the resume
    first, second = rows[0], rows[1]
    assert "1,000" in first and "2,000" in second, segments
    delivery = text[text.index("## Delivery"):]
    delivery = delivery[:delivery.index("\n## ", 4)]
    (totals,) = json.loads((run_dir / "run.json").read_text())["totals"]
    audit = totals["audit"]
    assert audit["acknowledged"] == audit["consumed"] == totals["produced"] > 20_000, audit
    table = {cells[0]: [int(c.replace(",", "")) for c in cells[1:]] for cells in
             ([c.strip() for c in ln.strip("|").split("|")] for ln in delivery.splitlines()
              if ln.startswith("|") and not ln.startswith("| window") and "---" not in ln)}
    # acknowledged, failed, consumed, lost, unexpected, duplicated, reordered, unseen
    assert table["whole run"] == [audit["acknowledged"], 0, audit["consumed"], 0, 0, 0, 0, 0]
    names = list(table)[1:]
    assert names[0] == "before any fault" and names[1].startswith("fault-pause redis")
    assert names[2].startswith("fault-resume redis") and len(names) == 3, names
    assert sum(table[n][0] for n in names) == audit["acknowledged"]
    assert all(table[n][0] > 0 for n in names)  # each window had messages sent in it
    assert ": clean." in delivery
    # the pause's fault window: during it (the pause to the resume, or later, until healthy
    # again) the messages sent wait for the resume, so its e2e p99 is the pause's length more
    # or less, far above before's (the sends are acknowledged after the resume, within the
    # window: its produce rate stays the run's); its audit verdict is the pause's window of
    # the delivery table
    windows = text[text.index("## Fault windows"):]
    windows = windows[:windows.index("\n## ", 4)]
    # (the pause is asked at 8 s; the event is stamped once it is done, 8.0-8.1 s seen)
    assert re.search(r": fault-pause at 8\.\d s", windows) and "fault-resume at" not in windows, windows
    rows = {cells[0]: cells for cells in
            ([c.strip() for c in ln.strip("|").split("|")] for ln in windows.splitlines()
             if re.match(r"\| (before|during|after) ", ln))}
    assert list(rows) == ["before", "during", "after"], windows
    # (after it: n/a when the target was not healthy again before the run's end, which a
    # loaded machine can make so, and "during" then runs to the end)
    p99 = {name: float(rows[name][5].replace(",", "")) for name in ("before", "during")}
    assert p99["during"] > max(500.0, 5 * p99["before"]), windows
    assert float(rows["before"][2].replace(",", "")) > 1800, windows
    paused = names[1]
    assert rows["during"][-1] == f"clean ({table[paused][0]:,} acknowledged)", rows["during"]
