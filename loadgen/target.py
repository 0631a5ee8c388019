"""TARGET arguments: `PLATFORM[:OPTION[=VALUE],...][@ADDRESS]`, checked against the platform's
declared options before anything is started."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loadgen.errors import TargetError


@dataclass(frozen=True)
class OptionSpec:
    """One option a platform accepts in its TARGET string."""

    help: str
    default: Any = None
    parse: Callable[[str], Any] = str  # raises ValueError on a bad value
    choices: tuple[str, ...] = ()
    flag: bool = False  # `redis:aof` alone means aof=true
    # non-empty: the option is refused with this line, which never repeats the TARGET (e.g. a
    # password on the command line)
    refuse: str = ""


def parse_bool(text: str) -> bool:
    low = text.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false")


def parse_positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError("must be a whole number of at least 1")
    return value


@dataclass(frozen=True)
class Target:
    """A parsed TARGET: platform, options (defaults filled in), address for external runtime."""

    spec: str  # as the user wrote it
    platform: str
    options: dict[str, Any] = field(default_factory=dict)
    explicit: frozenset[str] = frozenset()  # options the user set
    address: str | None = None
    label: str = ""  # unique within a run; used in the dashboard and the run files

    @property
    def runtime(self) -> str:
        if self.address is not None:
            return "external"
        return str(self.options.get("runtime") or "local")


def parse_target(spec: str, platforms: dict[str, dict[str, OptionSpec]]) -> Target:
    """Parse one TARGET against the known platforms and their option tables."""
    text = spec.strip()
    if not text:
        raise TargetError("empty TARGET; expected PLATFORM[:OPTION[=VALUE],...][@ADDRESS]")
    address = None
    if "@" in text:
        text, address = text.split("@", 1)
        if not address:
            raise TargetError(f"target {spec!r}: nothing after '@'; expected an address like 127.0.0.1:6379")
    name, _, opts_text = text.partition(":")
    # the platform's refused options; for an unknown platform, any platform's
    tables = [platforms[name]] if name in platforms else list(platforms.values())
    refused = {k: o.refuse for t in tables for k, o in t.items() if o.refuse}
    for item in opts_text.split(","):
        key = item.partition("=")[0].strip()
        if key in refused:  # before any message that repeats the TARGET
            raise TargetError(f"option {key} of {name}: {refused[key]}")
    if name not in platforms:
        close = difflib.get_close_matches(name, list(platforms), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise TargetError(
            f"unknown platform {name!r} in target {spec!r}{hint}; known: {', '.join(sorted(platforms))}"
        )
    table = platforms[name]
    options = {key: opt.default for key, opt in table.items() if not opt.refuse}
    explicit = set()
    for item in filter(None, (part.strip() for part in opts_text.split(","))):
        key, has_value, raw = item.partition("=")
        key = key.strip()
        if key not in table:
            close = difflib.get_close_matches(key, list(table), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            known = ", ".join(sorted(table)) or "none"
            raise TargetError(f"unknown option {key!r} for {name} in target {spec!r}{hint}; known: {known}")
        if key in explicit:
            raise TargetError(f"option {key} given twice in target {spec!r}; give each option once "
                              "(also when the values agree)")
        opt = table[key]
        if not has_value:
            if not opt.flag:
                raise TargetError(f"option {key!r} of {name} needs a value: {key}=VALUE ({opt.help})")
            raw = "true"
        if opt.choices and raw not in opt.choices:
            raise TargetError(
                f"option {key}={raw!r} of {name}: expected one of {', '.join(opt.choices)}"
            )
        try:
            options[key] = opt.parse(raw.strip())
        except ValueError as exc:
            raise TargetError(f"option {key}={raw!r} of {name}: {exc}") from None
        explicit.add(key)
    return Target(spec, name, options, frozenset(explicit), address, label=spec.strip())


def unique_labels(targets: list[Target]) -> list[Target]:
    """Give repeated TARGET strings distinct labels (`redis`, `redis#2`)."""
    seen: dict[str, int] = {}
    out = []
    for t in targets:
        n = seen.get(t.label, 0) + 1
        seen[t.label] = n
        out.append(t if n == 1 else dataclasses.replace(t, label=f"{t.label}#{n}"))
    return out
