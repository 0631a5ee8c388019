"""A suite of 2 targets x 2 workloads against real redis-servers: a cell whose broker cannot be
reached fails and the suite goes on; --resume runs only the cells not done, and the suite ends
with one comparison report over every cell."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from compose.process import free_port
from tests.conftest import run_cli

pytestmark = pytest.mark.integration


def _suite_file(tmp_path: Path, port: int) -> Path:
    path = tmp_path / "two-by-two.yaml"
    path.write_text(
        "name: two-by-two\n"
        "description: a small matrix\n"
        f"targets: [redis, 'redis@127.0.0.1:{port}']\n"
        "workloads:\n"
        "  - {name: small, producerRate: 300, messageSize: 100, testDurationSeconds: 4,"
        " warmupDurationSeconds: 0}\n"
        "  - {name: large, producerRate: 200, messageSize: 4000, testDurationSeconds: 4,"
        " warmupDurationSeconds: 0}\n")
    return path


def test_a_failed_cell_is_recorded_and_resume_runs_only_what_is_left(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there yet: the second target's cells fail
    suite = _suite_file(tmp_path, port)
    out = tmp_path / "suite"
    res = run_cli(["suite", str(suite), "--out", str(out), "--scale", "0.5", "--no-report"],
                  timeout_s=300)
    assert res.returncode == 5, res.stderr  # every cell tried, two failed
    state = json.loads((out / "suite.json").read_text())
    assert state["scaled"] is True and state["scale"] == 0.5
    cells = state["cells"]
    assert [(c["target"], c["workload"], c["state"]) for c in cells] == [
        ("redis", "small", "done"), (f"redis@127.0.0.1:{port}", "small", "failed"),
        ("redis", "large", "done"), (f"redis@127.0.0.1:{port}", "large", "failed")]
    assert all("cannot reach redis" in c["error"] for c in cells if c["state"] == "failed")
    first = json.loads((Path(cells[0]["run_dir"]) / "run.json").read_text())
    # scaled ×0.5: 150 msg/s for 2 s
    assert first["workload"]["testDurationSeconds"] == 2.0 and first["workload"]["producerRate"] == 150
    assert first["totals"][0]["produced"] == 300
    done_mtime = (Path(cells[0]["run_dir"]) / "run.json").stat().st_mtime

    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        res = run_cli(["suite", "ignored", "--resume", str(out)], timeout_s=400)
    finally:
        server.terminate()
        server.wait()
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.count("done before") == 2
    state = json.loads((out / "suite.json").read_text())
    assert [c["state"] for c in state["cells"]] == ["done"] * 4
    assert (Path(state["cells"][0]["run_dir"]) / "run.json").stat().st_mtime == done_mtime
    report = Path(state["report"])
    assert report == out / "report" / "report.md"
    text = report.read_text()
    for c in state["cells"]:  # every cell's run is in the one report
        assert json.loads((Path(c["run_dir"]) / "run.json").read_text())["run_id"] in text


@pytest.mark.parametrize(("args", "fragment"), [
    (["suite", "no-such-suite"], "unknown suite 'no-such-suite'"),
    (["suite", "latency-matrix", "kafak"], "unknown platform"),
    (["suite", "latency-matrix", "redis", "--scale", "2"], "--scale must be"),
])
def test_suite_input_errors(tmp_path: Path, args: list[str], fragment: str) -> None:
    res = run_cli([*args, "--out", str(tmp_path / "s"), "--no-report"])
    assert res.returncode == 2, res.stderr
    assert fragment in res.stderr and res.stderr.strip().count("\n") == 0
    assert not (tmp_path / "s").exists()


def test_a_bad_suite_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nworkloads: {oops\n")
    res = run_cli(["suite", str(bad), "redis", "--no-report", "--out", str(tmp_path / "s")])
    assert res.returncode == 2 and "not a valid suite YAML file" in res.stderr
    bad.write_text("name: x\ntargets: [redis]\nworkloads: []\n")
    res = run_cli(["suite", str(bad), "--no-report", "--out", str(tmp_path / "s")])
    assert res.returncode == 2 and "workloads must be a non-empty list" in res.stderr
