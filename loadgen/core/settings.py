"""Settings of a target by namespace: `broker.NAME=VALUE` (the broker's own configuration, for
brokers streambench starts), `producer.`, `consumer.`, `admin.` (keyword arguments of the
client library), `topic.` (topic configs at creation), `conf.` (redis-server directives); a
`profile=NAME` that stands for several of them, and `config=FILE` holding them in YAML or
properties form.

Each name is checked against the platform's own list (loadgen.platforms.setting_names, the
client library's signature) with a "did you mean"; the run records what was in force with its
source: the platform's default, streambench's default (what streambench itself sets), a
profile, or the user."""

from __future__ import annotations

import difflib
import enum
import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from loadgen.core.target import OptionSpec, SettingKind, Target, parse_bool

PLATFORM_DEFAULT = "platform default"
STREAMBENCH_DEFAULT = "streambench default"
PROFILE = "profile"
USER = "user"
SOURCES = (PLATFORM_DEFAULT, STREAMBENCH_DEFAULT, PROFILE, USER)

Check = Callable[[str, str], tuple[str, Any]]
# settings whose values are (or hold) secrets: a broker's configuration read back may carry
# its own token or password (e.g. Pulsar's brokerClientAuthenticationParameters, Redis's
# requirepass); recorded as HIDDEN
SECRET_NAME = re.compile(r"pass|secret|token|credential|auth\w*param|private|keystore|jaas|"
                         r"\bkey$|key[-_.]?file|sasl|auth$", re.IGNORECASE)
HIDDEN = "(hidden)"


def hint(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def names_check(known: frozenset[str], what: str, refused: Mapping[str, str] | None = None) -> Check:
    """A check of names against `known` (values are kept as written: the broker parses them);
    `refused` names streambench sets itself, with the reason."""
    refused = dict(refused or {})

    def check(name: str, raw: str) -> tuple[str, Any]:
        if name in refused:
            raise ValueError(f"{name} is set by streambench: {refused[name]}")
        if name not in known:
            raise ValueError(f"not a {what}{hint(name, known)}")
        if "\n" in raw or "\r" in raw:
            raise ValueError("a value is one line")
        return name, raw

    return check


def _members(default: Any) -> dict[str, Any] | None:
    """The members of an enum (Python's, or a C extension's with __members__) that `default`
    is a member or the type of."""
    kind = default if isinstance(default, type) else type(default)
    if isinstance(default, bool) or kind in (int, float, str, type(None)):
        return None
    members = getattr(kind, "__members__", None)
    return dict(members) if isinstance(members, Mapping) else None


def typed(raw: str, default: Any) -> Any:
    """`raw` as the type of a keyword argument's default (a guess when the default is None)."""
    text = raw.strip()
    if isinstance(default, bool):
        return parse_bool(text)
    members = _members(default)
    if members is not None:
        by_name = {name.lower(): m for name, m in members.items()}
        # an enum's own word for a member counts too (nats-py's WORK_QUEUE is "workqueue")
        by_value = {m.value.lower(): m for m in members.values()
                    if isinstance(getattr(m, "value", None), str)}
        if text.lower() not in by_name and text.lower() in by_value:
            return by_value[text.lower()]
        if text.lower() not in by_name:
            raise ValueError(f"expected one of {', '.join(sorted(by_name))}")
        return by_name[text.lower()]
    if isinstance(default, int):
        try:
            return int(text)
        except ValueError:
            raise ValueError("expected a whole number") from None
    if isinstance(default, float):
        try:
            return float(text)
        except ValueError:
            raise ValueError("expected a number") from None
    if isinstance(default, str):
        return text
    low = text.lower()
    if low in ("none", "null"):
        return None
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def signature_defaults(*functions: Callable[..., Any]) -> dict[str, Any]:
    """Keyword arguments of the functions (the first one's default wins)."""
    found: dict[str, Any] = {}
    for function in functions:
        for name, p in inspect.signature(function).parameters.items():
            if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) or name == "self" or name in found:
                continue
            found[name] = None if p.default is inspect.Parameter.empty else p.default
    return found


def kwargs_check(params: Mapping[str, Any], library: str, aliases: Mapping[str, str] | None = None,
                 no_equivalent: Mapping[str, str] | None = None,
                 controlled: Mapping[str, str] | None = None,
                 enums: Mapping[str, type] | None = None,
                 unsettable: Mapping[str, str] | None = None) -> Check:
    """A check of a client's keyword arguments: a Java-style name (`linger.ms`) maps to the
    keyword (`linger_ms`) through `aliases` or by its dots; `no_equivalent` names settings of
    the Java client the library lacks (with what to use instead); `controlled` keywords
    streambench sets itself; `unsettable` keywords that take what a TARGET cannot give (a
    function, an object), with why; `enums` gives the enum type of a keyword whose default is
    None."""
    aliases = dict(aliases or {})
    no_equivalent = dict(no_equivalent or {})
    controlled = dict(controlled or {})
    unsettable = dict(unsettable or {})
    enums = dict(enums or {})

    def check(name: str, raw: str) -> tuple[str, Any]:
        keyword = aliases.get(name) or name.replace(".", "_").replace("-", "_")
        if keyword in controlled:
            raise ValueError(f"{keyword} is set by streambench: {controlled[keyword]}")
        if keyword in unsettable:
            raise ValueError(f"{keyword} cannot be given in a TARGET: {unsettable[keyword]}")
        if keyword not in params:
            if name in no_equivalent:
                raise ValueError(f"{library} has no equivalent of {name}: {no_equivalent[name]}")
            candidates = [k for k in params if k not in controlled and k not in unsettable]
            candidates += [a for a, k in aliases.items() if k not in controlled]
            if not candidates:
                raise ValueError(f"{library} has no setting {name}, and none of its "
                                 f"parameters ({', '.join(params)}) can be given in a TARGET")
            raise ValueError(f"{library} has no setting {name}{hint(keyword, candidates)}")
        default = enums.get(keyword, params[keyword])
        return keyword, typed(raw, default)

    return check


