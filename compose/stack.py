"""The Stack interface: up, ready, down, describe — one per target."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

Progress = Callable[[str], None]
# (kind, detail) of something worth keeping in the run files, e.g. a fault injected
StackEvents = Callable[[str, str], None]


def _no_events(kind: str, detail: str) -> None:
    return None


@dataclass(frozen=True)
class StackContext:
    """Where a stack runs: the run's id and the target's index (compose project names and
    container labels), and where its events go (the run's bus)."""

    run_id: str = "manual"
    index: int = 0
    events: StackEvents = _no_events
    log_dir: Path | None = None  # where the brokers' logs are kept when the stack goes down


@dataclass(frozen=True)
class StackDescription:
    """What drivers and collectors need to know about a running stack."""

    runtime: str  # local | docker | external
    endpoints: dict[str, str]  # e.g. {"redis": "127.0.0.1:6379"}
    pids: tuple[int, ...] = ()  # broker processes (local runtime)
    container_ids: tuple[str, ...] = ()  # broker containers (docker runtime)
    version: str = ""
    config: dict[str, str] = field(default_factory=dict)  # settings worth recording in run.json


class Stack(ABC):
    runtime: str = "local"
    context: StackContext = StackContext()

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
    def describe(self) -> StackDescription: ...
