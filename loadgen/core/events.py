"""What happens in a run, as the bus carries it: phase changes, events worth keeping in the run
files (a stack started, a fault injected, a warning) and the run's description."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loadgen.core.ticks import Phase


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
