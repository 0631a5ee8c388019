"""The Stack interface: up, ready, down, describe — one per target — and the fault hooks
(pause, resume, kill, start, restart one broker) that every runtime streambench starts brokers
in implements."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.core.errors import StackError
from loadgen.core.events import EventKind, fault_kind
from loadgen.core.interventions import Intervention
from loadgen.core.stackinfo import Progress, StackDescription, StackEvents

__all__ = ["CADVISOR_ADDRESS", "FAULTS", "FAULT_ALIASES", "RUNTIME_NOTE", "Progress", "Stack",
           "StackContext", "StackDescription", "StackEvents", "announce_runtime"]

# what Stack.fault does to one broker: freeze it / let it go on, crash it (its data stays) /
# start it again on the same ports and data, stop it gracefully and start it again
FAULTS = ("pause", "resume", "kill", "start", "restart")
FAULT_ALIASES = {"unpause": "resume"}  # docker's word

# the key of a target's options under which the runtime rule leaves why it chose the runtime
# (when the user did not), for the stack to say as its first progress line
RUNTIME_NOTE = "runtime_note"
# the key of a docker target's options under which `--cadvisor HOST:PORT` names the running
# cAdvisor its container figures are read from (with resources=cadvisor and no such key,
# streambench starts one for the target)
CADVISOR_ADDRESS = "cadvisor_address"
WATCH_INTERVAL_S = 0.5  # how often a running stack checks that its brokers still run


def _no_events(kind: str, detail: str) -> None:
    return None


def announce_runtime(progress: Progress, label: str, options: dict[str, Any]) -> None:
    """`redis: local runtime (image redis:7.2.7 not present; …)` when the runtime was chosen
    by the default rule."""
    note = options.get(RUNTIME_NOTE)
    if note:
        progress(f"{label}: {note}")


@dataclass(frozen=True)
class StackContext:
    """Where a stack runs: the run's id and the target's index (compose project names and
    container labels), and where its events go (the run's bus)."""

    run_id: str = "manual"
    index: int = 0
    events: StackEvents = _no_events
    log_dir: Path | None = None  # where the brokers' logs are kept when the stack goes down
    # endpoint key → HOST:PORT its brokers tell their clients to connect to instead of their own
    # listener (the proxy in front of it, for network faults: Platform.advertised_endpoints)
    advertised: dict[str, str] = field(default_factory=dict)


class Stack(ABC):
    runtime: str = "local"
    context: StackContext = StackContext()
    _label: str = "stack"

    def attach(self, context: StackContext) -> None:
        """Called by the run before up()."""
        self.context = context

    @abstractmethod
    async def up(self, progress: Progress) -> None:
        """Start the brokers (nothing for the external runtime)."""

    @abstractmethod
    async def ready(self, timeout_s: float, progress: Progress) -> None:
        """Wait until the brokers answer, or raise StackError naming what did not."""

    @abstractmethod
    async def down(self) -> None:
        """Stop everything up() started and remove its data. Safe to call more than once and
        after a failed up()."""

    @abstractmethod
    def describe(self) -> StackDescription:
        """The stack as it is now (after a restarted broker: its new pid)."""

    def log_files(self) -> list[Path]:
        """The brokers' own log files while the stack runs, the brokers' first (local runtime;
        none for containers, whose output docker keeps, or for an existing cluster)."""
        return []

    # -- faults --

    def brokers(self) -> list[str]:
        """The nodes a fault can target, in order (none for an existing cluster)."""
        return []

    async def fault(self, action: str, broker: str) -> None:
        """Inject one fault (FAULTS; `unpause` is `resume`) into one broker and record it as
        a `fault-<action>` event; StackError when the action, the broker or the runtime does
        not allow it."""
        if self.runtime == "external":
            raise StackError(f"{self._label}: cannot {action} {broker!r}: faults need a broker "
                             "streambench started (local or docker runtime), not an existing cluster")
        name = FAULT_ALIASES.get(action, action)
        if name not in FAULTS:
            raise StackError(f"{self._label}: unknown fault {action!r}; faults: {', '.join(FAULTS)}")
        brokers = self.brokers()
        if broker not in brokers:
            raise StackError(f"{self._label}: no broker {broker!r}; brokers: "
                             f"{', '.join(brokers) or 'none'}")
        # while a fault stops a broker on purpose, its death is expected, not a failure
        self._expected().add(broker)
        try:
            detail = await self._apply_fault(name, broker)
        finally:
            if name != "kill":
                self._expected().discard(broker)
        self.context.events(fault_kind(name), detail)

    # -- brokers that die --

    def _expected(self) -> set[str]:
        """Brokers a fault has stopped (killed and not started again)."""
        expected: set[str] | None = self.__dict__.get("_expected_down")
        if expected is None:
            expected = self.__dict__["_expected_down"] = set()
        return expected

    def down_brokers(self) -> dict[str, str]:
        """Brokers of brokers() that are not running now → how they ended (e.g. "exit code
        137"); none for an existing cluster."""
        return {}

    async def watch(self, interval_s: float = WATCH_INTERVAL_S) -> None:
        """Until cancelled: notice at once when a broker ends that no fault stopped, and record
        a `broker-died` event (once per death; again if it dies after being started again)."""
        reported: set[str] = set()
        while True:
            await asyncio.sleep(interval_s)
            try:
                down = await asyncio.to_thread(self.down_brokers)
            except Exception:  # the engine not answering now is not a broker's death
                continue
            for broker, how in down.items():
                if broker not in reported and broker not in self._expected():
                    reported.add(broker)
                    self.context.events(EventKind.BROKER_DIED, f"{broker}: {how}")
            reported &= set(down)  # a broker that runs again may be reported again

    async def network_fault(self, item: Intervention, broker: str | None, side: str | None) -> str:
        """One network fault (NETWORK_ACTIONS) on the links of one broker of brokers() (None:
        every broker), on one side of it (`clients`, `peers`; None: both), for a stack that
        put proxies of its own in front of its links (StackDescription.client_endpoints);
        returns what it did, for its event."""
        raise StackError(f"{self._label}: {item.describe()}: its links do not go through a proxy "
                         "of its own")

    async def _apply_fault(self, action: str, broker: str) -> str:
        """Do one fault (a name of FAULTS) to one of brokers(); returns the event's detail."""
        raise StackError(f"{self._label}: the {self.runtime} runtime has no fault hooks")

    # the hooks by name, as the run's fault requests reach them
    async def pause(self, broker: str) -> None:
        """Freeze every process of one broker: it stops answering and keeps its state."""
        await self.fault("pause", broker)

    async def resume(self, broker: str) -> None:
        await self.fault("resume", broker)

    async def unpause(self, broker: str) -> None:
        await self.fault("unpause", broker)

    async def kill(self, broker: str) -> None:
        """Crash one broker (SIGKILL); its data stays for `start`."""
        await self.fault("kill", broker)

    async def start(self, broker: str) -> None:
        """Start a killed broker again (same command, ports and data) and wait until it answers."""
        await self.fault("start", broker)

    async def restart(self, broker: str) -> None:
        """Stop one broker gracefully (SIGTERM, SIGKILL after a grace time), then start it."""
        await self.fault("restart", broker)
