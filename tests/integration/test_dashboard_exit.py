"""The dashboard in a real pseudo-terminal with a real redis-server: how a run ends decides the
exit code, and the files are complete either way. `q` during the run is a user stop (130, like
Ctrl-C headless); a dropped terminal (SIGHUP, an SSH connection lost) finishes the run
unattended (129); a run left to finish exits 0."""

from __future__ import annotations

import contextlib
import os
import pty
import select
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import run_json

RUN = ["run", "redis", "--rate", "500", "--warmup", "1", "--duration", "60"]


class PtyRun:
    """`streambench run …` (dashboard) as the leader of a session whose terminal is a pty."""

    def __init__(self, args: list[str]) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: the dashboard on the pty
            env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "100", "LINES": "30"}
            os.execve(sys.executable, [sys.executable, "-m", "tui.cli", *args], env)
        self.pid, self.fd = pid, fd
        self.screen = b""
        self.status: int | None = None

    def read_for(self, seconds: float, until: Path | None = None) -> bool:
        """Drain the terminal (the child blocks when nobody reads); True once `until` exists."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:
                    return False
                if not chunk:
                    return False
                self.screen = (self.screen + chunk)[-200_000:]
            if until is not None and until.exists():
                return True
            if self._reaped():
                return False
        return False

    def _reaped(self) -> bool:
        if self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = status
        return self.status is not None

    def wait_exit(self, timeout_s: float, read: bool = True) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if read:
                self.read_for(0.5)
            else:
                time.sleep(0.2)
            if self._reaped():
                assert self.status is not None
                return os.waitstatus_to_exitcode(self.status)
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError(f"the dashboard did not exit within {timeout_s} s")

    def close(self) -> None:
        if self.status is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        with contextlib.suppress(OSError):
            os.close(self.fd)


@pytest.fixture
def dashboard():
    runs: list[PtyRun] = []

    def start(args: list[str]) -> PtyRun:
        run = PtyRun(args)
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.close()


def _complete(run_dir: Path) -> dict:
    meta = run_json(run_dir)
    assert "ended" in meta and meta["totals"][0]["produced"] > 0
    assert meta["totals"][0]["consumed"] == meta["totals"][0]["produced"]
    assert list((run_dir / "ticks").glob("part-*.parquet"))
    return meta


def test_q_during_the_run_is_a_user_stop(tmp_path, dashboard, no_leftover_redis) -> None:
    run_dir = tmp_path / "run"
    run = dashboard([*RUN, "--out", str(run_dir)])
    # run.json appears once the broker is up; the load starts then, measuring 1 s later
    assert run.read_for(60, until=run_dir / "run.json"), run.screen[-2000:]
    run.read_for(3)
    os.write(run.fd, b"q")
    assert run.wait_exit(60) == 130
    assert _complete(run_dir)["stopped_early"] is True


def test_a_dropped_terminal_finishes_the_run_unattended(tmp_path, dashboard, no_leftover_redis) -> None:
    run_dir = tmp_path / "run"
    run = dashboard([*RUN, "--out", str(run_dir)])
    # run.json appears once the broker is up; the load starts then, measuring 1 s later
    assert run.read_for(60, until=run_dir / "run.json"), run.screen[-2000:]
    run.read_for(3)
    os.close(run.fd)  # the terminal goes away: the kernel hangs up its session
    assert run.wait_exit(60, read=False) == 129
    meta = _complete(run_dir)
    assert meta["stopped_early"] is True and meta["stopped_for"] == "hangup"
    assert meta["totals"][0]["drained"] is True
    import pyarrow.dataset as ds

    kinds = ds.dataset(run_dir / "events", format="parquet").to_table().column("kind").to_pylist()
    assert kinds.count("hangup") == 1, kinds


def test_a_run_left_to_finish_exits_0(tmp_path, dashboard, no_leftover_redis) -> None:
    run_dir = tmp_path / "run"
    run = dashboard(["run", "redis", "--rate", "500", "--warmup", "1", "--duration", "3",
                     "--out", str(run_dir)])
    assert run.wait_exit(90) == 0
    assert _complete(run_dir)["stopped_early"] is False
