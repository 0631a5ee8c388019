"""Suites: a matrix of targets × workloads run back to back, each cell a run of its own (its own
run directory and brokers, `streambench run … --headless` in a child process, so that a cell
that fails is recorded and the suite goes on), resumable after an interruption, ending with one
comparison report over every cell that ran.

A suite is a YAML file (bundled ones by name, see `streambench suites`):

    name: kafka-modes
    description: one line
    source: where its published figures come from (optional)
    targets: [kafka, kafka-zk]          # used when the command line names none
    workloads: [kafka-tc1, kafka-tc2]   # bundled names, files (relative to the suite), or
                                        # mappings of OMB fields
    options: [--processes, "1"]         # extra `streambench run` flags for every cell

`--scale F` multiplies every cell's durations and fixed rates by F (0 < F ≤ 1) for small
machines; the suite's record and report say so. The suite directory holds `suite.json` (the
matrix and each cell's state), one directory per cell, and the report.

The loop (SuiteRun) tells what happens as events (SuiteEvent): `print_event` here writes them
as the headless lines, the dashboard (tui.suiteview) draws them; neither runs cells itself."""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from loadgen.core.errors import WorkloadError
from loadgen.core.workload import Workload, load_workload, parse_workload, shown
from loadgen.platforms import PLATFORMS
from tui.bench import exits

SUITE_FORMAT = 1
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
MAX_CELLS = 1000


@dataclasses.dataclass(frozen=True)
class Suite:
    name: str
    description: str
    source: str
    targets: tuple[str, ...]
    workloads: tuple[tuple[str, Workload], ...]  # (label, workload)
    options: tuple[str, ...]


