"""The platforms streambench can drive, found through Python entry points in the group
`streambench.platforms`. Each entry point names a module attribute holding a list of
`Platform` records (options, runtimes and stack, driver, collectors, faults). streambench's own
platforms register that way in its pyproject.toml, exactly as a separate package would in its
own: adding a platform edits no module here."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import replace
from importlib import metadata

from loadgen.core.errors import TargetError
from loadgen.core.platform import Platform
from loadgen.core.target import OptionSpec, Target, parse_target
from loadgen.platforms.runtime import place

GROUP = "streambench.platforms"
# warnings met while loading: a plugin that fails to import or declares a taken name
LOAD_WARNINGS: list[str] = []


def _origin(ep: metadata.EntryPoint) -> str:
    dist = ep.dist
    where = f"{dist.name} {dist.version}" if dist is not None else "unknown distribution"
    return f"{where} ({ep.name} = {ep.value})"


def _bundled(ep: metadata.EntryPoint) -> bool:
    return ep.dist is not None and ep.dist.name == "streambench"


class Registry(Mapping[str, Platform]):
    """The platforms by name, their modules imported on first use. Looking up one of
    streambench's own platforms imports only the module its entry point names (a load worker
    thus imports its own platform's client and no other); listing them, or looking up any
    other name, loads every entry point. Either way a name gives the same record: streambench's
    own entry points come first, so a plugin cannot shadow a bundled name."""

    def __init__(self) -> None:
        self._found: dict[str, Platform] = {}
        # the entry points loaded, by (name, value): the names each of them gave
        self._loaded: dict[tuple[str, str], list[str]] = {}
        self._complete = False
        # loading is done by one thread at a time; a lookup of a name already found takes
        # no lock (the dict it reads is only ever replaced whole, complete)
        self._lock = threading.RLock()
        self._points: list[metadata.EntryPoint] | None = None

    def _entry_points(self) -> list[metadata.EntryPoint]:
        """The group's entry points, streambench's own first (read once: reading them goes
        through every installed distribution's metadata)."""
        if self._points is None:
            self._points = sorted(metadata.entry_points(group=GROUP),
                                  key=lambda ep: (not _bundled(ep), ep.name))
        return self._points

    def _take(self, ep: metadata.EntryPoint, found: dict[str, Platform]) -> None:
        taken: list[str] = []
        self._loaded[(ep.name, ep.value)] = taken
        try:
            declared = ep.load()
            platforms = list(declared)
            if not all(isinstance(p, Platform) for p in platforms):
                raise TypeError("it is not a list of loadgen.core.platform.Platform")
        except Exception as exc:  # a broken plugin is named, not fatal
            LOAD_WARNINGS.append(f"platform plugin {ep.name} = {ep.value} not loaded: "
                                 f"{type(exc).__name__}: {exc}")
            return
        for platform in platforms:
            if platform.name in found:
                LOAD_WARNINGS.append(f"platform {platform.name!r} of {_origin(ep)} ignored: "
                                     f"the name is taken by {found[platform.name].origin}")
                continue
            origin = _origin(ep)
            if platform.optional_client is not None:
                origin += f"; client: {platform.optional_client.note()}"
            found[platform.name] = replace(platform, origin=origin)
            taken.append(platform.name)

    def load_all(self) -> None:
        """Every entry point (once; LOAD_WARNINGS is complete after it)."""
        with self._lock:
            if self._complete:
                return
            # streambench's own entry points first, so a plugin cannot shadow a bundled name
            found: dict[str, Platform] = {}
            for ep in self._entry_points():
                taken = self._loaded.get((ep.name, ep.value))
                if taken is None:
                    self._take(ep, found)
                else:  # a bundled one looked up by name: its records as already handed out
                    found.update((name, self._found[name]) for name in taken)
            self._found = found
            self._complete = True
            if not found:
                sys.stderr.write("streambench: no platforms registered; is streambench "
                                 "installed (pip install -e . in its checkout)?\n")

    def __getitem__(self, name: str) -> Platform:
        found = self._found.get(name)
        if found is not None:
            return found
        with self._lock:
            if not self._complete and name not in self._found:
                # the bundled entry point of this name alone, when there is one
                more = dict(self._found)
                for ep in self._entry_points():
                    if ep.name == name and _bundled(ep) and (ep.name, ep.value) not in self._loaded:
                        self._take(ep, more)
                self._found = more
            if name not in self._found:
                self.load_all()
            return self._found[name]

    def __iter__(self) -> Iterator[str]:
        self.load_all()
        return iter(self._found)

    def __len__(self) -> int:
        self.load_all()
        return len(self._found)


PLATFORMS: Registry = Registry()


class _OptionTables(Mapping[str, dict[str, OptionSpec]]):
    """Each platform's TARGET options by name, read through the registry: parsing a TARGET of
    one of streambench's own platforms imports that platform's module alone."""

    def __getitem__(self, name: str) -> dict[str, OptionSpec]:
        return PLATFORMS[name].options

    def __iter__(self) -> Iterator[str]:
        return iter(PLATFORMS)

    def __len__(self) -> int:
        return len(PLATFORMS)


def option_tables() -> Mapping[str, dict[str, OptionSpec]]:
    return _OptionTables()


def resolve_target(spec: str, runtime: str | None = None) -> Target:
    """Parse a TARGET and place it: its runtime= option, else `runtime` (the run's --runtime),
    else the default rule of loadgen.platforms.runtime."""
    target = parse_target(spec, option_tables())
    if target.address is not None and target.explicit & {"runtime", "port"}:
        raise TargetError(f"target {spec!r}: an @ADDRESS target uses an existing server; "
                          "runtime= and port= do not apply")
    runtimes = tuple(r for r in PLATFORMS[target.platform].runtimes if r != "external")
    placed = place(target, runtimes, runtime, PLATFORMS[target.platform].docker_images)
    table = PLATFORMS[target.platform].options
    broker = sorted(k for k in placed.sources
                    if (kind := table[k.partition(".")[0]].setting) is not None and kind.broker)
    takes = PLATFORMS[target.platform].broker_settings_runtimes
    if broker and placed.runtime not in takes:
        where = "an existing cluster" if placed.runtime == "external" else f"the {placed.runtime} runtime"
        allowed = " or ".join(f"runtime={r}" for r in takes)
        raise TargetError(f"{', '.join(broker)}: broker settings apply to brokers streambench starts "
                          f"itself ({allowed}), not to {where}; client and topic settings do")
    return placed
