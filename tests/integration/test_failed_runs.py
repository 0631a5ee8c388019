"""Runs that fail say so, on a real redis-server: an output folder on a disk that fills during
the run, a target whose every send fails, a server out of client connections; and what used
to fail and now works: 10,000 subscriptions (the workload's maximum), two runs started at once
without --out."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from analysis.labels import FAILED, ending, run_marks
from analysis.runs import expand_run_args, load_runs
from analysis.sink import ParquetSink
from loadgen.core.errors import DriverError
from loadgen.core.target import unique_labels
from loadgen.core.workload import Workload
from loadgen.pacing import run_precise
from loadgen.platforms import resolve_target
from loadgen.run import SPACE_RESERVE, Run
from tests.conftest import CLI, CliRun, redis_server, run_cli, run_json

pytestmark = pytest.mark.integration


def _errors(stderr: str) -> list[str]:
    """The error lines among a headless run's progress lines."""
    return [ln for ln in stderr.splitlines() if ln.startswith("streambench: error:")]


# -- a disk that fills during the run -----------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs, unmounted at the end."""
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(folder: Path) -> int:
    """Write a file until the disk has no room left; returns its size."""
    written = 0
    chunk = bytes(64 << 10)
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            try:
                written += os.write(fd, chunk)
            except OSError:
                return written
    finally:
        os.close(fd)


def test_a_disk_that_fills_stops_the_run_at_once_and_marks_it_failed(small_disk, no_leftover_redis):
    run_dir = small_disk / "run"
    cli = CliRun(["run", "redis", "--rate", "1000", "--duration", "60", "--warmup", "1",
                  "--headless", "--out", str(run_dir)])
    for _ in range(4):  # four measuring seconds (status lines start with the phase)
        cli.wait_for_line("measuring ", 60)
    assert _fill(small_disk) > 0
    filled = time.monotonic()
    code, _out, err = cli.finish(60)
    ended_after = time.monotonic() - filled
    # one line, exit 2, and the run ended seconds after the disk filled, not at its planned end
    assert code == 2, err
    (line,) = _errors(err)
    assert "No space left on device" in line and "run.json: failed" in line, err
    assert err.strip().endswith(line)
    assert ended_after < 10, f"the run went on {ended_after:.1f} s after the disk filled"
    meta = run_json(run_dir)
    assert "No space left on device" in meta["failed"]
    assert meta["stopped_early"] is True and "ended" in meta
    assert meta["measured_ticks"] < 20
    (totals,) = meta["totals"]
    assert totals["consumed"] > 0
    # the report marks it failed (the runs table's ending, and every target name)
    label = totals["label"]
    assert FAILED in run_marks(meta, label)
    assert ending(meta).startswith("failed: cannot write")
    # what was written stays readable: every file opens, and the ticks before the disk filled
    # are there with their latency rows (the histograms' counts agree with the ticks' own)
    for part in run_dir.glob("*/part-*.parquet"):
        pq.read_metadata(part)
    ticks = ds.dataset(run_dir / "ticks", format="parquet").to_table().to_pydict()
    measuring = [i for i, p in enumerate(ticks["phase"]) if p == "measuring"]
    assert len(measuring) >= 4
    latency = ds.dataset(run_dir / "latency", format="parquet").to_table().to_pydict()
    e2e: dict[int, int] = {}
    for seq, kind, count in zip(latency["seq"], latency["kind"], latency["count"], strict=True):
        if kind == "e2e":
            e2e[seq] = e2e.get(seq, 0) + count
    # (the last tick's journal may have been the one that failed, its latency rows lost)
    for i in measuring[:-1]:
        assert e2e.get(ticks["seq"][i], 0) == ticks["e2e_count"][i]
    assert sum(ticks["e2e_count"][i] for i in measuring) > 3000
    assert not (run_dir / SPACE_RESERVE).exists()


# -- every send failing ------------------------------------------------------------------------

@pytest.fixture
def redis_without_xadd(tmp_path: Path) -> Iterator[int]:
    """A redis-server whose default user may do everything but XADD."""
    with redis_server("--dir", str(tmp_path), "--user", "default", "on", "nopass", "~*", "&*",
                      "+@all", "-xadd") as port:
        yield port