def bundled_suites() -> list[str]:
    folder = resources.files("tui") / "suites"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def _read(spec: str) -> tuple[Any, str, str | None]:
    """(parsed YAML, what to call it in messages, the folder relative paths start from)."""
    if os.path.isfile(spec):
        if os.path.getsize(spec) > 1024 * 1024:
            raise WorkloadError(f"suite file {shown(spec, 100)} is over 1 MiB")
        with open(spec, "rb") as f:
            data = f.read()
        base: str | None = os.path.dirname(os.path.abspath(spec))
        src = shown(spec, 100)
    elif _NAME.fullmatch(spec) and (resources.files("tui") / "suites" / f"{spec}.yaml").is_file():
        data = (resources.files("tui") / "suites" / f"{spec}.yaml").read_bytes()
        base, src = None, spec
    else:
        names = bundled_suites()
        close = difflib.get_close_matches(spec, names, n=1) if len(spec) <= 100 else []
        hint = f" (did you mean {close[0]}?)" if close else f"; bundled: {', '.join(names)}"
        raise WorkloadError(f"unknown suite {shown(spec, 100, quote=True)}: no such file and no "
                            f"bundled suite of that name{hint}")
    try:
        doc = yaml.safe_load(data.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise WorkloadError(f"{src}: not a valid suite YAML file: {shown(first, 120)}") from None
    return doc, src, base


def load_suite(spec: str) -> Suite:
    doc, src, base = _read(spec)
    if not isinstance(doc, dict):
        raise WorkloadError(f"{src}: a suite must be a YAML mapping (name, targets, workloads)")
    known = {"name", "description", "source", "targets", "workloads", "options", "published"}
    unknown = [k for k in doc if k not in known]
    if unknown:
        raise WorkloadError(f"{src}: unknown suite key {shown(unknown[0], quote=True)}; "
                            f"keys: {', '.join(sorted(known))}")
    name = doc.get("name", Path(spec).stem)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise WorkloadError(f"{src}: name must be 1-100 letters, digits, '.', '_' or '-'")

    def texts(key: str) -> tuple[str, ...]:
        value = doc.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise WorkloadError(f"{src}: {key} must be a list of strings")
        return tuple(value)

    workloads: list[tuple[str, Workload]] = []
    entries = doc.get("workloads")
    if not isinstance(entries, list) or not entries:
        raise WorkloadError(f"{src}: workloads must be a non-empty list")
    for i, entry in enumerate(entries):
        if isinstance(entry, str):
            path = os.path.join(base, entry) if base and not os.path.isabs(entry) else entry
            w = load_workload(path if base and os.path.isfile(path) else entry)
        elif isinstance(entry, dict):
            w = parse_workload(entry, f"{src}: workloads[{i}]")
        else:
            raise WorkloadError(f"{src}: workloads[{i}] must be a workload name, a file or a "
                                "mapping of OMB fields")
        workloads.append((w.name, w))
    labels = [label for label, _ in workloads]
    if len(set(labels)) != len(labels):
        raise WorkloadError(f"{src}: two workloads share a name: {', '.join(labels)}")
    return Suite(name=name, description=str(doc.get("description", "")),
                 source=str(doc.get("source", "")), targets=texts("targets"),
                 workloads=tuple(workloads), options=texts("options"))


def scaled(w: Workload, scale: float) -> Workload:
    """Durations and a fixed rate times `scale` (at least 1 s and 1 msg/s), scheduled times
    too; the name says so, and with it every run directory and report of the cell."""
    if scale == 1.0:
        return w
    schedule = tuple(dataclasses.replace(i, at_s=None if i.at_s is None else i.at_s * scale,
                                         rate=None if i.rate is None else max(1.0, i.rate * scale)
                                         if i.rate else i.rate) for i in w.schedule)
    return dataclasses.replace(
        w, name=f"{w.name}-scaled-x{scale:g}", duration_s=max(1.0, w.duration_s * scale),
        warmup_s=w.warmup_s * scale,
        rate=max(1.0, w.rate * scale) if w.rate else 0.0, schedule=schedule,
        backlog_bytes=w.backlog_bytes * scale)


def _workload_yaml(w: Workload) -> str:
    doc = w.to_omb()
    return yaml.safe_dump(doc, sort_keys=False)


def _cell_dir(root: Path, index: int, target: str, workload: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{target}--{workload}")[:120]
    return root / "cells" / f"{index:03d}-{safe}"


# -- progress: what a suite tells the one watching it ------------------------------------------
# The headless printer below and the dashboard (tui.suiteview) are the two consumers of these;
# both get them from the same loop, in the thread that runs it.

@dataclasses.dataclass(frozen=True)
class SuiteStarted:
    name: str
    scale: float
    root: Path
    cells: tuple[dict[str, Any], ...]  # copies of suite.json's cells, in order
    planned_s: tuple[float, ...]  # each cell's warm-up and measuring time, as scaled


@dataclasses.dataclass(frozen=True)
class CellChanged:
    """A cell started (state running), ended (done, failed, stopped) or was done before."""

    index: int
    n: int
    cell: dict[str, Any]  # a copy of its record in suite.json, state as now
    before: bool = False  # done in an earlier go at the suite (--resume)


@dataclasses.dataclass(frozen=True)
class CellOutput:
    """A line the running cell wrote: a status line (stdout) or a progress message (stderr)."""

    index: int
    line: str
    stderr: bool = False


@dataclasses.dataclass(frozen=True)
class SuiteEnded:
    name: str
    root: Path
    n: int
    done: int
    failed: int
    stopped: bool


@dataclasses.dataclass(frozen=True)
class ReportStep:
    text: str


@dataclasses.dataclass(frozen=True)
class ReportWritten:
    path: Path
    verdicts: tuple[str, ...]  # one line per published finding
    published: Path | None


SuiteEvent = SuiteStarted | CellChanged | CellOutput | SuiteEnded | ReportStep | ReportWritten
Progress = Callable[[SuiteEvent], None]


def cell_name(event: CellChanged) -> str:
    return f"cell {event.index + 1}/{event.n} {event.cell['target']} × {event.cell['workload']}"


def print_event(event: SuiteEvent) -> None:
    """The headless view of a suite: one line per cell started and ended, on stdout."""
    line = None
    if isinstance(event, SuiteStarted):
        note = f" (scaled ×{event.scale:g})" if event.scale != 1.0 else ""
        line = f"suite {event.name}{note}: {len(event.cells)} cells in {event.root}"
    elif isinstance(event, CellChanged):
        cell = event.cell
        if event.before:
            line = f"{cell_name(event)}: done before"
        elif cell["state"] == "running":
            line = f"{cell_name(event)}: running"
        else:
            line = (f"{cell_name(event)}: {cell['state']}"
                    + (f" ({cell['error']})" if cell["state"] != "done" else "")
                    + f", {cell['seconds']:.0f} s")
    elif isinstance(event, SuiteEnded):
        line = (f"suite {event.name}: {event.done} of {event.n} cells done, {event.failed} failed"
                + (f", stopped: resume with --resume {event.root}" if event.stopped else ""))
    elif isinstance(event, ReportStep):
        sys.stderr.write(f"report: {event.text}\n")
        sys.stderr.flush()
    elif isinstance(event, ReportWritten):
        lines = [f"report: {event.path}", *event.verdicts]
        if event.published is not None:
            lines.append(f"published figures beside the measured ones: {event.published}")
        line = "\n".join(lines)
    if line is not None:
        print(line, flush=True)


# -- running a suite ---------------------------------------------------------------------------

OUTPUT_GRACE_S = 5.0  # how long a cell's output is read after it exited (a leftover holding it)
MAX_ERRORS = 4 * 1024 * 1024  # of a cell's stderr kept for its last line (the log has it whole)


class SuiteRun:
    """A suite ready to run (its directory and suite.json written): `run_cells` runs the cells
    not done, telling a Progress what happens; `request_stop` (a signal handler, or `q` in the
    dashboard) lets the running cell finish its files and stops the suite after it."""

    def __init__(self, suite: Suite, root: Path, state: dict[str, Any]) -> None:
        self.suite = suite
        self.root = root
        self.state = state
        self.cells: list[dict[str, Any]] = state["cells"]
        self.workloads = {label: scaled(w, self.scale) for label, w in suite.workloads}
        self.stop: list[int] = []  # the signals received, first first
        self.finished = threading.Event()  # set once the cells are over and suite.json saved
        self.ended: SuiteEnded | None = None  # how the cells went, once over
        self.report_written: ReportWritten | None = None
        self._child: subprocess.Popen[bytes] | None = None
        self._told: set[int] = set()  # pids of the cells the first stop was passed on to
        # options every cell's run takes from the suite's command line (--metrics: each cell
        # serves its run at the same address in turn)
        self.cell_options: list[str] = []

    @property
    def scale(self) -> float:
        return float(self.state["scale"])

    def planned_s(self, index: int) -> float:
        w = self.workloads[self.cells[index]["workload"]]
        return w.warmup_s + w.duration_s

    def save(self) -> None:
        path = self.root / "suite.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.state, indent=2))
        os.replace(tmp, path)

    def request_stop(self, sig: int, _frame: object = None) -> None:
        """Stop after the running cell, which is told as the command line would tell it: it
        finishes its files and exits (a second request skips its drain). Safe in a signal
        handler and from another thread."""
        self.stop.append(sig)
        self._tell(self._child, sig)

    def _tell(self, proc: subprocess.Popen[bytes] | None, sig: int) -> None:
        if proc is None or proc.poll() is not None:
            return
        self._told.add(proc.pid)
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGINT if sig == signal.SIGINT else signal.SIGTERM)

    @property
    def exit_code(self) -> int:
        """0 when every cell ran, exits.CELL_FAILED when a cell failed (the others ran),
        130/143/129 when stopped by a signal (or `q`, as SIGINT)."""
        if self.stop:
            return exits.SIGNAL_EXIT.get(signal.Signals(self.stop[0]), exits.USER_STOP)
        return exits.CELL_FAILED if any(c["state"] == "failed" for c in self.cells) else exits.OK

    def run_cells(self, progress: Progress) -> None:
        try:
            self._run_cells(progress)
        finally:
            self.finished.set()

    def _run_cells(self, progress: Progress) -> None:
        n = len(self.cells)
        progress(SuiteStarted(self.suite.name, self.scale, self.root,
                              tuple(dict(c) for c in self.cells),
                              tuple(self.planned_s(k) for k in range(n))))
        for k, cell in enumerate(self.cells):
            if self.stop:
                break
            if cell["state"] == "done":
                progress(CellChanged(k, n, dict(cell), before=True))
                continue
            self._run_cell(k, cell, progress)
            self.save()
        self.state["ended" if not self.stop else "stopped"] = datetime.now(UTC).isoformat()
        self.save()
        self.ended = SuiteEnded(self.suite.name, self.root, n,
                                sum(c["state"] == "done" for c in self.cells),
                                sum(c["state"] == "failed" for c in self.cells), bool(self.stop))
        progress(self.ended)

    def _run_cell(self, k: int, cell: dict[str, Any], progress: Progress) -> None:
        cell_dir = _cell_dir(self.root, k, cell["target"], cell["workload"])
        if cell_dir.exists():  # a cell cut short: run it again from the start
            shutil.rmtree(cell_dir)
        cell_dir.parent.mkdir(parents=True, exist_ok=True)
        wfile = self.root / "workloads" / f"{cell['workload']}.yaml"
        wfile.parent.mkdir(exist_ok=True)
        wfile.write_text(_workload_yaml(self.workloads[cell["workload"]]))
        cmd = [sys.executable, "-m", "tui.cli", "run", cell["target"], "--workload", str(wfile),
               "--headless", "--out", str(cell_dir), *self.suite.options, *self.cell_options]
        n = len(self.cells)
        progress(CellChanged(k, n, {**cell, "state": "running"}))
        started = time.monotonic()
        with open(self.root / f"cell-{k:03d}.log", "wb") as log:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    stdin=subprocess.DEVNULL)
            self._child = proc
            if self.stop and proc.pid not in self._told:  # a stop that came as it started
                self._tell(proc, self.stop[-1])
            try:
                err = _follow(proc, log, lambda line, stderr: progress(CellOutput(k, line, stderr)))
            finally:
                self._child = None
        cell.update(run_dir=str(cell_dir), exit_code=proc.returncode,
                    seconds=round(time.monotonic() - started, 1))
        if proc.returncode == 0:
            cell["state"] = "done"
            cell.pop("error", None)
        else:
            cell["state"] = "stopped" if self.stop else "failed"
            lines = [ln for ln in err.strip().splitlines() if ln.strip()]
            cell["error"] = lines[-1][:300] if lines else f"exit code {proc.returncode}"
        progress(CellChanged(k, n, dict(cell)))

    def write_report(self, progress: Progress) -> None:
        """The comparison report over every cell done, and the published figures beside the
        measured ones; nothing when the suite was stopped or no cell is done."""
        done = [c for c in self.cells if c["state"] == "done"]
        if not done or self.stop:
            return
        from tui.bench.reporting import write_report

        path = write_report([c["run_dir"] for c in done], self.root / "report", None,
                       progress=lambda text: progress(ReportStep(text)))
        self.state["report"] = str(path)
        self.save()
        import pyarrow.parquet as pq

        rows = pq.read_table(path.parent / "summary.parquet").to_pylist()
        lines = compare_published(self.state, rows)
        published = None
        if lines:
            published = self.root / "published.md"
            published.write_text("\n".join(lines))
        self.report_written = ReportWritten(
            path, tuple(line for line in lines if line.startswith("- ")), published)
        progress(self.report_written)


