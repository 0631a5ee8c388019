"""HdrHistogram interval logs: one `hdr/<target>.hlog` per target of a run, in HdrHistogram's
V2 log format, which HistogramLogProcessor, HistogramLogAnalyzer and hdr-plot open.

Written from the ticks the run already publishes (a bus subscriber beside the Parquet sink, or
the ticks of a recorded run read back): no second recording of any latency. Each tick gives
one line per series, `Tag=e2e`, `Tag=publish` and `Tag=publish-delay`, with the interval's
start in seconds after the log's BaseTime, its length, its largest value and the interval's
histogram, compressed and in base64.

Values are nanoseconds; the Interval_Max column is in milliseconds (values divided by 10^6,
as HdrHistogram's own writer and tools assume by default). The conversion is exact: an
HdrHistogram of 3 significant digits with a lowest discernible value of 1 has the same
buckets as streambench's histogram (loadgen.core.histogram: each value below 2048 its own
bucket, then 1024 sub-buckets per power of two) and numbers them the same way, so every
bucket's count lands in the one bucket of the same values. Percentiles read from the log
carry the buckets' width (< 0.1 % of the value) and the reading tool's percentile definition.

The lines are written here: hdrhistogram's own log writer (0.10.8) cannot write a StartTime
line (its output_start_time takes the milliseconds it is given as seconds for the date, a
ValueError for year 58888, and given seconds calls `datetime.iso_format`, which does not
exist), writes no tags, and floors the Interval_Max column."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from hdrh.histogram import HdrHistogram

from loadgen.core.errors import OutputError
from loadgen.core.histogram import EXACT_LIMIT, MAX_VALUE, N_BUCKETS, SUB_BITS, HistogramSnapshot
from loadgen.core.ticks import Phase, Tick

LOG_DIR = "hdr"
SUFFIX = ".hlog"
SIGNIFICANT_DIGITS = 3
MAX_VALUE_UNIT_RATIO = 1e6  # Interval_Max in milliseconds of nanosecond values
# the log's tag of each series and the tick's histogram it comes from
SERIES = (("e2e", "e2e_latency"), ("publish", "publish_latency"),
          ("publish-delay", "publish_delay"))
LOG_FORMAT_VERSION = "1.3"  # the version HdrHistogram 2.2's writer states
LEGEND = '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"'


def new_histogram() -> HdrHistogram:
    """An empty HdrHistogram laid out like streambench's histogram (checked, as the exact
    conversion rests on it)."""
    hist = HdrHistogram(1, MAX_VALUE, SIGNIFICANT_DIGITS)
    if (hist.unit_magnitude, hist.sub_bucket_half_count_magnitude,
            hist.sub_bucket_count) != (0, SUB_BITS, EXACT_LIMIT) or hist.counts_len < N_BUCKETS:
        raise RuntimeError("this hdrhistogram lays its buckets out otherwise than streambench's "
                           "histogram: the interval logs cannot be converted exactly")
    return hist


def encoded(hist: HdrHistogram, snap: HistogramSnapshot) -> str:
    """The compressed V2 encoding, in base64, of exactly the counts of `snap`, made with
    `hist` (from new_histogram, all zeros, as it is left again): streambench's bucket index
    is the HdrHistogram's counts index. Only the snapshot's buckets are written and cleared,
    not the whole 434 kB array."""
    counts = np.ctypeslib.as_array(hist.counts)
    if not snap.total:  # the encoder then writes no counts (reset() would loop in Python)
        hist.set_internal_tacking_values(-1, -1, 0)
        return str(hist.encode().decode("ascii"))
    counts[snap.index] = snap.count
    hist.set_internal_tacking_values(int(snap.index.min()), int(snap.index.max()), snap.total)
    try:
        return str(hist.encode().decode("ascii"))
    finally:
        counts[snap.index] = 0


def header(target: str, start_ms: int, run_id: str = "") -> str:
    """The log's comment lines and legend: StartTime and BaseTime both the target's load start
    (seconds since the epoch, as HdrHistogram's writer gives them, with the UTC date)."""
    seconds = start_ms / 1000
    date = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime(seconds))
    about = f"streambench interval log of target {target}" + (f", run {run_id}" if run_id else "")
    tags = ", ".join(tag for tag, _ in SERIES)
    return (f"#[{about}: tags {tags}; values in nanoseconds, Interval_Max in milliseconds]\n"
            f"#[Histogram log format version {LOG_FORMAT_VERSION}]\n"
            f"#[StartTime: {seconds:.3f} (seconds since epoch), {date}]\n"
            f"#[BaseTime: {seconds:.3f} (seconds since epoch)]\n"
            f"{LEGEND}\n")


