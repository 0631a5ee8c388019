"""What a platform declares: its TARGET options and how to make its stack, driver and collectors."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

from loadgen.core.collector import Collector
from loadgen.core.driver import Driver
from loadgen.core.stack import FAULTS, Stack, StackDescription
from loadgen.core.target import OptionSpec, Target, parse_whole


@dataclass(frozen=True)
class OptionalClient:
    """A client library a platform needs that a plain install leaves out (for its licence, say):
    one of streambench's extras installs it. The platform imports it only when a run of it
    starts, and refuses the run before anything starts when it is missing."""

    module: str  # its top-level import name
    what: str  # how the messages name it: "the X client Y (LICENCE)"
    extra: str  # streambench's extra that installs it

    @property
    def install(self) -> str:
        return f"pip install 'streambench[{self.extra}]'"

    def installed(self) -> bool:
        """Whether it can be found, without importing it."""
        try:
            return importlib.util.find_spec(self.module) is not None
        except (ImportError, ValueError):
            return False

    def note(self) -> str:
        """For `streambench platforms`: where the client comes from, and whether it is here."""
        state = "installed" if self.installed() else f"not installed: {self.install}"
        return f"{self.what}, from the {self.extra} extra ({state})"

    def unavailable(self, platform: str, exc: ImportError) -> str:
        """The one line for a run that cannot import the client."""
        if (exc.name or "").partition(".")[0] == self.module:
            return f"{platform}: {self.what} is not installed: {self.install}"
        return (f"{platform}: {self.what} cannot be imported ({type(exc).__name__}: {exc}): "
                f"{self.install}")


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
    # the faults (loadgen.core.stack.FAULTS) its brokers take, per runtime; None: every fault on every
    # runtime streambench starts itself, none on an existing cluster
    faults: dict[str, tuple[str, ...]] | None = None
    # the runtimes that take the platform's broker settings (`broker.`, `conf.`); the others
    # refuse them in one line
    broker_settings_runtimes: tuple[str, ...] = ("local",)
    # a client library a plain install leaves out (named in `streambench platforms`)
    optional_client: OptionalClient | None = None
    # where it comes from: "<distribution> <version> (<entry point>)", set by the registry,
    # then the optional client's note
    origin: str = ""
    # what can hold a target's drain up on this platform, for the drain-stalled event
    drain_stall_hint: Callable[[Target], str] | None = None
    # what can make a target's broker drop messages never read, for the messages-lost event
    loss_hint: Callable[[Target], str | None] | None = None

    def fault_actions(self, runtime: str) -> tuple[str, ...]:
        if self.faults is not None:
            return self.faults.get(runtime, ())
        return () if runtime == "external" else FAULTS


def parse_port(text: str) -> int:
    value = parse_whole(text)
    if not 0 < value < 65536:
        raise ValueError("must be a port number between 1 and 65535")
    return value


def parse_non_negative(text: str) -> int:
    value = parse_whole(text)
    if value < 0:
        raise ValueError("must be 0 or more")
    return value