def _follow(proc: subprocess.Popen[bytes], log: BinaryIO,
            on_line: Callable[[str, bool], None]) -> str:
    """Copy a cell's status lines to its log as they come and hand each (and each line of its
    errors) to `on_line`; its errors go to the log after its output, as one block. Returns its
    errors. Ends when the cell has closed both, or OUTPUT_GRACE_S after it exited (a process
    it left behind may hold them open)."""
    assert proc.stdout is not None and proc.stderr is not None
    streams = {proc.stdout.fileno(): False, proc.stderr.fileno(): True}
    pending = dict.fromkeys(streams, b"")
    errors = bytearray()
    exited_at: float | None = None
    with selectors.DefaultSelector() as selector:
        for fd in streams:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            for key, _ in selector.select(timeout=0.5):
                fd = int(key.fd)
                chunk = os.read(fd, 65536)
                if not chunk:
                    selector.unregister(fd)
                    continue
                if streams[fd]:
                    errors += chunk
                    del errors[:-MAX_ERRORS]
                else:
                    log.write(chunk)
                    log.flush()
                *lines, pending[fd] = (pending[fd] + chunk).split(b"\n")
                for raw in lines:
                    text = raw.decode("utf-8", "replace").rstrip()
                    if text:
                        on_line(text, streams[fd])
            if proc.poll() is not None:
                exited_at = exited_at if exited_at is not None else time.monotonic()
                if time.monotonic() - exited_at > OUTPUT_GRACE_S:
                    break
    proc.wait()
    log.write(bytes(errors))
    return errors.decode("utf-8", "replace")


