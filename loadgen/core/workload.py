"""Workloads: OpenMessaging-Benchmark-compatible YAML files, bundled ones by name, CLI overrides."""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import stat
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from loadgen.core.errors import WorkloadError
from loadgen.core.interventions import Intervention, parse_schedule

KEY_DISTRIBUTORS = ("NO_KEY", "KEY_ROUND_ROBIN", "RANDOM_NANO")

# OMB field name -> attribute; OMB fields streambench does not act on yet are accepted silently
_OMB_FIELDS = {
    "name": "name",
    "topics": "topics",
    "partitionsPerTopic": "partitions",
    "messageSize": "message_size",
    "keyDistributor": "key_distributor",
    "subscriptionsPerTopic": "subscriptions",
    "producersPerTopic": "producers",
    "consumerPerSubscription": "consumers",
    "producerRate": "rate",
    "testDurationMinutes": None,
    "warmupDurationMinutes": None,
    # streambench extensions for short runs and the drain
    "testDurationSeconds": None,
    "warmupDurationSeconds": None,
    "drainTimeoutSeconds": "drain_timeout_s",
    # per-broker container limits (docker runtime), e.g. 6 CPUs / 2.67g per broker
    "brokerCpus": "broker_cpus",
    "brokerMemory": "broker_memory",
    # interventions at fixed times of the measuring phase (rate changes, faults)
    "schedule": None,
    # what producerRate 0 means: `search` for the highest sustainable rate (OMB's meaning, the
    # default) or `fast`: as fast as acknowledgements allow
    "maxRate": None,
    # a producer's paced slots due within this many ms of its next one go out with it
    "pacingWindowMs": "pacing_window_ms",
}
# OMB fields read with their own rules (payloads, rate ramps) or not acted on (a warning each)
_OMB_ACCEPTED = {
    "payloadFile",
    "useRandomizedPayloads",
    "randomBytesRatio",
    "randomizedPayloadPoolSize",
    "producerStartRate",
    "producerIncrementRate",
    "producerIncrementSeconds",
    "consumerBacklogSizeGB",
    "backlogDrainRatio",
    "acceptableBacklog",
    "producerPauseDuringDrain",
}
# what OMB does with the fields streambench does not act on yet
_NOT_ACTED_ON = {
    "acceptableBacklog": "streambench's backlog phase drains to OMB's own threshold "
                         "(backlogDrainRatio) and does not read this field",
    "producerPauseDuringDrain": "the producers keep their rate during streambench's drain",
}
MAX_PAYLOAD_POOL_BYTES = 256 * 1024 * 1024  # randomized payloads kept in memory per process
# ${NAME} and ${NAME:-default} in a workload's values, as newer OMB workload files write them
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
KNOWN_FIELDS = tuple(_OMB_FIELDS) + tuple(sorted(_OMB_ACCEPTED))

# What a workload file may be: a regular file of at most this size, UTF-8 YAML nested at most
# this deep, and at most this many nodes and scalar characters with every alias expanded (a few
# lines of nested aliases can stand for billions of nodes).
MAX_FILE_BYTES = 1024 * 1024
MAX_YAML_DEPTH = 50
MAX_YAML_NODES = 10_000
MAX_YAML_CHARS = MAX_FILE_BYTES
# Bounds of the numbers: far beyond any benchmark, and small enough that nothing downstream
# overflows.
MAX_COUNT = 10_000  # topics, subscriptions, producers and consumers per topic
MAX_PARTITIONS = 100_000
MAX_RATE = 1e9  # msg/s
MAX_SECONDS = 30 * 24 * 3600.0  # test, warm-up and drain durations: 30 days
MAX_CPUS = 1024.0
MAX_PACING_WINDOW_MS = 1000.0
DEFAULT_PACING_WINDOW_MS = 0.8
PAYLOAD_POOL_BYTES = 64 * 1024 * 1024  # default random payloads: up to 64 of them in this much
_MAX_MAGNITUDE = 1e15  # any number in a workload file
_MAX_WARNINGS = 10


