"""What a platform declares: its TARGET options and how to make its stack, driver and collectors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from collectors.base import Collector
from compose.stack import FAULTS, Stack, StackDescription
from loadgen.platforms.base import Driver
from loadgen.target import OptionSpec, Target


@dataclass(frozen=True)
class Platform:
    name: str
    summary: str
    options: dict[str, OptionSpec]
    runtimes: tuple[str, ...]
    make_stack: Callable[[Target], Stack]
    make_driver: Callable[[Target, StackDescription], Driver]
    # collectors for one topic: (target, stack, topic, partitions, subscriptions)
    make_collectors: Callable[[Target, StackDescription, str, int, list[str]], list[Collector]]
    # how the external runtime's @ADDRESS looks for this platform
    address_example: str = "HOST:PORT"
    # the faults (compose.stack.FAULTS) its brokers take, per runtime; None: every fault on every
    # runtime streambench starts itself, none on an existing cluster
    faults: dict[str, tuple[str, ...]] | None = None
    # where it comes from: "<distribution> <version> (<entry point>)", set by the registry
    origin: str = ""

    def fault_actions(self, runtime: str) -> tuple[str, ...]:
        if self.faults is not None:
            return self.faults.get(runtime, ())
        return () if runtime == "external" else FAULTS


def parse_port(text: str) -> int:
    value = int(text)
    if not 0 < value < 65536:
        raise ValueError("must be a port number between 1 and 65535")
    return value


def parse_non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("must be 0 or more")
    return value