def prepare_suite(spec: str, targets: list[str], out: Path | None, scale: float,
                  resume: Path | None) -> SuiteRun:
    """A suite checked and its directory ready (suite.json written), or --resume's suite read
    back; raises WorkloadError (one line) before anything runs."""
    if not 0 < scale <= 1:
        raise WorkloadError(f"--scale must be more than 0 and at most 1 (got {scale:g})")
    if resume is not None:
        try:
            state = json.loads((resume / "suite.json").read_text())
        except (OSError, ValueError) as exc:
            raise WorkloadError(f"--resume {shown(str(resume), 100)}: not a suite directory "
                                f"({type(exc).__name__})") from None
        root = resume
        suite = load_suite(state["suite_spec"])
        for key in ("ended", "stopped"):  # this go at it ends anew
            state.pop(key, None)
    else:
        suite = load_suite(spec)
        chosen = targets or list(suite.targets)
        if not chosen:
            raise WorkloadError(f"suite {suite.name} names no targets: give them on the command line")
        from loadgen.platforms import resolve_target

        for t in chosen:  # bad targets are refused before anything runs
            resolve_target(t)
        cells = [{"target": t, "workload": label, "state": "pending"}
                 for label, _ in suite.workloads for t in chosen]
        if len(cells) > MAX_CELLS:
            raise WorkloadError(f"suite {suite.name}: {len(cells)} cells, at most {MAX_CELLS}")
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        root = out or Path("runs") / f"suite-{stamp}-{suite.name}"
        if root.exists() and any(root.iterdir()):
            raise WorkloadError(f"suite directory {shown(str(root), 100)} exists and is not empty "
                                "(use --resume to go on with it)")
        root.mkdir(parents=True, exist_ok=True)
        state = {"format": SUITE_FORMAT, "suite": suite.name, "suite_spec": str(
            Path(spec).resolve()) if os.path.isfile(spec) else spec,
                 "description": suite.description, "source": suite.source, "scale": scale,
                 "scaled": scale != 1.0, "started": datetime.now(UTC).isoformat(), "cells": cells}
    run = SuiteRun(suite, root, state)
    run.save()
    return run


