"""What `streambench platforms`, `platforms NAME`, `suites` and `workloads` print: short tables
for reading, every field with --json for scripts, defaults written the way a user writes them."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from loadgen.core.errors import TargetError
from tui.bench import units

if TYPE_CHECKING:
    from loadgen.core.platform import Platform
    from loadgen.core.target import OptionSpec
    from tui.bench.suite import Suite

BUNDLED_CLIENT = "bundled"


def client_state(p: Platform) -> str:
    """Whether the platform's client library is here: bundled with streambench, or its extra's."""
    if p.optional_client is None:
        return BUNDLED_CLIENT
    return "installed" if p.optional_client.installed() else f"missing: {p.optional_client.install}"


def _starts(p: Platform) -> str:
    """What it starts, in a few words: the summary up to its first clause."""
    return p.summary.split(";")[0].split(" (")[0].strip()


def table(rows: list[list[str]], heads: list[str]) -> str:
    widths = [max(len(r[i]) for r in [heads, *rows]) for i in range(len(heads))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in [heads, *rows]]
    return "\n".join(lines)


def platforms_table(platforms: list[Platform]) -> str:
    rows = [[p.name, _starts(p), ", ".join(p.runtimes), client_state(p)] for p in platforms]
    return (table(rows, ["PLATFORM", "WHAT IT STARTS", "RUNTIMES", "CLIENT"])
            + "\n\n`streambench platforms NAME` lists a platform's TARGET options.")


def shown_default(opt: OptionSpec) -> str | None:
    """A default as a user writes it on the command line: no, 30s, 1k; None when unset."""
    value = opt.default
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple | list):
        return ",".join(str(v) for v in value)
    return str(value)


def option_name(name: str, opt: OptionSpec) -> str:
    """`topic.NAME=VALUE` for a namespace of settings, `aof` for a flag, else `name=VALUE`."""
    if opt.setting is not None:
        return f"{name}.NAME=VALUE"
    if opt.flag:
        return name
    if opt.choices:
        return f"{name}={'|'.join(opt.choices)}"
    return f"{name}=VALUE"


def _platform_record(p: Platform) -> dict[str, Any]:
    return {
        "name": p.name, "summary": p.summary, "starts": _starts(p), "origin": p.origin,
        "runtimes": list(p.runtimes), "client": client_state(p),
        "address_example": f"{p.name}@{p.address_example}",
        "faults": {r: list(p.fault_actions(r)) for r in p.runtimes if p.fault_actions(r)},
        "options": [{"name": name, "form": option_name(name, opt), "help": opt.help,
                     "default": shown_default(opt), "choices": list(opt.choices),
                     "refused": bool(opt.refuse)}
                    for name, opt in p.options.items()],
    }


def platforms_json(platforms: list[Platform]) -> str:
    return json.dumps([_platform_record(p) for p in platforms], indent=2)


def platform_text(p: Platform) -> str:
    """One platform: where it comes from, runtimes, faults, then each option once."""
    lines = [f"{p.name}: {p.summary}", f"  from: {p.origin}",
             f"  runtimes: {', '.join(p.runtimes)} (external: {p.name}@{p.address_example})",
             f"  client: {client_state(p)}"]
    faults = [f"{r}: {', '.join(p.fault_actions(r))}" for r in p.runtimes if p.fault_actions(r)]
    if faults:
        lines.append(f"  faults: {'; '.join(faults)}")
    lines.append("  options (PLATFORM:OPTION[=VALUE],...):")
    for name, opt in p.options.items():
        if opt.refuse:
            continue  # refused on the command line: not an option to offer
        default = shown_default(opt)
        said = "default" in opt.help.lower()
        lines.append(f"    {option_name(name, opt)}: {opt.help}"
                     + (f" (default {default})" if default is not None and not said else ""))
    return "\n".join(lines)


def find_platform(platforms: dict[str, Platform], name: str) -> Platform:
    import difflib

    if name in platforms:
        return platforms[name]
    close = difflib.get_close_matches(name, list(platforms), n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    raise TargetError(f"platforms {name!r}: no such platform ({hint}one of {', '.join(platforms)})")


def planned_s(suite: Suite) -> float:
    """The suite's planned length: every cell's warm-up and measuring phase, back to back
    (broker start-up and drains come on top)."""
    per_target = sum(w.warmup_s + w.duration_s for _, w in suite.workloads)
    return per_target * len(suite.targets)


def hours_text(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return units.duration_text(round(seconds))


def suites_text(suites: list[Suite]) -> str:
    blocks = []
    for s in suites:
        cells = len(s.targets) * len(s.workloads)
        blocks.append(f"{s.name}: {s.description}\n"
                      f"  planned: {hours_text(planned_s(s))} ({cells} cells, warm-up and measuring; "
                      "broker start-up and drains on top)\n"
                      f"  targets: {', '.join(s.targets)}\n"
                      f"  workloads: {', '.join(label for label, _ in s.workloads)}")
    return "\n".join(blocks)


def suites_json(suites: list[Suite]) -> str:
    return json.dumps([{"name": s.name, "description": s.description,
                        "planned_s": planned_s(s), "targets": list(s.targets),
                        "workloads": [label for label, _ in s.workloads]} for s in suites],
                      indent=2)

