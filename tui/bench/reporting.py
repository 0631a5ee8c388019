"""The report and its Spark: writing a report of runs, and starting Spark ahead of a run's end
(warmed up, never during the measuring phase) and stopping it after."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tui.bench.doctor import REPORT_INSTALL, REPORT_MODULES, missing_report_modules
from tui.bench.exits import InstallError

if TYPE_CHECKING:
    from analysis.warmup import WarmUp


def write_report(run_dirs: Sequence[Path | str], out: Path | None, master: str | None,
            baseline: str | None = None, formats: str | None = None,
            progress: Callable[[str], None] | None = None) -> Path:
    require_report_extra()
    try:
        from analysis.report import build_report
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] in REPORT_MODULES:
            raise InstallError(_report_extra_message([exc.name or ""])) from None
        raise

    def to_stderr(message: str) -> None:
        sys.stderr.write(f"report: {message}\n")
        sys.stderr.flush()

    progress = progress or to_stderr
    return build_report(run_dirs, out_dir=out, master=master, progress=progress,
                        baseline=baseline, formats=formats)


def start_spark(log: Path, warm: WarmUp | None = None) -> None:
    """Start the report's Spark session ahead of time, and warm it up with a tiny report
    unless `warm` is stopped first (the run's measuring phase began); a failure here is
    reported by the report itself when it tries again."""
    with contextlib.suppress(Exception):
        from analysis.session import spark_session

        spark, _ = spark_session(None, log)
        if warm is not None:
            warm.run(spark)


def stop_spark_session() -> None:
    with contextlib.suppress(Exception):
        from analysis.session import stop_active

        stop_active()


def stop_spark(log: Path) -> None:
    stop_spark_session()
    with contextlib.suppress(OSError):
        log.unlink()


def _report_extra_message(missing: Sequence[str]) -> str:
    names = ", ".join(dict.fromkeys(name.partition(".")[0] for name in missing))
    return f"reports need the report extra ({names} not installed): {REPORT_INSTALL}"


def require_report_extra() -> None:
    """An InstallError naming the install command when PySpark or matplotlib is missing
    (before a run with --report starts, not after it)."""
    missing = missing_report_modules()
    if missing:
        raise InstallError(_report_extra_message(missing))
