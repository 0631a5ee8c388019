"""The terminal driver on a real pseudo-terminal: its input thread sleeps while no key comes
(Textual's own wakes ten times a second), and keys still arrive as before: a letter, a lone
ESC once the escape delay has passed, an arrow key's escape sequence, and `q` ends the app
with the thread joined."""

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

from loadgen.core.workload import Workload
from tui.app import DashboardApp
from tui.driver import QuietLinuxDriver
from tui.suiteview import SuiteApp

PROBE = """
import sys
from textual.app import App
from textual.drivers.linux_driver import LinuxDriver
from tui.driver import quiet_driver_class

log = open(sys.argv[1], "a", buffering=1)
quiet = sys.argv[2] == "quiet"

class Probe(App):
    def get_driver_class(self):
        return quiet_driver_class(LinuxDriver) if quiet else LinuxDriver

    def on_mount(self):
        self.set_timer(0.3, self.ready)

    def ready(self):
        log.write(f"ready {type(self._driver).__name__} {self._driver._key_thread.native_id}\\n")

    def on_key(self, event):
        log.write(f"key {event.key}\\n")
        if event.key == "q":
            self.exit()

Probe().run()
log.write("exited\\n")
"""


class Probe:
    """The probe app as the leader of a session on a pty; the terminal is drained while
    waiting (the app blocks when nobody reads its output)."""

    def __init__(self, log: Path, driver: str) -> None:
        pid, fd = pty.fork()
        if pid == 0:
            env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "80", "LINES": "24"}
            os.execve(sys.executable, [sys.executable, "-c", PROBE, str(log), driver], env)
        self.pid, self.fd, self.log = pid, fd, log
        self.status: int | None = None

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def pump(self, seconds: float, until: str | None = None) -> bool:
        """Drain the terminal for `seconds`, or until a log line starts with `until`."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if until is not None and any(line.startswith(until) for line in self.lines()):
                return True
            ready, _, _ = select.select([self.fd], [], [], 0.05)
            if ready:
                with contextlib.suppress(OSError):  # the app has closed the terminal
                    os.read(self.fd, 65536)
            if self.status is None:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    self.status = status
        return until is None

    def wakeups(self, tid: int) -> int:
        status = Path(f"/proc/{self.pid}/task/{tid}/status").read_text()
        return int(next(line for line in status.splitlines()
                        if line.startswith("voluntary_ctxt_switches")).split()[1])

    def close(self) -> None:
        if self.status is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self.fd)


@pytest.fixture
def probe(tmp_path):
    started: list[Probe] = []

    def start(driver: str) -> Probe:
        p = Probe(tmp_path / f"{driver}-{len(started)}.log", driver)
        started.append(p)
        return p

    yield start
    for p in started:
        p.close()


def _idle_wakeups(p: Probe, seconds: float = 2.0) -> tuple[str, int]:
    """The driver's name and how many times its input thread woke in `seconds` without input."""
    assert p.pump(30, until="ready"), p.lines()
    _, name, tid = next(line for line in p.lines() if line.startswith("ready")).split()
    before = p.wakeups(int(tid))
    p.pump(seconds)
    return name, p.wakeups(int(tid)) - before


def test_the_input_thread_sleeps_until_a_key_comes_and_keys_arrive(probe) -> None:
    p = probe("quiet")
    name, wakeups = _idle_wakeups(p)
    assert name == "QuietLinuxDriver"
    assert wakeups <= 2, f"the input thread woke {wakeups} times in 2 s without input"
    os.write(p.fd, b"a")
    assert p.pump(5, until="key a"), p.lines()
    sent = time.monotonic()
    os.write(p.fd, b"\x1b")  # a lone ESC: the escape key once the escape delay has passed
    assert p.pump(5, until="key escape"), p.lines()
    assert time.monotonic() - sent < 2.0
    os.write(p.fd, b"\x1b[A")  # the up arrow's sequence, in one read: one key, not ESC + text
    assert p.pump(5, until="key up"), p.lines()
    # after input: one more wake-up when the escape delay runs out, then asleep again
    _, wakeups = _idle_wakeups(p)
    assert wakeups <= 2, f"the input thread woke {wakeups} times in 2 s after the keys"
    os.write(p.fd, b"q")
    assert p.pump(10, until="exited"), p.lines()
    p.pump(5)
    assert p.status is not None and os.waitstatus_to_exitcode(p.status) == 0
    assert [line for line in p.lines() if line.startswith("key")] == [
        "key a", "key escape", "key up", "key q"]


def test_textual_driver_wakes_ten_times_a_second(probe) -> None:
    """What the quiet driver saves: the same probe on Textual's own driver (the reference the
    first test's bound is set against)."""
    name, wakeups = _idle_wakeups(probe("textual"))
    assert name == "LinuxDriver"
    assert wakeups >= 10, wakeups


def test_the_apps_use_the_quiet_driver() -> None:
    workload = Workload(name="w", rate=10.0, duration_s=1, warmup_s=0)
    assert DashboardApp(None, ["a"], workload).driver_class is QuietLinuxDriver
    assert SuiteApp.get_driver_class(SuiteApp.__new__(SuiteApp)) is QuietLinuxDriver
