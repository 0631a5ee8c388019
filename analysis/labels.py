"""How the report names targets, and what it says about how their runs ended: labels unique
across runs, the `--baseline` name resolved to one target, and the marks of runs whose figures
need care (stopped early, killed, not drained). Everything here reads run.json only, so it is
checked before Spark starts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from loadgen.core.errors import ReportError

Key = tuple[str, str]  # (run_id, target)

# the marks, in the order they are shown, and what each means (explained once in the report)
KILLED = "killed"
FAILED = "failed"
STOPPED_EARLY = "stopped early"
NOT_DRAINED = "not drained"
MARKS: dict[str, str] = {
    KILLED: "run.json records no end: the run was killed (or was still going when the report "
            "was made), so its last seconds may be missing, nothing was drained and its totals "
            "were never written",
    FAILED: "the run ended on an error (the runs table says which, e.g. a run file it could not "
            "write or every send failing): its figures end where it failed, and the seconds "
            "after a file could not be written are missing",
    STOPPED_EARLY: "the run was stopped before the end of its planned measuring time: it "
                   "measured less than its workload asked for",
    NOT_DRAINED: "the drain ended before the consumers had received every message: the slowest "
                 "messages are missing from the consumed counts and the end-to-end latency",
}


def target_labels(keys: Sequence[Key]) -> dict[Key, str]:
    """Each target's label as the report shows it: its name, or `name (run)` when the name
    appears in more than one run."""
    names = [k[1] for k in keys]
    return {k: k[1] if names.count(k[1]) == 1 else f"{k[1]} ({k[0]})" for k in keys}


def resolve_baseline(name: str, labels: Mapping[Key, str]) -> Key:
    """The target `name` means: its label as the report shows it, RUN_ID/TARGET, or a target
    name found in exactly one run. Raises ReportError (one line, naming the accepted forms)
    for a name that matches no target or several."""
    for key, label in labels.items():
        if name in (label, f"{key[0]}/{key[1]}"):
            return key
    matches = [k for k in labels if k[1] == name]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ReportError(
            f"baseline {name!r} is ambiguous: runs {', '.join(k[0] for k in matches)} each have "
            f"a target {name}; give one as the report shows it "
            f"({', '.join(labels[k] for k in matches)}) or as RUN_ID/TARGET "
            f"({', '.join(f'{k[0]}/{k[1]}' for k in matches)})"
        )
    raise ReportError(
        f"baseline {name!r} is not a target of these runs; the targets are: "
        f"{', '.join(labels.values())} (give a label as shown, RUN_ID/TARGET such as "
        f"{next(f'{k[0]}/{k[1]}' for k in labels) if labels else 'RUN/TARGET'}, or a target "
        "name found in one run only)"
    )


def _truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def _falsy(value: Any) -> bool:
    return value is False or (isinstance(value, str) and value.strip().lower() == "false")


def run_marks(meta: Mapping[str, Any], target: str) -> tuple[str, ...]:
    """The marks of one target of a run, from its run.json: `killed` when the run recorded no
    end (`ended` missing); otherwise `failed` when run.json records an error that ended it,
    `stopped early` when `stopped_early` is true and `not
    drained` when the target's `totals` entry says `drained: false`. A run.json that says
    nothing about an item (an older run without `drained`) gets no mark for it."""
    if "ended" not in meta:
        return (KILLED,)
    marks = [FAILED] if meta.get("failed") else []
    if _truthy(meta.get("stopped_early")):
        marks.append(STOPPED_EARLY)
    totals = meta.get("totals")
    if isinstance(totals, list):
        for entry in totals:
            if (isinstance(entry, dict) and str(entry.get("label")) == target
                    and _falsy(entry.get("drained"))):
                marks.append(NOT_DRAINED)
                break
    return tuple(marks)


def ending(meta: Mapping[str, Any]) -> str:
    """How the run ended, for the runs table."""
    if "ended" not in meta:
        return "killed (no end recorded)"
    if meta.get("failed"):
        return f"failed: {str(meta['failed'])[:120]}"
    if _truthy(meta.get("stopped_early")) and meta.get("stopped_for") == "hangup":
        return "stopped early: the terminal hung up"
    if _truthy(meta.get("stopped_early")) and meta.get("stopped_for"):
        return "stopped early by streambench: the machine's memory ran low"
    return "stopped early" if _truthy(meta.get("stopped_early")) else "completed"