def run_suite(spec: str, targets: list[str], out: Path | None, scale: float,
              resume: Path | None, report: bool, cell_options: Sequence[str] = ()) -> int:
    """Run (or resume) a suite headless, one line per cell on stdout; returns the exit code
    (SuiteRun.exit_code). INT, TERM and HUP stop it after the running cell."""
    run = prepare_suite(spec, targets, out, scale, resume)
    run.cell_options = list(cell_options)
    old = {s: signal.signal(s, run.request_stop) for s in exits.SIGNAL_EXIT}
    try:
        run.run_cells(print_event)
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    if report:
        run.write_report(print_event)
    return run.exit_code


# -- published figures beside the measured ones ------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Finding:
    """One published comparison: a metric of one workload on several platforms."""

    workload: str
    metric: str  # a column of the report's summary table, e.g. e2e_mean_ms, consume_msg_s
    values: dict[str, float]  # platform -> the published figure
    lower_is_better: bool
    text: str


def _findings(spec: str) -> tuple[list[Finding], str]:
    doc, src, _ = _read(spec)
    entries = doc.get("published", []) if isinstance(doc, dict) else []
    if not isinstance(entries, list):
        raise WorkloadError(f"{src}: published must be a list")
    found = []
    for i, e in enumerate(entries):
        try:
            values = {str(k): float(v) for k, v in e["values"].items()}
            found.append(Finding(str(e["workload"]), str(e["metric"]), values,
                                 bool(e.get("lower_is_better", True)), str(e.get("finding", ""))))
        except (KeyError, TypeError, ValueError, AttributeError):
            raise WorkloadError(f"{src}: published[{i}] needs workload, metric and values "
                                "(platform: number)") from None
    return found, str(doc.get("source", "")) if isinstance(doc, dict) else ""