def tick_times_us(tick: Tick) -> tuple[int, int, int]:
    """(the load's start, the interval's start, its end), integer microseconds since the epoch:
    what the run files keep, so a log written from them is the live run's, line for line. The
    first interval can begin a little before the load (it runs from the last tick of the
    start-up): the load's start is then taken at the interval's, so that no interval of the
    log starts before its StartTime (the readers leave such an interval out)."""
    end = tick.time_ns // 1000
    begin = end - round(tick.interval_s * 1e6)
    return min(end - round(tick.elapsed_s * 1e6), begin), begin, end


def interval_lines(hist: HdrHistogram, tick: Tick, start_ms: int) -> str:
    """The tick's three lines, one per series."""
    _, begin_us, end_us = tick_times_us(tick)
    offset = (begin_us - start_ms * 1000) / 1e6
    length = (end_us - begin_us) / 1e6
    lines = []
    for tag, attr in SERIES:
        snap: HistogramSnapshot = getattr(tick, attr)
        payload = encoded(hist, snap)
        top = snap.max / MAX_VALUE_UNIT_RATIO if snap.total else 0.0
        lines.append(f"Tag={tag},{offset:.3f},{length:.3f},{top:.3f},{payload}\n")
    return "".join(lines)


def file_names(labels: Iterable[str]) -> dict[str, str]:
    """Each target's log file name: its label with every run of other characters than
    letters, digits, '.', '_' and '-' made one '_' (no leading dot), `-2`, `-3` … after a
    name an earlier label took."""
    names: dict[str, str] = {}
    taken: set[str] = set()
    for label in labels:
        base = re.sub(r"[^A-Za-z0-9._-]+", "_", label).lstrip(".")[:100] or "_"
        name, n = base, 1
        while name.lower() in taken:
            n += 1
            name = f"{base}-{n}"
        taken.add(name.lower())
        names[label] = name + SUFFIX
    return names


class IntervalLogs:
    """A bus subscriber writing each target's interval log into `out_dir`, a tick at a time:
    a target's file is opened at its first tick (its StartTime is that tick's load start),
    each tick's lines are flushed as they are written, and close() closes the files. A tick
    whose phase differs from the target's previous one is preceded by a comment line naming
    the phase. Raises OutputError when a file cannot be written."""

    def __init__(self, out_dir: Path, run_id: str = "") -> None:
        self.out_dir = Path(out_dir)
        self.run_id = run_id
        self._hist = new_histogram()
        self._files: dict[str, tuple[TextIO, int]] = {}  # target → (file, start in ms)
        self._phase: dict[str, Phase] = {}
        self._names: dict[str, str] = {}
        self.paths: list[Path] = []

    def __call__(self, item: object) -> None:
        if isinstance(item, Tick):
            self.add(item)

    def _open(self, tick: Tick) -> tuple[TextIO, int]:
        self._names = file_names([*self._names, tick.target])
        path = self.out_dir / self._names[tick.target]
        start_ms = tick_times_us(tick)[0] // 1000
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            log = path.open("w", encoding="ascii")
            log.write(header(tick.target, start_ms, self.run_id))
        except OSError as exc:
            raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None
        self.paths.append(path)
        return log, start_ms

    def add(self, tick: Tick) -> None:
        if tick.target not in self._files:
            self._files[tick.target] = self._open(tick)
        log, start_ms = self._files[tick.target]
        text = interval_lines(self._hist, tick, start_ms)
        if self._phase.get(tick.target) is not tick.phase:
            self._phase[tick.target] = tick.phase
            begin = (tick_times_us(tick)[1] - start_ms * 1000) / 1e6
            text = f"#[phase {tick.phase.value} from {begin:.3f} s]\n" + text
        try:
            log.write(text)
            log.flush()
        except OSError as exc:
            raise OutputError(f"cannot write {log.name}: {exc.strerror or exc}") from None

    def close(self) -> None:
        files, self._files = self._files, {}
        failed: OutputError | None = None
        for log, _ in files.values():
            try:
                log.close()
            except OSError as exc:
                failed = failed or OutputError(f"cannot write {log.name}: {exc.strerror or exc}")
        if failed is not None:
            raise failed


class WithIntervalLogs:
    """The run's recorder (the Parquet sink) and its interval logs as one recorder: every
    item goes to both, and closing closes both."""

    def __init__(self, recorder: Any, logs: IntervalLogs) -> None:
        self.recorder = recorder
        self.logs = logs

    def __call__(self, item: object) -> None:
        self.recorder(item)
        self.logs(item)

    def close(self) -> None:
        try:
            self.recorder.close()
        finally:
            self.logs.close()


def with_interval_logs(factory: Callable[..., Any]) -> Callable[..., WithIntervalLogs]:
    """A recorder factory (the run's: run directory, run id, raw=) whose recorders also write
    the interval logs into the run directory's hdr/."""

    def make(run_dir: Path, run_id: str, *, raw: bool) -> WithIntervalLogs:
        return WithIntervalLogs(factory(run_dir, run_id, raw=raw),
                                IntervalLogs(Path(run_dir) / LOG_DIR, run_id))

    return make
