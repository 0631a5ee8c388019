"""The report job: one PySpark job over any number of runs, then every output file.

    report.py RUN_DIR|GLOB... [--out DIR] [--baseline TARGET] [--format md,html,json]
              [--master URL]

The layers, each usable on its own:

- `analysis.runs` finds and checks the run directories (no Spark needed);
- `analysis.compute` runs the Spark aggregations and returns plain dataclasses;
- `analysis.sections` says what the report contains, rendered by `analysis.markdown` and
  `analysis.html`; `analysis.charts` draws the PNG charts, `analysis.omb` writes
  OpenMessaging-Benchmark result files, `analysis.summary` the flat summary table.

`build_report` ties them together. Under `spark-submit analysis/report.py …` the master comes
from spark-submit; the job uses no Python UDFs, so executors need no project code.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run as a script (spark-submit analysis/report.py)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import contextlib
import json
import os
from collections.abc import Sequence
from datetime import UTC, datetime

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from py4j.protocol import Py4JError
from pyspark.errors import PySparkException

from analysis.compute import ReportData, compute_report
from analysis.labels import resolve_baseline, target_labels
from analysis.runs import RunInfo, expand_run_args, load_runs
from analysis.session import Progress, first_line, spark_session
from loadgen.core.errors import OutputError, ReportError

FORMATS: tuple[str, ...] = ("md", "html", "json")


def parse_formats(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """The documents to write, from "md,html,json" (or a list of names); None means all.
    Raises ReportError for an unknown name."""
    if value is None:
        return FORMATS
    names = value.split(",") if isinstance(value, str) else list(value)
    chosen = []
    for name in (n.strip().lower() for n in names):
        if not name:
            continue
        if name not in FORMATS:
            raise ReportError(f"unknown report format {name!r}: choose from {', '.join(FORMATS)}")
        if name not in chosen:
            chosen.append(name)
    if not chosen:
        raise ReportError(f"no report format given: choose from {', '.join(FORMATS)}")
    return tuple(chosen)


def check_baseline(runs: Sequence[RunInfo], baseline: str | None) -> None:
    """Resolve --baseline against the targets the runs' run.json files list, before Spark
    starts: ReportError (one line, with the accepted forms) for a name that matches no target
    or several. Runs that list no targets leave the check to the Spark job, which sees every
    target in the ticks."""
    if baseline is None:
        return
    listed = [run.target_labels() for run in runs]
    if not all(listed):
        return
    keys = [(run.run_id, label) for run, labels in zip(runs, listed, strict=True)
            for label in dict.fromkeys(labels)]
    resolve_baseline(baseline, target_labels(keys))


def default_out_dir(run_dirs: Sequence[Path], now: datetime | None = None) -> Path:
    """Where the report goes without --out: report/ inside the run for one run; for several,
    a new report-<UTC time> folder in the current directory (not next to the runs, where the
    next `runs/*` would take it for a run)."""
    if len(run_dirs) == 1:
        return Path(run_dirs[0]) / "report"
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    candidate = Path(f"report-{stamp}")
    n = 1
    while candidate.exists():
        n += 1
        candidate = Path(f"report-{stamp}-{n}")
    return candidate


def _write_bytes(path: Path, data: bytes) -> None:
    """Write a file under a hidden name and rename it into place."""
    tmp = path.with_name(f".{path.name}.inprogress")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None


def _prepare_out_dir(out_dir: Path) -> None:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputError(
            f"cannot write report directory {out_dir}: it exists and is not a directory"
        ) from None
    except OSError as exc:
        raise OutputError(
            f"cannot write report directory {out_dir}: {exc.strerror or exc}"
        ) from None


def write_outputs(
    data: ReportData, out_dir: Path, formats: Sequence[str], progress: Progress | None = None
) -> Path:
    """Charts, summary table and the documents asked for; returns the main document
    (report.md, else report.html, else the directory)."""
    # imported here: matplotlib takes a moment to load, and the checks before Spark need none
    import pyarrow as pa

    from analysis.charts import render_charts
    from analysis.html import render_html
    from analysis.markdown import render_markdown
    from analysis.omb import omb_result, result_file_name
    from analysis.sections import build_document
    from analysis.summary import summary_table

    say = progress or (lambda _msg: None)
    say("drawing charts")
    charts = render_charts(data)
    for name, png in charts.items():
        _write_bytes(out_dir / "charts" / f"{name}.png", png)
    say("writing summary.parquet and summary.csv")
    table = summary_table(data)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    _write_bytes(out_dir / "summary.parquet", sink.getvalue().to_pybytes())
    sink = pa.BufferOutputStream()
    pacsv.write_csv(table, sink)
    _write_bytes(out_dir / "summary.csv", sink.getvalue().to_pybytes())
    doc = build_document(data)
    main = out_dir
    if "json" in formats:
        say("writing OpenMessaging-Benchmark result files")
        for t in data.targets:
            text = json.dumps(omb_result(data, t), indent=2, allow_nan=False)
            _write_bytes(out_dir / "omb" / result_file_name(t), (text + "\n").encode())
    if "html" in formats:
        say("writing report.html")
        main = out_dir / "report.html"
        _write_bytes(main, render_html(doc, charts).encode())
    if "md" in formats:
        say("writing report.md")
        main = out_dir / "report.md"
        _write_bytes(main, render_markdown(doc).encode())
    return main


def build_report(
    run_dirs: Sequence[Path | str],
    out_dir: Path | None = None,
    master: str | None = None,
    progress: Progress | None = None,
    baseline: str | None = None,
    formats: str | Sequence[str] | None = None,
) -> Path:
    """Read the runs (directories or glob patterns), compute the report with Spark and write
    it into out_dir (None: `default_out_dir`). Returns the main document's path (see
    `write_outputs`). Raises ReportError for bad runs, a bad baseline or format (both checked
    before Spark starts), or a failed Spark job; OutputError when out_dir cannot be written.
    A report directory this call created is removed again when the job fails before writing
    anything.

    When this call starts Spark, the JVM's own output goes to out_dir/spark.log, which is kept
    only when Spark fails."""
    say = progress or (lambda _msg: None)
    say("checking runs")
    dirs = expand_run_args(run_dirs)
    runs = load_runs(dirs)
    chosen = parse_formats(formats)
    check_baseline(runs, baseline)
    out_dir = Path(out_dir) if out_dir is not None else default_out_dir(dirs)
    created = not out_dir.exists()
    _prepare_out_dir(out_dir)
    log_path = out_dir / "spark.log"
    keep_log = False
    try:
        say("starting Spark")
        try:
            spark, own_session = spark_session(master, log_path)
        except ReportError:
            keep_log = True
            raise
        try:
            data = compute_report(spark, runs, say, baseline)
        except (PySparkException, Py4JError) as exc:
            keep_log = log_path.exists() and log_path.stat().st_size > 0
            where = f" (details in {log_path})" if keep_log else ""
            raise ReportError(f"the Spark job failed: {first_line(exc)}{where}") from None
        finally:
            if own_session:
                spark.stop()
    except BaseException:
        if not keep_log:
            log_path.unlink(missing_ok=True)
        if created:
            with contextlib.suppress(OSError):
                out_dir.rmdir()  # only when empty
        raise
    log_path.unlink(missing_ok=True)
    return write_outputs(data, out_dir, chosen, say)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="report.py", description="Write the report of one or more streambench runs."
    )
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR|GLOB",
                        help="run directories, or glob patterns such as 'runs/*'")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="report directory (default: report/ inside the run; a new "
                             "report-<time> folder for several runs)")
    parser.add_argument("--baseline", default=None, metavar="TARGET",
                        help="target the comparison divides by (default: the first)")
    parser.add_argument("--format", default=",".join(FORMATS), metavar="md,html,json",
                        help="documents to write (default: all); charts and summary.parquet "
                             "are always written")
    parser.add_argument("--master", default=None,
                        help="Spark master (default: spark-submit's, else local[*])")
    args = parser.parse_args(argv)

    def progress(msg: str) -> None:
        print(f"report: {msg}", file=sys.stderr, flush=True)

    try:
        path = build_report(args.runs, args.out, args.master, progress, args.baseline,
                            args.format)
    except (ReportError, OutputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