def _platform(target: str) -> str:
    return re.split(r"[:@]", target, maxsplit=1)[0]


def compare_published(state: dict[str, Any], summary_rows: list[dict[str, Any]]) -> list[str]:
    """Markdown lines: per published finding, the published and measured figures per platform,
    the ranking in each, the ratios to the first platform, and a verdict."""
    findings, source = _findings(state["suite_spec"])
    if not findings:
        return []
    by_run = {row["run_id"]: row for row in summary_rows}
    measured: dict[tuple[str, str], dict[str, Any]] = {}  # (workload, platform) -> summary row
    for cell in state["cells"]:
        if cell["state"] != "done":
            continue
        run_id = json.loads((Path(cell["run_dir"]) / "run.json").read_text())["run_id"]
        if run_id in by_run:
            measured[(cell["workload"], _platform(cell["target"]))] = by_run[run_id]
    # a published figure of a platform compares with its own cells, else with the first cell of
    # a platform published under its name (Platform.published_as: kafka-zk for a study's Kafka)
    for (workload, platform), row in list(measured.items()):
        record = PLATFORMS.get(platform)
        if record is not None and record.published_as:
            measured.setdefault((workload, record.published_as), row)
    lines = ["# Published figures beside the measured ones", ""]
    if source:
        lines += [f"Published: {source}. Absolute figures depend on the machine; what is compared "
                  "is the shape: the ranking of the platforms and the ratios between them.", ""]
    lines += ["| workload | metric | platform | published | measured | published ratio | "
              "measured ratio |", "|---|---|---|---|---|---|---|"]
    verdicts = []
    for f in findings:
        platforms = [p for p in f.values if (f.workload, p) in measured]
        raw = {p: measured[(f.workload, p)].get(f.metric) for p in platforms}
        got = {p: float(v) for p, v in raw.items() if v is not None}
        first = next(iter(f.values))
        for p, published in f.values.items():
            m = got.get(p)
            pr = published / f.values[first] if f.values[first] else float("nan")
            mr = m / got[first] if m is not None and got.get(first) else None
            lines.append(f"| {f.workload} | {f.metric} | {p} | {published:,.6g} | "
                         f"{'n/a' if m is None else f'{m:,.6g}'} | {pr:.2f} | "
                         f"{'n/a' if mr is None else f'{mr:.2f}'} |")
        if len(got) < len(f.values):
            verdict = "not comparable: not every platform ran"
        elif state.get("scaled"):
            verdict = "not comparable: scaled"
        else:
            order = sorted(f.values, key=f.values.__getitem__, reverse=not f.lower_is_better)
            mine = sorted(got, key=got.__getitem__, reverse=not f.lower_is_better)
            sign = " < " if f.lower_is_better else " > "
            verdict = "reproduced" if order == mine else (
                f"not reproduced: published {sign.join(order)}, measured {sign.join(mine)}")
        about = f": {f.text}" if f.text else ""
        verdicts.append(f"- {f.workload}, {f.metric}{about}: **{verdict}**")
    return [*lines, "", "Verdicts:", "", *verdicts, ""]
