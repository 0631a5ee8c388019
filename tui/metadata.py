"""The metadata view (`i` on the dashboard and in a replay): per target, what the run created and
runs on — platform, runtime, broker version, endpoints, broker processes or containers, data
directories, topics with their partitions (and, where the platform tells them, the broker's own
stream names, replication and partition leaders), where the load processes run, the broker
logs, and the settings in force that differ from the platform's defaults with their source.

Everything comes from the run's description, the same object run.json records (`targets[]`,
`load_placement`): live from the run's targets, in a replay from the run.json of the recording.
A field the run does not know is left out, never guessed."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen

from loadgen.run import Run, log_dir
from tui.bench.endsummary import SAME_NODE_LATENCY
from tui.widgets import RichLines

HINT = "esc back · ↑/↓ scroll · x screenshot · ? help"
REFRESH_S = 1.0  # a live run's description changes once the brokers are up

RunDescription = Mapping[str, Any]  # run.json's fields, or the part of them known live


def live_description(run: Run | None) -> dict[str, Any]:
    """What a running Run says of itself, under run.json's names (targets, load placement)."""
    if run is None:
        return {}
    return {
        "run_dir": str(run.run_dir),
        "workload": run.workload.to_omb(),
        "targets": [r.describe() for r in run.runners],
        "load_processes": run.processes,
        "load_placement": [{"producers": p.producers, "consumers": p.consumers}
                           for p in run.placement],
        **({"cluster_placement": {"same_node_latency": run.cluster.same_node_latency}}
           if run.cluster is not None else {}),
    }


