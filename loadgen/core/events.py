"""What happens in a run, as the bus carries it: phase changes, events worth keeping in the run
files (a stack started, a fault injected, a warning) and the run's description."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from loadgen.core.ticks import Phase


class EventKind(StrEnum):
    """Every kind of run event, the one list the run loop, the stacks, the end-of-run summary
    and the report take their names from (a test holds the code and the summary to it)."""

    # interventions: the load changed (a RunEvent's kind is the intervention's action)
    RATE = "rate"
    PRODUCERS = "producers"
    CONSUMERS = "consumers"
    # a broker fault, recorded by the stack (`fault-<action>` for each action of FAULTS), and a
    # broker that stopped by itself
    FAULT_PAUSE = "fault-pause"
    FAULT_RESUME = "fault-resume"
    FAULT_KILL = "fault-kill"
    FAULT_START = "fault-start"
    FAULT_RESTART = "fault-restart"
    BROKER_DIED = "broker-died"
    # a network fault on a target's proxied links (`net-<action>` for each of NETWORK_ACTIONS)
    NET_LATENCY = "net-latency"
    NET_BANDWIDTH = "net-bandwidth"
    NET_PARTITION = "net-partition"
    NET_RESET = "net-reset"
    NET_HEAL = "net-heal"
    # what the run loop measured after a fault or a consumers' restart
    RECOVERED = "recovered"
    NOT_RECOVERED = "not-recovered"
    BACKLOG_DRAINED = "backlog-drained"
    # OpenMessaging Benchmark's backlog phase and rate search
    BACKLOG_BUILT = "backlog-built"
    BACKLOG_DRAIN_DONE = "backlog-drain-done"
    RATE_SEARCH = "rate-search"
    RATE_SEARCH_CONVERGED = "rate-search-converged"
    RATE_SEARCH_RESULT = "rate-search-result"
    # streambench itself: seconds that describe the tool rather than the broker
    LOADGEN_SATURATED = "loadgen-saturated"
    LOADGEN_RECOVERED = "loadgen-recovered"
    COORDINATOR_LATE = "coordinator-late"
    INTERVENTION_FAILED = "intervention-failed"
    MEMORY_LOW = "memory-low"
    BROKER_MEMORY_HIGH = "broker-memory-high"
    HANGUP = "hangup"  # the terminal hung up: the run stopped early
    CLOCK_BOUND = "clock-bound"  # the nodes' clock bound is coarse against the e2e p50
    NODE_LOST = "node-lost"  # a cluster node's load actor is gone; the run goes on without it
    RELAY_LOST = "relay-lost"  # a tick relay is gone; its nodes are asked directly (no loss)
    # clients and collectors
    CONSUMER_FAILED = "consumer-failed"
    CONNECTION_LOST = "connection-lost"
    RECONNECTED = "reconnected"
    SEND_ERROR = "send-error"
    SEND_RECOVERED = "send-recovered"
    RECEIVE_ERROR = "receive-error"
    COLLECTOR_ERROR = "collector-error"
    COLLECTOR_RECOVERED = "collector-recovered"
    ASSIGNMENT = "assignment"  # the partitions the consumers hold, at start-up and each change
    # the end of the load
    DRAIN_SKIPPED = "drain-skipped"
    DRAIN_INCOMPLETE = "drain-incomplete"
    DRAIN_STALLED = "drain-stalled"
    MESSAGES_LOST = "messages-lost"
    DELIVERY_AUDIT = "delivery-audit"  # the delivery audit's verdict (--audit)
    # stacks (docker)
    STACK_UP = "stack-up"
    STACK_DOWN = "stack-down"
    # a phase change, as a replay of recorded events carries it
    PHASE = "phase"


NETWORK_KINDS: frozenset[EventKind] = frozenset({
    EventKind.NET_LATENCY, EventKind.NET_BANDWIDTH, EventKind.NET_PARTITION, EventKind.NET_RESET,
    EventKind.NET_HEAL})


FAULT_KINDS: frozenset[EventKind] = frozenset({
    EventKind.FAULT_PAUSE, EventKind.FAULT_RESUME, EventKind.FAULT_KILL, EventKind.FAULT_START,
    EventKind.FAULT_RESTART}) | NETWORK_KINDS  # the faults a run injects, on brokers and links


def network_kind(action: str) -> EventKind:
    """The event of one network fault action (`partition` → `net-partition`)."""
    return EventKind(f"net-{action}")


def fault_kind(action: str) -> EventKind:
    """The event a stack records for one fault action of FAULTS (`kill` → `fault-kill`)."""
    return EventKind(f"fault-{action}")


@dataclass(frozen=True, slots=True)
class PhaseChange:
    """Published on the bus when the run moves to another phase."""

    phase: Phase
    time_ns: int
    message: str = ""


@dataclass(frozen=True, slots=True)
class RunEvent:
    """Something worth keeping in the run files: a stack started, a fault injected, a warning."""

    time_ns: int
    target: str
    kind: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class RunMeta:
    """The run's description (workload, targets, versions, host; at the end also the totals):
    published when the brokers are up and again when the run ends. The sink keeps the latest
    as run.json."""

    meta: dict[str, Any]
