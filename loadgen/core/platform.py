"""What a platform declares: its TARGET options and how to make its stack, driver and collectors."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

from loadgen.core.brokermetrics import BrokerMetrics
from loadgen.core.collector import Collector
from loadgen.core.driver import Driver
from loadgen.core.interventions import NETWORK_ACTIONS
from loadgen.core.stack import FAULTS, Stack, StackDescription
from loadgen.core.target import INT64_MAX, OptionSpec, Target, parse_whole
from loadgen.core.workload import Workload


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
class Prerequisite:
    """A program one of a platform's runtimes needs on this machine; `streambench doctor` looks
    for it and says which platforms can run here."""

    name: str  # as the doctor's line names it: "redis-server"
    runtimes: tuple[str, ...]  # the runtimes that cannot start without it
    find: Callable[[], str | None]  # where it is, None when it is not here
    version: Callable[[str], str | None] = lambda _path: None  # its version, from its path
    install: str = ""  # how to get it: "Debian/Ubuntu: apt-get install redis-server"


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
    # the keys of its stack description's endpoints that are client listeners (HOST:PORT) a
    # proxy can stand in front of, for network faults (--network-faults): the clients are given
    # the proxy's address instead, the collectors keep the broker's own
    proxied_endpoints: tuple[str, ...] = ()
    # the runtimes whose stack puts proxies of its own in front of its links when network faults
    # are asked for (Kafka: the brokers advertise their proxies, and their links to each other
    # are proxied too), so that a fault can name one broker and one side of it
    stack_proxies: tuple[str, ...] = ()
    # of those, the ones whose address the brokers themselves hand to clients (a lookup, a
    # metadata reply): their proxies are made before the stack starts, and the stack tells
    # clients the proxy's address (StackContext.advertised)
    advertised_endpoints: tuple[str, ...] = ()
    # the runtimes whose stacks can stand a proxy in front of those links; None: every runtime
    proxied_runtimes: tuple[str, ...] | None = None
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
    # bytes of the machine's memory a broker streambench starts takes for each message it keeps
    # (payload and overhead), None for a target that keeps a bounded number; unset: the
    # platform keeps its messages on disk (the pre-flight checks weigh those against the disk)
    memory_per_message: Callable[[Target, Workload], int | None] | None = None
    # how a TARGET bounds the memory its messages take, for the warning before a run
    memory_relief: str = ""
    # the programs its runtimes need here, for `streambench doctor`
    prerequisites: tuple[Prerequisite, ...] = ()
    # the platform a published figure means when it names this one by another name (a study's
    # "Kafka" that ran with ZooKeeper: kafka-zk is published as kafka); "": its own name only
    published_as: str = ""
    # the images its docker runtime would run for a target, for the default runtime rule (an
    # image present picks docker); none: the rule looks for no image
    docker_images: Callable[[Target], list[str]] = lambda _target: []
    # the broker's own figures that explain its behaviour under load (a queue, a flush time,
    # memory), read once per tick by a collector of their own; None: it declares none
    broker_metrics: BrokerMetrics | None = None
    # What the platform contract (tests/platforms) checks beyond what every platform does; a
    # platform claims each by declaring it. Its collectors give the lag of every partition (the
    # run's lag table), not only the total:
    lag_per_partition: bool = False
    # a keyed message goes to the partition its key picks (the workload's keyDistributor):
    keyed: bool = False
    # the setting namespaces (`conf`, `broker`, `topic`, …) whose values a run reads back from
    # a broker it started itself (run.json's settings with read_back true):
    settings_read_back: tuple[str, ...] = ()

    def fault_actions(self, runtime: str, proxied: bool = False) -> tuple[str, ...]:
        """The faults a target takes: its brokers' on this runtime, and the network faults
        when its links are proxied."""
        network = NETWORK_ACTIONS if proxied and self.proxies_links(runtime) else ()
        return self._broker_faults(runtime) + network

    def proxies_links(self, runtime: str) -> bool:
        """Whether streambench can put a target's links behind proxies on this runtime (an
        existing cluster's: behind the user's own, in front of its client listeners)."""
        return runtime in self.stack_proxies or bool(self.proxied_endpoints)

    def _broker_faults(self, runtime: str) -> tuple[str, ...]:
        if self.faults is not None:
            return self.faults.get(runtime, ())
        return () if runtime == "external" else FAULTS


def tool_version(argv: list[str], pattern: str, timeout_s: float = 20.0) -> str | None:
    """The first group of `pattern` in what a program prints for `argv` (its version), None when
    it cannot run, fails or says nothing that matches."""
    import re
    import subprocess

    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(pattern, out.stdout + out.stderr) if out.returncode == 0 else None
    return m.group(1) if m else None


def parse_port(text: str) -> int:
    value = parse_whole(text)
    if not 0 < value < 65536:
        raise ValueError("must be a port number between 1 and 65535")
    return value


def parse_non_negative(text: str) -> int:
    """A whole number from 0 to the signed 64-bit maximum."""
    value = parse_whole(text)
    if not 0 <= value <= INT64_MAX:
        raise ValueError(f"must be a whole number from 0 to {INT64_MAX:,}")
    return value
