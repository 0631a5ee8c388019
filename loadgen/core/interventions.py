"""Interventions in a running benchmark: rate changes, producers and consumers stopped and
started, broker faults, network faults on the links between clients and brokers. The same
records come from the dashboard's keys, from `--at` flags and from a workload's `schedule:`
list, so a session found interactively can be replayed exactly.

Shared vocabulary: parsing and validation only; the run loop carries them out."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any

from loadgen.core.errors import WorkloadError

FAULT_ACTIONS = ("pause", "resume", "kill", "start", "restart")
SWITCH_ACTIONS = ("producers", "consumers")  # = stop | start
# faults of a target's proxied links (latency=50ms[,jitter=10ms]@T, bandwidth=1MB/s@T,
# partition@T, reset@T, heal@T, heal): Toxiproxy in front of each client listener
NETWORK_ACTIONS = ("latency", "bandwidth", "partition", "reset", "heal")
# the key of a target's options set when the run puts its client links behind proxies
PROXIED_OPTION = "network_faults"
# the sides of a broker a network fault can cut or slow alone (@BROKER:SIDE): the links to its
# clients, or those to the other brokers of its cluster
SIDES = ("clients", "peers")
# @LABEL-leader: the broker that leads the target's partitions when the fault strikes (the
# stack finds it), for a platform whose stack proxies each broker's links
LEADER = "leader"
ACTIONS = ("rate", *SWITCH_ACTIONS, *FAULT_ACTIONS, *NETWORK_ACTIONS)
MAX_RATE = 1e9
MAX_DELAY_MS = 60_000.0
MIN_BANDWIDTH = 1000.0  # B/s: Toxiproxy's bandwidth toxic counts whole KB/s
_DELAY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(us|ms|s)?\s*$", re.IGNORECASE)
_DELAY_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}
_BANDWIDTH = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmg]i?)?b/s\s*$", re.IGNORECASE)
_BANDWIDTH_UNITS = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "ki": 2.0**10, "mi": 2.0**20, "gi": 2.0**30}

_TIME = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s?)?\s*$")


@dataclass(frozen=True)
class Intervention:
    """One change to a running benchmark. `target` is a target label or None for every target;
    faults name a `broker` (its target's label, or label-N for one of several brokers)."""

    action: str
    target: str | None = None
    broker: str | None = None
    rate: float | None = None  # msg/s for "rate"; 0 = as fast as acknowledgements allow
    state: str | None = None  # "stop" | "start" for producers and consumers
    at_s: float | None = None  # seconds after the measuring phase starts (scheduled ones)
    # "rate" from a rate search giving a rate up: slots owed at the old rate are dropped
    drop_owed: bool = False
    latency_ms: float | None = None  # "latency": the delay added to each response, and its jitter
    jitter_ms: float | None = None
    bandwidth: float | None = None  # "bandwidth": B/s each way on each connection
    side: str | None = None  # a network fault on one side of its brokers only (SIDES)

    @property
    def network(self) -> bool:
        return self.action in NETWORK_ACTIONS

    def describe(self) -> str:
        where = (f"@{self.target}" if self.target else "") + (f":{self.side}" if self.side else "")
        if self.action == "rate":
            assert self.rate is not None
            value = "max" if self.rate == 0 else f"{self.rate:g}"
            return f"rate={value}{where}"
        if self.action in SWITCH_ACTIONS:
            return f"{self.action}={self.state}{where}"
        if self.network:
            return f"{self.action}{self._network_value()}{where}"
        return f"{self.action}={self.broker}"

    def _network_value(self) -> str:
        if self.action == "latency":
            jitter = f",jitter={self.jitter_ms:g}ms" if self.jitter_ms else ""
            return f"={self.latency_ms:g}ms{jitter}"
        if self.action == "bandwidth":
            assert self.bandwidth is not None
            return f"={bandwidth_text(self.bandwidth)}"
        return ""

    def to_schedule(self) -> dict[str, Any]:
        """As an entry of a workload's `schedule:` list."""
        entry: dict[str, Any] = {"at": f"{self.at_s:g}s", "action": self.action}
        if self.target:
            entry["target"] = self.target
        if self.broker:
            entry["broker"] = self.broker
        if self.rate is not None:
            entry["rate"] = self.rate
        if self.state:
            entry["state"] = self.state
        if self.latency_ms is not None:
            entry["latency"] = f"{self.latency_ms:g}ms"
        if self.jitter_ms:
            entry["jitter"] = f"{self.jitter_ms:g}ms"
        if self.bandwidth is not None:
            entry["bandwidth"] = bandwidth_text(self.bandwidth)
        if self.side:
            entry["side"] = self.side
        return entry


def bandwidth_text(bytes_per_s: float) -> str:
    """The shortest of the units that show the rate exactly (2MiB/s stays 2MiB/s): it parses
    back to the same rate."""
    texts = [f"{bytes_per_s:.15g}B/s"]
    for unit, size in (("GB", 1e9), ("GiB", 2.0**30), ("MB", 1e6), ("MiB", 2.0**20), ("KB", 1e3),
                       ("KiB", 2.0**10)):
        value = f"{bytes_per_s / size:.15g}"
        if bytes_per_s >= size and float(value) * size == bytes_per_s:
            texts.append(f"{value}{unit}/s")
    return min(texts, key=len)


def parse_delay(text: str, what: str) -> float:
    """'50ms', '50' (ms), '0.5s', '800us' → milliseconds."""
    m = _DELAY.match(text)
    if m is None:
        raise WorkloadError(f"{what}: {text[:40]!r} is not a delay (e.g. 50ms, 0.5s, 800us)")
    ms = float(m.group(1)) * _DELAY_UNITS[(m.group(2) or "ms").lower()]
    if ms > MAX_DELAY_MS:
        raise WorkloadError(f"{what}: {text[:40]!r}: at most {MAX_DELAY_MS / 1e3:g} s")
    return ms


def parse_bandwidth(text: str, what: str) -> float:
    """'1MB/s', '512KB/s', '2MiB/s' → bytes per second."""
    m = _BANDWIDTH.match(text)
    if m is None:
        raise WorkloadError(f"{what}: {text[:40]!r} is not a bandwidth (e.g. 1MB/s, 512KB/s, 2MiB/s)")
    rate = float(m.group(1)) * _BANDWIDTH_UNITS[(m.group(2) or "").lower()]
    if not MIN_BANDWIDTH <= rate <= 1e12:
        raise WorkloadError(f"{what}: {text[:40]!r}: from 1KB/s up")
    return rate


def _parse_network(action: str, rest: str, what: str, at_s: float | None) -> Intervention:
    """`latency=50ms[,jitter=10ms]`, `bandwidth=1MB/s`, `partition`, `reset`, `heal`, each with
    an optional @TARGET or @BROKER (none: every target), then an optional :clients or :peers
    (one side of the brokers only). The run tells a broker's name from a target's label
    (network_scope)."""
    value, _, where = rest.partition("@")
    place, colon, side = where.strip().rpartition(":")
    side_name: str | None = side.strip().lower()
    if not colon or side_name not in SIDES:
        place, side_name = where.strip(), None
    target_label = place.strip() or None
    value = value.strip()
    if side_name is not None and target_label is None:
        raise WorkloadError(f"{what}: :{side_name} follows a target or broker ({action}@kafka-2:{side_name})")
    if action in ("partition", "reset", "heal"):
        if value:
            raise WorkloadError(f"{what}: {action} takes no value ({action}@TARGET or {action})")
        return Intervention(action, target_label, at_s=at_s, side=side_name)
    if not value.startswith("="):
        example = "latency=50ms,jitter=10ms" if action == "latency" else "bandwidth=1MB/s"
        raise WorkloadError(f"{what}: {action} needs a value (e.g. {example}@redis)")
    first, *more = value[1:].split(",")
    if action == "bandwidth":
        if more:
            raise WorkloadError(f"{what}: bandwidth takes one value (e.g. bandwidth=1MB/s)")
        return Intervention(action, target_label, at_s=at_s, bandwidth=parse_bandwidth(first, what),
                            side=side_name)
    jitter = 0.0
    for part in more:
        name, eq, amount = part.partition("=")
        if name.strip().lower() != "jitter" or not eq:
            raise WorkloadError(f"{what}: {part[:40]!r}: latency takes jitter=DELAY after its delay")
        jitter = parse_delay(amount, what)
    delay = parse_delay(first, what)
    if delay <= 0:
        raise WorkloadError(f"{what}: latency must be more than 0 ms")
    return Intervention(action, target_label, at_s=at_s, latency_ms=delay, jitter_ms=jitter,
                        side=side_name)


def parse_seconds(text: str, what: str) -> float:
    """'30s', '90', '1m30s', '2m', '2.5s' → seconds."""
    m = _TIME.match(text)
    if not text.strip() or m is None or not (m.group(1) or m.group(2)):
        raise WorkloadError(f"{what}: {text[:40]!r} is not a time (e.g. 30s, 90, 1m30s)")
    return float(m.group(1) or 0) * 60 + float(m.group(2) or 0)


def parse_rate(text: str, what: str) -> float:
    if text.strip().lower() in ("max", "0"):
        return 0.0
    if not text.strip():
        raise WorkloadError(f"{what}: no rate given: a number of msg/s (e.g. 5000) or max")
    try:
        rate = float(text)
    except ValueError:
        raise WorkloadError(f"{what}: rate {text[:40]!r} is not a number of msg/s (or max)") from None
    if not math.isfinite(rate) or rate <= 0 or rate > MAX_RATE:
        raise WorkloadError(f"{what}: rate must be a positive number of msg/s up to {MAX_RATE:,.0f} "
                            f"(or max), got {text[:40]!r}")
    return rate


def parse_action(text: str, what: str, at_s: float | None = None) -> Intervention:
    """`ACTION=VALUE[@TARGET]`: rate=5000, rate=max@redis:aof, consumers=stop, kill=kafka-2,
    latency=20ms@redis, partition@redis, heal."""
    name = re.split(r"[=@]", text, maxsplit=1)[0]
    if name.strip().lower() in NETWORK_ACTIONS:
        return _parse_network(name.strip().lower(), text[len(name):], what, at_s)
    action, _, rest = text.partition("=")
    action = action.strip().lower()
    if action not in ACTIONS:  # a known action without =VALUE is told what value it takes below
        raise WorkloadError(f"{what}: {text[:60]!r}: expected ACTION=VALUE with ACTION one of "
                            f"{', '.join(ACTIONS)}")
    if action in FAULT_ACTIONS:
        broker = rest.strip()
        if not broker:
            raise WorkloadError(f"{what}: {action}= needs a broker (e.g. {action}=kafka-2)")
        return Intervention(action, broker=broker, at_s=at_s)
    value, _, target = rest.partition("@")
    target_label = target.strip() or None
    if action == "rate":
        return Intervention("rate", target_label, rate=parse_rate(value, what), at_s=at_s)
    state = value.strip().lower()
    if state not in ("stop", "start"):
        raise WorkloadError(f"{what}: {action}= takes stop or start (got {value[:40]!r})")
    return Intervention(action, target_label, state=state, at_s=at_s)


def parse_at(text: str) -> Intervention:
    """One `--at TIME:ACTION=VALUE[@TARGET]` flag."""
    when, colon, rest = text.partition(":")
    if not colon:
        raise WorkloadError(f"--at {text[:60]!r}: expected TIME:ACTION=VALUE (e.g. 30s:rate=5000)")
    return parse_action(rest, f"--at {text[:60]!r}", parse_seconds(when, f"--at {text[:60]!r}"))


def parse_schedule(entries: Any, src: str) -> tuple[Intervention, ...]:
    """A workload's `schedule:` list: entries with at, action and target/broker/rate/state."""
    if not isinstance(entries, list):
        raise WorkloadError(f"{src}: schedule must be a list of entries with at and action")
    out = []
    for i, entry in enumerate(entries):
        what = f"{src}: schedule entry {i + 1}"
        if not isinstance(entry, dict) or "at" not in entry or "action" not in entry:
            raise WorkloadError(f"{what}: needs at and action")
        unknown = set(entry) - {"at", "action", "target", "broker", "rate", "state", "latency",
                                "jitter", "bandwidth", "side"}
        if unknown:
            raise WorkloadError(f"{what}: unknown field {sorted(map(str, unknown))[0][:40]!r}")
        at_s = parse_seconds(str(entry["at"]), what)
        action = str(entry["action"]).strip().lower()
        target = entry.get("target")
        if action in NETWORK_ACTIONS:
            value = {"latency": f"={entry.get('latency', '')}" + (
                         f",jitter={entry['jitter']}" if "jitter" in entry else ""),
                     "bandwidth": f"={entry.get('bandwidth', '')}"}.get(action, "")
            where = (f"@{target}" if target else "") + (f":{entry['side']}" if "side" in entry else "")
            out.append(parse_action(action + value + where, what, at_s))
            continue
        if action == "rate":
            value = str(entry.get("rate", ""))
        elif action in SWITCH_ACTIONS:
            value = str(entry.get("state", ""))
        else:
            value = str(entry.get("broker", ""))
        spec = f"{action}={value}" + (f"@{target}" if target and action not in FAULT_ACTIONS else "")
        out.append(parse_action(spec, what, at_s))
    return tuple(out)


def check_schedule(interventions: tuple[Intervention, ...], labels: list[str],
                   brokers: dict[str, dict[str, str]], duration_s: float,
                   faults: dict[str, tuple[str, ...]] | None = None) -> None:
    """Every scheduled intervention names a known target or broker and falls inside the
    measuring phase; raises WorkloadError naming the first that does not. `brokers` maps each
    target label to its brokers' names, `faults` to the faults its platform takes there."""
    for item in interventions:
        what = f"scheduled {item.describe()} at {item.at_s:g}s"
        if item.at_s is not None and item.at_s > duration_s:
            raise WorkloadError(f"{what}: after the end of the measuring phase ({duration_s:g}s)")
        if item.network:
            item = network_scope(item, labels, brokers, what)
        if item.target is not None and item.target not in labels:
            raise WorkloadError(f"{what}: no target {item.target!r}; targets: {', '.join(labels)}")
        if item.network and faults is not None:
            for label in [item.target] if item.target is not None else labels:
                check_fault(item.action, label, faults.get(label, ()), what)
        if item.broker is not None and not item.network:
            label, _ = find_broker(item.broker, brokers, what)
            if faults is not None:
                check_fault(item.action, label, faults.get(label, ()), what)


def network_scope(item: Intervention, labels: list[str], brokers: dict[str, dict[str, str]],
                  what: str) -> Intervention:
    """A network fault's @WHERE as the run has it: a target's label (its every broker) stays
    as it is; a broker's name (kafka-2, as faults name it) becomes its target's label, with
    `broker` the stack's own name for it; the stem of its brokers' names (kafka for kafka-2)
    names the whole target, and STEM-leader the broker leading (LEADER, which the stack
    resolves when the fault strikes); anything else is WorkloadError naming both lists."""
    if item.target is None or item.target in labels or item.broker is not None:
        return item
    for label, names in brokers.items():
        if item.target in names:
            return dataclasses.replace(item, target=label, broker=names[item.target])
    stem, dash, word = item.target.rpartition("-")
    leader = bool(dash) and word == LEADER
    for label, names in brokers.items():
        if _stem_of(stem if leader else item.target, label, names):
            return dataclasses.replace(item, target=label, broker=LEADER if leader else None)
    known = [n for names in brokers.values() for n in first_names(names)]
    raise WorkloadError(f"{what}: no target or broker {item.target!r}; targets: {', '.join(labels)}"
                        + (f"; brokers: {', '.join(known)}" if known else ""))


def _stem_of(stem: str, label: str, names: dict[str, str]) -> bool:
    """Whether `stem` names the target: its label, or what its brokers' names LABEL-N begin with."""
    return stem == label or any(n.rpartition("-")[0] == stem for n in names)


def check_fault(action: str, label: str, allowed: tuple[str, ...], what: str) -> None:
    """WorkloadError unless the target's platform takes this fault on its runtime."""
    if action in NETWORK_ACTIONS and action not in allowed:
        raise WorkloadError(f"{what}: {label}'s clients do not reach it through a proxy: network "
                            "faults need --network-faults (or one in --at or the schedule) when "
                            "the run starts, on a target streambench starts")
    if action not in allowed:
        takes = f"it takes {', '.join(allowed)}" if allowed else "it takes no faults"
        raise WorkloadError(f"{what}: {label}'s platform has no {action!r} fault here; {takes}")


def find_broker(name: str, brokers: dict[str, dict[str, str]], what: str) -> tuple[str, str]:
    """(target label, the stack's own name for the broker) of a broker named as the user sees
    it, or WorkloadError listing the brokers there are."""
    for label, names in brokers.items():
        if name in names:
            return label, names[name]
    known = [n for names in brokers.values() for n in first_names(names)]
    listed = ", ".join(known) if known else "none (every target is an existing cluster)"
    raise WorkloadError(f"{what}: no broker {name!r}; brokers: {listed}")


def first_names(names: dict[str, str]) -> list[str]:
    """One user name per broker: the first given (the short form when there is one)."""
    seen: dict[str, str] = {}
    for name, own in names.items():
        seen.setdefault(own, name)
    return list(seen.values())


def broker_names(label: str, stack_brokers: list[str]) -> dict[str, str]:
    """The names users give a target's brokers → the stack's own names: the label for the
    broker of a one-broker target, label-N for broker N of several, label-NAME for other nodes
    (e.g. kafka-zk-zookeeper)."""
    numbered = [own for own in stack_brokers if re.search(r"-\d+$", own)]
    single = numbered[0] if len(numbered) == 1 else stack_brokers[0] if len(stack_brokers) == 1 else None
    names = {}
    for own in stack_brokers:
        m = re.search(r"-(\d+)$", own)
        if own == single:
            names[label] = own
        else:
            names[f"{label}-{m.group(1)}" if m else f"{label}-{own}"] = own
    return names
