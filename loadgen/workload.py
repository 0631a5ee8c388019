"""Workloads: OpenMessaging-Benchmark-compatible YAML files, bundled ones by name, CLI overrides."""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from loadgen.errors import WorkloadError

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
}
_OMB_ACCEPTED = {
    "payloadFile",
    "useRandomizedPayloads",
    "randomBytesRatio",
    "randomizedPayloadPoolSize",
    "consumerBacklogSizeGB",
    "backlogDrainRatio",
}
KNOWN_FIELDS = tuple(_OMB_FIELDS) + tuple(sorted(_OMB_ACCEPTED))


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
    warnings: tuple[str, ...] = ()

    def validate(self) -> Workload:
        def need(cond: bool, what: str) -> None:
            if not cond:
                raise WorkloadError(what)

        need(bool(self.name.strip()), "workload name must not be empty")
        need(self.topics >= 1, f"topics must be at least 1 (got {self.topics})")
        need(self.partitions >= 1, f"partitionsPerTopic must be at least 1 (got {self.partitions})")
        need(self.message_size >= 1, f"messageSize must be at least 1 byte (got {self.message_size})")
        need(
            self.message_size <= 64 * 1024 * 1024,
            f"messageSize {self.message_size} is over the 64 MiB limit",
        )
        need(
            self.subscriptions >= 0,
            f"subscriptionsPerTopic must be 0 (produce only) or more (got {self.subscriptions})",
        )
        need(self.producers >= 1, f"producersPerTopic must be at least 1 (got {self.producers})")
        need(self.consumers >= 1, f"consumerPerSubscription must be at least 1 (got {self.consumers})")
        need(
            math.isfinite(self.rate) and self.rate >= 0,
            f"producerRate must be a positive number of msg/s, or 0 for maximum rate (got {self.rate})",
        )
        need(
            math.isfinite(self.duration_s) and self.duration_s > 0,
            f"test duration must be positive (got {self.duration_s} s)",
        )
        need(
            math.isfinite(self.warmup_s) and self.warmup_s >= 0,
            f"warm-up duration must not be negative (got {self.warmup_s} s)",
        )
        need(self.drain_timeout_s > 0, "drainTimeoutSeconds must be positive")
        need(self.broker_cpus is None or self.broker_cpus > 0,
             f"brokerCpus must be a positive number of CPUs (got {self.broker_cpus})")
        need(self.broker_memory is None or re.fullmatch(r"\d+(\.\d+)?[bkmgBKMG]?", self.broker_memory)
             is not None, f"brokerMemory must be a size like 2.67g or 512m (got {self.broker_memory})")
        need(
            self.key_distributor in KEY_DISTRIBUTORS,
            f"keyDistributor must be one of {', '.join(KEY_DISTRIBUTORS)} (got {self.key_distributor})",
        )
        return self

    def with_overrides(self, **overrides: Any) -> Workload:
        """Apply CLI flags (None = not given) and validate."""
        given = {k: v for k, v in overrides.items() if v is not None}
        if "rate" in given and given["rate"] <= 0:
            raise WorkloadError(f"--rate must be a positive number of msg/s (got {given['rate']})")
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
            **({"brokerCpus": self.broker_cpus} if self.broker_cpus is not None else {}),
            **({"brokerMemory": self.broker_memory} if self.broker_memory is not None else {}),
        }


def _number(doc: dict[str, Any], key: str, kind: type, src: str) -> Any:
    value = doc[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WorkloadError(f"{src}: {key} must be a number (got {value!r})")
    if kind is int and float(value) != int(value):
        raise WorkloadError(f"{src}: {key} must be a whole number (got {value!r})")
    return kind(value)


def parse_workload(doc: Any, src: str) -> Workload:
    if not isinstance(doc, dict):
        raise WorkloadError(f"{src}: a workload must be a YAML mapping of OMB fields")
    warnings = []
    for key in doc:
        if key not in _OMB_FIELDS and key not in _OMB_ACCEPTED:
            close = difflib.get_close_matches(str(key), KNOWN_FIELDS, n=1, cutoff=0.5)
            hint = f" (did you mean {close[0]}?)" if close else ""
            warnings.append(f"{src}: unknown workload key {key!r} ignored{hint}")
    kwargs: dict[str, Any] = {}
    ints = {"topics", "partitionsPerTopic", "messageSize", "subscriptionsPerTopic",
            "producersPerTopic", "consumerPerSubscription"}
    for key, attr in _OMB_FIELDS.items():
        if key not in doc or attr is None:
            continue
        if key in ("name", "keyDistributor", "brokerMemory"):
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
    if "warmupDurationMinutes" not in doc and "warmupDurationSeconds" not in doc:
        kwargs["warmup_s"] = 60.0  # OMB's default warm-up is one minute
    try:
        return Workload(**kwargs, warnings=tuple(warnings)).validate()
    except WorkloadError as exc:
        raise WorkloadError(f"{src}: {exc}") from None


def bundled_workloads() -> list[str]:
    root = resources.files("loadgen") / "workloads"
    return sorted(p.name.removesuffix(".yaml") for p in root.iterdir() if p.name.endswith(".yaml"))


def load_workload(spec: str) -> Workload:
    """A workload from a YAML file path, or a bundled workload by name."""
    path = Path(spec)
    if not path.exists():
        bundled = resources.files("loadgen") / "workloads" / f"{spec}.yaml"
        if bundled.is_file():
            return parse_workload(yaml.safe_load(bundled.read_text()), spec)
        names = bundled_workloads()
        close = difflib.get_close_matches(spec, names, n=1)
        hint = f" (did you mean {close[0]}?)" if close else f"; bundled: {', '.join(names)}"
        raise WorkloadError(f"workload file {spec} not found and no bundled workload has that name{hint}")
    if path.is_dir():
        raise WorkloadError(f"workload {spec} is a directory, not a YAML file")
    try:
        text = path.read_text()
    except OSError as exc:
        raise WorkloadError(f"cannot read workload {spec}: {exc.strerror}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise WorkloadError(f"workload {spec} is not valid YAML{where}") from None
    return parse_workload(doc, spec)
