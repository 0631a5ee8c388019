"""TARGET arguments: `PLATFORM[:OPTION[=VALUE],...][@ADDRESS]`, checked against the platform's
declared options before anything is started."""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from loadgen.core.errors import TargetError


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
    # a namespace of settings (`broker.NAME=VALUE`, loadgen.core.settings): the option's key is the
    # namespace, this checks one NAME and VALUE and returns (NAME as recorded, typed value)
    setting: SettingKind | None = None
    # an option that stands for settings (profile=NAME, config=FILE): its parsed value gives
    # `NAMESPACE.NAME` -> raw value, applied under the source `expands_as` unless the TARGET
    # sets the same key itself
    expands: Callable[[Any], dict[str, str]] | None = None
    expands_as: str = ""
    # the option this one acts through, `NAME` (a flag that must be on) or `NAME=VALUE`: set
    # without it, this one would do nothing, so it is refused with what to give instead
    needs: str = ""


@dataclass(frozen=True)
class SettingKind:
    """What a namespace of settings is: its check, and whether it configures brokers
    streambench starts (refused for an existing cluster) or the clients and topics."""

    check: Callable[[str, str], tuple[str, Any]]  # raises ValueError on a bad name or value
    broker: bool = False


def parse_bool(text: str) -> bool:
    low = text.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false")


def parse_whole(text: str) -> int:
    """A whole number; a ValueError that says so (not int()'s own message) otherwise."""
    try:
        return int(text)
    except ValueError:
        raise ValueError("expected a whole number") from None


def split_host_port(text: str, default_port: int) -> tuple[str, int]:
    """`HOST:PORT`, `HOST` (the default port), `:PORT` (127.0.0.1), `[IPV6]:PORT`, `[IPV6]` or an
    IPv6 address alone -> (host, port); a ValueError that says what is wrong otherwise."""
    text = text.strip()
    if text.startswith("["):
        host, closed, rest = text[1:].partition("]")
        if not closed:
            raise ValueError("a [ with no ] after the IPv6 address")
        if rest and not rest.startswith(":"):
            raise ValueError(f"{rest[:20]!r} after the ]")
        port_text = rest[1:] if rest else None
        if not host:
            raise ValueError("nothing between [ and ]")
    elif text.count(":") > 1:
        try:
            ipaddress.IPv6Address(text)
        except ValueError:
            raise ValueError("more than one ':' (an IPv6 address with a port goes in brackets, "
                             "e.g. [::1]:PORT)") from None
        host, port_text = text, None
    else:
        host, colon, port_text_ = text.partition(":")
        port_text = port_text_ if colon else None
    if any(c in host for c in "/,@[] \t"):
        raise ValueError(f"{host[:40]!r} is not a host name")
    if port_text is None:
        port = default_port
    elif not (port_text.isascii() and port_text.isdigit()) or not 0 < int(port_text) < 65536:
        raise ValueError(f"port {port_text[:20]!r} is not a number from 1 to 65535")
    else:
        port = int(port_text)
    return host or "127.0.0.1", port


