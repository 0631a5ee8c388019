"""The platforms streambench can drive. Each driver module declares its platforms in a
`PLATFORMS` list (options, stack, driver, collectors); adding a platform means adding its
module to `_MODULES`."""

from __future__ import annotations

import importlib

from loadgen.errors import TargetError
from loadgen.platforms.runtime import place
from loadgen.platforms.spec import Platform
from loadgen.target import OptionSpec, Target, parse_target

_MODULES = (
    "loadgen.platforms.redis_streams",
    "loadgen.platforms.kafka",
    "loadgen.platforms.pulsar",
)


def _load() -> dict[str, Platform]:
    found: dict[str, Platform] = {}
    for name in _MODULES:
        for platform in importlib.import_module(name).PLATFORMS:
            found[platform.name] = platform
    return found


PLATFORMS: dict[str, Platform] = _load()


def option_tables() -> dict[str, dict[str, OptionSpec]]:
    return {name: p.options for name, p in PLATFORMS.items()}


def resolve_target(spec: str, runtime: str | None = None) -> Target:
    """Parse a TARGET and place it: its runtime= option, else `runtime` (the run's --runtime),
    else the default rule of loadgen.platforms.runtime."""
    target = parse_target(spec, option_tables())
    if target.address is not None and target.explicit & {"runtime", "port"}:
        raise TargetError(f"target {spec!r}: an @ADDRESS target uses an existing server; "
                          "runtime= and port= do not apply")
    runtimes = tuple(r for r in PLATFORMS[target.platform].runtimes if r != "external")
    return place(target, runtimes, runtime)
