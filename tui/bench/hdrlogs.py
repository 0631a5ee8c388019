"""`streambench report --hdr-log`: the HdrHistogram interval logs of recorded runs, written
from their ticks and latency tables by the same writer a live run with --hdr-log uses, so the
two give the same lines."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from analysis.hdrlog import LOG_DIR, IntervalLogs
from loadgen.core.ticks import Tick
from tui.bench.recording import load_recording


def write_run_logs(run_dir: Path, out_dir: Path) -> list[Path]:
    """Write one run's logs into `out_dir`; the files written, in target order."""
    recording = load_recording(run_dir)
    logs = IntervalLogs(out_dir, str(recording.meta.get("run_id") or ""))
    try:
        for item in recording.items:
            if isinstance(item, Tick):
                logs.add(item)
    finally:
        logs.close()
    return logs.paths


def write_logs(run_dirs: Sequence[Path], out: Path | None) -> list[Path]:
    """Each run's logs into its own hdr/ folder, or with `out` into that folder (one run) or
    into `out/<run directory name>/` (several)."""
    written = []
    for run_dir in run_dirs:
        run_dir = Path(run_dir)
        target = (run_dir / LOG_DIR if out is None
                  else out if len(run_dirs) == 1 else out / run_dir.name)
        written += write_run_logs(run_dir, target)
    return written
