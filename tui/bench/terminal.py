"""The terminal a command runs in: whether there is one, and what a hang-up (a dropped SSH
session, SIGHUP) does: standard input, output and error are pointed away from the lost terminal
so that the run can finish and write its files unattended, and the process exits 129 a few
seconds after the run has finished if the dashboard does not end by itself."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Protocol

from tui.bench import exits

HANGUP_GRACE_S = 5.0  # after a hang-up and the run's end, how long the dashboard may take to exit
HANGUP = "hangup"  # run.json's stopped_for and the event's detail after a hang-up


class Finishing(Protocol):
    """A run or a suite: set once its files are closed and its brokers are down."""

    @property
    def finished(self) -> threading.Event: ...


def is_terminal() -> bool:
    return sys.stdout.isatty() and sys.stdin.isatty()


_detached: list[int] = []  # the write end of the pipe that stands in for a lost terminal
stdin_readers: list[Callable[[], None]] = []  # what stops the headless command reader


def exit_after_hangup(run: Finishing) -> None:
    """After a hang-up the terminal library may wait forever on a terminal that is gone: once
    the run has closed its files and brought its brokers down, exit 129 if the dashboard has
    not ended by itself within a few seconds."""
    run.finished.wait()
    time.sleep(HANGUP_GRACE_S)
    os._exit(exits.SIGNAL_EXIT[signal.SIGHUP])


def detach_terminal() -> None:
    """The terminal is gone (SIGHUP): writes to it would fail and reads see end-of-file at once.
    Point standard output and error at /dev/null and standard input at a pipe nobody writes to,
    so the run can finish and write its files unattended."""
    if _detached:
        return
    for stop_reading in stdin_readers:
        stop_reading()  # before fd 0 becomes the pipe (a read there would block)
    read_end, write_end = os.pipe()
    _detached.append(write_end)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(read_end, 0)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(read_end)
    os.close(devnull)
