"""The report's configuration section: per target, the settings in force that are not the
platform's defaults (run.json `targets[].settings`), and, where targets of one platform are
compared, every setting in which they differ."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from analysis.compute import ReportData, TargetReport
from analysis.document import Block, Section, Table

PLATFORM_DEFAULT = "platform default"
STREAMBENCH_DEFAULT = "streambench default"
# where a broker of this run listens and keeps its files: differs between any two runs
_LOCATION = re.compile(r"(port|Port|dirs?|Dir|listeners|voters|logfile|pidfile|[aA]ddress|"
                       r"[uU]rl|connect|node\.id|broker\.id)$")


def settings(data: ReportData, t: TargetReport) -> dict[str, dict[str, Any]]:
    meta = data.run(t.run_id).target_meta(t.target)
    found = meta.get("settings")
    return {str(k): v for k, v in found.items() if isinstance(v, dict)} if isinstance(found, dict) else {}


def _value(entry: Mapping[str, Any] | None) -> str:
    if entry is None:
        return "—"
    value = str(entry.get("value", ""))
    return f'"{value}"' if value == "" else value


def _source(entry: Mapping[str, Any]) -> str:
    source = str(entry.get("source", ""))
    return source + ("" if entry.get("read_back") else " (as set)")


def non_default_rows(entries: Mapping[str, Mapping[str, Any]]) -> list[list[str]]:
    """`setting, value, source` of the settings not at the platform's default, by namespace
    and name."""
    return [[name, _value(e), _source(e)] for name, e in sorted(entries.items())
            if e.get("source") != PLATFORM_DEFAULT]


def target_table(entries: Mapping[str, Mapping[str, Any]]) -> Table:
    """The settings not at the platform's default, by namespace and name."""
    return Table(["setting", "value", "source"], non_default_rows(entries), text_columns=3)


def differences(columns: Sequence[Mapping[str, Mapping[str, Any]]]) -> list[list[str]]:
    """Rows `setting, value per column` for every setting whose value differs between the
    columns (a setting one column lacks counts as different), leaving out where each broker
    listens and keeps its files when streambench chose them."""
    names = sorted(set().union(*(c.keys() for c in columns))) if columns else []
    rows = []
    for name in names:
        entries = [c.get(name) for c in columns]
        values = {_value(e) for e in entries}
        if len(values) < 2:
            continue
        located = _LOCATION.search(name.partition(".")[2])
        if located and all(e is None or e.get("source") == STREAMBENCH_DEFAULT for e in entries):
            continue
        rows.append([name, *(f"{_value(e)} ({e.get('source')})" if e is not None else "—"
                             for e in entries)])
    return rows


def configuration_section(data: ReportData) -> Section | None:
    """None when no run recorded settings (runs made before they were recorded)."""
    per_target = [(t, settings(data, t)) for t in data.targets]
    if not any(entries for _t, entries in per_target):
        return None
    blocks: list[Block] = [
        "Settings in force that are not the platform's defaults; source: streambench default "
        "(what streambench sets), profile, user; \"(as set)\": as passed to the client or written "
        "to the broker's configuration, not read back from the broker."
    ]
    for t, entries in per_target:
        blocks.append(f"{t.heading}:" if entries else f"{t.heading}: no settings recorded")
        if entries:
            blocks.append(target_table(entries))
    platforms: dict[str, list[tuple[TargetReport, dict[str, dict[str, Any]]]]] = {}
    for t, entries in per_target:
        platform = str(data.run(t.run_id).target_meta(t.target).get("platform", ""))
        if entries:
            platforms.setdefault(platform, []).append((t, entries))
    for platform, group in sorted(platforms.items()):
        if len(group) < 2:
            continue
        rows = differences([entries for _t, entries in group])
        if rows:
            blocks.append(f"Settings in which the {platform} targets differ:")
            blocks.append(Table(["setting", *(t.heading for t, _e in group)], rows,
                                text_columns=1 + len(group)))
        else:
            blocks.append(f"The {platform} targets run with the same settings.")
    return Section("Configuration", blocks)
