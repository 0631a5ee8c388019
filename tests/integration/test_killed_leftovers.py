"""What a run killed outright leaves: the data dirs of its local brokers (removed by
`stacks prune` and by the next run), and load workers and brokers that must end by themselves."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from compose.process import OWNER_FILE, leftover_dirs, make_data_dir
from tests.conftest import CliRun, run_cli

# alone: any run beside it (another test process) removes the data dirs of dead owners it
# inspects, as the next run should
pytestmark = pytest.mark.serial

GONE_WITHIN_S = 5.0


def _start(spec: str, tmp_path: Path) -> tuple[CliRun, list[psutil.Process]]:
    cli = CliRun(["run", spec, "--headless", "--rate", "300", "--warmup", "1", "--duration", "60",
                  "--out", str(tmp_path / "run")])
    cli.wait_for_line("measuring", 240)
    cli.wait_for_line("measuring", 10)
    return cli, psutil.Process(cli.proc.pid).children(recursive=True)


def _gone(p: psutil.Process) -> bool:
    try:
        return p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _kill_rest(procs: list[psutil.Process]) -> None:
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()


def test_data_dirs_of_a_killed_run_are_removed_by_prune_and_the_next_run(tmp_path: Path) -> None:
    cli, started = _start("redis:runtime=local", tmp_path)
    pids = {cli.proc.pid, *(p.pid for p in started)}
    try:
        os.killpg(cli.proc.pid, signal.SIGKILL)  # the whole group: nobody left to clean up
        cli.finish(timeout_s=30)
    finally:
        _kill_rest(started)
    mine = [(path, pid) for path, pid in leftover_dirs() if int(pid) in pids]
    assert len(mine) == 1, mine  # the broker's data dir, its owner (the load worker) dead
    (left, _), = mine
    assert left.name.startswith("streambench-redis-") and (left / OWNER_FILE).is_file()
    saved = tmp_path / "saved"
    shutil.copytree(left, saved)

    res = run_cli(["stacks", "prune"])
    assert res.returncode == 0, res.stderr
    assert f"removed data dir {left} (owner pid" in res.stdout
    assert not left.exists()

    # the same leftover again: the next run's stack removes it before it makes its own dir
    again = Path(tempfile.gettempdir()) / f"{left.name[:-1]}Z"
    shutil.copytree(saved, again)
    new = make_data_dir("streambench-redis-")
    try:
        assert not again.exists() and new.is_dir()
        assert (new / OWNER_FILE).read_text().split(":")[1] == str(os.getpid())
    finally:
        shutil.rmtree(new)


def test_workers_and_the_jvm_end_soon_after_the_coordinator_is_killed(tmp_path: Path) -> None:
    cli, started = _start("kafka:runtime=local,heap=384M", tmp_path)
    names = {p.name() for p in started}
    assert "java" in names and len(started) >= 2, names  # the broker and a load worker
    try:
        killed = time.monotonic()
        cli.proc.kill()  # streambench alone: its workers and broker see it gone
        cli.finish(timeout_s=30)
        while not all(_gone(p) for p in started) and time.monotonic() - killed < 30:
            time.sleep(0.02)
        took = time.monotonic() - killed
    finally:
        _kill_rest(started)
    assert took <= GONE_WITHIN_S, f"{took:.1f} s"