def test_a_run_whose_every_send_failed_fails(redis_without_xadd, tmp_path: Path):
    run_dir = tmp_path / "run"
    res = run_cli(["run", f"redis@127.0.0.1:{redis_without_xadd}", "--rate", "500",
                   "--duration", "3", "--warmup", "0", "--headless", "--out", str(run_dir)])
    assert res.returncode == 3, res.stderr  # the platform's exit code: it took no message
    (line,) = _errors(res.stderr)
    assert "every send failed" in line and "NOPERM" in line, res.stderr
    assert "drained" not in res.stdout
    meta = run_json(run_dir)
    (totals,) = meta["totals"]
    assert totals["produced"] == 0 and totals["send_errors"] >= 1000
    assert totals["drained"] is False
    assert "every send failed" in meta["failed"]
    assert FAILED in run_marks(meta, totals["label"])


# -- values the platform cannot take, refused before anything starts --------------------------

@pytest.mark.parametrize(("target", "says"), [
    ("redis:maxlen=99999999999999999999999", "from 0 to 9,223,372,036,854,775,807"),
    ("redis:fsync=always", "has no effect without aof"),
])
def test_values_the_platform_cannot_take_are_refused_before_anything_starts(
        target, says, tmp_path: Path, no_leftover_redis):
    res = run_cli(["run", target, "--duration", "2", "--headless", "--out", str(tmp_path / "run")])
    assert res.returncode == 2
    # the one line and nothing else: no "[starting] …" progress, no run directory
    assert res.stderr.count("\n") == 1 and says in res.stderr, res.stderr
    assert not (tmp_path / "run").exists()


def test_the_largest_maxlen_is_taken_by_redis(tmp_path: Path, no_leftover_redis):
    run_dir = tmp_path / "run"
    res = run_cli(["run", "redis:maxlen=9223372036854775807", "--rate", "200", "--duration", "2",
                   "--warmup", "0", "--headless", "--out", str(run_dir)])
    assert res.returncode == 0, res.stderr
    (totals,) = run_json(run_dir)["totals"]
    assert totals["send_errors"] == 0 and totals["produced"] == totals["consumed"] >= 390


# -- client connections --------------------------------------------------------------------------

def _subscriptions_run(run_dir: Path, subscriptions: int, spec: str) -> Run:
    workload = Workload(name="subscriptions", rate=100, duration_s=2, warmup_s=1,
                        subscriptions=subscriptions)
    return Run(workload, unique_labels([resolve_target(spec)]), out_dir=run_dir,
               recorder=ParquetSink)


def test_ten_thousand_subscriptions(tmp_path: Path, no_leftover_redis):
    run_dir = tmp_path / "run"
    summary = run_precise(_subscriptions_run(run_dir, 10_000, "redis").execute())
    (totals,) = summary.targets
    assert totals.produced >= 290 and totals.drained
    assert totals.consumed == totals.produced * 10_000
    (target,) = run_json(run_dir)["targets"]
    assert int(target["settings"]["conf.maxclients"]["value"]) > 10_000


def test_a_server_out_of_connections_says_so(tmp_path: Path, no_leftover_redis):
    run = _subscriptions_run(tmp_path / "run", 200, "redis:conf.maxclients=100")
    with pytest.raises(DriverError, match=r"ERR max number of clients reached.*maxclients"):
        run_precise(run.execute())


# -- run ids -------------------------------------------------------------------------------------

def test_runs_started_at_once_get_their_own_ids(tmp_path: Path, no_leftover_redis):
    args = [*CLI, "run", "redis", "--rate", "100", "--duration", "1", "--warmup", "0",
            "--headless"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    procs = [subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    dirs = sorted((tmp_path / "runs").iterdir())
    assert len(dirs) == 2
    ids = {run_json(d)["run_id"] for d in dirs}
    assert len(ids) == 2
    # `report 'runs/*'` takes both (its checks before Spark starts)
    runs = load_runs(expand_run_args([str(tmp_path / "runs" / "*")]))
    assert {r.run_id for r in runs} == ids
