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
matrix and each cell's state), one directory per cell, and the report."""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from loadgen.errors import WorkloadError
from loadgen.workload import Workload, load_workload, parse_workload, shown

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


def run_suite(spec: str, targets: list[str], out: Path | None, scale: float,
              resume: Path | None, report: bool) -> int:
    """Run (or resume) a suite; returns the exit code: 0 when every cell ran, 4 when a cell
    failed (the others ran), 130/143/129 when stopped by a signal."""
    if not 0 < scale <= 1:
        raise WorkloadError(f"--scale must be more than 0 and at most 1 (got {scale:g})")
    if resume is not None:
        state_path = resume / "suite.json"
        try:
            state = json.loads(state_path.read_text())
        except (OSError, ValueError) as exc:
            raise WorkloadError(f"--resume {shown(str(resume), 100)}: not a suite directory "
                                f"({type(exc).__name__})") from None
        root = resume
        suite = load_suite(state["suite_spec"])
        scale = state["scale"]
        cells = state["cells"]
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
        state_path = root / "suite.json"
    workloads = {label: scaled(w, scale) for label, w in suite.workloads}

    def save() -> None:
        tmp = state_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(state, indent=2))
        os.replace(tmp, state_path)

    save()
    stop: list[int] = []
    child: list[subprocess.Popen[str]] = []

    def on_signal(sig: int, _frame: object) -> None:
        stop.append(sig)
        for p in child:  # the cell finishes its files and exits; the suite stops after it
            if p.poll() is None:
                p.send_signal(signal.SIGTERM if sig != signal.SIGINT else signal.SIGINT)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    n = len(cells)
    note = f" (scaled ×{scale:g})" if scale != 1.0 else ""
    print(f"suite {suite.name}{note}: {n} cells in {root}", flush=True)
    try:
        for k, cell in enumerate(cells):
            if stop:
                break
            if cell["state"] == "done":
                print(f"cell {k + 1}/{n} {cell['target']} × {cell['workload']}: done before", flush=True)
                continue
            cell_dir = _cell_dir(root, k, cell["target"], cell["workload"])
            if cell_dir.exists():  # a cell cut short: run it again from the start
                import shutil

                shutil.rmtree(cell_dir)
            cell_dir.parent.mkdir(parents=True, exist_ok=True)
            wfile = root / "workloads" / f"{cell['workload']}.yaml"
            wfile.parent.mkdir(exist_ok=True)
            wfile.write_text(_workload_yaml(workloads[cell["workload"]]))
            cmd = [sys.executable, "-m", "tui.cli", "run", cell["target"], "--workload", str(wfile),
                   "--headless", "--out", str(cell_dir), *suite.options]
            print(f"cell {k + 1}/{n} {cell['target']} × {cell['workload']}: running", flush=True)
            started = time.monotonic()
            with open(root / f"cell-{k:03d}.log", "w") as log:
                proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.PIPE, text=True,
                                        stdin=subprocess.DEVNULL)
                child[:] = [proc]
                _, err = proc.communicate()
                log.write(err)
            cell.update(run_dir=str(cell_dir), exit_code=proc.returncode,
                        seconds=round(time.monotonic() - started, 1))
            if proc.returncode == 0:
                cell["state"] = "done"
                cell.pop("error", None)
            else:
                cell["state"] = "stopped" if stop else "failed"
                lines = [ln for ln in err.strip().splitlines() if ln.strip()]
                cell["error"] = lines[-1][:300] if lines else f"exit code {proc.returncode}"
            print(f"cell {k + 1}/{n} {cell['target']} × {cell['workload']}: {cell['state']}"
                  + (f" ({cell['error']})" if cell["state"] != "done" else "")
                  + f", {cell['seconds']:.0f} s", flush=True)
            save()
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    state["ended" if not stop else "stopped"] = datetime.now(UTC).isoformat()
    save()
    done = [c for c in cells if c["state"] == "done"]
    failed = [c for c in cells if c["state"] == "failed"]
    print(f"suite {suite.name}: {len(done)} of {n} cells done, {len(failed)} failed"
          + (", stopped: resume with --resume " + str(root) if stop else ""), flush=True)
    if report and done and not stop:
        from tui.cli import _report

        path = _report([c["run_dir"] for c in done], root / "report", None)
        state["report"] = str(path)
        save()
        print(f"report: {path}", flush=True)
        import pyarrow.parquet as pq

        rows = pq.read_table(path.parent / "summary.parquet").to_pylist()
        lines = compare_published(state, rows)
        if lines:
            (root / "published.md").write_text("\n".join(lines))
            print("\n".join(line for line in lines if line.startswith("- ")), flush=True)
            print(f"published figures beside the measured ones: {root / 'published.md'}", flush=True)
    if stop:
        return {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}.get(
            signal.Signals(stop[0]), 130)
    return 4 if failed else 0


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