def _grid() -> Table:
    table = Table(box=None, padding=(0, 1), show_header=False, show_edge=False, expand=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    return table


def _numbers(numbers: list[Any]) -> str:
    return ", ".join(str(n) for n in numbers) if numbers else "none"


def _placement(run: RunDescription) -> str | None:
    placement = run.get("load_placement")
    if not isinstance(placement, list) or not placement:
        return None
    if len(placement) == 1:
        return "1 process here: every producer and consumer"
    return f"{len(placement)} processes here: " + "; ".join(
        f"#{i} producers {_numbers(p.get('producers', []))}, consumers "
        f"{_numbers(p.get('consumers', []))}" for i, p in enumerate(placement))


def _topic_lines(target: Mapping[str, Any], partitions: Any) -> list[Text]:
    found = target.get("layout")
    layout: Mapping[str, Any] = found if isinstance(found, dict) else {}
    lines = []
    for topic in target.get("topics") or []:
        shape = layout.get(topic) or {}
        count = shape.get("partitions", partitions)
        line = Text(str(shape.get("name") or topic))
        parts = []
        if count is not None:
            parts.append(f"{count} partition{'' if count == 1 else 's'}")
        if shape.get("replication"):
            parts.append(f"replication {shape['replication']}")
        if parts:
            line.append(f" ({', '.join(parts)})", style="dim")
        lines.append(line)
        for field in ("streams", "subjects"):
            if shape.get(field):
                lines.append(Text(f"  {field} " + ", ".join(shape[field])))
        if shape.get("leader"):
            lines.append(Text(f"  leader {shape['leader']}"))
        leaders = shape.get("leaders")
        if isinstance(leaders, dict) and leaders:
            lines.append(Text("  leaders " + ", ".join(
                f"{p} → {who}" for p, who in sorted(leaders.items(), key=lambda kv: int(kv[0])))))
    return lines


def targets(run: RunDescription) -> dict[str, tuple[int, Mapping[str, Any]]]:
    """The run's targets by label, each with its index in the run."""
    return {str(t.get("label")): (i, t) for i, t in enumerate(run.get("targets") or [])
            if isinstance(t, dict)}


def kept_logs(run: RunDescription, index: int, label: str) -> list[Path]:
    """The broker logs the run kept in its directory (copied when the stack went down)."""
    if not run.get("run_dir"):
        return []
    directory = log_dir(Path(str(run["run_dir"])), index, label)
    with contextlib.suppress(OSError):
        return sorted(p for p in directory.iterdir() if p.is_file())
    return []


def target_body(target: Mapping[str, Any], run: RunDescription, index: int) -> RenderableType:
    """One target's description; what it does not hold is not shown."""
    grid = _grid()
    runtime = target.get("runtime") or "?"
    grid.add_row("platform", f"{target.get('platform', '?')} · runtime {runtime}"
                 + (f" · version {target['version']}" if target.get("version") else ""))
    if "endpoints" not in target:
        grid.add_row("", Text("the brokers are starting: nothing created yet", style="dim"))
        return grid
    for name, address in (target.get("endpoints") or {}).items():
        grid.add_row("endpoint", f"{name} {address}")
    if target.get("pids"):
        grid.add_row("processes", "pid " + ", ".join(str(p) for p in target["pids"])
                     + " (as started: a restarted broker has a new one)")
    if target.get("containers"):
        grid.add_row("containers", ", ".join(str(c)[:12] for c in target["containers"]))
    config = dict(target.get("config") or {})
    if config.get("data_dir"):
        grid.add_row("data", str(config.pop("data_dir")))
    for n, (name, value) in enumerate(config.items()):
        grid.add_row("stack" if n == 0 else "", f"{name} {value}")
    workload = run.get("workload")
    partitions = workload.get("partitionsPerTopic") if isinstance(workload, dict) else None
    for n, line in enumerate(_topic_lines(target, partitions)):
        grid.add_row("topics" if n == 0 else "", line)
    if target.get("subscriptions"):
        grid.add_row("subscriptions", ", ".join(target["subscriptions"]))
    placement = _placement(run)
    if placement:
        grid.add_row("load", placement)
    if (run.get("cluster_placement") or {}).get("same_node_latency"):
        grid.add_row("e2e latency", SAME_NODE_LATENCY.strip().removeprefix("e2e latency: "))
    kept = kept_logs(run, index, str(target.get("label", "")))
    for n, path in enumerate(kept or target.get("logs") or []):
        grid.add_row(("kept logs" if kept else "logs") if n == 0 else "", str(path))

    settings = target.get("settings")
    if not isinstance(settings, dict):
        return Group(grid, Text("no settings recorded", style="dim"))
    # the report's module, imported when a run's settings are first shown: it imports pyspark
    # (about 0.3 s of CPU), which a run without --report does not need
    from analysis.configuration import non_default_rows

    rows = non_default_rows({k: v for k, v in settings.items() if isinstance(v, dict)})
    table = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold")
    table.add_column("setting", no_wrap=True)
    table.add_column("value", overflow="fold")
    table.add_column("source", overflow="fold")
    for row in rows:
        table.add_row(*row)
    caption = f"settings not at the platform's default: {len(rows)} of {len(settings)}"
    if any(row[2].endswith("(as set)") for row in rows):
        caption += " (\"as set\": not read back from the broker)"
    return Group(grid, Text(""), Text(caption, style="bold"),
                 table if rows else Text("none", style="dim"))


def description_body(run: RunDescription, labels: list[str]) -> RenderableType:
    """Every target in the dashboard's order, each under its label."""
    found = targets(run)
    parts: list[RenderableType] = [Text(HINT, style="dim"), Text("")]
    for label in labels:
        parts.append(Text(label, style="bold reverse"))
        index, target = found.get(label, (0, None))
        parts.append(target_body(target, run, index) if target is not None
                     else Text("not described (the run recorded nothing of it)", style="dim"))
        parts.append(Text(""))
    return Group(*parts)


class MetadataScreen(Screen[None]):
    """What the run created and runs on, per target; `source` gives the run's description
    (called again every REFRESH_S while the screen is shown when `live`)."""

    DEFAULT_CSS = """
    MetadataScreen > #metadata { border: round $primary; border-title-style: bold; padding: 0 1; }
    App:ansi MetadataScreen > #metadata { border: round ansi_blue; }
    """

    def __init__(self, source: Callable[[], RunDescription], labels: list[str], live: bool) -> None:
        super().__init__()
        self.source = source
        self.labels = labels
        self.live = live

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="metadata"):
            yield RichLines(self.body(), id="metadata-body")

    def on_mount(self) -> None:
        self.query_one("#metadata", VerticalScroll).border_title = "metadata"
        if self.live:
            self.set_interval(REFRESH_S, self.show)

    def body(self) -> RenderableType:
        return description_body(self.source(), self.labels)

    def show(self) -> None:
        if self.is_mounted:
            self.query_one("#metadata-body", RichLines).update(self.body())