def namespace(help_text: str, check: Check, broker: bool = False) -> OptionSpec:
    return OptionSpec(help_text, setting=SettingKind(check, broker=broker))


# ---- config=FILE and profile=NAME ----------------------------------------------------------------

def _flatten(data: Any, prefix: str = "") -> dict[str, str]:
    if not isinstance(data, dict):
        if not prefix:
            raise ValueError("expected NAMESPACE.NAME: VALUE entries")
        if isinstance(data, (dict, list)):
            raise ValueError(f"{prefix}: expected one value")
        text = "true" if data is True else "false" if data is False else str(data)
        return {prefix: text}
    out: dict[str, str] = {}
    for key, value in data.items():
        out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def read_config_file(path: str) -> dict[str, str]:
    """`NAMESPACE.NAME` -> value from a YAML file (flat keys or nested by namespace) or a
    properties file (`NAMESPACE.NAME=VALUE` lines, # comments)."""
    file = Path(path).expanduser()
    try:
        text = file.read_text()
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    if file.suffix in (".yaml", ".yml"):
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark is not None else ""
            raise ValueError(f"{path} is not valid YAML{where}") from None
        if data is None:
            return {}
        try:
            return _flatten(data)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
    out: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"{path} line {number}: expected NAMESPACE.NAME=VALUE")
        out[key.strip()] = value.strip()
    return out


def _existing_file(text: str) -> str:
    if not Path(text).expanduser().is_file():
        raise ValueError(f"no such file: {text}")
    read_config_file(text)  # a bad file is told before anything starts
    return text


def config_option() -> OptionSpec:
    return OptionSpec("file of NAMESPACE.NAME settings (YAML or properties; the TARGET's own "
                      "settings win over it, it wins over profile=)", default=None,
                      parse=_existing_file, expands=read_config_file, expands_as=USER)


def profile_option(profiles: Mapping[str, Mapping[str, str]]) -> OptionSpec:
    described = "; ".join(f"{name}: {', '.join(f'{k}={v}' for k, v in values.items())}"
                          for name, values in profiles.items())
    return OptionSpec(f"named set of settings ({described})", default=None,
                      choices=tuple(profiles), expands=lambda name: dict(profiles[name]),
                      expands_as=PROFILE)


# ---- reading them back ----------------------------------------------------------------------

def settings_of(target: Target, space: str) -> dict[str, Any]:
    """The target's settings in one namespace, NAME -> typed value."""
    prefix = f"{space}."
    return {k[len(prefix):]: v for k, v in target.options.items() if k.startswith(prefix)}


def broker_settings(target: Target) -> list[str]:
    """The `NAMESPACE.NAME` settings of the target that configure brokers."""
    return sorted(k for k in target.sources if k.startswith(("broker.", "conf.")))


def text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum) or _members(value) is not None:
        return str(getattr(value, "name", value))
    if value is None:
        return ""
    return str(value)


class SettingsRecord:
    """The settings in force of one target, `NAMESPACE.NAME` -> {value, source, read_back}."""

    def __init__(self, target: Target) -> None:
        self._target = target
        self.entries: dict[str, dict[str, Any]] = {}

    def source(self, full: str, streambench: bool) -> str:
        given = self._target.sources.get(full)
        if given:
            return given
        return STREAMBENCH_DEFAULT if streambench else PLATFORM_DEFAULT

    def add(self, space: str, values: Mapping[str, Any], read_back: bool,
            streambench: Iterable[str] = (), defaults: Iterable[str] | None = None,
            user: Iterable[str] = ()) -> None:
        """`values` of one namespace; names in `streambench` are streambench's own choices,
        names in `user` follow one of the target's plain options the user set (e.g.
        pulsar:batching=false); `defaults` (when known) the names whose value is the platform's
        default, else every name not set by streambench, a profile or the user counts as the
        platform's."""
        ours = set(streambench)
        users = set(user)
        default_names = None if defaults is None else set(defaults)
        for name, value in values.items():
            full = f"{space}.{name}"
            source = self.source(full, name in ours)
            if source == STREAMBENCH_DEFAULT and name in users:
                source = USER
            if SECRET_NAME.search(name) and text(value):
                value = HIDDEN
            if default_names is not None and source == PLATFORM_DEFAULT and name not in default_names:
                source = STREAMBENCH_DEFAULT
            self.entries[full] = {"value": text(value), "source": source, "read_back": read_back}

    def add_requested(self) -> None:
        """The target's own settings that no read-back covered (e.g. a broker that does not
        tell that part of its configuration), as requested."""
        for full, source in self._target.sources.items():
            if full not in self.entries:
                value = text(self._target.options[full])
                if SECRET_NAME.search(full.partition(".")[2]) and value:
                    value = HIDDEN
                self.entries[full] = {"value": value, "source": source, "read_back": False}

    def result(self) -> dict[str, dict[str, Any]]:
        return dict(sorted(self.entries.items()))
