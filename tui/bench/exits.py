"""streambench's exit codes: one per meaning, in one table (docs/exit-codes.md shows it).

Every command returns one of these; a script can tell a typo from a broker that cannot be
reached, a run cut short from one that ran out of memory, and a failed suite cell from both."""

from __future__ import annotations

import signal
from dataclasses import dataclass

from loadgen.core.errors import DriverError, StackError, StreambenchError

OK = 0
INTERNAL = 1  # a bug: the message says so, STREAMBENCH_DEBUG=1 shows the traceback
USAGE = 2  # the command line, a workload, a TARGET or one of its values is refused
PLATFORM = 3  # a broker cannot be started or reached, or died during the run
LOW_MEMORY = 4  # the run stopped itself: the machine's available memory fell under the floor
CELL_FAILED = 5  # a suite ran, but one of its cells failed
INSTALL = 6  # the installation is not whole: a package shadowed, the report extra missing
BROKEN_PIPE = 141  # the reader of the output went away (`streambench platforms | head`)
# a run cut short by a signal exits 128 + its number, as a shell reports it; `q` in the
# dashboard ends a run early as Ctrl-C does
SIGNAL_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}
USER_STOP = SIGNAL_EXIT[signal.SIGINT]


@dataclass(frozen=True)
class ExitCode:
    code: str  # "2", or "130, 143, 129" for the signals
    meaning: str
    when: str  # what gives it, as a user meets it


TABLE = (
    ExitCode(str(OK), "success", "the command did what it was asked; a run measured to its end"),
    ExitCode(str(INTERNAL), "internal error",
             "a bug in streambench: one line naming the exception (STREAMBENCH_DEBUG=1 for the "
             "traceback)"),
    ExitCode(str(USAGE), "usage error",
             "an unknown command or flag, a bad value (`--duration 30x`), a workload file or "
             "TARGET option refused, `streambench` alone without a terminal, a `--cluster` that "
             "cannot be used (nothing answers, another Ray version, too few nodes)"),
    ExitCode(str(PLATFORM), "platform cannot start or be reached",
             "a broker that does not start (its port taken, Java or redis-server missing), an "
             "address nothing answers at, a broker that died during the run without a fault "
             "asking for it; `doctor` when the demo (`make demo`) cannot run here"),
    ExitCode(", ".join(str(c) for c in SIGNAL_EXIT.values()), "run cut short",
             "128 + the signal: 130 for Ctrl-C or `q` in the dashboard, 143 for SIGTERM, 129 "
             "for a hang-up (a dropped SSH session); the files written so far are complete"),
    ExitCode(str(LOW_MEMORY), "low memory",
             "the run stopped itself because the machine's available memory fell under "
             "--min-free-memory; its files are complete"),
    ExitCode(str(CELL_FAILED), "cell failed",
             "`suite`: every cell was tried and at least one failed (suite.json says why)"),
    ExitCode(str(INSTALL), "installation incomplete",
             "`doctor` finds a package shadowed by another distribution; `report` or --report "
             "without the report extra"),
    ExitCode(str(BROKEN_PIPE), "output closed",
             "the program reading streambench's output ended first (`| head`)"),
)


class InstallError(StreambenchError):
    """Something streambench needs is not installed (the report extra), or shadowed."""


def for_error(exc: StreambenchError) -> int:
    """The exit code of an error a user can cause."""
    if isinstance(exc, StackError | DriverError):
        return PLATFORM
    if isinstance(exc, InstallError):
        return INSTALL
    return USAGE


def markdown() -> str:
    """The table as docs/exit-codes.md shows it."""
    lines = ["| code | meaning | when |", "|---|---|---|"]
    lines += [f"| {e.code} | {e.meaning} | {e.when} |" for e in TABLE]
    return "\n".join(lines)