def join_host_port(host: str, port: int) -> str:
    """`HOST:PORT`, an IPv6 host in brackets: what split_host_port() reads back."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# the widest integers the platforms take: Redis's, NATS's and Kafka's long configs are signed
# 64-bit, Kafka's int configs and most C client options 32-bit
INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1


def whole_in(low: int, high: int, unit: str = "", whose: str = "") -> Callable[[str], int]:
    """A parser of whole numbers from `low` to `high`; a value outside says the range (and
    `whose` limit it is), so that no option takes a number its platform cannot."""
    span = f"from {low:,} to {high:,}{f' {unit}' if unit else ''}"

    def parse(text: str) -> int:
        value = parse_whole(text)
        if not low <= value <= high:
            raise ValueError(f"must be a whole number {span}" + (f" ({whose})" if whose else ""))
        return value

    return parse


def parse_positive_int(text: str) -> int:
    """A whole number from 1 to the signed 64-bit maximum."""
    value = parse_whole(text)
    if not 1 <= value <= INT64_MAX:
        raise ValueError(f"must be a whole number from 1 to {INT64_MAX:,}")
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
    # `NAMESPACE.NAME` settings among the options -> where each came from: "user" (the TARGET
    # or its config= file) or "profile"
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def runtime(self) -> str:
        if self.address is not None:
            return "external"
        return str(self.options.get("runtime") or "local")


def parse_target(spec: str, platforms: Mapping[str, dict[str, OptionSpec]]) -> Target:
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
    options = {key: opt.default for key, opt in table.items()
               if not opt.refuse and opt.setting is None}
    explicit = set()
    sources: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in opts_text.split(","))):
        key, has_value, raw = item.partition("=")
        key = key.strip()
        if key not in table and "." in key and _namespace(table, key) is not None:
            if not has_value:
                raise TargetError(f"setting {key!r} of {name} needs a value: {key}=VALUE")
            full = _setting(name, table, key, raw.strip(), options)
            if full in explicit:
                raise TargetError(f"setting {full} given twice in target {spec!r}")
            explicit.add(full)
            sources[full] = "user"
            continue
        if key not in table:
            close = difflib.get_close_matches(key, list(table), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            known = ", ".join(sorted(table)) or "none"
            raise TargetError(f"unknown option {key!r} for {name} in target {spec!r}{hint}; known: {known}")
        if key in explicit:
            raise TargetError(f"option {key} given twice in target {spec!r}; give each option once "
                              "(also when the values agree)")
        opt = table[key]
        if opt.setting is not None:
            raise TargetError(f"option {key!r} of {name} is a namespace of settings: give "
                              f"{key}.NAME=VALUE ({opt.help})")
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
    # profile= first, then config=: a file's settings win over a profile's, the TARGET's own
    # over both
    for key, opt in table.items():
        if opt.expands is None or options.get(key) is None:
            continue
        for setting, raw in opt.expands(options[key]).items():
            plain = table.get(setting)
            if plain is not None and plain.setting is None and plain.expands is None:
                # a plain option (an OMB driver's replicationFactor: replication=N)
                if setting in explicit:
                    continue  # the TARGET's own value stands
                if plain.choices and str(raw) not in plain.choices:
                    raise TargetError(f"{key}={options[key]}: {setting}={raw!r}: expected one of "
                                      f"{', '.join(plain.choices)}")
                try:
                    options[setting] = plain.parse(str(raw).strip())
                except ValueError as exc:
                    raise TargetError(f"{key}={options[key]}: {setting}={raw!r}: {exc}") from None
                continue
            if _namespace(table, setting) is None:
                known = ", ".join(sorted(k for k, o in table.items() if o.setting)) or "none"
                raise TargetError(f"{key}={options[key]}: {setting!r} is not a NAMESPACE.NAME "
                                  f"setting of {name} (namespaces: {known})")
            checked: dict[str, Any] = {}
            try:
                full = _setting(name, table, setting, str(raw), checked)
            except TargetError as exc:
                raise TargetError(f"{key}={options[key]}: {exc}") from None
            if full in explicit:  # the TARGET's own value stands
                continue
            options.update(checked)
            sources[full] = opt.expands_as or "user"
    for key in sorted(explicit):
        _check_needs(name, table.get(key), key, options)
    return Target(spec, name, options, frozenset(explicit), address, label=spec.strip(),
                  sources=sources)


def _check_needs(platform: str, opt: OptionSpec | None, key: str, options: dict[str, Any]) -> None:
    """Refuse an option set without the option it needs (OptionSpec.needs)."""
    if opt is None or not opt.needs:
        return
    other, has_value, wanted = opt.needs.partition("=")
    value = options.get(other)
    if (str(value).lower() == wanted.lower()) if has_value else bool(value):
        return
    given = options[key]
    shown_value = str(given).lower() if isinstance(given, bool) else given
    raise TargetError(f"option {key}={shown_value} of {platform} has no effect without "
                      f"{opt.needs}: give {platform}:{opt.needs},{key}={shown_value}, or leave "
                      f"{key} out")


def _namespace(table: dict[str, OptionSpec], key: str) -> SettingKind | None:
    """The namespace of `NAMESPACE.NAME`: the table's option NAMESPACE, or `NAMESPACE.` when a
    plain option has the namespace's name (Kafka's topic=NAME beside topic.NAME=VALUE)."""
    prefix = key.partition(".")[0]
    for name in (prefix, prefix + "."):
        opt = table.get(name)
        if opt is not None and opt.setting is not None:
            return opt.setting
    return None


def _setting(platform: str, table: dict[str, OptionSpec], key: str, raw: str,
             into: dict[str, Any] | None = None) -> str:
    """Check `NAMESPACE.NAME=raw` against its namespace; store the typed value under
    `NAMESPACE.RECORDED_NAME` in `into`; returns that key."""
    namespace, _, setting = key.partition(".")
    kind = _namespace(table, key)
    assert kind is not None
    if not setting:
        raise TargetError(f"setting {key!r} of {platform}: expected {namespace}.NAME=VALUE")
    try:
        recorded, value = kind.check(setting, raw)
    except ValueError as exc:
        raise TargetError(f"setting {key}={raw!r} of {platform}: {exc}") from None
    full = f"{namespace}.{recorded}"
    if into is not None:
        into[full] = value
    return full


def unique_labels(targets: list[Target]) -> list[Target]:
    """Give repeated TARGET strings distinct labels (`redis`, `redis#2`)."""
    seen: dict[str, int] = {}
    out = []
    for t in targets:
        n = seen.get(t.label, 0) + 1
        seen[t.label] = n
        out.append(t if n == 1 else dataclasses.replace(t, label=f"{t.label}#{n}"))
    return out
