"""What a running stack tells the drivers and collectors about itself (a vocabulary module: it
imports nothing of streambench's but loadgen.core.errors, so every layer may use it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

# one line of start-up progress ("redis: starting redis-server")
Progress = Callable[[str], None]
# (kind, detail) of something worth keeping in the run files, e.g. a fault injected
StackEvents = Callable[[str, str], None]


@dataclass(frozen=True)
class StackDescription:
    """What drivers and collectors need to know about a running stack."""

    runtime: str  # local | docker | external
    endpoints: dict[str, str]  # e.g. {"redis": "127.0.0.1:6379"}
    pids: tuple[int, ...] = ()  # broker processes (local runtime), as they are now
    container_ids: tuple[str, ...] = ()  # broker containers (docker runtime)
    version: str = ""
    config: dict[str, str] = field(default_factory=dict)  # settings worth recording in run.json
    # what streambench wrote into the brokers' configuration (its own choices and the target's
    # `broker.` settings), name -> value
    broker_settings: dict[str, str] = field(default_factory=dict)
    # a stack that put proxies of its own in front of its listeners (network faults): what the
    # clients reach instead of `endpoints` (which the collectors keep), and each proxy →
    # `proxy → broker`
    client_endpoints: dict[str, str] = field(default_factory=dict)
    proxies: dict[str, str] = field(default_factory=dict)