def shown(value: Any, limit: int = 60, quote: bool = False) -> str:
    """A value as it may appear in a one-line message: text as it is when printable and not
    `quote`d, anything else as its repr, cut to about `limit` characters."""
    if isinstance(value, str) and value.isprintable() and not quote:
        text = value[: limit + 1]
    else:
        try:
            text = repr(value[: limit + 1] if isinstance(value, str) else value)
        except ValueError:  # an int too long for its decimal repr
            text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class Workload:
    name: str = "adhoc"
    topics: int = 1
    partitions: int = 1
    message_size: int = 1024
    key_distributor: str = "NO_KEY"
    subscriptions: int = 1
    producers: int = 1
    consumers: int = 1
    rate: float = 1000.0  # aggregate msg/s over all producers; 0 = as fast as possible
    duration_s: float = 60.0  # measuring phase, after the warm-up
    warmup_s: float = 10.0
    drain_timeout_s: float = 60.0
    broker_cpus: float | None = None
    broker_memory: str | None = None
    schedule: tuple[Intervention, ...] = ()
    warnings: tuple[str, ...] = ()
    # payloads: the bytes of a file (payloadFile, its size is the message size), or a pool of
    # `payload_pool` payloads whose first `random_ratio` × size bytes are random and the rest
    # zeros (OMB's randomized payloads); default: fully random payloads
    payload_file: str | None = None
    random_ratio: float | None = None
    payload_pool: int = 0
    # OMB's backlog phase (loadgen.backlog): bytes per subscription, 0 = none
    backlog_bytes: float = 0.0
    drain_ratio: float = 1.0
    # with rate 0: search for the highest sustainable rate (loadgen.ratesearch) instead of
    # sending as fast as acknowledgements allow
    rate_search: bool = False
    # paced slots due within this long after a producer's next one go out with it, as one batch
    # when the last of them is due (loadgen.load._Pacer); 0: every slot alone
    pacing_window_ms: float = DEFAULT_PACING_WINDOW_MS

    def validate(self) -> Workload:
        def need(cond: bool, what: str) -> None:
            if not cond:
                raise WorkloadError(what)

        def at_most(value: float, limit: float, what: str) -> None:
            need(value <= limit, f"{what} must be at most {limit:,.0f} (got {shown(value)})")

        need(bool(self.name.strip()), "workload name must not be empty")
        need(self.topics >= 1, f"topics must be at least 1 (got {self.topics})")
        at_most(self.topics, MAX_COUNT, "topics")
        need(self.partitions >= 1, f"partitionsPerTopic must be at least 1 (got {self.partitions})")
        at_most(self.partitions, MAX_PARTITIONS, "partitionsPerTopic")
        need(self.message_size >= 1, f"messageSize must be at least 1 byte (got {self.message_size})")
        need(
            self.message_size <= 64 * 1024 * 1024,
            f"messageSize {self.message_size} is over the 64 MiB limit",
        )
        need(
            self.subscriptions >= 0,
            f"subscriptionsPerTopic must be 0 (produce only) or more (got {self.subscriptions})",
        )
        at_most(self.subscriptions, MAX_COUNT, "subscriptionsPerTopic")
        need(self.producers >= 1, f"producersPerTopic must be at least 1 (got {self.producers})")
        at_most(self.producers, MAX_COUNT, "producersPerTopic")
        need(self.consumers >= 1, f"consumerPerSubscription must be at least 1 (got {self.consumers})")
        at_most(self.consumers, MAX_COUNT, "consumerPerSubscription")
        need(
            math.isfinite(self.rate) and self.rate >= 0,
            f"producerRate must be a positive number of msg/s, or 0 for maximum rate (got {self.rate})",
        )
        at_most(self.rate, MAX_RATE, "producerRate (msg/s)")
        need(
            math.isfinite(self.duration_s) and self.duration_s > 0,
            f"test duration must be positive (got {self.duration_s} s)",
        )
        at_most(self.duration_s, MAX_SECONDS, "the test duration in seconds")
        need(
            math.isfinite(self.warmup_s) and self.warmup_s >= 0,
            f"warm-up duration must not be negative (got {self.warmup_s} s)",
        )
        at_most(self.warmup_s, MAX_SECONDS, "the warm-up duration in seconds")
        need(math.isfinite(self.drain_timeout_s) and self.drain_timeout_s > 0,
             "drainTimeoutSeconds must be positive")
        at_most(self.drain_timeout_s, MAX_SECONDS, "drainTimeoutSeconds")
        need(self.broker_cpus is None or (math.isfinite(self.broker_cpus) and self.broker_cpus > 0),
             f"brokerCpus must be a positive number of CPUs (got {self.broker_cpus})")
        if self.broker_cpus is not None:
            at_most(self.broker_cpus, MAX_CPUS, "brokerCpus")
        need(self.broker_memory is None or re.fullmatch(r"\d+(\.\d+)?[bkmgBKMG]?", self.broker_memory)
             is not None, f"brokerMemory must be a size like 2.67g or 512m (got {shown(self.broker_memory)})")
        need(not (self.rate_search and self.rate != 0),
             "the search for the highest sustainable rate needs producerRate 0")
        need(math.isfinite(self.backlog_bytes) and self.backlog_bytes >= 0,
             f"consumerBacklogSizeGB must be 0 or more (got {shown(self.backlog_bytes)})")
        need(0.0 <= self.drain_ratio <= 1.0,
             f"backlogDrainRatio must be between 0 and 1 (got {shown(self.drain_ratio)})")
        need(not (self.backlog_bytes and self.rate == 0),
             "consumerBacklogSizeGB needs a fixed producerRate (as in OMB, a backlog phase does "
             "not run at maximum rate)")
        need(not (self.backlog_bytes and self.subscriptions == 0),
             "consumerBacklogSizeGB needs at least one subscription")
        need(self.random_ratio is None or 0.0 <= self.random_ratio <= 1.0,
             f"randomBytesRatio must be between 0 and 1 (got {self.random_ratio})")
        need(0 <= self.payload_pool <= MAX_COUNT * 10,
             f"randomizedPayloadPoolSize must be between 0 and {MAX_COUNT * 10:,} (got {self.payload_pool})")
        need(self.payload_pool * self.message_size <= MAX_PAYLOAD_POOL_BYTES,
             f"randomizedPayloadPoolSize × messageSize is {self.payload_pool * self.message_size:,} "
             f"bytes: more than the {MAX_PAYLOAD_POOL_BYTES // 2**20} MiB kept in memory")
        need(math.isfinite(self.pacing_window_ms) and self.pacing_window_ms >= 0,
             f"pacingWindowMs must be 0 or more (got {shown(self.pacing_window_ms)})")
        at_most(self.pacing_window_ms, MAX_PACING_WINDOW_MS, "pacingWindowMs")
        need(
            self.key_distributor in KEY_DISTRIBUTORS,
            f"keyDistributor must be one of {', '.join(KEY_DISTRIBUTORS)} "
            f"(got {shown(self.key_distributor)})",
        )
        return self

    def with_overrides(self, **overrides: Any) -> Workload:
        """Apply CLI flags (None = not given) and validate."""
        given = {k: v for k, v in overrides.items() if v is not None}
        if "rate" in given and given["rate"] <= 0:
            raise WorkloadError(f"--rate must be a positive number of msg/s (got {given['rate']})")
        if "rate" in given:
            given["rate_search"] = False  # a fixed rate replaces the search
        return dataclasses.replace(self, **given).validate()

    def to_omb(self) -> dict[str, Any]:
        """The workload as OMB field names (what run.json records)."""
        return {
            "name": self.name,
            "topics": self.topics,
            "partitionsPerTopic": self.partitions,
            "messageSize": self.message_size,
            "keyDistributor": self.key_distributor,
            "subscriptionsPerTopic": self.subscriptions,
            "producersPerTopic": self.producers,
            "consumerPerSubscription": self.consumers,
            "producerRate": self.rate,
            "testDurationSeconds": self.duration_s,
            "warmupDurationSeconds": self.warmup_s,
            "drainTimeoutSeconds": self.drain_timeout_s,
            "pacingWindowMs": self.pacing_window_ms,
            **({"brokerCpus": self.broker_cpus} if self.broker_cpus is not None else {}),
            **({"brokerMemory": self.broker_memory} if self.broker_memory is not None else {}),
            **({"schedule": [i.to_schedule() for i in self.schedule]} if self.schedule else {}),
            **({"payloadFile": self.payload_file} if self.payload_file else {}),
            **({"maxRate": "search" if self.rate_search else "fast"} if self.rate == 0 else {}),
            **({"consumerBacklogSizeGB": self.backlog_bytes / 2**30,
                "backlogDrainRatio": self.drain_ratio} if self.backlog_bytes else {}),
            **({"useRandomizedPayloads": True, "randomBytesRatio": self.random_ratio,
                "randomizedPayloadPoolSize": self.payload_pool}
               if self.random_ratio is not None else {}),
        }

    def payloads(self) -> list[bytes]:
        """The payloads producers cycle through (each process makes its own)."""
        if self.payload_file is not None:
            with open(self.payload_file, "rb") as f:
                return [f.read()]
        size = self.message_size
        if self.random_ratio is not None:
            n_random = round(self.random_ratio * size)
            return [os.urandom(n_random) + bytes(size - n_random)
                    for _ in range(max(1, self.payload_pool))]
        count = max(1, min(64, PAYLOAD_POOL_BYTES // size))
        return [os.urandom(size) for _ in range(count)]


def _number(doc: dict[str, Any], key: str, kind: type, src: str) -> Any:
    value = doc[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WorkloadError(f"{src}: {key} must be a number (got {shown(value, quote=True)})")
    if isinstance(value, float) and not math.isfinite(value):
        raise WorkloadError(f"{src}: {key} must be a finite number (got {value})")
    if abs(value) > _MAX_MAGNITUDE:
        raise WorkloadError(f"{src}: {key} is out of range (got {shown(value)})")
    if kind is int and float(value) != int(value):
        raise WorkloadError(f"{src}: {key} must be a whole number (got {value!r})")
    return kind(value)


def _substitute(value: Any, where: str, src: str) -> Any:
    """${NAME} and ${NAME:-default} replaced from the environment in every text value; a value
    that is one reference alone takes the YAML type of what replaces it (15 is a number)."""
    if isinstance(value, dict):
        return {k: _substitute(v, f"{where}.{k}" if where else str(k), src) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, f"{where}[{i}]", src) for i, v in enumerate(value)]
    if not isinstance(value, str) or "${" not in value:
        return value

    def one(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        found = os.environ.get(name)
        if found is not None and (found or default is None):
            return found
        if default is not None:
            return default
        raise WorkloadError(f"{src}: {where}: ${{{name}}} is not set in the environment and has "
                            f"no default (write ${{{name}:-VALUE}})")

    text = _VARIABLE.sub(one, value)
    if _VARIABLE.fullmatch(value):
        try:
            typed = yaml.safe_load(text) if len(text) <= 100 else text
        except yaml.YAMLError:
            return text
        return typed if isinstance(typed, str | int | float | bool) else text
    return text


def _payload_path(value: Any, base: str | None, src: str) -> str:
    """payloadFile: a path as written, or relative to the workload file's folder, else to the
    working directory."""
    if not isinstance(value, str) or not value:
        raise WorkloadError(f"{src}: payloadFile must be a file path (got {shown(value, quote=True)})")
    tried = [value] if os.path.isabs(value) else [
        *([os.path.join(base, value)] if base is not None else []), os.path.abspath(value)]
    for path in tried:
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            continue
        if not stat.S_ISREG(st.st_mode):
            raise WorkloadError(f"{src}: payloadFile {shown(path, 100)} is not a regular file")
        if st.st_size == 0:
            raise WorkloadError(f"{src}: payloadFile {shown(path, 100)} is empty")
        if st.st_size > 64 * 1024 * 1024:
            raise WorkloadError(f"{src}: payloadFile {shown(path, 100)} is over the 64 MiB limit")
        if not os.access(path, os.R_OK):
            raise WorkloadError(f"{src}: payloadFile {shown(path, 100)} cannot be read")
        return os.path.abspath(path)
    raise WorkloadError(f"{src}: payloadFile {shown(value, 100)} not found (looked for "
                        f"{' and '.join(shown(p, 100) for p in tried)})")


def _ramp(doc: dict[str, Any], rate: float, duration_s: float, src: str) -> tuple[
        float, tuple[Intervention, ...]]:
    """producerStartRate / producerIncrementRate / producerIncrementSeconds: the rate starts at
    the start rate and rises by the increment at each step of the measuring phase, up to
    producerRate when that is set (0: no ceiling). Returns the first rate and the steps."""
    start = _number(doc, "producerStartRate", float, src)
    step = _number(doc, "producerIncrementRate", float, src) if "producerIncrementRate" in doc else 0.0
    every = (_number(doc, "producerIncrementSeconds", float, src)
             if "producerIncrementSeconds" in doc else 0.0)
    if start <= 0:
        raise WorkloadError(f"{src}: producerStartRate must be a positive number of msg/s (got {start:g})")
    if step < 0 or every < 0 or (step > 0) != (every > 0):
        raise WorkloadError(f"{src}: producerIncrementRate and producerIncrementSeconds go together, "
                            "each a positive number")
    steps: list[Intervention] = []
    if step > 0:
        if duration_s / every > 10_000:
            raise WorkloadError(f"{src}: producerIncrementSeconds {every:g} makes over 10,000 steps")
        k = 1
        while k * every < duration_s:
            value = start + k * step
            if rate > 0 and value >= rate:
                steps.append(Intervention("rate", None, at_s=k * every, rate=rate))
                break
            steps.append(Intervention("rate", None, at_s=k * every, rate=value))
            k += 1
    return start, tuple(steps)


def parse_workload(doc: Any, src: str, base: str | None = None) -> Workload:
    """A workload from its parsed YAML; `base` is the folder of the workload file, where a
    relative payloadFile is looked for first."""
    if not isinstance(doc, dict):
        raise WorkloadError(f"{src}: a workload must be a YAML mapping of OMB fields")
    doc = _substitute(doc, "", src)
    warnings = []
    unknown = [key for key in doc if key not in _OMB_FIELDS and key not in _OMB_ACCEPTED]
    for key in unknown[:_MAX_WARNINGS]:
        close = (difflib.get_close_matches(key, KNOWN_FIELDS, n=1, cutoff=0.5)
                 if isinstance(key, str) and len(key) <= 100 else [])
        hint = f" (did you mean {close[0]}?)" if close else ""
        warnings.append(f"{src}: unknown workload key {shown(key, quote=True)} ignored{hint}")
    if len(unknown) > _MAX_WARNINGS:
        warnings.append(f"{src}: {len(unknown) - _MAX_WARNINGS} more unknown workload keys ignored")
    kwargs: dict[str, Any] = {}
    ints = {"topics", "partitionsPerTopic", "messageSize", "subscriptionsPerTopic",
            "producersPerTopic", "consumerPerSubscription"}
    for key, attr in _OMB_FIELDS.items():
        if key not in doc or attr is None:
            continue
        if key in ("name", "keyDistributor", "brokerMemory"):
            if isinstance(doc[key], list | dict):
                raise WorkloadError(f"{src}: {key} must be text, not a list or mapping")
            kwargs[attr] = str(doc[key])
        else:
            kwargs[attr] = _number(doc, key, int if key in ints else float, src)
    for minutes_key, seconds_key, attr in (
        ("testDurationMinutes", "testDurationSeconds", "duration_s"),
        ("warmupDurationMinutes", "warmupDurationSeconds", "warmup_s"),
    ):
        if seconds_key in doc:
            kwargs[attr] = _number(doc, seconds_key, float, src)
        elif minutes_key in doc:
            kwargs[attr] = _number(doc, minutes_key, float, src) * 60.0
    if "schedule" in doc:
        kwargs["schedule"] = parse_schedule(doc["schedule"], src)
    if "warmupDurationMinutes" not in doc and "warmupDurationSeconds" not in doc:
        kwargs["warmup_s"] = 60.0  # OMB's default warm-up is one minute
    mode = doc.get("maxRate", "search")
    if mode not in ("search", "fast"):
        raise WorkloadError(f"{src}: maxRate must be search or fast (got {shown(mode, quote=True)})")
    if kwargs.get("rate", Workload.rate) == 0 and "producerRate" in doc:
        kwargs["rate_search"] = mode == "search"
    if "consumerBacklogSizeGB" in doc:
        kwargs["backlog_bytes"] = _number(doc, "consumerBacklogSizeGB", float, src) * 2**30
    if "backlogDrainRatio" in doc:
        kwargs["drain_ratio"] = _number(doc, "backlogDrainRatio", float, src)
    for key, what in _NOT_ACTED_ON.items():
        if key in doc:
            warnings.append(f"{src}: {key} is not acted on: {what}")
    if "payloadFile" in doc:
        kwargs["payload_file"] = path = _payload_path(doc["payloadFile"], base, src)
        size = os.stat(path).st_size
        if "messageSize" in doc and kwargs.get("message_size") != size:
            warnings.append(f"{src}: messageSize {kwargs.get('message_size')} does not apply: the "
                            f"payload file has {size:,} bytes, the size of every message")
        kwargs["message_size"] = size
    randomized = doc.get("useRandomizedPayloads", False)
    if not isinstance(randomized, bool):
        raise WorkloadError(f"{src}: useRandomizedPayloads must be true or false")
    if randomized and "payloadFile" in doc:
        warnings.append(f"{src}: useRandomizedPayloads is on: payloadFile is not used")
        kwargs.pop("payload_file")
    if randomized:
        kwargs["random_ratio"] = (_number(doc, "randomBytesRatio", float, src)
                                  if "randomBytesRatio" in doc else 1.0)
        kwargs["payload_pool"] = (_number(doc, "randomizedPayloadPoolSize", int, src)
                                  if "randomizedPayloadPoolSize" in doc else 1)
    elif "randomBytesRatio" in doc or "randomizedPayloadPoolSize" in doc:
        warnings.append(f"{src}: randomBytesRatio and randomizedPayloadPoolSize apply only with "
                        "useRandomizedPayloads: true")
    if "producerStartRate" in doc:
        duration = kwargs.get("duration_s", Workload.duration_s)
        kwargs["rate"], ramp = _ramp(doc, kwargs.get("rate", Workload.rate) if "producerRate" in doc
                                     else 0.0, duration, src)
        kwargs["schedule"] = tuple(kwargs.get("schedule", ())) + ramp
        kwargs["rate_search"] = False  # a ramp sets the rates itself
    elif "producerIncrementRate" in doc or "producerIncrementSeconds" in doc:
        warnings.append(f"{src}: producerIncrementRate and producerIncrementSeconds apply only "
                        "with producerStartRate")
    try:
        return Workload(**kwargs, warnings=tuple(warnings)).validate()
    except WorkloadError as exc:
        raise WorkloadError(f"{src}: {exc}") from None


def bundled_workloads() -> list[str]:
    root = resources.files("loadgen") / "workloads"
    return sorted(p.name.removesuffix(".yaml") for p in root.iterdir() if p.name.endswith(".yaml"))


class _Refused(Exception):
    """A YAML document over one of the bounds; the message says which."""


class _BoundedLoader(yaml.SafeLoader):
    """yaml's SafeLoader, refusing documents nested deeper than MAX_YAML_DEPTH, or larger than
    MAX_YAML_NODES nodes or MAX_YAML_CHARS scalar characters once aliases are expanded. The
    check runs on the composed node graph, before any Python value is built."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise _Refused(f"nested more than {MAX_YAML_DEPTH} levels deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_document(self, node: Any) -> Any:
        _expanded_size(node)
        return super().construct_document(node)


def _expanded_size(root: yaml.Node) -> None:
    """Raise _Refused if the document, aliases expanded, is over the bounds. Each distinct node
    is measured once (aliases share nodes), so this is quick even for a billion laughs."""
    done: dict[int, tuple[int, int, int]] = {}  # id(node) -> nodes, characters, height
    pending: set[int] = set()

    def size(node: yaml.Node, depth: int) -> tuple[int, int, int]:
        key = id(node)
        if key in pending:
            raise _Refused("an alias refers to a node that contains it")
        if key not in done:
            if depth > MAX_YAML_DEPTH:
                raise _Refused(f"nested more than {MAX_YAML_DEPTH} levels deep (aliases expanded)")
            if isinstance(node, yaml.ScalarNode):
                done[key] = (1, len(node.value), 0)
            else:
                pending.add(key)
                children = (node.value if isinstance(node, yaml.SequenceNode)
                            else [part for pair in node.value for part in pair])
                nodes, chars, height = 1, 0, 0
                for child in children:
                    n, c, h = size(child, depth + 1)
                    nodes, chars, height = nodes + n, chars + c, max(height, h + 1)
                    if nodes > MAX_YAML_NODES:
                        raise _Refused(f"more than {MAX_YAML_NODES:,} YAML nodes (aliases expanded)")
                    if chars > MAX_YAML_CHARS:
                        raise _Refused(f"more than {MAX_YAML_CHARS:,} characters of values "
                                       "(aliases expanded)")
                pending.discard(key)
                done[key] = (nodes, chars, height)
        nodes, chars, height = done[key]
        if depth + height > MAX_YAML_DEPTH:
            raise _Refused(f"nested more than {MAX_YAML_DEPTH} levels deep (aliases expanded)")
        return nodes, chars, height

    size(root, 1)


def _parse_yaml(data: bytes, src: str) -> Any:
    """The YAML document in `data` (UTF-8, within the bounds above), or WorkloadError."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"workload {src} is not UTF-8 text (byte 0x{data[exc.start]:02x} at "
                            f"offset {exc.start})") from None
    try:
        return yaml.load(text, Loader=_BoundedLoader)
    except _Refused as exc:
        raise WorkloadError(f"workload {src} is refused: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise WorkloadError(f"workload {src} is not valid YAML{where}") from None
    except RecursionError:
        raise WorkloadError(f"workload {src} is refused: nested too deeply") from None
    except (ValueError, OverflowError) as exc:  # a value yaml cannot build: a 5,000-digit int, 2024-13-45
        raise WorkloadError(f"workload {src} has a value that cannot be read: {shown(str(exc))}") from None


def _read_file(path: str, src: str) -> bytes:
    """The bytes of a regular file of at most MAX_FILE_BYTES, or WorkloadError. Checked before
    opening (a device or a FIFO is never opened) and again on the open file; reads at most one
    byte past the limit, whatever the file does meanwhile."""
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"),
             (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"))

    def check(st: os.stat_result) -> None:
        if not stat.S_ISREG(st.st_mode):
            kind = next((name for test, name in kinds if test(st.st_mode)), "not a regular file")
            raise WorkloadError(f"workload {src} is {kind}, not a YAML file")
        if st.st_size > MAX_FILE_BYTES:
            raise WorkloadError(f"workload {src} is {st.st_size:,} bytes: over the 1 MiB limit of a "
                                "workload file")

    try:
        check(os.stat(path))
        # O_NONBLOCK: a file replaced by a FIFO after the check cannot block the open
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            check(os.fstat(fd))
            chunks: list[bytes] = []
            left = MAX_FILE_BYTES + 1
            while left > 0:
                chunk = os.read(fd, min(left, 1 << 16))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
        finally:
            os.close(fd)
    except OSError as exc:
        raise WorkloadError(f"cannot read workload {src}: {exc.strerror or exc}") from None
    data = b"".join(chunks)
    if len(data) > MAX_FILE_BYTES:
        raise WorkloadError(f"workload {src} is over the 1 MiB limit of a workload file")
    return data


_BUNDLED_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")


def load_workload(spec: str) -> Workload:
    """A workload from a YAML file path, or a bundled workload by name."""
    src = shown(spec, 100)
    try:
        os.stat(spec)
    except (FileNotFoundError, NotADirectoryError):
        pass
    except (OSError, ValueError) as exc:  # a name too long, a loop of links, a NUL byte
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise WorkloadError(f"cannot read workload {src}: {reason}") from None
    else:
        return parse_workload(_parse_yaml(_read_file(spec, src), src), src,
                              os.path.dirname(os.path.abspath(spec)))
    if _BUNDLED_NAME.fullmatch(spec):
        bundled = resources.files("loadgen") / "workloads" / f"{spec}.yaml"
        if bundled.is_file():
            return parse_workload(_parse_yaml(bundled.read_bytes(), src), spec)
    names = bundled_workloads()
    close = difflib.get_close_matches(spec, names, n=1) if len(spec) <= 100 else []
    hint = f" (did you mean {close[0]}?)" if close else f"; bundled: {', '.join(names)}"
    raise WorkloadError(f"workload file {src} not found and no bundled workload has that name{hint}")
